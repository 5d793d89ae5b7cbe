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

from typing import Any

import numpy as np

from distal.apps._common import (
    check_schedule,
    dense_input,
    machine_for,
    owner,
    progress,
    rename,
    scalar,
    session_for,
)
from distal.distribution.machine import Machine
from distal.errors import InputError
from distal.lang.nodes import Tensor, index_vars
from distal.session import Session


def _kernels(n: int, d: float, M: Machine) -> dict[str, Any]:
    i, j = index_vars("i j")
    # x is always read replicated: the product needs it so, the other kernel reads its own
    # block of it without moving anything
    x = Tensor("pr_x", (n,), dist="i -> *", machine=M)
    G = Tensor("pr_G", (n, n), dist="ji -> j", machine=M)
    c = scalar("pr_c", M, "*")
    xn = Tensor("pr_xn", (n,), dist="j -> j", machine=M)
    xn[j] = G[j, i] * x[i] * d + c[()]
    # the change as a vector first: the squares of a difference summed as one statement
    # would be expanded into products of x and xn and cancel near convergence
    xn2 = Tensor("pr_xn", (n,), dist="i -> i", machine=M)
    dx = Tensor("pr_dx", (n,), dist="i -> i", machine=M)
    dx[i] = xn2[i] - x[i]
    e, dx2 = scalar("pr_e", M), Tensor("pr_dx", (n,), dist="i -> i", machine=M)
    e[()] = dx2[i] * dx2[i]
    return {"step": owner(xn, j, M), "diff": owner(dx, i, M), "change": owner(e, i, M)}


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
        A: an ``(n, n)`` non-negative array, scipy.sparse matrix or ``dl.SparseArray``
            (sparse inputs are made dense up to 2**24 elements).
        machine: a ``dl.Machine`` (used as a line of its processors) or a processor count;
            default one per MPI rank, else one per core (at most 8).
        damping: the probability ``d`` of following a link.
        tol: the 1-norm error bound at which to stop (see the module docstring).
        session: the ``dl.Session`` to run in; with a checkpoint, every iteration is saved
            (loop ``"pagerank"``, keeping ``pr_x``) and a restarted call resumes.
        maxiter: iterations at most.
        schedule: ``"auto"`` or ``"owner"``: the owner-computes schedules above.

    Returns:
        The PageRank vector (sums to 1).
    """
    check_schedule(schedule, "pagerank")
    a = dense_input(A, "A", 2)
    n = a.shape[0]
    if a.shape != (n, n):
        raise InputError(f"pagerank: A must be square, got shape {a.shape}")
    if np.any(a < 0):
        raise InputError("pagerank: A has negative link weights")
    if not (isinstance(damping, int | float) and 0 <= damping < 1):
        raise InputError(f"pagerank: damping must be in [0, 1), got {damping!r}")
    d = float(damping)
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
    bound = d / (1 - d) * np.sqrt(n)
    loop = sess.iterations(maxiter, keep=["pr_x"], name="pagerank", save="latest")
    bar = progress(sess, maxiter, "pagerank iterations")
    try:
        for it in loop:
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
