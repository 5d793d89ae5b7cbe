"""CP decomposition by alternating least squares (CP-ALS), MTTKRP distributed.

For a tensor ``X`` of order ``N`` and rank ``R``, one iteration updates every mode ``n``
in turn (as tensorly's ``parafac``):

* ``M = MTTKRP(X, factors except n)``: the distributed kernel
  ``M[i_n, l] = X[i_0, ..., i_{N-1}] * prod_{m != n} F_m[i_m, l]``;
* ``V = *_{m != n} F_m^T F_m`` (Hadamard product of the ``R x R`` Gram matrices) and
  ``F_n = M pinv(V)``, on the driver (small);
* the columns of ``F_n`` are normalised, their norms becoming the weights.

Distribution on a line of ``P`` processors, owner computes over the first mode: ``X`` is
cut along mode 0 (``"abc -> a"``) once and never moves; ``F_0`` is cut like it
(``"al -> a"``), the other factors are replicated (``"bl -> *"``). For mode 0 each
processor computes its own rows of ``M``; for another mode its partial ``M`` is summed
onto the owners of ``M``'s row blocks (``"bl -> b"``). ``||X||^2`` is a distributed scalar
kernel, run once.

The fit ``1 - ||X - [[w; F]]|| / ||X||`` is computed without forming the reconstruction:
``||X - [[w; F]]||^2 = ||X||^2 - 2 <X, [[w; F]]> + ||[[w; F]]||^2``, with
``<X, [[w; F]]> = sum(M * F_{N-1} diag(w))`` from the last mode's MTTKRP and
``||[[w; F]]||^2 = sum(V * (F_{N-1} diag(w))^T (F_{N-1} diag(w)))`` from the Grams.
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np

from distal.apps._common import (
    check_schedule,
    dense_input,
    is_sparse,
    machine_for,
    owner,
    progress,
    scalar,
    session_for,
    sparse_input,
)
from distal.distribution.machine import Machine
from distal.errors import InputError
from distal.kernel import compile
from distal.lang.nodes import Tensor, index_vars
from distal.schedule.api import schedule as default_schedule
from distal.session import Session


def _factor(n: int) -> str:
    return f"cp_F{n}"


def _kernels(shape: tuple[int, ...], rank: int, M: Machine) -> tuple[list[Any], Any]:
    order = len(shape)
    if order > 25:
        raise InputError(f"cp_als: order {order} is more than this version handles (25)")
    letters = string.ascii_lowercase.replace("l", "")[:order]
    vs = index_vars(" ".join(letters))
    (lv,) = index_vars("l")
    xdist = f"{letters} -> {letters[0]}"
    mttkrp = []
    for n in range(order):
        X = Tensor("cp_X", shape, dist=xdist, machine=M)
        out = Tensor("cp_M", (shape[n], rank), dist=f"{letters[n]}l -> {letters[n]}", machine=M)
        expr: Any = X[tuple(vs)]
        for m in range(order):
            if m == n:
                continue
            dist = "al -> a" if m == 0 else "bl -> *"
            F = Tensor(_factor(m), (shape[m], rank), dist=dist, machine=M)
            expr = expr * F[vs[m], lv]
        out[vs[n], lv] = expr
        mttkrp.append(owner(out, vs[0], M))
    nx = scalar("cp_xx", M)
    X = Tensor("cp_X", shape, dist=xdist, machine=M)
    nx[()] = X[tuple(vs)] * X[tuple(vs)]
    return mttkrp, owner(nx, vs[0], M)


def _sparse_kernels(
    shape: tuple[int, ...], rank: int, M: Machine, split: str
) -> tuple[list[Any], Any]:
    """Sparse X (CSF): every mode's MTTKRP iterates X's stored entries, cut by its top
    coordinate (``"rows"``) or by position (``"nonzeros"``); the factors are replicated
    (each processor reads the rows its entries reference from its own copy) and the rows of
    the result computed away from their owner are summed as partial sums."""
    order = len(shape)
    letters = string.ascii_lowercase.replace("l", "")[:order]
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
) -> tuple[np.ndarray, list[np.ndarray], float]:
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
            (loop ``"cp_als"``, keeping the factors, weights and fit) and a restarted call
            resumes.
        schedule: ``"auto"``; ``"owner"`` (dense X: the schedules above); ``"rows"`` or
            ``"nonzeros"`` (sparse X; auto picks ``"nonzeros"``).

    Returns:
        ``(weights, factors, fit)``: ``weights`` of shape ``(R,)``, ``factors[n]`` of shape
        ``(I_n, R)`` with unit columns, and the fit of the last iteration.
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
    shape = tuple(int(s) for s in x.shape)
    order = len(shape)
    sess = session_for(session)
    Mach = machine_for(sess, machine)
    if split == "owner":
        mttkrp, norm = _kernels(shape, rank, Mach)
    else:
        mttkrp, norm = _sparse_kernels(shape, rank, Mach, split)

    rng = np.random.default_rng(seed)
    factors = [rng.random((s, rank)) for s in shape]
    sess.put("cp_X", x)
    for n, f in enumerate(factors):
        sess.put(_factor(n), f)
    sess.put("cp_w", np.ones(rank))
    sess.put("cp_fit", np.array(np.nan))
    sess.run(norm)
    xx = float(sess.get("cp_xx"))
    keep = [_factor(n) for n in range(order)] + ["cp_w", "cp_fit"]
    loop = sess.iterations(iters, keep=keep, name="cp_als", save="latest")
    factors = [sess.get(_factor(n)) for n in range(order)]
    weights = sess.get("cp_w")
    fit = float(sess.get("cp_fit"))
    grams = [f.T @ f for f in factors]
    bar = progress(sess, iters, "cp_als iterations")
    try:
        for it in loop:
            for n in range(order):
                sess.run(mttkrp[n])
                m = sess.get("cp_M")
                V = np.ones((rank, rank))
                for k in range(order):
                    if k != n:
                        V *= grams[k]
                U = m @ np.linalg.pinv(V)
                if n == order - 1:  # the model is [[U; F_0 .. F_{N-2}]] here
                    inner = float(np.sum(m * U))
                    model = float(np.sum(V * (U.T @ U)))
                    resid = math.sqrt(max(xx - 2 * inner + model, 0.0))
                    new_fit = 1.0 - resid / math.sqrt(xx) if xx > 0 else 1.0
                norms = np.linalg.norm(U, axis=0)
                norms[norms == 0] = 1.0
                factors[n] = U / norms
                weights = norms
                grams[n] = factors[n].T @ factors[n]
                sess.put(_factor(n), factors[n])
            sess.put("cp_w", weights)
            change = abs(new_fit - fit)
            fit = new_fit
            sess.put("cp_fit", np.array(fit))
            bar.update(it + 1, note=f"fit {fit:.6f}")
            if change < tol:
                break
    finally:
        loop.close()  # the last finished iteration is saved
        bar.close()
    return weights, factors, fit
