"""numpy's protocols on DArrays: ``__array_ufunc__`` (NEP 13) and ``__array_function__``
(NEP 18).

A numpy ufunc or function applied to a DArray runs distributed, as the ``distal.numpy``
function of the same name does, or raises ``NotSupportedYet`` naming it: never a silent
gather to this process. ``distal.numpy`` registers its functions here
(:func:`register_function`) when it is imported (``import distal`` imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distal.arrays import functions as F
from distal.arrays import products as P
from distal.arrays import ufuncs
from distal.errors import InputError, NotSupportedYet

#: numpy's functions (the objects ``numpy.mean``, ``numpy.linalg.norm``, ...) and what runs
#: them on DArrays
HANDLED: dict[Any, Callable[..., Any]] = {}


def register_function(numpy_function: Any, impl: Callable[..., Any]) -> None:
    HANDLED[numpy_function] = impl


def _name(func: Any) -> str:
    mod = getattr(func, "__module__", "numpy") or "numpy"
    mod = mod.replace("numpy.linalg._linalg", "numpy.linalg").replace(
        "numpy.linalg.linalg", "numpy.linalg"
    )
    if mod.startswith("numpy.") and not mod.startswith(
        ("numpy.linalg", "numpy.fft", "numpy.random")
    ):
        mod = "numpy"
    return f"{mod}.{getattr(func, '__name__', repr(func))}"


def array_function(func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
    impl = HANDLED.get(func)
    if impl is None:
        raise NotSupportedYet(
            f"{_name(func)} on a DArray is not supported yet (it would have to gather the "
            "array to this process: read it with np.asarray(x) or x.get() first if that is "
            "what you want)"
        )
    return impl(*args, **kwargs)


#: numpy's generalized ufuncs distal runs (contractions)
_GUFUNCS = {"matmul": P.matmul, "vecdot": P.vecdot}

#: ufunc methods recorded as reductions, by (ufunc name, method): distal's reduction
_REDUCE = {
    "add": "sum",
    "mul": "prod",
    "maximum": "max",
    "minimum": "min",
    "logical_and": "all",
    "logical_or": "any",
}


def array_ufunc(ufunc: Any, method: str, inputs: tuple, kwargs: dict) -> Any:
    op = ufuncs.BY_UFUNC.get(ufunc)
    where = f"numpy.{ufunc.__name__}{'' if method == '__call__' else '.' + method}"
    if method == "__call__" and ufunc.__name__ in _GUFUNCS:
        out = kwargs.pop("out", None)
        axes = {k: kwargs.pop(k) for k in ("axis", "axes") if k in kwargs}
        if kwargs or (axes and ufunc.__name__ != "vecdot"):
            raise NotSupportedYet(f"{where} with {sorted(kwargs) + sorted(axes)} on a DArray")
        return F.assign_out(_GUFUNCS[ufunc.__name__](*inputs, **axes), out)
    if op is None:
        raise NotSupportedYet(f"{where} on a DArray is not supported yet (no distributed version)")
    kwargs = dict(kwargs)
    out = kwargs.pop("out", None)
    if out is not None and isinstance(out, tuple) and all(o is None for o in out):
        out = None
    dtype = kwargs.pop("dtype", None)
    for k, v in list(kwargs.items()):
        if k in ("casting", "order", "subok") or (k == "where" and v is True):
            kwargs.pop(k)
    if method == "__call__":
        if kwargs:
            raise NotSupportedYet(f"{where} with {sorted(kwargs)} on a DArray")
        if ufunc.nin != len(inputs):
            raise InputError(f"{where} takes {ufunc.nin} operands, got {len(inputs)}")
        if ufunc.nout != 1:
            raise NotSupportedYet(f"{where}: ufuncs with {ufunc.nout} outputs")
        got = F.elementwise(op, *inputs)
        if dtype is not None:
            got = F.astype(got, dtype, copy=False)
        return F.assign_out(got, out)
    if method == "reduce" and op in _REDUCE:
        axis = kwargs.pop("axis", 0)
        keepdims = kwargs.pop("keepdims", False)
        kwargs.pop("initial", None) if kwargs.get("initial", None) is None else None
        if kwargs:
            raise NotSupportedYet(f"{where} with {sorted(kwargs)} on a DArray")
        got = F.reduce(inputs[0], _REDUCE[op], axis, keepdims, dtype)
        return F.assign_out(got, out)
    if method == "accumulate" and op in ("add", "mul"):
        axis = kwargs.pop("axis", 0)
        if kwargs:
            raise NotSupportedYet(f"{where} with {sorted(kwargs)} on a DArray")
        got = F.cumulative(inputs[0], "cumsum" if op == "add" else "cumprod", axis, dtype)
        return F.assign_out(got, out)
    if method == "outer" and len(inputs) == 2 and not kwargs:
        first = F.first_darray(inputs)
        a, b = (F.asdarray(x, first) for x in inputs)
        got = F.elementwise(op, F.reshape(a, a.shape + (1,) * b.ndim), b)
        return F.assign_out(got, out)
    raise NotSupportedYet(f"{where} on a DArray is not supported yet")
