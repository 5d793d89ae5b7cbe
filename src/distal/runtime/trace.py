"""The run events' former home: :mod:`distal.trace` (re-exported for old imports)."""

from distal.trace import COMPUTE, FETCH, FINAL, FLUSH, REDUCE, WAIT, Event, Recorder

__all__ = ["COMPUTE", "FETCH", "FINAL", "FLUSH", "REDUCE", "WAIT", "Event", "Recorder"]
