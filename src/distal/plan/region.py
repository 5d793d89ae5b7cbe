"""Regions: the part of a tensor a message or an instruction carries.

Every plan, dense or bound to a sparse pattern, moves and computes on regions of three
shapes, each answering the same questions (how many words and index words it carries, the
shape of an array that holds it, where a part of it lies inside such an array), so the
runtimes execute every plan with one executor and the sinks count every plan with one rule:

* a **box** (``tuple[(lo, hi), ...]``, :data:`distal.typing.Box`): a dense block, held as an
  array in the tensor's dimension order;
* :class:`Rows`: a list of coordinates of some of the tensor's dimensions (the rows a sparse
  pattern references) times a box of the others, held rows first (``(n, *box shape)``);
* :class:`Entries`: stored positions of a sparse tensor (a run or a sorted list), held as
  their values, with the ``pos``/``crd`` index words a piece of them carries.

A part of a region is made by :meth:`Rows.part` / :meth:`Entries.part` and remembers where
it lies in its parent, so locating it in the parent's array is free; locating a region in
the *owned* region of a processor (a box, or the owned stored positions) is worked out once
per plan by :func:`locate` and kept by the runtimes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.errors import InternalError
from distal.typing import Box, box_index, box_shape, box_volume

Index = tuple[Any, ...]


def _run(pos: np.ndarray) -> bool:
    """Whether ascending distinct positions are consecutive (by their ends)."""
    return int(pos[-1]) - int(pos[0]) == len(pos) - 1


def as_slice(idx: np.ndarray) -> np.ndarray | slice:
    """Ascending distinct indices that are consecutive as a slice (a view, not a gather)."""
    n = len(idx)
    if n and int(idx[-1]) - int(idx[0]) == n - 1:
        return slice(int(idx[0]), int(idx[0]) + n)
    if n == 0:
        return slice(0, 0)
    return idx


@dataclass(frozen=True, eq=False)
class Rows:
    """``rows`` (``(n, len(sdims))`` global coordinates of tensor dimensions ``sdims``) times
    ``box`` (one interval per dimension of ``ddims``); held as ``(n, *box shape)``.

    ``sel`` and ``parent``: for a part, its rows' numbers in the parent region it was cut
    from (ascending), so it is located there without a search.
    """

    sdims: tuple[int, ...]
    ddims: tuple[int, ...]
    rows: np.ndarray
    box: Box
    sel: np.ndarray | None = None
    parent: Rows | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.rows), *box_shape(self.box))

    @property
    def words(self) -> int:
        return len(self.rows) * box_volume(self.box)

    @property
    def index_words(self) -> int:
        return 0  # the coordinates are part of the plan, known on both sides

    def __repr__(self) -> str:
        return f"Rows{describe(self)}"

    def part(self, sel: np.ndarray, box: Box) -> Rows:
        """The rows ``sel`` (numbers in this region, ascending) times ``box`` (inside ours)."""
        return Rows(self.sdims, self.ddims, self.rows[sel], tuple(box), sel, self)

    def key(self) -> tuple:
        return ("rows", id(self))


@dataclass(frozen=True, eq=False)
class Entries:
    """Stored positions ``positions`` (ascending) of a sparse tensor, held as their values.

    ``index_words`` are the coordinates and positions a piece of these entries carries when
    it travels (its rebased ``pos`` and its ``crd`` per level), 0 where they do not travel.
    ``sel`` and ``parent`` as for :class:`Rows`.
    """

    positions: np.ndarray
    index_words: int = 0
    sel: np.ndarray | None = None
    parent: Entries | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.positions),)

    @property
    def words(self) -> int:
        return len(self.positions)

    def __repr__(self) -> str:
        return f"Entries{describe(self)}"

    def part(self, sel: np.ndarray, index_words: int = 0) -> Entries:
        """The entries ``sel`` (numbers in this region, ascending)."""
        return Entries(self.positions[sel], index_words, sel, self)

    def key(self) -> tuple:
        return ("entries", id(self))


Region = Box | Rows | Entries


def words(region: Region | None) -> int:
    """Elements a region holds (0 for None)."""
    if region is None:
        return 0
    if isinstance(region, tuple):
        return box_volume(region)
    return region.words


def index_words(region: Region | None) -> int:
    """Coordinates and positions a region carries when it travels."""
    return 0 if region is None or isinstance(region, tuple) else region.index_words


def content(region: Region) -> Any:
    """A hashable value equal exactly for regions holding the same elements in the same
    layout (regions compare by identity): the box itself; the dimensions, box and row
    coordinates of rows; the positions of stored entries. Routing groups the pieces of one
    region that several processors fetch by it, and a relay finds its own copy of a piece it
    passes on by it."""
    if isinstance(region, tuple):
        return region
    if isinstance(region, Rows):
        rows = np.ascontiguousarray(region.rows, np.int64)
        return ("rows", region.sdims, region.ddims, tuple(region.box), rows.shape, rows.tobytes())
    return ("entries", np.ascontiguousarray(region.positions, np.int64).tobytes())


def shape(region: Region) -> tuple[int, ...]:
    """Shape of the array that holds ``region``."""
    return box_shape(region) if isinstance(region, tuple) else region.shape


@dataclass(frozen=True, slots=True)
class Location:
    """Where a region lies in an array: ``np.transpose(arr, perm)[index]`` (``perm`` None:
    no transpose); ``rowless`` adds the one row of a region with no row dimension."""

    perm: tuple[int, ...] | None
    index: Index
    rowless: bool = False

    def view(self, arr: np.ndarray) -> np.ndarray:
        """The region's elements of ``arr`` (a view where the index allows)."""
        if self.perm is not None:
            arr = np.transpose(arr, self.perm)
        out = arr[self.index]
        return out[None, ...] if self.rowless else out

    def put(self, arr: np.ndarray, value: np.ndarray) -> None:
        """Write ``value`` (shaped as the region) into ``arr``."""
        if self.perm is not None:
            arr = np.transpose(arr, self.perm)
        arr[self.index] = value[0] if self.rowless else value

    def add(self, arr: np.ndarray, value: np.ndarray) -> None:
        """Add ``value`` (shaped as the region, distinct elements) into ``arr``."""
        if self.perm is not None:
            arr = np.transpose(arr, self.perm)
        arr[self.index] += value[0] if self.rowless else value


def locate(sub: Region, holder: Region) -> Location:
    """Where ``sub`` lies in an array holding ``holder``.

    The pairs a plan uses: a box in a box; a part in the region it was cut from; rows in an
    owned box (a gather, transposed rows first); stored positions in owned positions.
    """
    if isinstance(sub, tuple):
        if isinstance(holder, tuple):
            return Location(None, box_index(sub, holder) if sub else (Ellipsis,))
        if isinstance(holder, Rows) and not holder.sdims:  # a box of a rowless region
            return Location(
                None,
                (0, *(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(sub, holder.box,
                                                                         strict=True))),
                rowless=True,
            )  # fmt: skip
        raise InternalError(f"a box cannot be located in {type(holder).__name__}")
    if isinstance(sub, Rows):
        if sub.parent is holder and sub.sel is not None:
            dense = tuple(
                slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(sub.box, holder.box, strict=True)
            )
            return Location(None, (as_slice(sub.sel), *dense))
        if sub is holder:
            return Location(None, (slice(None),) * len(sub.shape))
        if isinstance(holder, tuple):
            order = (*sub.sdims, *sub.ddims)
            perm = None if order == tuple(range(len(order))) else order
            dense = tuple(
                slice(lo - holder[d][0], hi - holder[d][0])
                for (lo, hi), d in zip(sub.box, sub.ddims, strict=True)
            )
            if not sub.sdims:
                return Location(perm, dense or (Ellipsis,), rowless=True)
            if len(sub.sdims) == 1:
                r = sub.rows[:, 0] - holder[sub.sdims[0]][0]
                return Location(perm, (as_slice(r), *dense))
            rows = tuple(sub.rows[:, j] - holder[d][0] for j, d in enumerate(sub.sdims))
            return Location(perm, (*rows, *dense))
        raise InternalError(f"rows cannot be located in {type(holder).__name__}")
    if isinstance(sub, Entries):
        if sub.parent is holder and sub.sel is not None:
            return Location(None, (as_slice(sub.sel),))
        if sub is holder:
            return Location(None, (slice(None),))
        if isinstance(holder, Entries):
            mine, held = sub.positions, holder.positions
            # positions are ascending and distinct: a run is told by its ends alone
            if len(mine) and len(held) and _run(held) and _run(mine):
                lo = int(mine[0]) - int(held[0])
                if 0 <= lo and lo + len(mine) <= len(held):
                    return Location(None, (slice(lo, lo + len(mine)),))
            at = np.searchsorted(held, mine)
            return Location(None, (as_slice(at),))
        raise InternalError(f"stored entries cannot be located in {type(holder).__name__}")
    raise InternalError(f"not a region: {sub!r}")


def describe(region: Region | None) -> str:
    """A region as text: ``[lo:hi, ...]`` for a box, the row count and box for rows, the
    entry count (and position range) for stored entries."""
    if region is None:
        return "-"
    if isinstance(region, tuple):
        return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in region) + "]"
    if isinstance(region, Rows):
        box = "".join(f", {lo}:{hi}" for lo, hi in region.box)
        return f"[{len(region.rows)} rows{box}]"
    pos = region.positions
    span = f" in {int(pos[0])}:{int(pos[-1]) + 1}" if len(pos) else ""
    return f"[{len(pos)} entries{span}]"
