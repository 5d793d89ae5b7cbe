"""``distal.viz.Progress`` is the runtimes' progress bar: :mod:`distal.progress`.

Re-exported here (and from :mod:`distal.viz`) because ``distal.viz.Progress`` is public;
the implementation lives in the foundations (:mod:`distal.progress`), which the runtimes use.
"""

from distal.progress import MAX_ROWS, Progress

__all__ = ["MAX_ROWS", "Progress"]
