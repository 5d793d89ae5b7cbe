"""``distal.numpy.fft``: numpy's discrete Fourier transforms over DArrays. Along an axis
other than the first each processor transforms its own rows (nothing moves); along the
first, each block reads the whole axis (counted as moved words: not a scalable FFT)."""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays import functions as F
from distal.arrays import shapes


def _one(name: str) -> Any:
    def f(x: Any, /, *, n: Any = None, axis: int = -1, norm: str = "backward") -> Any:
        a = F.asdarray(x)
        ax = int(axis) % max(a.ndim, 1)
        return a._wrap(shapes.fft(a.node, name, n, (ax,), norm), new=True)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"numpy's ``fft.{name}`` along ``axis``."
    return f


def _many(name: str) -> Any:
    def f(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
        a = F.asdarray(x)
        if axes is None:
            axes = tuple(range(a.ndim)) if s is None else tuple(range(a.ndim - len(s), a.ndim))
        got = tuple(int(v) % a.ndim for v in axes)
        return a._wrap(
            shapes.fft(a.node, name, None if s is None else tuple(s), got, norm), new=True
        )

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"numpy's ``fft.{name}`` over ``axes``."
    return f


fft, ifft, rfft, irfft, hfft, ihfft = (
    _one(n) for n in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
)
fftn, ifftn, rfftn, irfftn = (_many(n) for n in ("fftn", "ifftn", "rfftn", "irfftn"))


def fftfreq(n: int, /, *, d: float = 1.0, device: Any = None, dtype: Any = None) -> Any:
    return F.asdarray(np.fft.fftfreq(n, d).astype(dtype or np.float64))


def rfftfreq(n: int, /, *, d: float = 1.0, device: Any = None, dtype: Any = None) -> Any:
    return F.asdarray(np.fft.rfftfreq(n, d).astype(dtype or np.float64))


def fftshift(x: Any, /, *, axes: Any = None) -> Any:
    a = F.asdarray(x)
    ax = (
        tuple(range(a.ndim))
        if axes is None
        else (axes if isinstance(axes, tuple | list) else (axes,))
    )
    return F.roll(a, tuple(a.shape[int(v) % a.ndim] // 2 for v in ax), tuple(ax))


def ifftshift(x: Any, /, *, axes: Any = None) -> Any:
    a = F.asdarray(x)
    ax = (
        tuple(range(a.ndim))
        if axes is None
        else (axes if isinstance(axes, tuple | list) else (axes,))
    )
    return F.roll(a, tuple(-(a.shape[int(v) % a.ndim] // 2) for v in ax), tuple(ax))
