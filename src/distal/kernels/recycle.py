"""Arrays handed out again once nothing else holds them.

A loop reruns the same computations and drops what it read: CG's old ``x``, a rerun
kernel's result. A fresh array of tens of MiB costs a page fault per page on its first
write, about as much as the pass that fills it; reusing one whose only reference is the
recycler's list (its reference count says so, views and exported buffers included) costs
nothing, or one pass to zero it. Taking is locked: the threads of a Dask worker run the same
generated function's tasks side by side, and two of them must never be handed one array.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np


class Recycler:
    """The arrays handed out last (at most ``keep``), each handed out again when free."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.kept: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: Any, zero: bool = False) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` (zeroed with ``zero``): a kept one nothing
        else holds, or a new one, kept from now on."""
        dt = np.dtype(dtype)
        with self._lock:
            kept = self.kept
            for k in range(len(kept)):  # (not enumerate: its tuple would hold a reference)
                x = kept[k]
                # this list, the loop's name and getrefcount's argument: held by nothing else
                if sys.getrefcount(x) == 3 and x.shape == shape and x.dtype == dt:
                    kept.append(kept.pop(k))
                    break
            else:
                x = np.zeros(shape, dt) if zero else np.empty(shape, dt)
                kept.append(x)
                if len(kept) > self.keep:
                    kept.pop(0)
                return x
        if zero:
            x.fill(0)
        return x
