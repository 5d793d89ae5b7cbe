"""Pictures of plans and runs, and a progress bar: ``distal.viz``.

* :func:`plot_distribution` — a tensor's blocks coloured by owner, replicas and
  restricted faces visible, next to the machine grid;
* :func:`plot_traffic` — the processor x processor words matrix and per-processor
  words received against the communication lower bound;
* :func:`plot_timeline` / :func:`to_chrome_trace` — where the time of a run (or of a
  simulation) went, as a Gantt chart or Chrome trace JSON for Perfetto;
* :class:`Progress` — steps done per processor, on a terminal.

matplotlib (``pip install 'distal[viz]'``) is imported only when a picture is
drawn; ``kernel.explain()`` is the text fallback.
"""

from distal.viz._mpl import VizError
from distal.viz.distribution import plot_distribution
from distal.viz.progress import Progress
from distal.viz.timeline import plot_timeline, to_chrome_trace
from distal.viz.traffic import plot_traffic, traffic_matrix

__all__ = [
    "Progress",
    "VizError",
    "plot_distribution",
    "plot_timeline",
    "plot_traffic",
    "to_chrome_trace",
    "traffic_matrix",
]
