"""``Stats``: traffic, work and memory per processor, computed from a plan alone."""

from __future__ import annotations

from dataclasses import dataclass, fields

from distal.plan.ir import Compute, Fetch, Flush, OpenOutput, Plan, Reduce
from distal.typing import box_volume


@dataclass(slots=True)
class Stats:
    """Per-processor counts; every list is indexed by processor number.

    A word is one tensor element moved between two different processors during
    the kernel; a message is one piece from one source. ``peak_words`` is the
    most elements held at once: owned blocks of every tensor plus the fetch,
    partial-sum and received-partial buffers alive at the end of a step.
    """

    words_received: list[int]
    words_sent: list[int]
    messages_received: list[int]
    messages_sent: list[int]
    iterations: list[int]
    peak_words: list[int]

    @property
    def max_words_received(self) -> int:
        """Largest number of words any processor receives."""
        return max(self.words_received, default=0)

    @property
    def total_words(self) -> int:
        """Words moved in all."""
        return sum(self.words_received)

    @property
    def max_peak_words(self) -> int:
        """Largest peak memory (elements) of any processor."""
        return max(self.peak_words, default=0)

    @property
    def nprocs(self) -> int:
        """Number of processors."""
        return len(self.words_received)

    def as_dict(self) -> dict[str, list[int]]:
        """Plain dictionary of the per-processor lists."""
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def zeros(cls, nprocs: int) -> Stats:
        """All-zero stats for ``nprocs`` processors (runtimes fill these in)."""
        return cls(*([0] * nprocs for _ in fields(cls)))


class MemoryTracker:
    """The memory model shared by the plan and the runtimes.

    At the end of every step a processor holds its owned blocks, one buffer per
    fetched tensor (none for a view of its own block), its partial output buffer
    and the partial pieces received in that step; flushed buffers and received
    pieces are released after that moment.
    """

    def __init__(self, owned: int) -> None:
        self.owned = owned
        self.buffers: dict[str, int] = {}
        self.partial = 0
        self.flushed = False
        self.incoming = 0
        self.peak = owned

    def fetch(self, op: Fetch) -> None:
        self.buffers[op.tensor] = 0 if op.view or op.box is None else box_volume(op.box)

    def open(self, op: OpenOutput) -> None:
        self.partial = 0 if op.direct else box_volume(op.box)

    def end_step(self) -> None:
        now = self.owned + sum(self.buffers.values()) + self.partial + self.incoming
        self.peak = max(self.peak, now)
        self.incoming = 0
        if self.flushed:
            self.partial, self.flushed = 0, False


def plan_stats(plan: Plan) -> Stats:
    """Exact predicted ``Stats`` of a plan."""
    st = Stats.zeros(plan.nprocs)
    for m in plan.messages:
        st.words_received[m.dst] += m.words
        st.words_sent[m.src] += m.words
        st.messages_received[m.dst] += 1
        st.messages_sent[m.src] += 1
    for p, prog in enumerate(plan.programs):
        mem = MemoryTracker(plan.owned_words(p))
        by_step: dict[int, list] = {}
        for op in prog:
            by_step.setdefault(getattr(op, "step", plan.nsteps), []).append(op)
        for s in range(plan.nsteps):
            for op in by_step.get(s, ()):
                if isinstance(op, Fetch):
                    mem.fetch(op)
                elif isinstance(op, OpenOutput):
                    mem.open(op)
                elif isinstance(op, Compute):
                    st.iterations[p] += sum(box_volume(b) for b in op.boxes)
                elif isinstance(op, Flush):
                    mem.flushed = True
                elif isinstance(op, Reduce):
                    mem.incoming += box_volume(op.box)
            mem.end_step()
        st.peak_words[p] = mem.peak
    return st
