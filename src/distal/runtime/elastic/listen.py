"""What the Dask driver hears, as the core's events: the pool, the workers' log, futures.

Small functions between Dask's answers and :mod:`.events`: the scheduler's list of workers
as a :class:`~.events.Pool`, the workers' ``start``/``done``/``check`` messages (see
:mod:`.tasks`) as ``Started``/``Computed``/``Wrote``/``Outvoted``/``Refused``, and the wait
for the next finished future.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from distal.runtime.elastic.events import (
    Computed,
    Outvoted,
    Pool,
    Refused,
    Started,
    Wrote,
)

POOL_FRESH = 2.0
"""Seconds a look at the pool's workers is reused for by a run's start (a session's runs
share it; a run waiting for results looks again every second)."""

#: the last look at each client's pool (a client gone takes its look with it)
_LOOKS: weakref.WeakKeyDictionary[Any, tuple[float, dict[str, Any]]] = weakref.WeakKeyDictionary()


def workers(client: Any) -> dict[str, Any]:
    """The pool's workers, by address, as the scheduler sees them now.

    Asked of the scheduler directly: ``Client.scheduler_info()`` returns the client's cached
    copy, which its periodic refresh may overwrite, between the fetch and the return, with
    one that lists no workers.
    """
    if getattr(client, "asynchronous", False) or not hasattr(client, "sync"):
        return dict(client.scheduler_info(n_workers=-1).get("workers", {}))
    info = client.sync(client.scheduler.identity, n_workers=-1)
    got = dict(info.get("workers", {}))
    _LOOKS[client] = (time.monotonic(), got)
    return got


def recent_workers(client: Any) -> dict[str, Any]:
    """:func:`workers`, as listed at most ``POOL_FRESH`` seconds ago: a session's runs
    follow each other by milliseconds, and a look costs a scheduler round trip."""
    got = _LOOKS.get(client)
    if got is None or time.monotonic() - got[0] > POOL_FRESH:
        return workers(client)
    return got[1]


def pool_event(info: dict[str, Any], now: float) -> Pool:
    """The core's :class:`~.events.Pool` from the scheduler's list of workers: their
    threads, and those holding no data and no task (by their last heartbeat)."""
    empty = frozenset(
        a
        for a, w in info.items()
        if not w.get("metrics", {}).get("managed_bytes", 1)
        and not sum(w.get("metrics", {}).get("task_counts", {"?": 1}).values())
    )
    threads = tuple(sorted((a, int(w.get("nthreads", 1))) for a, w in info.items()))
    return Pool(now, threads, empty)


def core_events(msgs: list[dict[str, Any]]) -> list[Any]:
    """The core's events in the workers' log messages (see :mod:`.tasks`)."""
    out: list[Any] = []
    for m in msgs:
        kind, name, worker = m["kind"], str(m["name"]), str(m["worker"])
        if m.get("unauthenticated"):
            out.append(Refused(name))
        if kind == "outvoted":
            losers, winners = tuple(m.get("workers", ())), tuple(m.get("accepted", ()))
            out.append(Outvoted(name, losers, winners, bool(m.get("block"))))
            continue
        if m.get("written") and kind in ("done", "check"):
            out.append(Wrote(str(m.get("entry", name)), worker, m.get("digest")))
        elif kind == "recheck" and isinstance(m.get("digest"), str):
            out.append(Wrote(str(m.get("entry", name)), worker, m["digest"], recheck=True))
        if not m.get("unit") or "#" in name:
            continue
        copy = int(m.get("spec", 0))
        if kind == "start":
            got = m.get("fetched", (0, 0.0))
            out.append(Started(m["recv"], name, worker, copy, int(got[0]), float(got[1])))
        elif kind == "done":
            its = int(m["iterations"][1]) if m.get("iterations") else 0
            reused = m.get("status") != "computed"
            out.append(Computed(name, worker, float(m.get("seconds", 0.0)), its, copy, reused))
    return out


def wait_for_result(ac: Any, seconds: float) -> None:
    """Wait up to ``seconds`` for ``as_completed`` ``ac`` to hold a finished future, woken
    by it when one arrives (it notifies its ``thread_condition`` after queueing each)."""
    cond = getattr(ac, "thread_condition", None)
    if cond is None or not hasattr(ac, "has_ready"):  # another as_completed: poll
        time.sleep(seconds)
        return
    with cond:
        if not ac.has_ready():
            cond.wait(timeout=seconds)


def backoff(spins: int) -> float:
    """Seconds to wait for a result after ``spins`` empty polls: 0.5 ms doubling to 10 ms
    (the exponent capped, so a long wait never overflows a float)."""
    return min(0.01, 0.0005 * 2 ** min(spins, 5))


def task_exception(f: Any) -> BaseException | None:
    """What future ``f`` raised (or why it cannot say: cancelled, lost)."""
    try:
        return f.exception(timeout=10)
    except Exception as e:  # cancelled or lost
        return e


__all__ = [
    "POOL_FRESH",
    "backoff",
    "core_events",
    "pool_event",
    "recent_workers",
    "task_exception",
    "wait_for_result",
    "workers",
]
