"""Which processor owns which box of a tensor: pure functions of shapes.

Block ``b`` of an extent ``N`` cut into ``G`` pieces is
``[b*ceil(N/G), min((b+1)*ceil(N/G), N))``, possibly empty. A tensor dimension
cut by several machine dimensions ``m1, m2, ...`` has ``G = g1*g2*...`` pieces
and piece index ``b = ((c1*g2) + c2)*g3 + ...`` (first position most significant).

Lowering, the cost model and the test oracles all call these functions;
runtimes never recompute ownership themselves.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from distal.distribution.notation import REPL, RESTRICT, Distribution
from distal.typing import Box, Coord, Interval


def block_interval(extent: int, pieces: int, b: int) -> Interval:
    """Half-open interval of block ``b`` of ``extent`` cut into ``pieces`` blocks."""
    c = -(-extent // pieces)
    return (min(b * c, extent), min((b + 1) * c, extent))


def blocks_meeting(extent: int, pieces: int, lo: int, hi: int) -> range:
    """Block numbers whose intervals intersect ``[lo, hi)`` (non-empty blocks only)."""
    if hi <= lo or extent == 0:
        return range(0)
    c = -(-extent // pieces)
    return range(lo // c, (hi - 1) // c + 1)


@dataclass(frozen=True, slots=True)
class Placement:
    """A tensor of ``shape`` laid out by ``dist`` on a grid of ``grid`` shape."""

    shape: tuple[int, ...]
    dist: Distribution
    grid: tuple[int, ...]

    @property
    def cuts(self) -> tuple[tuple[int, ...], ...]:
        """Machine dimensions cutting each tensor dimension."""
        return self.dist.cuts(len(self.shape))

    def pieces(self, d: int) -> int:
        """Number of blocks along tensor dimension ``d``."""
        return math.prod(self.grid[m] for m in self.cuts[d])

    def block_index(self, coord: Coord) -> tuple[int, ...] | None:
        """Block numbers held by the processor at ``coord`` (None if it holds nothing)."""
        for m, r in enumerate(self.dist.rules):
            if r.kind == RESTRICT and coord[m] != r.coord:
                return None
        out = []
        for ms in self.cuts:
            b = 0
            for m in ms:
                b = b * self.grid[m] + coord[m]
            out.append(b)
        return tuple(out)

    def block_box(self, index: tuple[int, ...]) -> Box:
        """The box of the block with these block numbers."""
        return tuple(
            block_interval(n, self.pieces(d), b)
            for d, (n, b) in enumerate(zip(self.shape, index, strict=True))
        )

    def owned_box(self, coord: Coord) -> Box | None:
        """The box the processor at ``coord`` holds, or None when it holds nothing."""
        idx = self.block_index(coord)
        return None if idx is None else self.block_box(idx)

    def replicas(self, index: tuple[int, ...]) -> list[Coord]:
        """All processor coordinates holding the block ``index``, in row-major order."""
        choices: list[list[int]] = []
        fixed = self._fixed_coords(index)
        for m, r in enumerate(self.dist.rules):
            if r.kind == REPL:
                choices.append(list(range(self.grid[m])))
            else:
                choices.append([fixed[m]])
        return [tuple(c) for c in itertools.product(*choices)]

    def _fixed_coords(self, index: tuple[int, ...]) -> list[int]:
        """Coordinates that the block index and restrictions fix (-1 where replicated)."""
        fixed = [-1] * len(self.grid)
        for m, r in enumerate(self.dist.rules):
            if r.kind == RESTRICT:
                fixed[m] = r.coord
        for d, ms in enumerate(self.cuts):
            b = index[d]
            for m in reversed(ms):
                fixed[m] = b % self.grid[m]
                b //= self.grid[m]
        return fixed

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
            g = self.pieces(d)
            n = self.shape[d]
            per_dim.append(
                [
                    (b, (max(lo, blo), min(hi, bhi)))
                    for b in blocks_meeting(n, g, lo, hi)
                    for blo, bhi in [block_interval(n, g, b)]
                    if min(hi, bhi) > max(lo, blo)
                ]
            )
        return [
            (tuple(b for b, _ in combo), tuple(iv for _, iv in combo))
            for combo in itertools.product(*per_dim)
        ]
