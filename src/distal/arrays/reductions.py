"""Reductions over axes: numpy's ``sum``, ``prod``, ``max``, ``min``, ``any``, ``all``,
``argmax``, ``argmin``, ``mean``, ``var``, ``std``, ``cumsum``, ``cumprod``.

A plain ``sum`` over any axes is a contraction (index notation, with its plan's exact
traffic). The others are block operations (:mod:`distal.arrays.blocks`):

* over axes that leave the first axis, each processor reduces its own rows: a ``rows``
  block, nothing moves;
* over the first axis (or all axes), each processor reduces its block to a partial (one
  row of the result per processor) and the partials are combined in processor order, on
  every process alike: a ``partials`` block, whose result is held replicated (it is small:
  what the reduction leaves). An argmax's partial carries its block's maximum and where it
  is, so the combination picks numpy's first occurrence.

The element-wise tree feeding a reduction is computed inside it (``(x - m).max(axis=1)``
is one pass over ``x``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays import graph as g
from distal.arrays.blocks import Block, Kind, held_boxes, register
from distal.errors import InputError, NotSupportedYet

#: reductions as block operations, by name: numpy's function and whether it has an identity
#: (an empty reduction without one is numpy's ValueError, here an InputError)
_OPS = {
    "sum": (np.sum, True),
    "prod": (np.prod, True),
    "max": (np.max, False),
    "min": (np.min, False),
    "any": (np.any, True),
    "all": (np.all, True),
}


def normalize_axes(axis: Any, ndim: int, what: str) -> tuple[int, ...]:
    """numpy's ``axis`` (None, an int or a tuple of ints, negative allowed) as sorted
    non-negative axes; an axis out of range or given twice is an ``InputError``."""
    if axis is None:
        return tuple(range(ndim))
    raw = axis if isinstance(axis, tuple | list) else (axis,)
    out: list[int] = []
    for a in raw:
        if isinstance(a, bool) or not isinstance(a, int | np.integer):
            raise InputError(f"{what}: axis {a!r} is not an integer")
        if not -max(ndim, 1) <= a < max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
            raise InputError(f"{what}: axis {a!r} is out of range for a {ndim}-D array")
        a = int(a) % ndim if ndim else 0
        if a in out:
            raise InputError(f"{what}: axis {a} given twice")
        out.append(a)
    return tuple(sorted(out)) if ndim else ()


def _result_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


# -- the block kind --------------------------------------------------------------------------------


def _reduce(spec: tuple, arrays: list[np.ndarray], box: Any) -> Any:
    """A rows unit (the reduced rows) or a partial (the block reduced over the axes, the
    first kept as one row)."""
    _, op, axes, keepdims, dt, partial, _, _ = spec
    f = _OPS[op][0]
    dtype = None if dt is None else np.dtype(dt)
    x = arrays[0]
    with np.errstate(all="ignore"):
        if partial:
            return (
                f(x, axis=axes, keepdims=True, dtype=dtype)
                if op in ("sum", "prod")
                else f(x, axis=axes, keepdims=True)
            )
        if op in ("sum", "prod"):
            return f(x, axis=axes, keepdims=keepdims, dtype=dtype)
        return f(x, axis=axes, keepdims=keepdims)


def _combine(spec: tuple, parts: list[Any]) -> Any:
    _, op, axes, keepdims, dt, _, shape, in_dt = spec
    f = _OPS[op][0]
    kw = {} if dt is None or op not in ("sum", "prod") else {"dtype": np.dtype(dt)}
    with np.errstate(all="ignore"):
        if not parts:  # every block empty: numpy's reduction of the empty operand
            return f(np.empty(shape, np.dtype(in_dt)), axis=axes, keepdims=keepdims, **kw)
        if not shape:
            return np.asarray(parts[0])
        stacked = np.concatenate([np.asarray(p) for p in parts], axis=0)
        out = f(stacked, axis=0, keepdims=True, **kw)
    return np.reshape(out, _result_shape(shape, axes, keepdims))


register("reduce", Kind(_reduce, _combine))


def reduce(x: g.Node, op: str, axis: Any, keepdims: bool, dtype: Any) -> g.Node:
    """``op`` (a key of :data:`_OPS`) of ``x`` over ``axis`` as numpy's (its dtype rules
    too: a sum of booleans or narrow integers in the default integer, ``any``/``all``
    boolean)."""
    axes = normalize_axes(axis, x.ndim, op)
    shape = _result_shape(x.shape, axes, keepdims)
    probe_dtype = None if dtype is None else np.dtype(dtype)
    try:
        probe = np.zeros((1,) * x.ndim, x.dtype)
        if op in ("sum", "prod"):
            out_dtype = np.asarray(_OPS[op][0](probe, dtype=probe_dtype)).dtype
        else:
            if dtype is not None:
                raise NotSupportedYet(f"{op}: dtype= (numpy's {op} takes none either)")
            out_dtype = np.asarray(_OPS[op][0](probe)).dtype
    except TypeError as e:
        raise InputError(f"{op}: numpy refuses dtype {x.dtype}: {e}") from None
    if out_dtype.kind not in "biufc":
        raise InputError(f"{op}: result dtype {out_dtype} is not numeric")
    reduced = int(np.prod([x.shape[a] for a in axes], dtype=np.int64)) if axes else 1
    if reduced == 0 and not _OPS[op][1] and int(np.prod(shape, dtype=np.int64)) > 0:
        raise InputError(
            f"{op}: zero-size reduction over axes {axes} of a {x.shape} array has no identity"
        )
    partial = 0 in axes or x.ndim == 0
    dt = None if dtype is None else np.dtype(dtype).str
    spec = ("reduce", op, axes, bool(keepdims), dt, partial, x.shape, x.dtype.str)
    mode = "partials" if partial else "rows"
    aligned = (bool(x.shape),) if partial else (bool(shape) and 0 not in axes,)
    return Block(shape, out_dtype, spec, (x,), mode, aligned)


# -- argmax / argmin -------------------------------------------------------------------------------


def _arg(spec: tuple, arrays: list[np.ndarray], box: Any) -> Any:
    _, op, axis, keepdims, partial, shape = spec
    x = arrays[0]
    f = np.argmax if op == "argmax" else np.argmin
    if not partial:
        return f(x, axis=axis, keepdims=keepdims)
    lo = box[0][0] if box else 0
    if axis is None:  # the flat index of the block's first occurrence, and its value
        if x.size == 0:
            return None
        i = int(f(x))
        row = int(np.prod(shape[1:], dtype=np.int64)) if shape else 1
        return (np.asarray([lo * row + i]), x.reshape(-1)[i : i + 1])
    i = f(x, axis=0, keepdims=True)
    v = np.take_along_axis(x, i, axis=0)
    return (i + lo, v)


def _arg_combine(spec: tuple, parts: list[Any]) -> Any:
    _, op, axis, keepdims, _, shape = spec
    parts = [p for p in parts if p is not None]
    f = np.argmax if op == "argmax" else np.argmin
    idx = np.concatenate([p[0] for p in parts], axis=0)
    val = np.concatenate([p[1] for p in parts], axis=0)
    # the first block holding the extreme (a nan first, as numpy's): argmax of the block
    # extremes, the first one on a tie, is the first occurrence overall
    k = f(val, axis=0)
    got = np.take_along_axis(idx, np.expand_dims(np.asarray(k), 0), axis=0)[0]
    if axis is None:
        got = np.asarray(got).reshape(())
        return got.reshape((1,) * len(shape)) if keepdims else got
    return np.expand_dims(got, 0) if keepdims else got


register("arg", Kind(_arg, _arg_combine))


def arg(x: g.Node, op: str, axis: Any, keepdims: bool) -> g.Node:
    """numpy's ``argmax`` / ``argmin`` (``axis`` None: a flat index)."""
    if axis is None:
        axes: tuple[int, ...] = tuple(range(x.ndim))
        ax = None
    else:
        axes = normalize_axes(axis, x.ndim, op)
        if len(axes) != 1:
            raise InputError(f"{op}: axis must be one integer or None, got {axis!r}")
        ax = axes[0]
    if int(np.prod(x.shape, dtype=np.int64)) == 0:
        raise InputError(f"{op}: an empty sequence has no {op[3:]}imum")
    if ax is not None and x.shape[ax] == 0:
        raise InputError(f"{op}: an empty axis has no {op[3:]}imum")
    if keepdims:
        shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    else:
        shape = tuple(n for d, n in enumerate(x.shape) if d not in axes)
    partial = x.ndim == 0 or ax is None or ax == 0
    spec = ("arg", op, ax, bool(keepdims), partial, x.shape)
    mode = "partials" if partial else "rows"
    return Block(shape, np.dtype(np.intp), spec, (x,), mode, (True,))


# -- cumulative sums and products ------------------------------------------------------------------


def _cum(spec: tuple, arrays: list[np.ndarray], box: Any) -> Any:
    _, op, axis, dt, shape, nprocs = spec
    f = np.cumsum if op == "cumsum" else np.cumprod
    dtype = None if dt is None else np.dtype(dt)
    x = arrays[0]
    with np.errstate(all="ignore"):
        out = f(x, axis=axis, dtype=dtype)
        if axis != 0 or len(arrays) == 1:
            return out
        totals = arrays[1]  # each block's total, in block order
        lo = box[0][0]
        b = sum(1 for c in held_boxes(shape, nprocs) if c[0][1] <= lo and c[0][1] > c[0][0])
        if b:
            before = np.sum(totals[:b], axis=0) if op == "cumsum" else np.prod(totals[:b], axis=0)
            out = out + before if op == "cumsum" else out * before
        return out.astype(out.dtype if dtype is None else dtype, copy=False)


def _totals(spec: tuple, arrays: list[np.ndarray], box: Any) -> Any:
    _, op, dt = spec
    dtype = None if dt is None else np.dtype(dt)
    f = np.sum if op == "cumsum" else np.prod
    return f(arrays[0], axis=0, keepdims=True, dtype=dtype)


def _totals_combine(spec: tuple, parts: list[Any]) -> Any:
    return np.concatenate(parts, axis=0)


register("cum", Kind(_cum))
register("cumtotals", Kind(_totals, _totals_combine))


def cumulative(x: g.Node, op: str, axis: int, dtype: Any, nprocs: int) -> g.Node:
    """numpy's ``cumsum`` / ``cumprod`` along ``axis`` of an array of one or more axes
    (along the first: each processor's running sums of its rows, plus the totals of the
    blocks before it, combined from the blocks' partials)."""
    (ax,) = normalize_axes(axis, x.ndim, op)
    probe = np.zeros((1,) * x.ndim, x.dtype)
    f = np.cumsum if op == "cumsum" else np.cumprod
    out_dtype = f(probe, axis=ax, dtype=None if dtype is None else np.dtype(dtype)).dtype
    dt = None if dtype is None else np.dtype(dtype).str
    spec = ("cum", op, ax, dt, x.shape, nprocs)
    if ax != 0:
        return Block(x.shape, out_dtype, spec, (x,), "rows", (True,))
    blocks = sum(1 for b in held_boxes(x.shape, nprocs) if b[0][1] > b[0][0])
    totals = Block(
        (blocks, *x.shape[1:]), out_dtype, ("cumtotals", op, out_dtype.str), (x,), "partials"
    )
    return Block(x.shape, out_dtype, spec, (x, totals), "rows", (True, False))
