"""``distal.numpy``'s functions with numpy's signatures (and the array API's keywords:
``device=``, ``copy=``, ``correction=``, ...), each a thin call of
:mod:`distal.arrays.functions`."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from distal.arrays import functions as F
from distal.arrays import products as P
from distal.arrays.darray import DArray
from distal.arrays.keywords import refuse_keywords
from distal.arrays.methods import round_values
from distal.errors import InputError, NotSupportedYet, ShapeError

# -- element-wise functions that are not ufuncs ----------------------------------------------------


def where(condition: Any, x: Any = None, y: Any = None, /) -> DArray:
    return F.where(condition, x, y)


def clip(
    a: Any,
    /,
    min: Any = None,
    max: Any = None,
    out: Any = None,
    *,
    a_min: Any = None,
    a_max: Any = None,
    **kw: Any,
) -> DArray:
    """numpy's ``clip`` (the array API's names ``min`` and ``max``; numpy's ``a_min`` and
    ``a_max`` by keyword)."""
    for k in ("casting", "order", "subok"):  # a ufunc's keywords that change no value here
        kw.pop(k, None)
    refuse_keywords("clip", kw, where=True)
    lo = a_min if min is None else min
    hi = a_max if max is None else max
    return F.assign_out(F.clip(a, lo, hi), out)


def round(a: Any, decimals: int = 0, out: Any = None) -> DArray:
    return F.assign_out(round_values(a, decimals), out)


around = round


def isclose(
    a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> DArray:
    return F.isclose(a, b, rtol, atol, equal_nan)


def allclose(
    a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> bool:
    """numpy's ``allclose``: a Python bool (one value read)."""
    return bool(F.reduce(F.isclose(a, b, rtol, atol, equal_nan), "all"))


def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> bool:
    """numpy's ``array_equal``: a Python bool (one value read)."""
    first = F.first_darray([a1, a2])
    x, y = F.asdarray(a1, first), F.asdarray(a2, first)
    if x.shape != y.shape:
        return False
    eq = F.elementwise("eq", x, y)
    if equal_nan:
        both = F.elementwise("logical_and", F.elementwise("isnan", x), F.elementwise("isnan", y))
        eq = F.elementwise("logical_or", eq, both)
    return bool(F.reduce(eq, "all"))


def nan_to_num(
    x: Any, copy: bool = True, nan: float = 0.0, posinf: Any = None, neginf: Any = None
) -> DArray:
    x = F.asdarray(x)
    if x.dtype.kind not in "fc":
        return F.copy_of(x)
    fi = np.finfo(x.dtype)
    out = F.where(F.elementwise("isnan", x), nan, x)
    out = F.where(F.elementwise("isinf", x) & (x > 0), fi.max if posinf is None else posinf, out)
    return F.where(F.elementwise("isinf", x) & (x < 0), fi.min if neginf is None else neginf, out)


# -- shapes ----------------------------------------------------------------------------------------


def reshape(
    a: Any, /, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None
) -> DArray:
    if shape is None:
        shape = newshape
    if order != "C":
        raise NotSupportedYet("reshape: order='C' only")
    got = F.reshape(a, shape)
    return F.copy_of(got) if copy else got


def ravel(a: Any, order: str = "C") -> DArray:
    return F.reshape(a, (-1,))


def transpose(a: Any, axes: Any = None) -> DArray:
    return F.transpose(a, axes)


def permute_dims(x: Any, /, axes: Any) -> DArray:
    return F.transpose(x, tuple(axes))


def matrix_transpose(x: Any, /) -> DArray:
    return F.asdarray(x).mT


moveaxis = F.moveaxis
swapaxes = F.swapaxes


def expand_dims(a: Any, axis: Any = 0) -> DArray:
    return F.expand_dims(a, axis)


def squeeze(a: Any, axis: Any = None) -> DArray:
    return F.squeeze(a, axis)


def concatenate(
    arrays: Sequence[Any],
    axis: Any = 0,
    out: Any = None,
    dtype: Any = None,
    casting: str = "same_kind",
) -> DArray:
    return F.assign_out(F.concatenate(arrays, axis, dtype), out)


def concat(arrays: Sequence[Any], /, *, axis: Any = 0) -> DArray:
    return F.concatenate(arrays, axis)


def stack(
    arrays: Sequence[Any],
    axis: int = 0,
    out: Any = None,
    *,
    dtype: Any = None,
    casting: str = "same_kind",
) -> DArray:
    got = F.stack(arrays, axis)
    return F.assign_out(got if dtype is None else F.astype(got, dtype, copy=False), out)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[DArray, ...]:
    """The array's slices along ``axis`` (each a view, as numpy's indexing gives)."""
    x = F.asdarray(x)
    if x.ndim == 0:
        raise InputError("unstack: a 0-d array has no axis")
    ax = int(axis) % x.ndim
    lead = (slice(None),) * ax
    return tuple(x[(*lead, i)] for i in range(x.shape[ax]))


def hstack(tup: Sequence[Any], *, dtype: Any = None, casting: str = "same_kind") -> DArray:
    got = F.hstack(tup)
    return got if dtype is None else F.astype(got, dtype, copy=False)


def vstack(tup: Sequence[Any], *, dtype: Any = None, casting: str = "same_kind") -> DArray:
    got = F.vstack(tup)
    return got if dtype is None else F.astype(got, dtype, copy=False)


row_stack = vstack
dstack = F.dstack
column_stack = F.column_stack


def atleast_1d(*arys: Any) -> Any:
    got = [F.atleast_nd(a, 1, F.first_darray(arys)) for a in arys]
    return got[0] if len(got) == 1 else tuple(got)


def atleast_2d(*arys: Any) -> Any:
    got = [F.atleast_nd(a, 2, F.first_darray(arys)) for a in arys]
    return got[0] if len(got) == 1 else tuple(got)


def atleast_3d(*arys: Any) -> Any:
    got = [F.atleast_nd(a, 3, F.first_darray(arys)) for a in arys]
    return got[0] if len(got) == 1 else tuple(got)


def broadcast_to(array: Any, /, shape: Any, subok: bool = False) -> DArray:
    return F.broadcast_to(array, shape)


def broadcast_arrays(*args: Any, subok: bool = False) -> Any:
    return F.broadcast_arrays(*args)


def tile(A: Any, reps: Any) -> DArray:
    return F.tile(A, reps)


def repeat(a: Any, repeats: Any, axis: Any = None) -> DArray:
    return F.repeat(a, repeats, axis)


def flip(m: Any, axis: Any = None) -> DArray:
    return F.flip(m, axis)


def fliplr(m: Any) -> DArray:
    return F.flip(m, 1)


def flipud(m: Any) -> DArray:
    return F.flip(m, 0)


def roll(a: Any, shift: Any, axis: Any = None) -> DArray:
    return F.roll(a, shift, axis)


def diag(v: Any, k: int = 0) -> DArray:
    return F.diag(v, k)


def diagonal(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> DArray:
    return F.diagonal(a, offset, axis1, axis2)


def diagflat(v: Any, k: int = 0) -> DArray:
    return F.diag(F.reshape(v, (-1,)), k)


def trace(
    a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None
) -> DArray:
    got = P.trace(F.diagonal(a, offset, axis1, axis2))
    return F.assign_out(got if dtype is None else F.astype(got, dtype, copy=False), out)


def triu(m: Any, k: int = 0) -> DArray:
    return F.triu(m, k)


def tril(m: Any, k: int = 0) -> DArray:
    return F.tril(m, k)


def sort(
    a: Any,
    axis: Any = -1,
    kind: Any = None,
    order: Any = None,
    *,
    descending: bool = False,
    stable: bool = True,
) -> DArray:
    if order is not None:
        raise NotSupportedYet("sort: order= (structured arrays)")
    return F.sort(a, axis, descending)


def argsort(
    a: Any,
    axis: Any = -1,
    kind: Any = None,
    order: Any = None,
    *,
    descending: bool = False,
    stable: bool = True,
) -> DArray:
    if order is not None:
        raise NotSupportedYet("argsort: order= (structured arrays)")
    return F.argsort(a, axis, descending)


def bincount(x: Any, /, weights: Any = None, minlength: int = 0) -> DArray:
    return F.bincount(x, weights, minlength)


def diff(a: Any, n: int = 1, axis: int = -1, prepend: Any = None, append: Any = None) -> DArray:
    """numpy's ``diff`` (``prepend`` / ``append`` concatenated first, as numpy does)."""
    x = F.asdarray(a)
    if x.ndim == 0:
        raise InputError("diff: a 0-d array has no axis")
    ax = int(axis) % x.ndim
    parts = []
    for extra in (prepend, x, append):
        if extra is None:
            continue
        e = F.asdarray(extra, x)
        if e.ndim == 0:
            e = F.broadcast_to(e, tuple(1 if d == ax else s for d, s in enumerate(x.shape)))
        parts.append(e)
    if len(parts) > 1:
        x = F.concatenate(parts, ax)
    for _ in range(int(n)):
        x = F.diff_once(x, ax)
    return x


def searchsorted(a: Any, v: Any, side: str = "left", sorter: Any = None) -> DArray:
    from distal.arrays import shapes

    if sorter is not None:
        raise NotSupportedYet("searchsorted: sorter=")
    first = F.first_darray([a, v])
    x1, x2 = F.asdarray(a, first), F.asdarray(v, first)
    if x1.ndim != 1:
        raise InputError("searchsorted: the sorted array must be 1-D")
    node = shapes.Block(
        x2.shape,
        np.dtype(np.intp),
        ("searchsorted", side),
        (x2.node, x1.node),
        "rows",
        (True, False),
    )
    return x2._wrap(node, new=True)


def nonzero(a: Any) -> Any:
    """numpy's ``nonzero`` (its count is read first: the shape depends on the values)."""
    from distal.arrays import datadep

    return datadep.nonzero(F.asdarray(a))


def argwhere(a: Any) -> DArray:
    return F.stack(list(nonzero(a)), 1)


def flatnonzero(a: Any) -> DArray:
    return nonzero(F.reshape(a, (-1,)))[0]


def unique(
    ar: Any,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: Any = None,
    *,
    equal_nan: bool = True,
) -> Any:
    """numpy's ``unique`` (flattened; the number of distinct values is read first)."""
    from distal.arrays import datadep

    if axis is not None:
        raise NotSupportedYet("unique: axis=")
    x = F.asdarray(ar)
    if equal_nan and x.dtype.kind in "fc" and bool(F.reduce(F.elementwise("isnan", x), "any")):
        raise NotSupportedYet("unique with NaNs and equal_nan=True (NaNs are distinct here)")
    got = datadep.unique(F.reshape(x, (-1,)), return_index, return_inverse, return_counts)
    return got[0] if len(got) == 1 else got


def unique_values(x: Any, /) -> DArray:
    from distal.arrays import datadep

    return datadep.unique(F.asdarray(x), False, False, False)[0]


def unique_counts(x: Any, /) -> Any:
    from distal.arrays import datadep

    return _UniqueCounts(*datadep.unique(F.asdarray(x), False, False, True))


def unique_inverse(x: Any, /) -> Any:
    from distal.arrays import datadep

    return _UniqueInverse(*datadep.unique(F.asdarray(x), False, True, False))


def unique_all(x: Any, /) -> Any:
    from distal.arrays import datadep

    return _UniqueAll(*datadep.unique(F.asdarray(x), True, True, True))


_UniqueCounts = namedtuple("UniqueCountsResult", ["values", "counts"])
_UniqueInverse = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])
_UniqueAll = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])


def take(x: Any, indices: Any, /, axis: Any = None, out: Any = None, mode: str = "raise") -> DArray:
    """numpy's ``take`` (one-dimensional ``indices``)."""
    from distal.arrays import shapes

    a = F.asdarray(x)
    if axis is None:
        a, axis = F.reshape(a, (-1,)), 0
    idx = F.asdarray(indices, a)
    return F.assign_out(a._wrap(shapes.take(a.node, idx.node, axis, False), new=True), out)


def take_along_axis(x: Any, indices: Any, /, axis: Any = -1) -> DArray:
    from distal.arrays import shapes

    a = F.asdarray(x)
    if axis is None:
        a, axis = F.reshape(a, (-1,)), 0
    idx = F.asdarray(indices, a)
    return a._wrap(shapes.take(a.node, idx.node, axis, True), new=True)


def cumulative_prod(
    x: Any, /, *, axis: Any = None, dtype: Any = None, include_initial: bool = False
) -> DArray:
    x = F.asdarray(x)
    if axis is None:
        if x.ndim > 1:
            raise InputError("cumulative_prod: axis is required for arrays of two or more axes")
        axis = 0
    got = F.cumulative(x, "cumprod", axis, dtype)
    if include_initial:
        ax = int(axis) % x.ndim
        shape = tuple(1 if d == ax else n for d, n in enumerate(x.shape))
        got = F.concatenate([F.full(shape, 1, got.dtype), got], ax)
    return got


def from_dlpack(x: Any, /, *, device: Any = None, copy: Any = None) -> DArray:
    """An array of this process (anything with ``__dlpack__``) placed in the session."""
    return F.asdarray(np.from_dlpack(x))


# -- products --------------------------------------------------------------------------------------


def matmul(x1: Any, x2: Any, /, out: Any = None, **kw: Any) -> DArray:
    refuse_keywords("matmul", kw)
    return F.assign_out(P.matmul(x1, x2), out)


def dot(a: Any, b: Any, out: Any = None) -> DArray:
    return F.assign_out(P.dot(a, b), out)


def vdot(a: Any, b: Any, /) -> DArray:
    return P.vdot(a, b)


def inner(a: Any, b: Any, /) -> DArray:
    return P.inner(a, b)


def outer(a: Any, b: Any, out: Any = None) -> DArray:
    return F.assign_out(P.outer(a, b), out)


def tensordot(a: Any, b: Any, /, axes: Any = 2) -> DArray:
    return P.tensordot(a, b, axes)


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> DArray:
    return P.vecdot(x1, x2, axis)


def einsum(subscripts: Any, *operands: Any, out: Any = None, **kwargs: Any) -> DArray:
    if not isinstance(subscripts, str):
        raise NotSupportedYet("einsum: the interleaved (operand, sublist) form")
    return P.einsum(subscripts, *operands, out=out, **kwargs)


def kron(a: Any, b: Any) -> Any:
    raise NotSupportedYet("kron")


def cross(
    a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: Any = None
) -> DArray:
    """numpy's cross product of 3-element vectors (along ``axisa`` of ``a`` and ``axisb`` of
    ``b``, the other axes broadcast; the result's vectors along ``axisc``; ``axis`` sets all
    three): each component is numpy's difference of two products of the operands'
    components (views), element-wise on the processors, and the three are stacked.
    2-element vectors (numpy's z component alone, deprecated there) are refused by name."""
    first = F.first_darray((a, b))
    a, b = F.asdarray(a, first), F.asdarray(b, first)
    if axis is not None:
        axisa = axisb = axisc = axis
    if a.ndim == 0 or b.ndim == 0:
        raise InputError("cross: the operands must be arrays of vectors, not 0-d")
    comps = []
    for x, ax, name in ((a, axisa, "axisa"), (b, axisb, "axisb")):
        if not -x.ndim <= int(ax) < x.ndim:
            raise InputError(f"cross: {name}={ax} is out of bounds for an array of {x.ndim} axes")
        ax = int(ax) % x.ndim
        if x.shape[ax] == 2:
            raise NotSupportedYet("cross of 2-element vectors (numpy's z component alone)")
        if x.shape[ax] != 3:
            raise ShapeError(
                f"cross: incompatible dimensions for cross product: {name} has {x.shape[ax]} "
                "elements (3 are supported)"
            )
        lead = (slice(None),) * ax
        comps.append([x[(*lead, k)] for k in range(3)])
    (a0, a1, a2), (b0, b1, b2) = comps
    parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    ndim = max(p.ndim for p in parts) + 1
    if not -ndim <= int(axisc) < ndim:
        raise InputError(f"cross: axisc={axisc} is out of bounds for a result of {ndim} axes")
    return F.stack(F.broadcast_arrays(*parts), int(axisc) % ndim)


# -- type and shape queries ------------------------------------------------------------------------


def shape(a: Any) -> tuple[int, ...]:
    return tuple(a.shape) if isinstance(a, DArray) else np.shape(a)


def ndim(a: Any) -> int:
    return a.ndim if isinstance(a, DArray) else np.ndim(a)


def size(a: Any, axis: Any = None) -> int:
    if axis is None:
        return int(np.prod(shape(a), dtype=np.int64))
    return shape(a)[axis]


def copy(a: Any, order: str = "K", subok: bool = False) -> DArray:
    return F.copy_of(F.asdarray(a))


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> DArray:
    return F.astype(x, dtype, copy)


def _dt(x: Any) -> Any:
    if isinstance(x, DArray):
        return x.dtype
    return x


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    return np.result_type(*[_dt(x) for x in arrays_and_dtypes])


def can_cast(from_: Any, to: Any, /, casting: str = "safe") -> bool:
    return bool(np.can_cast(_dt(from_), to, casting=casting))


class _FInfo:
    """The array API's ``finfo``: its fields as Python numbers."""

    def __init__(self, dt: Any) -> None:
        fi = np.finfo(dt)
        self.bits = int(fi.bits)
        self.eps = float(fi.eps)
        self.max = float(fi.max)
        self.min = float(fi.min)
        self.smallest_normal = float(fi.smallest_normal)
        self.resolution = float(fi.resolution)
        self.dtype = np.dtype(fi.dtype)


class _IInfo:
    def __init__(self, dt: Any) -> None:
        ii = np.iinfo(dt)
        self.bits, self.max, self.min, self.dtype = int(ii.bits), int(ii.max), int(ii.min), ii.dtype


def finfo(type: Any, /) -> Any:
    return _FInfo(_dt(type))


def iinfo(type: Any, /) -> Any:
    return _IInfo(_dt(type))


def isdtype(dtype: Any, kind: Any) -> bool:
    return bool(np.isdtype(np.dtype(_dt(dtype)), kind))


def may_share_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    return isinstance(a, DArray) and isinstance(b, DArray) and a.node is b.node


def shares_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    return may_share_memory(a, b)


def isscalar(element: Any) -> bool:
    return np.isscalar(element)


def iscomplexobj(x: Any) -> bool:
    return np.dtype(_dt(x) if isinstance(x, DArray) else np.asarray(x).dtype).kind == "c"


def isrealobj(x: Any) -> bool:
    return not iscomplexobj(x)
