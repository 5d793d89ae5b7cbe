"""``dl.einsum``: numpy's einsum, run as a distributed computation.

Every subscripts string (and the interleaved ``op, sublist, ...`` form) that
``numpy.einsum`` accepts is accepted. Three of numpy's features are settled here, on
the caller's arrays, before anything is distributed -- each is exact (no arithmetic):

* a label repeated within one operand (``"ii->i"``, ``"iij,j"``) takes that operand's
  diagonal with numpy first, so only the diagonal is distributed and moved, not the
  whole square;
* a dimension of size 1 broadcast against a longer one (numpy allows this for any
  label, ellipsis or not) is squeezed out of that operand: the operand does not
  depend on that index;
* a label of extent 0 makes the result numpy's: zeros of the output's shape (an
  empty sum is 0; an empty output is empty). Distributed tensors have positive extents.

The ellipsis is expanded into fresh labels by :func:`distal.lang.einsum.parse_einsum`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from distal.arrays import DArray, einsum_arrays
from distal.distribution.machine import Machine
from distal.errors import InputError, ScheduleError, ShapeError
from distal.kernel import compile
from distal.lang.einsum import einsum_vars, interleaved_subscripts, parse_einsum
from distal.lang.nodes import Expr, IndexVar, Tensor
from distal.schedule.api import Schedule
from distal.schedule.api import schedule as default_nest
from distal.sparse.array import SparseArray, is_pydata_sparse, is_scipy_sparse


def default_machine() -> Machine:
    """One processor per core of this computer, in a line."""
    return Machine(os.cpu_count() or 1)


def _dist(indices: list[IndexVar], placed: list[IndexVar | None], rest: str) -> str:
    """Cut each dimension indexed by a distributed variable; ``rest`` elsewhere."""
    names = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(indices)]
    rhs = [names[indices.index(v)] if v is not None and v in indices else rest for v in placed]
    return f"{names} -> {''.join(rhs)}"


def _diagonal(spec: str, a: np.ndarray, n: int, subscripts: str) -> tuple[str, np.ndarray]:
    """Operand ``n`` with each repeated label reduced to one axis (its diagonal)."""
    keep = "".join(dict.fromkeys(spec))
    if keep == spec:
        return spec, a
    for c in keep:
        sizes = {a.shape[d] for d, x in enumerate(spec) if x == c}
        if len(sizes) > 1:
            raise ShapeError(
                f"index {c!r} repeats in operand {n} of {subscripts!r} with extents "
                f"{sorted(sizes)}; a diagonal needs equal extents"
            )
    return keep, np.einsum(f"{spec}->{keep}", a)


def _broadcast(
    ins: list[str], arrays: list[np.ndarray], subscripts: str
) -> tuple[list[str], list[np.ndarray], dict[str, int]]:
    """numpy's size-1 broadcasting: the extent of every label, and the operands with their
    broadcast (size-1) axes squeezed out and the label dropped from their subscripts."""
    seen: dict[str, set[int]] = {}
    for spec, a in zip(ins, arrays, strict=True):
        for c, n in zip(spec, a.shape, strict=True):
            seen.setdefault(c, set()).add(int(n))
    extent: dict[str, int] = {}
    for c, sizes in seen.items():
        longer = sizes - {1}
        if len(longer) > 1:
            raise ShapeError(
                f"index {c!r} has extents {sorted(sizes)} in {subscripts!r}; operands can "
                "differ only where one of them has extent 1 (broadcasting)"
            )
        extent[c] = longer.pop() if longer else 1
    new_ins, new_arrays = [], []
    for spec, a in zip(ins, arrays, strict=True):
        drop = tuple(d for d, c in enumerate(spec) if a.shape[d] == 1 and extent[c] != 1)
        new_ins.append("".join(c for d, c in enumerate(spec) if d not in drop))
        new_arrays.append(np.squeeze(a, axis=drop) if drop else a)
    return new_ins, new_arrays, extent


def einsum(
    subscripts: Any, *operands: Any, machine: Machine | None = None, schedule: Any = None
) -> Any:
    """Evaluate ``np.einsum(subscripts, *operands)`` as a distributed computation.

    Accepts whatever ``numpy.einsum`` accepts as subscripts (explicit or implicit output,
    ``...``, repeated labels, size-1 broadcasting, the interleaved sublist form; see the
    module docstring for what is settled locally) and returns what it returns: an array,
    or a numpy scalar for a 0-d result. With a ``dl.DArray`` operand it records the
    contraction in that array's session and returns a DArray (deferred, like every array
    operation).

    ``schedule="auto"`` (the default, also ``None``): every tensor gets a one-copy
    distribution and a schedule chosen by the cost model (``distal.cost``); more
    than two operands run as one fused kernel or a sequence of pairwise kernels,
    whichever the model prefers. ``schedule="owner"``: the first statement
    variables (output ones first) are distributed over the machine,
    owner-computes, inputs replicated where a distributed variable does not index
    them, the output in one copy.
    """
    if not isinstance(subscripts, str):
        subscripts, operands = interleaved_subscripts((subscripts, *operands))
    if any(isinstance(x, DArray) for x in operands):
        if machine is not None or schedule is not None:
            raise InputError(
                "einsum of DArrays runs on their session's machine: do not pass machine= or "
                "schedule="
            )
        return einsum_arrays(subscripts, tuple(operands))
    for n, x in enumerate(operands):
        if isinstance(x, SparseArray) or is_scipy_sparse(x) or is_pydata_sparse(x):
            raise InputError(
                f"einsum operand {n} is a sparse array ({type(x).__module__}."
                f"{type(x).__name__}): dl.einsum evaluates dense operands; for a sparse one "
                "use a session's arrays (sess.asarray(A) @ sess.asarray(x)) or compile the "
                "kernel with a sparse format (dl.Tensor(..., format='csr'), dl.compile), or "
                "pass A.toarray() to compute it densely"
            )
    try:
        arrays = [np.asarray(x) for x in operands]
    except Exception as e:
        raise InputError(f"einsum operands must be arrays: {e}") from e
    for n, a in enumerate(arrays):
        if a.dtype.kind not in "biufc":
            raise InputError(f"einsum operand {n} has non-numeric dtype {a.dtype}")
    m = machine if machine is not None else default_machine()
    if not isinstance(m, Machine):
        raise ScheduleError(f"machine must be a dl.Machine, got {m!r}")
    if schedule is not None and schedule not in ("auto", "owner"):
        raise ScheduleError(f"einsum schedule must be 'auto' or 'owner', got {schedule!r}")
    ins, out = parse_einsum(subscripts, [a.ndim for a in arrays])
    diag = [_diagonal(ins[n], a, n, subscripts) for n, a in enumerate(arrays)]
    ins, arrays, extent = _broadcast([d[0] for d in diag], [d[1] for d in diag], subscripts)
    dtype = np.result_type(*arrays) if arrays else np.float64
    if any(n == 0 for n in extent.values()):
        return _like_numpy(np.zeros(tuple(extent[c] for c in out), dtype))
    if schedule is None or schedule == "auto":
        from distal.cost.einsum_auto import einsum_auto

        return _like_numpy(einsum_auto(ins, out, arrays, m))
    return _like_numpy(_owner(ins, out, arrays, extent, m, dtype))


def _like_numpy(value: Any) -> Any:
    """numpy's return convention: a numpy scalar for a 0-d result, else the array."""
    value = np.asarray(value)
    return value[()] if value.ndim == 0 else value


def _owner(
    ins: list[str],
    out: str,
    arrays: list[np.ndarray],
    extent: dict[str, int],
    m: Machine,
    dtype: np.dtype,
) -> np.ndarray:
    """The owner-computes schedule of ``schedule="owner"`` (see :func:`einsum`)."""
    var = einsum_vars(ins, out)
    order = list(dict.fromkeys(out + "".join(ins)))
    grid = m if len(order) >= m.ndim else Machine(m.size)
    placed_letters = order[: grid.ndim] if len(order) >= grid.ndim else []
    placed: list[IndexVar | None] = [var[c] for c in placed_letters] or [None] * grid.ndim
    tensors = []
    for n, (spec, a) in enumerate(zip(ins, arrays, strict=True)):
        idx = [var[c] for c in spec]
        tensors.append(Tensor(f"T{n}", a.shape, _dist(idx, placed, "*"), grid, a.dtype))
    oidx = [var[c] for c in out]
    result = Tensor("out", tuple(extent[c] for c in out), _dist(oidx, placed, "0"), grid, dtype)
    rhs: Expr = tensors[0][tuple(var[c] for c in ins[0])]
    for t, spec in zip(tensors[1:], ins[1:], strict=True):
        rhs = rhs * t[tuple(var[c] for c in spec)]
    result[tuple(oidx)] = rhs
    s: Schedule = default_nest(result)
    if placed_letters:
        outers = [IndexVar(f"{c}o") for c in placed_letters]
        inners = [IndexVar(f"{c}i") for c in placed_letters]
        s = s.distribute([var[c] for c in placed_letters], outers, inners, grid)
    kernel = compile(s)
    return kernel.run({f"T{n}": a for n, a in enumerate(arrays)}).value
