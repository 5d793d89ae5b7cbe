"""The elastic runtime's decisions as a state machine: events in, instructions out.

:class:`Core` decides everything an elastic run decides -- which unit to hand out next
and where, when to sum a block, when a unit is a straggler or overdue and where its copy
goes, which results are checked and by whom, whom a failed check or an outvoted copy
excludes, which checkpoint entries are sealed -- and does nothing else. It never calls
Dask, a network or the clock: ``core.handle(*events)`` takes what happened (frozen
dataclasses of :mod:`.events`, time inside them) and returns what to do next
(instructions, frozen too), as ``distributed``'s ``WorkerState.handle_stimulus`` does for
a Dask worker. So the policy is tested without a pool (``tests/dask/test_core.py``), and
any transport can drive it:

* the Dask driver (:mod:`.driver`) turns finished futures and the workers' event log into
  events and instructions into ``client.submit`` calls, keeping a future per key;
* a volunteer pool's loop does the same over its own messages: it keeps a handle per key
  (a request id), sends ``SubmitUnit`` and friends to volunteers as it sees fit within
  ``Where``, reports ``Started`` / ``Computed`` / ``Finished`` / ``Failed`` as volunteers
  answer, ``Pool`` as they come and go, and a ``Tick`` when nothing else happened. It
  never decides by itself which unit runs where, which copy wins, or whom to trust.

A loop, in full::

    core = Core(spec, policy, trust)
    todo = core.handle(Pool(now(), threads, empty))
    while not core.done:
        carry_out(todo)                       # Submit*, Release, Deliver, Seal, Fail...
        todo = core.handle(*what_happened())  # Finished, Failed, Started, ..., Tick(now())

``AskQueues`` asks for a ``Queues`` event (what each worker holds) before a copy is placed;
``Fail`` ends the run. ``core.completed`` counts finished tasks for a progress bar; the
summary reads ``n_dups``, ``won``, ``n_overdue``, ``n_unchecked``, ``excluded``,
``rejections``, ``rechecked`` and ``unauthenticated`` when the run is done.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distal.runtime.elastic.events import (
    ANYWHERE,
    Computed,
    Deliver,
    Event,
    Fail,
    Failed,
    Finished,
    Instruction,
    Outvoted,
    Pool,
    Queues,
    Received,
    Refused,
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
    Wrote,
)
from distal.runtime.elastic.seals import Seals
from distal.runtime.elastic.spec import Policy, RunSpec, Work
from distal.runtime.elastic.stragglers import PROBE_EVERY, Stragglers

POOL_GONE = 120.0
"""Seconds without a single worker after which the run fails: the pool is gone."""


@dataclass
class _Copies:
    """A handed-out unit: its task, any speculative copies, until one finishes."""

    work: Work
    key: str
    submitted: float
    dups: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)  # the worker of each copy
    copied: float = 0.0


class Core(Stragglers, Seals):
    """The elastic run's state machine (see the module docstring).

    ``trust``: ``verify="adaptive"``'s :class:`~.trust.Trust` (a session's, kept from run
    to run), whose draws decide which results are checked.
    """

    def __init__(self, spec: RunSpec, policy: Policy, trust: Any = None) -> None:
        self.spec, self.policy, self.trust = spec, policy, trust
        self.nonce = spec.nonce
        self.units = {w.name: w for w in spec.work}
        self.queue = list(reversed(spec.work))  # pop() from the end
        self.now = -math.inf
        self.started_at: float | None = None
        self.idle_since: float | None = None
        self.failed = False
        self.seen_pool = False
        # the pool
        self.threads: dict[str, int] = {}
        self.empty: set[str] = set()
        self.given: set[str] = set()  # workers this run handed a unit (an empty one gets one)
        self.excluded: set[str] = set(policy.excluded)
        # units and blocks
        self.count = 0
        self.copies: dict[str, _Copies] = {}
        self.unit_of: dict[str, str] = {}  # task key -> unit name
        self.inflight: set[str] = set()  # originals counted against the window
        self.dropped: set[str] = set()
        self.accepted: dict[str, str] = {}  # unit -> key of its accepted result
        self.contrib: dict[str, list[str]] = defaultdict(list)  # block -> its units
        for w in spec.work:
            if not w.final:
                for b in w.blocks:
                    self.contrib[b].append(w.name)
        # every block not made whole by one unit is summed, from nothing where no unit
        # adds to it (a processor whose rows of a sparse operand are empty: zeros)
        finals = {w.name for w in spec.work if w.final}
        self.waiting = {b: set(self.contrib[b]) for b in spec.blocks if b not in finals}
        self.ready = [b for b in spec.blocks if b in self.waiting and not self.waiting[b]]
        self.users: dict[str, int] = defaultdict(int)
        for ns in self.contrib.values():
            for n in ns:
                self.users[n] += 1
        self.to_deliver = set(spec.blocks)
        self.delivered: set[str] = set()
        self.block_of: dict[str, str] = {}  # unreduced keys whose result is a block
        self.outstanding: set[str] = set()  # units and reductions handed out, not finished
        # verification
        self.checks: dict[str, tuple[str, int, str]] = {}  # key -> (unit, attempt, by)
        self.early: dict[str, str] = {}  # unit key -> the check handed out with it
        self.draws: dict[str, float | None] = {}  # "adaptive": the draw for a result, by key
        self.n_checks = 0
        self.reducing: dict[str, str] = {}  # key -> block (checked reductions)
        self.red_checks: dict[str, tuple[str, int, str]] = {}  # key -> (block, attempt, by)
        self.red_parts: dict[str, tuple[tuple[str, str], ...]] = {}
        self.summed: dict[str, tuple[tuple[str, str], ...]] = {}  # passed blocks' summands
        self.attempts: dict[str, int] = defaultdict(int)
        self.n_reduce = 0
        self.aux: set[str] = set()  # rechecks not yet finished
        self.rejections: list[dict[str, Any]] = []
        self.rechecked = 0
        self.n_unchecked = 0
        self._init_stragglers()  # speculation: what the workers' events told
        self._init_seals()  # checkpoint_key=
        self.completed = 0
        self._on: dict[type, Callable[[Any, list[Instruction]], None]] = {
            Pool: self._pool,
            Tick: lambda e, out: None,
            Started: self._started,
            Computed: self._computed,
            Finished: self._finished,
            Failed: self._failed,
            Queues: self._queues,
            Outvoted: self._outvoted,
            Wrote: self._wrote,
            Refused: self._refused,
            Received: self._received,
        }

    # -- the one entry point ----------------------------------------------------------------

    def handle(self, *events: Event) -> list[Instruction]:
        """Take ``events`` (in the order they happened); what to do now."""
        out: list[Instruction] = []
        for ev in events:
            t = getattr(ev, "now", None)
            if t is not None:
                self.now = max(self.now, t)
                if self.started_at is None:
                    self.started_at = t
            self._on[type(ev)](ev, out)
            if self.failed:
                return out
        if self.seen_pool:
            self._feed(out)
            if self._speculate(out):
                self._feed(out)  # past the units found overdue
            self._time(out)
        if self.policy.sealed:
            self._seal(out)
        return out

    @property
    def done(self) -> bool:
        """Every block is delivered and every re-verification finished (``eager``: every
        task finished), or the run failed."""
        if self.failed:
            return True
        if self.policy.eager and self.outstanding:
            return False
        return not self.to_deliver - self.delivered and not self.aux

    # -- the pool and time --------------------------------------------------------------

    def _pool(self, ev: Pool, out: list[Instruction]) -> None:
        first, self.seen_pool = not self.seen_pool, True
        self.threads = dict(ev.threads)
        self.empty = set(ev.empty)
        if first and self.policy.verify != 1 and len(self.allowed()) < 2:
            self._fail(
                out,
                "input",
                f"verify={self.policy.verify!r} needs at least 2 workers; the pool has "
                f"{len(self.allowed())}",
            )

    def _time(self, out: list[Instruction]) -> None:
        now, t = self.now, self.policy.timeout
        if t is not None and self.started_at is not None and now - self.started_at > t:
            self._fail(out, "timeout", f"dask run exceeded timeout={t}s")
            return
        if self.threads:
            self.idle_since = None
        else:
            self.idle_since = now if self.idle_since is None else self.idle_since
            if now - self.idle_since > POOL_GONE:
                self._fail(out, "pool", f"no Dask workers for {POOL_GONE:.0f}s; the pool is gone")

    def _fail(self, out: list[Instruction], kind: str, message: str, key: str = "") -> None:
        self.failed = True
        out.append(Fail(kind, message, key))

    def window(self) -> int:
        """Units handed out at once: the option, else twice the pool's threads (at least 2)."""
        if self.policy.eager:
            return len(self.spec.work) + 1
        if self.policy.window is not None:
            return self.policy.window
        return max(2 * sum(self.threads.values()), 2)

    def allowed(self) -> list[str]:
        """The pool's workers still trusted, sorted."""
        return sorted(set(self.threads) - self.excluded)

    def restrict(self, out: list[Instruction], avoid: frozenset[str] = frozenset()) -> Where:
        """Keep a task off excluded workers (and ``avoid``); a failure when none is left."""
        bad = self.excluded | avoid
        if not bad:
            return ANYWHERE
        pool = tuple(w for w in self.allowed() if w not in bad)
        if not pool:
            self._fail(
                out,
                "verification",
                f"no trusted worker left to run on: excluded {sorted(self.excluded)}"
                + (f", and {sorted(avoid)} may not take this task" if avoid else ""),
            )
        return Where(pool, True)

    def _place(self, out: list[Instruction]) -> Where:
        """Where a unit goes: off excluded workers; else onto a worker holding nothing that
        this run has not given a unit yet (one that joined: a session's work follows its
        held blocks, so nothing else would ever reach it); else preferring the workers that
        hold no overdue unit."""
        if self.excluded:
            return self.restrict(out)
        fresh = sorted(self.empty & set(self.threads) - self.given - self.stalled_workers)
        if fresh:
            self.given.add(fresh[0])
            return Where((fresh[0],), False)
        if self.stalled_workers:
            pool = tuple(w for w in self.allowed() if w not in self.stalled_workers)
            return Where(pool, False) if pool else ANYWHERE
        return ANYWHERE

    def _spread(self, n: int, out: list[Instruction]) -> Where:
        """Round-robin over the trusted workers (loose until one is excluded)."""
        if self.excluded:
            return self.restrict(out)
        pool = self.allowed()
        return Where((pool[n % len(pool)],), False) if pool else ANYWHERE

    # -- handing out units and reductions -----------------------------------------------

    def _feed(self, out: list[Instruction]) -> None:
        window = self.window()
        while self.queue and len(self.inflight - self.stalled) < window and not self.failed:
            self._submit(self.queue.pop(), out)
        for b in self.ready:
            if not self.failed:
                self._reduce(b, out)
        self.ready = []

    def _submit(self, w: Work, out: list[Instruction]) -> None:
        p, n = self.policy, self.count
        self.count += 1
        key = f"distal-unit-{self.nonce}-{n}"
        saved = w.name in self.spec.present
        if p.check:
            # spread, so every worker's results meet a check; saved by the check
            where = self._spread(n, out)
            out.append(SubmitUnit(key, w.name, where, load=saved))
            if self.trust is None and len(where.workers) == 1 and not where.strict:
                # its check goes out with it, away from the worker it is meant for: no
                # round trip between the unit's end and its check's start (see _finished)
                self.early[key] = self._check(w.name, key, where.workers[0], out)
        elif p.copies == 1 or saved:
            ck = p.checkpoint
            out.append(SubmitUnit(key, w.name, self._place(out), ck, ck, fresh=not saved))
        else:
            pool = self._quorum(out)
            if not pool:
                return
            copies = tuple(
                (f"distal-copy-{self.nonce}-{n}-{r}", pool[(n + r) % len(pool)])
                for r in range(p.copies)
            )
            out.append(SubmitAgreed(key, w.name, copies, bool(self.excluded), self.restrict(out)))
        self.copies[w.name] = _Copies(w, key, self.now)
        self.unit_of[key] = w.name
        self.inflight.add(key)
        self.outstanding.add(key)
        if p.eager:  # its only copy: summed and delivered at once
            self._accept(w.name, key)
            if w.final:
                self._deliver(w.name, key, out, w.name)
        elif w.final and not p.check:
            self.block_of[key] = w.name

    def _reduce(self, b: str, out: list[Instruction], avoid: frozenset[str] = frozenset()) -> None:
        p = self.policy
        attempt = self.attempts[b]
        key = f"distal-block-{self.nonce}-{b}" + (f"-redo-{attempt}" if attempt else "")
        parts = self.red_parts.get(b) or tuple((n, self.accepted[n]) for n in self.contrib[b])
        if p.copies == 1:
            save = p.checkpoint and not p.check
            out.append(SubmitReduce(key, b, parts, self.restrict(out, avoid), save))
        else:
            pool = self._quorum(out)
            if not pool:
                return
            self.n_reduce += 1
            copies = tuple(
                (f"{key}-v{r}", pool[(self.n_reduce + r) % len(pool)]) for r in range(p.copies)
            )
            out.append(
                SubmitReduce(key, b, parts, self.restrict(out), False, copies, bool(self.excluded))
            )
        self.outstanding.add(key)
        if p.check:
            self.reducing[key] = b
            self.red_parts[b] = parts
        elif p.eager:  # (its units are waited for, not released: see done)
            self._deliver(b, key, out)
        else:
            self.block_of[key] = b
            done = []
            for n in self.contrib[b]:
                self.users[n] -= 1
                if self.users[n] == 0:
                    done.append(self.accepted[n])
            if done:
                out.append(Release(tuple(done)))

    def _quorum(self, out: list[Instruction]) -> list[str]:
        """``verify=k``: the trusted workers the copies go round; none (and a failure)
        when there are fewer than ``k`` (fewer than 2 once one is excluded)."""
        pool, k = self.allowed(), self.policy.copies
        if len(pool) < min(k, 2) or (not self.excluded and len(pool) < k):
            msg = f"verify={k} needs at least {k} workers; the pool has {len(pool)}"
            self._fail(out, "input", msg)
            return []
        return pool

    def _accept(self, name: str, key: str) -> None:
        self.accepted[name] = key
        for b in self.units[name].blocks:
            if b in self.waiting and name in self.waiting[b]:
                self.waiting[b].discard(name)
                if not self.waiting[b]:
                    self.ready.append(b)

    def _deliver(self, b: str, key: str, out: list[Instruction], unit: str = "") -> None:
        self.delivered.add(b)
        out.append(Deliver(b, key, unit))

    # -- results --------------------------------------------------------------------------

    def _finished(self, ev: Finished, out: list[Instruction]) -> None:
        key, worker = ev.key, ev.worker
        self.outstanding.discard(key)
        if key in self.dropped:
            return
        self.inflight.discard(key)
        if key in self.aux:
            self.aux.discard(key)
            return
        if key in self.checks:
            name, _, who = self.checks.pop(key)
            self._trusted(who)
            self._accept(name, key)
            self.completed += 1
            if self.units[name].final:
                self._deliver(name, key, out, name)
            return
        if key in self.reducing:
            b = self.reducing.pop(key)
            who = self._checked_by(b, worker, key)
            if who is None:  # accepted without a check ("adaptive")
                self.completed += 1
                self._deliver(b, key, out)
                return
            a = self.attempts[b]
            ck = f"distal-check-{self.nonce}-{b}-{a}"
            self._note_redone(b, who)
            where = self.restrict(out, frozenset({who, *ev.holders}) - {""})
            parts = self.red_parts[b]
            out.append(SubmitReduceCheck(ck, b, parts, key, who, a, where, self.policy.checkpoint))
            self.red_checks[ck] = (b, a, who)
            return
        if key in self.red_checks:
            b, _, who = self.red_checks.pop(key)
            self._trusted(who)
            self.summed[b] = self.red_parts[b]
            self.completed += 1
            self._deliver(b, key, out)
            return
        if key in self.block_of and key not in self.unit_of:  # a reduction
            self.completed += 1
            self._deliver(self.block_of.pop(key), key, out)
            return
        name = self.unit_of.get(key)
        c = self.copies.pop(name, None) if name is not None else None
        if c is None:
            self.completed += 1
            return
        losers = tuple(k for k in (c.key, *c.dups) if k != key)
        if losers:
            self.dropped.update(losers)
            out.append(Release(losers))
        if key != c.key:
            self.won.add(name)
        self.inflight.discard(c.key)
        self.stalled.discard(c.key)
        final = c.work.final
        early = self.early.pop(c.key, None)
        if early is not None:
            if key == c.key and worker == self.checks[early][2]:
                return  # its check, handed out with it, checks what it computed
            # it ran elsewhere, or a copy won: that check may run where it was computed
            del self.checks[early]
            self.inflight.discard(early)
            self.dropped.add(early)
            out.append(Release((early,)))
        if self.policy.check:
            who = self._checked_by(name, worker, key)
            if who is not None:
                self._check(name, key, who, out, ev.holders)
                return
            if final:
                self.completed += 1
                self._accept(name, key)
                self._deliver(name, key, out, name)
                return
        self._accept(name, key)
        self.completed += 1
        if final and not self.policy.check and not self.policy.eager:
            self._deliver(name, key, out, name)

    def _check(
        self, name: str, key: str, who: str, out: list[Instruction], near: tuple[str, ...] = ()
    ) -> str:
        """Hand out the check of ``key``'s result of unit ``name``, computed on ``who``
        (or meant to be), away from it and from the workers ``near`` holding the result;
        its key."""
        a = self.attempts[name]
        self._note_redone(name, who)
        self.n_checks += 1
        ck = f"distal-check-{self.nonce}-{name}-{a}-{self.n_checks}"
        save = self.policy.checkpoint and (name not in self.spec.present or self.policy.sealed)
        where = self.restrict(out, frozenset({who, *near}) - {""})
        out.append(SubmitCheck(ck, name, key, who, a, where, save))
        self.checks[ck] = (name, a, who)
        self.inflight.add(ck)
        return ck

    def expected(self, key: str) -> str:
        """The worker unit task ``key`` was handed out for with its check (``""``: none)."""
        ck = self.early.get(key)
        return self.checks[ck][2] if ck is not None and ck in self.checks else ""

    def wants_worker(self, key: str) -> bool:
        """Whether it matters which worker holds task ``key``'s result (a check is to be
        placed away from it): the loop asks the scheduler only then. Under ``"adaptive"``
        the trust's draw for the result is made here, once."""
        if not self.policy.check or key in self.dropped or key in self.checks:
            return False
        if key in self.early:
            return True
        name = self.reducing.get(key)
        if name is None:
            name = self.unit_of.get(key)
            if name is None or name not in self.copies:
                return False
        if self.trust is None or name in self.spec.present:
            return True
        if key not in self.draws:
            self.draws[key] = self.trust.draw(self.threads)
        return self.draws[key] is not None

    def _checked_by(self, name: str, worker: str, key: str = "") -> str | None:
        """The worker whose result of ``name`` (task ``key``) is to be checked; None when
        ``"adaptive"``'s draw accepts it unchecked. Never unchecked: a result loaded from
        the checkpoint, or one of a worker that is not known (``""``)."""
        trust = self.trust
        if trust is None or name in self.spec.present:
            return worker
        u = self.draws.pop(key) if key in self.draws else trust.draw(self.threads)
        if u is None:
            self.n_unchecked += 1
            return None
        if trust.decide(u, worker):
            return worker
        self.n_unchecked += 1
        return None

    def _trusted(self, who: str) -> None:
        if self.trust is not None and who:
            self.trust.passed(who)

    def _note_redone(self, name: str, who: str) -> None:
        for r in self.rejections:
            if r["unit"] == name and "recomputed_on" not in r:
                r["recomputed_on"] = who

    def _failed(self, ev: Failed, out: list[Instruction]) -> None:
        key = ev.key
        if key in self.dropped:
            return
        if key in self.dup_keys:  # a copy failed; the original still runs
            self.dropped.add(key)
            c = self.copies.get(self.unit_of.get(key, ""))
            if c is not None and key in c.dups:
                i = c.dups.index(key)
                del c.dups[i], c.pinned[i]
            return
        if ev.rejected and key in self.red_checks:
            b, a, who = self.red_checks.pop(key)
            self._reject(who, b, "reduction", out)
            self.attempts[b] = a + 1
            self._reduce(b, out, frozenset({who}))
            return
        if ev.rejected and key in self.checks:
            name, a, who = self.checks.pop(key)
            self.inflight.discard(key)
            self._reject(who, name, "unit", out)
            self.attempts[name] = a + 1
            rk = f"distal-unit-{self.nonce}-{name}-redo-{a + 1}"
            where = self.restrict(out, frozenset({who}))
            out.append(SubmitUnit(rk, name, where, redo=a + 1))
            self.copies[name] = _Copies(self.units[name], rk, self.now)
            self.unit_of[rk] = name
            self.inflight.add(rk)
            return
        self._fail(out, "task", ev.error or f"task {key} failed", key)

    def _reject(self, who: str, name: str, kind: str, out: list[Instruction]) -> None:
        if self.trust is not None:
            self.trust.failed(who)
        self.exclude(who, name, "check", kind, out)

    def exclude(self, worker: str, name: str, how: str, kind: str, out: list[Instruction]) -> None:
        """Stop trusting ``worker`` (it made a rejected result of ``name``): no further task
        goes there, and the entries it wrote in this run lose their seal and are
        re-verified on a trusted worker."""
        self.rejections.append({"unit": name, "worker": worker, "how": how, "kind": kind})
        if not worker or worker in self.excluded:
            return
        self.excluded.add(worker)
        for entry in sorted(self.written.get(worker, ())):
            self._withdraw(entry, out)
            if entry in self.units:
                parts: tuple[tuple[str, str], ...] = ()
            elif entry in self.summed:
                parts = self.summed[entry]
            else:
                continue
            key = f"distal-recheck-{self.nonce}-{entry}"
            out.append(SubmitRecheck(key, entry, parts, self.restrict(out)))
            self.aux.add(key)
            self.rechecked += 1

    def _outvoted(self, ev: Outvoted, out: list[Instruction]) -> None:
        kind = "reduction" if ev.block else "unit"
        for w in ev.workers:
            self.exclude(w, ev.name, f"outvoted by {', '.join(ev.accepted)}", kind, out)


__all__ = ["POOL_GONE", "PROBE_EVERY", "Core", "Policy", "RunSpec", "Work"]
