"""A checkpointed loop works from the core install, where ``xxhash`` (the ``dask`` extra) is
missing: checksums fall back to BLAKE2b-128, entries record which hash they carry, and
checkpoints written in one environment are read correctly in the other.

Each run is a subprocess; "without xxhash" means ``sys.modules["xxhash"] = None`` before
anything imports it, so ``import xxhash`` fails as in an environment that lacks it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _problems import spd

from distal.runtime import checkpoint_hash

HERE = Path(__file__).resolve().parent
N, SEED, TOL = 40, 3, 1e-10
SHIM = 'import sys; sys.modules["xxhash"] = None\n'
CG = f"""
import json, sys, warnings
sys.path.insert(0, {str(HERE)!r})
from _problems import spd
import distal as dl
from distal.runtime import checkpoint_hash
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    A, b = spd(n={N}, seed={SEED})
    sess = dl.Session(checkpoint=sys.argv[1], progress=False)
    x, its = dl.apps.cg(A, b, machine=2, tol={TOL}, session=sess)
print(json.dumps({{
    "algorithm": checkpoint_hash.ALGORITHM,
    "xxhash": "xxhash" in sys.modules and sys.modules["xxhash"] is not None,
    "resumed_from": sess.resumed_from,
    "iterations": its,
    "x": x.tolist(),
    "warnings": [str(w.message) for w in caught],
}}))
"""
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", DISTAL_PROGRESS="0")


def cg(location: Path, xxhash: bool) -> dict:
    """Checkpointed CG in a fresh interpreter, with or without an importable xxhash."""
    code = CG if xxhash else SHIM + CG
    proc = subprocess.run(
        [sys.executable, "-c", code, str(location)],
        capture_output=True,
        text=True,
        timeout=240,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def entry_headers(location: Path) -> list[dict]:
    """The JSON headers of every checkpoint entry under ``location``."""
    heads = []
    for path in sorted(location.rglob("*.ck")):
        raw = path.read_bytes()
        assert raw.startswith(b"DISTALCK\x02")
        heads.append(json.loads(raw[len(b"DISTALCK\x02") : raw.index(b"\n")]))
    return heads


def assert_solves(out: dict) -> None:
    """``x`` solves the system to CG's tolerance: the residual, and the error against
    numpy's solution within the condition number times the relative residual."""
    A, b = spd(n=N, seed=SEED)
    x, exact = np.array(out["x"]), np.linalg.solve(A, b)
    assert np.linalg.norm(A @ x - b) <= TOL * np.linalg.norm(b)
    assert np.linalg.norm(x - exact) <= np.linalg.cond(A) * TOL * np.linalg.norm(exact)


def test_checkpointed_cg_runs_without_xxhash(tmp_path: Path) -> None:
    """The core install: CG with a checkpoint runs, saves BLAKE2b-checked entries, and a
    second run on the same location resumes from them and ends with the same solution."""
    loc = tmp_path / "ck"
    first = cg(loc, xxhash=False)
    assert not first["xxhash"]
    assert first["algorithm"] == checkpoint_hash.BLAKE2B
    assert first["resumed_from"] is None
    assert first["iterations"] > 1
    assert_solves(first)
    heads = entry_headers(loc)
    assert heads
    assert all("blake2b_128" in h and "xxh3_128" not in h for h in heads)
    again = cg(loc, xxhash=False)
    assert again["resumed_from"] is not None
    assert again["x"] == first["x"]
    assert again["warnings"] == []


def test_blake2b_entries_verify_where_xxhash_is_installed(tmp_path: Path) -> None:
    """Written without xxhash, resumed with it: every entry verifies and is used."""
    pytest.importorskip("xxhash", reason="needs xxhash (dask extra) for the other side")
    loc = tmp_path / "ck"
    first = cg(loc, xxhash=False)
    again = cg(loc, xxhash=True)
    assert again["xxhash"]
    assert again["algorithm"] == checkpoint_hash.XXH3
    assert again["resumed_from"] is not None
    assert again["x"] == first["x"]
    assert again["warnings"] == []


def test_xxh3_entries_are_not_used_unverified_without_xxhash(tmp_path: Path) -> None:
    """Written with xxhash, resumed without it: the entries cannot be checked, so they are
    not used (a warning names the package), and the loop computes the solution afresh."""
    pytest.importorskip("xxhash", reason="needs xxhash (dask extra) to write the entries")
    loc = tmp_path / "ck"
    first = cg(loc, xxhash=True)
    assert all("xxh3_128" in h for h in entry_headers(loc))
    again = cg(loc, xxhash=False)
    assert again["resumed_from"] is None
    assert any("xxhash" in w and "cannot be verified" in w for w in again["warnings"])
    assert again["iterations"] == first["iterations"]
    np.testing.assert_allclose(again["x"], first["x"], rtol=1e-12)
    assert_solves(again)


def test_checksums_against_hashlib_and_xxhash() -> None:
    """Digests are the libraries' own, tagged with the algorithm where it is not XXH3."""
    data = np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    want = hashlib.blake2b(data, digest_size=16).hexdigest()
    assert checkpoint_hash.checksum(data, checkpoint_hash.BLAKE2B) == f"blake2b_128:{want}"
    assert checkpoint_hash.verify(data, f"blake2b_128:{want}") is True
    assert checkpoint_hash.verify(data[:-1], f"blake2b_128:{want}") is False
    assert checkpoint_hash.untag(f"blake2b_128:{want}") == ("blake2b_128", want)
    xxhash = pytest.importorskip("xxhash", reason="needs xxhash (dask extra)")
    want = xxhash.xxh3_128(data).hexdigest()
    assert checkpoint_hash.checksum(data, checkpoint_hash.XXH3) == want
    assert checkpoint_hash.untag(want) == ("xxh3_128", want)
    assert checkpoint_hash.verify(data, want) is True
