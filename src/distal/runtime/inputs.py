"""Values entering a computation: the rules an input must follow for its tensor.

Every place a value enters (``kernel.run``, bound sparse kernels, sessions, the apps) reads
dense inputs through :func:`dense_value`, so one rule decides what is accepted and how it is
converted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.errors import InputError


def dense_value(name: str, x: Any, t: Any) -> np.ndarray:
    """Input ``name`` for dense tensor ``t``: a numeric array of its shape, in its dtype."""
    try:
        arr = np.asarray(x)
    except Exception as e:
        raise InputError(f"input {name!r} cannot be read as an array: {e}") from e
    if arr.dtype.kind not in "biufc":
        raise InputError(f"input {name!r} has non-numeric dtype {arr.dtype}")
    if arr.dtype.kind == "c" and t.dtype.kind != "c":
        raise InputError(f"input {name!r} is complex but tensor {name!r} is {t.dtype}")
    if arr.shape != t.shape:
        raise InputError(f"input {name!r} has shape {arr.shape}; tensor expects {t.shape}")
    return np.asarray(arr, dtype=t.dtype)
