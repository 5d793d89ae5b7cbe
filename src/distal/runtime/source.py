"""Block sources: inputs that produce any box of a tensor on demand.

A block source has a ``shape`` and a method ``read_block(box) -> array`` where
``box`` is a tuple of half-open ``(lo, hi)`` intervals. Runtimes call it only for
the blocks a processor owns, so a tensor built from a function of the block's
index box or from per-block files is never materialised whole on one host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.casting import check_cast
from distal.errors import InputError
from distal.typing import Box, box_shape


def is_block_source(x: Any) -> bool:
    """True for objects following the block-source protocol."""
    return hasattr(x, "read_block") and hasattr(x, "shape") and not isinstance(x, np.ndarray)


def check_source(name: str, src: Any, shape: tuple[int, ...]) -> Any:
    """Check a block source's shape against its tensor."""
    if tuple(src.shape) != tuple(shape):
        raise InputError(f"input {name!r} has shape {tuple(src.shape)}; tensor expects {shape}")
    return src


def read_block(name: str, data: Any, box: Box, dtype: np.dtype, view: bool = False) -> np.ndarray:
    """A fresh array holding ``box`` of input ``data`` (an array or a block source); a
    source's block is converted to ``dtype`` by the input rule of
    :func:`~distal.casting.check_cast` (floats for an integer tensor are refused).

    With ``view``, a block that is already a C-contiguous array of ``dtype`` comes back as
    a read-only view instead of a copy: for a runtime that only reads it during one run
    (an MPI rank's owned block of a session value: copying it cost a pass per kernel)."""
    if is_block_source(data):
        arr = np.asarray(data.read_block(box))
        if arr.shape != box_shape(box):
            raise InputError(
                f"block source of {name!r} returned shape {arr.shape} for box {box}; "
                f"expected {box_shape(box)}"
            )
        if arr.dtype.kind not in "biufc":
            raise InputError(f"block source of {name!r} returned non-numeric dtype {arr.dtype}")
        check_cast(f"a block of block source {name!r}", arr.dtype, dtype)
        return _view(arr) if view and _viewable(arr, dtype) else np.array(arr, dtype=dtype)
    index = tuple(slice(lo, hi) for lo, hi in box) if box else (Ellipsis,)
    block = data[index]
    if view and isinstance(block, np.ndarray) and _viewable(block, dtype):
        return _view(block)
    return np.array(block, dtype=dtype)


def _viewable(arr: np.ndarray, dtype: np.dtype) -> bool:
    return arr.dtype == dtype and arr.flags.c_contiguous


def _view(arr: np.ndarray) -> np.ndarray:
    v = arr.view()
    v.flags.writeable = False
    return v
