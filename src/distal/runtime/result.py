"""``Result``: what every runtime returns.

It lives in the runtime layer so that the runtimes (and :mod:`distal.data`'s
``DistributedResult``) can build one without importing :mod:`distal.kernel`, which
re-exports it as ``distal.kernel.Result`` / ``distal.Result``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.plan.stats import Stats
from distal.trace import Event


@dataclass
class Result:
    """What a run returns: the output, the measured stats and the wall time.

    ``stats`` are counted by the runtime from what it moved (see each runtime for what
    it cannot count, e.g. the elastic runtime's ``extra["stats_note"]``);
    ``tasks_executed`` / ``tasks_reused`` are the elastic runtime's task counts;
    ``trace`` holds the per-processor events of runs that record them; ``extra`` is
    runtime-specific (the elastic runtime's summary, checkpoint directory and Dask's own
    transfer volume).
    """

    value: np.ndarray | None
    stats: Stats
    seconds: float
    tasks_executed: int = 0
    tasks_reused: int = 0
    trace: list[Event] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def plot_timeline(self, path: str | None = None, **options: Any) -> Any:
        """Per-processor Gantt chart of the run's trace (see ``distal.viz``)."""
        from distal.viz import plot_timeline

        return plot_timeline(self, path, **options)

    def to_chrome_trace(self, path: str | None = None) -> Any:
        """The trace as Chrome trace JSON (viewable in Perfetto)."""
        from distal.viz import to_chrome_trace

        return to_chrome_trace(self, path)


__all__ = ["Result"]
