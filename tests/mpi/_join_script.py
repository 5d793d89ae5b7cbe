"""A rank that never comes to its first run: ``mpiexec -n 4 python _join_script.py MODE RANK PATH
[--mpi4py]``, driven by ``test_mpi_join.py``.

Like ``_user_script.py`` it runs under a bare ``mpiexec`` with nothing installed first, and
without ``--mpi4py`` it imports neither mpi4py nor ``distal.runtime.mpi``, so MPI starts at
the first ``kernel.run(..., runtime="mpi")`` (with it, MPI has started before distal is
used). Every rank but ``RANK`` runs one kernel of ``PATH`` (``dense``: SUMMA; ``sparse``:
an SpMV; ``session``: SUMMA in a ``dl.Session``) twice; rank ``RANK``, before its
first run:

* ``raise``: raises ``ValueError`` (its traceback is all it prints);
* ``sleep``: sleeps 120 s, far past any ``DISTAL_MPI_JOIN`` the tests set;
* ``late``: sleeps 2 s, then runs like the others;
* ``catch``: raises like ``raise``, while every other rank catches the ``JoinTimeout``,
  prints it as JSON, tries another run (which must raise it again at once) and ends its
  script normally;
* ``ok``: nothing; every rank prints its two runs' times as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent)]
if "--mpi4py" in sys.argv:
    from mpi4py import MPI  # noqa: F401  (MPI starts here, before distal is used)

import distal as dl  # noqa: E402

RANK = int(os.environ.get("PMI_RANK", "0"))  # MPI may not have started yet


def dense() -> Callable[[], None]:
    from _mpi_cases import gemm

    kernel, inputs, expected = gemm((2, 2), 32, "summa")

    def once() -> None:
        assert np.allclose(kernel.run(inputs, runtime="mpi").value, expected)

    return once


def sparse() -> Callable[[], None]:
    import scipy.sparse as sp

    n = 40
    M = dl.Machine(4)
    i, j, io, ii = dl.index_vars("i j io ii")
    B = dl.Tensor("B", (n, n), format="csr", dist="xy -> x", machine=M)
    c = dl.Tensor("c", (n,), dist="x -> x", machine=M)
    a = dl.Tensor("a", (n,), dist="x -> x", machine=M)
    a[i] = B[i, j] * c[j]
    kernel = dl.compile(dl.schedule(a).distribute([i], [io], [ii], M).communicate([a, B, c], io))
    bv = sp.random(n, n, density=0.2, format="csr", random_state=np.random.default_rng(1))
    cv = np.arange(n, dtype=np.float64)

    def once() -> None:
        assert np.allclose(kernel.run({"B": bv, "c": cv}, runtime="mpi").value, bv @ cv)

    return once


def session() -> Callable[[], None]:
    from _mpi_cases import gemm

    kernel, inputs, expected = gemm((2, 2), 32, "summa")

    def once() -> None:
        sess = dl.Session("mpi")
        for name, value in inputs.items():
            sess.put(name, value)
        sess.run(kernel)
        assert np.allclose(sess.get("A"), expected)

    return once


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main(mode: str, bad: int, path: str) -> None:
    once = {"dense": dense, "sparse": sparse, "session": session}[path]()
    if RANK == bad:
        if mode in ("raise", "catch"):
            raise ValueError(f"rank {RANK} fails before its first run")
        if mode in ("sleep", "late"):
            time.sleep(120.0 if mode == "sleep" else 2.0)
    if mode == "catch":
        from distal.runtime.mpi.channel import JoinTimeout

        for attempt in (1, 2):
            t = time.monotonic()
            try:
                once()
            except JoinTimeout as e:
                say(rank=RANK, attempt=attempt, seconds=time.monotonic() - t, error=str(e))
            else:
                raise AssertionError("ran without every rank")
        return
    t0 = time.perf_counter()
    once()
    t1 = time.perf_counter()
    once()
    say(rank=RANK, mode=mode, first=t1 - t0, second=time.perf_counter() - t1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
