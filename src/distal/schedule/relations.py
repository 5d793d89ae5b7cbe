"""Relations between index variables, and the interval arithmetic over them.

Each scheduling command that introduces variables records a relation:

* ``Divide(v, o, i, parts)``: ``v = o * ceil(N/parts) + i``, valid while ``v < N``;
* ``Split(v, o, i, size)``:   ``v = o * size + i``, valid while ``v < N``;
* ``Rotate(t, by, r)``:       ``t = (r + sum(by)) mod N``;
* ``Fuse(outer, inner, f)``:   ``f`` runs over the ``(outer, inner)`` pairs, row-major;
* ``Pos(f, p, tensor)``:       ``p`` runs over the stored positions of ``tensor``'s access
  at the levels of ``f``'s variables (sparse tensors; its extent is known at bind time).

Given a value for some loop variables and full ranges for the others, every
original variable ranges over a union of intervals; the functions below compute
it exactly (integers only), so the lowering can say which box of each tensor a
processor needs at each step and which boxes of the iteration space its leaf
covers.
"""

from __future__ import annotations

from dataclasses import dataclass

from distal.lang.nodes import IndexVar
from distal.typing import Interval

Intervals = list[Interval]


@dataclass(frozen=True, slots=True, eq=False)
class Divide:
    """``parent = outer * ceil(N / parts) + inner`` (outer has ``parts`` iterations)."""

    parent: IndexVar
    outer: IndexVar
    inner: IndexVar
    parts: int


@dataclass(frozen=True, slots=True, eq=False)
class Split:
    """``parent = outer * size + inner`` (inner has ``size`` iterations)."""

    parent: IndexVar
    outer: IndexVar
    inner: IndexVar
    size: int


@dataclass(frozen=True, slots=True, eq=False)
class Rotate:
    """``target = (result + sum(by)) mod extent(target)``: a per-processor start offset."""

    target: IndexVar
    by: tuple[IndexVar, ...]
    result: IndexVar


@dataclass(frozen=True, slots=True, eq=False)
class Fuse:
    """``fused = outer * extent(inner) + inner``: one loop over the pairs."""

    outer: IndexVar
    inner: IndexVar
    fused: IndexVar


@dataclass(frozen=True, slots=True, eq=False)
class Pos:
    """``position`` iterates the stored entries of ``tensor`` over ``coords`` (its first
    storage levels), in storage order; the pattern gives each position its coordinates."""

    coord: IndexVar
    position: IndexVar
    tensor: str
    coords: tuple[IndexVar, ...]


Relation = Divide | Split | Rotate | Fuse | Pos


def normalize(ivs: Intervals) -> Intervals:
    """Sort, drop empties and merge touching intervals."""
    out: Intervals = []
    for lo, hi in sorted(iv for iv in ivs if iv[1] > iv[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def clip(ivs: Intervals, n: int) -> Intervals:
    """Intersect with ``[0, n)``."""
    return normalize([(max(lo, 0), min(hi, n)) for lo, hi in ivs])


def affine(outer: Intervals, inner: Intervals, stride: int) -> Intervals:
    """``{o * stride + i}`` for o, i in the given sets."""
    if inner == [(0, stride)]:
        return normalize([(lo * stride, hi * stride) for lo, hi in outer])
    return normalize(
        [
            (o * stride + lo, o * stride + hi)
            for olo, ohi in outer
            for o in range(olo, ohi)
            for lo, hi in inner
        ]
    )


def shift_mod(ivs: Intervals, s: int, n: int) -> Intervals:
    """``{(x + s) mod n}``: each interval moves and may wrap into two."""
    out: Intervals = []
    for lo, hi in ivs:
        length = hi - lo
        if length >= n:
            return [(0, n)] if n > 0 else []
        a = (lo + s) % n
        if a + length <= n:
            out.append((a, a + length))
        else:
            out += [(a, n), (0, a + length - n)]
    return normalize(out)


def hull(ivs: Intervals) -> Interval:
    """Smallest interval holding the set (``(0, 0)`` when empty)."""
    return (ivs[0][0], ivs[-1][1]) if ivs else (0, 0)
