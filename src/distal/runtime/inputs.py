"""Values entering a computation: the rules an input must follow for its tensor.

Every place a value enters (``kernel.run``, bound sparse kernels, sessions, the apps) reads
dense inputs through :func:`dense_value` and sparse ones through :func:`sparse_value`, and
checks any other element type against a tensor with :func:`check_cast`, so one rule decides
what is accepted and how it is converted.

The rule is numpy's ``same_kind`` casting: a value is converted to its tensor's dtype when
``np.can_cast(value.dtype, tensor.dtype, "same_kind")``, i.e. the conversion may round
(float64 data into a float32 tensor, int64 into int32) but never changes the kind of number.
Everything else is refused, because the conversion would silently change the values: a
float into an integer tensor truncates (NaN becomes INT_MIN), a signed integer into an
unsigned one wraps negatives, a complex value into a real tensor drops its imaginary part.
Integers and booleans into float or complex tensors are safe and accepted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.errors import InputError


def check_cast(label: str, src: Any, t: Any) -> None:
    """Refuse a value (``label``, e.g. ``"input 'B'"``) of dtype ``src`` for tensor ``t``
    (anything with ``.name`` and ``.dtype``, or a bare dtype) unless numpy's ``same_kind``
    rule allows the conversion.

    Raises:
        InputError: naming the value and the tensor, and saying how to convert explicitly.
    """
    src = np.dtype(src)
    tensor = not isinstance(t, np.dtype | type | str)
    dst = np.dtype(t.dtype if tensor else t)
    if np.can_cast(src, dst, "same_kind"):
        return
    if src.kind == "c":
        loss = "its imaginary part would be dropped"
    elif src.kind == "f":
        loss = "its values would be truncated to integers (NaN and infinities made up)"
    elif src.kind in "iu" and dst.kind == "u":
        loss = "negative values would wrap around"
    else:
        loss = "its values would change"
    fix = f"convert it yourself (e.g. np.asarray(x).astype(np.{dst.name}))"
    if tensor:
        target, fix = f"tensor {t.name!r} is {dst}", f"{fix} or give the tensor dtype=np.{src.name}"
    else:
        target = f"{dst} is needed"
    raise InputError(f"{label} is {src} but {target}: {loss}; {fix}")


def dense_value(name: str, x: Any, t: Any) -> np.ndarray:
    """Input ``name`` for dense tensor ``t``: a numeric array of its shape, in its dtype
    (converted only where :func:`check_cast` allows)."""
    try:
        arr = np.asarray(x)
    except Exception as e:
        raise InputError(f"input {name!r} cannot be read as an array: {e}") from e
    if arr.dtype.kind not in "biufc":
        raise InputError(f"input {name!r} has non-numeric dtype {arr.dtype}")
    check_cast(f"input {name!r}", arr.dtype, t)
    if arr.shape != t.shape:
        raise InputError(f"input {name!r} has shape {arr.shape}; tensor expects {t.shape}")
    return np.asarray(arr, dtype=t.dtype)


def sparse_value(name: str, x: Any, t: Any) -> Any:
    """Input ``name`` for sparse tensor ``t``: a ``SparseArray`` in its format and shape,
    whose values are in its dtype (converted only where :func:`check_cast` allows)."""
    from distal.errors import NotationError
    from distal.sparse.array import as_sparse

    src = getattr(x, "dtype", None)  # SparseArray, scipy, pydata and numpy arrays have one
    try:
        if src is None:
            x = np.asarray(x)
            src = x.dtype
        src = np.dtype(src)
    except Exception as e:
        raise InputError(f"input {name!r} cannot be read as a {t.format} array: {e}") from e
    if src.kind in "biufc":  # a non-numeric one is refused by as_sparse, naming its dtype
        check_cast(f"input {name!r}", src, t)
    try:
        return as_sparse(x, t.format, t.shape, dtype=t.dtype, label=f"input {name!r}")
    except (InputError, NotationError) as e:
        raise type(e)(f"input {name!r}: {e}") from e
    except Exception as e:  # a shape or conversion failure names the input
        raise InputError(f"input {name!r} cannot be read as a {t.format} array: {e}") from e
