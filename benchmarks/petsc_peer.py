"""PETSc's MatMult and KSPCG on a matrix file, timed under the system Python; prints JSON.

    /usr/bin/python3 benchmarks/petsc_peer.py spmv M.npz [--repeat 5] [--out y.npy]
    /usr/bin/mpiexec -n 2 /usr/bin/python3 benchmarks/petsc_peer.py cg M.npz --iters 50

Debian's petsc4py (``benchmarks/setup_petsc.sh``) exists for ``/usr/bin/python3`` only, so
this runs there as a subprocess of ``benchmarks/sparse_peers.py`` and needs only numpy and
scipy (Debian's): it never imports distal. ``M.npz`` is ``scipy.sparse.save_npz`` of a CSR
matrix, with ``x`` (the vector to multiply, or CG's right-hand side) saved beside it as
``M.x.npy``. Each rank reads the file and hands PETSc its own rows (PETSc's ownership
ranges), as an AIJ matrix (``MATSEQAIJ`` on one rank, ``MATMPIAIJ`` on more).

* ``spmv``: ``MatMult`` ``y = M x``; one warm-up, then ``--repeat`` timed calls, each
  between barriers; ``--out`` writes ``y`` (gathered on rank 0) for the caller to check.
* ``cg``: ``KSPCG`` with ``-pc_type none`` from ``x0 = 0``, tolerances 0 so that exactly
  ``--iters`` iterations run; the best of ``--repeat`` solves, over the iterations, and the
  median time of one iteration (a monitor marks the end of each) over all solves.

Rank 0 prints one JSON object: the times in seconds, the ranks, PETSc's version and index
size, and for CG the iterations run and the final residual norm.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc


def load(path: str) -> tuple[sp.csr_matrix, np.ndarray]:
    m = sp.load_npz(path).tocsr()
    x = np.load(path[: -len(".npz")] + ".x.npy")
    return m, x


def distribute(m: sp.csr_matrix, x: np.ndarray) -> tuple[PETSc.Mat, PETSc.Vec]:
    """PETSc's AIJ matrix of ``m`` (each rank its own rows) and the vector ``x``."""
    comm = PETSc.COMM_WORLD
    it = PETSc.IntType
    a = PETSc.Mat().create(comm=comm)
    a.setSizes(((None, m.shape[0]), (None, m.shape[1])))
    a.setType(PETSc.Mat.Type.AIJ)
    a.setUp()
    lo, hi = a.getOwnershipRange()
    local = m[lo:hi]
    a.setPreallocationCSR((local.indptr.astype(it), local.indices.astype(it)))
    a.setValuesCSR(
        local.indptr.astype(it), local.indices.astype(it), local.data.astype(PETSc.ScalarType)
    )
    a.assemble()
    v = a.createVecRight()
    vlo, vhi = v.getOwnershipRange()
    v.setArray(x[vlo:vhi])
    return a, v


def _timed(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        PETSc.COMM_WORLD.barrier()
        t = time.perf_counter()
        fn()
        PETSc.COMM_WORLD.barrier()
        times.append(time.perf_counter() - t)
    return times


def gather(v: PETSc.Vec) -> np.ndarray | None:
    """``v`` whole on rank 0 (None elsewhere)."""
    scatter, whole = PETSc.Scatter.toZero(v)
    scatter.scatter(v, whole, PETSc.InsertMode.INSERT, PETSc.ScatterMode.FORWARD)
    out = whole.getArray().copy() if PETSc.COMM_WORLD.rank == 0 else None
    scatter.destroy()
    whole.destroy()
    return out


def spmv(a: PETSc.Mat, x: PETSc.Vec, repeat: int, out: str | None) -> dict:
    y = a.createVecLeft()
    a.mult(x, y)
    times = _timed(lambda: a.mult(x, y), repeat)
    whole = gather(y)
    if out and whole is not None:
        np.save(out, whole)
    return {"times": times}


def cg(a: PETSc.Mat, b: PETSc.Vec, iters: int, repeat: int) -> dict:
    ksp = PETSc.KSP().create(comm=PETSc.COMM_WORLD)
    ksp.setOperators(a)
    ksp.setType(PETSc.KSP.Type.CG)
    ksp.getPC().setType(PETSc.PC.Type.NONE)
    ksp.setTolerances(rtol=0.0, atol=0.0, divtol=1e300, max_it=iters)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setFromOptions()
    x = a.createVecRight()
    ksp.solve(b, x)  # warm-up (set-up of the KSP)
    marks: list[float] = []  # when each iteration ended (the monitor runs once per iteration)
    ksp.setMonitor(lambda _ksp, _its, _rnorm: marks.append(time.perf_counter()))
    steps: list[float] = []

    def solve() -> None:
        marks.clear()
        x.set(0.0)
        ksp.solve(b, x)
        steps.extend(np.diff(marks))

    times = _timed(solve, repeat)
    return {
        "times": times,
        # the iterations' own times, every solve's (their median is robust to the
        # solve's set-up and to a slow moment of a shared machine)
        "iteration_median": float(np.median(steps)) if steps else None,
        "iterations": ksp.getIterationNumber(),
        "residual": ksp.getResidualNorm(),
        "reason": int(ksp.getConvergedReason()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("spmv", "cg"))
    p.add_argument("matrix", help="scipy .npz of a CSR matrix, with MATRIX.x.npy beside it")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--iters", type=int, default=50, help="CG iterations")
    p.add_argument("--out", help="spmv: write y (.npy) here")
    args = p.parse_args()
    m, xv = load(args.matrix)
    a, x = distribute(m, xv)
    del m
    if args.what == "spmv":
        got = spmv(a, x, args.repeat, args.out)
    else:
        got = cg(a, x, args.iters, args.repeat)
    got.update(
        ranks=PETSc.COMM_WORLD.size,
        type=a.getType(),
        petsc=".".join(map(str, PETSc.Sys.getVersion())),
        index_bytes=int(np.dtype(PETSc.IntType).itemsize),
    )
    if PETSc.COMM_WORLD.rank == 0:
        print("RESULT " + json.dumps(got), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
