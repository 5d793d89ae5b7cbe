"""Run timelines: a per-processor Gantt chart and Chrome trace JSON, from ``Event`` records.

Both read anything with a ``trace`` list of :class:`~distal.trace.Event`
(a run's ``Result``, a simulation's ``SimResult``) or such a list itself. Chrome
trace JSON uses complete events (``"ph": "X"``, microseconds), ``pid`` the
processor and ``tid`` the kind of work, so Perfetto (ui.perfetto.dev) and
``chrome://tracing`` draw one track per processor and activity.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distal.text import time_unit  # axes and printed times share one unit ladder
from distal.trace import Event
from distal.viz._mpl import VizError, figure, matplotlib, proc_axis, proc_axis_label, save

KIND_COLOURS = {
    "fetch": "tab:blue",
    "compute": "tab:green",
    "flush": "tab:orange",
    "reduce": "tab:purple",
    "final": "tab:brown",
    "wait": "lightgrey",
}
KIND_ROWS = {k: n for n, k in enumerate(KIND_COLOURS)}


def events_of(source: Any) -> list[Event]:
    """The events of a Result / SimResult, or a list of events itself."""
    trace = getattr(source, "trace", source)
    if not isinstance(trace, list | tuple):
        raise VizError(f"{type(source).__name__} has no trace of events")
    return list(trace)


def plot_timeline(
    result: Any,
    path: str | None = None,
    *,
    title: str | None = None,
    max_procs: int = 64,
    machine: Any = None,
) -> Any:
    """Per-processor Gantt chart of fetch / compute / flush / reduce / final / wait.

    Args:
        result: a ``Result`` (real run), a ``SimResult`` or a list of ``Event``.
        path: save as PNG / SVG / PDF when given.
        title: figure title.
        max_procs: draw at most this many processors (the first ones), so that a
            256-processor simulation stays readable.
        machine: the kernel's ``Machine``; when given, processors are labelled with
            their grid coordinates (up to 16 processors) instead of numbers.

    Returns the matplotlib Figure.
    """
    Patch = matplotlib("matplotlib.patches").Patch

    events = events_of(result)
    if not events:
        raise VizError(
            "the trace is empty: this runtime records no events "
            "(the local runtime does; is tracing switched off with DISTAL_TRACE=0?)"
        )
    nprocs = max(e.proc for e in events) + 1
    shown = min(nprocs, max_procs)
    rows = 0.32 * min(shown, 16) + 0.08 * max(shown - 16, 0)  # inches; thinner rows past 16
    fig = figure(10, 1.3 + rows)
    ax = fig.subplots()
    by = {}
    for e in events:
        if e.proc < shown and e.end > e.start:
            by.setdefault((e.proc, e.kind), []).append((e.start, e.end - e.start))
    end = max(e.end for e in events)
    # whole units on the axis: microseconds drawn in seconds get an easily missed 1e-5 offset
    unit, scale = time_unit(end)
    for (p, kind), spans in by.items():
        ax.broken_barh(
            [(a * scale, d * scale) for a, d in spans],
            (p - 0.4, 0.8),
            facecolors=KIND_COLOURS.get(kind, "black"),
            linewidth=0,
        )
    ax.set_xlim(0, end * scale * 1.01 if end > 0 else 1)
    ax.set_ylim(shown - 0.5, -0.5)
    ax.set_xlabel(f"time since start ({unit})")
    ax.set_ylabel(proc_axis_label("processor", shown, machine))
    group = proc_axis(ax, "y", shown, machine)
    for b in range(group, shown, group or shown):
        ax.axhline(b - 0.5, color="0.55", linewidth=0.6)
    used = [k for k in KIND_COLOURS if any(e.kind == k for e in events)]
    fig.legend(
        handles=[Patch(color=KIND_COLOURS[k], label=k) for k in used],
        loc="outside lower center",
        ncol=len(used),
        fontsize=8,
        frameon=False,
    )
    more = f" (first {shown} of {nprocs} processors)" if shown < nprocs else ""
    fig.suptitle((title or f"timeline: {end * scale:.4g} {unit}") + more, fontsize=10)
    return save(fig, path)


def to_chrome_trace(result: Any, path: str | Path | None = None) -> dict[str, Any]:
    """The trace as a Chrome trace JSON object (also written to ``path`` when given).

    Returns ``{"traceEvents": [...], "displayTimeUnit": "ms"}``: one ``"X"`` event per
    record (``ts`` / ``dur`` in microseconds, ``pid`` = processor, ``tid`` = kind, ``args``
    = step and words), plus metadata naming every processor and track.
    """
    events = events_of(result)
    out: list[dict[str, Any]] = []
    procs = sorted({e.proc for e in events})
    for p in procs:
        out.append({"name": "process_name", "ph": "M", "pid": p, "args": {"name": f"proc {p}"}})
        for kind, tid in KIND_ROWS.items():
            out.append(
                {"name": "thread_name", "ph": "M", "pid": p, "tid": tid, "args": {"name": kind}}
            )
    for e in events:
        out.append(
            {
                "name": e.kind,
                "cat": e.kind,
                "ph": "X",
                "ts": e.start * 1e6,
                "dur": max(e.end - e.start, 0.0) * 1e6,
                "pid": e.proc,
                "tid": KIND_ROWS.get(e.kind, len(KIND_ROWS)),
                "args": {"step": e.step, "words": e.words},
            }
        )
    doc = {"traceEvents": out, "displayTimeUnit": "ms"}
    if path is not None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc))
    return doc
