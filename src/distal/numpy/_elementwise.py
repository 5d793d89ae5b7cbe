"""``distal.numpy``'s element-wise functions: numpy's ufuncs (and the array API's names for
them) over DArrays, as maps fused with what they read and what reads them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distal.arrays import functions as F
from distal.arrays import ufuncs
from distal.arrays.keywords import refuse_keywords


def _make(name: str, op: str, nin: int) -> Callable[..., Any]:
    def unary(
        x: Any, /, out: Any = None, *, dtype: Any = None, where: Any = True, **kw: Any
    ) -> Any:
        return _finish(name, F.elementwise(op, x), out, dtype, where, kw)

    def binary(
        x1: Any, x2: Any, /, out: Any = None, *, dtype: Any = None, where: Any = True, **kw: Any
    ) -> Any:
        return _finish(name, F.elementwise(op, x1, x2), out, dtype, where, kw)

    f = unary if nin == 1 else binary
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"numpy's ``{name}``, element-wise over DArrays (a map, fused with its chain)."
    return f


def _finish(name: str, got: Any, out: Any, dtype: Any, where: Any, kw: dict) -> Any:
    for k in ("casting", "order", "subok", "signature"):
        kw.pop(k, None)
    refuse_keywords(name, {**kw, "where": where}, where=True)
    if dtype is not None:
        got = F.astype(got, dtype, copy=False)
    return F.assign_out(got, out)


#: numpy's names and the array API's, to what each records
NAMES: dict[str, str] = {}
for _name in ufuncs.TABLE:
    if _name in ("where", "clip") or "|" in _name:
        continue
    NAMES[_name] = _name
for _alias in (
    "absolute subtract multiply negative positive true_divide divide less less_equal greater "
    "greater_equal equal not_equal power floor_divide remainder conj bitwise_not "
    "bitwise_invert bitwise_left_shift bitwise_right_shift acos asin atan atan2 acosh asinh "
    "atanh"
).split():
    NAMES[_alias] = ufuncs.op_name(_alias) or _alias
# the operators' short names are not numpy names
for _short in ("sub", "mul", "neg", "pos", "div", "lt", "le", "gt", "ge", "eq", "ne", "floordiv"):
    NAMES.pop(_short, None)
NAMES["pow"] = "pow"
NAMES["mod"] = "mod"

FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: _make(name, op, ufuncs.ARITY[op]) for name, op in NAMES.items()
}
