"""``distal.viz.Progress`` is the runtimes' progress bar: :mod:`distal.runtime.progress`.

Re-exported here (and from :mod:`distal.viz`) because ``distal.viz.Progress`` is public;
the implementation lives in the runtime layer, which may not import ``distal.viz``.
"""

from distal.runtime.progress import MAX_ROWS, Progress

__all__ = ["MAX_ROWS", "Progress"]
