"""Lazy matplotlib: ``import distal`` never needs it; pictures say how to get it.

Figures are built with ``matplotlib.figure.Figure`` directly, never through
``pyplot``: no global figure registry (nothing leaks in long sessions), no GUI
backend (saving uses Agg, so it works without a display), and a returned Figure
still shows inline in Jupyter.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from distal.errors import DistalUserError, NotSupportedYet


class VizError(DistalUserError):
    """A picture cannot be made from what was given (the message names the culprit)."""


def matplotlib(module: str = "matplotlib") -> Any:
    """``import module`` (a part of matplotlib); without matplotlib a ``NotSupportedYet``
    naming the extra that brings it, whichever picture asked first."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise NotSupportedYet(
            "pictures need matplotlib: pip install 'distal[viz]' (or use kernel.explain())"
        ) from e


def figure(width: float, height: float) -> Any:
    """A new Agg-backed matplotlib Figure of ``width`` x ``height`` inches."""
    FigureCanvasAgg = matplotlib("matplotlib.backends.backend_agg").FigureCanvasAgg
    Figure = matplotlib("matplotlib.figure").Figure
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Any, path: str | Path | None, dpi: int = 120) -> Any:
    """Write ``fig`` to ``path`` (format from the suffix: .png, .svg, .pdf) and return it.

    A path that cannot be written (a missing or read-only directory, ``/proc``) raises
    :class:`VizError` naming it, so the command line prints one line, not matplotlib's
    traceback from deep inside its savers."""
    if path is not None:
        p = Path(path)
        if p.suffix.lower() not in (".png", ".svg", ".pdf", ".jpg", ".jpeg"):
            raise VizError(f"cannot save a picture as {str(p)!r}: use .png, .svg or .pdf")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(p, dpi=dpi)
        except OSError as e:  # unwritable, missing or special place: say which, no traceback
            why = e.strerror or type(e).__name__
            raise VizError(f"cannot write the picture to {str(p)!r}: {why}") from e
    return fig


def colours(n: int) -> list[Any]:
    """``n`` distinguishable RGBA colours, never grey (grey means "holds nothing")."""
    colormaps = matplotlib().colormaps

    if n <= 9:
        cmap = colormaps["tab10"]
        return [cmap(i) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)[:n]]
    if n <= 18:
        cmap = colormaps["tab20"]
        return [cmap(i) for i in range(20) if i not in (14, 15)][:n]
    cmap = colormaps["turbo"]
    return [cmap(0.05 + 0.9 * i / max(n - 1, 1)) for i in range(n)]


# -------------------------------------------------------------------------------------------
# Processor axes: processors are integers, and on a grid they read best as coordinates
# -------------------------------------------------------------------------------------------

ALL_TICKS = 16  # up to this many processors, every one gets its own tick


def machine_levels(machine: Any, nprocs: int) -> tuple[tuple[int, ...], ...]:
    """The machine's levels (one grid shape per level, outer first); ``((nprocs,),)`` if unknown."""
    if machine is None:
        return ((nprocs,),)
    levels = getattr(machine, "levels", None)
    if levels:
        return tuple(tuple(int(s) for s in lv) for lv in levels)
    return (tuple(int(s) for s in machine.shape),)


def proc_label(p: int, levels: tuple[tuple[int, ...], ...]) -> str:
    """Processor ``p`` as its coordinates: ``"3"`` on a line, ``"(0,1)"`` on a grid, and
    ``"(0,1|1)"`` on a hierarchical machine (node coordinates | coordinates inside the node)."""
    flat = [s for lv in levels for s in lv]
    if len(flat) == 1:
        return str(p)
    coords = []
    for s in reversed(flat):
        coords.append(p % s)
        p //= s
    coords.reverse()
    parts, at = [], 0
    for lv in levels:
        parts.append(",".join(str(c) for c in coords[at : at + len(lv)]))
        at += len(lv)
    return "(" + "|".join(parts) + ")"


def proc_group(levels: tuple[tuple[int, ...], ...]) -> int:
    """Processors per group drawn between separator lines: one node of a hierarchical
    machine, one row (outermost coordinate) of a flat grid; 0 on a line (no groups)."""
    if len(levels) > 1:
        return math.prod(s for lv in levels[1:] for s in lv)
    shape = levels[0]
    return math.prod(shape[1:]) if len(shape) > 1 else 0


def proc_axis(ax: Any, axis: str, nprocs: int, machine: Any = None) -> int:
    """Integer processor ticks on ``ax``'s ``axis`` ("x" or "y"); returns the group size.

    Up to :data:`ALL_TICKS` processors each get a tick labelled with its coordinates
    (rotated on the x axis when they would collide). More processors get integer ticks
    only: at the start of every group (row of a grid, node of a hierarchical machine)
    when there are 4 to 16 groups, else a few evenly spaced integers. The caller
    draws separators at the group boundaries (a multiple of the returned size).
    """
    MaxNLocator = matplotlib("matplotlib.ticker").MaxNLocator

    levels = machine_levels(machine, nprocs)
    group = proc_group(levels)
    target = ax.xaxis if axis == "x" else ax.yaxis
    if nprocs <= ALL_TICKS:
        ticks = list(range(nprocs))
        labels = [proc_label(p, levels) for p in ticks]
    elif group and 4 <= nprocs // group <= ALL_TICKS:
        ticks = list(range(0, nprocs, group))
        labels = [str(p) for p in ticks]
    else:
        target.set_major_locator(MaxNLocator(nbins=8, integer=True))
        return group
    target.set_ticks(ticks, labels)
    widest = max(len(s) for s in labels)
    if axis == "x" and widest * len(labels) > 36:
        ax.tick_params(axis="x", labelrotation=90)
    if widest > 3:
        ax.tick_params(axis=axis, labelsize=7)
    return group


def proc_axis_label(role: str, nprocs: int, machine: Any = None) -> str:
    """Axis title for processors: says whether the ticks are coordinates or numbers."""
    levels = machine_levels(machine, nprocs)
    flat = [s for lv in levels for s in lv]
    if nprocs <= ALL_TICKS and len(levels) > 1:
        return f"{role} (coordinates: node | inside the node)"
    if nprocs <= ALL_TICKS and len(flat) > 1:
        return f"{role} (coordinates)"
    if nprocs > ALL_TICKS and proc_group(levels):
        unit = "node" if len(levels) > 1 else "machine row"
        return f"{role} (number; lines between {unit}s)"
    return f"{role} (number)" if nprocs > ALL_TICKS else role


def machine_text(machine: Any, nprocs: int) -> str:
    """``"4 processors"``, ``"16 processors (4x4)"`` or ``"8 processors (2x2 nodes of 2)"``."""
    levels = machine_levels(machine, nprocs)
    shapes = ["x".join(map(str, lv)) for lv in levels]
    if len(levels) > 1:
        return f"{nprocs} processors ({shapes[0]} nodes of {' of '.join(shapes[1:])})"
    return f"{nprocs} processors" + (f" ({shapes[0]})" if len(levels[0]) > 1 else "")
