"""The one cast rule: which element types a tensor takes, and the error for the others.

The rule is numpy's ``same_kind`` casting: a value is converted to its tensor's dtype when
``np.can_cast(value.dtype, tensor.dtype, "same_kind")``, i.e. the conversion may round
(float64 data into a float32 tensor, int64 into int32) but never changes the kind of number.
Everything else is refused, because the conversion would silently change the values: a
float into an integer tensor truncates (NaN becomes INT_MIN), a signed integer into an
unsigned one wraps negatives, a complex value into a real tensor drops its imaginary part.
Integers and booleans into float or complex tensors are safe and accepted.

It sits below everything that converts values (sparse arrays, block sources, inputs,
sessions, the apps), so each of them applies this one rule.
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
