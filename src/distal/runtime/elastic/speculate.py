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
must not wait for the tail: every unit has a *deadline*, ``LATE`` times what its size (the
iterations its leaves visit) takes at the speed observed on its worker (the pool's fastest
where that worker has finished nothing yet), at least ``WARM_FLOOR`` seconds; before any
unit has finished anywhere, ``COLD_FLOOR`` seconds or its size at the very low
``COLD_RATE``. A unit past its deadline, running or queued behind another task, is copied
onto a worker that is not holding an overdue unit, whether or not units remain to hand out,
and no longer counts against the window, so the rest of the pool is fed past it.

This module is the policy only (pure functions of the workers' events); the feeder submits
and resolves the copies with Dask's own primitives.
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


def rates(by_name: Mapping[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Iterations per second each worker has reached over its computed units (what those
    units' leaves visited over the seconds they took)."""
    its: dict[str, float] = {}
    secs: dict[str, float] = {}
    for ms in by_name.values():
        for m in ms:
            if m["kind"] == "done" and m.get("unit") and m.get("status") == "computed":
                n = m.get("iterations")
                if not n:
                    continue
                w = m["worker"]
                its[w] = its.get(w, 0.0) + float(n[1])
                secs[w] = secs.get(w, 0.0) + float(m.get("seconds", 0.0))
    return {w: its[w] / secs[w] for w in its if secs[w] > 0 and its[w] > 0}


def deadline(size: int, worker: str, observed: Mapping[str, float]) -> float:
    """Seconds after which a unit of ``size`` iterations on ``worker`` (``""``: not known,
    queued) is overdue, from the speeds ``observed`` (:func:`rates`)."""
    if not observed:
        return max(COLD_FLOOR, LATE * size / COLD_RATE)
    rate = observed.get(worker) or max(observed.values())
    return max(WARM_FLOOR, LATE * size / rate)


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


def unit_times(by_name: Mapping[str, list[dict[str, Any]]]) -> dict[str, list[float]]:
    """Seconds each worker took per computed unit (checkpoint loads and reductions excluded)."""
    out: dict[str, list[float]] = {}
    for ms in by_name.values():
        for m in ms:
            if m["kind"] == "done" and m.get("unit") and m.get("status") == "computed":
                out.setdefault(m["worker"], []).append(float(m.get("seconds", 0.0)))
    return out


def reference(times: Mapping[str, Sequence[float]]) -> float | None:
    """Median unit time on the fast workers, or None before any unit has finished."""
    medians = {w: statistics.median(v) for w, v in times.items() if v}
    if not medians:
        return None
    fastest = min(medians.values())
    fast = [t for w, v in times.items() if w in medians and medians[w] <= FAST * fastest for t in v]
    return statistics.median(fast)


def running(
    by_name: Mapping[str, list[dict[str, Any]]], now: float
) -> dict[str, tuple[str, float]]:
    """Units whose original copy is running: name -> (worker, seconds since it started).

    Ages use the driver's clock at the start event's arrival (``recv``), so they are immune
    to clock skew between machines and err on the young side.
    """
    out: dict[str, tuple[str, float]] = {}
    for name, ms in by_name.items():
        own = [m for m in ms if not m.get("spec")]
        starts = [m for m in own if m["kind"] == "start" and m.get("unit")]
        dones = [m for m in own if m["kind"] == "done"]
        if starts and len(starts) > len(dones):
            last = starts[-1]
            out[name] = (last["worker"], now - float(last.get("recv", now)))
    return out


def started(by_name: Mapping[str, list[dict[str, Any]]]) -> set[str]:
    """Units whose original copy has started somewhere (running, finished or lost)."""
    return {
        name
        for name, ms in by_name.items()
        if any(m["kind"] == "start" and not m.get("spec") for m in ms)
    }


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
    "COLD_RATE",
    "FAST",
    "LATE",
    "MIN_AGE",
    "WARM_FLOOR",
    "deadline",
    "pair",
    "pair_overdue",
    "queued",
    "rates",
    "reference",
    "running",
    "started",
    "unit_times",
]
