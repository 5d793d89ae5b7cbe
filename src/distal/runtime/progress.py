"""The progress bar's former home: :mod:`distal.progress` (re-exported for old imports)."""

from distal.progress import MAX_ROWS, REDRAW, Progress

__all__ = ["MAX_ROWS", "REDRAW", "Progress"]
