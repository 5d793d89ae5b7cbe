"""A pipelined run's ``Result``: the value at once, what was measured once it is over.

A session's unverified kernel without a checkpoint returns as soon as its tasks are handed
to Dask (``Policy.eager``): its value is the futures of the blocks the tasks will make, so
the next kernel reads them where they will lie and a loop's kernels follow each other on
the workers without a round trip through the driver. What is measured -- the stats the
tasks count, the summary, the task counts and seconds -- exists only once every task has
finished; reading any of it waits for that (and raises a task's failure).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

from distal.runtime.result import Result


class PendingResult(Result):
    """A ``Result`` whose measured fields are settled when first read (module docstring):
    ``settle`` waits for the run's tasks and returns the finished ``Result``; ``ready``
    says whether they have all finished (so settling would not wait)."""

    def __init__(self, value: Any, settle: Callable[[], Result], ready: Callable[[], bool]) -> None:
        self.__dict__.update(value=value, trace=[], _own={})
        self.__dict__.update(_settle=settle, _ready=ready, _over=None, _error=None)

    def settled(self) -> Result:
        """The finished run's ``Result`` (waiting for its tasks the first time); a task's
        failure is raised, now and at every later read."""
        d = self.__dict__
        if d["_error"] is not None:
            raise d["_error"]
        if d["_over"] is None:
            try:
                d["_over"] = d["_settle"]()
            except Exception as e:
                d["_error"] = e
                raise
        return d["_over"]

    @property
    def over(self) -> bool:
        """Whether the run has been settled (or failed)."""
        return self.__dict__["_over"] is not None or self.__dict__["_error"] is not None

    def ready(self) -> bool:
        """Whether every task of the run has finished."""
        return bool(self.__dict__["_ready"]())


OPEN_KEPT = 8
"""Pipelined runs of one client left unsettled at most; a new run settles older ones."""

#: the unsettled runs, by client (a client gone takes its runs with it)
_OPEN: weakref.WeakKeyDictionary[Any, list[PendingResult]] = weakref.WeakKeyDictionary()


def keep_open(client: Any, res: PendingResult) -> None:
    """Remember ``res`` until it is settled (see :func:`tidy`)."""
    _OPEN.setdefault(client, []).append(res)


def tidy(client: Any) -> None:
    """Settle the pipelined runs on ``client`` whose tasks have all finished, and the oldest
    beyond ``OPEN_KEPT`` (waiting for them): each listens to its workers' events until
    then. A failure is kept for whoever reads that run (a later kernel reading its blocks
    fails on its own)."""
    runs = [r for r in _OPEN.get(client, ()) if not r.over]
    for n, r in enumerate(runs):
        if r.ready() or len(runs) - n > OPEN_KEPT:
            with contextlib.suppress(Exception):
                r.settled()
    left = [r for r in runs if not r.over]
    if left:
        _OPEN[client] = left
    else:
        _OPEN.pop(client, None)


def _measured(name: str) -> property:
    def get(self: PendingResult) -> Any:
        own = self.__dict__["_own"]
        return own[name] if name in own else getattr(self.settled(), name)

    def put(self: PendingResult, value: Any) -> None:
        self.__dict__["_own"][name] = value

    return property(get, put, doc=f"The run's ``{name}``, once its tasks have finished.")


for _name in ("stats", "seconds", "tasks_executed", "tasks_reused", "extra"):
    setattr(PendingResult, _name, _measured(_name))


__all__ = ["OPEN_KEPT", "PendingResult", "keep_open", "tidy"]
