"""The sparse lowering: a schedule's partition *rules* meet the pattern at bind time.

Compiling a computation with sparse tensors checks the schedule and reads nothing else
(:class:`Analysis`); :func:`bind` then reads the patterns of the sparse inputs (never their
values) and computes, vectorised over stored entries, the exact plan of every processor:

* the **iteration pattern**: the stored entries the computation visits (one sparse operand's
  entries; the intersection of the sparse factors of a term, the union over terms), in the
  *driver*'s storage order (the tensor named by ``pos``, else the first sparse input);
* which entries each processor visits: every machine dimension's loop is a coordinate cut
  (a statement variable of the pattern, blocks of ``ceil(N/G)`` coordinates), a fused
  coordinate cut (``fuse`` without ``pos``: blocks of the row-major pair number), a
  non-zero cut (``pos``: blocks of ``ceil(npos/G)`` stored positions of the driver), or a
  dense loop (a box, exactly as in a dense kernel);
* for each dense operand, the rows its coordinates reference (exactly, or their hull with
  ``communicate(..., exact=False)``) and where each comes from; for each sparse operand, the
  stored entries visited that the processor does not own; for the output, the entries the
  processor's stored entries touch and their owners (partial sums).

Ownership of dense tensors is :class:`~distal.distribution.partition.Placement`'s; a sparse
tensor's stored entries are owned through :class:`SparseOwnership` (coordinate blocks by the
same block rule, non-zero cuts by position blocks). Everything the stats count and every
runtime moves is read off the :class:`SparsePlan` built here: one rule, one place.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.distribution.machine import Machine
from distal.distribution.notation import (
    GROUP,
    REPL,
    RESTRICT,
    Distribution,
    parse_layout,
    whole_on_processor0,
)
from distal.distribution.partition import Placement, block_size
from distal.errors import InputError, NotationError, NotSupportedYet
from distal.lang.concrete import Term
from distal.lang.nodes import Access, IndexVar, Tensor
from distal.plan.engine import loop_roles
from distal.schedule.api import Schedule
from distal.schedule.relations import Divide, Fuse, Pos, Rotate, Split
from distal.sparse.array import Level, SparseArray
from distal.sparse.pieces import index_words
from distal.sparse.pieces import level_positions as _level_positions
from distal.values import sparse_value

Interval = tuple[int, int]

#: kinds of machine-dimension cuts of the iteration
DENSE, COORD, FUSED, POSITION = "dense", "coord", "fused", "pos"


def is_sparse_schedule(s: Schedule) -> bool:
    """Whether any tensor of the computation has a sparse format."""
    return any(not t.format.is_dense for t in s.tensors().values())


# ---------------------------------------------------------------------------------------------
# Compile time: what the schedule says (no pattern)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cut:
    """How one machine dimension cuts the iteration.

    ``kind`` is :data:`DENSE` (``vars[0]`` a dense loop), :data:`COORD` (``vars[0]`` a
    coordinate of the pattern), :data:`FUSED` (``vars`` fused, cut by pair number) or
    :data:`POSITION` (the driver's stored positions of its first ``len(vars)`` levels).
    """

    kind: str
    vars: tuple[IndexVar, ...]
    parts: int


@dataclass(frozen=True, slots=True)
class TermInfo:
    """A term of the statement, as the sparse lowering sees it."""

    coeff: complex | float | int
    sparse: tuple[int, ...]  # factor numbers of the sparse accesses
    dense: tuple[int, ...]  # factor numbers of the dense accesses
    factors: tuple[Access, ...]
    scale_vars: tuple[IndexVar, ...]  # summed, used by no factor: the term is multiplied
    first_vars: tuple[IndexVar, ...]  # neither summed nor output nor used: counts once


class Analysis:
    """The pattern-free part of a sparse kernel, checked at compile time.

    Raises:
        NotSupportedYet: a computation or schedule outside what the sparse lowering does
            (named in the message).
        ScheduleError / NotationError: a schedule or distribution that is wrong for it.
    """

    def __init__(self, s: Schedule) -> None:
        self.schedule = s
        st = s.statement
        self.statement = st
        tensors = s.tensors()
        self.tensors = tensors
        self.output: Tensor = st.output
        # an undistributed schedule runs on one processor, as a dense one does
        # a hierarchical machine is the grid of all its coordinates: the cuts are the flat
        # grid's, and the plan's messages say which level each crosses (plan.level_of)
        machine = s.machine if s.machine is not None else Machine(1)
        self.machine: Machine = machine
        self.grid: tuple[int, ...] = tuple(machine.shape)
        self.nprocs = math.prod(self.grid)
        accesses = [f for t in st.terms for f in t.factors]
        odd = [f for f in accesses if f.shifted] or [t for t in st.terms if t.domain]
        if odd:
            raise NotSupportedYet(
                f"{odd[0]!r} in a kernel with sparse tensors: shifted accesses and restricted "
                "terms are lowered for dense kernels only"
            )
        self.sparse_inputs = tuple(t.name for t in st.inputs() if not t.format.is_dense)
        if not self.sparse_inputs:
            raise NotSupportedYet(
                f"the output {self.output.name!r} is sparse but every input is dense: a sparse "
                "output needs a sparse input whose pattern it takes"
            )
        for a in [*accesses, st.assignment.lhs]:
            if len(set(a.indices)) != len(a.indices):
                raise NotSupportedYet(
                    f"access {a!r} repeats an index variable; sparse kernels take each "
                    "variable once per access"
                )
        # the plan keeps one Need (rows, pieces) per tensor, read through one access: a tensor
        # read through two different accesses (c(i) and c(j), B(i,j) and B(j,i)) would have its
        # second access served the first one's rows, a silently wrong result
        seen: dict[str, Access] = {}
        for a in accesses:
            prev = seen.setdefault(a.tensor.name, a)
            if tuple(prev.indices) != tuple(a.indices):
                raise NotSupportedYet(
                    f"tensor {a.tensor.name!r} is read as {prev!r} and as {a!r}; sparse kernels "
                    "read each tensor through one access (pass a copy under another name)"
                )
        svar_sets = {
            a.tensor.name: frozenset(a.indices) for a in accesses if not a.tensor.format.is_dense
        }
        first = self.sparse_inputs[0]
        if len(set(svar_sets.values())) != 1:
            raise NotSupportedYet(
                "sparse operands over different index variables ("
                + ", ".join(f"{n}: {sorted(v.name for v in vs)}" for n, vs in svar_sets.items())
                + ") are not in this version; every sparse input must use the same variables"
            )
        pos_rel = [r for r in s.relations if isinstance(r, Pos)]
        if len(pos_rel) > 1:
            raise NotSupportedYet("more than one pos command in a sparse kernel")
        self.pos: Pos | None = pos_rel[0] if pos_rel else None
        self.driver = self.pos.tensor if self.pos else first
        d_access = next(a for a in accesses if a.tensor.name == self.driver)
        dt = tensors[self.driver]
        self.svars: tuple[IndexVar, ...] = tuple(d_access.indices[k] for k in dt.format.order)
        self.dvars: tuple[IndexVar, ...] = tuple(v for v in st.variables if v not in self.svars)
        self.extent = dict(st.extent)
        self.terms = tuple(self._term(t) for t in st.terms)
        if self.output.format.is_dense is False:
            bad = [v for v in st.lhs_vars if v not in self.svars]
            if bad:
                raise NotSupportedYet(
                    f"sparse output {self.output.name!r} is indexed by dense loop(s) "
                    f"{[v.name for v in bad]}; a sparse output takes its pattern from the "
                    "sparse inputs' variables only"
                )
        self.cuts = self._cuts()
        self.placements: dict[str, Placement] = {}
        self.ownership: dict[str, SparseOwnership] = {}
        for name, t in tensors.items():
            dist, m = s.layouts()[name]
            if m is not None and tuple(m.shape) != self.grid:
                raise NotSupportedYet(
                    f"tensor {name!r} is laid out on machine {m!r}, not the schedule's "
                    f"{self.machine!r}; sparse kernels use one machine"
                )
            parsed = (
                whole_on_processor0(t.ndim, self.grid)
                if dist is None
                else parse_layout(dist, name, t.ndim, self.machine)
            )
            if isinstance(parsed, tuple):
                raise NotSupportedYet(
                    f"tensor {name!r} has one distribution per machine level: a sparse kernel on "
                    "a hierarchical machine distributes over its flat grid of every level's "
                    "dimensions (one distribution, one distribute over all of them)"
                )
            if t.format.is_dense:
                if parsed.groups:
                    raise NotSupportedYet(
                        f"dense tensor {name!r} has the non-zero cut {dist!r}; cuts by position "
                        "are for sparse tensors in this version"
                    )
                self.placements[name] = Placement(t.shape, parsed, self.grid)
            else:
                self.ownership[name] = SparseOwnership(t, parsed, self.grid)
        if self.output.name in self.ownership and not all(self.ownership[self.output.name].fixed):
            raise NotSupportedYet(
                f"sparse output {self.output.name!r} is replicated; a sparse output has one "
                "copy of each stored entry (a dense output may be replicated)"
            )
        self.depth, self.step = self._steps()
        self.hull = frozenset(s.hull)

    def _steps(self) -> tuple[dict[str, int], tuple[IndexVar, Divide | Split] | None]:
        """Each tensor's communication depth (0: once per processor, 1: at every step) and
        the serial step loop, if any: the outer loop of a ``divide``/``split`` of a dense
        loop (a processor streams the dense operands and the output in chunks of it, as
        SpDISTAL's SpMM streams ``C``'s columns), with the relation that makes it."""
        s = self.schedule
        outer = self._outer_loops()
        for name, v in s.comm:
            if v in s.processor_loops or v in outer:
                continue
            rel = next(
                (r for r in s.relations if isinstance(r, Divide | Split) and r.outer is v), None
            )
            if (
                rel is None
                or rel.parent not in self.dvars
                or any(c.vars == (rel.parent,) for c in self.cuts)
            ):
                raise NotSupportedYet(
                    f"communicate({name}, {v.name}) inside the distributed loops: a sparse kernel "
                    "streams in steps only over the outer loop of a divide or split of an "
                    "undistributed dense loop"
                )
        depth, step_loops = loop_roles(s)
        if not step_loops:
            return {n: 0 for n in self.tensors}, None
        if len(step_loops) > 1:
            raise NotSupportedYet(
                f"serial loops {[v.name for v in step_loops]} above the communication of a "
                "sparse kernel: it streams over one step loop"
            )
        v = step_loops[0]
        rel = next(r for r in s.relations if isinstance(r, Divide | Split) and r.outer is v)
        return {n: min(d, 1) for n, d in depth.items()}, (v, rel)

    @property
    def nsteps(self) -> int:
        """Serial steps every processor runs (1 without a step loop)."""
        return 1 if self.step is None else self.schedule.extent[self.step[0]]

    def step_boxes(self, box: tuple[int, int]) -> list[tuple[int, int]]:
        """The step loop's chunks of its dense variable, inside the processor's ``box`` of
        it (one chunk, the box itself, without a step loop)."""
        if self.step is None:
            return [box]
        _, rel = self.step
        n = self.extent[rel.parent]
        size = self.schedule.extent[rel.inner]  # the schedule's rule for split and divide
        count = self.schedule.extent[rel.outer]
        out = []
        for k in range(count):
            lo, hi = max(box[0], min(k * size, n)), min(box[1], min((k + 1) * size, n))
            out.append((lo, max(lo, hi)))
        return out

    def output_access(self) -> Access:
        """The left side."""
        return self.statement.assignment.lhs

    def access(self, name: str) -> Access:
        """The (one) access of input ``name``."""
        return next(f for t in self.statement.terms for f in t.factors if f.tensor.name == name)

    def _outer_loops(self) -> set[IndexVar]:
        s = self.schedule
        return (
            set(s.loops[: s.loops.index(s.processor_loops[-1]) + 1]) if s.processor_loops else set()
        )

    def _term(self, t: Term) -> TermInfo:
        sp = tuple(k for k, f in enumerate(t.factors) if not f.tensor.format.is_dense)
        de = tuple(k for k, f in enumerate(t.factors) if f.tensor.format.is_dense)
        if not sp:
            raise NotSupportedYet(
                f"term {t.coeff} * {' * '.join(map(repr, t.factors)) or '1'} has no sparse "
                "factor; every term of a sparse kernel iterates a sparse operand"
            )
        used = t.used()
        lhs = set(self.statement.lhs_vars)
        scale = tuple(v for v in self.dvars if v in t.summed and v not in used)
        firsts = tuple(
            v for v in self.dvars if v not in t.summed and v not in lhs and v not in used
        )
        return TermInfo(t.coeff, sp, de, t.factors, scale, firsts)

    def _cuts(self) -> tuple[Cut, ...]:
        s = self.schedule
        if not s.levels:  # one processor: every entry, every dense loop whole
            return tuple(Cut(DENSE, (), g) for g in self.grid)
        for r in s.relations:
            if isinstance(r, Rotate):
                raise NotSupportedYet("rotate in a sparse kernel")
        parents: dict[IndexVar, Any] = {}
        for r in s.relations:
            for child in _children(r):
                parents[child] = r
        level = s.levels[0]
        cuts = []
        for v, o, g in zip(level.vars, level.outers, level.machine.shape, strict=True):
            del o
            r = parents.get(v)
            if isinstance(r, Pos):
                cuts.append(Cut(POSITION, r.coords, g))
            elif isinstance(r, Fuse):
                coords = s.coords_of(v)
                if any(c not in self.svars for c in coords):
                    raise NotSupportedYet(
                        f"distributing the fused loop {v.name!r} over dense variables; fuse the "
                        "sparse operand's variables"
                    )
                cuts.append(Cut(FUSED, coords, g))
            elif r is None and v in self.svars:
                cuts.append(Cut(COORD, (v,), g))
            elif r is None and v in self.dvars:
                cuts.append(Cut(DENSE, (v,), g))
            else:
                raise NotSupportedYet(
                    f"distributing {v.name!r} (made by {type(r).__name__.lower()}) in a sparse "
                    "kernel; distribute statement variables or pos loops"
                )
        return tuple(cuts)


def _children(r: Any) -> tuple[IndexVar, ...]:
    if isinstance(r, Divide | Split):
        return (r.outer, r.inner)
    if isinstance(r, Fuse):
        return (r.fused,)
    if isinstance(r, Pos):
        return (r.position,)
    return (r.result,)


class SparseOwnership:
    """Which processor owns each stored entry of a sparse tensor.

    Per machine dimension: a coordinate cut ``x`` owns entries by the block of their
    coordinate (the dense block rule, so ``"xy -> x"`` matches a dense tensor's rows), a
    group ``(xy)`` cuts the stored positions of the fused levels into ``ceil(n/G)`` blocks
    (inside each block of the coordinate cuts of other machine dimensions, for
    ``"xy -> x(xy)"``), ``*`` replicates and an integer restricts.
    """

    def __init__(self, t: Tensor, dist: Distribution, grid: tuple[int, ...]) -> None:
        self.tensor = t
        self.dist = dist
        self.grid = grid
        self.fixed = tuple(r.kind != REPL for r in dist.rules)
        order = t.format.order
        groups = dist.groups
        if len(groups) > 1:
            raise NotSupportedYet(f"distribution {dist.text!r} of {t.name!r} has two groups")
        for _, dims in groups:
            if tuple(order[: len(dims)]) != tuple(dims):
                names = "".join(dist.lhs[d] for d in dims)
                raise NotationError(
                    f"group ({names}) in distribution {dist.text!r} of tensor {t.name!r} is "
                    f"not a prefix of its storage order "
                    f"{''.join(dist.lhs[d] for d in order)} (format {t.format})"
                )
        self.strides = np.ones(len(grid), np.int64)
        for m in range(len(grid) - 2, -1, -1):
            self.strides[m] = self.strides[m + 1] * grid[m + 1]

    def base(self, arr: SparseArray, coords: np.ndarray, cache: dict) -> np.ndarray:
        """Each stored entry's owner with replicated machine dimensions at coordinate 0."""
        n = arr.nnz
        out = np.zeros(n, np.int64)
        rules = self.dist.rules
        part_key = np.zeros(n, np.int64)
        cuts = self.dist.cuts(arr.ndim)
        for d, ms in enumerate(cuts):
            if not ms:
                continue
            g = math.prod(self.grid[m] for m in ms)
            b = coords[d] // block_size(arr.shape[d], g)
            part_key = part_key * g + b
            for m in reversed(ms):
                out += (b % self.grid[m]) * self.strides[m]
                b = b // self.grid[m]
        for m, r in enumerate(rules):
            if r.kind == RESTRICT:
                out += r.coord * self.strides[m]
            elif r.kind == GROUP:
                q = _level_positions(arr, len(r.dims) - 1, cache)
                g = self.grid[m]
                if n == 0:
                    continue
                if np.any(np.diff(part_key) < 0):
                    raise NotSupportedYet(
                        f"distribution {self.dist.text!r} of {self.tensor.name!r}: the "
                        "coordinate cuts around a group must cut the leading storage levels"
                    )
                starts = np.flatnonzero(np.r_[True, part_key[1:] != part_key[:-1]])
                ends = np.r_[starts[1:], n]
                first_q = np.repeat(q[starts], ends - starts)
                count_q = np.repeat(q[ends - 1] - q[starts] + 1, ends - starts)
                chunk = np.maximum(1, -(-count_q // g))
                out += ((q - first_q) // chunk) * self.strides[m]
        return out

    def owners(self, arr: SparseArray, cache: dict) -> Owners:
        """Every stored entry's owner (replicated dimensions at 0), as position ranges when
        one tensor dimension is cut (the leading storage one, or a group), else per entry."""
        rules = self.dist.rules
        fixed = 0
        for m, r in enumerate(rules):
            if r.kind == RESTRICT:
                fixed += r.coord * int(self.strides[m])
        cuts = [(d, ms) for d, ms in enumerate(self.dist.cuts(arr.ndim)) if ms]
        groups = self.dist.groups
        order = self.tensor.format.order
        if arr.levels and len(cuts) == 1 and not groups and cuts[0][0] == order[0]:
            _, ms = cuts[0]
            g = math.prod(self.grid[m] for m in ms)
            n0 = arr.levels[0].size
            rows = np.minimum(np.arange(g + 1, dtype=np.int64) * block_size(n0, g), n0)
            b0 = _row_bounds(arr.levels[0], rows)
            if b0 is not None:
                owner = np.zeros(g, np.int64)
                b = np.arange(g, dtype=np.int64)
                for m in reversed(ms):
                    owner += (b % self.grid[m]) * self.strides[m]
                    b = b // self.grid[m]
                return Owners(arr.nnz, _descend(arr, 0, b0), owner + fixed)
        if arr.levels and not cuts and len(groups) == 1:
            m, dims = groups[0]
            k = len(dims) - 1
            npos = _level_size(arr, k)
            if npos is not None:
                g = self.grid[m]
                b = np.minimum(np.arange(g + 1, dtype=np.int64) * block_size(npos, g), npos)
                owner = np.arange(g, dtype=np.int64) * self.strides[m] + fixed
                return Owners(arr.nnz, _descend(arr, k, b), owner)
        return Owners(arr.nnz, base=self.base(arr, arr.coordinates(), cache))

    def offset(self, coords: np.ndarray) -> np.ndarray:
        """The replicated machine dimensions' part of the serving owner's number."""
        rep = np.array([not f for f in self.fixed], bool)
        if not len(rep):
            return np.zeros(len(coords), np.int64)
        return (coords * np.where(rep, self.strides, 0)).sum(axis=1)


class Owners:
    """The owner of every stored entry of a sparse tensor: position ranges ``[starts[r],
    starts[r+1])`` owned by ``owner[r]``, or one number per entry (``base``)."""

    def __init__(
        self,
        n: int,
        starts: np.ndarray | None = None,
        owner: np.ndarray | None = None,
        base: np.ndarray | None = None,
    ) -> None:
        self.n = n
        self.starts = starts
        self.owner = owner
        self.base = base

    def of(self, positions: np.ndarray) -> np.ndarray:
        """The owner of each of these stored positions."""
        if self.base is not None:
            return self.base[positions]
        assert self.starts is not None
        assert self.owner is not None
        r = np.searchsorted(self.starts, positions, side="right") - 1
        return self.owner[np.minimum(r, len(self.owner) - 1)]

    def owned(self, key: int) -> np.ndarray:
        """The stored positions whose owner is ``key``, ascending."""
        if self.base is not None:
            return np.flatnonzero(self.base == key)
        assert self.starts is not None
        assert self.owner is not None
        rs = np.flatnonzero(self.owner == key)
        parts = [np.arange(self.starts[r], self.starts[r + 1], dtype=np.int64) for r in rs]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def all(self) -> np.ndarray:
        """One owner per stored entry."""
        if self.base is not None:
            return self.base
        assert self.starts is not None
        assert self.owner is not None
        return np.repeat(self.owner, np.diff(self.starts))


# ---------------------------------------------------------------------------------------------
# Bind time: the plan of every processor
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Pieces:
    """The parts of what a processor needs (inputs) or computed (output), one column per
    field: a need may have a part from every other processor, so a binding at ``P``
    processors has up to ``P**2`` of them, too many for an object each.

    Part ``k`` is the rows of the need (dense tensors) or its entries (sparse tensors)
    :meth:`sel` ``(k) = order[start[k]:stop[k]]`` (ascending numbers in the need), times
    :meth:`box` ``(k)`` (the part of the dense loops' box, ``boxes[k]`` of shape
    ``(dense dims, 2)``), and its peer ``peer[k]``: for an input the source (the processor
    itself for what it owns), for the output the owner the partial sums go to. ``words[k]``
    values and ``index_words[k]`` coordinates and positions travel with it.
    """

    peer: np.ndarray
    order: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    boxes: np.ndarray
    words: np.ndarray
    index_words: np.ndarray

    def __len__(self) -> int:
        return len(self.peer)

    def sel(self, k: int) -> np.ndarray:
        """Part ``k``'s rows or entries (numbers in the need, ascending)."""
        return self.order[int(self.start[k]) : int(self.stop[k])]

    def box(self, k: int) -> tuple[Interval, ...]:
        """Part ``k``'s box of the dense loops."""
        return tuple((int(lo), int(hi)) for lo, hi in self.boxes[k])

    @classmethod
    def of(
        cls, peers: Sequence[int], sels: Sequence[np.ndarray], index_words: Sequence[int] = ()
    ) -> Pieces:
        """Parts without a box (stored entries), from lists."""
        n = len(peers)
        lens = np.array([len(s) for s in sels], np.int64)
        stop = np.cumsum(lens)
        iw = np.asarray(index_words, np.int64) if len(index_words) else np.zeros(n, np.int64)
        return cls(
            np.asarray(peers, np.int64).reshape(n),
            np.concatenate(sels).astype(np.int64, copy=False) if n else np.zeros(0, np.int64),
            stop - lens,
            stop,
            np.zeros((n, 0, 2), np.int64),
            lens,
            iw.reshape(n),
        )

    def with_peers(self, peer: np.ndarray) -> Pieces:
        """The same parts with other peers."""
        return dataclasses.replace(self, peer=peer)


@dataclass(frozen=True, slots=True, eq=False)
class Need:
    """What one processor holds of one tensor during the kernel.

    Dense tensors: ``rows`` are the global coordinates ``(n, len(sdims))`` of the tensor's
    pattern-variable dimensions, ``box`` the interval of each of its dense-loop dimensions;
    the processor's local array is ``rows x box`` (``sdims`` first, then ``ddims``). Sparse
    tensors: ``rows`` are stored positions (last level, sorted). ``idx`` maps each of the
    processor's iteration entries to its row.
    """

    tensor: str
    rows: np.ndarray
    box: tuple[Interval, ...]
    idx: np.ndarray
    pieces: Pieces


@dataclass(frozen=True, slots=True, eq=False)
class TermPlan:
    """One term on one processor: which of its entries it covers and its factors' rows."""

    coeff: complex | float | int
    entries: np.ndarray | None  # indices into the processor's entries (None: all)
    sparse: tuple[tuple[str, np.ndarray], ...]  # (tensor, row in its Need per entry)
    dense: tuple[tuple[str, np.ndarray, str], ...]  # (tensor, row per entry, letters)
    out: np.ndarray  # output row per entry
    scale: int
    active: bool


@dataclass(frozen=True, slots=True, eq=False)
class ProcPlan:
    """Everything processor ``p`` does in a bound sparse kernel."""

    p: int
    entries: np.ndarray  # iteration entries (indices into the pattern)
    box: dict[IndexVar, Interval]  # dense loops
    needs: dict[str, Need]  # inputs
    out: Need  # output: rows it contributes to, pieces by owner
    terms: tuple[TermPlan, ...]
    out_letters: str
    iterations: int
    owned_words: int


@dataclass(eq=False)
class SparsePlan:
    """A sparse kernel bound to its inputs' patterns: what every processor visits, needs and
    contributes (written as a Plan, with its stats, by :mod:`distal.plan.bound`)."""

    analysis: Analysis
    arrays: dict[str, SparseArray]
    fingerprints: dict[str, str]
    pattern: Coords  # the iteration entries' coordinates (np.asarray: (len(svars), n))
    procs: list[ProcPlan]
    out_pattern: SparseArray | None  # a sparse output's pattern (values zero)
    owned: dict[str, list[np.ndarray | tuple[Interval, ...] | None]]
    cache: dict = field(default_factory=dict, repr=False)
    #: a replicated dense output: block index -> the replica that reduces it (its partial
    #: sums go there, and it sends the finished block to the other replicas)
    primary: dict[tuple[int, ...], int] = field(default_factory=dict)
    #: every step's plans (``steps[s][p]``; ``procs`` is step 0's): a kernel that streams
    #: in steps visits the same entries at each, over that step's chunk of the dense loops
    steps: list[list[ProcPlan]] = field(default_factory=list)

    @property
    def nprocs(self) -> int:
        return len(self.procs)

    def __getstate__(self) -> dict[str, Any]:
        # the cache is keyed by object identity: it does not survive a copy to another process
        return {**self.__dict__, "cache": {}}


def load_patterns(
    a: Analysis, inputs: Mapping[str, Any], copy: bool = True
) -> dict[str, SparseArray]:
    """The sparse inputs as SparseArrays in their tensors' formats (shapes checked);
    ``copy=False`` for one run's inputs (see :func:`distal.values.sparse_value`)."""
    if not isinstance(inputs, Mapping):
        raise InputError(f"inputs must map tensor names to arrays, got {type(inputs).__name__}")
    missing = [n for n in a.sparse_inputs if n not in inputs]
    if missing:
        raise InputError(
            f"sparse input(s) {missing} missing: the plan of a sparse kernel depends on their "
            "patterns (bind with kernel.bind(inputs) or pass them to stats(inputs))"
        )
    out = {}
    for name in a.sparse_inputs:
        out[name] = sparse_value(name, inputs[name], a.tensors[name], copy)
    return out


def _storage_coords(arr: SparseArray, vars_: Sequence[IndexVar], access: Access) -> np.ndarray:
    """Coordinates ``(len(vars_), nnz)`` of every stored entry, rows in ``vars_`` order."""
    c = arr.coordinates()
    return c[[access.indices.index(v) for v in vars_]]


def _keys(coords: np.ndarray, extents: Sequence[int]) -> np.ndarray:
    if math.prod(extents) >= 2**62:
        raise NotSupportedYet(f"a sparse iteration space of {math.prod(extents)} points")
    if coords.shape[0] == 0:
        return np.zeros(coords.shape[1], np.int64)
    return np.ravel_multi_index(tuple(coords), tuple(extents)).astype(np.int64)


class Coords:
    """The iteration entries' coordinates, one array per pattern variable, made on first use.

    For the common case (the pattern is one sparse input's entries) a variable stored by
    the last level is that level's ``crd`` itself and a dense top level's coordinate is the
    row of each position, so binding never builds the whole ``(len(svars), n)`` table unless
    asked (``np.asarray(coords)``).
    """

    def __init__(
        self,
        n: int,
        nvars: int,
        row: Any,
    ) -> None:
        self.n = n
        self.nvars = nvars
        self._row = row
        self._rows: dict[int, np.ndarray] = {}

    @classmethod
    def of_array(cls, arr: SparseArray, svars: Sequence[IndexVar], access: Access) -> Coords:
        """The entries of ``arr`` (whose storage order is ``svars``)."""
        return cls(arr.nnz, len(svars), _ArrayRows(arr, [access.indices.index(v) for v in svars]))

    @classmethod
    def of_table(cls, table: np.ndarray) -> Coords:
        return cls(table.shape[1], table.shape[0], _TableRows(table))

    def row(self, k: int) -> np.ndarray:
        """Every entry's coordinate of pattern variable ``k``."""
        if k not in self._rows:
            self._rows[k] = self._row(k)
        return self._rows[k]

    def take(self, ks: Sequence[int], sel: Any) -> np.ndarray:
        """Coordinates ``(len(ks), n_sel)`` of the entries ``sel`` (a slice or indices)."""
        if not ks:
            n = len(range(self.n)[sel]) if isinstance(sel, slice) else len(sel)
            return np.zeros((0, n), np.int64)
        return np.stack([self.row(k)[sel] for k in ks])

    @property
    def shape(self) -> tuple[int, int]:
        return (self.nvars, self.n)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.take(list(range(self.nvars)), slice(None))
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        return np.asarray(self)[key]


class _ArrayRows:
    """Coordinate ``k`` of every stored entry of an array, computed cheaply where the format
    allows (a picklable callable, so a bound plan can travel to Dask workers)."""

    def __init__(self, arr: SparseArray, dims: list[int]) -> None:
        self.arr = arr
        self.dims = dims

    def __call__(self, k: int) -> np.ndarray:
        arr = self.arr
        last = len(arr.levels) - 1
        lv = arr.levels[k] if arr.levels else None
        if lv is not None and k == last and lv.format.stores_crd:
            return lv.crd
        if k == 0 and len(arr.levels) == 2 and lv.format.locate and arr.levels[1].format.stores_pos:
            return arr.row_of_position()
        return arr.coordinates()[self.dims[k]]


class _TableRows:
    def __init__(self, table: np.ndarray) -> None:
        self.table = table

    def __call__(self, k: int) -> np.ndarray:
        return self.table[k]


def _sel(perm: np.ndarray | None, lo: int, hi: int) -> Any:
    """The entries ``lo..hi`` of the sorted order: a slice when the order is the identity."""
    return slice(lo, hi) if perm is None else perm[lo:hi]


def bind(a: Analysis, inputs: Mapping[str, Any]) -> SparsePlan:
    """The exact plan of a sparse kernel for these inputs' patterns (values are not read)."""
    arrays = load_patterns(a, inputs)
    cache: dict = {}
    st = a.statement
    ext = a.extent
    sv_ext = [ext[v] for v in a.svars]
    access_of = {f.tensor.name: f for t in st.terms for f in t.factors}
    drv = arrays[a.driver]
    # -- the iteration pattern and, per term, each sparse factor's position per entry -------
    single = len(a.sparse_inputs) == 1 and len(a.terms) == 1
    term_rows: list[dict[str, np.ndarray]] = []
    term_entries: list[np.ndarray | None] = []
    if single:
        pattern = Coords.of_array(drv, a.svars, access_of[a.driver])
        n_ent = drv.nnz
        term_rows.append({a.driver: _identity(n_ent)})
        term_entries.append(None)
        keys = None
    else:
        skeys = {}
        for n in a.sparse_inputs:
            k = _keys(_storage_coords(arrays[n], a.svars, access_of[n]), sv_ext)
            if len(k) > 1 and np.any(np.diff(k) <= 0):
                order = np.argsort(k, kind="stable")
                skeys[n] = (k[order], order)
            else:
                skeys[n] = (k, None)
        per_term = []
        for t in a.terms:
            names = [t.factors[f].tensor.name for f in t.sparse]
            k, order = skeys[names[0]]
            rows = {names[0]: np.arange(len(k)) if order is None else order}
            for nm in names[1:]:
                k2, o2 = skeys[nm]
                k, i1, i2 = np.intersect1d(k, k2, assume_unique=True, return_indices=True)
                rows = {key: v[i1] for key, v in rows.items()}
                rows[nm] = i2 if o2 is None else o2[i2]
            per_term.append((k, rows))
        keys = per_term[0][0]
        for k, _ in per_term[1:]:
            keys = np.union1d(keys, k)
        for k, rows in per_term:
            term_rows.append(rows)
            term_entries.append(None if len(k) == len(keys) else np.searchsorted(keys, k))
        n_ent = len(keys)
        pattern = Coords.of_table(
            np.stack(np.unravel_index(keys, sv_ext)).astype(np.int64)
            if len(sv_ext)
            else np.zeros((0, n_ent), np.int64)
        )
    # the entries' numbers: a processor's entries, a slice, are a view of it
    ident = term_rows[0][a.driver] if single else _identity(n_ent)
    # -- which processor visits which entry ----------------------------------------------
    grid = a.grid
    P = a.nprocs
    pcoords = np.stack(np.unravel_index(np.arange(P), grid), axis=1) if grid else np.zeros((1, 0))
    sv_index = {v: k for k, v in enumerate(a.svars)}
    filt_dims = [m for m, c in enumerate(a.cuts) if c.kind != DENSE]
    n_groups = math.prod(a.cuts[m].parts for m in filt_dims)
    perm: np.ndarray | None = None
    bounds = _range_bounds(a, drv, filt_dims) if keys is None else None
    if bounds is None:
        group_key = np.zeros(n_ent, np.int64)
        for m in filt_dims:
            c = a.cuts[m]
            if c.kind == COORD:
                b = pattern.row(sv_index[c.vars[0]]) // block_size(ext[c.vars[0]], c.parts)
            elif c.kind == FUSED:
                lin = _keys(
                    pattern.take([sv_index[v] for v in c.vars], slice(None)),
                    [ext[v] for v in c.vars],
                )
                b = lin // block_size(math.prod(ext[v] for v in c.vars), c.parts)
            else:
                b = _position_blocks(a, arrays, pattern, keys, c, cache)
            group_key = group_key * c.parts + b
        sorted_key = group_key
        if filt_dims and n_ent > 1 and np.any(np.diff(group_key) < 0):
            perm = np.argsort(group_key, kind="stable")
            sorted_key = group_key[perm]
        bounds = np.searchsorted(sorted_key, np.arange(n_groups + 1))
    gid = np.zeros(P, np.int64)
    for m in filt_dims:
        gid = gid * a.cuts[m].parts + pcoords[:, m]
    # -- per processor ------------------------------------------------------------------
    procs: list[ProcPlan] = []
    owned: dict[str, list] = {n: [None] * P for n in a.tensors}
    sown = {n: a.ownership[n].owners(arr, cache) for n, arr in arrays.items()}
    out_pattern, out_rows_of_entry, out_base = _output_pattern(a, pattern, keys, arrays, cache)
    steps: list[list[ProcPlan]] = [[] for _ in range(a.nsteps)]
    letters = _letters(a, a.output_access())
    for p in range(P):
        lo, hi = int(bounds[gid[p]]), int(bounds[gid[p] + 1])
        ent = _sel(perm, lo, hi)
        box = {}
        for v in a.dvars:
            box[v] = (0, ext[v])
        for m, c in enumerate(a.cuts):
            if c.kind == DENSE and c.vars:
                v = c.vars[0]
                b = block_size(ext[v], c.parts)
                box[v] = (
                    min(int(pcoords[p, m]) * b, ext[v]),
                    min((int(pcoords[p, m]) + 1) * b, ext[v]),
                )
        owned_words = 0
        for name in a.tensors:
            if name != a.output.name:
                ow, owned[name][p] = _owned(a, name, arrays, sown, p, pcoords)
                owned_words += ow
        ow, owned[a.output.name][p] = _owned_output(a, out_pattern, out_base, p, pcoords)
        owned_words += ow
        sparse_needs: dict[str, Need] = {}
        for name, t in a.tensors.items():
            if name != a.output.name and not t.format.is_dense:  # the same at every step
                sparse_needs[name] = _sparse_need(
                    a, name, arrays[name], ent, term_rows, term_entries, sown[name], p,
                    pcoords, cache, ident,
                )  # fmt: skip
        whole: dict[str, Need] = {}  # needs of what is fetched once, over the whole box
        for k, box_s in enumerate(_step_boxes(a, box)):

            def need_of(
                name: str, deep: bool, box_s=box_s, box=box, ent=ent, p=p, whole=whole
            ) -> Need:
                if not deep and name in whole:
                    return whole[name]
                bx = box_s if deep else box
                if name == a.output.name:
                    got = _output_need(a, pattern, ent, bx, p, pcoords, out_rows_of_entry,
                                       out_base)  # fmt: skip
                else:
                    got = _dense_need(a, name, access_of[name], pattern, ent, bx, p, pcoords)
                if not deep:
                    whole[name] = got
                return got

            needs: dict[str, Need] = {}
            for name, t in a.tensors.items():
                if name == a.output.name:
                    continue
                if t.format.is_dense:
                    needs[name] = need_of(name, bool(a.depth[name]))
                else:
                    needs[name] = sparse_needs[name]
            out = need_of(a.output.name, bool(a.depth[a.output.name]))
            terms = []
            for t, rows, tent in zip(a.terms, term_rows, term_entries, strict=True):
                terms.append(_term_plan(a, t, rows, tent, ent, needs, out, box_s, ident))
            vol = math.prod(h - lo_ for lo_, h in box_s.values())
            steps[k].append(
                ProcPlan(p, _arr(ent, ident), box_s, needs, out, tuple(terms), letters,
                         _n(ent) * vol, owned_words)
            )  # fmt: skip
    procs = steps[0]
    primary: dict[tuple[int, ...], int] = {}
    pl_out = a.placements.get(a.output.name)
    if pl_out is not None and not all(pl_out.fixed_dims()):
        if a.nsteps > 1:
            raise NotSupportedYet(
                f"a replicated output ({a.output.name!r}) of a sparse kernel that streams in "
                "steps is not in this version"
            )
        procs, primary = _reduce_on_primaries(pl_out, procs)
        steps = [procs]
    return SparsePlan(
        a, arrays, {n: arr.pattern_fingerprint() for n, arr in arrays.items()}, pattern, procs,
        out_pattern, owned, cache, primary, steps,
    )  # fmt: skip


def _step_boxes(a: Analysis, box: dict[IndexVar, Interval]) -> list[dict[IndexVar, Interval]]:
    """The processor's box of the dense loops at each step (the whole box, without steps)."""
    if a.step is None:
        return [box]
    v = a.step[1].parent
    return [{**box, v: chunk} for chunk in a.step_boxes(box[v])]


def _reduce_on_primaries(
    pl: Placement, procs: list[ProcPlan]
) -> tuple[list[ProcPlan], dict[tuple[int, ...], int]]:
    """A replicated dense output: every block is reduced by one replica, the dense engine's
    rule -- the lowest-numbered replica that contributes to it, else the lowest-numbered
    replica -- so each processor's partial sums of a block go to that primary (the output
    pieces were cut with the replica serving each processor)."""
    grid = pl.grid

    def rank(coord: tuple[int, ...]) -> int:
        return int(np.ravel_multi_index(coord, grid)) if grid else 0

    P = len(procs)
    # every processor's block of the output (None: it holds none), once
    block_of = [pl.block_index(np.unravel_index(q, grid) if grid else ()) for q in range(P)]
    contrib: dict[tuple[int, ...], set[int]] = {}
    for pp in procs:
        for q in np.unique(pp.out.pieces.peer).tolist():
            contrib.setdefault(tuple(int(x) for x in block_of[q]), set()).add(pp.p)
    primary: dict[tuple[int, ...], int] = {}
    for q in range(P):
        idx = block_of[q]
        if idx is None:
            continue
        idx = tuple(int(x) for x in idx)
        if idx in primary:
            continue
        holders = sorted(rank(c) for c in pl.replicas(idx))
        mine = sorted(contrib.get(idx, set()) & set(holders))
        primary[idx] = mine[0] if mine else holders[0]
    # the primary reducing each processor's block, by processor number (-1: no block)
    to_primary = np.array(
        [-1 if b is None else primary[tuple(int(x) for x in b)] for b in block_of], np.int64
    )
    out = []
    for pp in procs:
        pieces = pp.out.pieces.with_peers(to_primary[pp.out.pieces.peer])
        out.append(dataclasses.replace(pp, out=dataclasses.replace(pp.out, pieces=pieces)))
    return out, primary


def _descend(arr: SparseArray, k: int, b: np.ndarray) -> np.ndarray:
    """Bounds of positions at level ``k`` mapped to bounds of last-level positions."""
    for lv in arr.levels[k + 1 :]:
        if lv.format.locate:
            b = b * lv.size
        elif lv.format.stores_pos:
            b = lv.pos[b]
    return b


def _row_bounds(top: Level, rows: np.ndarray) -> np.ndarray | None:
    """Bounds of rows (coordinates of the top level) mapped to bounds of its positions:
    located where the level locates, searched where its coordinates are ordered and unique;
    None otherwise (a coordinate repeats)."""
    if top.format.locate:
        return rows
    if top.format.ordered and top.format.unique:
        return np.searchsorted(top.crd, rows, side="left")
    return None


def _level_size(arr: SparseArray, k: int) -> int | None:
    """Positions of level ``k``: its ``crd``'s length, or, where it and every level above
    store every coordinate, the product of their extents; None for a full level under a
    sparse one (its positions do not tell the fibers above apart by count alone)."""
    lv = arr.levels[k]
    if lv.format.stores_crd:
        return len(lv.crd)
    if any(not x.format.full for x in arr.levels[:k]):
        return None
    return math.prod(x.size for x in arr.levels[: k + 1])


def _range_bounds(a: Analysis, drv: SparseArray, filt_dims: list[int]) -> np.ndarray | None:
    """Each processor group's range of the driver's entries, without a per-entry pass, when
    one machine dimension cuts them: by the leading storage coordinate (row blocks map to
    position ranges through ``pos``) or by positions of the top levels. None otherwise."""
    if len(filt_dims) != 1 or not drv.levels:
        return None
    c = a.cuts[filt_dims[0]]
    g = c.parts
    if c.kind == COORD and c.vars[0] == a.svars[0]:
        n0 = drv.levels[0].size
        rows = np.minimum(np.arange(g + 1, dtype=np.int64) * block_size(n0, g), n0)
        b0 = _row_bounds(drv.levels[0], rows)
        return None if b0 is None else _descend(drv, 0, b0)
    if c.kind == POSITION:
        k = len(c.vars) - 1
        npos = _level_size(drv, k)
        if npos is None:
            return None
        b = np.minimum(np.arange(g + 1, dtype=np.int64) * block_size(npos, g), npos)
        return _descend(drv, k, b)
    return None


def _position_blocks(
    a: Analysis,
    arrays: dict[str, SparseArray],
    pattern: Coords,
    keys: np.ndarray | None,
    c: Cut,
    cache: dict,
) -> np.ndarray:
    """Block number of each iteration entry under a non-zero cut of the driver's positions."""
    drv = arrays[a.driver]
    nlev = len(c.vars)
    q = _level_positions(drv, nlev - 1, cache)
    if drv.levels[nlev - 1].format.stores_crd:
        npos = len(drv.levels[nlev - 1].crd)
    else:  # full top levels: all their positions exist
        npos = math.prod(drv.shape[d] for d in drv.format.order[:nlev])
    chunk = block_size(npos, c.parts)
    if keys is None:  # the pattern is the driver's entries
        return q // chunk
    # another pattern (a union): cut it at the driver's block boundaries, in storage order
    ext = [a.extent[v] for v in a.svars[:nlev]]
    dkeys = _keys(_storage_coords(drv, a.svars[:nlev], a.access(a.driver)), ext)
    first_of_q = np.full(npos, -1, np.int64)
    first_of_q[q[::-1]] = dkeys[::-1]
    starts = np.arange(0, npos, chunk)
    bkeys = np.array([first_of_q[s] if first_of_q[s] >= 0 else np.iinfo(np.int64).max
                      for s in starts], np.int64)  # fmt: skip
    # a block with no stored entry (a dense level's empty fiber) starts at its next entry
    for k in range(len(bkeys) - 2, -1, -1):
        bkeys[k] = min(bkeys[k], bkeys[k + 1])
    pk = _keys(pattern.take(list(range(nlev)), slice(None)), ext)
    return np.maximum(np.searchsorted(bkeys, pk, side="right") - 1, 0)


def _letters(a: Analysis, access: Access) -> str:
    """Leaf letters of an access's dense-loop dimensions, in dimension order."""
    return "".join(chr(ord("a") + a.dvars.index(v)) for v in access.indices if v in a.dvars)


def _split_dims(a: Analysis, access: Access) -> tuple[list[int], list[int]]:
    sd = [d for d, v in enumerate(access.indices) if v in a.svars]
    dd = [d for d, v in enumerate(access.indices) if v in a.dvars]
    return sd, dd


def _distinct_rows(
    vals: np.ndarray, exts: Sequence[int], hull: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct coordinate tuples ``(n_rows, k)`` of ``vals`` ``(k, n)`` (sorted), and the row
    of each column; with ``hull``, every tuple of the bounding box of ``vals`` instead."""
    k, n = vals.shape
    if k == 0:
        return np.zeros((1, 0), np.int64), np.zeros(n, np.int64)
    if n == 0:
        return np.zeros((0, k), np.int64), np.zeros(0, np.int64)
    if hull:
        lo, hi = vals.min(axis=1), vals.max(axis=1) + 1
        shape = tuple(int(x) for x in hi - lo)
        rows = np.stack(np.unravel_index(np.arange(math.prod(shape)), shape), axis=1) + lo
        idx = np.ravel_multi_index(tuple(vals - lo[:, None]), shape)
        return rows.astype(np.int64), idx.astype(np.int64)
    if k == 1:
        mark = np.zeros(exts[0], bool)
        mark[vals[0]] = True
        rows = np.flatnonzero(mark)
        if len(rows) * 8 < exts[0]:  # few rows: a search beats a table of the whole extent
            return rows[:, None], np.searchsorted(rows, vals[0])
        local = np.cumsum(mark) - 1
        return rows[:, None], local[vals[0]]
    keys = _keys(vals, exts)
    uk, inv = np.unique(keys, return_inverse=True)
    rows = np.stack(np.unravel_index(uk, tuple(exts)), axis=1).astype(np.int64)
    return rows, inv.astype(np.int64).ravel()


def _block_pieces(
    pl: Placement,
    sd: list[int],
    dd: list[int],
    rows: np.ndarray,
    tbox: tuple[Interval, ...],
    pcoord: np.ndarray,
) -> Pieces:
    """``rows x tbox`` cut by its owners (:meth:`Placement.cut_rows`, the one rule for a
    region of rows, beside :meth:`Placement.cut` for boxes), as a need's :class:`Pieces`."""
    srcs, order_r, start, stop, boxes, vol = pl.cut_rows(sd, dd, rows, tbox, pcoord)
    if order_r is None:
        order_r = _identity(len(rows))
    return Pieces(srcs, order_r, start, stop, boxes, vol, np.zeros(len(srcs), np.int64))


def _dense_need(
    a: Analysis,
    name: str,
    access: Access,
    pattern: Coords,
    ent: Any,
    box: dict[IndexVar, Interval],
    p: int,
    pcoords: np.ndarray,
) -> Need:
    sd, dd = _split_dims(a, access)
    sv_index = {v: k for k, v in enumerate(a.svars)}
    vals = pattern.take([sv_index[access.indices[d]] for d in sd], ent)
    t = a.tensors[name]
    rows, idx = _distinct_rows(vals, [t.shape[d] for d in sd], name in a.hull)
    tbox = tuple(box[access.indices[d]] for d in dd)
    pieces = _block_pieces(a.placements[name], sd, dd, rows, tbox, pcoords[p])
    return Need(name, rows, tbox, idx, pieces)


def _sparse_need(
    a: Analysis,
    name: str,
    arr: SparseArray,
    ent: Any,
    term_rows: list[dict[str, np.ndarray]],
    term_entries: list[np.ndarray | None],
    base: Owners,
    p: int,
    pcoords: np.ndarray,
    cache: dict,
    ident: np.ndarray,
) -> Need:
    parts = []
    for rows, tent in zip(term_rows, term_entries, strict=True):
        if name not in rows:
            continue
        k = ent if tent is None else _term_local(_arr(ent, ident), tent)[1]
        parts.append(rows[name][k])
    used = parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))
    if len(used) > 1 and not _is_run(used) and np.any(np.diff(used) < 0):
        used = np.sort(used)
    own = a.ownership[name]
    shift = int(own.offset(pcoords[p : p + 1])[0])
    peers: list[int] = []
    sels: list[np.ndarray] = []
    iws: list[int] = []
    if len(used) and base.starts is not None and _is_run(used):
        # a run of positions against owner ranges: cut it at the range boundaries
        u0, u1 = int(used[0]), int(used[-1]) + 1
        st, ow = base.starts, base.owner
        assert ow is not None
        r0 = int(np.searchsorted(st, u0, side="right")) - 1
        cuts: dict[int, list[np.ndarray]] = {}
        for r in range(max(r0, 0), len(ow)):
            lo, hi = max(u0, int(st[r])), min(u1, int(st[r + 1]))
            if lo >= u1:
                break
            if hi > lo:
                cuts.setdefault(int(ow[r]) + shift, []).append(np.arange(lo - u0, hi - u0))
        for q in sorted(cuts):
            sel = np.concatenate(cuts[q]) if len(cuts[q]) > 1 else cuts[q][0]
            peers.append(q)
            sels.append(sel)
            iws.append(0 if q == p else index_words(arr, used[sel], cache))
        return Need(name, used, (), np.zeros(0, np.int64), Pieces.of(peers, sels, iws))
    src = base.of(used) + shift
    if len(used):
        if np.all(src == src[0]):
            groups = [(int(src[0]), np.arange(len(used)))]
        else:
            order = np.argsort(src, kind="stable")
            ss = src[order]
            cut = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])
            groups = [
                (int(ss[s]), order[s:e]) for s, e in zip(cut, np.r_[cut[1:], len(ss)], strict=True)
            ]
        for q, sel in groups:
            peers.append(q)
            sels.append(sel)
            iws.append(0 if q == p else index_words(arr, used[sel], cache))
    return Need(name, used, (), np.zeros(0, np.int64), Pieces.of(peers, sels, iws))


_IDENTITY: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def _identity(n: int) -> np.ndarray:
    """``arange(n)``, remembered: a unit-stride view of it is a run without a pass over it."""
    out = np.arange(n, dtype=np.int64)
    _IDENTITY[id(out)] = out
    return out


def _is_run(x: np.ndarray) -> bool:
    """Whether ``x`` is ``x[0], x[0]+1, ...`` (O(1) for views of :func:`_identity`, else
    O(n))."""
    n = len(x)
    if n == 0:
        return True
    if int(x[-1]) - int(x[0]) != n - 1:
        return False
    base = x.base
    if base is not None and _IDENTITY.get(id(base)) is base and x.strides == (8,):
        return True
    return n < 3 or bool(np.all(np.diff(x) == 1))


def _n(ent: Any) -> int:
    """Number of entries in a selection (a slice or indices)."""
    return ent.stop - ent.start if isinstance(ent, slice) else len(ent)


def _arr(ent: Any, ident: np.ndarray) -> np.ndarray:
    """A selection as indices (a slice: a view of the bind's identity array ``ident``)."""
    return ident[ent] if isinstance(ent, slice) else ent


def _term_local(ent: np.ndarray, tent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a term covering pattern entries ``tent`` (sorted): the positions in ``ent`` of the
    processor's entries it covers, and their numbers in the term's own list."""
    pos = np.searchsorted(ent, tent)
    hit = pos < len(ent)
    hit[hit] = ent[pos[hit]] == tent[hit]
    return pos[hit], np.flatnonzero(hit)


def _owned(
    a: Analysis,
    name: str,
    arrays: dict[str, SparseArray],
    sown: dict[str, Owners],
    p: int,
    pcoords: np.ndarray,
) -> tuple[int, Any]:
    """Elements processor ``p`` owns of an input: (count, box or stored positions)."""
    if name in a.placements:
        pl = a.placements[name]
        has, _, lo, hi = pl.own_arrays(pcoords[p : p + 1])
        if not has[0]:
            return 0, None
        bx = tuple((int(x), int(y)) for x, y in zip(lo[0], hi[0], strict=True))
        return math.prod(h - lo for lo, h in bx), bx
    key = p - int(a.ownership[name].offset(pcoords[p : p + 1])[0])
    positions = sown[name].owned(key)
    return len(positions), positions


def _output_pattern(
    a: Analysis,
    pattern: Coords,
    keys: np.ndarray | None,
    arrays: dict[str, SparseArray],
    cache: dict,
) -> tuple[SparseArray | None, np.ndarray | None, np.ndarray | None]:
    """A sparse output's pattern (what the iteration touches), each entry's output entry,
    and each output entry's owner."""
    o = a.output
    if o.format.is_dense:
        return None, None, None
    lhs = a.output_access()
    ostore = [lhs.indices[d] for d in o.format.order]
    sv_index = {v: k for k, v in enumerate(a.svars)}
    drv = arrays[a.driver]
    dims = [sv_index[v] for v in lhs.indices]
    if keys is None and tuple(ostore) == a.svars and o.format == drv.format:
        out = drv.with_values(np.zeros(drv.nnz, dtype=o.dtype))
        of_entry = np.arange(drv.nnz, dtype=np.int64)
    else:
        sub = pattern.take([sv_index[v] for v in ostore], slice(None))
        k = _keys(sub, [a.extent[v] for v in ostore])
        uk, inv = np.unique(k, return_inverse=True)
        coords_store = np.stack(np.unravel_index(uk, [a.extent[v] for v in ostore]))
        coords = np.zeros((o.ndim, len(uk)), np.int64)
        for j, d in enumerate(o.format.order):
            coords[d] = coords_store[j]
        from distal.sparse.array import _from_points

        out = _from_points(coords, np.zeros(len(uk), o.dtype), o.shape, o.format, unique=True)
        of_entry = inv.astype(np.int64).ravel()
    del dims
    return out, of_entry, a.ownership[o.name].owners(out, cache)


def _output_need(
    a: Analysis,
    pattern: Coords,
    ent: Any,
    box: dict[IndexVar, Interval],
    p: int,
    pcoords: np.ndarray,
    of_entry: np.ndarray | None,
    out_base: Owners | None,
) -> Need:
    o = a.output
    lhs = a.output_access()
    if o.format.is_dense:
        sd, dd = _split_dims(a, lhs)
        sv_index = {v: k for k, v in enumerate(a.svars)}
        vals = pattern.take([sv_index[lhs.indices[d]] for d in sd], ent)
        rows, idx = _distinct_rows(vals, [o.shape[d] for d in sd], False)
        tbox = tuple(box[lhs.indices[d]] for d in dd)
        pieces = _block_pieces(a.placements[o.name], sd, dd, rows, tbox, pcoords[p])
        return Need(o.name, rows, tbox, idx, pieces)
    assert of_entry is not None
    assert out_base is not None
    touched = of_entry[ent]
    if _is_run(touched):  # consecutive output entries (the output keeps the pattern)
        rows = touched
        idx = np.arange(len(touched), dtype=np.int64)
    else:
        rows = np.unique(touched) if len(touched) else touched
        idx = np.searchsorted(rows, touched)
    owner = out_base.of(rows)
    order = np.argsort(owner, kind="stable")
    so = owner[order]
    start = np.flatnonzero(np.r_[True, so[1:] != so[:-1]]) if len(rows) else order[:0]
    stop = np.r_[start[1:], len(so)][: len(start)].astype(np.int64)
    k = len(start)
    pieces = Pieces(
        so[start].astype(np.int64), order, start, stop, np.zeros((k, 0, 2), np.int64),
        stop - start, np.zeros(k, np.int64),
    )  # fmt: skip
    return Need(o.name, rows, (), idx, pieces)


def _owned_output(
    a: Analysis,
    out_pattern: SparseArray | None,
    out_base: Owners | None,
    p: int,
    pcoords: np.ndarray,
) -> tuple[int, Any]:
    o = a.output
    if o.format.is_dense:
        pl = a.placements[o.name]
        has, _, lo, hi = pl.own_arrays(pcoords[p : p + 1])
        if not has[0]:
            return 0, None
        bx = tuple((int(x), int(y)) for x, y in zip(lo[0], hi[0], strict=True))
        return math.prod(h - lo for lo, h in bx), bx
    assert out_base is not None
    positions = out_base.owned(p)
    return len(positions), positions


def _term_plan(
    a: Analysis,
    t: TermInfo,
    rows: dict[str, np.ndarray],
    tent: np.ndarray | None,
    ent: np.ndarray,
    needs: dict[str, Need],
    out: Need,
    box: dict[IndexVar, Interval],
    ident: np.ndarray,
) -> TermPlan:
    if tent is None:
        local, k = None, ent
    else:
        local, k = _term_local(_arr(ent, ident), tent)
    sparse = []
    for f in t.sparse:
        name = t.factors[f].tensor.name
        r = rows[name][k]
        used = needs[name].rows
        if len(r) == len(used) and _is_run(r) and _is_run(used) and (not len(r) or r[0] == used[0]):
            sparse.append((name, np.arange(len(r), dtype=np.int64)))
        else:
            sparse.append((name, np.searchsorted(used, r)))
    dense = []
    for f in t.dense:
        acc = t.factors[f]
        nd = needs[acc.tensor.name]
        dense.append(
            (acc.tensor.name, nd.idx if local is None else nd.idx[local], _letters(a, acc))
        )
    scale = math.prod(box[v][1] - box[v][0] for v in t.scale_vars)
    active = all(box[v][0] == 0 < box[v][1] for v in t.first_vars)
    return TermPlan(
        t.coeff, local, tuple(sparse), tuple(dense), out.idx if local is None else out.idx[local],
        scale, active,
    )  # fmt: skip
