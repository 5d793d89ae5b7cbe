"""The one progress bar of distal's runtimes (and ``distal.viz.Progress``).

The local runtime counts steps per processor; the elastic runtime counts tasks in one
row with a note (checkpointed / recomputed)::

    bar = Progress(plan.nsteps, plan.nprocs)        # steps: one row per processor
    bar.advance(p, s)                               # processor p finished step s
    bar = Progress(ntasks, label="tasks")           # tasks: one row
    bar.update(done, note="checkpointed 3, recomputed 0")
    bar.close()

It stays silent unless the stream is a terminal and the run has lasted ``delay`` seconds
(short runs never flash a bar); ``enabled=False`` or the environment variable
``DISTAL_PROGRESS=0`` silence it, ``enabled=True`` forces it (on any stream, at once). It
draws with ``rich`` when that is installed and as one rewritten text line otherwise, so a
run never needs an extra install to show progress. ``advance``/``update`` cost a list store
and a clock read when the bar is off, and redraw at most ten times a second when it is on.

It lives in the runtime layer because the runtimes use it; ``distal.viz`` re-exports it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

MAX_ROWS = 8  # per-processor bars shown; beyond this, one bar and the slowest processor
REDRAW = 0.1  # seconds between redraws


def _wanted(enabled: bool | None, stream: TextIO) -> bool:
    if enabled is False or os.environ.get("DISTAL_PROGRESS", "") == "0":
        return False
    if enabled is None and not (hasattr(stream, "isatty") and stream.isatty()):
        return False
    return True


def _has_rich() -> bool:
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


class Progress:
    """Work done in ``nprocs`` rows (processors) out of ``total`` each.

    ``done[p]`` is row ``p``'s count, kept even while the bar is off (callers and tests
    read it).
    """

    def __init__(
        self,
        total: int,
        nprocs: int = 1,
        enabled: bool | None = None,
        *,
        delay: float = 1.0,
        stream: TextIO | None = None,
        label: str = "steps",
    ) -> None:
        self.total = max(int(total), 0)
        self.nprocs = max(int(nprocs), 0)
        self.done = [0] * self.nprocs
        self.note = ""
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _wanted(enabled, self.stream)
        self.delay = 0.0 if enabled else delay
        self.label = label
        self.t0 = time.monotonic()
        self._last = 0.0
        self._bar: Any = None
        self._plain = False
        self._tasks: list[Any] = []

    @property
    def active(self) -> bool:
        """True while a bar is on screen."""
        return self._bar is not None or self._plain

    def advance(self, proc: int, step: int | None = None) -> None:
        """Row ``proc`` finished ``step`` (default: its next step)."""
        self.done[proc] = self.done[proc] + 1 if step is None else step + 1
        self._tick(min(self.done, default=0) >= self.total)

    def update(self, done: int, note: str = "", force: bool = False) -> None:
        """Row 0 has ``done`` out of ``total`` (one-row use: tasks), with a ``note``."""
        self.done[0] = done
        self.note = note
        self._tick(force or done >= self.total)

    def _tick(self, force: bool) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not self.active:
            if now - self.t0 < self.delay:
                return
            self._start()
        if force or now - self._last >= REDRAW:
            self._last = now
            self._draw()

    def _start(self) -> None:
        if not _has_rich():
            self._plain = True
            return
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

    def _description(self) -> str:
        done = self.done
        desc = self.label
        if self.nprocs > MAX_ROWS and done:
            desc += f" (slowest: proc {min(range(self.nprocs), key=done.__getitem__)})"
        return f"{desc} ({self.note})" if self.note else desc

    def _draw(self) -> None:
        if self._plain:
            total = self.total * self.nprocs
            self.stream.write(f"\r{self._description()}: {sum(self.done)}/{total}")
            self.stream.flush()
            return
        bar = self._bar
        bar.update(self._tasks[0], completed=sum(self.done), description=self._description())
        for p, task in enumerate(self._tasks[1:]):
            bar.update(task, completed=self.done[p])

    def close(self) -> None:
        """Remove the bar (idempotent); a text line is ended, so output continues below."""
        if self._bar is not None:
            self._draw()
            self._bar.stop()
            self._bar = None
        elif self._plain:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
            self._plain = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["MAX_ROWS", "Progress"]
