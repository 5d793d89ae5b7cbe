"""What the elastic core is told about a run before it starts: its units, its blocks, its
options (frozen data; see :class:`~.core.Core`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Work:
    """A unit as the core sees it: its name, the output blocks its result goes into
    (``final``: it alone is the one block, named as the unit), the iterations its leaves
    visit (``size``) and the bytes of the input blocks it reads (``in_bytes``): what its
    deadline is made of."""

    name: str
    blocks: tuple[str, ...]
    final: bool = False
    size: int = 0
    in_bytes: int = 0


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: its units in the order they are handed out, the output blocks it must
    deliver, the checkpoint entries present when it began (``present``) and those of them
    whose seal opened (``sealed``: ``(entry, digest)``), and the entries its tasks may write
    (``writable``). ``nonce`` makes the run's task keys unique."""

    work: tuple[Work, ...]
    blocks: tuple[str, ...]
    nonce: str
    present: frozenset[str] = frozenset()
    sealed: tuple[tuple[str, str], ...] = ()
    writable: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Policy:
    """The run's options that decide: ``verify`` (1, ``k`` copies, ``"check"``,
    ``"adaptive"``), ``window`` (units handed out at once; None: twice the pool's threads),
    ``speculate``, whether entries are saved (``checkpoint``) and sealed (``sealed``),
    ``timeout`` (seconds for the whole run) and the workers excluded before it began.

    ``eager``: hand out every unit and reduction at once, each reduction summing the units'
    only copies, and deliver every block as soon as its task is handed out: a session's
    unverified kernel without a checkpoint, whose blocks the next kernels read where they
    will lie, so that a loop's kernels follow each other on the workers without waiting for
    the driver. No unit is copied then (later kernels already read the original), and the
    run is over once every task has finished (:attr:`Core.done`)."""

    verify: int | str = 1
    window: int | None = None
    speculate: bool = True
    checkpoint: bool = False
    sealed: bool = False
    timeout: float | None = None
    excluded: frozenset[str] = frozenset()
    eager: bool = False

    @property
    def check(self) -> bool:
        """Results are checked on another worker (``"check"``, ``"adaptive"``)."""
        return self.verify in ("check", "adaptive")

    @property
    def copies(self) -> int:
        """Copies of each unit computed (``verify=k``; 1 otherwise)."""
        return 1 if isinstance(self.verify, str) else int(self.verify)


__all__ = ["Policy", "RunSpec", "Work"]
