"""``Stats``: traffic, work and memory per processor, computed from a plan alone."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from distal.plan.ir import Combine, Compute, Fetch, Flush, OpenOutput, Plan, Reduce
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
    level_words_received: list[list[int]] | None = field(default=None, compare=False)

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

    def as_dict(self) -> dict[str, list]:
        """Plain dictionary of the per-processor lists."""
        out = {f.name: list(getattr(self, f.name)) for f in fields(self) if f.compare}
        if self.level_words_received is not None:
            out["level_words_received"] = [list(x) for x in self.level_words_received]
        return out

    @classmethod
    def zeros(cls, nprocs: int, nlevels: int = 1) -> Stats:
        """All-zero stats for ``nprocs`` processors (runtimes fill these in)."""
        lists = [[0] * nprocs for f in fields(cls) if f.compare]
        return cls(*lists, level_words_received=[[0] * nprocs for _ in range(nlevels)])

    def record(self, src: int, dst: int, words: int, level: int = 0) -> None:
        """Count one message of ``words`` from ``src`` to ``dst`` crossing machine ``level``."""
        self.words_received[dst] += words
        self.words_sent[src] += words
        self.messages_received[dst] += 1
        self.messages_sent[src] += 1
        if self.level_words_received is not None:
            self.level_words_received[level][dst] += words

    @property
    def inter_node_words_received(self) -> list[int]:
        """Words each processor receives across the outermost machine level."""
        lw = self.level_words_received
        return list(lw[0]) if lw else list(self.words_received)


class MemoryTracker:
    """The memory model shared by the plan and the runtimes.

    Runtimes overlap communication with computation: while step ``s`` computes,
    the buffers of step ``s+1`` are already being filled. So at the end of step
    ``s`` a processor holds its owned blocks, one buffer per fetched tensor (none
    for a view of its own block), the buffers prefetched for step ``s+1``, its
    partial output buffer and the partial pieces received in step ``s``; then the
    prefetched buffers replace the old ones, and flushed buffers and received
    pieces are released.
    """

    def __init__(self, owned: int) -> None:
        self.owned = owned
        self.buffers: dict[str, int] = {}
        self.next: dict[str, int] = {}
        self.partial = 0
        self.flushed = False
        self.incoming = 0
        self.peak = owned

    @staticmethod
    def fetch_words(op: Fetch) -> int:
        """Words of the buffer a fetch allocates."""
        return 0 if op.view or op.box is None else box_volume(op.box)

    def prefetch(self, op: Fetch) -> None:
        """A fetch of the next step starts now (or, before step 0, completes now)."""
        self.next[op.tensor] = self.fetch_words(op)

    def swap(self) -> None:
        """Prefetched buffers replace the old ones."""
        self.buffers.update(self.next)
        self.next = {}

    def open(self, op: OpenOutput) -> None:
        self.partial = 0 if op.direct else box_volume(op.box)

    def end_step(self) -> None:
        now = self.owned + sum(self.buffers.values()) + sum(self.next.values())
        now += self.partial + self.incoming
        self.peak = max(self.peak, now)
        self.incoming = 0
        if self.flushed:
            self.partial, self.flushed = 0, False


def ops_by_step(plan: Plan, p: int) -> list[list]:
    """Processor ``p``'s instructions grouped by step (index ``nsteps``: after the last step)."""
    out: list[list] = [[] for _ in range(plan.nsteps + 1)]
    for op in plan.programs[p]:
        out[getattr(op, "step", plan.nsteps)].append(op)
    return out


def plan_stats(plan: Plan) -> Stats:
    """Exact predicted ``Stats`` of a plan."""
    nlevels = plan.machine.nlevels if plan.machine is not None else 1
    st = Stats.zeros(plan.nprocs, nlevels)
    for m in plan.messages:
        st.record(m.src, m.dst, m.words, plan.level_of(m.src, m.dst))
    for p in range(plan.nprocs):
        mem = MemoryTracker(plan.owned_words(p))
        steps = ops_by_step(plan, p)
        for op in steps[0]:
            if isinstance(op, Fetch):
                mem.prefetch(op)
        mem.swap()
        for s in range(plan.nsteps):
            for op in steps[s + 1] if s + 1 < plan.nsteps else ():
                if isinstance(op, Fetch):
                    mem.prefetch(op)
            for op in steps[s]:
                if isinstance(op, OpenOutput):
                    mem.open(op)
                elif isinstance(op, Compute):
                    st.iterations[p] += sum(box_volume(b) for b in op.boxes)
                elif isinstance(op, Flush):
                    mem.flushed = True
                elif isinstance(op, Reduce | Combine):
                    mem.incoming += box_volume(op.box)
            mem.end_step()
            mem.swap()
        st.peak_words[p] = mem.peak
    return st
