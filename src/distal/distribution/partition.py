"""Which processor owns which box of a tensor: pure functions of shapes.

Block ``b`` of an extent ``N`` cut into ``G`` pieces is
``[b*ceil(N/G), min((b+1)*ceil(N/G), N))``, possibly empty. A tensor dimension
cut by several machine dimensions ``m1, m2, ...`` of one level has
``G = g1*g2*...`` pieces and piece number ``b = ((c1*g2) + c2)*g3 + ...`` (first
position most significant). On a hierarchical machine each level cuts the piece
the previous level gave (DISTAL's nesting); the *leaf block number* along a
dimension combines the levels' piece numbers, outer level most significant, so
leaf blocks are numbered in order along the dimension.

Lowering, the cost model and the test oracles all call these functions;
runtimes never recompute ownership themselves.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field

from distal.distribution.notation import PART, REPL, RESTRICT, Distribution
from distal.typing import Box, Coord, Interval


def block_interval(extent: int, pieces: int, b: int) -> Interval:
    """Half-open interval of block ``b`` of ``extent`` cut into ``pieces`` blocks."""
    c = -(-extent // pieces)
    return (min(b * c, extent), min((b + 1) * c, extent))


@dataclass(frozen=True)
class Placement:
    """A tensor of ``shape`` laid out on a grid of ``grid`` shape.

    ``dist`` is one :class:`Distribution` over the whole grid, or a tuple of
    them, one per machine level (their right sides split ``grid`` in order).
    """

    shape: tuple[int, ...]
    dist: Distribution | tuple[Distribution, ...]
    grid: tuple[int, ...]
    layers: tuple[tuple[Distribution, int, tuple[int, ...]], ...] = field(init=False, repr=False)
    radix: tuple[tuple[int, ...], ...] = field(init=False, repr=False)
    bounds: tuple[tuple[Interval, ...], ...] = field(init=False, repr=False)
    starts: tuple[tuple[int, ...], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        dists = self.dist if isinstance(self.dist, tuple) else (self.dist,)
        layers, offset = [], 0
        for dist in dists:
            n = len(dist.rules)
            layers.append((dist, offset, self.grid[offset : offset + n]))
            offset += n
        order = len(self.shape)
        radix = tuple(
            tuple(math.prod(g[m] for m in dist.cuts(order)[d]) for dist, _, g in layers)
            for d in range(order)
        )
        bounds = []
        for d, n in enumerate(self.shape):
            ivs = [(0, n)]
            for g in radix[d]:
                ivs = [
                    (lo + a, lo + b)
                    for lo, hi in ivs
                    for a, b in (block_interval(hi - lo, g, x) for x in range(g))
                ]
            bounds.append(tuple(ivs))
        object.__setattr__(self, "layers", tuple(layers))
        object.__setattr__(self, "radix", radix)
        object.__setattr__(self, "bounds", tuple(bounds))
        object.__setattr__(self, "starts", tuple(tuple(lo for lo, _ in b) for b in bounds))

    def __hash__(self) -> int:
        return hash((self.shape, self.dist, self.grid))

    def pieces(self, d: int) -> int:
        """Number of (leaf) blocks along tensor dimension ``d``."""
        return len(self.bounds[d])

    def block_index(self, coord: Coord) -> tuple[int, ...] | None:
        """Leaf block numbers held by the processor at ``coord`` (None if it holds nothing)."""
        order = len(self.shape)
        idx = [0] * order
        for dist, off, g in self.layers:
            for m, r in enumerate(dist.rules):
                if r.kind == RESTRICT and coord[off + m] != r.coord:
                    return None
            for d, ms in enumerate(dist.cuts(order)):
                b = 0
                for m in ms:
                    b = b * g[m] + coord[off + m]
                idx[d] = idx[d] * math.prod(g[m] for m in ms) + b
        return tuple(idx)

    def block_box(self, index: tuple[int, ...]) -> Box:
        """The box of the leaf block with these numbers."""
        return tuple(self.bounds[d][b] for d, b in enumerate(index))

    def owned_box(self, coord: Coord) -> Box | None:
        """The box the processor at ``coord`` holds, or None when it holds nothing."""
        idx = self.block_index(coord)
        return None if idx is None else self.block_box(idx)

    def _fixed_coords(self, index: tuple[int, ...]) -> list[int]:
        """Coordinates that the block numbers and restrictions fix (-1 where replicated)."""
        fixed = [-1] * len(self.grid)
        order = len(self.shape)
        rest = list(index)
        for li in reversed(range(len(self.layers))):
            dist, off, g = self.layers[li]
            for m, r in enumerate(dist.rules):
                if r.kind == RESTRICT:
                    fixed[off + m] = r.coord
            for d, ms in enumerate(dist.cuts(order)):
                piece = rest[d] % self.radix[d][li]
                rest[d] //= self.radix[d][li]
                for m in reversed(ms):
                    fixed[off + m] = piece % g[m]
                    piece //= g[m]
        return fixed

    def replicas(self, index: tuple[int, ...]) -> list[Coord]:
        """All processor coordinates holding block ``index``, in row-major order."""
        fixed = self._fixed_coords(index)
        choices = [range(self.grid[m]) if f < 0 else (f,) for m, f in enumerate(fixed)]
        return [tuple(c) for c in itertools.product(*choices)]

    def source_for(self, index: tuple[int, ...], receiver: Coord) -> Coord:
        """The replica of block ``index`` that serves ``receiver``.

        Deterministic: the receiver itself when it holds the block, otherwise the
        replica agreeing with the receiver on every replicated machine dimension.
        """
        fixed = self._fixed_coords(index)
        return tuple(receiver[m] if f < 0 else f for m, f in enumerate(fixed))

    def split(self, box: Box) -> list[tuple[tuple[int, ...], Box]]:
        """Cut ``box`` along block boundaries: ``(block index, piece)`` pairs, non-empty."""
        if any(hi <= lo for lo, hi in box):
            return []
        per_dim = []
        for d, (lo, hi) in enumerate(box):
            bnds = self.bounds[d]
            first = max(bisect.bisect_right(self.starts[d], lo) - 1, 0)
            hits = []
            for b in range(first, len(bnds)):
                blo, bhi = bnds[b]
                if blo >= hi:
                    break
                a, c = max(lo, blo), min(hi, bhi)
                if c > a:
                    hits.append((b, (a, c)))
            per_dim.append(hits)
        return [
            (tuple(b for b, _ in combo), tuple(iv for _, iv in combo))
            for combo in itertools.product(*per_dim)
        ]


__all__ = ["PART", "REPL", "RESTRICT", "Placement", "block_interval"]
