"""``dl.einsum``: numpy's einsum, run as a distributed computation."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from distal.distribution.machine import Machine
from distal.errors import InputError, ScheduleError, ShapeError
from distal.kernel import compile
from distal.lang.einsum import einsum_vars, parse_einsum
from distal.lang.nodes import Expr, IndexVar, Tensor
from distal.schedule.api import Schedule
from distal.schedule.api import schedule as default_nest


def default_machine() -> Machine:
    """One processor per core of this computer, in a line."""
    return Machine(os.cpu_count() or 1)


def _dist(indices: list[IndexVar], placed: list[IndexVar | None], rest: str) -> str:
    """Cut each dimension indexed by a distributed variable; ``rest`` elsewhere."""
    names = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(indices)]
    rhs = [names[indices.index(v)] if v is not None and v in indices else rest for v in placed]
    return f"{names} -> {''.join(rhs)}"


def einsum(
    subscripts: str, *operands: Any, machine: Machine | None = None, schedule: Any = None
) -> np.ndarray:
    """Evaluate ``np.einsum(subscripts, *operands)`` as a distributed computation.

    ``schedule="auto"`` (the default, also ``None``): every tensor gets a one-copy
    distribution and a schedule chosen by the cost model (``distal.cost``); more
    than two operands run as one fused kernel or a sequence of pairwise kernels,
    whichever the model prefers. ``schedule="owner"``: the first statement
    variables (output ones first) are distributed over the machine,
    owner-computes, inputs replicated where a distributed variable does not index
    them, the output in one copy.
    """
    try:
        arrays = [np.asarray(x) for x in operands]
    except Exception as e:
        raise InputError(f"einsum operands must be arrays: {e}") from e
    for n, a in enumerate(arrays):
        if a.dtype.kind not in "biufc":
            raise InputError(f"einsum operand {n} has non-numeric dtype {a.dtype}")
    ins, out = parse_einsum(subscripts, [a.ndim for a in arrays])
    var = einsum_vars(ins, out)
    extent: dict[str, int] = {}
    for spec, a in zip(ins, arrays, strict=True):
        for c, n in zip(spec, a.shape, strict=True):
            if extent.setdefault(c, n) != n:
                raise ShapeError(f"index {c!r} has extents {extent[c]} and {n} in {subscripts!r}")
    m = machine if machine is not None else default_machine()
    if not isinstance(m, Machine):
        raise ScheduleError(f"machine must be a dl.Machine, got {m!r}")
    if schedule is None or schedule == "auto":
        from distal.cost.einsum_auto import einsum_auto

        return einsum_auto(ins, out, arrays, m)
    if schedule != "owner":
        raise ScheduleError(f"einsum schedule must be 'auto' or 'owner', got {schedule!r}")
    order = list(dict.fromkeys(out + "".join(ins)))
    grid = m if len(order) >= m.ndim else Machine(m.size)
    placed_letters = order[: grid.ndim] if len(order) >= grid.ndim else []
    placed: list[IndexVar | None] = [var[c] for c in placed_letters] or [None] * grid.ndim
    tensors = []
    for n, (spec, a) in enumerate(zip(ins, arrays, strict=True)):
        idx = [var[c] for c in spec]
        tensors.append(Tensor(f"T{n}", a.shape, _dist(idx, placed, "*"), grid, a.dtype))
    oidx = [var[c] for c in out]
    dtype = np.result_type(*arrays) if arrays else np.float64
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
