"""The numpy methods of :class:`~distal.arrays.darray.DArray` beyond its operators, and its
numpy protocols, attached to the class here (each a thin call of
:mod:`distal.arrays.functions`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays import dispatch
from distal.arrays import functions as F
from distal.arrays.darray import DArray
from distal.arrays.keywords import refuse_keywords
from distal.errors import InputError, NotSupportedYet


def _shape_args(args: tuple) -> Any:
    if len(args) == 1 and isinstance(args[0], tuple | list):
        return tuple(args[0])
    if len(args) == 1 and args[0] is None:
        return None
    return args


def _no_out(out: Any, what: str) -> None:
    if out is not None:
        raise NotSupportedYet(f"{what}(out=...) on a DArray method: use the function form")


def astype(
    self: DArray,
    dtype: Any,
    order: str = "K",
    casting: str = "unsafe",
    subok: bool = True,
    copy: bool = True,
) -> DArray:
    """numpy's ``astype`` (an element-wise cast, fused with what it reads)."""
    if casting != "unsafe" and not np.can_cast(self.dtype, dtype, casting=casting):
        raise InputError(f"astype: cannot cast {self.dtype} to {np.dtype(dtype)} ({casting})")
    return F.astype(self, dtype, copy)


def copy(self: DArray, order: str = "K") -> DArray:
    """A copy (a new handle on the value: in-place updates of either leave the other)."""
    return F.copy_of(self)


def reshape(self: DArray, *shape: Any, order: str = "C") -> DArray:
    if order != "C":
        raise NotSupportedYet("reshape: order='C' only")
    return F.reshape(self, _shape_args(shape))


def ravel(self: DArray, order: str = "C") -> DArray:
    if order not in ("C", "K", "A"):
        raise NotSupportedYet("ravel: row-major order only")
    return F.reshape(self, (-1,))


def flatten(self: DArray, order: str = "C") -> DArray:
    return F.copy_of(ravel(self, order))


def transpose(self: DArray, *axes: Any) -> DArray:
    got = _shape_args(axes)
    return F.transpose(self, got if got else None)


def reduce_as_numpy(
    a: DArray, op: str, axis: Any, dtype: Any, out: Any, keepdims: bool, kw: dict[str, Any]
) -> DArray:
    """numpy's reduction ``op`` with numpy's signature, for the method and ``distal.numpy``'s
    function alike: ``initial=`` and ``where=`` only at their defaults, and numpy's
    ``max(a, axis, out, keepdims)`` (``max``, ``min``, ``any``, ``all`` take no dtype: an
    array in that place is ``out``)."""
    refuse_keywords(op, kw, initial=None, where=True)
    if op in ("max", "min", "any", "all") and dtype is not None and out is None:
        if not isinstance(dtype, type | np.dtype | str):
            out, dtype = dtype, None
    return F.assign_out(F.reduce(a, op, axis, keepdims, dtype), out)


def _reduction(op: str) -> Any:
    def method(
        self: DArray,
        axis: Any = None,
        dtype: Any = None,
        out: Any = None,
        keepdims: bool = False,
        **kw: Any,
    ) -> DArray:
        return reduce_as_numpy(self, op, axis, dtype, out, keepdims, kw)

    method.__name__ = op
    method.__doc__ = (
        f"numpy's ``{op}`` over ``axis`` (``keepdims``, ``dtype``, ``out`` as numpy's)."
    )
    return method


def mean(
    self: DArray, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False
) -> DArray:
    return F.assign_out(F.mean(self, axis, dtype, keepdims), out)


def var(
    self: DArray,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    ddof: float = 0,
    keepdims: bool = False,
) -> DArray:
    return F.assign_out(F.var(self, axis, dtype, ddof, keepdims), out)


def std(
    self: DArray,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    ddof: float = 0,
    keepdims: bool = False,
) -> DArray:
    return F.assign_out(F.std(self, axis, dtype, ddof, keepdims), out)


def argmax(self: DArray, axis: Any = None, out: Any = None, keepdims: bool = False) -> DArray:
    return F.assign_out(F.arg(self, "argmax", axis, keepdims), out)


def argmin(self: DArray, axis: Any = None, out: Any = None, keepdims: bool = False) -> DArray:
    return F.assign_out(F.arg(self, "argmin", axis, keepdims), out)


def cumsum(self: DArray, axis: Any = None, dtype: Any = None, out: Any = None) -> DArray:
    return F.assign_out(F.cumulative(self, "cumsum", axis, dtype), out)


def cumprod(self: DArray, axis: Any = None, dtype: Any = None, out: Any = None) -> DArray:
    return F.assign_out(F.cumulative(self, "cumprod", axis, dtype), out)


def clip(self: DArray, min: Any = None, max: Any = None, out: Any = None) -> DArray:
    return F.assign_out(F.clip(self, min, max), out)


def round_(self: DArray, decimals: int = 0, out: Any = None) -> DArray:
    return F.assign_out(round_values(self, decimals), out)


def round_values(x: Any, decimals: int = 0) -> DArray:
    """numpy's ``round``: ``rint`` of the values scaled by ``10**decimals``."""
    x = F.asdarray(x)
    if x.dtype.kind in "biu" and decimals >= 0:
        return F.copy_of(x)
    if decimals == 0:
        return F.elementwise("rint", x)
    scale = 10.0**decimals
    return F.elementwise("div", F.elementwise("rint", x * scale), scale)


def conj(self: DArray) -> DArray:
    return F.elementwise("conjugate", self)


def sort(self: DArray, axis: int = -1, kind: Any = None, order: Any = None) -> None:
    """numpy's in-place ``sort``: the array (every holder of it) now holds its values sorted."""
    from distal.arrays import views

    views.update(self, F.sort(self, axis).node, "sort()")


def argsort(self: DArray, axis: int = -1, kind: Any = None, order: Any = None) -> DArray:
    return F.argsort(self, axis)


def fill(self: DArray, value: Any) -> None:
    """numpy's in-place ``fill``: the array (every holder of it) now holds ``value``."""
    from distal.arrays import views

    views.update(self, F.full(self.shape, value, self.dtype).node, "fill()")


def item(self: DArray, *args: Any) -> Any:
    """The one element as a Python number (a read)."""
    if args:
        raise NotSupportedYet("item(index): read the value with .get() first")
    if self.size != 1:
        raise InputError("item(): only an array of one element converts to a Python scalar")
    return np.asarray(self.get()).reshape(()).item()


def tolist(self: DArray) -> Any:
    """The values as nested Python lists (a read)."""
    return np.asarray(self.get()).tolist()


def _binary(op: str, right: bool = False) -> Any:
    def method(self: DArray, other: Any) -> DArray:
        if not isinstance(other, DArray | np.ndarray | bool | int | float | complex | np.generic):
            return NotImplemented
        return F.elementwise(op, other, self) if right else F.elementwise(op, self, other)

    return method


def _unary(op: str) -> Any:
    def method(self: DArray) -> DArray:
        return F.elementwise(op, self)

    return method


def __index__(self: DArray) -> int:
    if self.ndim != 0 or self.dtype.kind not in "iub":
        raise TypeError("only a 0-d integer DArray is an index")
    return int(self)


def __array_namespace__(self: DArray, api_version: str | None = None) -> Any:
    """The array API namespace of DArrays: ``distal.numpy``."""
    import importlib

    return importlib.import_module("distal.numpy")


def _device(self: DArray) -> Any:
    """The array API's device: ``"cpu"`` (a DArray lives in its session's processors,
    ``.session``)."""
    return "cpu"


def to_device(self: DArray, device: Any, stream: Any = None) -> DArray:
    if device != "cpu" and device is not self.session:
        raise NotSupportedYet("to_device: another session's device (move it with sess.asarray)")
    return self


def __dlpack__(
    self: DArray,
    /,
    *,
    stream: Any = None,
    max_version: Any = None,
    dl_device: Any = None,
    copy: Any = None,
) -> Any:
    """DLPack export: a read, as ``np.asarray`` is (the value gathered to this process,
    then handed over as numpy's array would be)."""
    arr = np.ascontiguousarray(self.get())
    kw: dict[str, Any] = {}
    if max_version is not None:
        kw["max_version"] = max_version
    return arr.__dlpack__(stream=stream, **kw)


def __dlpack_device__(self: DArray) -> tuple[int, int]:
    """Where an export lands: this process's memory (DLPack's CPU device)."""
    return (1, 0)


def _mT(self: DArray) -> DArray:
    if self.ndim < 2:
        raise InputError("mT: the array needs two or more axes")
    axes = (*range(self.ndim - 2), self.ndim - 1, self.ndim - 2)
    return F.transpose(self, axes)


def __array_ufunc__(self: DArray, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """numpy's ufuncs on a DArray run distributed (``np.sin(x)`` records a sine), or
    raise ``NotSupportedYet`` naming the ufunc; ``out=`` a DArray writes into it."""
    return dispatch.array_ufunc(ufunc, method, inputs, kwargs)


def __array_function__(self: DArray, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
    """numpy's functions on a DArray run distributed (``np.mean(x, axis=0)`` is a DArray),
    or raise ``NotSupportedYet`` naming the function: never a silent gather."""
    return dispatch.array_function(func, types, args, kwargs)


def attach() -> None:
    """Set the methods on the class (once, at import)."""
    c = DArray
    for name, f in [
        ("astype", astype),
        ("copy", copy),
        ("reshape", reshape),
        ("ravel", ravel),
        ("flatten", flatten),
        ("transpose", transpose),
        ("mean", mean),
        ("var", var),
        ("std", std),
        ("argmax", argmax),
        ("argmin", argmin),
        ("cumsum", cumsum),
        ("cumprod", cumprod),
        ("clip", clip),
        ("round", round_),
        ("conj", conj),
        ("conjugate", conj),
        ("sort", sort),
        ("argsort", argsort),
        ("fill", fill),
        ("item", item),
        ("tolist", tolist),
        ("to_device", to_device),
        ("__index__", __index__),
        ("__array_namespace__", __array_namespace__),
        ("__dlpack__", __dlpack__),
        ("__dlpack_device__", __dlpack_device__),
        ("__array_ufunc__", __array_ufunc__),
        ("__array_function__", __array_function__),
    ]:
        setattr(c, name, f)
    for op in ("sum", "prod", "max", "min", "any", "all"):
        setattr(c, op, _reduction(op))
    c.device = property(_device)  # type: ignore[attr-defined]
    c.mT = property(_mT)  # type: ignore[attr-defined]
    c.real = property(lambda self: F.elementwise("real", self))  # type: ignore[attr-defined]
    c.imag = property(lambda self: F.elementwise("imag", self))  # type: ignore[attr-defined]
    c.nbytes = property(lambda self: self.size * self.dtype.itemsize)  # type: ignore[attr-defined]
    c.itemsize = property(lambda self: self.dtype.itemsize)  # type: ignore[attr-defined]
    for dunder, op in [
        ("and", "bitwise_and"),
        ("or", "bitwise_or"),
        ("xor", "bitwise_xor"),
        ("lshift", "left_shift"),
        ("rshift", "right_shift"),
    ]:
        setattr(c, f"__{dunder}__", _binary(op))
        setattr(c, f"__r{dunder}__", _binary(op, right=True))
    c.__invert__ = _unary("invert")  # type: ignore[method-assign]


attach()
