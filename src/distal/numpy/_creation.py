"""``distal.numpy``'s creation functions, with numpy's signatures and the array API's
keywords (``device=``, ``copy=``): arrays made on the processors, block by block."""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays import functions as F
from distal.arrays.current import current
from distal.arrays.darray import DArray
from distal.errors import InputError, NotSupportedYet

# -- creation --------------------------------------------------------------------------------------


def _device(device: Any) -> None:
    """``device=`` names where a new array goes: ``None``, ``"cpu"`` or the current session
    (arrays are made in the current session; another one is refused, never ignored)."""
    if device is None or device is current() or (isinstance(device, str) and device == "cpu"):
        return
    if not hasattr(device, "arrays_program"):
        raise InputError(f"device {device!r}: a distal.numpy device is a dl.Session")
    raise InputError(
        f"device={device!r} is not the current session: new arrays are made in the current "
        "session; make this one inside a `with` block of that session"
    )


def asarray(obj: Any, dtype: Any = None, device: Any = None, copy: Any = None, **kw: Any) -> DArray:
    """numpy's ``asarray`` (the array API's): a DArray as it is (cast to ``dtype``), anything
    else placed in the current session (``copy=False`` for a non-DArray is refused: placing
    copies)."""
    _device(device)
    if kw.pop("order", None) not in (None, "C", "K", "A"):
        raise NotSupportedYet("asarray: order='C' only")
    if kw:
        raise InputError(f"asarray: unknown keywords {sorted(kw)}")
    if isinstance(obj, DArray):
        if dtype is not None and np.dtype(dtype) != obj.dtype:
            if copy is False:
                raise ValueError("asarray: copy=False with a dtype change")
            return F.astype(obj, dtype, copy=False)
        return F.copy_of(obj) if copy else obj
    if copy is False:
        raise ValueError("asarray: copy=False: placing a value in the session copies it")
    return F.asdarray(obj, None, dtype)


def array(obj: Any, dtype: Any = None, copy: bool = True, **kw: Any) -> DArray:
    return asarray(obj, dtype, None, True if copy else None, **kw)


def zeros(shape: Any, dtype: Any = None, order: str = "C", *, device: Any = None) -> DArray:
    _device(device)
    return F.full(shape, 0, np.float64 if dtype is None else dtype)


def ones(shape: Any, dtype: Any = None, order: str = "C", *, device: Any = None) -> DArray:
    _device(device)
    return F.full(shape, 1, np.float64 if dtype is None else dtype)


def empty(shape: Any, dtype: Any = None, order: str = "C", *, device: Any = None) -> DArray:
    """numpy's ``empty``: here zeros (a block of its own on each processor either way)."""
    return zeros(shape, dtype, order, device=device)


def full(
    shape: Any, fill_value: Any, dtype: Any = None, order: str = "C", *, device: Any = None
) -> DArray:
    _device(device)
    return F.full(shape, fill_value, dtype)


def _like(x: Any, dtype: Any, shape: Any) -> tuple[Any, Any, DArray | None]:
    d = x if isinstance(x, DArray) else None
    x = np.asarray(x) if d is None else x
    return (x.shape if shape is None else shape), (x.dtype if dtype is None else dtype), d


def zeros_like(
    x: Any,
    dtype: Any = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: Any = None,
) -> DArray:
    s, dt, d = _like(x, dtype, shape)
    return F.made(F.full(s, 0, dt).node, d)


def ones_like(
    x: Any,
    dtype: Any = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: Any = None,
) -> DArray:
    s, dt, d = _like(x, dtype, shape)
    return F.made(F.full(s, 1, dt).node, d)


def empty_like(
    x: Any,
    dtype: Any = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: Any = None,
) -> DArray:
    return zeros_like(x, dtype, order, subok, shape, device=device)


def full_like(
    x: Any,
    fill_value: Any,
    dtype: Any = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    device: Any = None,
) -> DArray:
    s, dt, d = _like(x, dtype, shape)
    return F.made(F.full(s, fill_value, dt).node, d)


def arange(
    start: Any, /, stop: Any = None, step: Any = None, dtype: Any = None, *, device: Any = None
) -> DArray:
    from distal.arrays import creation

    _device(device)
    return F.made(creation.arange(start, stop, step, dtype))


def linspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype: Any = None,
    axis: int = 0,
    *,
    device: Any = None,
) -> Any:
    from distal.arrays import creation

    _device(device)
    if axis != 0 or np.ndim(start) or np.ndim(stop):
        raise NotSupportedYet("linspace: scalar start and stop along axis 0 only")
    got = F.made(creation.linspace(start, stop, num, endpoint, dtype))
    if retstep:
        div = (num - 1) if endpoint else num
        return got, ((stop - start) / div if div > 0 else np.nan)
    return got


def eye(
    N: int,
    M: int | None = None,
    k: int = 0,
    dtype: Any = float,
    order: str = "C",
    *,
    device: Any = None,
) -> DArray:
    from distal.arrays import creation

    _device(device)
    return F.made(creation.eye(N, M, k, dtype))


def identity(n: int, dtype: Any = None) -> DArray:
    return eye(n, dtype=float if dtype is None else dtype)


def meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> Any:
    return F.meshgrid(*xi, indexing=indexing, sparse=sparse)
