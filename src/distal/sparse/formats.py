"""Storage formats of tensors: one level format per stored dimension, and a storage order.

A :class:`Format` is a string of level letters, one per dimension in storage order, and
the permutation ``order`` that says which dimension each level stores (level ``k`` stores
dimension ``order[k]``):

``d`` dense
    stores only its size; every coordinate ``0..size-1`` exists under every parent position
    (child position ``parent * size + coordinate``).
``c`` compressed
    ``pos`` (one more entry than the parent level has positions) and ``crd``: the children
    of parent position ``p`` are positions ``pos[p]..pos[p+1]-1`` with coordinates
    ``crd[pos[p]:pos[p+1]]``, strictly increasing.
``q`` compressed with duplicates (non-unique)
    like ``c`` but one coordinate may repeat within a parent, once per distinct coordinate
    of the singleton levels below it (the first level of COO).
``s`` singleton
    only ``crd``: exactly one child per parent position, at the same position. A singleton
    level follows a ``q`` or another ``s`` level.

Named formats (``n`` is the tensor's order; those with a fixed order need it)::

    dense  "d" * n              coo   "q" + "s" * (n - 1)   csf   "c" * n
    csr    "dc"                 csc   "dc", order (1, 0)
    dcsr   "cc"                 dcsc  "cc", order (1, 0)
    dss    "dcc"                dds   "ddc"

What a level can do is asked of its :class:`LevelFormat` (``Format.level(k)``, or a stored
level's ``Level.format``), as TACO asks a ``ModeFormat`` (``hasLocate()``, ``hasAppend()``,
``isUnique()``, ...): the lowering, the sparse arrays, the leaves, the runtimes and the MLIR
export never compare level letters; this module alone knows which letter answers what.

This module imports nothing but :mod:`distal.errors`: :class:`distal.Tensor` uses it to
parse ``format=``.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from distal.errors import NotationError

#: the level letters and what they mean
LEVELS = {
    "d": "dense",
    "c": "compressed",
    "q": "compressed with duplicates",
    "s": "singleton",
}


@dataclass(frozen=True, slots=True)
class LevelFormat:
    """What one level of a format is and can do: TACO's ``ModeFormat`` properties and
    capabilities, for a level in its place in a format: a level followed by a singleton is
    not unique (the singletons below tell its repeated coordinates apart), so COO's
    ``q s s`` is TACO's and MLIR's ``compressed(nonunique), singleton(nonunique),
    singleton``, and a ``q`` level with no singleton below it (1-D COO) is unique.

    Properties (of the coordinates a level stores under each parent position):

    * ``full``: every coordinate ``0..size-1`` exists;
    * ``ordered``: they increase in position order;
    * ``unique``: none repeats (counting the levels below that share its positions);
    * ``branchless``: exactly one child per parent position, at the same position;
    * ``compact``: the level's positions are ``0..n-1`` with no gaps.

    Capabilities (what a lowering may do with it):

    * ``iterate_coordinates``: walk the coordinates, computing each one's position;
    * ``iterate_positions``: walk a parent's children as a range of positions, reading
      each one's coordinate;
    * ``locate``: find a coordinate's position without a search (``parent * size +
      coordinate``);
    * ``insert``: write at a located position in any order; ``append``: build the level
      by appending coordinates in order.

    ``stores_pos`` / ``stores_crd`` say which index arrays the level holds.
    """

    letter: str
    kind: str  # the level type: "dense", "compressed" or "singleton"
    full: bool
    ordered: bool
    unique: bool
    branchless: bool
    compact: bool
    iterate_coordinates: bool
    iterate_positions: bool
    locate: bool
    insert: bool
    append: bool

    @property
    def stores_pos(self) -> bool:
        """Holds ``pos``: a parent's children are the positions ``pos[p]..pos[p+1]-1``."""
        return self.iterate_positions and not self.branchless

    @property
    def stores_crd(self) -> bool:
        """Holds ``crd``: the coordinate of each of its positions."""
        return not self.full

    @property
    def arrays(self) -> tuple[str, ...]:
        """The names of the index arrays the level holds, in the order they travel."""
        return ("pos",) * self.stores_pos + ("crd",) * self.stores_crd

    @property
    def level_type(self) -> str:
        """The MLIR ``sparse_tensor`` level type (``compressed(nonunique)``, ...). A ``q``
        level is written non-unique even where nothing below lets a coordinate repeat (1-D
        COO), so that it reads back as ``q`` (:func:`level_letter`)."""
        nonunique = not self.unique or self.letter == "q"
        return f"{self.kind}(nonunique)" if nonunique else self.kind

    def __repr__(self) -> str:
        return f"LevelFormat({self.letter!r}: {self.kind}{'' if self.unique else ', nonunique'})"


#: TACO's dense, compressed and singleton mode formats (ordered, unique variants)
DENSE = LevelFormat(
    "d", "dense", full=True, ordered=True, unique=True, branchless=False, compact=True,
    iterate_coordinates=True, iterate_positions=False, locate=True, insert=True, append=False,
)  # fmt: skip
COMPRESSED = LevelFormat(
    "c", "compressed", full=False, ordered=True, unique=True, branchless=False, compact=True,
    iterate_coordinates=False, iterate_positions=True, locate=False, insert=False, append=True,
)  # fmt: skip
SINGLETON = LevelFormat(
    "s", "singleton", full=False, ordered=True, unique=True, branchless=True, compact=True,
    iterate_coordinates=False, iterate_positions=True, locate=False, insert=False, append=True,
)  # fmt: skip
#: the level format of each letter where no singleton follows it
_LETTER = {"d": DENSE, "c": COMPRESSED, "q": replace(COMPRESSED, letter="q"), "s": SINGLETON}
#: ... and where one does (only ``q`` and ``s`` may be followed by a singleton)
_SHARED = {k: replace(lf, unique=False) for k, lf in _LETTER.items() if k in "qs"}


def level_formats(levels: str) -> tuple[LevelFormat, ...]:
    """The level format of each letter of ``levels``, in its place: a level followed by a
    singleton shares its positions with it, so its own coordinates may repeat."""
    return tuple(
        _SHARED[letter] if levels[k + 1 : k + 2] == "s" else _LETTER[letter]
        for k, letter in enumerate(levels)
    )


def level_letter(level_type: str, unique: bool = True) -> str:
    """The letter of a level of type ``level_type`` (``dense``, ``compressed`` or
    ``singleton``; a non-unique compressed level is ``q``). Raises KeyError for another."""
    if level_type == "compressed" and not unique:
        return "q"
    return {lf.kind: k for k, lf in _LETTER.items() if k != "q"}[level_type]


class Format:
    """A tensor storage format: one level letter per dimension and a storage order.

    Args:
        levels: one letter per stored level: ``d`` dense, ``c`` compressed, ``q``
            compressed with duplicates, ``s`` singleton (after ``q`` or ``s``).
        order: the dimension each level stores, a permutation of ``range(len(levels))``;
            None is ``(0, 1, ..., n-1)``. CSC is ``Format("dc", order=(1, 0))``.

    Raises:
        NotationError: an unknown letter, a misplaced singleton or a bad ``order``, naming it.

    Formats compare equal when their levels and order are equal; ``name`` is the named
    format they are (``"csr"``, ...) or None.
    """

    __slots__ = ("_formats", "levels", "order")

    levels: str
    order: tuple[int, ...]

    def __init__(self, levels: str, order: Sequence[int] | None = None) -> None:
        if not isinstance(levels, str):
            raise NotationError(
                f"format levels must be a string of level letters {list(LEVELS)}, got {levels!r}"
            )
        for k, letter in enumerate(levels):
            if letter not in LEVELS:
                known = ", ".join(f"{a} ({b})" for a, b in LEVELS.items())
                raise NotationError(
                    f"format {levels!r} has unknown level letter {letter!r} at level {k}; "
                    f"level letters are {known}"
                )
            if letter == "s" and (k == 0 or levels[k - 1] not in "qs"):
                raise NotationError(
                    f"format {levels!r} has a singleton level 's' at level {k} "
                    f"{'with no parent' if k == 0 else f'after {levels[k - 1]!r}'}; "
                    "a singleton level follows a 'q' or 's' level"
                )
        n = len(levels)
        if order is None:
            perm = tuple(range(n))
        else:
            try:
                items = tuple(order) if not isinstance(order, str | bytes) else None
            except TypeError:
                items = None
            if items is None or any(
                isinstance(o, bool) or not isinstance(o, numbers.Integral) for o in items
            ):
                raise NotationError(
                    f"order of format {levels!r} must be a sequence of ints, got {order!r}"
                )
            perm = tuple(int(o) for o in items)
            if sorted(perm) != list(range(n)):
                raise NotationError(
                    f"order {perm!r} of format {levels!r} is not a permutation of {tuple(range(n))}"
                )
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "order", perm)
        object.__setattr__(self, "_formats", level_formats(levels))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Format cannot be changed; make a new one")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Format, (self.levels, self.order))

    @property
    def ndim(self) -> int:
        """The number of levels (the order of the tensors it stores)."""
        return len(self.levels)

    def level(self, k: int) -> LevelFormat:
        """What level ``k`` (in storage order) is and can do."""
        return self._formats[k]

    @property
    def level_formats(self) -> tuple[LevelFormat, ...]:
        """Every level's :class:`LevelFormat`, in storage order."""
        return self._formats

    @property
    def is_dense(self) -> bool:
        """Every level dense (a dense array, in some storage order)."""
        return all(letter == "d" for letter in self.levels)

    @property
    def name(self) -> str | None:
        """The named format this is (``"csr"``, ``"coo"``, ...), or None."""
        for key in ("dense", *_FIXED, "coo", "csf"):
            try:
                if named_format(key, self.ndim) == self:
                    return key
            except NotationError:
                continue
        return None

    def describe(self) -> str:
        """``"csr (Format('dc'))"`` for a named format, ``"Format('cdc')"`` otherwise."""
        return f"{self.name} ({self!r})" if self.name else repr(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Format):
            return NotImplemented
        return self.levels == other.levels and self.order == other.order

    def __hash__(self) -> int:
        return hash((self.levels, self.order))

    def __repr__(self) -> str:
        if self.order == tuple(range(self.ndim)):
            return f"Format({self.levels!r})"
        return f"Format({self.levels!r}, order={self.order})"

    def __str__(self) -> str:
        return self.name or repr(self)


#: named formats that exist for one order only: name -> (order, levels, storage order)
_FIXED: dict[str, tuple[int, str, tuple[int, ...] | None]] = {
    "csr": (2, "dc", None),
    "csc": (2, "dc", (1, 0)),
    "dcsr": (2, "cc", None),
    "dcsc": (2, "cc", (1, 0)),
    "dss": (3, "dcc", None),
    "dds": (3, "ddc", None),
}

#: every format name, for messages
NAMES = ("dense", "coo", "csf", *_FIXED)


def named_format(name: str, ndim: int, tensor: str | None = None) -> Format:
    """The named format ``name`` for a tensor of order ``ndim``.

    Raises:
        NotationError: an unknown name, or one whose fixed order is not ``ndim``.
    """
    who = f" of tensor {tensor!r}" if tensor is not None else ""
    key = name.lower()
    if key == "dense":
        return Format("d" * ndim)
    if key in _FIXED:
        n, levels, order = _FIXED[key]
        if ndim != n:
            raise NotationError(
                f"format {name!r}{who} is for order-{n} tensors, but the tensor has order {ndim}"
            )
        return Format(levels, order)
    if key in ("coo", "csf"):
        if ndim == 0:
            raise NotationError(f"format {name!r}{who} needs order >= 1; a scalar is dense")
        return Format("q" + "s" * (ndim - 1) if key == "coo" else "c" * ndim)
    hint = ""
    if all(letter in LEVELS for letter in key) and key:
        hint = f"; for per-level letters write dl.Format({name!r})"
    raise NotationError(f"unknown format {name!r}{who}; named formats are {list(NAMES)}{hint}")


def parse_format(spec: str | Format | None, ndim: int, tensor: str | None = None) -> Format:
    """``spec`` (a name, a :class:`Format`, or None for dense) as a Format of order ``ndim``.

    Raises:
        NotationError: an unknown name, a Format or named format of another order, or a
            ``spec`` of another type; the message names the format and the tensor.
    """
    who = f" of tensor {tensor!r}" if tensor is not None else ""
    if spec is None:
        return Format("d" * ndim)
    if isinstance(spec, Format):
        if spec.ndim != ndim:
            raise NotationError(
                f"format {spec!r}{who} has {spec.ndim} levels, but the tensor has order {ndim}"
            )
        return spec
    if isinstance(spec, str):
        return named_format(spec, ndim, tensor)
    raise NotationError(
        f"format{who} must be a format name {list(NAMES)} or a dl.Format, got {spec!r}"
    )
