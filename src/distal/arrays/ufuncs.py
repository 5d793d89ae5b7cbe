"""The element-wise operations of the arrays front: one table, by the name a node records.

Every entry is a numpy ufunc (or a numpy function with a ufunc's broadcasting), computed by
numpy over each processor's blocks (a *map*, :mod:`distal.arrays.program`), so its values
are numpy's, special cases (``nan``, ``inf``, signed zeros) included. The arithmetic five
(``add``, ``sub``, ``mul``, ``neg``, ``pos``) are also index notation's and fuse into
contractions; the rest are maps. Names are numpy's, except the operators the arrays front
recorded first (``sub``, ``mul``, ``div``, ``lt``, ...).

Parameterized operations (a cast, ``isclose`` with its tolerances) record their parameter in the
name, after a ``|`` (``"astype|<f4"``): the name is the whole description, so a map's
expression stays a plain hashable tuple of strings and numbers, made again on any process
from its text (:func:`function`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: the operators' names (the arrays front's first operations) and their numpy functions
_OPERATORS: dict[str, Any] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "neg": np.negative,
    "pos": np.positive,
    "div": np.true_divide,
    "abs": np.absolute,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "pow": np.power,
    "floordiv": np.floor_divide,
    "mod": np.remainder,
}

#: numpy's element-wise functions recorded under their own names
_NAMED = (
    # roots, exponentials and logarithms
    "sqrt cbrt square reciprocal exp exp2 expm1 log log2 log10 log1p logaddexp logaddexp2 "
    # trigonometric and hyperbolic
    "sin cos tan arcsin arccos arctan arctan2 hypot sinh cosh tanh arcsinh arccosh arctanh "
    "deg2rad rad2deg degrees radians "
    # rounding and sign
    "floor ceil trunc rint fix sign signbit copysign nextafter spacing "
    # comparisons and classification
    "maximum minimum fmax fmin isnan isinf isfinite "
    # logical and bitwise
    "logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_xor "
    "invert left_shift right_shift "
    # arithmetic numpy names beyond the operators
    "fmod float_power heaviside conjugate real imag angle gcd lcm ldexp"
).split()

TABLE: dict[str, Any] = dict(_OPERATORS)
for _name in _NAMED:
    TABLE[_name] = getattr(np, _name)
TABLE["where"] = np.where
TABLE["clip"] = np.clip

#: numpy's functions by the name an operation records (what ``numpy_op`` returns)
ARITY: dict[str, int] = {"where": 3, "clip": 3}
for _name, _f in TABLE.items():
    if _name not in ARITY:
        ARITY[_name] = getattr(_f, "nin", 1)

#: numpy ufuncs that are other names of a table entry (``np.abs is np.absolute``, ...)
_ALIASES = {
    "absolute": "abs",
    "subtract": "sub",
    "multiply": "mul",
    "negative": "neg",
    "positive": "pos",
    "true_divide": "div",
    "divide": "div",
    "less": "lt",
    "less_equal": "le",
    "greater": "gt",
    "greater_equal": "ge",
    "equal": "eq",
    "not_equal": "ne",
    "power": "pow",
    "floor_divide": "floordiv",
    "remainder": "mod",
    "conj": "conjugate",
    "bitwise_not": "invert",
    "bitwise_invert": "invert",
    "bitwise_left_shift": "left_shift",
    "bitwise_right_shift": "right_shift",
    "acos": "arccos",
    "asin": "arcsin",
    "atan": "arctan",
    "atan2": "arctan2",
    "acosh": "arccosh",
    "asinh": "arcsinh",
    "atanh": "arctanh",
    "pow_": "pow",
}

#: the numpy ufunc objects distal records, to the name it records them under
BY_UFUNC: dict[Any, str] = {}
for _name, _f in TABLE.items():
    if isinstance(_f, np.ufunc):
        BY_UFUNC.setdefault(_f, _name)
for _alias, _name in _ALIASES.items():
    _f = getattr(np, _alias, None)
    if isinstance(_f, np.ufunc):
        BY_UFUNC.setdefault(_f, _name)


def op_name(name: str) -> str | None:
    """The recorded name of numpy's function ``name`` (an alias resolved), or None."""
    name = _ALIASES.get(name, name)
    return name if name in TABLE else None


#: functions whose result is boolean whatever their operands
PREDICATES = frozenset(
    "lt le gt ge eq ne isnan isinf isfinite signbit logical_and logical_or logical_xor "
    "logical_not".split()
)


# -- parameterized operations --------------------------------------------------------------------


def astype(dtype: Any) -> str:
    """The name of a cast to ``dtype`` (numpy's ``astype``, unsafe casting as numpy's)."""
    return f"astype|{np.dtype(dtype).str}"


def is_parameterized(name: str) -> bool:
    return "|" in name


def _cast(dt: np.dtype) -> Callable[[Any], Any]:
    def cast(x: Any) -> Any:
        return np.asarray(x).astype(dt)

    return cast


def _isclose(rtol: float, atol: float, equal_nan: bool) -> Callable[[Any, Any], Any]:
    def isclose(a: Any, b: Any) -> Any:
        return np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)

    return isclose


_MADE: dict[str, Callable[..., Any]] = {}


def function(name: str) -> Callable[..., Any]:
    """numpy's function for the operation recorded as ``name``."""
    f = TABLE.get(name)
    if f is not None:
        return f
    f = _MADE.get(name)
    if f is None:
        kind, _, param = name.partition("|")
        if kind == "astype":
            f = _cast(np.dtype(param))
        elif kind == "isclose":
            rtol, atol, nan = param.split(",")
            f = _isclose(float(rtol), float(atol), bool(int(nan)))
        else:
            raise KeyError(name)
        _MADE[name] = f
    return f


def param_dtype(name: str) -> np.dtype:
    """The dtype of a cast's name."""
    return np.dtype(name.partition("|")[2])
