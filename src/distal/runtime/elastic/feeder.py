"""Hands units to Dask a window at a time, reductions once their units are done, and
speculative copies of stragglers in the tail."""

from __future__ import annotations

import time
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol

from distal.runtime.elastic import speculate
from distal.runtime.elastic.summary import Events
from distal.runtime.elastic.tasks import Ctx, planned_iterations
from distal.runtime.elastic.units import Unit, block_name
from distal.typing import Box


def release(futures: list[Any]) -> None:
    """Drop the run's hold on ``futures`` now, as their garbage collection would: the
    scheduler forgets what nobody else wants (and stops it where it has not started)."""
    for f in futures:
        f.release()


class Submitter(Protocol):
    """What the feeder needs from the run's driver (:class:`~.driver.Driver`).

    A protocol, so this module does not import the driver that imports it.
    """

    client: Any
    nonce: str
    rejections: list[dict[str, Any]]
    stalled_workers: set[str]

    def prefetch(self, units: list[Unit]) -> None: ...

    def submit_unit(self, ctx: Ctx, u: Unit, n: int, present: set[str]) -> Any: ...

    def submit_copy(self, ctx: Ctx, u: Unit, key: str, n: int, worker: str) -> Any: ...

    def submit_check(self, ctx: Ctx, u: Unit, f: Any, who: str, attempt: int) -> Any: ...

    def submit_redo(self, ctx: Ctx, u: Unit, attempt: int, avoid: set[str]) -> Any: ...

    def submit_reduce(
        self, ctx: Ctx, name: str, box: Box, contribs: list[Any], key: str, avoid: set[str]
    ) -> Any: ...

    def submit_reduce_check(
        self, ctx: Ctx, name: str, box: Box, contribs: list[Any], f: Any, who: str, attempt: int
    ) -> Any: ...

    def where(self, f: Any, name: str) -> str: ...

    def restrict(self, avoid: set[str] | None = None) -> dict[str, Any]: ...

    def exclude(self, worker: str, unit: str, how: str, **more: Any) -> list[Any]: ...


PROBE_EVERY = 0.05
"""Seconds between looks for stragglers (each look may ask the scheduler who is idle)."""


@dataclass
class _Copies:
    """A submitted unit: its future and any speculative duplicates, until one finishes."""

    unit: Unit
    original: Any
    submitted: float
    dups: list[Any] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)  # the worker of each duplicate
    copied: float = 0.0  # when the last duplicate was made


def sent_to(u: Unit, piece: Any) -> int:
    """Where the plan's ``Flush`` of ``u`` sends ``piece`` (a box, or a cut of rows or stored
    entries); -1 when it is not sent."""
    return next((dst for dst, box in u.sends if box is piece or box == piece), -1)


class Feeder:
    """Hands units to Dask a window at a time, and each block's reduction once it can.

    Dask queues root tasks on the scheduler until a worker has a free thread, so a slow
    worker never hoards work; our units depend on input blocks, which would make Dask assign
    them all up front and rely on work stealing, which does not know one worker is slower.
    Keeping only ``window`` units submitted (default: twice the pool's threads, re-read as
    workers join or leave) restores that pull behaviour; Dask still chooses the worker.
    Units go in block order, so blocks finish (and are checkpointed) progressively.

    A block's reduction is submitted once every unit it sums has *finished*, with the future
    of the copy that finished first: with speculation a unit may exist twice, and the
    reduction must add exactly one of them (Dask cannot re-point a submitted task's
    dependency from the losing copy to the winner).
    """

    def __init__(
        self,
        driver: Submitter,
        ctx: Ctx,
        needed: list[Unit],
        pending: dict[tuple[int, ...], Box],
        present: set[str],
        finals: set[tuple[int, ...]],
        speculative: bool = False,
        check: bool = False,
        owners: dict[tuple[int, ...], int] | None = None,
    ) -> None:
        self.driver, self.ctx, self.present = driver, ctx, present
        self.by_name = {u.name: u for u in needed}
        # verify="check": a unit is done once its check passed (see finished / rejected)
        self.check = check
        self.extra: list[Any] = []  # futures submitted between feeds (checks, redos)
        self.checks: dict[str, tuple[str, int, str]] = {}  # check key -> (unit, attempt, by)
        self.attempts: dict[str, int] = defaultdict(int)
        self.redo_keys: set[str] = set()
        self.aux: set[str] = set()  # re-verifications of an excluded worker's entries
        # verify="check" on reductions: a block is done once its reduction's check passed
        self.reducing: dict[str, tuple[int, ...]] = {}  # reduction key -> block
        self.red_checks: dict[str, tuple[tuple[int, ...], int, str]] = {}  # -> (block, attempt, by)
        self.red_contribs: dict[tuple[int, ...], list[Any]] = {}  # kept until the block passes
        # a passed block's summands, kept to re-verify its entry if its checker is excluded
        self.summed: dict[str, tuple[Any, list[Any]]] = {}
        contrib: dict[tuple[int, ...], list[tuple[Unit, Any]]] = defaultdict(list)
        owners = owners or {}
        for u in needed:
            for idx, piece in u.pieces:
                if idx in pending:
                    contrib[idx].append((u, piece))
        for idx, cs in contrib.items():
            # the reducer's order: its own piece first, then the others by source and step
            # (as the plan's Flush and Reduce instructions add them), so the bits never
            # depend on which task finished first and equal the other runtimes'
            cs.sort(key=lambda c: (c[0].proc != owners.get(idx), c[0].first, c[0].proc, c[0].name))
        self.queue: list[Unit] = []
        queued: set[str] = set()
        for idx in sorted(pending):
            for u, _ in contrib[idx]:
                if u.name not in queued:
                    queued.add(u.name)
                    self.queue.append(u)
        driver.prefetch(self.queue)
        self.queue.reverse()  # pop() from the end
        self.reduces = {idx: box for idx, box in pending.items() if idx not in finals}
        self.contrib = contrib
        self.waiting = {idx: len({u.name for u, _ in contrib[idx]}) for idx in self.reduces}
        self.ready = [idx for idx, w in self.waiting.items() if w == 0]
        self.unit_f: dict[str, Any] = {}
        self.users: dict[str, int] = defaultdict(int)
        for idx in self.reduces:
            for u, _ in contrib[idx]:
                self.users[u.name] += 1
        self.block_of: dict[str, tuple[int, ...]] = {}
        self.inflight: set[str] = set()
        self.count = 0
        # speculation
        self.speculative = speculative
        self.copies: dict[str, _Copies] = {}  # unit name -> its copies, until one finishes
        self.unit_of: dict[str, str] = {}  # future key -> unit name
        self.dup_keys: set[str] = set()
        self.dropped: set[str] = set()  # keys of losing copies (ignored when they report)
        self.n_dups = 0
        self.won: set[str] = set()  # units whose duplicate finished first
        self.probed = 0.0
        # deadlines: the iterations of each unit, the keys of overdue originals (not counted
        # against the window), and how many copies overdue units got
        self.sizes = {u.name: planned_iterations(u) for u in needed}
        self.stalled: set[str] = set()
        self.stalled_at: dict[str, int] = {}  # stalled worker -> its computed units then
        self.n_overdue = 0
        self.n_unchecked = 0  # verify="adaptive": results accepted without a check

    def feed(self, window: int) -> list[Any]:
        """Submit units up to the window, and every reduction whose units are all done."""
        out, self.extra = self.extra, []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "large graph": array blocks travel in their tasks
            while self.queue and len(self.inflight - self.stalled) < window:
                u = self.queue.pop()
                f = self.driver.submit_unit(self.ctx, u, self.count, self.present)
                self.count += 1
                self.copies[u.name] = _Copies(u, f, time.monotonic())
                self.unit_of[f.key] = u.name
                self.inflight.add(f.key)
                out.append(f)
                if u.final and not self.check:
                    self.block_of[f.key] = u.pieces[0][0]
            for idx in self.ready:
                del self.waiting[idx]
                contribs = [
                    (
                        self.unit_f[u.name],
                        u.out_box if isinstance(piece, tuple) else None,
                        piece,
                        u.proc,
                        sent_to(u, piece),
                    )
                    for u, piece in self.contrib[idx]
                ]
                f = self.driver.submit_reduce(
                    self.ctx,
                    block_name(idx),
                    self.reduces[idx],
                    contribs,
                    f"distal-block-{self.driver.nonce}-{'.'.join(map(str, idx))}",
                    set(),
                )
                if self.check:
                    self.reducing[f.key] = idx
                    self.red_contribs[idx] = contribs
                else:
                    self.block_of[f.key] = idx
                out.append(f)
                # Dask keeps a unit's result while a submitted reduction needs it; we hold
                # the future only until every reduction using it is submitted.
                for u, _ in self.contrib[idx]:
                    self.users[u.name] -= 1
                    if self.users[u.name] == 0:
                        del self.unit_f[u.name]
            self.ready = []
        return out

    def ignored(self, key: str) -> bool:
        """A losing copy (cancelled, or finished after the winner): not the run's business."""
        return key in self.dropped

    def is_dup(self, key: str) -> bool:
        """A speculative copy (its failure is not the run's: the original still runs)."""
        return key in self.dup_keys

    def drop(self, key: str) -> None:
        """Forget a failed speculative copy; the unit's other copies carry on."""
        self.dropped.add(key)
        c = self.copies.get(self.unit_of.get(key, ""))
        if c is not None:
            c.dups = [d for d in c.dups if d.key != key]

    def finished(self, f: Any) -> bool:
        """A task is done; True when it completes one of the run's tasks (for progress).

        For a unit, the first copy wins and the others are cancelled; with
        ``verify="check"`` the winner is then checked on another worker, and the unit is
        done only once its check passes (the check's future is then the unit's result).
        """
        self.inflight.discard(f.key)
        if f.key in self.checks:
            name, _, who = self.checks.pop(f.key)
            self._trusted(who)
            self._accept(self.by_name[name], f)
            return True
        if f.key in self.reducing:
            idx = self.reducing.pop(f.key)
            who = self._checked_by(block_name(idx), f)
            if who is None:  # accepted without a check (verify="adaptive")
                self.block_of[f.key] = idx
                del self.red_contribs[idx]
                return True
            self._submit_reduce_check(idx, f, who)
            return False
        if f.key in self.red_checks:
            idx, _, who = self.red_checks.pop(f.key)
            self._trusted(who)
            self.summed[block_name(idx)] = (self.reduces[idx], self.red_contribs.pop(idx))
            return True
        name = self.unit_of.get(f.key)
        c = self.copies.pop(name, None) if name is not None else None
        if c is None:
            return True
        losers = [g for g in (c.original, *c.dups) if g.key != f.key]
        if losers:
            self.dropped.update(g.key for g in losers)
            release(losers)  # not cancel: see Driver.run
        if f.key != c.original.key:
            self.won.add(c.unit.name)
        self.inflight.discard(c.original.key)
        if self.check:
            who = self._checked_by(c.unit.name, f)
            if who is not None:
                self._submit_check(c.unit, f, who)
                return False
            if c.unit.final:  # accepted without a check (verify="adaptive")
                self.block_of[f.key] = c.unit.pieces[0][0]
        self._accept(c.unit, f)
        return True

    def _checked_by(self, name: str, f: Any) -> str | None:
        """The worker that computed result ``f`` of ``name``, which is to be checked; or
        None under ``verify="adaptive"`` when the trust's draw accepts it unchecked (then
        the worker is asked for only when the draw does not settle it alone). Never
        unchecked: a result loaded from the checkpoint (its writer is not the worker that
        loaded it), or one whose worker is not known. An unchecked result is not
        checkpointed either: an entry is only ever a checked result."""
        trust = self.driver.opts._trust
        if trust is None or name in self.present:
            return self.driver.where(f, name)
        u = trust.draw(self.driver.pool())
        if u is None:
            self.n_unchecked += 1
            return None
        who = self.driver.where(f, name)
        if trust.decide(u, who):  # an unknown worker ("") has no streak: always checked
            return who
        self.n_unchecked += 1
        return None

    def _trusted(self, who: str) -> None:
        """A result of ``who`` passed its check: under ``"adaptive"`` its streak grows."""
        if self.driver.opts._trust is not None and who:
            self.driver.opts._trust.passed(who)

    def _accept(self, unit: Unit, f: Any) -> None:
        if self.users[unit.name]:
            self.unit_f[unit.name] = f
        for idx, _ in unit.pieces:
            if idx in self.waiting:
                self.waiting[idx] -= 1
                if self.waiting[idx] == 0:
                    self.ready.append(idx)

    def _submit_check(self, unit: Unit, f: Any, who: str) -> None:
        attempt = self.attempts[unit.name]
        self._note_redone(unit.name, who)
        g = self.driver.submit_check(self.ctx, unit, f, who, attempt)
        self.checks[g.key] = (unit.name, attempt, who)
        self.inflight.add(g.key)
        if unit.final:
            self.block_of[g.key] = unit.pieces[0][0]
        self.extra.append(g)

    def is_check(self, key: str) -> bool:
        """A check (of a unit or of a reduction)."""
        return key in self.checks or key in self.red_checks

    def _note_redone(self, name: str, who: str) -> None:
        for r in self.driver.rejections:
            if r["unit"] == name and "recomputed_on" not in r:
                r["recomputed_on"] = who

    def _submit_reduce_check(self, idx: tuple[int, ...], f: Any, who: str) -> None:
        name = block_name(idx)
        attempt = self.attempts[name]
        self._note_redone(name, who)
        g = self.driver.submit_reduce_check(
            self.ctx, name, self.reduces[idx], self.red_contribs[idx], f, who, attempt
        )
        self.red_checks[g.key] = (idx, attempt, who)
        self.block_of[g.key] = idx
        self.extra.append(g)

    def rejected(self, f: Any) -> None:
        """A check failed: exclude the worker that computed the result, recompute elsewhere
        (a unit, or a reduction from the same checked partials)."""
        self.inflight.discard(f.key)
        self.block_of.pop(f.key, None)
        trust = self.driver.opts._trust
        if f.key in self.red_checks:
            idx, attempt, who = self.red_checks.pop(f.key)
            if trust is not None:
                trust.failed(who)
            name = block_name(idx)
            self.extra.extend(self.driver.exclude(who, name, "check", kind="reduction"))
            self.attempts[name] = attempt + 1
            r = self.driver.submit_reduce(
                self.ctx,
                name,
                self.reduces[idx],
                self.red_contribs[idx],
                f"distal-block-{self.driver.nonce}-{'.'.join(map(str, idx))}-redo-{attempt + 1}",
                {who},
            )
            self.reducing[r.key] = idx
            self.extra.append(r)
            return
        name, attempt, who = self.checks.pop(f.key)
        if trust is not None:
            trust.failed(who)
        unit = self.by_name[name]
        self.extra.extend(self.driver.exclude(who, name, "check", kind="unit"))
        self.attempts[name] = attempt + 1
        r = self.driver.submit_redo(self.ctx, unit, attempt + 1, {who})
        self.copies[name] = _Copies(unit, r, time.monotonic())
        self.unit_of[r.key] = name
        self.redo_keys.add(r.key)
        self.inflight.add(r.key)
        self.extra.append(r)

    def speculate(self, events: Events) -> list[Any]:
        """Duplicates of stragglers and of overdue units (see :mod:`.speculate`).

        In the tail (no unit left to hand out) a unit qualifies when its original copy has
        run longer than the median unit time on the fast workers (and at least
        ``speculate.MIN_AGE``), or has waited that long behind another task on a busy
        worker without starting; it gets at most one copy, pinned to an idle worker
        (``workers=[w], allow_other_workers=False``: Dask would otherwise be free to queue
        it behind the straggler). At any time a unit past its deadline (its size at the
        observed speed) gets a copy on the least loaded worker holding no overdue unit, and
        stops counting against the window.
        """
        now = time.monotonic()
        if not self.speculative or not self.copies or now - self.probed < PROBE_EVERY:
            return []
        self.probed = now
        by_name = events.by_name()
        times = speculate.unit_times(by_name)
        single = {name: c for name, c in self.copies.items() if not c.dups}
        running = speculate.running(by_name, now)
        begun = speculate.started(by_name)
        for w in list(self.driver.stalled_workers):  # it has answered again since
            if len(times.get(w, ())) > self.stalled_at.get(w, 0):
                self.driver.stalled_workers.discard(w)
        out = self._overdue(running, begun, speculate.rates(by_name), times, now)
        ref = speculate.reference(times)
        if self.queue or ref is None:
            return out
        threshold = max(ref, speculate.MIN_AGE)
        single = {name: c for name, c in single.items() if not c.dups}
        candidates = [
            (name, where, age)
            for name, (where, age) in running.items()
            if name in single and age > threshold
        ]
        waiting = {
            name: (c.original.key, now - c.submitted)
            for name, c in single.items()
            if name not in begun and now - c.submitted > threshold
        }
        if not candidates and not waiting:
            return out
        busy = self.driver.client.processing()
        # a worker that held an overdue unit may look idle once that unit is cancelled,
        # while its thread is still stuck in it: no copies there
        idle = [w for w, keys in busy.items() if not keys and w not in self.driver.stalled_workers]
        if not idle:
            return out
        candidates += speculate.queued(waiting, busy)
        for name, worker in speculate.pair(candidates, idle, times):
            out.append(self._copy(name, worker))
        return out

    def _overdue(
        self,
        running: dict[str, tuple[str, float]],
        begun: set[str],
        observed: dict[str, float],
        times: dict[str, list[float]],
        now: float,
    ) -> list[Any]:
        """Copies of the units past their deadline (running, or not started since they
        were submitted), and again of those whose every copy went to a worker found
        stalled since; they no longer count against the window, and new units prefer the
        workers that hold none."""
        late: list[tuple[str, str, float]] = []
        stalled = self.driver.stalled_workers
        single = {}
        for name, c in self.copies.items():
            size = self.sizes.get(name, 0)
            if c.dups:
                # a copy made before its worker was known to be stuck (a unit waiting for
                # an input queued there, say) is made again elsewhere
                if all(w in stalled for w in c.pinned):
                    age = now - c.copied
                    if age > speculate.deadline(size, c.pinned[-1], observed):
                        late.append((name, c.pinned[-1], age))
                        single[name] = c
                continue
            single[name] = c
            if name in running:
                where, age = running[name]
            elif name not in begun:
                where, age = "", now - c.submitted
            else:
                continue
            if age > speculate.deadline(size, where, observed):
                late.append((name, where, age))
        if not late:
            return []
        busy = self.driver.client.processing()
        if any(not where for _, where, _ in late):
            queued_on = {str(k): w for w, keys in busy.items() for k in keys}
            late = [
                (n, where or queued_on.get(str(single[n].original.key), ""), age)
                for n, where, age in late
            ]
        self.stalled.update(str(single[n].original.key) for n, _, _ in late)
        for _, where, _ in late:
            if where and where not in self.driver.stalled_workers:
                self.driver.stalled_workers.add(where)
                self.stalled_at[where] = len(times.get(where, ()))
        stuck = set(self.driver.stalled_workers)
        out = []
        for name, worker in speculate.pair_overdue(late, busy, stuck, times):
            out.append(self._copy(name, worker))
            self.n_overdue += 1
        return out

    def _copy(self, name: str, worker: str) -> Any:
        """A duplicate of unit ``name`` pinned to ``worker``."""
        c = self.copies[name]
        n = len(c.dups) + 1
        d = self.driver.submit_copy(self.ctx, c.unit, f"{c.original.key}-dup-{n}", n, worker)
        c.dups.append(d)
        c.pinned.append(worker)
        c.copied = time.monotonic()
        self.unit_of[d.key] = name
        self.dup_keys.add(d.key)
        if c.unit.final and not self.check:
            self.block_of[d.key] = c.unit.pieces[0][0]
        self.n_dups += 1
        return d


__all__ = ["PROBE_EVERY", "Feeder", "Submitter", "sent_to"]
