"""Where a held value lives: a tensor's distribution on a machine, and its blocks.

A :class:`Layout` is what a kernel's tensor says about placement (its distribution string,
or ``None`` for "all on processor 0", and the machine), together with the tensor's shape.
Two layouts *agree* when every processor holds the same box under both, whatever the
strings look like (``"xy -> xy"`` and ``"ab -> ab"`` agree), so agreement is decided on
the boxes, never on the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from distal.distribution.machine import Machine
from distal.distribution.notation import Distribution, parse_layout, whole_on_processor0
from distal.distribution.partition import Placement
from distal.typing import Box, box_is_empty


def dist_key(dist: Any) -> str | tuple[str, ...] | None:
    """A distribution as a layout keeps it: a string, one string per machine level, or None."""
    if dist is None or isinstance(dist, str):
        return dist
    return tuple(str(d) for d in dist)


@dataclass(frozen=True)
class Layout:
    """A tensor of ``shape`` distributed as ``dist`` (``None``: on processor 0) over
    ``machine``."""

    shape: tuple[int, ...]
    dist: str | tuple[str, ...] | None
    machine: Machine

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.shape, self.dist, self.machine.levels)

    @cached_property
    def distribution(self) -> Distribution | tuple[Distribution, ...]:
        if self.dist is None:
            return whole_on_processor0(len(self.shape), self.machine.shape)
        dist = self.dist if isinstance(self.dist, str) else list(self.dist)
        return parse_layout(dist, "held value", len(self.shape), self.machine)

    @cached_property
    def placement(self) -> Placement:
        return Placement(self.shape, self.distribution, self.machine.shape)

    @property
    def nprocs(self) -> int:
        return self.machine.size

    @cached_property
    def boxes(self) -> tuple[Box | None, ...]:
        """The box each processor holds (``None``: nothing), by processor number (worked
        out once per key, shared by every equal layout)."""
        key = self.key
        boxes = _BOXES.get(key)
        if boxes is None:
            pl = self.placement
            boxes = tuple(pl.owned_box(_coord(pl.grid, p)) for p in range(self.nprocs))
            while len(_BOXES) >= BOXES_KEPT:
                _BOXES.pop(next(iter(_BOXES)))
            _BOXES[key] = boxes
        return boxes

    @cached_property
    def blocks(self) -> tuple[tuple[Box, int], ...]:
        """Every distinct non-empty block once, with the lowest processor holding it."""
        seen: dict[Box, int] = {}
        for p, box in enumerate(self.boxes):
            if box is None or (box and box_is_empty(box)) or box in seen:
                continue
            seen[box] = p
        return tuple(seen.items())

    def agrees(self, other: Layout) -> bool:
        """Every processor holds the same box under both layouts."""
        if self is other:
            return True
        return self.shape == other.shape and self.boxes == other.boxes

    def to_json(self) -> dict[str, Any]:
        dist = list(self.dist) if isinstance(self.dist, tuple) else self.dist
        return {"dist": dist, "levels": [list(lv) for lv in self.machine.levels]}

    @staticmethod
    def from_json(shape: tuple[int, ...], doc: dict[str, Any]) -> Layout:
        levels = [tuple(int(x) for x in lv) for lv in doc["levels"]]
        machine = Machine(*levels[0])
        for lv in levels[1:]:
            machine = machine.nest(Machine(*lv))
        return Layout(tuple(shape), dist_key(doc["dist"]), machine)

    def __str__(self) -> str:
        dist = "on processor 0" if self.dist is None else repr(self.dist)
        return f"{dist} over {self.machine!r}"


BOXES_KEPT = 256  # layouts (by key) whose boxes are kept
_BOXES: dict[tuple[Any, ...], tuple[Box | None, ...]] = {}


def _coord(grid: tuple[int, ...], p: int) -> tuple[int, ...]:
    """Coordinates of processor ``p`` (row-major) on a grid of shape ``grid``."""
    out = []
    for s in reversed(grid):
        out.append(p % s)
        p //= s
    return tuple(reversed(out))


def layout_for(name: str, shape: tuple[int, ...], dist: Any, machine: Machine) -> Layout:
    """The layout a distribution string gives value ``name`` on ``machine``.

    Raises:
        NotationError: a bad distribution string (naming it).
    """
    if type(shape) is tuple and type(dist) is str:  # (the common case: no key to normalize)
        key = (shape, dist, machine.levels)
    else:
        key = (tuple(shape), dist_key(dist), machine.levels)
    lay = _LAYOUTS.get(key)
    if lay is None:
        lay = Layout(tuple(shape), dist_key(dist), machine)
        _ = lay.distribution  # parsed now, so a bad string fails here
        while len(_LAYOUTS) >= BOXES_KEPT:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))
        _LAYOUTS[key] = lay
    return lay


#: layouts made by :func:`layout_for`, by (shape, distribution, machine): a loop asks for
#: the same few again and again, and parsing the string is most of the cost
_LAYOUTS: dict[tuple, Layout] = {}

__all__ = ["Layout", "dist_key", "layout_for"]
