"""Speculative tail duplication: when to copy a straggling unit onto an idle worker.

Dask balances a pool by pulling work (our window) and stealing queued tasks, but it cannot
move a task that is already *running*: when the queue runs dry while a slow worker has just
started a long unit, the fast workers wait for it, and that tail dominates an otherwise
well-balanced run. MapReduce's backup tasks (and Spark's ``spark.speculation``) fix it the
same way as here: once nothing is left to hand out, a unit that has run longer than a
typical unit on the fast workers gets a duplicate pinned to an idle worker, the first copy
to finish is taken and the other cancelled. A unit that has not started but waits, longer
than that, behind another task on a busy worker is duplicated the same way (cancelling a
copy that never started costs nothing).

A unit that stops answering (a hung worker, a machine paused without leaving the pool)
must not wait for the tail: every unit has a *deadline*. A running unit's starts when it
started, i.e. once its inputs were in place, and is ``LATE`` times what its size (the
iterations its leaves visit) takes at the speed observed on its worker (the pool's fastest
where that worker has finished nothing yet), at least ``WARM_FLOOR`` seconds; before any
unit has finished anywhere, ``COLD_FLOOR`` seconds or its size at the very low
``COLD_RATE``. A unit not started yet is timed from its hand-out, and its deadline adds
the transfer of its input bytes at the slowest link rate observed (``COLD_LINK`` before
any) and the units ahead of it: on a slow link a unit waiting for its inputs is not late.
A unit past its deadline, running or queued behind another task, is copied onto another
worker that is not holding an overdue unit, whether or not units remain to hand out, and
no longer counts against the window, so the rest of the pool is fed past it. Nothing is
copied on a pool with one trusted worker, or onto the worker a unit waits on.

This module is the arithmetic only (pure functions); :class:`~.core.Core` decides with
it, from the events the workers report.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

MIN_AGE = 0.1
"""Units younger than this are never duplicated: below ~0.1 s a copy's scheduler round
trip and input transfers cost about what it could save."""

FAST = 1.5
"""Workers whose median unit time is within this factor of the fastest worker's are the
"fast" workers whose median sets the threshold (so a slow worker's own units do not raise
it)."""


LATE = 4.0
"""A unit is overdue after this many times its expected time."""

WARM_FLOOR = 1.0
"""No unit is overdue before this many seconds once some unit has finished (Dask's own
round trips and an input transfer take a good part of a second on a loaded pool)."""

COLD_FLOOR = 5.0
"""Before any unit has finished there is no observed speed: no unit is overdue before this
many seconds."""

COLD_RATE = 1e6
"""Iterations per second a unit's leaves reach at the very least (numpy and BLAS leaves
reach 1e8 to 1e10): a unit larger than ``COLD_FLOOR`` seconds of it gets longer."""

COLD_LINK = 1e6
"""Bytes per second a worker's link delivers a unit's inputs at the very least, before
any transfer was measured (8 Mbit/s: a volunteer's uplink; a LAN is 100 times that)."""


def deadline(size: int, worker: str, observed: Mapping[str, float]) -> float:
    """Seconds after its start (its inputs in place) by which a running unit of ``size``
    iterations on ``worker`` is overdue, from the speeds ``observed`` (iterations per
    second per worker)."""
    if not observed:
        return max(COLD_FLOOR, LATE * size / COLD_RATE)
    rate = observed.get(worker) or max(observed.values())
    return max(WARM_FLOOR, LATE * size / rate)


def waiting_deadline(
    size: int,
    in_bytes: int,
    ahead: float,
    observed: Mapping[str, float],
    link: float | None,
) -> float:
    """Seconds after its hand-out by which a unit of ``size`` iterations reading
    ``in_bytes`` of inputs that has not started is overdue: ``LATE`` times its inputs'
    transfer at the slowest observed ``link`` rate (``COLD_LINK`` before any), plus its own
    and ``ahead`` other units' time at the pool's fastest observed speed (a unit handed
    out waits behind the window's others on its worker), at least the floors of
    :func:`deadline`. A unit waiting for its inputs on a slow link is not late: its
    deadline grows with what it must receive."""
    transfer = in_bytes / (link or COLD_LINK)
    if not observed:
        return max(COLD_FLOOR, LATE * (transfer + (1 + ahead) * size / COLD_RATE))
    rate = max(observed.values())
    return max(WARM_FLOOR, LATE * (transfer + (1 + ahead) * size / rate))


def pair_overdue(
    candidates: Sequence[tuple[str, str, float]],
    processing: Mapping[str, Sequence[Any]],
    stalled: set[str],
    times: Mapping[str, Sequence[float]],
) -> list[tuple[str, str]]:
    """Overdue units with the least loaded workers that hold no overdue unit (idle or not:
    an overdue unit must not wait for the tail), never the unit's own; the oldest first.
    Returns ``(unit name, worker)``."""
    speed = {w: statistics.median(v) for w, v in times.items() if v}
    load = {w: len(keys) for w, keys in processing.items() if w not in stalled}
    out = []
    for name, where, _ in sorted(candidates, key=lambda c: -c[2]):
        choices = [w for w in load if w != where]
        if not choices:
            continue
        w = min(choices, key=lambda w: (load[w], speed.get(w, 0.0), w))
        out.append((name, w))
        load[w] += 1
    return out


def reference(times: Mapping[str, Sequence[float]]) -> float | None:
    """Median unit time on the fast workers, or None before any unit has finished."""
    medians = {w: statistics.median(v) for w, v in times.items() if v}
    if not medians:
        return None
    fastest = min(medians.values())
    fast = [t for w, v in times.items() if w in medians and medians[w] <= FAST * fastest for t in v]
    return statistics.median(fast)


def queued(
    waiting: Mapping[str, tuple[str, float]], processing: Mapping[str, Sequence[Any]]
) -> list[tuple[str, str, float]]:
    """Units not started yet that wait *behind another task* on a busy worker.

    ``waiting``: unit name -> (Dask key, seconds since submission); ``processing``: the
    scheduler's tasks per worker. Dask steals such a task for an idle worker only while the
    busy worker's current task has most of its (estimated) time ahead, so near the end of a
    run one can sit behind a slow worker's long unit while others idle: it is a straggler
    too. Returns ``(unit name, worker it waits on, age)``.
    """
    where = {str(k): w for w, keys in processing.items() if len(keys) > 1 for k in keys}
    return [(name, where[key], age) for name, (key, age) in waiting.items() if key in where]


def pair(
    candidates: Sequence[tuple[str, str, float]],
    idle: Sequence[str],
    times: Mapping[str, Sequence[float]],
) -> list[tuple[str, str]]:
    """Match the oldest stragglers with the fastest idle workers, never the straggler's own.

    Only fast workers (or ones without a finished unit yet, e.g. just joined) get copies: a
    copy on a slow worker would rarely beat the original. ``candidates``: ``(unit name,
    worker running it, age)``. Returns ``(unit name, worker)``.
    """
    speed = {w: statistics.median(v) for w, v in times.items() if v}
    fastest = min(speed.values(), default=0.0)
    unknown = max(speed.values(), default=0.0)
    free = sorted(
        (w for w in idle if speed.get(w, fastest) <= FAST * fastest),
        key=lambda w: (speed.get(w, unknown), w),
    )
    out = []
    for name, where, _ in sorted(candidates, key=lambda c: -c[2]):
        for w in free:
            if w != where:
                out.append((name, w))
                free.remove(w)
                break
    return out


__all__ = [
    "COLD_FLOOR",
    "COLD_LINK",
    "COLD_RATE",
    "FAST",
    "LATE",
    "MIN_AGE",
    "WARM_FLOOR",
    "deadline",
    "pair",
    "pair_overdue",
    "queued",
    "reference",
    "waiting_deadline",
]
