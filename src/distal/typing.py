"""Small type aliases shared by the pipeline.

A *box* is a half-open hyper-rectangle: one ``(lo, hi)`` pair per dimension,
``lo <= hi``; it is empty when any ``lo == hi``.
"""

from __future__ import annotations

from typing import Any

Interval = tuple[int, int]
Box = tuple[Interval, ...]
Coord = tuple[int, ...]
Shape = tuple[int, ...]


def box_volume(box: Box) -> int:
    """Number of points in ``box`` (1 for the 0-dimensional box)."""
    v = 1
    for lo, hi in box:
        v *= max(hi - lo, 0)
    return v


def box_is_empty(box: Box) -> bool:
    """True when the box holds no point."""
    return any(hi <= lo for lo, hi in box)


def box_intersect(a: Box, b: Box) -> Box:
    """Intersection of two boxes of the same rank (possibly empty)."""
    return tuple((max(al, bl), min(ah, bh)) for (al, ah), (bl, bh) in zip(a, b, strict=True))


def box_contains(outer: Box, inner: Box) -> bool:
    """True when every point of ``inner`` lies in ``outer`` (empty boxes fit anywhere)."""
    if box_is_empty(inner):
        return True
    return all(ol <= il and ih <= oh for (ol, oh), (il, ih) in zip(outer, inner, strict=True))


def box_index(box: Box, origin: Box) -> tuple[Any, ...]:
    """Index selecting ``box`` inside an array that holds ``origin``.

    The 0-dimensional box gives ``(...,)``, so indexing a 0-d array yields a view that can
    be assigned into, not a copied scalar (what ``arr[()]`` would give).
    """
    if not box:
        return (Ellipsis,)
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin, strict=True))


def box_shape(box: Box) -> Shape:
    """Array shape of a box."""
    return tuple(max(hi - lo, 0) for lo, hi in box)
