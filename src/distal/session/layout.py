"""The layout a compiled kernel gives each tensor (see :mod:`distal.distribution.layout`)."""

from __future__ import annotations

import weakref
from typing import Any

from distal.distribution.layout import Layout, dist_key, layout_for
from distal.errors import InputError

_KERNEL_LAYOUTS: weakref.WeakKeyDictionary[Any, dict[str, Layout]] = weakref.WeakKeyDictionary()


def layout_of(kernel: Any, name: str) -> Layout:
    """The layout a compiled kernel gives tensor ``name`` (one object per kernel and name,
    kept while the kernel lives, so a kernel run again finds its layouts made)."""
    try:
        per = _KERNEL_LAYOUTS.get(kernel)
    except TypeError:  # not weakly referenceable: made each time
        return _layout_of(kernel, name)
    if per is None:
        per = _KERNEL_LAYOUTS[kernel] = {}
    lay = per.get(name)
    if lay is None:
        lay = per[name] = _layout_of(kernel, name)
    return lay


def _layout_of(kernel: Any, name: str) -> Layout:
    schedule = kernel.schedule
    tensors = schedule.tensors()
    if name not in tensors:
        raise InputError(f"tensor {name!r} is not in kernel {kernel!r}")
    dist, machine = schedule.layouts()[name]
    if dist is None or machine is None:
        dist, machine = None, schedule.machine
    return Layout(tuple(tensors[name].shape), dist_key(dist), machine)


__all__ = ["Layout", "layout_for", "layout_of"]
