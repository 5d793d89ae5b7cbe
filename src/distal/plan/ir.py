"""The plan: for every processor, an ordered list of small instructions.

Plans are sans-IO: plain frozen dataclasses that a runtime carries out without
re-deriving anything. Every word that crosses between processors appears as one
:class:`Message`, so ``Stats`` is a pure function of the plan and each runtime
can be checked against it.

Step ``s`` of every processor runs in four phases: fetches, compute, output
flushes (partial sums sent to their owners), reductions of received partials.
After the last step, final values go to the output's other replicas.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from distal.distribution.machine import Machine
from distal.distribution.partition import Placement
from distal.errors import InternalError
from distal.lang.concrete import Statement
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
    box: Box
    hop: int = 0  # position of ``dst`` (fetch) / ``src`` (partial) in its routing tree; 0: direct
    relay: bool = False  # ``src`` forwards from its fetch buffer / ``dst`` combines and passes on

    @property
    def words(self) -> int:
        """Elements carried."""
        return box_volume(self.box)


@dataclass(frozen=True, slots=True)
class Fetch:
    """Make ``box`` of ``tensor`` available for the computation (replacing the old buffer).

    ``pieces`` are ``(source processor, piece)``; the processor's own pieces are
    local copies. ``view`` means the box lies inside the processor's own block,
    so no buffer is made. ``box`` None means nothing is needed any more.
    """

    step: int
    tensor: str
    box: Box | None
    pieces: tuple[tuple[int, Box], ...]
    view: bool


@dataclass(frozen=True, slots=True)
class Compute:
    """Run the leaf kernel over these boxes of the iteration space (statement variables)."""

    step: int
    boxes: tuple[Box, ...]


@dataclass(frozen=True, slots=True)
class OpenOutput:
    """Start accumulating output ``box``; ``direct`` adds straight into the owned block."""

    step: int
    box: Box
    direct: bool


@dataclass(frozen=True, slots=True)
class Flush:
    """Send the partial output buffer's pieces to their reducing owners (end of ``step``).

    ``sends`` are ``(destination, piece)``; ``local`` pieces are added to the own block.
    """

    step: int
    box: Box
    sends: tuple[tuple[int, Box], ...]
    local: tuple[Box, ...]


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
    box: Box


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


@dataclass(frozen=True, slots=True)
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

    def owned_words(self, p: int) -> int:
        """Elements of every tensor that processor ``p`` owns."""
        total = 0
        for pl in self.placements.values():
            box = pl.owned_box(self.coord_in(pl, p))
            if box is not None:
                total += box_volume(box)
        return total

    @staticmethod
    def coord_in(pl: Placement, p: int) -> tuple[int, ...]:
        """Coordinates of processor ``p`` on the grid of placement ``pl``."""
        out = []
        for s in reversed(pl.grid):
            out.append(p % s)
            p //= s
        return tuple(reversed(out))
