"""PageRank by power iteration, with the dangling-node correction.

``A[i, j] != 0`` is a link from ``i`` to ``j`` of weight ``A[i, j] / sum_j A[i, j]``. A row
with no links (a dangling node) spreads its rank uniformly over all nodes. One iteration is

    x'[j] = d * sum_i G[j, i] x[i] + (1 - d) / n,

``G = P^T`` with every dangling node's column set to ``1 / n`` (so ``d * sum_{i dangling}
x[i] / n``, the dangling mass spread uniformly, is part of the product: the matrix is dense
in this version anyway, and one kernel fewer runs per iteration).

Distributed on a line of ``P`` processors, owner computes: ``G`` in row blocks
(``"ji -> j"``), the new vector in blocks. Each iteration runs

* ``xn[j] = G[j, i] * x[i] * d + c[()]``: the matrix-vector product, reading ``x``
  replicated (the session moves ``n * (P - 1)`` words), ``c = (1 - d) / n`` replicated;
* ``dx[i] = xn[i] - x[i]`` and ``e[()] = dx[i] * dx[i]``: the squared change, a
  distributed scalar (the difference is formed first, so nothing cancels).

The iteration contracts by ``d`` in the 1-norm, so ``||x_k - x*||_1 <= d / (1 - d) *
||x_k - x_{k-1}||_1 <= d / (1 - d) * sqrt(n) * ||x_k - x_{k-1}||_2``; it stops when that
bound is at most ``tol``, so the result is within ``tol`` of the exact PageRank vector in
the 1-norm (up to rounding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distal.apps._common import (
    check_schedule,
    dense_input,
    is_sparse,
    machine_for,
    owner,
    progress,
    rename,
    scalar,
    session_for,
    sparse_input,
    spmv,
)
from distal.distribution.machine import Machine
from distal.errors import InputError
from distal.lang.nodes import Tensor, index_vars
from distal.session import Session


def _change(n: int, M: Machine, x_dist: str) -> dict[str, Any]:
    """``dx = xn - x`` and ``e = dx . dx``: the squared change, a distributed scalar.

    The change is a vector first: the squares of a difference summed as one statement
    would be expanded into products of x and xn and cancel near convergence.
    """
    (i,) = index_vars("i")
    xn = Tensor("pr_xn", (n,), dist="i -> i", machine=M)
    x = Tensor("pr_x", (n,), dist=x_dist, machine=M)
    dx = Tensor("pr_dx", (n,), dist="i -> i", machine=M)
    dx[i] = xn[i] - x[i]
    e, dx2 = scalar("pr_e", M), Tensor("pr_dx", (n,), dist="i -> i", machine=M)
    e[()] = dx2[i] * dx2[i]
    return {"diff": owner(dx, i, M), "change": owner(e, i, M)}


def _kernels(n: int, d: float, M: Machine) -> dict[str, Any]:
    i, j = index_vars("i j")
    # x is always read replicated: the product needs it so, the other kernel reads its own
    # block of it without moving anything
    x = Tensor("pr_x", (n,), dist="i -> *", machine=M)
    G = Tensor("pr_G", (n, n), dist="ji -> j", machine=M)
    c = scalar("pr_c", M, "*")
    xn = Tensor("pr_xn", (n,), dist="j -> j", machine=M)
    xn[j] = G[j, i] * x[i] * d + c[()]
    return {"step": owner(xn, j, M), **_change(n, M, "i -> *")}


def _sparse_kernels(n: int, d: float, M: Machine, split: str) -> dict[str, Any]:
    """The sparse iteration: ``y = G x`` (SpMV, G the transposed link matrix without the
    dangling columns), the dangling mass ``m = sum_{i dangling} x[i]``, then
    ``xn = d * y + c`` with ``c = (d * m + 1 - d) / n`` replicated."""
    i, j = index_vars("i j")
    ks = {"spmv": spmv("pr_y", "pr_Gs", "pr_x", n, n, M, split)}
    m, x = scalar("pr_m", M), Tensor("pr_x", (n,), dist="i -> i", machine=M)
    dm = Tensor("pr_dmask", (n,), dist="i -> i", machine=M)
    m[()] = x[i] * dm[i]
    ks["mass"] = owner(m, i, M)
    y = Tensor("pr_y", (n,), dist="j -> j", machine=M)
    c = scalar("pr_c", M, "*")
    xn = Tensor("pr_xn", (n,), dist="j -> j", machine=M)
    xn[j] = y[j] * d + c[()]
    ks["step"] = owner(xn, j, M)
    return {**ks, **_change(n, M, "i -> i")}


def _iterate(
    sess: Session,
    ks: dict[str, Any],
    n: int,
    d: float,
    tol: float,
    maxiter: int,
    before: Callable[[], None] | None = None,
) -> np.ndarray:
    """The power iteration on a session whose kernels ``ks`` make ``pr_xn`` from ``pr_x``
    (``before`` runs first in each iteration), checkpointed per iteration."""
    bound = d / (1 - d) * np.sqrt(n)
    loop = sess.iterations(maxiter, keep=["pr_x"], name="pagerank", save="latest")
    bar = progress(sess, maxiter, "pagerank iterations")
    try:
        for it in loop:
            if before is not None:
                before()
            sess.run(ks["step"])
            sess.run(ks["diff"])
            sess.run(ks["change"])
            rename(sess, "pr_xn", "pr_x")
            err = bound * float(np.sqrt(sess.get("pr_e")))
            bar.update(it + 1, note=f"error bound {err:.2e}")
            if err <= tol:
                break
    finally:
        loop.close()  # the last finished iteration is saved
        bar.close()
    x = sess.get("pr_x")
    return x / x.sum()


def pagerank(
    A: Any,
    machine: Machine | int | None = None,
    damping: float = 0.85,
    tol: float = 1e-10,
    session: Session | None = None,
    *,
    maxiter: int = 1000,
    schedule: str = "auto",
) -> np.ndarray:
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
            ``"nonzeros"`` (sparse ``A``; auto picks ``"nonzeros"``).

    Returns:
        The PageRank vector (sums to 1).
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
    if split != "owner":
        return _pagerank_sparse(a, n, d, tol, session, machine, maxiter, split)
    rows = a.sum(axis=1)
    dangling = rows == 0
    # the transposed link matrix with every dangling column spread uniformly: x' = d G x + c
    G = np.divide(a, rows[:, None], out=np.zeros_like(a), where=~dangling[:, None]).T
    G[:, dangling] = 1.0 / n
    sess = session_for(session)
    M = machine_for(sess, machine)
    ks = _kernels(n, d, M)
    sess.put("pr_G", np.ascontiguousarray(G))
    sess.put("pr_c", np.array((1 - d) / n))
    sess.put("pr_x", np.full(n, 1.0 / n))
    return _iterate(sess, ks, n, d, tol, maxiter)


def _pagerank_sparse(
    a: Any,
    n: int,
    d: float,
    tol: float,
    session: Session | None,
    machine: Machine | int | None,
    maxiter: int,
    split: str,
) -> np.ndarray:
    """PageRank of a sparse link matrix (see :func:`pagerank`)."""
    from distal.sparse.array import SparseArray

    sp = a.to_scipy().tocsr()
    rows = np.asarray(sp.sum(axis=1)).ravel()
    dangling = rows == 0
    inv = np.divide(1.0, rows, out=np.zeros(n), where=~dangling)
    G = SparseArray.from_scipy((sp.multiply(inv[:, None])).T.tocsr(), "csr")
    sess = session_for(session)
    M = machine_for(sess, machine)
    ks = _sparse_kernels(n, d, M, split)
    sess.put("pr_Gs", G)
    sess.put("pr_dmask", dangling.astype(np.float64))
    sess.put("pr_x", np.full(n, 1.0 / n))

    def product_and_mass() -> None:  # G x, and the dangling mass spread uniformly
        sess.run(ks["spmv"])
        sess.run(ks["mass"])
        sess.put("pr_c", np.array((d * float(sess.get("pr_m")) + 1 - d) / n))

    return _iterate(sess, ks, n, d, tol, maxiter, product_and_mass)
