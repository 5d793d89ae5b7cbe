"""Lazy matplotlib: ``import distal`` never needs it; pictures say how to get it.

Figures are built with ``matplotlib.figure.Figure`` directly, never through
``pyplot``: no global figure registry (nothing leaks in long sessions), no GUI
backend (saving uses Agg, so it works without a display), and a returned Figure
still shows inline in Jupyter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distal.errors import DistalUserError, NotSupportedYet


class VizError(DistalUserError):
    """A picture cannot be made from what was given (the message names the culprit)."""


def figure(width: float, height: float) -> Any:
    """A new Agg-backed matplotlib Figure of ``width`` x ``height`` inches."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise NotSupportedYet(
            "pictures need matplotlib: pip install 'distal[viz]' (or use kernel.explain())"
        ) from e
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Any, path: str | Path | None, dpi: int = 120) -> Any:
    """Write ``fig`` to ``path`` (format from the suffix: .png, .svg, .pdf) and return it."""
    if path is not None:
        p = Path(path)
        if p.suffix.lower() not in (".png", ".svg", ".pdf", ".jpg", ".jpeg"):
            raise VizError(f"cannot save a picture as {str(p)!r}: use .png, .svg or .pdf")
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, dpi=dpi)
    return fig


def colours(n: int) -> list[Any]:
    """``n`` distinguishable RGBA colours, never grey (grey means "holds nothing")."""
    from matplotlib import colormaps

    if n <= 9:
        cmap = colormaps["tab10"]
        return [cmap(i) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)[:n]]
    if n <= 18:
        cmap = colormaps["tab20"]
        return [cmap(i) for i in range(20) if i not in (14, 15)][:n]
    cmap = colormaps["turbo"]
    return [cmap(0.05 + 0.9 * i / max(n - 1, 1)) for i in range(n)]
