"""The plan: for every processor, an ordered list of small instructions.

Plans are sans-IO: plain frozen dataclasses that a runtime carries out without
re-deriving anything. Every word that crosses between processors appears as one
:class:`Message`, so ``Stats`` is a pure function of the plan and each runtime
can be checked against it.

Step ``s`` of every processor runs in four phases: fetches, compute, output
flushes (partial sums sent to their owners), reductions of received partials.
After the last step, final values go to the output's other replicas.

Messages and instructions carry *regions* (:mod:`distal.plan.region`): dense boxes, rows of
coordinates times a box, or stored positions of a sparse tensor. A plan bound to a sparse
pattern is an ordinary plan whose regions are rows and entries and whose ``Compute`` runs
over stored entries (:class:`EntryWork`); the runtimes execute both with one executor.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field

from distal.distribution.machine import Machine
from distal.distribution.partition import Placement
from distal.errors import InternalError
from distal.lang.concrete import Statement
from distal.plan.region import Region, words
from distal.typing import Box, box_volume

FETCH, PARTIAL, FINAL = "fetch", "partial", "final"


@dataclass(frozen=True, slots=True)
class Message:
    """One piece of one tensor moving from ``src`` to ``dst`` at ``step``.

    ``kind`` is ``fetch`` (an input box for a computation), ``partial`` (a partial
    output sum going to the block's reducing owner) or ``final`` (a finished output
    block going to another replica)::

        src: [ owned block ]--box-->[ buffer ] :dst
    """

    step: int
    kind: str
    tensor: str
    src: int
    dst: int
    box: Region
    hop: int = 0  # position of ``dst`` (fetch) / ``src`` (partial) in its routing tree; 0: direct
    relay: bool = False  # ``src`` forwards from its fetch buffer / ``dst`` combines and passes on

    @property
    def words(self) -> int:
        """Elements carried."""
        return words(self.box)

    @property
    def index_words(self) -> int:
        """Coordinates and positions carried (pieces of a sparse tensor)."""
        return getattr(self.box, "index_words", 0)


@dataclass(frozen=True, slots=True)
class Fetch:
    """Make ``box`` of ``tensor`` available for the computation (replacing the old buffer).

    ``pieces`` are ``(source processor, piece)``; the processor's own pieces are
    local copies (or, where every leaf reading the buffer reads them from the owned block
    instead, left out: ``runtime/store.py::reads_own_in_place``; the plan's counts are the
    same either way). ``view`` means the box lies inside the processor's own block,
    so no buffer is made. ``box`` None means nothing is needed any more.
    """

    step: int
    tensor: str
    box: Region | None
    pieces: tuple[tuple[int, Region], ...]
    view: bool


@dataclass(frozen=True, slots=True, eq=False)
class TermWork:
    """One term of a leaf over stored entries: ``coeff`` times the product of its sparse
    factors' values (``sparse``: tensor and the row of its fetched values each entry reads,
    None when it reads them in order) and its dense factors' rows (``dense``: tensor, row per
    entry, the letters of its dense-loop dimensions), added into output row ``out``.
    ``entries``: the processor's entries the term covers (None: all of them)."""

    coeff: complex | float | int
    sparse: tuple[tuple[str, object], ...]
    dense: tuple[tuple[str, object, str], ...]
    out: object
    entries: object = None


@dataclass(frozen=True, slots=True, eq=False)
class EntryWork:
    """A leaf over stored entries (a plan bound to a sparse pattern): its terms, the output's
    rows and dense-loop letters, every letter's extent, and the number of entries visited
    (each times the dense loops' ``width`` iterations)."""

    terms: tuple[TermWork, ...]
    out_letters: str
    out_rows: int
    extents: tuple[tuple[str, int], ...]
    entries: int
    width: int
    #: in a plan that streams in steps: the part of a buffer held over every step that this
    #: step reads (tensor, region), and the part of the output buffer it adds into
    views: tuple[tuple[str, Region], ...] = ()
    out_view: Region | None = None

    @property
    def iterations(self) -> int:
        """Iteration points the leaf visits."""
        return self.entries * self.width


@dataclass(frozen=True, slots=True)
class Compute:
    """Run the leaf kernel over these boxes of the iteration space (statement variables),
    or, with ``work``, over the stored entries it lists."""

    step: int
    boxes: tuple[Box, ...]
    work: EntryWork | None = None

    @property
    def iterations(self) -> int:
        """Iteration points the instruction visits (what a runtime's leaves execute)."""
        if self.work is not None:
            return self.work.iterations
        return sum(box_volume(b) for b in self.boxes)


@dataclass(frozen=True, slots=True)
class OpenOutput:
    """Start accumulating output ``box``; ``direct`` adds straight into the owned block."""

    step: int
    box: Region
    direct: bool


@dataclass(frozen=True, slots=True)
class Flush:
    """Send the partial output buffer's pieces to their reducing owners (end of ``step``).

    ``sends`` are ``(destination, piece)``; ``local`` pieces are added to the own block.
    """

    step: int
    box: Region
    sends: tuple[tuple[int, Region], ...]
    local: tuple[Region, ...]


@dataclass(frozen=True, slots=True)
class Forward:
    """Routing: once this processor's own fetch of ``piece`` (of ``tensor``, for ``step``)
    has arrived, send it on to ``dst`` from the fetch buffer::

        owner --piece--> [ buffer ] this --piece--> dst
    """

    step: int
    tensor: str
    piece: Box
    dst: int


@dataclass(frozen=True, slots=True)
class Combine:
    """Routing: before flushing, receive ``src``'s partial sum of ``box`` and add it into the
    partial buffer, so one message carries both on towards the reducer::

        src --partial--> (+) this --partial(sum)--> parent
    """

    step: int
    src: int
    box: Box


@dataclass(frozen=True, slots=True)
class Reduce:
    """Receive a partial output piece from ``src`` at ``step`` and add it to the own block."""

    step: int
    src: int
    box: Region


@dataclass(frozen=True, slots=True)
class SendFinal:
    """After the last step, send the finished output piece to another replica."""

    dst: int
    box: Box


@dataclass(frozen=True, slots=True)
class RecvFinal:
    """After the last step, overwrite the own output piece with the one from ``src``."""

    src: int
    box: Box


Op = Fetch | Forward | Compute | OpenOutput | Combine | Flush | Reduce | SendFinal | RecvFinal


#: a plan can be weakly referenced (Python 3.11+): what runtimes derive from it is dropped
#: with it (:mod:`distal.runtime.weakcache`)
_WEAK = {"weakref_slot": True} if sys.version_info >= (3, 11) else {}


@dataclass(frozen=True, slots=True, **_WEAK)
class Plan:
    """An exact, per-processor plan for one compiled computation.

    Attributes:
        statement: the concrete statement.
        nprocs: number of processors.
        nsteps: serial steps every processor runs (in lockstep).
        placements: where each tensor lives.
        grids: shape of the machine each tensor's placement refers to.
        inputs: input tensor names, in order.
        output: the output tensor's name.
        programs: the instructions of each processor, in order (indexed by processor
            number; a one-processor plan from ``kernel.program(p)`` holds only ``p``'s).
        messages: every message the plan's processors send or receive, in canonical order
            (step, kind, source, destination, tree position, tensor, box).
        primary: output block index -> the processor that reduces it.
        procs: the processors whose programs the plan holds (empty: every processor).
        owned: the owned region of each processor for tensors whose ownership a pattern
            decides (sparse tensors: their owned stored positions); others follow
            ``placements``.
        patterns: the patterns of a bound plan's sparse tensors (the output's with zero
            values), what the runtimes assemble a sparse output into.
    """

    statement: Statement
    nprocs: int
    nsteps: int
    placements: dict[str, Placement]
    inputs: tuple[str, ...]
    output: str
    programs: tuple[tuple[Op, ...], ...] | dict[int, tuple[Op, ...]]
    messages: tuple[Message, ...]
    primary: dict[tuple[int, ...], int] = field(default_factory=dict)
    machine: Machine | None = None
    routing: str = "direct"
    procs: tuple[int, ...] = ()
    owned: dict[str, tuple[Region | None, ...]] = field(default_factory=dict)
    patterns: dict[str, object] = field(default_factory=dict)

    def ops(self, p: int) -> tuple[Op, ...]:
        """Processor ``p``'s instructions, in order."""
        if self.procs and p not in self.procs:
            raise InternalError(f"this plan holds the programs of {list(self.procs)}, not {p}")
        return self.programs[p]

    def restrict(self, p: int) -> Plan:
        """This plan's part for processor ``p`` alone: its program and its messages."""
        return dataclasses.replace(
            self,
            programs={p: self.ops(p)},
            messages=tuple(m for m in self.messages if p in (m.src, m.dst)),
            procs=(p,),
        )

    def level_of(self, src: int, dst: int) -> int:
        """Machine level a message from ``src`` to ``dst`` crosses (0: between top-level nodes)."""
        return 0 if self.machine is None else max(self.machine.split_level(src, dst), 0)

    def __hash__(self) -> int:
        return id(self)

    def owned_region(self, name: str, p: int) -> Region | None:
        """What processor ``p`` owns of tensor ``name`` (None: nothing)."""
        if name in self.owned:
            return self.owned[name][p]
        pl = self.placements[name]
        return pl.owned_box(self.coord_in(pl, p))

    def tensor_names(self) -> tuple[str, ...]:
        """Every tensor of the plan."""
        return (*self.placements, *(n for n in self.owned if n not in self.placements))

    def owned_words(self, p: int) -> int:
        """Elements of every tensor that processor ``p`` owns."""
        return sum(words(self.owned_region(n, p)) for n in self.tensor_names())

    @staticmethod
    def coord_in(pl: Placement, p: int) -> tuple[int, ...]:
        """Coordinates of processor ``p`` on the grid of placement ``pl``."""
        out = []
        for s in reversed(pl.grid):
            out.append(p % s)
            p //= s
        return tuple(reversed(out))
