"""A grid of abstract processors.

Processor number ``p`` is the row-major index of its coordinates; every
per-processor list in the plan and in ``Stats`` is indexed by it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from distal.errors import ShapeError
from distal.typing import Coord


@dataclass(frozen=True, slots=True, init=False)
class Machine:
    """An n-dimensional grid of processors, e.g. ``Machine(2, 2)``.

    A hierarchical machine (``Machine(2, 2).nest(Machine(2))``: a 2 x 2 grid of
    nodes, each a line of 2 processors) is the grid of all coordinates, outer
    level first; ``levels`` keeps each level's shape.
    """

    shape: tuple[int, ...]
    levels: tuple[tuple[int, ...], ...]

    def __init__(self, *shape: int) -> None:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        if not shape:
            raise ShapeError("a Machine needs at least one dimension, e.g. Machine(4)")
        for d, s in enumerate(shape):
            if isinstance(s, bool) or not isinstance(s, int):
                raise ShapeError(f"Machine dimension {d} has size {s!r}; sizes must be integers")
            if s <= 0:
                raise ShapeError(f"Machine dimension {d} has size {s}; sizes must be positive")
        object.__setattr__(self, "shape", tuple(int(s) for s in shape))
        object.__setattr__(self, "levels", (self.shape,))

    def nest(self, inner: Machine) -> Machine:
        """This machine with every processor replaced by a copy of ``inner``."""
        if not isinstance(inner, Machine):
            raise ShapeError(f"nest() takes a dl.Machine, got {inner!r}")
        m = Machine(*self.shape, *inner.shape)
        object.__setattr__(m, "levels", self.levels + inner.levels)
        return m

    def level(self, k: int) -> Machine:
        """The flat grid of level ``k`` (0 is the outermost)."""
        if not isinstance(k, int) or not 0 <= k < len(self.levels):
            raise ShapeError(f"{self!r} has levels 0..{len(self.levels) - 1}, not {k!r}")
        return Machine(*self.levels[k])

    @property
    def nlevels(self) -> int:
        """Number of levels (1 for a flat grid)."""
        return len(self.levels)

    def level_dims(self, k: int) -> range:
        """Positions of level ``k``'s dimensions in ``shape``."""
        start = sum(len(x) for x in self.levels[:k])
        return range(start, start + len(self.levels[k]))

    def split_level(self, src: int, dst: int) -> int:
        """The outermost level at which processors ``src`` and ``dst`` differ (-1: same)."""
        a, b = self.coord(src), self.coord(dst)
        for k in range(self.nlevels):
            if any(a[d] != b[d] for d in self.level_dims(k)):
                return k
        return -1

    @property
    def ndim(self) -> int:
        """Number of grid dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of processors."""
        return math.prod(self.shape)

    def coords(self) -> list[Coord]:
        """All processor coordinates in row-major (processor number) order."""
        return list(itertools.product(*(range(s) for s in self.shape)))

    def rank(self, coord: Coord) -> int:
        """Processor number of ``coord``."""
        r = 0
        for c, s in zip(coord, self.shape, strict=True):
            r = r * s + c
        return r

    def coord(self, rank: int) -> Coord:
        """Coordinates of processor number ``rank``."""
        out = []
        for s in reversed(self.shape):
            out.append(rank % s)
            rank //= s
        return tuple(reversed(out))

    def __repr__(self) -> str:
        return ".nest(".join(f"Machine({', '.join(map(str, lv))})" for lv in self.levels) + (
            ")" * (len(self.levels) - 1)
        )
