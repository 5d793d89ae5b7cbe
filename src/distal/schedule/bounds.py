"""Bounds inference: the values each original variable takes under a partial assignment.

Loop variables given a value are fixed; the others range fully. Walking the
relations from each original variable down to the loops gives its set of values
as a union of intervals (see :mod:`distal.schedule.relations`). Rotations are by
processor loops, which every per-processor query fixes, so the sets of distinct
original variables are independent and the iteration set is their product.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from distal.errors import InternalError
from distal.lang.affine import clip as clip_domain
from distal.lang.affine import image_arrays
from distal.lang.nodes import Access, IndexVar
from distal.schedule.api import Schedule
from distal.schedule.relations import (
    Divide,
    Intervals,
    Relation,
    Rotate,
    Split,
    affine,
    clip,
    shift_mod,
)
from distal.typing import Box


class Bounds:
    """Interval queries over one schedule's relations."""

    def __init__(self, s: Schedule) -> None:
        self.schedule = s
        self.extent = s.extent
        self.loops = set(s.loops)
        self.defined_by: dict[IndexVar, Relation] = {}
        for r in s.relations:
            parent = r.target if isinstance(r, Rotate) else r.parent
            self.defined_by[parent] = r
        self.variables = s.statement.variables

    def values(self, v: IndexVar, fixed: dict[IndexVar, int]) -> Intervals:
        """The set of values of variable ``v`` given the fixed loop values."""
        n = self.extent[v]
        if v in self.loops:
            if v in fixed:
                x = fixed[v]
                return [(x, x + 1)] if 0 <= x < n else []
            return [(0, n)] if n > 0 else []
        r = self.defined_by.get(v)
        if r is None:
            raise InternalError(f"variable {v.name!r} is neither a loop nor derived")
        if isinstance(r, Rotate):
            shift = 0
            for b in r.by:
                if b not in fixed:
                    raise InternalError(f"rotation of {v.name!r} by unfixed loop {b.name!r}")
                shift += fixed[b]
            return shift_mod(self.values(r.result, fixed), shift, n)
        stride = self.extent[r.inner] if isinstance(r, Divide) else r.size
        assert isinstance(r, Divide | Split)
        out = affine(self.values(r.outer, fixed), self.values(r.inner, fixed), stride)
        return clip(out, n)

    def hull(self, v: IndexVar, fixed: dict[IndexVar, int]) -> tuple[int, int]:
        """Interval arithmetic on bounding intervals: an interval holding ``values(v, fixed)``.

        This is what data movement uses (one box per tensor); it equals the hull of
        the exact set except when a reordered split's inner loop is fixed above its
        outer one and the result is clipped or rotated, where it may be larger.
        The rule itself is :meth:`hull_arrays`; this is its one-processor case.
        """
        lo, hi = self.hull_arrays(v, fixed, 1, {})
        return int(lo[0]), int(hi[0])

    def hull_arrays(
        self, v: IndexVar, fixed: dict[IndexVar, np.ndarray | int], n: int, memo: dict
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`hull` for ``n`` processors at once: fixed loop values are arrays of ``n``.

        ``memo`` caches the intervals of variables already visited under this ``fixed``.
        Empty ranges are ``(0, 0)``.
        """
        if v in memo:
            return memo[v]
        ext = self.extent[v]
        if v in self.loops:
            if v in fixed:
                x = np.asarray(fixed[v], np.int64)
                ok = (x >= 0) & (x < ext)
                out = (np.where(ok, x, 0), np.where(ok, x + 1, 0))
            else:
                out = (np.int64(0), np.int64(ext))
        else:
            r = self.defined_by.get(v)
            if r is None:
                raise InternalError(f"variable {v.name!r} is neither a loop nor derived")
            if isinstance(r, Rotate):
                lo, hi = self.hull_arrays(r.result, fixed, n, memo)
                length = hi - lo
                for b in r.by:
                    if b not in fixed:
                        raise InternalError(f"rotation of {v.name!r} by unfixed loop {b.name!r}")
                a = (lo + sum(np.asarray(fixed[x], np.int64) for x in r.by)) % max(ext, 1)
                whole = (length >= ext) | (a + length > ext)
                empty = length <= 0
                out = (
                    np.where(empty | whole, 0, a),
                    np.where(empty, 0, np.where(whole, ext, a + length)),
                )
            else:
                stride = self.extent[r.inner] if isinstance(r, Divide) else r.size
                olo, ohi = self.hull_arrays(r.outer, fixed, n, memo)
                ilo, ihi = self.hull_arrays(r.inner, fixed, n, memo)
                lo = np.maximum(olo * stride + ilo, 0)
                hi = np.minimum((ohi - 1) * stride + ihi, ext)
                empty = (ohi <= olo) | (ihi <= ilo) | (hi <= lo)
                out = (np.where(empty, 0, lo), np.where(empty, 0, hi))
        out = (np.broadcast_to(out[0], (n,)), np.broadcast_to(out[1], (n,)))
        memo[v] = out
        return out

    def hull_box(self, fixed: dict[IndexVar, int]) -> dict[IndexVar, tuple[int, int]]:
        """Bounding interval of every original variable."""
        return {v: self.hull(v, fixed) for v in self.variables}

    def count(self, v: IndexVar, fixed: dict[IndexVar, int]) -> int:
        """How many values ``v`` takes given the fixed loop values (its set's size)."""
        return sum(hi - lo for lo, hi in self.values(v, fixed))

    def loops_under(self, v: IndexVar) -> set[IndexVar]:
        """The loop variables ``v``'s value is derived from (``v`` itself if it is a loop)."""
        if v in self.loops:
            return {v}
        r = self.defined_by.get(v)
        if r is None:
            raise InternalError(f"variable {v.name!r} is neither a loop nor derived")
        if isinstance(r, Rotate):
            return self.loops_under(r.result) | set(r.by)
        return self.loops_under(r.outer) | self.loops_under(r.inner)

    def exact_boxes(self, fixed: dict[IndexVar, int]) -> list[Box]:
        """Disjoint boxes over the statement variables covering exactly the iterations."""
        sets = [self.values(v, fixed) for v in self.variables]
        if any(not s for s in sets):
            return []
        return [tuple(combo) for combo in itertools.product(*sets)]


def access_hulls(
    access: Access,
    domain: tuple[tuple[IndexVar, int, int], ...],
    hull: Callable[[IndexVar], tuple[Any, Any]],
) -> list[tuple[Any, Any]]:
    """The box ``access`` reads, per tensor dimension, given ``hull(v)`` (the ranges of each
    variable, ints or arrays over processors): each variable's range cut to the term's
    ``domain``, then mapped through the access's affine index (``u[i - 1]`` over ``i`` in
    ``[lo, hi)`` reads ``[lo - 1, hi - 1)``; ``x[-i + 7]`` the mirror image). Empty ranges
    stay ``(0, 0)``."""
    cut = {v: (lo, hi) for v, lo, hi in domain}
    out = []
    for v, scale, offset in access.affine():
        lo, hi = hull(v)
        if v in cut:
            lo, hi = clip_domain(lo, hi, *cut[v])
        out.append(image_arrays(lo, hi, scale, offset) if access.shifted else (lo, hi))
    return out
