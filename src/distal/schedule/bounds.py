"""Bounds inference: the values each original variable takes under a partial assignment.

Loop variables given a value are fixed; the others range fully. Walking the
relations from each original variable down to the loops gives its set of values
as a union of intervals (see :mod:`distal.schedule.relations`). Rotations are by
processor loops, which every per-processor query fixes, so the sets of distinct
original variables are independent and the iteration set is their product.
"""

from __future__ import annotations

import itertools

from distal.errors import InternalError
from distal.lang.nodes import IndexVar
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
        """
        n = self.extent[v]
        if v in self.loops:
            if v in fixed:
                x = fixed[v]
                return (x, x + 1) if 0 <= x < n else (0, 0)
            return (0, n)
        r = self.defined_by[v]
        if isinstance(r, Rotate):
            lo, hi = self.hull(r.result, fixed)
            if hi <= lo:
                return (0, 0)
            if hi - lo >= n:
                return (0, n)
            a = (lo + sum(fixed[b] for b in r.by)) % n
            return (a, a + hi - lo) if a + hi - lo <= n else (0, n)
        stride = self.extent[r.inner] if isinstance(r, Divide) else r.size
        olo, ohi = self.hull(r.outer, fixed)
        ilo, ihi = self.hull(r.inner, fixed)
        if ohi <= olo or ihi <= ilo:
            return (0, 0)
        lo, hi = max(olo * stride + ilo, 0), min((ohi - 1) * stride + ihi, n)
        return (lo, hi) if hi > lo else (0, 0)

    def hull_box(self, fixed: dict[IndexVar, int]) -> dict[IndexVar, tuple[int, int]]:
        """Bounding interval of every original variable."""
        return {v: self.hull(v, fixed) for v in self.variables}

    def exact_boxes(self, fixed: dict[IndexVar, int]) -> list[Box]:
        """Disjoint boxes over the statement variables covering exactly the iterations."""
        sets = [self.values(v, fixed) for v in self.variables]
        if any(not s for s in sets):
            return []
        return [tuple(combo) for combo in itertools.product(*sets)]
