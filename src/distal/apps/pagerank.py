"""PageRank by power iteration, with the dangling-node correction, on arrays.

``A[i, j] != 0`` is a link from ``i`` to ``j`` of weight ``A[i, j] / sum_j A[i, j]``. A row
with no links (a dangling node) spreads its rank uniformly over all nodes. One iteration is

    x'[j] = d * sum_i G[j, i] x[i] + (d * m + 1 - d) / n,

``G = P^T`` the transposed link matrix and ``m`` the rank on dangling nodes. A dense ``A``
sets every dangling node's column of ``G`` to ``1 / n`` instead (the dangling mass is then
part of the product: the matrix is dense anyway, and one kernel fewer runs); a sparse ``A``
keeps ``G`` sparse (SpDISTAL's SpMV, by rows or by stored entries) and computes ``m`` as an
inner product with the dangling mask.

Written on :mod:`distal.arrays` over a line of ``P`` processors: ``G`` in row blocks (a
dense product reads ``x`` replicated: ``n * (P - 1)`` words per iteration), the vectors in
blocks, the scalars 0-d.

The iteration contracts by ``d`` in the 1-norm, so ``||x_k - x*||_1 <= d / (1 - d) *
||x_k - x_{k-1}||_1 <= d / (1 - d) * sqrt(n) * ||x_k - x_{k-1}||_2``; it stops when that
bound is at most ``tol``, so the result is within ``tol`` of the exact PageRank vector in
the 1-norm (up to rounding). The change ``x_k - x_{k-1}`` is formed before it is squared,
so nothing cancels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.apps._common import (
    check_schedule,
    dense_input,
    is_sparse,
    machine_for,
    progress,
    session_for,
    sparse_input,
)
from distal.apps._result import (
    BREAKDOWN,
    PageRankVector,
    check_strict,
    pagerank_vector,
    report,
)
from distal.apps.cg import SPLITS
from distal.arrays import sqrt
from distal.distribution.machine import Machine
from distal.errors import InputError
from distal.session import Session


def pagerank(
    A: Any,
    machine: Machine | int | None = None,
    damping: float = 0.85,
    tol: float = 1e-10,
    session: Session | None = None,
    *,
    maxiter: int = 1000,
    schedule: str = "auto",
    strict: bool = False,
) -> PageRankVector:
    """The PageRank vector of the graph ``A`` (``A[i, j] != 0``: a link ``i -> j``).

    Args:
        A: an ``(n, n)`` non-negative array, scipy.sparse matrix or ``dl.SparseArray``; a
            sparse ``A`` runs the sparse matrix-vector product (``schedule`` ``"rows"`` or
            ``"nonzeros"``) and the dangling correction as a distributed scalar.
        machine: a ``dl.Machine`` (used as a line of its processors) or a processor count;
            default one per MPI rank, else one per core (at most 8).
        damping: the probability ``d`` of following a link.
        tol: the 1-norm error bound at which to stop (see the module docstring).
        session: the ``dl.Session`` to run in; with a checkpoint, every iteration is saved
            (loop ``"pagerank"``, keeping ``pr_x``) and a restarted call resumes.
        maxiter: iterations at most.
        schedule: ``"auto"``; ``"owner"`` (dense ``A``: the schedules above); ``"rows"`` or
            ``"nonzeros"`` (sparse ``A``; auto lets the session's cost model cut it:
            :func:`distal.arrays.lower.choose_split`).
        strict: raise :class:`~distal.errors.ConvergenceError` (carrying the result) when
            the bound does not reach ``tol`` within ``maxiter``, instead of warning.

    Returns:
        The PageRank vector (sums to 1), a numpy array that also says whether it
        converged (:class:`~distal.apps._result.PageRankVector`: ``.info`` 0, or
        ``maxiter`` when the bound did not reach ``tol``, or ``-1`` when it is not finite;
        ``.converged``, ``.iterations``, ``.error_bound``, ``.reason``). Not converged,
        it warns (:class:`~distal.errors.ConvergenceWarning`).
    """
    split = check_schedule(schedule, "pagerank", is_sparse(A))
    a = dense_input(A, "A", 2) if split == "owner" else sparse_input(A, "A", "csr", 2)
    n = a.shape[0]
    if a.shape != (n, n):
        raise InputError(f"pagerank: A must be square, got shape {a.shape}")
    if np.any((a.vals if split != "owner" else a) < 0):
        raise InputError("pagerank: A has negative link weights")
    if not (isinstance(damping, int | float) and 0 <= damping < 1):
        raise InputError(f"pagerank: damping must be in [0, 1), got {damping!r}")
    d = float(damping)
    strict = check_strict(strict, "pagerank")
    sess = session_for(session)
    M = machine_for(sess, machine)
    if split == "owner":
        rows = a.sum(axis=1)
        dangling = rows == 0
        # the transposed link matrix, every dangling column spread uniformly
        G = np.divide(a, rows[:, None], out=np.zeros_like(a), where=~dangling[:, None]).T
        G[:, dangling] = 1.0 / n
        G_ = sess.asarray(np.ascontiguousarray(G), machine=M)
        mask = None
    else:
        from distal.sparse.array import SparseArray

        sp = a.to_scipy().tocsr()
        rows = np.asarray(sp.sum(axis=1)).ravel()
        dangling = rows == 0
        inv = np.divide(1.0, rows, out=np.zeros(n), where=~dangling)
        G = SparseArray.from_scipy((sp.multiply(inv[:, None])).T.tocsr(), "csr")
        G_ = sess.asarray(G, None if schedule == "auto" else SPLITS[split], machine=M)
        mask = sess.asarray(dangling.astype(np.float64), machine=M)
    sess["pr_x"] = np.full(n, 1.0 / n)
    bound = d / (1 - d) * np.sqrt(n)
    loop = sess.iterations(maxiter, keep=["pr_x"], name="pagerank", save="every")
    x = sess.array("pr_x", machine=M)  # restored by the loop when it resumes
    bar = progress(sess, maxiter, "pagerank iterations")
    done = 0 if sess.resumed_from is None else sess.resumed_from + 1
    err, info = float("inf"), None
    try:
        for it in loop:
            spread = (1 - d) / n if mask is None else (d * (mask @ x) + (1 - d)) / n
            xn = d * (G_ @ x) + spread
            change = xn - x
            err = bound * float(sqrt(change @ change))
            x = xn
            sess["pr_x"] = x
            done = it + 1
            bar.update(done, note=f"error bound {err:.2e}")
            if not np.isfinite(err):
                info = BREAKDOWN
                break
            if err <= tol:
                info = 0
                break
    finally:
        loop.close()  # the last finished iteration is saved
        bar.close()
    v = np.asarray(x.get())
    if info is None:
        info = max(done, 1)
    if info == 0:
        reason = f"the error bound {err:.3g} <= tol"
    elif info == BREAKDOWN:
        reason = f"the error bound is {err} in iteration {done}: the values are not finite"
    else:
        reason = (
            f"the error bound {err:.3g} > tol = {tol:g} after {done} iterations (maxiter={maxiter})"
        )
    out = pagerank_vector(v / v.sum(), info=info, iterations=done, error_bound=err, reason=reason)
    return report(out, "pagerank", strict=strict, rank=sess.rank)
