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
    """An n-dimensional grid of processors, e.g. ``Machine(2, 2)``."""

    shape: tuple[int, ...]

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
        return f"Machine({', '.join(map(str, self.shape))})"
