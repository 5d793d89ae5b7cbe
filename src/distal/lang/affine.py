"""Affine indices, ``u[i - 1, j]`` and ``x[2 * i + 1]``, and the intervals they cover.

An access index is a variable times a non-zero integer *scale* plus an integer *offset*:
``a * v + c``. Over a range ``[lo, hi)`` of ``v`` it covers the values ``a*lo + c``,
``a*(lo+1) + c``, ... ``a*(hi-1) + c``: their hull is :func:`image`, the box a plan fetches
for it (every ``|a|``-th element for ``|a| > 1``; the hull moves the ones between too, and
``Stats`` counts what moves). A *domain* ``[dlo, dhi)`` restricts a variable's range for
one term (:func:`clip`): a stencil's interior.

This module imports no other part of :mod:`distal.lang`, so the node classes, bounds
inference and the leaves share one spelling of the rule.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.errors import NotationError


def _int(c: Any, what: str) -> int:
    if isinstance(c, np.ndarray) and c.ndim == 0:
        c = c.item()
    if isinstance(c, bool) or not isinstance(c, numbers.Integral):
        raise NotationError(
            f"{what} {c!r}: an index is a variable times an integer plus an integer "
            "(i + 1, 2 * i - 1)"
        )
    return int(c)


@dataclass(frozen=True, slots=True)
class Affine:
    """``scale * var + offset`` (``var`` an :class:`~distal.lang.nodes.IndexVar`), written
    ``i + 1``, ``i - 1``, ``2 * i``, ``-i + 7``. Used as an index of an access it makes the
    access *shifted*: checked to lie inside the tensor, never defining an extent."""

    var: Any
    scale: int = 1
    offset: int = 0

    def __post_init__(self) -> None:
        if self.scale == 0:
            raise NotationError(f"index {self.var!r} * 0: a scale must be non-zero")

    def __add__(self, c: Any) -> Affine:
        return Affine(self.var, self.scale, self.offset + _int(c, f"{self!r} +"))

    def __radd__(self, c: Any) -> Affine:
        return self + c

    def __sub__(self, c: Any) -> Affine:
        return Affine(self.var, self.scale, self.offset - _int(c, f"{self!r} -"))

    def __rsub__(self, c: Any) -> Affine:
        return Affine(self.var, -self.scale, _int(c, f"- {self!r}:") - self.offset)

    def __mul__(self, k: Any) -> Affine:
        k = _int(k, f"{self!r} *")
        return Affine(self.var, self.scale * k, self.offset * k)

    def __rmul__(self, k: Any) -> Affine:
        return self * k

    def __neg__(self) -> Affine:
        return Affine(self.var, -self.scale, -self.offset)

    def __pos__(self) -> Affine:
        return self

    def __repr__(self) -> str:
        return spell(self.var.name, self.scale, self.offset)


def spell(name: str, scale: int, offset: int) -> str:
    """``scale * name + offset`` as one writes it: ``i``, ``i-1``, ``2*i+1``, ``-i+7``."""
    head = name if scale == 1 else f"-{name}" if scale == -1 else f"{scale}*{name}"
    if offset == 0:
        return head
    return f"{head}{'+' if offset > 0 else '-'}{abs(offset)}"


def image(lo: int, hi: int, scale: int, offset: int) -> tuple[int, int]:
    """The hull ``[a, b)`` of ``scale * v + offset`` for ``v`` in ``[lo, hi)``; ``(0, 0)``
    when the range is empty."""
    if hi <= lo:
        return 0, 0
    x, y = scale * lo + offset, scale * (hi - 1) + offset
    return (x, y + 1) if x <= y else (y, x + 1)


def image_arrays(lo: np.ndarray, hi: np.ndarray, scale: int, offset: int) -> tuple[Any, Any]:
    """:func:`image` of arrays of ranges (empty ranges give ``(0, 0)``)."""
    if scale == 1 and offset == 0:
        return lo, hi
    empty = hi <= lo
    x = scale * lo + offset
    y = scale * (hi - 1) + offset
    a, b = (x, y + 1) if scale > 0 else (y, x + 1)
    return np.where(empty, 0, a), np.where(empty, 0, b)


def clip(lo: Any, hi: Any, dlo: int, dhi: int) -> tuple[Any, Any]:
    """Ranges ``[lo, hi)`` cut to the domain ``[dlo, dhi)`` (ints or arrays; an empty
    result is ``(0, 0)``)."""
    a, b = np.maximum(lo, dlo), np.minimum(hi, dhi)
    empty = b <= a
    if np.ndim(empty) == 0:
        return (0, 0) if empty else (int(a), int(b))
    return np.where(empty, 0, a), np.where(empty, 0, b)
