"""``Stats``: traffic, work and memory per processor (predicted by the plan engine, measured
by the runtimes)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from distal.plan.ir import Plan


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
    index_words_received: list[int] = field(default_factory=list)
    index_words_sent: list[int] = field(default_factory=list)
    level_words_received: list[list[int]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # dense kernels move no coordinates: their index counts are zeros
        n = len(self.words_received)
        if not self.index_words_received:
            self.index_words_received = [0] * n
        if not self.index_words_sent:
            self.index_words_sent = [0] * n

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
        """All-zero stats for ``nprocs`` processors: the counter a runtime fills in as it
        runs (:meth:`record`, :meth:`sent`, :meth:`received`, :meth:`computed`,
        :meth:`held`)."""
        lists = [[0] * nprocs for _ in COUNTED]
        return cls(*lists, level_words_received=[[0] * nprocs for _ in range(nlevels)])

    # -- the one counter: every runtime counts what it does through these ----------------

    def record(self, src: int, dst: int, words: int, level: int = 0, index: int = 0) -> None:
        """Count one message of ``words`` (and ``index`` index words) from ``src`` to ``dst``
        crossing machine ``level``, seen from both ends (a runtime whose processors share
        one process)."""
        self.words_received[dst] += words
        self.words_sent[src] += words
        if index:
            self.index_words_received[dst] += index
            self.index_words_sent[src] += index
        self.messages_received[dst] += 1
        self.messages_sent[src] += 1
        if self.level_words_received is not None:
            self.level_words_received[level][dst] += words

    def sent(self, src: int, words: int, index: int = 0) -> None:
        """Count the sending end of one message (a runtime that sees only its own end)."""
        self.words_sent[src] += words
        self.messages_sent[src] += 1
        if index:
            self.index_words_sent[src] += index

    def received(self, dst: int, words: int, level: int = 0, index: int = 0) -> None:
        """Count the receiving end of one message crossing machine ``level``."""
        self.words_received[dst] += words
        self.messages_received[dst] += 1
        if index:
            self.index_words_received[dst] += index
        if self.level_words_received is not None:
            self.level_words_received[level][dst] += words

    def computed(self, p: int, iterations: int) -> None:
        """Count iteration points processor ``p``'s leaves executed."""
        self.iterations[p] += iterations

    def held(self, p: int, words: int) -> None:
        """Note that processor ``p`` holds ``words`` elements now (its peak keeps the most)."""
        if words > self.peak_words[p]:
            self.peak_words[p] = words

    @property
    def inter_node_words_received(self) -> list[int]:
        """Words each processor receives across the outermost machine level."""
        lw = self.level_words_received
        return list(lw[0]) if lw else list(self.words_received)


#: the per-processor counts of a ``Stats``, in its field order
COUNTED: tuple[str, ...] = tuple(f.name for f in fields(Stats) if f.compare)


def ops_by_step(plan: Plan, p: int) -> list[list]:
    """Processor ``p``'s instructions grouped by step (index ``nsteps``: after the last step)."""
    out: list[list] = [[] for _ in range(plan.nsteps + 1)]
    for op in plan.programs[p]:
        out[getattr(op, "step", plan.nsteps)].append(op)
    return out
