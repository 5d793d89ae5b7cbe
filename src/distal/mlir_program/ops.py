"""The array operations an imported MLIR graph records: ``distal.numpy``'s functions on
DArrays, with the arrays front's own (``dl.exp``, ``dl.einsum``, ``.sum(axis)``, indexing)
where ``distal.numpy`` is not in this version. An operation neither has is a
``NotSupportedYet`` naming the MLIR operation that needs it.

Every function takes and returns DArrays (or Python scalars, which broadcast), so what
:mod:`distal.mlir_program.function` records is an ordinary arrays program: element-wise chains
fuse, contractions become kernels, intermediates are distributed temporaries.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

import numpy as np

from distal.errors import NotSupportedYet


@cache
def _dnp() -> Any:
    """``distal.numpy`` where this version has it, else None."""
    try:
        return importlib.import_module("distal.numpy")
    except ModuleNotFoundError:
        return None


def _need(name: str, what: str) -> Any:
    dnp = _dnp()
    f = getattr(dnp, name, None) if dnp is not None else None
    if f is None:
        raise NotSupportedYet(f"{what}: needs distal.numpy.{name}, not in this version")
    return f


def _dl() -> Any:
    """The arrays front's own functions (``exp``, ``sqrt``, ``abs``, ``maximum``, ...)."""
    from distal.arrays import darray

    return darray


def unary(name: str, x: Any, what: str) -> Any:
    """``exp``, ``log``, ``sqrt``, ``tanh``, ``abs`` of ``x`` (a scalar stays a scalar)."""
    if not hasattr(x, "shape") or isinstance(x, np.generic | float | int):
        return float(getattr(np, name)(x))
    dnp = _dnp()
    if dnp is not None and hasattr(dnp, name):
        return getattr(dnp, name)(x)
    fallback = {"exp": "exp", "sqrt": "sqrt", "abs": "absolute"}.get(name)
    if fallback is None:
        return _need(name, what)(x)
    return getattr(_dl(), fallback)(x)


def binary(name: str, a: Any, b: Any, what: str) -> Any:
    """``maximum`` / ``minimum`` of two arrays or scalars."""
    if not hasattr(a, "shape") and not hasattr(b, "shape"):
        return float(getattr(np, name)(a, b))
    dnp = _dnp()
    if dnp is not None and hasattr(dnp, name):
        return getattr(dnp, name)(a, b)
    return getattr(_dl(), name)(a, b)


def where(c: Any, a: Any, b: Any, what: str) -> Any:
    if not any(hasattr(x, "shape") for x in (c, a, b)):
        return a if c else b
    dnp = _dnp()
    if dnp is not None and hasattr(dnp, "where"):
        return dnp.where(c, a, b)
    return _dl().where(c, a, b)


def reduce(kind: str, x: Any, axes: tuple[int, ...], what: str) -> Any:
    """The ``sum`` / ``max`` / ``min`` of ``x`` over ``axes``."""
    if not axes:
        return x
    if kind == "sum":
        return x.sum(axis=axes)
    return _need(kind, what)(x, axis=axes)


def transpose(x: Any, perm: tuple[int, ...], what: str) -> Any:
    """``x`` with its axes in the order ``perm``."""
    if list(perm) == list(range(len(perm))):
        return x
    dnp = _dnp()
    if dnp is not None and hasattr(dnp, "transpose"):
        return dnp.transpose(x, perm)
    letters = "abcdefghijklmnopqrstuvwxyz"[: len(perm)]
    return _dl().einsum_arrays(f"{letters}->{''.join(letters[p] for p in perm)}", (x,))


def einsum(subscripts: str, *xs: Any) -> Any:
    dnp = _dnp()
    if dnp is not None and hasattr(dnp, "einsum"):
        return dnp.einsum(subscripts, *xs)
    return _dl().einsum_arrays(subscripts, xs)


def broadcast_to(x: Any, shape: tuple[int, ...], session: Any, what: str) -> Any:
    """``x`` (or a scalar) at its full ``shape``."""
    if hasattr(x, "shape") and tuple(x.shape) == tuple(shape):
        return x
    dnp = _dnp()
    if dnp is not None and hasattr(dnp, "broadcast_to") and hasattr(x, "shape"):
        return dnp.broadcast_to(x, shape)
    dtype = x.dtype if hasattr(x, "dtype") else np.float64
    zeros = session.asarray(np.zeros(shape, dtype))
    return zeros + x


def full(shape: tuple[int, ...], value: Any, dtype: Any, session: Any) -> Any:
    """A DArray of ``shape`` filled with ``value``."""
    return session.asarray(np.full(shape, value, dtype=dtype))


def astype(x: Any, dtype: Any, what: str) -> Any:
    """``x`` cast to ``dtype`` (a scalar: numpy's cast)."""
    dtype = np.dtype(dtype)
    if not hasattr(x, "shape") or isinstance(x, np.generic):
        return dtype.type(x)
    if x.dtype == dtype:
        return x
    if hasattr(x, "astype"):
        return x.astype(dtype)
    return _need("astype", what)(x, dtype)


def drop_axes(x: Any, axes: list[int], what: str) -> Any:
    """``x`` without its unit axes ``axes`` (``squeeze``; else ``x[..., 0, ...]``)."""
    if not axes:
        return x
    dnp = _dnp()
    if dnp is not None and hasattr(dnp, "squeeze"):
        return dnp.squeeze(x, axis=tuple(axes))
    return x[tuple(0 if k in axes else slice(None) for k in range(x.ndim))]


def insert_axes(x: Any, positions: list[int], ndim: int, what: str) -> Any:
    """``x`` with unit axes at ``positions`` of the result's ``ndim`` axes (``expand_dims``;
    else ``x[..., None, ...]``)."""
    if not positions:
        return x
    dnp = _dnp()
    if dnp is not None and hasattr(dnp, "expand_dims"):
        return dnp.expand_dims(x, axis=tuple(positions))
    return x[tuple(None if k in positions else slice(None) for k in range(ndim))]
