"""The core's part that copies stragglers and overdue units (a mixin of :class:`~.core.Core`).

It learns from the workers' events -- when each unit started (its inputs in place), how
long each took, what its inputs' transfers brought -- the workers' speeds and the links'
rate, and decides with :mod:`.speculate`'s arithmetic which units get a copy and where.
Like the rest of the core it reads no clock and calls nothing: time is the events' ``now``,
and a copy is an instruction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from distal.runtime.elastic import speculate
from distal.runtime.elastic.events import (
    AskQueues,
    Computed,
    Instruction,
    Queues,
    Started,
    SubmitUnit,
    Where,
)

PROBE_EVERY = 0.05
"""Seconds between looks for stragglers (a look may ask for the workers' queues)."""


class Stragglers:
    """Speculation for :class:`~.core.Core` (whose state it reads and writes)."""

    copies: dict[str, Any]
    queue: list[Any]
    policy: Any
    spec: Any
    now: float
    failed: bool
    excluded: set[str]
    unit_of: dict[str, str]
    threads: dict[str, int]
    allowed: Callable[[], list[str]]
    window: Callable[[], int]

    def _init_stragglers(self) -> None:
        self.n_dups = 0
        self.n_overdue = 0
        self.won: set[str] = set()
        self.probed = -float("inf")
        self.queues: dict[str, tuple[str, ...]] | None = None
        self.starts: dict[str, tuple[str, float, int]] = {}  # unit -> (worker, at, count)
        self.ends: dict[str, int] = defaultdict(int)
        self.times: dict[str, list[float]] = defaultdict(list)
        self.its: dict[str, float] = defaultdict(float)
        self.secs: dict[str, float] = defaultdict(float)
        self.link_bytes: dict[str, float] = defaultdict(float)
        self.link_secs: dict[str, float] = defaultdict(float)
        self.stalled_workers: set[str] = set()  # they hold a unit past its deadline
        self.stalled_at: dict[str, int] = {}
        self.stalled: set[str] = set()  # overdue originals (not counted against the window)
        self.dup_keys: set[str] = set()

    def _started(self, ev: Started, out: list[Instruction]) -> None:
        if ev.fetched > 0 and ev.fetch_seconds > 0:
            self.link_bytes[ev.worker] += ev.fetched
            self.link_secs[ev.worker] += ev.fetch_seconds
        if ev.copy == 0:
            _, _, n = self.starts.get(ev.name, ("", 0.0, 0))
            self.starts[ev.name] = (ev.worker, ev.now, n + 1)

    def _computed(self, ev: Computed, out: list[Instruction]) -> None:
        if ev.copy == 0:
            self.ends[ev.name] += 1
        if ev.reused:
            return
        self.times[ev.worker].append(ev.seconds)
        if ev.iterations:
            self.its[ev.worker] += ev.iterations
            self.secs[ev.worker] += ev.seconds

    def _queues(self, ev: Queues, out: list[Instruction]) -> None:
        self.queues = dict(ev.processing)

    # -- speculation ----------------------------------------------------------------------

    def rates(self) -> dict[str, float]:
        """Iterations per second each worker reached over its computed units."""
        return {w: self.its[w] / s for w, s in self.secs.items() if s > 0 and self.its[w] > 0}

    def link_rate(self) -> float | None:
        """Bytes per second the slowest link delivered inputs at (None before any transfer)."""
        rates = [self.link_bytes[w] / s for w, s in self.link_secs.items() if s > 0]
        return min(rates) if rates else None

    def _speculate(self, out: list[Instruction]) -> bool:
        """Copies of overdue units (at any time) and of stragglers in the tail (see
        :mod:`.speculate`); whether a unit was found overdue. Needs two trusted workers: a
        unit is never copied onto the worker it waits on, and a one-worker pool has no
        other."""
        p = self.policy
        if not (p.speculate and p.copies == 1) or p.eager or not self.copies or self.failed:
            return False
        if len(self.allowed()) < 2:
            return False
        now = self.now
        answered = self.queues is not None
        if not answered and now - self.probed < PROBE_EVERY:
            return False
        if not answered:
            self.probed = now
        for w in list(self.stalled_workers):  # it has answered again since
            if len(self.times.get(w, ())) > self.stalled_at.get(w, 0):
                self.stalled_workers.discard(w)
        late = self._late(now)
        ref = speculate.reference(self.times)
        tail: list[tuple[str, str, float]] = []
        waiting: dict[str, tuple[str, float]] = {}
        if not self.queue and ref is not None:
            threshold = max(ref, speculate.MIN_AGE)
            link = self.link_rate() or speculate.COLD_LINK
            for name, c in self.copies.items():
                if c.dups:
                    continue
                s = self.starts.get(name)
                # a copy must fetch the unit's inputs first: one that cannot be done
                # before the original is never made
                fetch = c.work.in_bytes / link
                if s is not None and s[2] > self.ends[name]:
                    if now - s[1] > threshold + fetch:
                        tail.append((name, s[0], now - s[1]))
                elif s is None and now - c.submitted > threshold + fetch:
                    waiting[name] = (c.key, now - c.submitted)
        if not late and not tail and not waiting:
            self.queues = None
            return False
        if not answered:
            out.append(AskQueues())
            return False
        busy, self.queues = self.queues or {}, None
        trusted = {w: ks for w, ks in busy.items() if w not in self.excluded}
        if late:
            self._overdue(late, trusted, out)
        # a unit copied for being overdue just now is not copied again as a straggler
        tail = [t for t in tail if not self.copies[t[0]].dups]
        waiting = {n: w for n, w in waiting.items() if not self.copies[n].dups}
        if tail or waiting:
            idle = [w for w, ks in trusted.items() if not ks and w not in self.stalled_workers]
            if idle:
                tail += speculate.queued(waiting, trusted)
                for name, w in speculate.pair(tail, idle, self.times):
                    self._copy(name, w, out)
        return bool(late)

    def _late(self, now: float) -> list[tuple[str, str, float]]:
        """Units past their deadline: running (timed from their start, when their inputs
        were in place), not started (timed from their hand-out, allowing for their inputs'
        bytes at the observed link rate and for the units ahead of them), or copied only
        to workers found stalled since."""
        rates, link = self.rates(), self.link_rate()
        ahead = self.window() / max(sum(self.threads.values()), 1)
        late = []
        for name, c in self.copies.items():
            size = c.work.size
            if c.dups:
                if all(w in self.stalled_workers for w in c.pinned):
                    age = now - c.copied
                    if age > speculate.deadline(size, c.pinned[-1], rates):
                        late.append((name, c.pinned[-1], age))
                continue
            s = self.starts.get(name)
            if s is not None and s[2] > self.ends[name]:
                if now - s[1] > speculate.deadline(size, s[0], rates):
                    late.append((name, s[0], now - s[1]))
            elif s is None:
                age = now - c.submitted
                if age > speculate.waiting_deadline(size, c.work.in_bytes, ahead, rates, link):
                    late.append((name, "", age))
        return late

    def _overdue(
        self, late: list[tuple[str, str, float]], busy: dict[str, tuple[str, ...]], out: list
    ) -> None:
        queued_on = {k: w for w, ks in busy.items() for k in ks}
        placed = []
        for name, where, age in late:
            where = where or queued_on.get(self.copies[name].key, "")
            if where:  # a unit the scheduler has not placed yet waits for nobody in particular
                placed.append((name, where, age))
        for name, where, _ in placed:
            c = self.copies[name]
            if not c.dups:
                self.stalled.add(c.key)
            if where not in self.stalled_workers:
                self.stalled_workers.add(where)
                self.stalled_at[where] = len(self.times.get(where, ()))
        for name, w in speculate.pair_overdue(placed, busy, self.stalled_workers, self.times):
            self._copy(name, w, out)
            self.n_overdue += 1

    def _copy(self, name: str, worker: str, out: list[Instruction]) -> None:
        c = self.copies[name]
        p = self.policy
        n = len(c.dups) + 1
        key = f"{c.key}-dup-{n}"
        saved = name in self.spec.present
        save = p.checkpoint and not p.check
        load = save or (p.check and saved)
        out.append(SubmitUnit(key, name, Where((worker,), True), load, save, not saved, copy=n))
        c.dups.append(key)
        c.pinned.append(worker)
        c.copied = self.now
        self.unit_of[key] = name
        self.dup_keys.add(key)
        self.n_dups += 1


__all__ = ["PROBE_EVERY", "Stragglers"]
