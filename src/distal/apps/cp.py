"""CP decomposition by alternating least squares (CP-ALS), on arrays.

For a tensor ``X`` of order ``N`` and rank ``R``, one iteration updates every mode ``n``
in turn (as tensorly's ``parafac``), written as in a textbook on :mod:`distal.arrays`:

* ``M = MTTKRP(X, factors except n)``: ``dl.einsum("abc,bl,cl->al", X, F1, F2)`` for mode
  0 of order 3, one distributed kernel;
* ``V = *_{m != n} F_m^T F_m``, the Hadamard product of the other factors' ``R x R`` Gram
  matrices, and ``U = M @ pinv(V)``. Each Gram ``F.T @ F`` is a distributed kernel run
  when its factor changes and read back (``R x R``): ``pinv`` needs ``V`` on the host
  anyway (numpy, the same on every MPI rank), so the Hadamard product is taken there too
  rather than as one more kernel per mode. The product ``M @ pinv(V)`` is distributed;
* the columns of ``U`` are normalised (``U / norms``), their norms becoming the weights.

Placement over a line of ``P`` processors (the arrays' rule, :mod:`distal.arrays.lower`):
``X`` is held in blocks of mode 0 and never moves. Every MTTKRP is owner-computes by mode 0,
``X`` being its largest operand: ``F_0`` read in its own row blocks, the other factors
replicated and, for another mode, each processor's partial ``M`` summed onto the owners of
``M``'s row blocks. The Grams are summed the same way from the factors' row blocks.

A sparse ``X`` (CSF) keeps its SpDISTAL MTTKRP kernels (:func:`_sparse_kernels`), run in
the session on the factors it holds under ``cp_F<n>``: the arrays layer takes a sparse
operand only as a matrix times a vector, and an MTTKRP is not one (as an SpMV it would need
the dense Khatri-Rao product of the other factors, ``prod_{m != n} I_m`` rows by ``R``).
Everything after the MTTKRP is the same arrays code as for a dense ``X``.

The fit ``1 - ||X - [[w; F]]|| / ||X||`` is computed without forming the reconstruction:
``||X - [[w; F]]||^2 = ||X||^2 - 2 <X, [[w; F]]> + ||[[w; F]]||^2``, with
``<X, [[w; F]]> = sum(M * U)`` from the last mode's MTTKRP and
``||[[w; F]]||^2 = sum(V * (U^T U))`` from the Grams (``U = F_{N-1} diag(w)`` there).
"""

from __future__ import annotations

import math
import operator
import string
from functools import reduce
from typing import Any

import numpy as np

from distal.apps._common import (
    check_schedule,
    dense_input,
    is_sparse,
    machine_for,
    progress,
    scalar,
    session_for,
    sparse_input,
)
from distal.apps._result import BREAKDOWN, CPResult, check_strict, report
from distal.distribution.machine import Machine
from distal.einsum import einsum
from distal.errors import InputError
from distal.kernel import compile
from distal.lang.nodes import Tensor, index_vars
from distal.schedule.api import schedule as default_schedule
from distal.session import Session

#: the MTTKRPs' labels: tensor modes (``l``, the rank index, left out)
LETTERS = string.ascii_lowercase.replace("l", "")


def _factor(n: int) -> str:
    return f"cp_F{n}"


def _gram(n: int) -> str:
    """The session name of factor ``n``'s Gram matrix (kept with the factors)."""
    return f"cp_G{n}"


def _mttkrp_subscripts(order: int, n: int) -> str:
    """``"abc,bl,cl->al"`` for mode 0 of order 3: X, the other factors in mode order."""
    modes = LETTERS[:order]
    others = [f"{c}l" for m, c in enumerate(modes) if m != n]
    return ",".join([modes, *others]) + f"->{modes[n]}l"


def _sparse_kernels(
    shape: tuple[int, ...], rank: int, M: Machine, split: str
) -> tuple[list[Any], Any]:
    """Sparse X (CSF): every mode's MTTKRP iterates X's stored entries, cut by its top
    coordinate (``"rows"``) or by position (``"nonzeros"``); the factors are replicated
    (each processor reads the rows its entries reference from its own copy) and the rows of
    the result computed away from their owner are summed as partial sums."""
    order = len(shape)
    letters = LETTERS[:order]
    vs = index_vars(" ".join(letters))
    lv, po, pi, pp = index_vars("l po pi pp")
    fused = index_vars(" ".join(f"f{k}" for k in range(order)))
    xdist = f"{letters} -> {letters[0]}" if split == "rows" else f"{letters} -> ({letters})"

    def cut(s: Any, X: Tensor, tensors: list[Tensor]) -> Any:
        if split == "rows":
            return compile(s.distribute([vs[0]], [po], [pi], M).communicate(tensors, po))
        f = vs[0]
        for k in range(1, order):
            s = s.fuse(f, vs[k], fused[k])
            f = fused[k]
        s = s.pos(f, pp, X).distribute([pp], [po], [pi], M)
        return compile(s.communicate(tensors, po))

    mttkrp = []
    for n in range(order):
        X = Tensor("cp_X", shape, format="csf", dist=xdist, machine=M)
        out = Tensor("cp_M", (shape[n], rank), dist=f"{letters[n]}l -> {letters[n]}", machine=M)
        expr: Any = X[tuple(vs)]
        fs = []
        for m in range(order):
            if m == n:
                continue
            F = Tensor(_factor(m), (shape[m], rank), dist="bl -> *", machine=M)
            fs.append(F)
            expr = expr * F[vs[m], lv]
        out[vs[n], lv] = expr
        s = default_schedule(out).reorder([*vs, lv])
        mttkrp.append(cut(s, X, [out, X, *fs]))
    nx = scalar("cp_xx", M)
    X = Tensor("cp_X", shape, format="csf", dist=xdist, machine=M)
    nx[()] = X[tuple(vs)] * X[tuple(vs)]
    return mttkrp, cut(default_schedule(nx).reorder(list(vs)), X, [nx, X])


def cp_als(
    X: Any,
    rank: int,
    machine: Machine | int | None = None,
    iters: int = 100,
    tol: float = 1e-8,
    seed: int = 0,
    session: Session | None = None,
    *,
    schedule: str = "auto",
    strict: bool = False,
) -> CPResult:
    """A rank-``rank`` CP decomposition of ``X`` by alternating least squares.

    Args:
        X: an array of order >= 2: dense, or sparse (``dl.SparseArray``, scipy.sparse,
            pydata sparse), whose MTTKRPs then iterate its stored entries (CSF).
        rank: the number of components ``R``.
        machine: a ``dl.Machine`` (used as a line of its processors) or a processor count;
            default one per MPI rank, else one per core (at most 8).
        iters: iterations (sweeps over all modes) at most.
        tol: stop when the fit changes by less than ``tol`` in one iteration.
        seed: the initial factors are ``numpy.random.default_rng(seed).random((I_n, R))``
            for ``n = 0, 1, ...`` in turn (uniform on [0, 1)).
        session: the ``dl.Session`` to run in; with a checkpoint, every iteration is saved
            (loop ``"cp_als"``, keeping the factors, their Grams, weights and fit) and a
            restarted call resumes.
        schedule: ``"auto"``; ``"owner"`` (dense X: the schedules above); ``"rows"`` or
            ``"nonzeros"`` (sparse X; auto picks ``"nonzeros"``).
        strict: raise :class:`~distal.errors.ConvergenceError` (carrying the result) when
            the fit still changes by ``tol`` or more after ``iters`` iterations, instead of
            warning.

    Returns:
        ``(weights, factors, fit)``: ``weights`` of shape ``(R,)``, ``factors[n]`` of shape
        ``(I_n, R)`` with unit columns, and the fit of the last iteration, as a
        :class:`~distal.apps._result.CPResult` that also says whether it converged
        (``.info``: 0, or ``iters`` when the fit still moved by ``tol`` or more, or ``-1``
        when the fit is not finite; ``.converged``, ``.iterations``, ``.change``,
        ``.reason``). Not converged, it warns (:class:`~distal.errors.ConvergenceWarning`).
    """
    split = check_schedule(schedule, "cp_als", is_sparse(X))
    x = dense_input(X, "X") if split == "owner" else sparse_input(X, "X", "csf", X.ndim)
    if x.ndim < 2:
        raise InputError(f"cp_als: X must have order 2 or more, got shape {x.shape}")
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or rank < 1:
        raise InputError(f"cp_als: rank must be a positive integer, got {rank!r}")
    if isinstance(iters, bool) or not isinstance(iters, int | np.integer) or iters < 0:
        raise InputError(f"cp_als: iters must be a non-negative integer, got {iters!r}")
    rank = int(rank)
    strict = check_strict(strict, "cp_als")
    shape = tuple(int(s) for s in x.shape)
    order = len(shape)
    sess = session_for(session)
    Mach = machine_for(sess, machine)
    if order > len(LETTERS):
        raise InputError(f"cp_als: order {order} is more than this version handles (25)")

    rng = np.random.default_rng(seed)
    for n in range(order):
        sess[_factor(n)] = rng.random((shape[n], rank))
    sess["cp_w"], sess["cp_fit"] = np.ones(rank), np.array(np.nan)
    if split == "owner":
        X_ = sess.asarray(x, machine=Mach)
        xx = float((X_ * X_).sum())
    else:
        sparse_mttkrp, norm = _sparse_kernels(shape, rank, Mach, split)
        sess.put("cp_X", x)
        sess.run(norm)
        xx = float(sess.get("cp_xx"))

    def mttkrp(n: int, F: list[Any]) -> Any:
        """``M[i_n, l] = X[i_0, ..., i_{N-1}] * prod_{m != n} F_m[i_m, l]``, a DArray."""
        if split != "owner":  # SpDISTAL's kernel, on the factors bound to cp_F<m>
            sess.run(sparse_mttkrp[n])
            return sess.array("cp_M", machine=Mach)
        return einsum(_mttkrp_subscripts(order, n), X_, *(F[m] for m in range(order) if m != n))

    # the factors' Grams (R x R, on the host) are kept with the factors: an iteration makes
    # each from its new factor's own Gram, and a resumed run must start from the same bytes
    F0 = [sess.array(_factor(n), machine=Mach) for n in range(order)]
    for n in range(order):
        sess[_gram(n)] = np.asarray(F0[n].T @ F0[n])
    del F0
    keep = [_factor(n) for n in range(order)] + [_gram(n) for n in range(order)]
    keep += ["cp_w", "cp_fit"]
    loop = sess.iterations(iters, keep=keep, name="cp_als", save="every")
    # restored by the loop when it resumes a checkpointed run
    F = [sess.array(_factor(n), machine=Mach) for n in range(order)]
    weights = sess.get("cp_w")
    fit = float(sess.get("cp_fit"))
    grams = [np.asarray(sess.get(_gram(n))) for n in range(order)]
    bar = progress(sess, iters, "cp_als iterations")
    done = 0 if sess.resumed_from is None else sess.resumed_from + 1
    change, info = float("nan"), None
    try:
        for it in loop:
            for n in range(order):
                M = mttkrp(n, F)
                V = reduce(operator.mul, (grams[m] for m in range(order) if m != n))
                U = M @ np.linalg.pinv(V)
                # U's Gram gives its column norms (its diagonal: sums of squares) and the new
                # factor's Gram (scaled by them): one R x R kernel where two were
                gram_u = np.asarray(U.T @ U)
                if n == order - 1:  # the model is [[U; F_0 .. F_{N-2}]] here
                    inner = float((M * U).sum())
                    model = float(np.sum(V * gram_u))
                    resid = math.sqrt(max(xx - 2 * inner + model, 0.0))
                    new_fit = 1.0 - resid / math.sqrt(xx) if xx > 0 else 1.0
                norms = np.sqrt(np.diagonal(gram_u).copy())  # R column norms
                norms[norms == 0] = 1.0
                F[n] = U / norms
                weights = norms
                grams[n] = gram_u / np.outer(norms, norms)
                sess[_factor(n)] = F[n]
                sess[_gram(n)] = grams[n]
            sess["cp_w"] = weights
            change = abs(new_fit - fit)
            fit = new_fit
            sess["cp_fit"] = np.array(fit)
            done = it + 1
            bar.update(done, note=f"fit {fit:.6f}")
            if not np.isfinite(fit) or not np.all(np.isfinite(weights)):
                info = BREAKDOWN
                break
            if change < tol:
                info = 0
                break
    finally:
        loop.close()  # the last finished iteration is saved
        bar.close()
    if info is None:
        info = max(done, 1)
    if info == 0:
        reason = f"the fit changed by {change:.3g} < tol in iteration {done}"
    elif info == BREAKDOWN:
        reason = f"the fit or the weights are not finite in iteration {done}"
    else:
        reason = (
            f"the fit still changed by {change:.3g} >= tol = {tol:g} in iteration {done} "
            f"(iters={iters})"
        )
    result = CPResult(
        weights,
        [np.asarray(f.get()) for f in F],
        fit,
        info=info,
        iterations=done,
        change=change,
        reason=reason,
    )
    return report(result, "cp_als", strict=strict, rank=sess.rank)
