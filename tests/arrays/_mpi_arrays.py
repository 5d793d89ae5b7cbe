"""Runs on every rank under ``mpiexec -n P``; driven by ``test_arrays_runtimes.py``.

The same arrays program as on the local runtime: an element-wise chain with broadcasting,
maps (functions, comparisons, division), matrix products and sums, and conjugate gradients
on a sparse Laplacian. Every rank prints one JSON line with what it read (``float``
returns on every rank) and its largest error against numpy / scipy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_arrays import cg, laplacian, lazy_cg, rand
from test_arrays_fused import fused_set, spmv_epilogue

import distal as dl


def donated(sess: dl.Session) -> tuple[bool, float]:
    """A rebound vector's update written over its rank's block (donated), three times;
    whether every update took the block it replaced, and the error against numpy."""
    from distal.kernels import fused

    n = 4 * (fused.MIN_SIZE + 100)  # on 2 or 4 ranks every block is one the loop takes
    xs, ps = rand(n, seed=30), rand(n, seed=31)
    x, p = sess.asarray(xs) * 1.0, sess.asarray(ps)
    want = xs * 1.0
    same = True
    for _ in range(3):
        sess.flush()
        before = sess.values[x.program.name_of(x.node)].data.array
        x = x + 0.5 * p
        sess.flush()
        after = sess.values[x.program.name_of(x.node)].data.array
        same = same and after is before
        want = want + 0.5 * ps
    return same, float(np.abs(x.get() - want).max())


def leaf_dot(sess: dl.Session) -> tuple[int, float]:
    """``p @ q``, ``q = A @ p``, with every rank's block large enough for the compiled dot: how many
    times the product's leaf computed the rank's part of the dot product (CG's ``p . q``),
    and the value (the same bits as the local runtime's separate pass, checked by the
    test)."""
    import scipy.sparse as sp

    from distal.kernels import fused

    n = 4 * (fused.MIN_SIZE + 100)
    a = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    A, p = sess.asarray(a, "xy -> x"), sess.asarray(rand(n, seed=32))  # cut by rows
    before = sess.leaf_dots
    q = A @ p  # (held, as CG holds it: the product runs with p @ q as its epilogue)
    got = float(p @ q)
    del q
    return sess.leaf_dots - before, got


def lazy(sess: dl.Session) -> float:
    """Three CG iterations recorded with no read between them, every rank's block one the
    generated loop takes (a block donated where nothing reads it later): the error
    against numpy's same arithmetic."""
    import scipy.sparse as sp

    from distal.kernels import fused

    n = 4 * fused.MIN_SIZE
    a = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    b = rand(n, seed=33)
    got = lazy_cg(sess.asarray(a), sess.asarray(b), 3).get()
    return float(np.abs(got - lazy_cg(a, b, 3)).max())


def main() -> None:
    sess = dl.Session("mpi")
    a, v = rand(9, 5, seed=1), rand(5, seed=2)
    x, y = sess.asarray(a), sess.asarray(v)
    errs = []
    chain = ((x + y) * 2.0 - x * y).get()
    errs.append(np.abs(chain - ((a + v) * 2.0 - a * v)).max())
    errs.append(np.abs((x @ y).get() - a @ v).max())
    errs.append(np.abs((x.T @ x).get() - a.T @ a).max())
    m = (dl.sqrt(x * x + 1.0) / (dl.abs(y) + 1.0)).get()  # a map, y replicated
    errs.append(np.abs(m - np.sqrt(a * a + 1.0) / (np.abs(v) + 1.0)).max())
    errs.append(np.abs(dl.where(x > 0, x, -x).sum(0).get() - np.abs(a).sum(0)).max())
    s = float((x + 1.0).sum())
    errs.append(abs(s - (a + 1.0).sum()))
    A = laplacian(8)
    b = rand(A.shape[0], seed=3)
    sol, its = cg(sess, A, b)
    from scipy.sparse.linalg import spsolve

    errs.append(np.abs(sol.get() - spsolve(A.tocsc(), b)).max())
    fused = [fused_set(sess, n) for n in (11, 3)]  # 3: ranks without a block at 4 ranks
    spmv = [spmv_epilogue(sess, n) for n in (5, 2)]  # 2: a 4-row matrix
    out = {"rank": sess.rank, "sum": s, "its": its, "err": float(max(errs)), "fused": fused}
    out["spmv"] = spmv
    out["donated"], out["donated_err"] = donated(sess)
    out["leaf_dots"], out["leaf_dot"] = leaf_dot(sess)
    out["lazy_cg_err"] = lazy(sess)
    out.update(kernels=sess.kernels_run, compiles=sess.compiles)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
