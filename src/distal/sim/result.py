"""``SimResult``: what a simulation predicts, per processor and in total."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from distal.sim.network import Network
from distal.text import plural, size_text, time_text
from distal.trace import WAIT, Event

KINDS = ("fetch", "compute", "flush", "reduce", "final", "wait")


@dataclass
class SimResult:
    """A simulated run of a plan.

    Attributes:
        network: the model simulated on.
        seconds: time from the start until the last processor finished and the last
            message arrived.
        nprocs: processors.
        flops: floating-point operations of the whole computation.
        trace: per-processor events, the same :class:`~distal.trace.Event` records
            a real run's ``Result.trace`` holds (so the same pictures and exports apply).
        sequential: processors were simulated one after another (the local runtime).
        messages, bytes: traffic between processors.
        finish: the time each processor finished.
        departures, arrivals: per message of ``plan.messages`` (same order), when it started
            to occupy its ports and when it arrived (empty in sequential mode): which
            messages waited for what, e.g. a relay's forward for its own copy.
    """

    network: Network
    seconds: float
    nprocs: int
    flops: float
    trace: list[Event]
    sequential: bool = False
    messages: int = 0
    bytes: float = 0.0
    finish: list[float] = field(default_factory=list)
    departures: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)

    @property
    def gflops(self) -> float:
        """GFLOP/s of the whole machine."""
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    @property
    def gflops_per_node(self) -> float:
        """GFLOP/s per processor."""
        return self.gflops / self.nprocs

    def breakdown(self) -> dict[str, list[float]]:
        """Seconds each processor spent per kind (fetch, compute, flush, reduce, final, wait)."""
        out: dict[str, list[float]] = defaultdict(lambda: [0.0] * self.nprocs)
        for e in self.trace:
            out[e.kind][e.proc] += e.end - e.start
        return {k: list(out[k]) for k in KINDS}

    @property
    def busy(self) -> list[float]:
        """Seconds each processor's CPU was busy (everything but waiting)."""
        b = self.breakdown()
        return [sum(b[k][p] for k in KINDS if k != WAIT) for p in range(self.nprocs)]

    @property
    def wait(self) -> list[float]:
        """Seconds each processor waited for messages."""
        return self.breakdown()[WAIT]

    def summary(self) -> str:
        """A short text report: totals and the per-kind breakdown (max / mean over processors),
        sizes and times in the units they read best in (:mod:`distal.text`)."""
        b = self.breakdown()
        mode = "sequential (local runtime)" if self.sequential else "parallel"
        lines = [
            f"simulated on {self.network.name} ({mode}): {time_text(self.seconds)}, "
            f"{self.gflops:.1f} GFLOP/s ({self.gflops_per_node:.1f} per processor), "
            f"{plural(self.nprocs, 'processor')}, {plural(self.messages, 'message')}, "
            f"{size_text(self.bytes)}",
            f"{'kind':>8} {'max':>12} {'mean':>12}",
        ]
        for k in KINDS:
            v = b[k]
            most, mean = max(v, default=0.0), sum(v) / max(len(v), 1)
            lines.append(f"{k:>8} {time_text(most):>12} {time_text(mean):>12}")
        return "\n".join(lines)

    def plot(self, path: str | None = None, **options: Any) -> Any:
        """Per-processor Gantt chart of the simulated run (``distal.viz.plot_timeline``)."""
        from distal.viz import plot_timeline

        options.setdefault("title", f"simulated on {self.network.name}: {time_text(self.seconds)}")
        return plot_timeline(self, path, **options)

    def to_chrome_trace(self, path: str | None = None) -> Any:
        """The simulated trace as Chrome trace JSON (Perfetto)."""
        from distal.viz import to_chrome_trace

        return to_chrome_trace(self, path)

    def __repr__(self) -> str:
        return (
            f"SimResult({self.network.name!r}, seconds={self.seconds:.6g}, "
            f"nprocs={self.nprocs}, gflops={self.gflops:.2f})"
        )
