"""One run on the pool: hand units to volunteers, take their replies apart, verify, decide.

The run loop lives in the link's event loop (:mod:`.link`). It keeps, per volunteer, when
it was last heard from, the units it holds (at most its ``slots``: one computing, one
fetching its blocks) and what it was sent (the blocks it caches); it places units by
:mod:`.policy`, and for each event:

- a ``hello`` keeps a volunteer alive (silent for :data:`LOST_AFTER` seconds, or a
  ``bye``, and its units go back to be placed elsewhere);
- a result message goes to the volunteer's :class:`~.wire.Receiver`, which checks it
  before allocating anything. A refused message (:data:`~.wire.REFUSALS`) excludes its
  sender: its units go elsewhere, and nothing it sent is used;
- a whole result is verified before it is accepted (``verify``): ``"check"`` checks every
  result with the elastic runtime's randomized check (:func:`~distal.runtime.elastic.
  tasks.verdict`: Freivalds / ABFT checksums / recomputation), run *here*, by the
  coordinator, never by the volunteer that made it; ``"adaptive"`` checks with the
  probability the volunteer's persisted trust gives (:mod:`~distal.runtime.elastic.
  trust`); ``k >= 2`` needs a strict majority of ``k`` copies from different volunteers.
  A result that fails excludes its volunteer and the unit is computed again elsewhere;
- a volunteer's ``failed`` or ``refuse`` sends the unit elsewhere (that volunteer is not
  asked for that unit again).

Exclusions and trust are persisted in the pool's KV bucket (``excluded.<name>``,
``trust.<name>``), so a coordinator that restarts keeps them.
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
from distal.runtime.elastic.trust import Trust
from distal.runtime.pool import policy, wire
from distal.runtime.pool.link import Link
from distal.runtime.pool.wire import BlockRef, Expect, Receiver, UnitMsg, WireError

log = logging.getLogger("distal.pool")

LOST_AFTER = 10.0
"""Seconds without a ``hello`` after which a volunteer is taken for gone."""

MAX_FAILS = 3
"""Units a volunteer may fail (or refuse) in one run before it gets no more of that run."""


class VerificationFailed(RuntimeFailure):
    """No agreement on a unit's result (``verify=k``), or no volunteer left to compute it."""


@dataclass
class Task:
    """One unit of a run as the loop sees it.

    ``payloads``: the bytes of the objects it names (its program and its blocks, by
    digest), put in the object store before the unit is sent. ``check``: the verdict on a
    result (run in a thread), None when the unit has no check (then ``verify=k`` copies)."""

    uid: str
    program: BlockRef
    blocks: tuple[BlockRef, ...]
    out: Expect
    work: int
    payloads: Mapping[str, memoryview]
    check: Callable[[np.ndarray], Any] | None = None

    @property
    def sizes(self) -> dict[str, int]:
        return {b.digest: b.nbytes for b in (self.program, *self.blocks)}


@dataclass
class Attempt:
    uid: str
    volunteer: str
    sent: float
    deadline: float
    new_bytes: int
    expected: float = 0.0  # when it should be done (its start plus its expected duration)
    copied: bool = False  # an overdue attempt already has a copy elsewhere


@dataclass
class Member:
    """A volunteer as the coordinator knows it."""

    name: str
    seen: float
    slots: int = 2
    holding: set[str] = field(default_factory=set)  # attempt ids
    sent: set[str] = field(default_factory=set)  # digests it was sent (its cache)
    receiver: Receiver = field(default_factory=Receiver)
    units: int = 0
    fails: int = 0
    busy_until: float = 0.0


@dataclass
class Summary:
    """What a run on the pool did (``Result.extra["summary"]``)."""

    volunteers: list[str] = field(default_factory=list)
    excluded_volunteers: dict[str, str] = field(default_factory=dict)
    units_rejected: list[dict[str, Any]] = field(default_factory=list)
    replies_refused: list[dict[str, Any]] = field(default_factory=list)
    units: int = 0
    attempts: int = 0
    copies: int = 0  # attempts made because one was overdue
    reassigned: int = 0  # units handed out again (a volunteer gone, failed or excluded)
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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Options:
    verify: str | int = "check"
    wait: float = 120.0  # seconds a run waits with no volunteer able to take its units
    speculate: bool = True
    lost_after: float = LOST_AFTER


class Engine:
    """The pool's run loop; one per coordinator (it keeps the members between runs)."""

    def __init__(self, link: Link, opts: Options, trust: Trust | None = None) -> None:
        self.link, self.opts = link, opts
        self.trust = trust or Trust()
        self.members: dict[str, Member] = {}
        self.excluded: dict[str, str] = {}
        self.rates: dict[str, float] = {}  # iterations a second, by volunteer
        self.bandwidth: dict[str, float] = {}  # bytes a second, by volunteer
        self.checks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="distal-pool-check")
        self.puts: dict[str, asyncio.Future[None]] = {}
        self._loaded: set[str] = set()

    # -- members -------------------------------------------------------------------------

    async def _member(self, name: str, now: float) -> Member | None:
        if name not in self._loaded:
            self._loaded.add(name)
            raw = await self.link.kv_get(f"excluded.{name}")
            if raw is not None:
                self.excluded[name] = raw.decode(errors="replace")[:500]
            raw = await self.link.kv_get(f"trust.{name}")
            if raw is not None:
                try:
                    doc = json.loads(raw)
                    self.trust.streaks[name] = int(doc.get("streak", 0))
                except (ValueError, TypeError, AttributeError):
                    pass
        if name in self.excluded:
            return None
        m = self.members.get(name)
        if m is None:
            m = self.members[name] = Member(name, now)
        m.seen = now
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
        await self.link.kv_put(f"excluded.{name}", reason.encode()[:1000])
        await self.link.control(name, wire.control("stop", reason=reason[:500]))
        await self.link.shut_out(name)
        m = self.members.pop(name, None)
        if m is not None:
            for a in list(m.holding):
                self._release(a)
        for uid, copies in getattr(self, "copies", {}).items():  # nothing it sent is used
            self.copies[uid] = [(v, arr) for v, arr in copies if v != name]

    def _release(self, attempt: str) -> None:
        a = self.attempts.get(attempt)
        if a is None:
            return
        m = self.members.get(a.volunteer)
        if m is not None:
            m.holding.discard(attempt)
        self.live.get(a.uid, set()).discard(attempt)

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

    async def run(self, tasks: list[Task], order: list[str]) -> tuple[dict[str, np.ndarray],
                                                                       Summary]:  # fmt: skip
        """Compute every task; the accepted result of each, and the summary."""
        t0 = time.monotonic()
        self.run_id = secrets.token_hex(8)
        self.tasks = {t.uid: t for t in tasks}
        self.order = [u for u in order if u in self.tasks]
        self.attempts: dict[str, Attempt] = {}
        self.live: dict[str, set[str]] = {u: set() for u in self.tasks}
        self.avoid: dict[str, set[str]] = {u: set() for u in self.tasks}
        self.copies: dict[str, list[tuple[str, np.ndarray]]] = {u: [] for u in self.tasks}
        self.accepted: dict[str, np.ndarray] = {}
        self.checking: dict[str, asyncio.Task[Any]] = {}
        self.dispatching: set[asyncio.Task[Any]] = set()
        self.failure: BaseException | None = None
        self.extra: dict[str, int] = {}
        self.home: dict[str, str] = {}
        self.homes_for: tuple[str, ...] = ()
        summary = Summary(units=len(tasks))
        self.next_attempt = 0
        idle_since: float | None = None
        seen: set[str] = set()
        assert self.link.events is not None
        while len(self.accepted) < len(self.tasks):
            # what arrived while this loop was busy first: a volunteer is not taken for gone
            # because the coordinator was not listening
            while not self.link.events.empty():
                await self._event(self.link.events.get_nowait(), summary)
            now = time.monotonic()
            alive = self.alive(now)
            seen.update(m.name for m in alive)
            self._lost(now, summary)
            await self._assign(now, summary)
            busy = any(self.live.values()) or self.checking or self.dispatching
            if not busy:  # nothing out, nothing being checked, units left: who can take them?
                idle_since = idle_since or now
                if now - idle_since > self.opts.wait:
                    raise VerificationFailed(self._stuck(alive))
            else:
                idle_since = None
            if self.failure is not None:
                raise self.failure
            try:
                ev = await asyncio.wait_for(self.link.events.get(), 0.25)
            except asyncio.TimeoutError:
                continue
            await self._event(ev, summary)
        for task in list(self.dispatching):  # copies no longer needed
            task.cancel()
        if self.failure is not None:
            raise self.failure
        summary.volunteers = sorted(seen | set(summary.units_by_volunteer))
        summary.seconds = time.monotonic() - t0
        summary.checked, summary.unchecked = self.trust.checked, self.trust.unchecked
        return self.accepted, summary

    def _stuck(self, alive: list[Member]) -> str:
        left = [u for u in self.order if u not in self.accepted]
        why = f"{len(self.excluded)} excluded: {sorted(self.excluded)[:8]}"
        if not alive:
            return f"no volunteer has taken this run's units for {self.opts.wait:.0f} s ({why})"
        want = self.opts.verify if isinstance(self.opts.verify, int) else 1
        u = left[0]
        log.debug("stuck on %s: copies %s, live %s, avoid %s, extra %s", u,
                  [v for v, _ in self.copies[u]], self.live[u], self.avoid[u],
                  self.extra.get(u))  # fmt: skip
        for m in alive:
            log.debug("  %s holds %s (slots %d, fails %d), home of %s: %s", m.name, m.holding,
                      m.slots, m.fails, u, self.home.get(u))  # fmt: skip
        return (
            f"no volunteer left that may compute unit {left[0]} ({len(left)} unit(s) left; "
            f"verify={self.opts.verify!r} needs {want} different volunteer(s) a unit, "
            f"{len(alive)} alive; {why})"
        )

    # -- placing -------------------------------------------------------------------------------

    def _needs(self, uid: str) -> int:
        """Attempts unit ``uid`` still needs beyond those alive."""
        if uid in self.accepted or uid in self.checking:
            return 0
        want = self.opts.verify if isinstance(self.opts.verify, int) else 1
        want += self.extra.get(uid, 0)
        have = len(self.copies[uid]) + sum(1 for x in self.live[uid] if not self.attempts[x].copied)
        return max(0, want - have)

    async def _assign(self, now: float, summary: Summary) -> None:
        alive = [m for m in self.alive(now) if m.fails < MAX_FAILS]
        if not alive:
            return
        names = tuple(m.name for m in alive)
        pending = [u for u in self.order if self._needs(u) > 0]
        sizes = {u: self.tasks[u].sizes for u in pending}
        if names != self.homes_for:
            speeds = policy.speed_classes({n: self.rates.get(n) for n in names})
            held = {m.name: m.sent for m in alive}
            self.home = policy.partition(pending, speeds, held, sizes)
            self.homes_for = names
        for m in sorted(alive, key=lambda m: -self.rates.get(m.name, 0.0)):
            while len(m.holding) < m.slots and pending:
                ok = [u for u in pending if self._may(u, m)]
                uid = policy.pick(m.name, ok, self.home, sizes, m.sent,
                                  lambda u, m=m: self._worth(u, m, pending, now))  # fmt: skip
                if uid is None:
                    break
                await self._send(uid, m, now, summary)
                if self._needs(uid) == 0:
                    pending.remove(uid)

    def _may(self, uid: str, m: Member) -> bool:
        """Whether ``m`` may be given unit ``uid``: not a volunteer that failed it, holds it
        or made a copy of it (copies of one unit go to different volunteers)."""
        return (
            m.name not in self.avoid[uid]
            and all(self.attempts[a].volunteer != m.name for a in self.live[uid])
            and all(v != m.name for v, _ in self.copies[uid])
        )

    def _duration(self, uid: str, m: Member) -> float:
        t = self.tasks[uid]
        new = sum(b for d, b in t.sizes.items() if d not in m.sent)
        return policy.duration(t.work, new, m.name, self.rates, self.bandwidth)

    def _worth(self, uid: str, m: Member, pending: list[str], now: float) -> bool:
        """Whether ``m`` would finish ``uid`` before the volunteer whose run it is reaches
        and finishes it (that volunteer's queue and its units before ``uid`` counted)."""
        home = self.members.get(self.home.get(uid, ""))
        if home is None or home.name in self.excluded or now - home.seen > self.opts.lost_after:
            return True
        if not self._may(uid, home):  # its own volunteer may not take it (already has a copy)
            return True
        mine = max(now, m.busy_until) + self._duration(uid, m)
        theirs = max(now, home.busy_until)
        for u in pending:
            if self.home.get(u) == home.name:
                theirs += self._duration(u, home)
            if u == uid:
                break
        return mine < theirs

    async def _send(self, uid: str, m: Member, now: float, summary: Summary) -> None:
        """Give unit ``uid`` to ``m``: decided and counted now; its objects put and the unit
        published by a task of its own, so replies go on being read meanwhile."""
        t = self.tasks[uid]
        new = sum(b for d, b in t.sizes.items() if d not in m.sent)
        self.next_attempt += 1
        attempt = f"a{self.next_attempt}"
        dl = policy.deadline(t.work, new, m.name, self.rates, self.bandwidth)
        est = policy.duration(t.work, new, m.name, self.rates, self.bandwidth)
        m.sent.update(t.sizes)
        summary.bytes_sent += new
        summary.bytes_sent_by_volunteer[m.name] = (
            summary.bytes_sent_by_volunteer.get(m.name, 0) + new
        )
        summary.attempts += 1
        # a unit queued behind another starts when that one should be done
        start = max(now, m.busy_until)
        a = self.attempts[attempt] = Attempt(uid, m.name, start, start + dl, new, start + est)
        m.busy_until = start + est
        m.holding.add(attempt)
        self.live[uid].add(attempt)
        msg = UnitMsg(self.run_id, attempt, uid, t.program, t.blocks, t.out, t.work, dl)
        self.dispatching.add(asyncio.ensure_future(self._dispatch(t, m.name, a, msg)))
        log.debug("%s -> %s (%s): %d new bytes, deadline %.1f s", attempt, m.name, uid, new, dl)

    async def _dispatch(self, t: Task, name: str, a: Attempt, msg: UnitMsg) -> None:
        try:
            for digest, data in t.payloads.items():
                await self._put(digest, data)
            await self.link.consumer(name, msg.deadline)
            await self.link.send(name, msg.to_wire())
            late = time.monotonic() - a.sent  # the puts took this long: its clock starts now
            if late > 0:
                a.sent, a.deadline, a.expected = a.sent + late, a.deadline + late, a.expected + late
                m = self.members.get(name)
                if m is not None:
                    m.busy_until = max(m.busy_until, a.expected)
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

    def _lost(self, now: float, summary: Summary) -> None:
        """Volunteers gone quiet give their units back; overdue units get a copy."""
        for m in list(self.members.values()):
            if now - m.seen > self.opts.lost_after and m.holding:
                for a in list(m.holding):
                    self._release(a)
                    summary.reassigned += 1
        if not self.opts.speculate:
            return
        for x in [x for xs in self.live.values() for x in xs]:
            a = self.attempts[x]
            if not a.copied and now >= a.deadline:
                a.copied = True  # it runs on; _needs now asks for one more attempt elsewhere
                summary.copies += 1
                log.debug("%s (%s on %s) overdue: a copy elsewhere", x, a.uid, a.volunteer)

    # -- events --------------------------------------------------------------------------------

    async def _event(self, ev: tuple, summary: Summary) -> None:
        kind, name = ev[0], ev[1]
        now = time.monotonic()
        if name in self.excluded or kind == "checked":
            return
        m = self.members.get(name)
        if m is not None:
            m.seen = max(m.seen, now)  # anything it sends says it is there
        if kind == "hello":
            try:
                hello = wire.read_hello(ev[2])
            except WireError as e:
                await self._refused(name, e, summary)
                return
            m = await self._member(name, now)
            if m is not None and hello is not None:
                m.slots = min(hello.slots, 2)
            return
        if kind == "bye":
            try:
                wire.envelope(wire.unpack(ev[2], 1 << 16), wire.HELLO)
                doc = wire.unpack(ev[2], 1 << 16)
            except WireError as e:
                await self._refused(name, e, summary)
                return
            m = self.members.get(name)
            if m is None:
                return
            attempt = doc.get("attempt")
            if attempt is None:
                m.seen = -math.inf  # gone: its units are placed again at once
            elif attempt in m.holding:
                self._release(attempt)
                summary.reassigned += 1
            return
        if kind == "result":
            await self._result(name, ev[2], ev[3], now, summary)

    async def _refused(self, name: str, e: WireError, summary: Summary) -> None:
        summary.replies_refused.append({"volunteer": name, "code": e.code, "detail": e.detail})
        await self.exclude(name, f"reply refused ({e.code}: {e.detail})", summary)

    async def _result(self, name: str, tokens: tuple[str, ...], raw: bytes, now: float,
                      summary: Summary) -> None:  # fmt: skip
        if len(tokens) != 2:
            await self._refused(name, WireError("envelope", "a result's subject"), summary)
            return
        run, attempt = tokens
        if run != self.run_id:
            return  # a reply to an earlier run (its units were re-placed): ignored
        m = self.members.get(name) or await self._member(name, now)
        if m is None:
            return
        a = self.attempts.get(attempt)
        expect = self.tasks[a.uid].out if a is not None and a.volunteer == name else None
        try:
            out = m.receiver.feed(attempt, expect, raw)
        except WireError as e:
            await self._refused(name, e, summary)
            return
        summary.bytes_received += len(raw)
        if out.kind == "more" or a is None:
            return
        m.holding.discard(attempt)
        self.live[a.uid].discard(attempt)
        if out.kind in ("failed", "refuse"):
            summary.failed.append({"volunteer": name, "unit": a.uid, "kind": out.kind,
                                   "reason": out.reason[:300]})  # fmt: skip
            self.avoid[a.uid].add(name)
            m.fails += 1
            if not self._able(a.uid):
                raise VerificationFailed(
                    f"no volunteer can compute unit {a.uid}: "
                    + "; ".join(f["reason"] for f in summary.failed if f["unit"] == a.uid)[:800]
                )
            return
        # a whole result, well formed: learn the volunteer's speed, then verify
        elapsed = max(now - a.sent, 1e-3)
        m.busy_until = max([now, *(self.attempts[x].expected for x in m.holding)])
        log.debug("%s <- %s (%s): %.2f s after it was due to start, %.2f s computing", attempt,
                  name, a.uid, elapsed, out.seconds)  # fmt: skip
        if out.seconds > 0 and self.tasks[a.uid].work:
            self.rates[name] = self.tasks[a.uid].work / out.seconds
        if a.new_bytes > 1 << 20:
            self.bandwidth[name] = a.new_bytes / max(elapsed - out.seconds, 1e-3)
        if a.uid in self.accepted:
            return
        assert out.array is not None
        await self._judge(a, name, out.array, summary, out.seconds)

    def _able(self, uid: str) -> bool:
        return any(m.name not in self.avoid[uid] for m in self.alive(time.monotonic()))

    async def _judge(self, a: Attempt, name: str, arr: np.ndarray, summary: Summary,
                     seconds: float = 0.0) -> None:  # fmt: skip
        t = self.tasks[a.uid]
        if isinstance(self.opts.verify, int) and self.opts.verify >= 2:
            self.copies[a.uid].append((name, arr))
            await self._agree(a.uid, summary)
            return
        check = self.opts.verify == "check" or (
            self.opts.verify == "adaptive" and self.trust.should_check(name)
        )
        if self.opts.verify == "check":
            self.trust.checked += 1
        if not check or t.check is None:
            self._accept(a.uid, name, arr, summary, seconds)
            return
        # checked beside the loop (in a thread): replies go on arriving meanwhile
        fut = asyncio.get_running_loop().run_in_executor(self.checks, t.check, arr)
        task = asyncio.ensure_future(self._verdict(a, name, arr, summary, seconds, fut))
        self.checking[a.uid] = task

    async def _verdict(self, a: Attempt, name: str, arr: np.ndarray, summary: Summary,
                       seconds: float, fut: asyncio.Future[Any]) -> None:  # fmt: skip
        t0 = time.perf_counter()
        try:
            verdict = await fut
            summary.check_seconds += time.perf_counter() - t0
            summary.false_accept_bound += _bound(verdict)
            if verdict.ok:
                self.trust.passed(name)
                await self._persist_trust(name)
                self._accept(a.uid, name, arr, summary, seconds)
                return
            self.trust.failed(name)
            await self._persist_trust(name)
            summary.units_rejected.append(
                {"unit": a.uid, "volunteer": name, "detail": verdict.describe()}
            )
            await self.exclude(name, f"a result failed its check ({verdict.describe()})", summary)
        except Exception as e:  # a bug in a check: the run fails with it, not hangs
            self.failure = e
        finally:
            self.checking.pop(a.uid, None)
            assert self.link.events is not None
            with contextlib.suppress(asyncio.QueueFull):
                self.link.events.put_nowait(("checked", name))

    def _accept(self, uid: str, name: str, arr: np.ndarray, summary: Summary,
                seconds: float = 0.0) -> None:  # fmt: skip
        if uid in self.accepted:
            return
        self.accepted[uid] = arr
        summary.units_by_volunteer[name] = summary.units_by_volunteer.get(name, 0) + 1
        summary.compute_seconds[name] = summary.compute_seconds.get(name, 0.0) + seconds
        for x in list(self.live[uid]):  # copies still out are not needed any more
            self._release(x)

    async def _agree(self, uid: str, summary: Summary) -> None:
        k = int(self.opts.verify)
        got = self.copies[uid]
        groups: list[list[int]] = []
        for n, (_, arr) in enumerate(got):
            for g in groups:
                first = got[g[0]][1]
                if np.allclose(arr, first, rtol=1e-9, atol=0.0, equal_nan=True):
                    g.append(n)
                    break
            else:
                groups.append([n])
        best = max(groups, key=len)
        if len(best) * 2 > k:
            self._accept(uid, got[best[0]][0], got[best[0]][1], summary)
            losers = {got[n][0] for g in groups if g is not best for n in g}
            for v in sorted(losers):
                summary.units_rejected.append({"unit": uid, "volunteer": v, "detail": "outvoted"})
                await self.exclude(v, f"outvoted on unit {uid}", summary)
        elif len(got) >= k + self.extra.get(uid, 0):
            # no majority yet: one more copy, from a volunteer not yet asked
            self.extra[uid] = self.extra.get(uid, 0) + 1


def _bound(verdict: Any) -> float:
    from distal.runtime.elastic.check import false_accept_bound

    if getattr(verdict, "exact", False) or not getattr(verdict, "reps", 0):
        return 0.0
    return false_accept_bound(verdict.dims, verdict.reps)


__all__ = ["LOST_AFTER", "Engine", "Options", "Summary", "Task", "VerificationFailed"]
