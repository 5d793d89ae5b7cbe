"""Where a pool's units go and when one is late: pure functions, tested without a pool.

**Placement.** A volunteer holds (caches) every block it was sent, by digest, so where a
unit runs decides what crosses the donors' slow links. At the start of a run, and whenever
the set of volunteers changes, the units not yet handed out are cut into contiguous runs
of the *locality order* (units of neighbouring processors next to each other: a Morton
order of the processors' grid coordinates, so that a volunteer's run is a square of a
2-D grid, whose rows of ``B`` and columns of ``C`` it fetches once), one run per
volunteer, in proportion to the volunteers' speeds (:func:`partition`). A volunteer takes
its own run first, in order; with its run done it takes the pending unit whose blocks it
already holds the most of, from the end of the largest run left (:func:`pick`): work
stealing, so a slow volunteer's run shrinks as the fast ones finish theirs.

**Deadlines.** A unit sent to a volunteer is overdue after :data:`LATE` times what it
should take there: its iterations at the volunteer's observed rate (the pool's fastest
where it has finished nothing yet; the elastic runtime's rule,
:func:`distal.runtime.elastic.speculate.deadline`) plus its input bytes that the volunteer
does not hold at its observed bandwidth (:data:`COLD_BANDWIDTH` until one unit has come
back). An overdue unit is copied to another volunteer; the first verified result wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from distal.runtime.elastic import speculate

LATE = speculate.LATE
COLD_BANDWIDTH = 1e6
"""Bytes a second assumed for a volunteer's link before one of its units has come back
(8 Mbit/s: a slow home upload rate)."""


def morton(coord: Sequence[int]) -> int:
    """The Morton (Z-order) index of grid coordinates: bits interleaved, so coordinates near
    each other in every dimension are near each other in the order."""
    out, bit = 0, 0
    width = max((int(c).bit_length() for c in coord), default=0)
    for b in range(width):
        for c in coord:
            out |= ((int(c) >> b) & 1) << bit
            bit += 1
    return out


def partition(
    order: Sequence[str],
    speeds: Mapping[str, float],
    held: Mapping[str, set[str]] | None = None,
    inputs: Mapping[str, Mapping[str, int]] | None = None,
    slack: float = 1.5,
) -> dict[str, str]:
    """Each unit of ``order`` (in locality order) -> the volunteer of ``speeds`` (name ->
    relative speed) whose run it belongs to, runs in proportion to the speeds.

    A unit whose input bytes (``inputs``: unit -> {digest: bytes}) a volunteer already
    holds (``held``: name -> digests) goes to the one holding the most of them, while that
    volunteer's run stays within ``slack`` times its share (a loop's second run finds its
    blocks where the first left them); the others are cut into contiguous runs of the
    order over the room left."""
    names = sorted(speeds)
    if not names or not order:
        return {}
    held, inputs = held or {}, inputs or {}
    total = sum(max(speeds[n], 1e-9) for n in names)
    share = {n: len(order) * max(speeds[n], 1e-9) / total for n in names}
    cap = {n: max(1, math.ceil(share[n] * slack)) for n in names}
    out: dict[str, str] = {}
    load = dict.fromkeys(names, 0)
    for u in order:
        have = {n: sum(b for d, b in inputs.get(u, {}).items() if d in held.get(n, ()))
                for n in names}  # fmt: skip
        best = max(names, key=lambda n: (have[n], -load[n]))
        if have[best] > 0 and load[best] < cap[best]:
            out[u] = best
            load[best] += 1
    rest = [u for u in order if u not in out]
    room = {n: max(0.0, share[n] - load[n]) for n in names}
    left = sum(room.values())
    at, acc = 0, 0.0
    for k, n in enumerate(names):
        acc += room[n]
        end = len(rest) if k == len(names) - 1 else round(len(rest) * acc / left) if left else 0
        for u in rest[at:end]:
            out[u] = n
        at = max(at, end)
    return out


def interleave(order: Sequence[str], home: Mapping[str, str]) -> list[str]:
    """``order`` with the volunteers' runs taken in turn (the first of each run, then the
    second of each, ...): the order units are handed out in, so that the first window of
    units already reaches every volunteer's own run. Units with no run keep their place
    at the end."""
    runs: dict[str, list[str]] = {}
    for u in order:
        runs.setdefault(home.get(u, ""), []).append(u)
    nobody = runs.pop("", [])
    out: list[str] = []
    queues = [list(r) for _, r in sorted(runs.items())]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out + nobody


def speed_classes(rates: Mapping[str, float | None]) -> dict[str, float]:
    """Relative speeds for :func:`partition`: each measured rate as a power of two of the
    fastest (1, 1/2, 1/4, ...), so that the noise of a few measured units does not move the
    runs' boundaries while a volunteer really twice as slow gets half the run; all equal
    while any volunteer has no measured rate."""
    if not rates or any(not r for r in rates.values()):
        return dict.fromkeys(rates, 1.0)
    top = max(r for r in rates.values() if r)
    return {n: 2.0 ** round(math.log2(r / top)) for n, r in rates.items() if r}


def pick(
    volunteer: str,
    pending: Sequence[str],
    home: Mapping[str, str],
    inputs: Mapping[str, Mapping[str, int]],
    held: set[str],
    worth: Callable[[str], bool] | None = None,
) -> str | None:
    """The unit ``volunteer`` takes next among ``pending`` (in locality order): the first
    of its own run; else, among the others that are ``worth`` taking from their run (the
    thief would finish them before their own volunteer would reach them), the one whose
    input bytes (``inputs``: unit -> {digest: bytes}) it holds the most of (``held``:
    digests), from the end of the largest other run."""
    for u in pending:
        if home.get(u) == volunteer:
            return u
    if worth is not None:
        pending = [u for u in pending if worth(u)]
    if not pending:
        return None
    runs: dict[str, int] = {}
    for u in pending:
        runs[home.get(u, "")] = runs.get(home.get(u, ""), 0) + 1
    best, key = None, None
    for pos, u in enumerate(pending):
        have = sum(b for d, b in inputs.get(u, {}).items() if d in held)
        k = (have, runs[home.get(u, "")], pos)
        if key is None or k > key:
            best, key = u, k
    return best


def duration(
    work: int, new_bytes: int, volunteer: str, rates: Mapping[str, float],
    bandwidth: Mapping[str, float],
) -> float:  # fmt: skip
    """Seconds a unit of ``work`` iterations needing ``new_bytes`` it does not hold should
    take on ``volunteer``: at its observed rate and bandwidth (the fastest rate and the
    slowest bandwidth observed elsewhere, then the cold guesses, where it has none)."""
    rate = rates.get(volunteer) or max(rates.values(), default=0.0) or speculate.COLD_RATE
    bw = bandwidth.get(volunteer) or min(bandwidth.values(), default=0.0) or COLD_BANDWIDTH
    return work / rate + new_bytes / bw


def deadline(
    work: int, new_bytes: int, volunteer: str, rates: Mapping[str, float],
    bandwidth: Mapping[str, float],
) -> float:  # fmt: skip
    """Seconds after which a unit of ``work`` iterations needing ``new_bytes`` it does not
    hold yet is overdue on ``volunteer`` (see the module docstring)."""
    compute = speculate.deadline(work, volunteer, rates)
    bw = bandwidth.get(volunteer) or min(bandwidth.values(), default=COLD_BANDWIDTH)
    return compute + LATE * new_bytes / bw


__all__ = [
    "COLD_BANDWIDTH",
    "LATE",
    "deadline",
    "duration",
    "morton",
    "partition",
    "pick",
    "speed_classes",
]
