"""Conjugate gradients for ``A x = b``, ``A`` symmetric positive definite, on arrays.

The algorithm reads as in a textbook (:mod:`distal.arrays`): every iteration is the
distributed matrix-vector product ``q = A p``, the inner products ``p . q`` and ``r . r``
and the vector updates, fused into distributed kernels over a line of ``P`` processors
(a dense ``A`` in row blocks with ``p`` read replicated; a sparse ``A`` by rows or by
stored entries with the vectors in blocks), while ``alpha`` and ``beta`` are 0-d values
computed on each process.

It stops when ``||r|| <= tol * ||b||`` (``r = b - A x``, updated recursively) and the
true residual ``b - A x`` (one more product) agrees, or after ``maxiter`` iterations. The
recursive residual drifts from the true one by rounding, and leaves it altogether when
``A`` is not symmetric (the recurrences assume it): the first time they disagree the true
residual replaces the recursive one and the iteration goes on; the second time it stops
and says so. A non-positive ``p . A p`` (``A`` not positive definite) stops it too. The
result says whether it converged, as scipy's ``info`` (:mod:`distal.apps._result`).
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
    progress,
    session_for,
    sparse_input,
)
from distal.apps._result import BREAKDOWN, CGResult, check_strict, report
from distal.arrays import sqrt
from distal.distribution.machine import Machine
from distal.errors import InputError
from distal.session import Session

#: how ``A @ p`` cuts a sparse ``A``, by schedule
SPLITS = {"rows": "xy -> x", "nonzeros": "xy -> (xy)"}
#: the values a checkpointed run keeps per iteration (loop ``"cg"``)
KEEP = ["cg_x", "cg_r", "cg_p", "cg_rr"]
#: ``info`` of a run whose recursive residual met ``tol`` twice while the true one did not
DRIFT = -2


def cg(
    A: Any,
    b: Any,
    machine: Machine | int | None = None,
    tol: float = 1e-10,
    session: Session | None = None,
    *,
    maxiter: int | None = None,
    schedule: str = "auto",
    callback: Callable[[Any], None] | None = None,
    strict: bool = False,
) -> CGResult:
    """Solve ``A x = b`` (``A`` SPD) by conjugate gradients from ``x0 = 0``.

    Args:
        A: an ``(n, n)`` array, scipy.sparse matrix or ``dl.SparseArray``; a sparse ``A``
            runs the sparse matrix-vector product (CSR, ``schedule`` ``"rows"`` or
            ``"nonzeros"``), with the vectors in blocks.
        b: the right-hand side, ``(n,)``.
        machine: a ``dl.Machine`` (used as a line of its processors) or a processor count;
            default one per MPI rank, else one per core (at most 8).
        tol: stop when ``||r|| <= tol * ||b||``.
        session: the ``dl.Session`` to run in (its runtime and checkpoint); a new local
            one by default. With a checkpoint, every iteration is saved (loop ``"cg"``,
            keeping ``cg_x``, ``cg_r``, ``cg_p``, ``cg_rr``) and a restarted call resumes.
        maxiter: iterations at most (default ``10 * n``).
        schedule: ``"auto"``; ``"owner"`` (dense ``A``: the owner-computes schedules of the
            module docstring); ``"rows"`` or ``"nonzeros"`` (sparse ``A``; auto lets the
            session's cost model cut it: :func:`distal.arrays.lower.choose_split`).
        callback: called after each iteration with the iterate ``x`` (a ``dl.DArray``,
            as scipy's ``cg`` calls its callback with ``xk``; reading it gathers it). On MPI
            every rank calls it.
        strict: raise :class:`~distal.errors.ConvergenceError` (carrying the result) when
            it does not converge, instead of warning.

    Returns:
        ``(x, iterations)``: the solution and the number of iterations run in total, as a
        :class:`~distal.apps._result.CGResult` that also says whether it converged:
        ``.info`` (0 converged; ``> 0`` not within ``maxiter``: the iterations run; ``-1``
        a breakdown, ``p.Ap`` not positive or a residual not finite; ``-2`` the recursive
        residual met ``tol`` twice while ``b - A x`` did not), ``.converged``,
        ``.residual`` (``||b - A x|| / ||b||`` of the returned ``x``) and ``.reason``.
        Not converged, it warns (:class:`~distal.errors.ConvergenceWarning`).
    """
    split = check_schedule(schedule, "cg", is_sparse(A))
    a = dense_input(A, "A", 2) if split == "owner" else sparse_input(A, "A", "csr", 2)
    n = a.shape[0]
    if a.shape != (n, n):
        raise InputError(f"cg: A must be square, got shape {a.shape}")
    bv = dense_input(b, "b", 1)
    if bv.shape != (n,):
        raise InputError(f"cg: b has shape {bv.shape}, A is {a.shape}")
    if not (isinstance(tol, int | float) and tol >= 0):
        raise InputError(f"cg: tol must be a non-negative number, got {tol!r}")
    if callback is not None and not callable(callback):
        raise InputError(f"cg: callback must be callable, got {type(callback).__name__}")
    strict = check_strict(strict, "cg")
    maxiter = 10 * n if maxiter is None else int(maxiter)
    sess = session_for(session)
    M = machine_for(sess, machine)
    A_ = sess.asarray(a, None if schedule == "auto" else SPLITS.get(split), machine=M)
    b_ = sess.asarray(bv, machine=M)
    bnorm = float(sqrt(b_ @ b_))
    goal = tol * bnorm
    # the loop's values are named (and so kept, for the checkpoint) only where they are
    # saved: unnamed, a vector the loop rebinds is read by nothing after its update, and
    # the update is written over it in place (``Session.fused_blocks``'s donations)
    named = sess.checkpoint is not None
    x, r, p, rs = b_ * 0.0, b_, b_, b_ @ b_
    if named:
        sess["cg_x"], sess["cg_r"], sess["cg_p"], sess["cg_rr"] = x, r, p, rs
    loop = sess.iterations(maxiter, keep=KEEP if named else (), name="cg", save="every")
    if named:  # restored by the loop when it resumes a checkpointed run
        x, r, p, rs = (sess.array(name, machine=M) for name in KEEP)
    done = 0 if sess.resumed_from is None else sess.resumed_from + 1
    bar = progress(sess, maxiter, "cg iterations")
    info, reason, true_norm = None, "", None
    replaced = False  # the recursive residual was replaced by the true one once
    try:
        if float(sqrt(rs)) <= goal:
            loop.close()
        for it in loop:
            q = A_ @ p
            pq = p @ q
            pqv = float(pq)
            if not pqv > 0 or not np.isfinite(pqv):
                info = BREAKDOWN
                reason = (
                    f"p.Ap = {pqv:.3g} in iteration {it + 1}: A is not symmetric positive "
                    "definite (or holds values that overflow)"
                )
                break
            alpha = rs / pq
            x = x + alpha * p
            r = r - alpha * q
            rs_new = r @ r
            residual = float(sqrt(rs_new))
            done = it + 1
            bar.update(done, note=f"residual {residual / max(bnorm, 1e-300):.2e}")
            if callback is not None:
                callback(x)
            if not np.isfinite(residual):
                info, reason = BREAKDOWN, f"the residual is {residual} in iteration {it + 1}"
                break
            if residual <= goal:
                # the recurrence says done: the true residual decides (the recurrence
                # drifts from it by rounding, and leaves it for good when A is not
                # symmetric); once, the true residual replaces it and the iteration goes on
                true_norm = _true_norm(A_, x, b_)
                if true_norm <= goal:
                    info = 0
                    break
                if replaced:
                    info = DRIFT
                    reason = (
                        f"the recursive residual reached tol * ||b|| twice (the second time "
                        f"in iteration {it + 1}, after it was replaced by b - A x) while "
                        f"||b - A x|| / ||b|| stays {true_norm / bnorm:.3g}: A is not "
                        "symmetric, or tol is below what rounding allows for this A"
                    )
                    break
                replaced = True
                r = b_ - A_ @ x
                rs_new = r @ r
                p = r
                rs = rs_new
                true_norm = None
            else:
                p = r + (rs_new / rs) * p
                rs = rs_new
            if named:
                sess["cg_x"], sess["cg_r"], sess["cg_p"], sess["cg_rr"] = x, r, p, rs
    finally:
        loop.close()  # the last finished iteration is saved
        bar.close()
    if true_norm is None:
        true_norm = _true_norm(A_, x, b_)
    if info is None:  # the loop ran out (or had nothing to do)
        info = 0 if true_norm <= goal else max(done, 1)
        if info:
            reason = (
                f"||b - A x|| / ||b|| = {true_norm / bnorm:.3g} > tol = {tol:g} after "
                f"{done} iterations (maxiter={maxiter})"
            )
    result = CGResult(
        np.asarray(x.get()),
        done,
        info=info,
        residual=true_norm / bnorm if bnorm > 0 else true_norm,
        reason=reason or "||b - A x|| <= tol * ||b||",
    )
    return report(result, "cg", strict=strict, rank=sess.rank)


def _true_norm(A: Any, x: Any, b: Any) -> float:
    """``||b - A x||``, computed from ``x`` (one more matrix-vector product)."""
    t = b - A @ x
    return float(sqrt(t @ t))
