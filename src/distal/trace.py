"""Run traces: what each processor did, and when.

Runtimes append one :class:`Event` per instruction they carry out (a clock read
and a list append, cheap enough to stay on). Times are seconds since the run
started, on the clock of the process that executed the event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: Event kinds.
FETCH, COMPUTE, FLUSH, REDUCE, FINAL, WAIT = "fetch", "compute", "flush", "reduce", "final", "wait"


@dataclass(frozen=True, slots=True)
class Event:
    """Processor ``proc`` spent ``[start, end)`` on ``kind`` at ``step``, moving ``words``."""

    proc: int
    kind: str
    step: int
    start: float
    end: float
    words: int = 0


class Recorder:
    """Collects events relative to one start time."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.events: list[Event] = []

    def now(self) -> float:
        """Seconds since the recorder started."""
        return time.perf_counter() - self.t0

    def add(self, proc: int, kind: str, step: int, start: float, words: int = 0) -> None:
        """Record an event that started at ``start`` and ends now."""
        self.events.append(Event(proc, kind, step, start, self.now(), words))
