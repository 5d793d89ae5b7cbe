"""``distal.numpy``'s reductions and statistics, with numpy's signatures (``axis``,
``keepdims``, ``dtype``, ``out``) and the array API's keywords (``correction=``)."""

from __future__ import annotations

from typing import Any

from distal.arrays import functions as F
from distal.arrays.darray import DArray
from distal.arrays.keywords import refuse_keywords
from distal.arrays.methods import reduce_as_numpy
from distal.errors import InputError, NotSupportedYet

# -- reductions ------------------------------------------------------------------------------------


def _reduction(op: str) -> Any:
    def f(
        a: Any,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        keepdims: bool = False,
        **kw: Any,
    ) -> DArray:
        return reduce_as_numpy(a, op, axis, dtype, out, keepdims, kw)

    f.__name__ = f.__qualname__ = op
    f.__doc__ = f"numpy's ``{op}``, distributed (``axis``, ``keepdims``, ``dtype``, ``out``)."
    return f


sum = _reduction("sum")
prod = _reduction("prod")
max = _reduction("max")
min = _reduction("min")
any = _reduction("any")
all = _reduction("all")
amax, amin = max, min


def mean(
    a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kw: Any
) -> DArray:
    refuse_keywords("mean", kw, where=True)
    return F.assign_out(F.mean(a, axis, dtype, keepdims), out)


def var(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    ddof: float = 0,
    keepdims: bool = False,
    *,
    correction: Any = None,
    **kw: Any,
) -> DArray:
    refuse_keywords("var", kw, where=True, mean=None)
    if correction is not None:
        ddof = correction
    return F.assign_out(F.var(a, axis, dtype, ddof, keepdims), out)


def std(
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    ddof: float = 0,
    keepdims: bool = False,
    *,
    correction: Any = None,
    **kw: Any,
) -> DArray:
    refuse_keywords("std", kw, where=True, mean=None)
    if correction is not None:
        ddof = correction
    return F.assign_out(F.std(a, axis, dtype, ddof, keepdims), out)


def argmax(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> DArray:
    return F.assign_out(F.arg(a, "argmax", axis, keepdims), out)


def argmin(a: Any, axis: Any = None, out: Any = None, *, keepdims: bool = False) -> DArray:
    return F.assign_out(F.arg(a, "argmin", axis, keepdims), out)


def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> DArray:
    return F.assign_out(F.cumulative(a, "cumsum", axis, dtype), out)


def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> DArray:
    return F.assign_out(F.cumulative(a, "cumprod", axis, dtype), out)


def cumulative_sum(
    x: Any, /, *, axis: Any = None, dtype: Any = None, include_initial: bool = False
) -> DArray:
    x = F.asdarray(x)
    if axis is None:
        if x.ndim > 1:
            raise InputError("cumulative_sum: axis is required for arrays of two or more axes")
        axis = 0
    got = F.cumulative(x, "cumsum", axis, dtype)
    if include_initial:
        ax = int(axis) % x.ndim
        shape = tuple(1 if d == ax else n for d, n in enumerate(x.shape))
        got = F.concatenate([F.full(shape, 0, got.dtype), got], ax)
    return got


def count_nonzero(a: Any, axis: Any = None, *, keepdims: bool = False) -> DArray:
    return F.count_nonzero(a, axis, keepdims)


def average(
    a: Any, axis: Any = None, weights: Any = None, returned: bool = False, *, keepdims: bool = False
) -> Any:
    if weights is None:
        got = F.mean(a, axis, None, keepdims)
        wsum = None
    else:
        a = F.asdarray(a)
        w = F.asdarray(weights, a)
        if w.shape != a.shape:
            raise NotSupportedYet("average: weights of the array's own shape only")
        wsum = F.sum_(w, axis, None, keepdims)
        got = F.elementwise("div", F.sum_(a * w, axis, None, keepdims), wsum)
    return (got, wsum) if returned else got
