"""numpy's functions on DArrays: what ``distal.numpy``, the DArray methods and numpy's own
functions (``__array_function__``) run.

Each function records nodes (:mod:`distal.arrays.graph` for element-wise operations and
contractions, :mod:`distal.arrays.blocks` for the rest) and returns DArrays; nothing is
computed and nothing is gathered here. Operands that are not DArrays (numpy arrays,
lists, numbers) join the session of the DArray operands, or the current session
(:mod:`distal.arrays.current`) when there is none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from distal.arrays import creation, reductions, shapes, ufuncs
from distal.arrays import graph as g
from distal.arrays.blocks import Block, Kind, register
from distal.arrays.current import current
from distal.arrays.darray import DArray, operand
from distal.errors import InputError, NotSupportedYet, ShapeError

# -- operands ------------------------------------------------------------------------------------


def first_darray(xs: Sequence[Any]) -> DArray | None:
    for x in xs:
        if isinstance(x, DArray):
            return x
        if isinstance(x, list | tuple):
            got = first_darray(x)
            if got is not None:
                return got
    return None


def _session_program(like: DArray | None) -> tuple[Any, Any]:
    if like is not None:
        return like.session, like.program
    sess = current()
    return sess, sess.arrays_program()


def new(node: g.Node, like: DArray | None = None) -> DArray:
    """A handle on ``node`` (just made) in ``like``'s program, or the current session's."""
    sess, program = _session_program(like)
    if isinstance(node, g.Value) or node.as_value is not None:
        return DArray(sess, node, program)
    return DArray(sess, node, program, new=True)


def asdarray(x: Any, like: DArray | None = None, dtype: Any = None) -> DArray:
    """``x`` as a DArray of ``like``'s program (or the current session's): a DArray as it
    is (cast to ``dtype`` when given), anything array-like placed as a new value."""
    if isinstance(x, DArray):
        if like is not None:
            operand(like, x)  # one session, one machine
        return x if dtype is None else astype(x, dtype)
    sess, program = _session_program(like)
    if _is_sparse(x):  # a scipy / pydata sparse array or dl.SparseArray: a sparse DArray
        if dtype is not None:
            raise NotSupportedYet("asarray of a sparse matrix with dtype=")
        return sess.asarray(x, machine=program.nprocs)
    if isinstance(x, list | tuple) and first_darray(x) is not None:
        inner = like if like is not None else first_darray(x)
        got = stack([asdarray(e, inner) for e in x], 0)
        return got if dtype is None else astype(got, dtype)
    try:
        arr = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise InputError(f"{x!r} is not an array: {e}") from None
    if arr.dtype.kind not in "biufc":
        raise InputError(f"arrays of dtype {arr.dtype} are not supported (numbers only)")
    return sess.asarray(arr, machine=program.nprocs)


def nodes(xs: Sequence[Any]) -> tuple[DArray, list[g.Node]]:
    """The first DArray among ``xs`` (one made of the first array-like when there is none)
    and every operand as a node of its program (numbers as constants)."""
    first = first_darray(xs)
    if first is None:
        arrays = [x for x in xs if not _is_number(x)]
        first = asdarray(arrays[0] if arrays else xs[0])
        xs = [first if x is (arrays[0] if arrays else xs[0]) else x for x in xs]
    return first, [operand(first, x) for x in xs]


def _is_sparse(x: Any) -> bool:
    mod = type(x).__module__
    return mod.startswith(("scipy.sparse", "sparse", "distal.sparse")) and hasattr(x, "shape")


def _is_number(x: Any) -> bool:
    return isinstance(x, bool | int | float | complex | np.generic) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    )


# -- element-wise --------------------------------------------------------------------------------


def elementwise(op: str, *xs: Any) -> DArray:
    """Element-wise ``op`` (a name of :data:`distal.arrays.ufuncs.TABLE`) over ``xs``."""
    first, ns = nodes(xs)
    return first._wrap(g.map_node(op, *ns), new=True)


def astype(x: Any, dtype: Any, copy: bool = True) -> DArray:
    x = asdarray(x)
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise InputError(f"astype: {dtype!r} is not a dtype: {e}") from None
    if dt.kind not in "biufc":
        raise InputError(f"astype: dtype {dt} is not numeric")
    if dt == x.dtype:
        return copy_of(x) if copy else x
    return x._wrap(g.map_node(ufuncs.astype(dt), x.node), new=True)


def copy_of(x: DArray) -> DArray:
    """A new handle on ``x``'s value (values never change: in-place operations rebind
    the handle they are made on, so a copy is never touched by them)."""
    return DArray(x.session, x.node, x.program)


def where(cond: Any, a: Any = None, b: Any = None) -> DArray:
    if a is None and b is None:
        raise NotSupportedYet(
            "numpy.where with one argument (nonzero): its shape depends on the values"
        )
    first, (c, x, y) = nodes([cond, a, b])
    if c.dtype != np.dtype(bool):
        c = g.map_node("ne", c, g.const(0))
    return first._wrap(g.map_node("where", c, x, y), new=True)


def clip(x: Any, lo: Any = None, hi: Any = None) -> DArray:
    out = asdarray(x) if not isinstance(x, DArray) else x
    dt = out.dtype
    if lo is not None:
        out = elementwise("maximum", out, lo)
    if hi is not None:
        out = elementwise("minimum", out, hi)
    if lo is None and hi is None:
        return copy_of(out)
    if out.dtype != dt and all(_is_number(v) or v is None for v in (lo, hi)):
        out = astype(out, dt, copy=False)
    return out


def isclose(
    a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> DArray:
    op = f"isclose|{float(rtol)!r},{float(atol)!r},{int(bool(equal_nan))}"
    return elementwise(op, a, b)


# -- reductions ------------------------------------------------------------------------------------


def _keep(x: DArray, axis: Any, keepdims: bool, node: g.Node) -> DArray:
    out = x._wrap(node, new=True)
    if keepdims:
        axes = reductions.normalize_axes(axis, x.ndim, "keepdims")
        shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
        return reshape(out, shape)
    return out


def sum_(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> DArray:
    x = asdarray(x)
    if dtype is None and x.dtype.kind in "fc" and x.ndim:
        reductions.normalize_axes(axis, x.ndim, "sum")
        return _keep(x, axis, keepdims, g.reduce_sum(x.node, axis))
    return x._wrap(reductions.reduce(x.node, "sum", axis, keepdims, dtype), new=True)


def reduce(x: Any, op: str, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> DArray:
    if op == "sum":
        return sum_(x, axis, dtype, keepdims)
    x = asdarray(x)
    return x._wrap(reductions.reduce(x.node, op, axis, keepdims, dtype), new=True)


def _count(x: DArray, axis: Any) -> int:
    axes = reductions.normalize_axes(axis, x.ndim, "mean")
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def mean(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> DArray:
    x = asdarray(x)
    dt = np.dtype(dtype) if dtype is not None else None
    if dt is None:
        dt = np.dtype(np.float64) if x.dtype.kind in "biu" else x.dtype
    n = _count(x, axis)
    s = sum_(x if x.dtype == dt else astype(x, dt), axis, None, keepdims)
    if n == 0:
        return s * dt.type(np.nan)
    return elementwise("div", s, dt.type(n)) if dt.kind in "fc" else s / n


def var(
    x: Any, axis: Any = None, dtype: Any = None, ddof: float = 0, keepdims: bool = False
) -> DArray:
    x = asdarray(x)
    m = mean(x, axis, dtype, keepdims=True)
    dt = m.dtype
    d = (x if x.dtype == dt else astype(x, dt)) - m
    sq = elementwise("real", d * elementwise("conjugate", d)) if dt.kind == "c" else d * d
    n = _count(x, axis)
    s = sum_(sq, axis, None, keepdims)
    out_dt = s.dtype
    return elementwise("div", s, out_dt.type(max(n - ddof, 0)))


def std(
    x: Any, axis: Any = None, dtype: Any = None, ddof: float = 0, keepdims: bool = False
) -> DArray:
    return elementwise("sqrt", var(x, axis, dtype, ddof, keepdims))


def arg(x: Any, op: str, axis: Any = None, keepdims: bool = False) -> DArray:
    x = asdarray(x)
    return x._wrap(reductions.arg(x.node, op, axis, keepdims), new=True)


def cumulative(x: Any, op: str, axis: Any = None, dtype: Any = None) -> DArray:
    x = asdarray(x)
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    if x.ndim == 0:
        x = reshape(x, (1,))
    node = reductions.cumulative(x.node, op, axis, dtype, x.program.nprocs)
    return x._wrap(node, new=True)


def count_nonzero(x: Any, axis: Any = None, keepdims: bool = False) -> DArray:
    x = asdarray(x)
    return reduce(elementwise("ne", x, 0), "sum", axis, keepdims, np.intp)


# -- shapes ----------------------------------------------------------------------------------------


def reshape(x: Any, shape: Any) -> DArray:
    x = asdarray(x)
    node = shapes.reshape(x.node, shape)
    return x if node is x.node else x._wrap(node, new=True)


def transpose(x: Any, axes: Any = None) -> DArray:
    x = asdarray(x)
    if axes is not None:
        axes = tuple(int(a) % max(x.ndim, 1) for a in axes)
    node = g.transpose(x.node, axes)
    return x if node is x.node else x._wrap(node, new=True)


def moveaxis(x: Any, source: Any, destination: Any) -> DArray:
    x = asdarray(x)
    src = tuple(int(a) % x.ndim for a in (source if isinstance(source, Sequence) else [source]))
    dst = tuple(
        int(a) % x.ndim
        for a in (destination if isinstance(destination, Sequence) else [destination])
    )
    order = [n for n in range(x.ndim) if n not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return transpose(x, tuple(order))


def swapaxes(x: Any, a: int, b: int) -> DArray:
    x = asdarray(x)
    order = list(range(x.ndim))
    a, b = int(a) % x.ndim, int(b) % x.ndim
    order[a], order[b] = order[b], order[a]
    return transpose(x, tuple(order))


def expand_dims(x: Any, axis: Any) -> DArray:
    x = asdarray(x)
    axes = axis if isinstance(axis, tuple | list) else (axis,)
    nd = x.ndim + len(axes)
    where_ = sorted(int(a) % nd if -nd <= a < nd else _bad_axis(a, nd) for a in axes)
    shape = list(x.shape)
    for a in where_:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def _bad_axis(a: Any, nd: int) -> int:
    raise InputError(f"axis {a!r} is out of range for {nd} axes")


def squeeze(x: Any, axis: Any = None) -> DArray:
    x = asdarray(x)
    if axis is None:
        axes = tuple(d for d, n in enumerate(x.shape) if n == 1)
    else:
        axes = reductions.normalize_axes(axis, x.ndim, "squeeze")
        if any(x.shape[a] != 1 for a in axes):
            raise ShapeError(f"squeeze: an axis of {axes} of {x.shape} is not of length 1")
    return reshape(x, tuple(n for d, n in enumerate(x.shape) if d not in axes))


def concatenate(xs: Sequence[Any], axis: Any = 0, dtype: Any = None) -> DArray:
    xs = list(xs)
    first = first_darray(xs)
    arrays = [asdarray(x, first) for x in xs]
    like = first if first is not None else arrays[0]
    out = like._wrap(shapes.concatenate([a.node for a in arrays], axis), new=True)
    return out if dtype is None else astype(out, dtype, copy=False)


def stack(xs: Sequence[Any], axis: int = 0) -> DArray:
    xs = list(xs)
    if not xs:
        raise InputError("stack: need at least one array")
    first = first_darray(xs)
    arrays = [asdarray(x, first) for x in xs]
    shapes_ = {a.shape for a in arrays}
    if len(shapes_) != 1:
        raise ShapeError(f"stack: all input arrays must have the same shape, got {sorted(shapes_)}")
    nd = arrays[0].ndim + 1
    if not -nd <= axis < nd:
        raise InputError(f"stack: axis {axis} is out of range for {nd} axes")
    return concatenate([expand_dims(a, axis) for a in arrays], axis)


def hstack(xs: Sequence[Any]) -> DArray:
    arrays = [atleast_nd(x, 1, first_darray(xs)) for x in xs]
    return concatenate(arrays, 0 if arrays[0].ndim == 1 else 1)


def vstack(xs: Sequence[Any]) -> DArray:
    return concatenate([atleast_nd(x, 2, first_darray(xs)) for x in xs], 0)


def dstack(xs: Sequence[Any]) -> DArray:
    return concatenate([atleast_nd(x, 3, first_darray(xs)) for x in xs], 2)


def column_stack(xs: Sequence[Any]) -> DArray:
    first = first_darray(xs)
    cols = []
    for x in xs:
        a = asdarray(x, first)
        cols.append(reshape(a, (a.shape[0], 1)) if a.ndim < 2 else a)
    return concatenate(cols, 1)


def atleast_nd(x: Any, n: int, like: DArray | None = None) -> DArray:
    a = asdarray(x, like)
    if a.ndim >= n:
        return a
    if n == 1:
        return reshape(a, (1,))
    if n == 2:
        return reshape(a, (1, *a.shape) if a.ndim == 1 else (1, 1))
    if a.ndim == 0:
        return reshape(a, (1, 1, 1))
    if a.ndim == 1:
        return reshape(a, (1, a.shape[0], 1))
    return reshape(a, (*a.shape, 1))


def broadcast_to(x: Any, shape: Any) -> DArray:
    x = asdarray(x)
    node = shapes.broadcast_to(x.node, shape)
    return x if node is x.node else x._wrap(node, new=True)


def broadcast_arrays(*xs: Any) -> list[DArray]:
    first = first_darray(xs)
    arrays = [asdarray(x, first) for x in xs]
    try:
        shape = np.broadcast_shapes(*[a.shape for a in arrays])
    except ValueError:
        raise ShapeError(f"shapes {[a.shape for a in arrays]} do not broadcast") from None
    return [broadcast_to(a, shape) for a in arrays]


def tile(x: Any, reps: Any) -> DArray:
    x = asdarray(x)
    return x._wrap(shapes.tile(x.node, reps), new=True)


def repeat(x: Any, reps: Any, axis: Any = None) -> DArray:
    x = asdarray(x)
    return x._wrap(shapes.repeat(x.node, reps, axis), new=True)


def flip(x: Any, axis: Any = None) -> DArray:
    x = asdarray(x)
    node = shapes.flip(x.node, axis)
    return x if node is x.node else x._wrap(node, new=True)


def roll(x: Any, shift: Any, axis: Any = None) -> DArray:
    x = asdarray(x)
    node = shapes.roll(x.node, shift, axis)
    return copy_of(x) if node is x.node else x._wrap(node, new=True)


def diag(x: Any, k: int = 0) -> DArray:
    x = asdarray(x)
    return x._wrap(shapes.diag(x.node, k), new=True)


def diagonal(x: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> DArray:
    x = asdarray(x)
    if x.ndim != 2 or {axis1 % 2, axis2 % 2} != {0, 1}:
        raise NotSupportedYet("diagonal: of a 2-D array only (offset allowed)")
    if axis1 % 2 == 1:
        x = transpose(x)
    return diag(x, offset)


def triu(x: Any, k: int = 0) -> DArray:
    x = asdarray(x)
    return x._wrap(shapes.tri(x.node, k, True), new=True)


def tril(x: Any, k: int = 0) -> DArray:
    x = asdarray(x)
    return x._wrap(shapes.tri(x.node, k, False), new=True)


def diff_once(x: DArray, axis: int) -> DArray:
    return x._wrap(shapes.diff(x.node, axis), new=True)


def sort(x: Any, axis: int = -1, descending: bool = False) -> DArray:
    x = asdarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return x._wrap(shapes.sort(x.node, axis, "sort", descending), new=True)


def argsort(x: Any, axis: int = -1, descending: bool = False) -> DArray:
    x = asdarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return x._wrap(shapes.sort(x.node, axis, "argsort", descending), new=True)


def meshgrid(
    *xs: Any, indexing: str = "xy", sparse: bool = False, copy: bool = True
) -> list[DArray]:
    if indexing not in ("xy", "ij"):
        raise InputError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    first = first_darray(xs)
    vs = [reshape(asdarray(x, first), (-1,)) for x in xs]
    n = len(vs)
    out_shape = [v.shape[0] for v in vs]
    if indexing == "xy" and n > 1:
        out_shape[0], out_shape[1] = out_shape[1], out_shape[0]
    got = []
    for i, v in enumerate(vs):
        axis = i
        if indexing == "xy" and n > 1 and i < 2:
            axis = 1 - i
        shape = [1] * n
        shape[axis] = v.shape[0]
        r = reshape(v, tuple(shape))
        got.append(r if sparse else broadcast_to(r, tuple(out_shape)))
    return got


# -- out= ------------------------------------------------------------------------------------------


def assign_out(value: DArray, out: Any, what: str = "out=") -> DArray:
    """numpy's ``out=``: the value written into the DArray ``out`` (broadcast to it, cast
    by numpy's ``same_kind`` rule, through a view into its base), which every holder of
    that handle then reads (:func:`distal.arrays.views.update`)."""
    from distal.arrays import views

    if out is None:
        return value
    if isinstance(out, tuple):
        if len(out) != 1:
            raise InputError("out=: one output array expected")
        out = out[0]
    if not isinstance(out, DArray):
        raise InputError(
            f"out= must be a DArray (got {type(out).__name__}): a numpy array would need the "
            "value gathered; assign np.asarray(result) yourself"
        )
    operand(out, value)
    views.update(out, value.node, what)
    return out


# -- bincount --------------------------------------------------------------------------------------


def _bincount(spec: tuple, arrays: list[np.ndarray], box: Any) -> Any:
    _, length, weighted = spec
    w = arrays[1] if weighted else None
    return np.bincount(arrays[0], weights=w, minlength=length)[None, :]


def _bincount_combine(spec: tuple, parts: list[Any]) -> Any:
    _, length, weighted = spec
    if not parts:
        return np.zeros(length, np.float64 if weighted else np.intp)
    return np.sum(np.concatenate(parts, axis=0), axis=0)


register("bincount", Kind(_bincount, _bincount_combine))


def bincount(x: Any, weights: Any = None, minlength: int = 0) -> DArray:
    """numpy's ``bincount``: its length is the largest value plus one, which depends on
    the values: that maximum is read (one number) before the counts are recorded."""
    x = asdarray(x)
    if x.ndim != 1 or x.dtype.kind not in "iub":
        raise InputError("bincount: a 1-D array of non-negative integers")
    length = int(minlength)
    if x.shape[0]:
        if int(reduce(x, "min")) < 0:
            raise InputError("bincount: the input has negative values")
        length = max(length, int(reduce(x, "max")) + 1)
    ops: tuple[g.Node, ...] = (x.node,)
    dt = np.dtype(np.intp)
    if weights is not None:
        w = asdarray(weights, x)
        if w.shape != x.shape:
            raise ShapeError("bincount: weights must have the input's shape")
        ops = (x.node, w.node)
        dt = np.dtype(np.float64)
    node = Block((length,), dt, ("bincount", length, weights is not None), ops, "partials",
                 (True,) * len(ops))  # fmt: skip
    return x._wrap(node, new=True)


# -- creation --------------------------------------------------------------------------------------


def made(node: g.Node, like: DArray | None = None) -> DArray:
    return new(node, like)


def full(shape: Any, value: Any, dtype: Any = None) -> DArray:
    if isinstance(value, DArray):
        return broadcast_to(astype(value, dtype or value.dtype, copy=False), _shape_of(shape))
    return made(creation.full(shape, value, dtype))


def _shape_of(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int | np.integer) else tuple(int(n) for n in shape)


__all__ = ["asdarray", "elementwise", "first_darray", "new"]
