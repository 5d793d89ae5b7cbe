"""``import distal.numpy as np``: numpy's functions over distributed arrays.

Every function makes or operates on :class:`~distal.DArray` s of the current session --
the innermost ``with dl.Session(...) as sess:`` block, else a default local session over
this computer's cores -- with numpy's semantics (broadcasting, dtype promotion, ``axis``,
``keepdims``, ``out=``), recorded and fused as every DArray operation is: element-wise
chains are one pass over each processor's blocks, a reduction computes what feeds it, and
nothing is gathered to this process until a value is read (``np.asarray``, ``float``,
``.get()``). Arrays are made block by block on the processors (``zeros``, ``arange``,
``random.default_rng(seed).random(n)``), never on the driver.

It is also an array API standard namespace (``__array_api_version__``): see
``docs/arrays.md`` for the standard's test suite run against it. What is not in this
version (dense factorizations in ``linalg``, functions whose result's shape depends on
the values: ``nonzero``, ``unique``) raises ``NotSupportedYet`` naming the function.
"""

from __future__ import annotations

from typing import Any

import numpy as _np

from distal.arrays import dispatch as _dispatch
from distal.arrays.current import current as _current
from distal.arrays.current import set_default_factory as _set_default_factory
from distal.arrays.darray import DArray
from distal.numpy import fft as fft
from distal.numpy import linalg as linalg
from distal.numpy import random as random
from distal.numpy._creation import *  # noqa: F403
from distal.numpy._creation import __dict__ as _cdict
from distal.numpy._elementwise import FUNCTIONS as _ELEMENTWISE
from distal.numpy._functions import *  # noqa: F403
from distal.numpy._functions import __dict__ as _fdict
from distal.numpy._stats import *  # noqa: F403
from distal.numpy._stats import __dict__ as _sdict

__array_api_version__ = "2024.12"

ndarray = DArray

# dtypes and constants: numpy's own
bool = _np.bool_
bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
intp, uintp = _np.intp, _np.uintp
int_, float_, complex_ = _np.int_, _np.float64, _np.complex128
double, single = _np.float64, _np.float32
dtype = _np.dtype
generic, number, integer, floating, complexfloating = (
    _np.generic,
    _np.number,
    _np.integer,
    _np.floating,
    _np.complexfloating,
)
signedinteger, unsignedinteger, inexact = _np.signedinteger, _np.unsignedinteger, _np.inexact
e, pi, inf, nan, euler_gamma = _np.e, _np.pi, _np.inf, _np.nan, _np.euler_gamma
newaxis = None
errstate, seterr, geterr = _np.errstate, _np.seterr, _np.geterr

globals().update(_ELEMENTWISE)


def current_session() -> Any:
    """The session new arrays are made in (see the module docstring)."""
    return _current()


class _Info:
    """The array API's inspection namespace (``__array_namespace_info__()``)."""

    def capabilities(self) -> dict[str, Any]:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> Any:
        return "cpu"

    def devices(self) -> list[Any]:
        return ["cpu"]

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        return {
            "real floating": _np.dtype(_np.float64),
            "complex floating": _np.dtype(_np.complex128),
            "integral": _np.dtype(_np.int64),
            "indexing": _np.dtype(_np.int64),
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, Any]:
        names = (
            "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 "
            "complex64 complex128"
        ).split()
        out = {n: _np.dtype(n) for n in names}
        if kind is None:
            return out
        return {n: d for n, d in out.items() if _np.isdtype(d, kind)}


def __array_namespace_info__() -> _Info:
    return _Info()


def _default_session() -> Any:
    from distal.session import Session

    return Session("local")


_set_default_factory(_default_session)


def _register() -> None:
    """numpy's functions run by this module's on DArrays (``__array_function__``)."""
    ours = {**_cdict, **_sdict, **_fdict, **_ELEMENTWISE}
    skip = {"asarray", "array", "isscalar", "result_type", "can_cast", "finfo", "iinfo"}
    for name, impl in ours.items():
        if name.startswith("_") or not callable(impl) or name in skip:
            continue
        theirs = getattr(_np, name, None)
        if getattr(theirs, "__name__", None) != name:
            continue  # (another name of a numpy function: np.permute_dims is np.transpose)
        if callable(theirs) and not isinstance(theirs, _np.ufunc):
            _dispatch.register_function(theirs, impl)
    _dispatch.register_function(_np.result_type, result_type)  # noqa: F405
    _dispatch.register_function(_np.can_cast, can_cast)  # noqa: F405
    for name in ("fft", "ifft", "rfft", "irfft", "fftn", "ifftn", "rfftn", "irfftn", "hfft",
                 "ihfft", "fftshift", "ifftshift"):  # fmt: skip
        _dispatch.register_function(getattr(_np.fft, name), getattr(fft, name))
    for name in ("norm", "vector_norm", "matrix_norm", "matmul", "tensordot", "outer", "vecdot",
                 "matrix_transpose", "trace", "diagonal", "cross", *linalg._REFUSED):  # fmt: skip
        theirs = getattr(_np.linalg, name, None)
        if theirs is not None and hasattr(linalg, name):
            _dispatch.register_function(theirs, getattr(linalg, name))


_register()
