"""Tensor distributions as upstream MLIR's ``shard`` dialect: ``shard.grid`` and
``shard.sharding``.

The machine is one ``shard.grid @grid`` of all its dimensions. A hierarchical machine
(``Machine(2, 2).nest(Machine(2))``) is *flattened*: its grid is every level's dimensions,
outer level first (``2x2x2``), the same processor numbering distal uses.

A tensor's sharding lists, for each tensor dimension, the grid axes cutting it
(``split_axes``), outer level first and, within a level, the first cutting machine
dimension first: the order in which distal numbers leaf blocks (``distribution.partition``),
the first axis most significant, as upstream linearizes a split over several axes. An
axis no dimension names replicates (upstream's default). Two things upstream's sharding
has no word for are written exactly all the same:

* **Non-uniform blocks** (``ceil`` blocks of an extent the pieces do not divide, nested
  levels cutting a piece again): ``sharded_dims_offsets`` give every shard's start along
  each split dimension, and the end of the last one.
* **Restriction to one coordinate** (``"ij -> ij0"``: only the processors at coordinate 0
  of the third axis hold A): the restricted axis is appended to the last split dimension's
  axes with *empty* shards at the other coordinates, so the offsets say that those
  processors hold nothing. A 0-d tensor has no dimension to split: it reads as replicated, and the
  SPMD code reduces and keeps it where distal does (a note in the module says so).

A sparse tensor cut by coordinates shards like a dense one (its stored entries follow the
rows they lie in). A non-zero cut (``"xy -> (xy)"``, stored entries cut by position) has no
sharding in upstream's terms: the module says so in a note and gives no ``shard.sharding``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distal.distribution.machine import Machine
from distal.distribution.notation import RESTRICT
from distal.distribution.partition import Placement
from distal.errors import NotSupportedYet

GRID = "grid"


def grid_text(machine: Machine) -> str:
    """``shard.grid @grid(shape = 2x2x2)``."""
    return f"shard.grid @{GRID}(shape = {'x'.join(str(s) for s in machine.shape)})"


@dataclass(frozen=True, slots=True)
class Sharding:
    """One tensor's ``shard.sharding``: per tensor dimension the grid axes splitting it,
    and the shard offsets along the split dimensions (None: upstream's equal shards)."""

    tensor: str
    split_axes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...] | None = None
    note: str = ""

    def text(self) -> str:
        """``shard.sharding @grid split_axes = [[0], [1]] ... : !shard.sharding``."""
        axes = ", ".join("[" + ", ".join(map(str, a)) + "]" for a in self.split_axes) or "[]"
        out = f"shard.sharding @{GRID} split_axes = [{axes}]"
        if self.offsets is not None:
            out += f" sharded_dims_offsets = [{', '.join(map(str, self.offsets))}]"
        return out + " : !shard.sharding"


def placement_of(
    schedule: Any, name: str, plan_placements: dict[str, Placement]
) -> Placement | None:
    """The placement of tensor ``name``: the plan's, or (a sparse tensor the plan owns by
    pattern) one built from its distribution when that cuts by coordinates; None for a
    non-zero cut."""
    if name in plan_placements:
        return plan_placements[name]
    from distal.distribution.notation import parse_layout

    t = schedule.tensors()[name]
    dist, m = schedule.layouts()[name]
    if dist is None or m is None:
        return None
    try:
        return Placement(t.shape, parse_layout(dist, name, t.ndim, m), m.shape)
    except NotSupportedYet:
        return None


def sharding_of(name: str, pl: Placement | None) -> Sharding:
    """The sharding of tensor ``name`` placed by ``pl`` (see the module docstring)."""
    if pl is None:
        return Sharding(
            name,
            (),
            note=f"{name}: its stored entries are cut by position (a non-zero cut), which no "
            "shard.sharding expresses; each processor's argument is its own entries",
        )
    order = len(pl.shape)
    axes: list[list[int]] = [[] for _ in range(order)]
    restricted: list[tuple[int, int]] = []
    for dist, off, _g in pl.layers:
        for d, ms in enumerate(dist.cuts(order)):
            axes[d].extend(off + m for m in ms)
        for m, r in enumerate(dist.rules):
            if r.kind == RESTRICT:
                restricted.append((off + m, r.coord))
    # an axis of one processor splits nothing (and upstream's verifier (22.1) counts a split's
    # shards as the sum of its axes' sizes: a unit axis would make the offsets look short)
    axes = [[m for m in ax if pl.grid[m] > 1] for ax in axes]
    restricted = [(m, c) for m, c in restricted if pl.grid[m] > 1]
    note = ""
    if restricted and order == 0:
        where = ", ".join(f"coordinate {c} of axis {m}" for m, c in restricted)
        note = (
            f"{name} is 0-d and held at {where} only: written as replicated (a 0-d tensor "
            "has no dimension to split)"
        )
        restricted = []
    # the restricted axes join the last split dimension (the last dimension if none is):
    # upstream's verifier reads a later dimension's offsets from where the sum of the axes'
    # sizes puts them, which is off when a split over several axes comes before another
    target = max((d for d, ax in enumerate(axes) if ax), default=order - 1)
    if restricted:
        axes[target].extend(m for m, _ in restricted)
    offsets = _offsets(pl, axes, restricted, target)
    while axes and not axes[-1]:
        axes.pop()  # upstream trims trailing unsplit dimensions; so does the text
    return Sharding(name, tuple(tuple(a) for a in axes) or ((),), offsets, note)


def _offsets(
    pl: Placement, axes: list[list[int]], restricted: list[tuple[int, int]], target: int
) -> tuple[int, ...] | None:
    """Shard offsets along the split dimensions, or None when every split dimension is cut
    into equal shards (upstream's default)."""
    grid = pl.grid
    uniform = not restricted
    out: list[int] = []
    for d, ax in enumerate(axes):
        if not ax:
            continue
        bounds = pl.bounds[d]
        extra = [m for m, _ in restricted] if d == target else []
        count = 1
        for m in extra:
            count *= grid[m]
        starts: list[int] = []
        for lo, hi in bounds:
            if count == 1:
                starts.append(lo)
                continue
            # the restricted axes are the least significant: one shard per coordinate
            # combination, the block only where every restricted coordinate matches
            for k in range(count):
                coords, rest = [], k
                for m in reversed(extra):
                    coords.append(rest % grid[m])
                    rest //= grid[m]
                coords.reverse()
                held = all(c == rc for c, (_, rc) in zip(coords, restricted, strict=True))
                before = k < _held_index(extra, restricted, grid)
                starts.append(lo if (held or before) else hi)
        n = pl.shape[d]
        sizes = {hi - lo for lo, hi in bounds}
        pieces = len(bounds)
        if not (len(sizes) == 1 and n % pieces == 0):
            uniform = False
        out.extend([*starts, n])
    return None if uniform else tuple(out)


def _held_index(extra: list[int], restricted: list[tuple[int, int]], grid: tuple[int, ...]) -> int:
    """The linear index, among the restricted axes' coordinates, of the one holding data."""
    k = 0
    for m, (_, c) in zip(extra, restricted, strict=True):
        k = k * grid[m] + c
    return k


def shard_shape(
    pl: Placement | None, sharding: Sharding, coord: tuple[int, ...]
) -> tuple[int, ...]:
    """The extents of the shard at grid ``coord`` that ``sharding`` describes (what upstream's
    ``shard.shard_shape`` computes): the oracle the tests compare distal's blocks with."""
    if pl is None:
        raise NotSupportedYet("a non-zero cut has no shard shape")
    shape = list(pl.shape)
    pos = 0
    for d, ax in enumerate(sharding.split_axes):
        if not ax:
            continue
        k = 0
        for m in ax:
            k = k * pl.grid[m] + coord[m]
        count = 1
        for m in ax:
            count *= pl.grid[m]
        if sharding.offsets is None:
            shape[d] = pl.shape[d] // count
        else:
            starts = sharding.offsets[pos : pos + count + 1]
            shape[d] = starts[k + 1] - starts[k]
        pos += count + 1
    return tuple(shape)
