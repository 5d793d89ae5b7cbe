"""``test_limits.py``'s kernels, and its MPI job: a GEMM of 10^6 x 10^6 matrices, whose
plan holds 1.25e12 elements per processor, run on block sources (nothing is made until a
processor asks for a block). Under ``mpiexec -n 2`` every rank prints one JSON line: the
error it ended with, the seconds it took and how many blocks it made."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import distal as dl


def gemm(n: int, machine: dl.Machine) -> dl.Kernel:
    i, j, k = dl.index_vars("i j k")
    A, B, C = (dl.Tensor(x, (n, n), dist="xy -> x", machine=machine) for x in "ABC")
    A[i, j] = B[i, k] * C[k, j]
    io, ii = dl.index_vars("io ii")
    return dl.compile(dl.schedule(A).distribute([i], [io], [ii], machine))


def sources(n: int, made: list[int]) -> dict[str, object]:
    def block(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        made.append(1)
        return i + j

    src = dl.from_function((n, n), block)
    return {"B": src, "C": src}


if __name__ == "__main__":
    made: list[int] = []
    kernel = gemm(10**6, dl.Machine(2))
    t0 = time.monotonic()
    try:
        kernel.run(sources(10**6, made), runtime="mpi")
        error = None
    except Exception as e:
        error = type(e).__name__
    from mpi4py import MPI

    out = {"rank": MPI.COMM_WORLD.Get_rank(), "error": error, "made": len(made)}
    out["seconds"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
    sys.exit(0)
