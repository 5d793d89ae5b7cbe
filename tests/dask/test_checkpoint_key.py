"""``checkpoint_key=``: checkpoint entries are sealed on the trusted side, and an entry whose
seal fails (forged with a valid checksum, swapped for another valid entry, written without
the key, or sealed with another key) is recomputed, never used, and reported.

Each attack is made the way a worker with write access to the checkpoint location could
make it: with :class:`~distal.runtime.checkpoint.CheckpointStore` itself, so the forged
entry's header, name and checksum are all valid and only the seal can tell. Results are
compared with the local runtime's, exactly (small integer data).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import gemm, gemm_inputs, mttkrp, mttkrp_inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session"))
from elastic_helpers import trace_lines
from test_loops import _kernels as loop_kernels

import distal as dl
from distal.errors import DistalWarning, InputError
from distal.runtime import checkpoint as ck
from distal.runtime import checkpoint_tools
from distal.runtime.checkpoint_auth import DIGEST, SEAL_SUFFIX, Sealer, content_digest
from distal.runtime.elastic.options import Options

HERE = Path(__file__).resolve().parent
KEY = b"pool secret: 0123456789abcdef"
MTTKRP_ENTRIES = [
    "block-0-0",
    "block-1-0",
    "part-p0-s0-2",
    "part-p1-s0-2",
    "part-p2-s0-2",
    "part-p3-s0-2",
]


def _run(k: Any, x: Any, client: Any, loc: Path, **more: Any) -> Any:
    return k.run(x, runtime="dask", client=client, checkpoint=loc, keep_partials=True, **more)


def _store(res: Any) -> ck.CheckpointStore:
    run = Path(res.extra["checkpoint"])
    return ck.CheckpointStore(run.parent, run.name)


def test_a_forged_entry_with_a_valid_checksum_is_recomputed_and_reported(
    client: Any, tmp_path: Path
) -> None:
    k, x = mttkrp(), mttkrp_inputs()
    want = k.run(x).value  # the local runtime
    r1 = _run(k, x, client, tmp_path, checkpoint_key=KEY)
    assert np.array_equal(r1.value, want)
    store = _store(r1)
    assert sorted(store.names()) == MTTKRP_ENTRIES
    good, _ = store.load("block-0-0")
    assert good is not None
    forged = good + 1.0
    store.save("block-0-0", forged)  # a whole entry: header, name and checksum all valid
    assert np.array_equal(store.load("block-0-0")[0], forged)

    # Without the key the forgery is used: this is what the key protects against.
    plain = _run(k, x, client, tmp_path)
    assert not np.array_equal(plain.value, want)

    r2 = _run(k, x, client, tmp_path, checkpoint_key=KEY)
    assert np.array_equal(r2.value, want)
    s = r2.extra["summary"]
    assert s.unauthenticated == ["block-0-0"]
    said = "1 entry failed authentication (never used; recomputed where the run needed it)"
    assert f"{said}: block-0-0" in str(s)
    assert s.as_dict()["unauthenticated"] == ["block-0-0"]
    assert r2.tasks_executed == 1  # the block, re-reduced from its two sealed partials
    assert np.array_equal(store.load("block-0-0")[0], good)  # rewritten, and sealed again
    r3 = _run(k, x, client, tmp_path, checkpoint_key=KEY)
    assert r3.tasks_executed == 0
    assert r3.extra["summary"].unauthenticated == []
    assert np.array_equal(r3.value, want)


def test_seals_on_an_fsspec_location(client: Any) -> None:
    """Seals are written, read and withdrawn through fsspec as entries are (``memory://``:
    the fixture's workers share the driver's process)."""
    loc = "memory://distal-checkpoint-key"
    k, x = mttkrp(), mttkrp_inputs()
    want = k.run(x).value
    r1 = k.run(x, runtime="dask", client=client, checkpoint=loc, checkpoint_key=KEY)
    store = ck.CheckpointStore(loc, str(r1.extra["checkpoint"]).rsplit("/", 1)[1])
    assert store.read_seal("block-1-0") is not None
    blk, _ = store.load("block-1-0")
    assert blk is not None
    store.save("block-1-0", blk * 0.0)
    r2 = k.run(x, runtime="dask", client=client, checkpoint=loc, checkpoint_key=KEY)
    assert np.array_equal(r2.value, want)
    assert r2.extra["summary"].unauthenticated == ["block-1-0"]
    r3 = k.run(x, runtime="dask", client=client, checkpoint=loc, checkpoint_key=KEY)
    assert r3.tasks_executed == 0
    assert np.array_equal(r3.value, want)


def test_a_forged_partial_loaded_on_a_worker_is_recomputed(client: Any, tmp_path: Path) -> None:
    """The partial's seal is valid but its bytes are not what it vouches for: the worker
    that loads it (with the digest the driver authenticated) recomputes it."""
    k, x = mttkrp(), mttkrp_inputs()
    want = k.run(x).value
    store = _store(_run(k, x, client, tmp_path, checkpoint_key=KEY))
    part, _ = store.load("part-p0-s0-2")
    assert part is not None
    store.save("part-p0-s0-2", part * 2.0 + 1.0)
    store.remove("block-0-0")  # so the block is re-reduced from its partials
    r = _run(k, x, client, tmp_path, checkpoint_key=KEY)
    assert np.array_equal(r.value, want)
    assert r.extra["summary"].unauthenticated == ["part-p0-s0-2"]
    assert r.tasks_executed == 2  # the partial and the block
    again = _run(k, x, client, tmp_path, checkpoint_key=KEY)
    assert again.tasks_executed == 0
    assert again.extra["summary"].unauthenticated == []


def test_a_swapped_entry_is_refused(client: Any, tmp_path: Path) -> None:
    """Another unit's valid entry (re-headed under this name, so it decodes) with that
    unit's seal; and the same-named entry and seal of another run (other inputs)."""
    k, x = mttkrp(), mttkrp_inputs()
    want = k.run(x).value
    store = _store(_run(k, x, client, tmp_path, checkpoint_key=KEY))
    other, _ = store.load("part-p1-s0-2")
    assert other is not None
    store.save("part-p0-s0-2", other)
    Path(store.seal_path("part-p0-s0-2")).write_bytes(
        Path(store.seal_path("part-p1-s0-2")).read_bytes()
    )
    y = mttkrp_inputs(seed=7)
    elsewhere = _store(_run(k, y, client, tmp_path, checkpoint_key=KEY))
    assert elsewhere.run != store.run
    for suffix in (ck.SUFFIX, SEAL_SUFFIX):
        shutil.copy(f"{elsewhere.root}/block-1-0{suffix}", f"{store.root}/block-1-0{suffix}")
    store.remove("block-0-0")
    r = _run(k, x, client, tmp_path, checkpoint_key=KEY)
    assert np.array_equal(r.value, want)
    assert r.extra["summary"].unauthenticated == ["block-1-0", "part-p0-s0-2"]


def test_a_forged_report_in_the_event_log_gets_no_seal(client: Any, tmp_path: Path) -> None:
    """A worker of the pool overwrites a partial another worker wrote and reports the
    forgery's digest under that worker's name in the run's event log. The driver hears two
    digests for one entry and seals neither: the next run refuses the entry."""
    k, x = mttkrp(), mttkrp_inputs()
    want = k.run(x).value
    victim = "part-p0-s0-2"
    forged_by: list[str] = []
    earlier = set(client.get_events())  # topics of runs before this one

    def forge() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for topic, evs in client.get_events().items():
                if not str(topic).startswith("distal-") or topic in earlier:
                    continue
                for _, m in evs:
                    if m.get("written") and m.get("entry") == victim:
                        (run,) = (p for p in tmp_path.iterdir() if p.is_dir())
                        store = ck.CheckpointStore(tmp_path, run.name)
                        honest, _ = store.load(victim)
                        assert honest is not None
                        fake = honest + 5.0
                        store.save(victim, fake)
                        lie = dict(m, t=time.time(), digest=content_digest(fake))
                        lie.pop("recv", None)
                        client.run(
                            lambda dask_worker, topic=topic, lie=lie: dask_worker.log_event(
                                topic, lie
                            ),
                            workers=[m["worker"]],
                        )
                        forged_by.append(m["worker"])
                        return
            time.sleep(0.01)

    spy = threading.Thread(target=forge)
    spy.start()
    r1 = _run(k, x, client, tmp_path, checkpoint_key=KEY, faults={"delay": 0.3})
    spy.join()
    assert forged_by, "the forgery was not made during the run"
    assert np.array_equal(r1.value, want)  # the run itself used the values in memory
    store = _store(r1)
    assert store.read_seal(victim) is None
    assert store.read_seal("part-p1-s0-2") is not None
    store.remove("block-0-0")
    r2 = _run(k, x, client, tmp_path, checkpoint_key=KEY)
    assert np.array_equal(r2.value, want)
    assert r2.extra["summary"].unauthenticated == [victim]


def test_checkpoint_tools_count_and_clean_half_written_seals(client: Any, tmp_path: Path) -> None:
    """A driver killed while writing a seal leaves a temporary, which ``distal checkpoint``
    counts and ``--clean`` removes like an entry's; seals are not counted as entries."""
    k, x = mttkrp(), mttkrp_inputs()
    store = _store(_run(k, x, client, tmp_path, checkpoint_key=KEY))
    Path(f"{store.seal_path('block-0-0')}.tmp-0123").write_bytes(b"{")
    (info,) = checkpoint_tools.runs(tmp_path)
    assert info.entries == len(MTTKRP_ENTRIES)
    assert info.temporaries == 1
    gone = checkpoint_tools.remove_temporaries(tmp_path, info.run, older_than=-1)
    assert gone == [f"block-0-0{SEAL_SUFFIX}.tmp-0123"]
    assert store.read_seal("block-0-0") is not None


def test_entries_written_without_the_key_are_refused_by_a_keyed_run(
    client: Any, tmp_path: Path
) -> None:
    k, x = gemm(), gemm_inputs()
    want = k.run(x).value
    r1 = k.run(x, runtime="dask", client=client, checkpoint=tmp_path)
    assert r1.tasks_reused == 0
    r2 = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, checkpoint_key=KEY)
    assert np.array_equal(r2.value, want)
    assert r2.tasks_reused == 0
    assert len(r2.extra["summary"].unauthenticated) == r1.tasks_executed  # every block
    r3 = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, checkpoint_key=KEY)
    assert r3.tasks_executed == 0
    assert np.array_equal(r3.value, want)


def test_a_wrong_key_refuses_every_entry(client: Any, tmp_path: Path) -> None:
    k, x = mttkrp(), mttkrp_inputs()
    want = k.run(x).value
    _run(k, x, client, tmp_path, checkpoint_key=KEY)
    r = _run(k, x, client, tmp_path, checkpoint_key=b"another key")
    assert np.array_equal(r.value, want)
    assert r.tasks_reused == 0
    assert r.extra["summary"].unauthenticated == MTTKRP_ENTRIES
    assert "6 entries failed authentication" in str(r.extra["summary"])


def test_the_key_is_used_with_verify_check(client: Any, tmp_path: Path) -> None:
    """Entries written by the checks are sealed too, and a forged one is refused."""
    k, x = mttkrp(), mttkrp_inputs()
    want = k.run(x).value
    r1 = _run(k, x, client, tmp_path, checkpoint_key=KEY, verify="check")
    store = _store(r1)
    assert all(store.read_seal(n) is not None for n in MTTKRP_ENTRIES)
    blk, _ = store.load("block-1-0")
    assert blk is not None
    store.save("block-1-0", blk - 3.0)
    r2 = _run(k, x, client, tmp_path, checkpoint_key=KEY, verify="check")
    assert np.array_equal(r2.value, want)
    assert r2.extra["summary"].unauthenticated == ["block-1-0"]
    # a forged partial, loaded (with its sealed digest) by its unit's task and checked
    part, _ = store.load("part-p2-s0-2")
    assert part is not None
    store.save("part-p2-s0-2", part + 1.0)
    store.remove("block-1-0")
    r3 = _run(k, x, client, tmp_path, checkpoint_key=KEY, verify="check")
    assert np.array_equal(r3.value, want)
    assert r3.extra["summary"].unauthenticated == ["part-p2-s0-2"]
    assert r3.extra["summary"].units_rejected == 0  # a forgery is not a worker's lie
    assert np.array_equal(store.load("part-p2-s0-2")[0], part)  # rewritten by its check
    store.remove("block-1-0")
    r4 = _run(k, x, client, tmp_path, checkpoint_key=KEY, verify="check")
    assert np.array_equal(r4.value, want)
    assert r4.extra["summary"].unauthenticated == []  # and sealed again


@pytest.mark.parametrize("key", ["a str secret", b"", 1234, bytearray(b"k")])
def test_bad_keys_are_input_errors_naming_the_option(client: Any, tmp_path: Path, key: Any) -> None:
    k, x = gemm(), gemm_inputs()
    with pytest.raises(InputError, match="checkpoint_key"):
        k.run(x, runtime="dask", client=client, checkpoint=tmp_path, checkpoint_key=key)
    with pytest.raises(InputError, match="checkpoint_key"):
        dl.Session(checkpoint=str(tmp_path), checkpoint_key=key)


def test_a_key_without_a_checkpoint_is_an_input_error(client: Any, tmp_path: Path) -> None:
    k, x = gemm(), gemm_inputs()
    with pytest.raises(InputError, match=r"checkpoint_key.*no checkpoint="):
        k.run(x, runtime="dask", client=client, checkpoint_key=KEY)
    with pytest.raises(InputError, match=r"checkpoint_key.*no checkpoint="):
        dl.Session(runtime="dask", client=client, checkpoint_key=KEY)


def test_the_key_never_reaches_the_workers_or_the_location(client: Any, tmp_path: Path) -> None:
    """The sealer refuses to be pickled (a task carrying it would hand the key over), the
    options' repr leaves the key out, and nothing written to the location holds it."""
    with pytest.raises(TypeError, match="never sent"):
        pickle.dumps(Sealer(KEY))
    assert "pool secret" not in repr(Sealer(KEY))
    assert "pool secret" not in repr(Options.parse({"checkpoint": "x", "checkpoint_key": KEY}))
    k, x = mttkrp(), mttkrp_inputs()
    _run(k, x, client, tmp_path, checkpoint_key=KEY, verify="check")
    sess = _session(tmp_path / "loop", client)
    _loop(sess, 1)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 10
    assert not any(KEY in p.read_bytes() for p in files)


def test_a_str_key_is_not_echoed_in_the_error(client: Any, tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        dl.Session(checkpoint=str(tmp_path), checkpoint_key="hunter2")
    assert "hunter2" not in str(info.value)


def test_a_keyed_run_killed_midway_resumes_from_what_the_driver_sealed(tmp_path: Path) -> None:
    """The driver seals entries as it hears of them, so a killed keyed run resumes: every
    entry sealed before the kill is loaded, never recomputed; entries written but not yet
    sealed are refused (reported) and recomputed."""
    ck_dir, t1, t2 = tmp_path / "ck", tmp_path / "trace1", tmp_path / "trace2"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    script = str(HERE / "elastic_driver.py")
    proc = subprocess.Popen(
        [sys.executable, script, str(ck_dir), str(t1), "0.25", "driver key"],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while len(list(ck_dir.rglob(f"*{SEAL_SUFFIX}"))) < 6:
            assert time.monotonic() < deadline, "the first run sealed nothing in 90 s"
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    sealed = {p.name.removesuffix(SEAL_SUFFIX) for p in ck_dir.rglob(f"*{SEAL_SUFFIX}")}
    written = {p.name.removesuffix(ck.SUFFIX) for p in ck_dir.rglob(f"*{ck.SUFFIX}")}
    assert sealed <= written
    done = subprocess.run(
        [sys.executable, script, str(ck_dir), str(t2), "0", "driver key"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exact True" in done.stdout
    computed = {n for e, n, st in trace_lines(t2) if e == "done" and st == "computed"}
    assert not sealed & computed  # what was sealed is loaded, never redone
    executed, reused = (int(v) for v in done.stdout.split("tasks")[1].split()[:2])
    assert reused >= len(sealed)
    assert executed + reused == 16
    refused = done.stdout.split("unauthenticated")[1].split()
    assert set(refused) == written - sealed


# -- session loops ----------------------------------------------------------------------------


def _kernels(n: int) -> tuple[Any, Any]:
    """The session loop's kernels of ``tests/session/test_loops.py``, with a scale of 0.5
    so the data stays exact."""
    return loop_kernels(n, 0.5)


def _session(loc: Path | None, client: Any, key: bytes | None = KEY, n: int = 8) -> Any:
    sess = dl.Session(
        runtime="local" if client is None else "dask",
        **({} if client is None else {"client": client}),
        checkpoint=None if loc is None else str(loc),
        checkpoint_key=key if loc is not None else None,
    )
    rng = np.random.default_rng(3)
    sess.put("A", rng.integers(-2, 3, (n, n)).astype(np.float64))
    sess.put("X", np.eye(n))
    return sess


def _loop(sess: Any, n: int) -> list[int]:
    ks, ran = _kernels(8), []
    for it in sess.iterations(n, keep=["X"], name="fix"):
        for k in ks:
            sess.run(k)
        ran.append(it)
    return ran


def _iteration(loc: Path, it: int) -> ck.CheckpointStore:
    return ck.CheckpointStore(loc, f"sessions/fix/{it}")


def _reference(client: Any, n: int) -> np.ndarray:
    ref = _session(None, client)
    _loop(ref, n)
    return np.asarray(ref.get("X"))


@pytest.mark.parametrize("runtime", ["local", "dask"])
def test_a_keyed_loop_refuses_a_forged_iteration_and_resumes_from_the_older_one(
    client: Any, tmp_path: Path, runtime: str
) -> None:
    client = client if runtime == "dask" else None
    sess = _session(tmp_path, client)
    assert _loop(sess, 4) == [0, 1, 2, 3]
    it3 = _iteration(tmp_path, 3)
    man = it3.read_manifest()
    assert man is not None
    assert man["hmac_sha256"]
    forged = np.full((4, 4), 7.0)
    digest = it3.save("X.1", forged)  # valid checksum ...
    entry = man["values"]["X"]["entries"][1]
    assert entry["entry"] == "X.1"
    entry["xxh3_128"], entry[DIGEST] = digest, content_digest(forged)  # ... and digests
    it3.write_manifest(man)
    # Without the key the forgery is restored: this is what the key protects against.
    fooled = _session(tmp_path, client, key=None)
    assert _loop(fooled, 4) == []
    assert fooled.resumed_from == 3
    assert np.array_equal(np.asarray(fooled.get("X"))[:4, 4:], forged)
    again = _session(tmp_path, client)
    with pytest.warns(DistalWarning, match=r"\[3\] are damaged.*authentication.*after iteration 2"):
        assert _loop(again, 4) == [3]
    assert again.resumed_from == 2
    assert again.discarded == [("fix", 3)]
    assert np.array_equal(again.get("X"), _reference(client, 4))


def test_a_keyed_loop_refuses_an_entry_changed_behind_its_manifest(
    client: Any, tmp_path: Path
) -> None:
    """The manifest is untouched and sealed; the entry has a valid checksum but is not the
    block whose digest the manifest records."""
    sess = _session(tmp_path, client)
    _loop(sess, 3)
    _iteration(tmp_path, 2).save("X.0", np.zeros((4, 4)))
    again = _session(tmp_path, client)
    with pytest.warns(DistalWarning, match=r"\[2\] are damaged"):
        assert _loop(again, 3) == [2]
    assert again.resumed_from == 1
    assert np.array_equal(again.get("X"), _reference(client, 3))


def test_a_keyed_loop_refuses_a_copied_iteration_and_unkeyed_ones(
    client: Any, tmp_path: Path
) -> None:
    sess = _session(tmp_path, client)
    _loop(sess, 3)
    # iteration 1's whole (sealed) manifest and entries, relabelled as iteration 2
    old = _iteration(tmp_path, 1)
    new = _iteration(tmp_path, 2)
    man = old.read_manifest()
    assert man is not None
    for name in old.names():
        shutil.copy(old.path(name), new.path(name))
    man["iteration"] = 2
    Path(new.root, ck.MANIFEST).write_text(json.dumps(man))
    again = _session(tmp_path, client)
    with pytest.warns(DistalWarning, match=r"\[2\] are damaged.*after iteration 1"):
        assert _loop(again, 3) == [2]

    # iterations saved without the key: none is used, the loop starts again from 0
    plain = tmp_path / "plain"
    _loop(_session(plain, client, key=None), 2)
    keyed = _session(plain, client)
    with pytest.warns(DistalWarning, match=r"\[1, 0\] are damaged.*from iteration 0"):
        assert _loop(keyed, 2) == [0, 1]
    assert keyed.resumed_from is None
    assert np.array_equal(keyed.get("X"), _reference(client, 2))
    # and what the keyed loop saved is used by the next keyed session
    after = _session(plain, client)
    assert _loop(after, 2) == []
    assert after.resumed_from == 1


def test_a_forged_report_does_not_end_the_wait_for_an_honest_one() -> None:
    """The driver waits for the entries each worker says it wrote, by name: a forged
    report logged in a worker's name must not stand in for one of its honest reports still
    on the way (a count would be met, and the honest entry left unsealed)."""
    from distal.runtime.elastic.checkpointing import drain_checkpoint
    from distal.runtime.elastic.summary import Events

    class Pool:  # the two calls drain_checkpoint makes of a Dask client
        def __init__(self) -> None:
            self.topics: dict[str, Any] = {}

        def subscribe_topic(self, topic: str, handler: Any) -> None:
            self.topics[topic] = handler

        def get_events(self, topic: str) -> list:
            return []

        def run(self, fn: Any, *args: Any, on_error: str) -> dict:
            return {"w1": {"part-p0-s0-2": 1, "block-1-0": 1}}

    pool = Pool()
    events = Events(pool, "t")

    def log(entry: str, t: float) -> None:
        m = {"kind": "done", "name": entry, "worker": "w1", "t": t}
        pool.topics["t"]((t, {**m, "written": True, "entry": entry}))

    log("part-p0-s0-2", 1.0)
    log("part-p0-s0-2", 2.0)  # the forgery, in w1's name
    late = threading.Timer(0.3, log, ("block-1-0", 3.0))
    late.start()
    drain_checkpoint(pool, "t", "/nowhere", events, patience=20.0)
    late.join()
    assert events.written()[("w1", "block-1-0")] == 1
