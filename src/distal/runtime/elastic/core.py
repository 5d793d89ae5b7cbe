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

from distal.runtime.elastic import speculate
from distal.runtime.elastic.events import (
    ANYWHERE,
    AskQueues,
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
    Seal,
    Started,
    SubmitAgreed,
    SubmitCheck,
    SubmitRecheck,
    SubmitReduce,
    SubmitReduceCheck,
    SubmitUnit,
    Tick,
    Unseal,
    Where,
    Wrote,
)

PROBE_EVERY = 0.05
"""Seconds between looks for stragglers (a look may ask for the workers' queues)."""

POOL_GONE = 120.0
"""Seconds without a single worker after which the run fails: the pool is gone."""


@dataclass(frozen=True, slots=True)
class Work:
    """A unit as the core sees it: its name, the output blocks its result goes into
    (``final``: it alone is the one block, named as the unit), the iterations its leaves
    visit (``size``) and the bytes of the input blocks it reads (``in_bytes``): what its
    deadline is made of."""

    name: str
    blocks: tuple[str, ...]
    final: bool = False
    size: int = 0
    in_bytes: int = 0


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: its units in the order they are handed out, the output blocks it must
    deliver, the checkpoint entries present when it began (``present``) and those of them
    whose seal opened (``sealed``: ``(entry, digest)``), and the entries its tasks may write
    (``writable``). ``nonce`` makes the run's task keys unique."""

    work: tuple[Work, ...]
    blocks: tuple[str, ...]
    nonce: str
    present: frozenset[str] = frozenset()
    sealed: tuple[tuple[str, str], ...] = ()
    writable: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Policy:
    """The run's options that decide: ``verify`` (1, ``k`` copies, ``"check"``,
    ``"adaptive"``), ``window`` (units handed out at once; None: twice the pool's threads),
    ``speculate``, whether entries are saved (``checkpoint``) and sealed (``sealed``),
    ``timeout`` (seconds for the whole run) and the workers excluded before it began.

    ``eager``: hand out every unit and reduction at once, each reduction summing the units'
    only copies, and deliver every block as soon as its task is handed out: a session's
    unverified kernel without a checkpoint, whose blocks the next kernels read where they
    will lie, so that a loop's kernels follow each other on the workers without waiting for
    the driver. No unit is copied then (later kernels already read the original), and the
    run is over once every task has finished (:attr:`Core.done`)."""

    verify: int | str = 1
    window: int | None = None
    speculate: bool = True
    checkpoint: bool = False
    sealed: bool = False
    timeout: float | None = None
    excluded: frozenset[str] = frozenset()
    eager: bool = False

    @property
    def check(self) -> bool:
        """Results are checked on another worker (``"check"``, ``"adaptive"``)."""
        return self.verify in ("check", "adaptive")

    @property
    def copies(self) -> int:
        """Copies of each unit computed (``verify=k``; 1 otherwise)."""
        return 1 if isinstance(self.verify, str) else int(self.verify)


@dataclass
class _Copies:
    """A handed-out unit: its task, any speculative copies, until one finishes."""

    work: Work
    key: str
    submitted: float
    dups: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)  # the worker of each copy
    copied: float = 0.0


class Core:
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
        self.stalled_workers: set[str] = set()  # they hold a unit past its deadline
        self.stalled_at: dict[str, int] = {}
        # units and blocks
        self.count = 0
        self.copies: dict[str, _Copies] = {}
        self.unit_of: dict[str, str] = {}  # task key -> unit name
        self.inflight: set[str] = set()  # originals counted against the window
        self.stalled: set[str] = set()  # overdue originals (not counted)
        self.dup_keys: set[str] = set()
        self.dropped: set[str] = set()
        self.accepted: dict[str, str] = {}  # unit -> key of its accepted result
        self.contrib: dict[str, list[str]] = defaultdict(list)  # block -> its units
        for w in spec.work:
            if not w.final:
                for b in w.blocks:
                    self.contrib[b].append(w.name)
        self.waiting = {b: set(ns) for b, ns in self.contrib.items()}
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
        self.reducing: dict[str, str] = {}  # key -> block (checked reductions)
        self.red_checks: dict[str, tuple[str, int, str]] = {}  # key -> (block, attempt, by)
        self.red_parts: dict[str, tuple[tuple[str, str], ...]] = {}
        self.summed: dict[str, tuple[tuple[str, str], ...]] = {}  # passed blocks' summands
        self.attempts: dict[str, int] = defaultdict(int)
        self.n_reduce = 0
        self.aux: set[str] = set()  # rechecks not yet finished
        self.written: dict[str, set[str]] = defaultdict(set)  # worker -> entries it wrote
        self.rejections: list[dict[str, Any]] = []
        self.rechecked = 0
        self.n_unchecked = 0
        # speculation: what the workers' events told
        self.n_dups = 0
        self.n_overdue = 0
        self.won: set[str] = set()
        self.probed = -math.inf
        self.queues: dict[str, tuple[str, ...]] | None = None
        self.starts: dict[str, tuple[str, float, int]] = {}  # unit -> (worker, at, count)
        self.ends: dict[str, int] = defaultdict(int)
        self.times: dict[str, list[float]] = defaultdict(list)
        self.its: dict[str, float] = defaultdict(float)
        self.secs: dict[str, float] = defaultdict(float)
        self.link_bytes: dict[str, float] = defaultdict(float)
        self.link_secs: dict[str, float] = defaultdict(float)
        # sealing (checkpoint_key=)
        self.sealed = dict(spec.sealed)
        self.reports: dict[str, set[str]] = {}
        self.to_seal: dict[str, str] = {}
        self.received: dict[str, str] = {}
        self.unauthenticated: set[str] = set()
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
            out.append(SubmitUnit(key, w.name, self._spread(n, out), load=saved))
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
            who = self._checked_by(b, worker)
            if who is None:  # accepted without a check ("adaptive")
                self.completed += 1
                self._deliver(b, key, out)
                return
            a = self.attempts[b]
            ck = f"distal-check-{self.nonce}-{b}-{a}"
            self._note_redone(b, who)
            where = self.restrict(out, frozenset({who}))
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
        if self.policy.check:
            who = self._checked_by(name, worker)
            if who is not None:
                self._check(name, key, who, out)
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

    def _check(self, name: str, key: str, who: str, out: list[Instruction]) -> None:
        a = self.attempts[name]
        self._note_redone(name, who)
        ck = f"distal-check-{self.nonce}-{name}-{a}"
        save = self.policy.checkpoint and (name not in self.spec.present or self.policy.sealed)
        out.append(SubmitCheck(ck, name, key, who, a, self.restrict(out, frozenset({who})), save))
        self.checks[ck] = (name, a, who)
        self.inflight.add(ck)

    def _checked_by(self, name: str, worker: str) -> str | None:
        """The worker whose result of ``name`` is to be checked; None when ``"adaptive"``'s
        draw accepts it unchecked. Never unchecked: a result loaded from the checkpoint,
        or one of a worker that is not known (``""``)."""
        trust = self.trust
        if trust is None or name in self.spec.present:
            return worker
        u = trust.draw(self.threads)
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

    # -- what the workers said ------------------------------------------------------------

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
                if s is not None and s[2] > self.ends[name]:
                    if now - s[1] > threshold:
                        tail.append((name, s[0], now - s[1]))
                elif s is None and now - c.submitted > threshold + c.work.in_bytes / link:
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

    # -- checkpoint entries and their seals -----------------------------------------------

    def _wrote(self, ev: Wrote, out: list[Instruction]) -> None:
        if not ev.recheck:
            self.written[ev.worker].add(ev.entry)
        if not self.policy.sealed or ev.digest is None or ev.entry not in self.spec.writable:
            return
        if ev.worker in self.excluded:
            return
        self.reports.setdefault(ev.entry, set()).add(ev.digest)
        self.to_seal[ev.entry] = ev.digest

    def _refused(self, ev: Refused, out: list[Instruction]) -> None:
        self.unauthenticated.add(ev.entry)
        self.sealed.pop(ev.entry, None)
        out.append(Unseal(ev.entry))

    def _received(self, ev: Received, out: list[Instruction]) -> None:
        self.received[ev.block] = ev.digest

    def _withdraw(self, entry: str, out: list[Instruction]) -> None:
        self.to_seal.pop(entry, None)
        self.reports.pop(entry, None)
        self.sealed.pop(entry, None)
        if self.policy.sealed:
            out.append(Unseal(entry))

    def _seal(self, out: list[Instruction]) -> None:
        """Seal the entries reported written (or vouched for by a recheck): only while
        every report of an entry names one digest (a forged report meeting the honest one
        leaves it unsealed), and a block only once what reached the driver has that digest."""
        for name, digest in list(self.to_seal.items()):
            if len(self.reports.get(name, ())) > 1:
                del self.to_seal[name]
                self.sealed.pop(name, None)
                out.append(Unseal(name))
                continue
            if name not in self.units or self.units[name].final:
                got = self.received.get(name)
                if got is None:
                    continue  # the block has not reached the driver yet
                if got != digest:
                    del self.to_seal[name]
                    continue
            if self.sealed.get(name) != digest:
                out.append(Seal(name, digest))
                self.sealed[name] = digest
            del self.to_seal[name]


__all__ = ["POOL_GONE", "PROBE_EVERY", "Core", "Policy", "RunSpec", "Work"]
