"""A progress bar of steps done per processor, for runtimes to call.

    progress = Progress(plan.nsteps, plan.nprocs)   # enabled only on a terminal
    for s in range(plan.nsteps):
        for p in procs:
            ...                                     # processor p finishes step s
            progress.advance(p, s)
    progress.close()

It stays silent unless stderr is a terminal, ``rich`` is installed and the run has
lasted ``delay`` seconds (short runs never flash a bar); ``enabled=False`` or the
environment variable ``DISTAL_PROGRESS=0`` silence it, ``enabled=True`` forces it
(still only if ``rich`` imports). ``advance`` costs a list store and a clock read
when the bar is off, and redraws at most ten times a second when it is on.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

MAX_ROWS = 8  # per-processor bars shown; beyond this, one bar and the slowest processor


def _wanted(enabled: bool | None, stream: TextIO) -> bool:
    if enabled is False or os.environ.get("DISTAL_PROGRESS", "") == "0":
        return False
    if enabled is None and not (hasattr(stream, "isatty") and stream.isatty()):
        return False
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


class Progress:
    """Steps done by each of ``nprocs`` processors out of ``total_steps``."""

    def __init__(
        self,
        total_steps: int,
        nprocs: int,
        enabled: bool | None = None,
        *,
        delay: float = 1.0,
        stream: TextIO | None = None,
        label: str = "steps",
    ) -> None:
        self.total = max(int(total_steps), 0)
        self.nprocs = max(int(nprocs), 0)
        self.done = [0] * self.nprocs
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _wanted(enabled, self.stream)
        self.delay = 0.0 if enabled else delay
        self.label = label
        self.t0 = time.monotonic()
        self._last = 0.0
        self._bar: Any = None
        self._tasks: list[Any] = []

    @property
    def active(self) -> bool:
        """True while a bar is on screen."""
        return self._bar is not None

    def advance(self, proc: int, step: int | None = None) -> None:
        """Processor ``proc`` finished ``step`` (default: its next step)."""
        self.done[proc] = self.done[proc] + 1 if step is None else step + 1
        if not self.enabled:
            return
        now = time.monotonic()
        if self._bar is None:
            if now - self.t0 < self.delay:
                return
            self._start()
        if now - self._last >= 0.1 or min(self.done, default=0) >= self.total:
            self._last = now
            self._draw()

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=self.stream),
            transient=True,
        )
        self._bar.start()
        self._tasks = [self._bar.add_task(self.label, total=self.total * self.nprocs)]
        if 1 < self.nprocs <= MAX_ROWS:
            self._tasks += [
                self._bar.add_task(f"  proc {p}", total=self.total) for p in range(self.nprocs)
            ]

    def _draw(self) -> None:
        bar, done = self._bar, self.done
        slow = min(range(self.nprocs), key=done.__getitem__) if done else 0
        desc = self.label if self.nprocs <= MAX_ROWS else f"{self.label} (slowest: proc {slow})"
        bar.update(self._tasks[0], completed=sum(done), description=desc)
        for p, task in enumerate(self._tasks[1:]):
            bar.update(task, completed=done[p])

    def close(self) -> None:
        """Remove the bar (idempotent)."""
        if self._bar is not None:
            self._draw()
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
