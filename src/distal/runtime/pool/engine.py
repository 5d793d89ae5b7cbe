"""One run on the pool: the elastic runtime's decisions, carried out over NATS.

Every decision of a run -- which unit to hand out next, when one is overdue and where its
copy goes, which results are checked, what a failed check or an outvoted copy excludes,
when a block is summed and delivered -- is made by the elastic runtime's sans-IO core
(:class:`~distal.runtime.elastic.core.Core`: events in, instructions out), the one the
Dask driver drives too. This loop is the pool's transport around it, in the link's event
loop (:mod:`.link`):

- it tells the core who is there (``Pool``: the volunteers heard from in the last
  :data:`LOST_AFTER` seconds, one thread each: a volunteer holds at most two units, one
  computing and one fetching its blocks, which is the core's window of twice the threads;
  under ``verify="check"``/``"adaptive"`` also :data:`COORDINATOR` with no thread, the
  trusted member checks go to),
  what came back (``Started``, ``Computed``, ``Finished``; ``Failed`` for a check that
  rejected its result) and the time (``Tick``);
- it carries out ``SubmitUnit`` by placing the unit on a volunteer within the core's
  ``Where`` (:mod:`.policy`: a unit goes where its blocks are or will be, runs of the
  locality order per volunteer, stealing only what the thief finishes first) and
  publishing it; ``SubmitCheck`` by checking the result *here*, on the coordinator (the
  elastic runtime's randomized check, :func:`~distal.runtime.elastic.tasks.check`: a
  verdict never comes from the volunteer that made the result); ``SubmitReduce`` by
  summing the accepted partials here, in the plan's order; ``SubmitAgreed`` (``verify=k``)
  by sending the copies to their volunteers and comparing them here; ``Deliver`` by keeping
  the block; ``Fail`` by ending the run.

What only the transport can know stays here: a reply the wire format refuses
(:class:`~.wire.Receiver`, before anything is allocated) excludes its sender through the
core (``Core.exclude``), as a failed check does; a volunteer gone quiet (or saying bye)
has its units placed again, as Dask re-runs a lost worker's tasks; a ``failed`` or
``refuse`` report sends the unit elsewhere. Exclusions and trust are persisted in the
pool's KV bucket (``excluded.<name>``, ``trust.<name>``), so a coordinator that restarts
keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.errors import RuntimeFailure
from distal.runtime.elastic.core import Core, Policy, RunSpec, Work
from distal.runtime.elastic.events import (
    AskQueues,
    Computed,
    Deliver,
    Fail,
    Failed,
    Finished,
    Outvoted,
    Pool,
    Queues,
    Release,
    Started,
    SubmitAgreed,
    SubmitCheck,
    SubmitRecheck,
    SubmitReduce,
    SubmitReduceCheck,
    SubmitUnit,
    Tick,
    Where,
)
from distal.runtime.elastic.trust import Trust
from distal.runtime.pool import policy, wire
from distal.runtime.pool.wire import BlockRef, Expect, Receiver, UnitMsg, WireError

log = logging.getLogger("distal.pool")

LOST_AFTER = 10.0
"""Seconds without a word from a volunteer after which it is taken for gone."""

STEAL_GAIN = 0.25
"""A volunteer takes a unit from another's run only if it would finish it this much
sooner (a fraction of the time the other would take to reach and finish it), and at least
a second sooner."""

COORDINATOR = "coordinator"
"""Who the core is told ran a check or a reduction: this process, never a volunteer."""


class VerificationFailed(RuntimeFailure):
    """No agreement on a unit's result (``verify=k``), or no volunteer left to compute it."""


@dataclass
class Task:
    """One unit of a run as the loop sees it: what a volunteer is sent (``program``,
    ``blocks``, ``out``, ``work``), the bytes of the objects it names (``payloads``, put in
    the object store before the unit is sent), the output blocks its result goes into
    (``outputs``; ``final``: it alone is the one block) and its check (``check(result,
    attempt) -> Verdict``, run in a thread)."""

    uid: str
    program: BlockRef
    blocks: tuple[BlockRef, ...]
    out: Expect
    work: int
    payloads: Mapping[str, memoryview]
    check: Callable[[np.ndarray, int], Any] | None = None
    outputs: tuple[str, ...] = ()
    final: bool = False

    @property
    def sizes(self) -> dict[str, int]:
        return {b.digest: b.nbytes for b in (self.program, *self.blocks)}


@dataclass
class Pending:
    """A volunteer's task as the loop keeps it: the core's key, the unit, where the core
    allows it, and (once placed) on whom and as which attempt."""

    key: str
    uid: str
    where: Where
    copy: int = 0
    agreed: str = ""  # the SubmitAgreed key this copy is one of
    volunteer: str = ""
    attempt: str = ""
    sent: float = 0.0
    new_bytes: int = 0
    avoid: set[str] = field(default_factory=set)
    released: bool = False
    started: bool = False  # its volunteer said its inputs are in place
    started_at: float = 0.0


@dataclass
class Member:
    """A volunteer as the coordinator knows it."""

    name: str
    seen: float
    slots: int = 2
    holding: set[str] = field(default_factory=set)  # keys placed on it, not answered
    sent: set[str] = field(default_factory=set)  # digests it was sent (its cache)
    receiver: Receiver = field(default_factory=Receiver)
    busy_until: float = 0.0
    fails: int = 0


@dataclass
class Summary:
    """What a run on the pool did (``Result.extra["summary"]``)."""

    volunteers: list[str] = field(default_factory=list)
    excluded_volunteers: dict[str, str] = field(default_factory=dict)
    units_rejected: list[dict[str, Any]] = field(default_factory=list)
    replies_refused: list[dict[str, Any]] = field(default_factory=list)
    units: int = 0
    attempts: int = 0
    copies: int = 0  # speculative copies the core made of overdue or straggling units
    reassigned: int = 0  # units placed again (a volunteer gone, failed or excluded)
    failed: list[dict[str, Any]] = field(default_factory=list)
    checked: int = 0
    unchecked: int = 0
    false_accept_bound: float = 0.0
    units_by_volunteer: dict[str, int] = field(default_factory=dict)
    #: seconds the accepted units took to compute, as their volunteers reported them
    compute_seconds: dict[str, float] = field(default_factory=dict)
    bytes_sent: int = 0  # program and block bytes the volunteers were sent (not cached)
    bytes_sent_by_volunteer: dict[str, int] = field(default_factory=dict)
    bytes_received: int = 0
    check_seconds: float = 0.0
    seconds: float = 0.0
    #: per unit, the most elements it held beside its processor's owned blocks, as the
    #: volunteer whose result was accepted measured it (``Result.stats.peak_words``)
    held: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Options:
    verify: str | int = "check"
    wait: float = 120.0  # seconds a run waits with no volunteer at all
    speculate: bool = True
    lost_after: float = LOST_AFTER
    timeout: float | None = None


class Engine:
    """The pool's run loop; one per coordinator (it keeps the members between runs)."""

    def __init__(self, link: Any, opts: Options, trust: Trust | None = None) -> None:
        self.link, self.opts = link, opts
        self.trust = trust or Trust()
        self.members: dict[str, Member] = {}
        self.excluded: dict[str, str] = {}
        self.rates: dict[str, float] = {}  # iterations a second, by volunteer
        self.bandwidth: dict[str, float] = {}  # bytes a second, by volunteer
        self.checks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="distal-pool-check")
        self.puts: dict[str, asyncio.Future[None]] = {}
        self._loaded: set[str] = set()
        self.core: Core | None = None

    # -- members -------------------------------------------------------------------------

    async def _member(self, name: str, now: float) -> Member | None:
        if name not in self._loaded:
            self._loaded.add(name)
            raw = await self.link.kv_get(f"excluded.{name}")
            if raw is not None:
                self.excluded[name] = raw.decode(errors="replace")[:500]
            raw = await self.link.kv_get(f"trust.{name}")
            if raw is not None:
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    self.trust.streaks[name] = int(json.loads(raw).get("streak", 0))
        if name in self.excluded:
            return None
        m = self.members.get(name)
        if m is None:
            m = self.members[name] = Member(name, now)
        m.seen = max(m.seen, now)
        return m

    def alive(self, now: float) -> list[Member]:
        return [
            m for n, m in sorted(self.members.items())
            if n not in self.excluded and now - m.seen <= self.opts.lost_after
        ]  # fmt: skip

    async def _persist_trust(self, name: str) -> None:
        doc = {"streak": self.trust.streaks.get(name, 0), "time": time.time()}
        await self.link.kv_put(f"trust.{name}", json.dumps(doc).encode())

    async def exclude(self, name: str, reason: str, summary: Summary) -> None:
        """Exclude volunteer ``name`` (persisted): it gets no unit again, nothing it sent is
        used, and the units it holds go elsewhere."""
        if name in self.excluded:
            return
        self.excluded[name] = reason
        summary.excluded_volunteers[name] = reason
        log.debug("excluded %s: %s", name, reason)
        await self.link.kv_put(f"excluded.{name}", reason.encode()[:1000])
        await self.link.control(name, wire.control("stop", reason=reason[:500]))
        await self.link.shut_out(name)
        m = self.members.pop(name, None)
        if m is not None:
            for key in list(m.holding):
                self._unplace(key, summary)

    async def gather(self, n: int, timeout: float) -> int:
        """Between runs: take hellos and byes for up to ``timeout`` seconds or until ``n``
        volunteers are alive; how many are."""
        assert self.link.events is not None
        end = time.monotonic() + timeout
        summary = Summary()
        while len(self.alive(time.monotonic())) < n:
            left = end - time.monotonic()
            if left <= 0:
                break
            try:
                ev = await asyncio.wait_for(self.link.events.get(), left)
            except asyncio.TimeoutError:
                break
            if ev[0] in ("hello", "bye"):
                await self._event(ev, summary)
        return len(self.alive(time.monotonic()))

    # -- a run ---------------------------------------------------------------------------------

    async def run(
        self,
        tasks: list[Task],
        order: list[str],
        blocks: tuple[str, ...],
        reduce: Callable[[str, Mapping[str, np.ndarray]], np.ndarray],
    ) -> tuple[dict[str, np.ndarray], Summary]:
        """Compute every output block of ``blocks`` (``reduce(block, {unit: partial})``
        sums a block); the blocks and the summary."""
        t0 = time.monotonic()
        self.run_id = secrets.token_hex(8)
        self.tasks = {t.uid: t for t in tasks}
        self.reduce = reduce
        self.pending: dict[str, Pending] = {}  # key -> its state
        self.queue: list[str] = []  # keys waiting for a volunteer, in hand-out order
        self.by_attempt: dict[str, str] = {}  # attempt id -> key
        self.results: dict[str, np.ndarray] = {}
        self.by_worker: dict[str, str] = {}  # key -> who made its result
        self.held: dict[str, int] = {}  # key -> the most its unit held (its volunteer's word)
        self.agreed: dict[str, list[str]] = {}  # SubmitAgreed key -> its copies' keys
        self.delivered: dict[str, np.ndarray] = {}
        self.checking: set[asyncio.Task[Any]] = set()
        # checks handed out with their units (the core's "early" checks), by check key:
        # each starts once its unit's result is in from the volunteer it was meant for
        self.parked: dict[str, SubmitCheck] = {}
        self.dispatching: set[asyncio.Task[Any]] = set()
        self.later: list[Any] = []  # events from tasks of this loop (checks), for the core
        self.failure: BaseException | None = None
        self.attempt_no = 0
        summary = Summary(units=len(tasks))
        self.summary = summary
        # the core judges the pool it is first shown: wait for the volunteers it needs
        need = self.opts.verify if isinstance(self.opts.verify, int) else 1
        if await self.gather(need, self.opts.wait) < 1:
            raise VerificationFailed(
                f"no volunteer has connected in {self.opts.wait:.0f} s "
                f"({len(self.excluded)} excluded: {sorted(self.excluded)[:8]})"
            )
        now = time.monotonic()
        await self._drain(summary)
        names = tuple(m.name for m in self.alive(now))
        order = [u for u in order if u in self.tasks]
        self.order = order
        self.placed: set[str] = set()  # units some attempt of which went to a volunteer
        self.home = policy.partition(order, dict.fromkeys(names, 1.0),
                                     {m.name: m.sent for m in self.alive(now)},
                                     {u: self.tasks[u].sizes for u in order})  # fmt: skip
        self.homes_for = names
        work = tuple(
            Work(u, self.tasks[u].outputs, self.tasks[u].final, self.tasks[u].work,
                 sum(b.nbytes for b in self.tasks[u].blocks))
            for u in policy.interleave(order, self.home)
        )  # fmt: skip
        verify: int | str = self.opts.verify
        core = self.core = Core(
            RunSpec(work, tuple(blocks), self.run_id),
            Policy(verify=verify, speculate=self.opts.speculate, timeout=self.opts.timeout,
                   excluded=frozenset(self.excluded)),
            self.trust if verify == "adaptive" else None,
        )  # fmt: skip
        first = self._pool(now)
        self.pool_seen = first.threads
        todo = core.handle(first)
        idle_since: float | None = None
        seen: set[str] = set()
        assert self.link.events is not None
        try:
            while True:
                await self._do(todo, summary)
                if core.done:
                    break
                if self.failure is not None:
                    raise self.failure
                now = time.monotonic()
                alive = self.alive(now)
                seen.update(m.name for m in alive)
                self._lost(now, summary)
                await self._place(now, summary)
                if not alive and not self.checking:
                    idle_since = idle_since or now
                    if now - idle_since > self.opts.wait:
                        raise VerificationFailed(
                            f"no volunteer has taken this run's units for "
                            f"{self.opts.wait:.0f} s ({len(self.excluded)} excluded: "
                            f"{sorted(self.excluded)[:8]})"
                        )
                else:
                    idle_since = None
                events = await self._next_events(summary)
                pool = self._pool(time.monotonic())
                if pool.threads != self.pool_seen:
                    self.pool_seen = pool.threads
                    events.insert(0, pool)
                todo = core.handle(*events) if events else core.handle(Tick(time.monotonic()))
        finally:
            for task in list(self.dispatching):  # copies no longer needed
                task.cancel()
            for m in self.members.values():  # what is still out belongs to this run
                m.holding.clear()
                m.receiver.open.clear()
        for name in list(self.trust.streaks):
            if name in self.members:
                await self._persist_trust(name)
        summary.volunteers = sorted(seen | set(summary.units_by_volunteer))
        summary.seconds = time.monotonic() - t0
        for uid, key in core.accepted.items():  # who made each accepted result
            summary.held[uid] = self.held.get(key, 0)
            w = self.by_worker.get(key, "")
            if w and w != COORDINATOR:
                summary.units_by_volunteer[w] = summary.units_by_volunteer.get(w, 0) + 1
        summary.copies = core.n_dups
        summary.unchecked = core.n_unchecked
        for r in core.rejections:
            w = r.get("worker", "")
            if w and w not in summary.excluded_volunteers:
                summary.excluded_volunteers[w] = f"{r.get('how')} ({r.get('kind')} {r['unit']})"
        return self.delivered, summary

    def _pool(self, now: float) -> Pool:
        alive = self.alive(now)
        threads = tuple((m.name, 1) for m in alive)
        if self.opts.verify in ("check", "adaptive"):
            # checks run here: the coordinator is the trusted member a check goes to (no
            # thread: nothing else is placed on it), so one volunteer is enough to verify
            threads = ((COORDINATOR, 0), *threads)
        empty = frozenset(m.name for m in alive if not m.sent and not m.holding)
        return Pool(now, threads, empty)

    async def _drain(self, summary: Summary) -> None:
        """What arrived while this loop was busy: read before anyone is taken for gone."""
        assert self.link.events is not None
        while not self.link.events.empty():
            await self._event(self.link.events.get_nowait(), summary)

    async def _next_events(self, summary: Summary) -> list[Any]:
        """The core's events from what arrives in the next quarter second (or at once)."""
        assert self.link.events is not None
        got, self.later = self.later, []
        if not got:
            try:
                ev = await asyncio.wait_for(self.link.events.get(), 0.25)
            except asyncio.TimeoutError:
                return []
            got += await self._event(ev, summary)
        while not self.link.events.empty():
            got += await self._event(self.link.events.get_nowait(), summary)
        got += self.later
        self.later = []
        return got

    # -- carrying out the core's instructions ------------------------------------------------

    async def _do(self, todo: list[Any], summary: Summary) -> None:
        assert self.core is not None
        while todo:
            ins, todo = todo[0], todo[1:]
            if isinstance(ins, SubmitUnit):
                if ins.copy:
                    log.debug("the core copies %s to %s", ins.name, ins.where.workers)
                self._enqueue(Pending(ins.key, ins.name, ins.where, ins.copy))
            elif isinstance(ins, SubmitAgreed):
                self.agreed[ins.key] = [ck for ck, _ in ins.copies]
                for ck, w in ins.copies:
                    self._enqueue(Pending(ck, ins.name, Where((w,), ins.strict), agreed=ins.key))
            elif isinstance(ins, SubmitCheck):
                self._check(ins, summary)
            elif isinstance(ins, SubmitReduce):
                parts = {n: self.results[k] for n, k in ins.parts}
                self.results[ins.key] = self.reduce(ins.block, parts)
                self.by_worker[ins.key] = COORDINATOR
                todo = todo + self.core.handle(Finished(ins.key, COORDINATOR))
            elif isinstance(ins, SubmitReduceCheck):
                # the coordinator summed it itself: there is nobody to check
                self.results[ins.key] = self.results[ins.of]
                self.by_worker[ins.key] = COORDINATOR
                todo = todo + self.core.handle(Finished(ins.key, COORDINATOR))
            elif isinstance(ins, SubmitRecheck):  # (no checkpoint entries in a pool run)
                todo = todo + self.core.handle(Finished(ins.key, COORDINATOR))
            elif isinstance(ins, Release):
                for k in ins.keys:
                    self.results.pop(k, None)
                    self.parked.pop(k, None)
                    p = self.pending.get(k)
                    if p is not None:
                        p.released = True
                        if k in self.queue:
                            self.queue.remove(k)
            elif isinstance(ins, Deliver):
                self.delivered[ins.block] = self.results[ins.key]
            elif isinstance(ins, AskQueues):
                alive = self.alive(time.monotonic())
                held = tuple((m.name, tuple(sorted(m.holding))) for m in alive)
                todo = todo + self.core.handle(Queues(time.monotonic(), held))
            elif isinstance(ins, Fail):
                raise VerificationFailed(ins.message) if ins.kind in (
                    "verification", "input", "pool") else RuntimeFailure(ins.message)  # fmt: skip
            # Seal / Unseal: no sealed entries in a pool run
        for ck, ins in list(self.parked.items()):
            if ins.of in self.results and self.by_worker.get(ins.of) == ins.by:
                del self.parked[ck]
                self._check(ins, summary)

    def _enqueue(self, p: Pending) -> None:
        self.pending[p.key] = p
        self.queue.append(p.key)

    # -- placing ---------------------------------------------------------------------------

    def _may(self, p: Pending, m: Member) -> bool:
        """Whether ``m`` may take ``p``: within the core's strict ``Where``, not a volunteer
        that failed it, nor one holding another copy of the same agreed unit."""
        if p.where.strict and p.where.workers and m.name not in p.where.workers:
            return False
        if m.name in p.avoid:
            return False
        if p.agreed:
            for ck in self.agreed.get(p.agreed, ()):
                q = self.pending.get(ck)
                if ck != p.key and q is not None and q.volunteer == m.name:
                    return False
                if ck != p.key and self.by_worker.get(ck) == m.name:
                    return False
        return True

    async def _place(self, now: float, summary: Summary) -> None:
        alive = [m for m in self.alive(now) if m.fails < 3]
        if not alive or not self.queue:
            return
        names = tuple(m.name for m in alive)
        if names != self.homes_for:  # someone joined or left: the runs are cut again
            log.debug("the runs are cut again for %s (were for %s)", names, self.homes_for)
            left = [u for u in self.order if u not in self.placed]
            speeds = policy.speed_classes({n: self.rates.get(n) for n in names})
            self.home.update(
                policy.partition(
                    left,
                    speeds,
                    {m.name: m.sent for m in alive},
                    {u: self.tasks[u].sizes for u in left},
                )
            )
            self.homes_for = names
        for m in sorted(alive, key=lambda m: -self.rates.get(m.name, 0.0)):
            while len(m.holding) < m.slots and self.queue:
                mine = [k for k in self.queue if self._may(self.pending[k], m)]
                if not mine:
                    break
                # the blocks decide (policy); the core's loose preferences (a check's spread,
                # a fresh volunteer) are met by the runs, cut again whenever one joins
                key = self._pick(m, mine, now)
                if key is None:
                    break
                self.queue.remove(key)
                await self._send(self.pending[key], m, now, summary)
        # a key only strictly placeable on volunteers gone or excluded can never run
        for key in list(self.queue):
            p = self.pending[key]
            if p.where.strict and p.where.workers and not any(w in names for w in p.where.workers):
                if p.copy or p.agreed:
                    self.queue.remove(key)
                    self.later.append(Failed(key, error="its volunteer is gone"))

    def _pick(self, m: Member, keys: list[str], now: float) -> str | None:
        uids = {self.pending[k].uid: k for k in reversed(keys)}
        order = [self.pending[k].uid for k in keys]
        sizes = {u: self.tasks[u].sizes for u in order}
        uid = policy.pick(m.name, order, self.home, sizes, m.sent,
                          lambda u: self._worth(self.pending[uids[u]], m, order, now))  # fmt: skip
        return None if uid is None else uids[uid]

    def _duration(self, uid: str, m: Member) -> float:
        t = self.tasks[uid]
        new = sum(b for d, b in t.sizes.items() if d not in m.sent)
        return policy.duration(t.work, new, m.name, self.rates, self.bandwidth)

    def _worth(self, p: Pending, m: Member, queued: list[str], now: float) -> bool:
        """Whether ``m`` would finish ``p`` before the volunteer whose run it is reaches
        and finishes it (that volunteer's queue and its units before it counted)."""
        uid = p.uid
        home = self.members.get(self.home.get(uid, ""))
        if home is None or home.name in self.excluded or now - home.seen > self.opts.lost_after:
            return True
        if not self._may(p, home):  # its own volunteer may not take it
            return True
        mine = max(now, m.busy_until) + self._duration(uid, m)
        theirs = max(now, home.busy_until)
        for u in queued:
            if self.home.get(u) == home.name:
                theirs += self._duration(u, home)
            if u == uid:
                break
        # a clear gain only: estimates are rough, and a unit taken moves its blocks twice
        return theirs - mine > max(STEAL_GAIN * (theirs - now), 1.0)

    async def _send(self, p: Pending, m: Member, now: float, summary: Summary) -> None:
        """Give ``p`` to ``m``: decided and counted now; its objects put and the unit
        published by a task of its own, so replies go on being read meanwhile."""
        t = self.tasks[p.uid]
        new = sum(b for d, b in t.sizes.items() if d not in m.sent)
        self.attempt_no += 1
        p.attempt, p.volunteer, p.new_bytes = f"a{self.attempt_no}", m.name, new
        est = policy.duration(t.work, new, m.name, self.rates, self.bandwidth)
        dl = policy.deadline(t.work, new, m.name, self.rates, self.bandwidth)
        start = max(now, m.busy_until)
        p.sent = start
        m.busy_until = start + est
        m.sent.update(t.sizes)
        m.holding.add(p.key)
        self.placed.add(p.uid)
        self.by_attempt[p.attempt] = p.key
        summary.bytes_sent += new
        summary.bytes_sent_by_volunteer[m.name] = (
            summary.bytes_sent_by_volunteer.get(m.name, 0) + new
        )
        summary.attempts += 1
        msg = UnitMsg(self.run_id, p.attempt, p.uid, t.program, t.blocks, t.out, t.work, dl)
        self.dispatching.add(asyncio.ensure_future(self._dispatch(t, m.name, msg)))
        log.debug("%s %s -> %s (%s): %d new bytes", p.attempt, p.key[-12:], m.name, p.uid, new)

    async def _dispatch(self, t: Task, name: str, msg: UnitMsg) -> None:
        try:
            for digest, data in t.payloads.items():
                await self._put(digest, data)
            await self.link.consumer(name, msg.deadline)
            await self.link.send(name, msg.to_wire())
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the store or the server failed: the run fails with it
            self.failure = e
        finally:
            self.dispatching.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def _put(self, digest: str, data: memoryview) -> None:
        fut = self.puts.get(digest)
        if fut is None or (fut.done() and digest not in self.link.stored):
            fut = self.puts[digest] = asyncio.ensure_future(self.link.put_object(digest, data))
        await asyncio.shield(fut)

    def _unplace(self, key: str, summary: Summary) -> None:
        """Take ``key`` back from its volunteer (gone, excluded, or it could not do it)."""
        p = self.pending.get(key)
        if p is None:
            return
        m = self.members.get(p.volunteer)
        if m is not None:
            m.holding.discard(key)
        self.by_attempt.pop(p.attempt, None)
        p.volunteer, p.attempt, p.started = "", "", False
        if p.released or key in self.results:
            return
        summary.reassigned += 1
        self.queue.insert(0, key)

    def _lost(self, now: float, summary: Summary) -> None:
        """Volunteers gone quiet give their units back."""
        for m in list(self.members.values()):
            if now - m.seen > self.opts.lost_after and m.holding:
                log.debug("%s is gone: %d unit(s) placed again", m.name, len(m.holding))
                for key in list(m.holding):
                    self._unplace(key, summary)

    # -- what arrives ----------------------------------------------------------------------

    async def _event(self, ev: tuple, summary: Summary) -> list[Any]:
        """One message from the link; the core's events it makes."""
        kind, name = ev[0], ev[1]
        now = time.monotonic()
        if name in self.excluded:
            return []
        m = self.members.get(name)
        if m is not None:
            m.seen = max(m.seen, now)  # anything it sends says it is there
        if kind == "hello":
            try:
                hello = wire.read_hello(ev[2])
            except WireError as e:
                await self._refused(name, e, summary)
                return []
            m = await self._member(name, now)
            if m is not None and hello is not None:
                m.slots = min(hello.slots, 2)
            return []
        if kind == "bye":
            try:
                doc = wire.envelope(wire.unpack(ev[2], 1 << 16), wire.HELLO)
            except WireError as e:
                await self._refused(name, e, summary)
                return []
            if m is None or self.core is None:
                return []
            attempt = doc.get("attempt")
            if attempt is None:
                m.seen = -math.inf  # gone: its units are placed again at once
                for key in list(m.holding):
                    self._unplace(key, summary)
            elif attempt in self.by_attempt and self.by_attempt[attempt] in m.holding:
                self._unplace(self.by_attempt[attempt], summary)
            return []
        if kind == "result" and self.core is not None:
            return await self._result(name, ev[2], ev[3], now, summary)
        return []

    async def _refused(self, name: str, e: WireError, summary: Summary) -> None:
        summary.replies_refused.append({"volunteer": name, "code": e.code, "detail": e.detail})
        reason = f"reply refused ({e.code}: {e.detail})"
        if self.core is not None:  # the core stops trusting it too (and places nothing there)
            self.core.exclude(name, "", f"refused: {e.code}", "reply", [])
        await self.exclude(name, reason, summary)

    async def _result(self, name: str, tokens: tuple[str, ...], raw: bytes, now: float,
                      summary: Summary) -> list[Any]:  # fmt: skip
        if len(tokens) != 2:
            await self._refused(name, WireError("envelope", "a result's subject"), summary)
            return []
        run, attempt = tokens
        if run != self.run_id:
            return []  # a reply to an earlier run (its units were placed again): ignored
        m = self.members.get(name) or await self._member(name, now)
        if m is None:
            return []
        key = self.by_attempt.get(attempt)
        p = self.pending.get(key) if key is not None else None
        expect = self.tasks[p.uid].out if p is not None and p.volunteer == name else None
        try:
            out = m.receiver.feed(attempt, expect, raw)
        except WireError as e:
            await self._refused(name, e, summary)
            return []
        summary.bytes_received += len(raw)
        if out.kind == "more" or p is None or key is None:
            return []
        if out.kind == "started":  # its inputs are in place: the core times it from now
            p.started, p.started_at = True, now
            return [Started(now, p.uid, name, p.copy, out.iterations, out.seconds)]
        m.holding.discard(key)
        self.by_attempt.pop(attempt, None)
        p.started = p.started and out.kind == "done"
        if out.kind in ("failed", "refuse"):
            summary.failed.append({"volunteer": name, "unit": p.uid, "kind": out.kind,
                                   "reason": out.reason[:300]})  # fmt: skip
            m.fails += 1
            p.avoid.add(name)
            p.volunteer = p.attempt = ""
            if not any(self._may(p, x) for x in self.alive(now)):
                return [Failed(key, error=f"no volunteer can compute unit {p.uid}: {out.reason}")]
            summary.reassigned += 1
            self.queue.insert(0, key)
            return []
        # a whole, well-formed result: learn the volunteer's speed, tell the core
        elapsed = max(now - p.sent, 1e-3)
        m.busy_until = max([now, *(self.pending[k].sent for k in m.holding)])
        t = self.tasks[p.uid]
        if out.seconds > 0 and t.work:
            self.rates[name] = t.work / out.seconds
        fetch = max(elapsed - out.seconds, 1e-3)
        if p.new_bytes > 1 << 20:
            self.bandwidth[name] = p.new_bytes / fetch
        summary.compute_seconds[name] = summary.compute_seconds.get(name, 0.0) + out.seconds
        if p.released:
            return []
        assert out.array is not None
        self.results[key] = out.array
        self.by_worker[key] = name
        self.held[key] = out.held
        log.debug("%s <- %s (%s): %.2f s, %.2f s computing", attempt, name, p.uid, elapsed,
                  out.seconds)  # fmt: skip
        events: list[Any] = [] if p.started else [
            Started(now - out.seconds, p.uid, name, p.copy, p.new_bytes, fetch)]  # fmt: skip
        events.append(Computed(p.uid, name, out.seconds, out.iterations, p.copy))
        if p.agreed:
            return events + self._agree(p.agreed)
        return [*events, Finished(key, name)]

    def _agree(self, agreed: str) -> list[Any]:
        """``verify=k``: once every copy is in, the majority is the result; the others are
        outvoted (and excluded by the core)."""
        keys = self.agreed[agreed]
        if not all(k in self.results for k in keys):
            return []
        groups: list[list[str]] = []
        for k in keys:
            for g in groups:
                if np.allclose(self.results[k], self.results[g[0]], rtol=1e-9, atol=0.0,
                               equal_nan=True):  # fmt: skip
                    g.append(k)
                    break
            else:
                groups.append([k])
        best = max(groups, key=len)
        uid = self.pending[agreed if agreed in self.pending else keys[0]].uid
        if len(best) * 2 <= len(keys):
            return [Failed(agreed, error=f"no majority among the {len(keys)} copies of {uid}")]
        self.results[agreed] = self.results[best[0]]
        self.by_worker[agreed] = self.by_worker[best[0]]
        self.held[agreed] = self.held.get(best[0], 0)
        losers = tuple(self.by_worker[k] for g in groups if g is not best for k in g)
        out: list[Any] = []
        if losers:
            accepted = tuple(self.by_worker[k] for k in best)
            out.append(Outvoted(uid, losers, accepted))
            for w in losers:
                self.summary.units_rejected.append({"unit": uid, "volunteer": w,
                                                    "detail": "outvoted"})  # fmt: skip
        return [*out, Finished(agreed, self.by_worker[best[0]])]

    # -- checks, here -----------------------------------------------------------------------

    def _check(self, ins: SubmitCheck, summary: Summary) -> None:
        arr = self.results.get(ins.of)
        log.debug("check %s of %s (%s by %s): %s", ins.key[-16:], ins.of[-16:], ins.name,
                  ins.by, "here" if arr is not None else "no result")  # fmt: skip
        if arr is None:
            # handed out with its unit: it waits for the result (never accepted unchecked;
            # the core releases it when another volunteer's result is to be checked instead)
            self.parked[ins.key] = ins
            return
        t = self.tasks[ins.name]
        if t.check is None:  # a task made without a check (the engine's own tests)
            self.results[ins.key] = arr
            self.by_worker[ins.key] = ins.by
            self.later.append(Finished(ins.key, COORDINATOR))
            return
        summary.checked += 1
        fut = asyncio.get_running_loop().run_in_executor(self.checks, t.check, arr, ins.attempt)
        task = asyncio.ensure_future(self._verdict(ins, fut, summary))
        self.checking.add(task)

    async def _verdict(self, ins: SubmitCheck, fut: asyncio.Future[Any],
                       summary: Summary) -> None:  # fmt: skip
        t0 = time.perf_counter()
        try:
            verdict = await fut
            summary.check_seconds += time.perf_counter() - t0
            summary.false_accept_bound += _bound(verdict)
            if self.opts.verify != "adaptive":  # (under "adaptive" the core keeps the streaks)
                (self.trust.passed if verdict.ok else self.trust.failed)(ins.by)
            if verdict.ok:
                self.results[ins.key] = self.results[ins.of]
                self.by_worker[ins.key] = ins.by
                self.held[ins.key] = self.held.get(ins.of, 0)
                self.later.append(Finished(ins.key, COORDINATOR))
                await self._persist_trust(ins.by)
                return
            summary.units_rejected.append(
                {"unit": ins.name, "volunteer": ins.by, "detail": verdict.describe()}
            )
            self.later.append(Failed(ins.key, rejected=True))
            if self.opts.verify == "adaptive":
                self.trust.failed(ins.by)  # (the core resets it too: the same, persisted)
            await self._persist_trust(ins.by)
            await self.exclude(ins.by, f"a result failed its check ({verdict.describe()})",
                               summary)  # fmt: skip
        except Exception as e:  # a bug in a check: the run fails with it, not hangs
            self.failure = e
        finally:
            self.checking.discard(asyncio.current_task())  # type: ignore[arg-type]
            assert self.link.events is not None
            with contextlib.suppress(asyncio.QueueFull):
                self.link.events.put_nowait(("checked", COORDINATOR))


def _bound(verdict: Any) -> float:
    from distal.runtime.elastic.check import false_accept_bound

    if getattr(verdict, "exact", False) or not getattr(verdict, "reps", 0):
        return 0.0
    return false_accept_bound(verdict.dims, verdict.reps)


__all__ = ["LOST_AFTER", "Engine", "Options", "Summary", "Task", "VerificationFailed"]
