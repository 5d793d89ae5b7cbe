"""The discrete-event simulation of a plan.

Each processor is a generator that walks its program exactly as the MPI runtime
does (``docs/internals.md``): before step 0 it posts and waits for step 0's
fetches; at the start of step ``s`` it posts step ``s+1``'s fetches (sends of
the blocks it owns, receives of the pieces it needs, local copies), posts the
receives of step ``s``'s partial sums, computes, flushes (local adds, partial
sends), waits for its partial messages, reduces, and waits for step ``s+1``'s
fetches; after the last step finished blocks go to other replicas and the
processor waits until everything it sent has arrived. It yields ``(BUSY, dt)``
(the CPU is busy) or ``(WAIT, messages)``; the engine resumes it in time order.

Routed plans (``plan/engine.py``) add two dependencies, as the MPI runtime
has them. A relayed fetch (``Message.relay``, the relay's ``Forward``) is sent from
the relay's fetch buffer, so it is posted once the relay has posted that step's
fetches *and* its own copy of the piece has arrived — during its computation too
(the runtime forwards from a thread, :mod:`distal.runtime.mpi.relay`). A relay's
partial-sum send (its ``Flush``) first waits for its children's sums (``Combine``)
and adds them in.

A message leaves when both sides have posted it (or when the sender posts it, up
to ``eager_bytes``), first come first served on its sender's injection port and
its receiver's ejection port, occupying both for ``bytes / bandwidth`` and
arriving ``latency`` later. Because every post happens at the global clock and
the clock only moves forward, first-come order is the order of posting.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np

from distal.plan.ir import (
    FETCH,
    FINAL,
    PARTIAL,
    Combine,
    Compute,
    Fetch,
    Flush,
    Forward,
    OpenOutput,
    Plan,
    RecvFinal,
    Reduce,
    SendFinal,
)
from distal.plan.region import words
from distal.plan.visit import Interpreter, impl
from distal.trace import COMPUTE, FLUSH, REDUCE, WAIT, Event
from distal.trace import FETCH as EV_FETCH
from distal.trace import FINAL as EV_FINAL
from distal.typing import box_volume

BUSY, WAITING = 0, 1
Request = tuple[int, object]


@dataclass
class StepCosts:
    """CPU seconds of one processor's steps (index ``nsteps`` is the final phase)."""

    copy: list[float]  # local copies of the fetches of step s (done when they are posted)
    compute: list[float]
    flush: list[float]
    reduce: list[float]
    iterations: list[int]


@dataclass
class Wire:
    """The messages of a plan as flat arrays, and who sends / receives what when."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    intra: np.ndarray
    sends: dict[tuple[int, int, str], list[int]]  # (proc, step, kind) -> ids (no relayed fetch)
    recvs: dict[tuple[int, int, str], list[int]]
    forwards: dict[tuple[int, int], list[int]]  # (relay, step) -> relayed fetches it sends
    after: dict[int, int]  # relayed fetch -> the message bringing the relay its own copy
    combines: dict[tuple[int, int], list[int]]  # (relay, step) -> children's partial sums


def wire_of(plan: Plan, itemsize: Callable[[str], int]) -> Wire:
    """Index ``plan.messages`` by sender and receiver."""
    n = len(plan.messages)
    src, dst = np.empty(n, np.int64), np.empty(n, np.int64)
    nbytes, intra = np.empty(n, np.float64), np.zeros(n, bool)
    sends: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    forwards: dict[tuple[int, int], list[int]] = defaultdict(list)
    combines: dict[tuple[int, int], list[int]] = defaultdict(list)
    arrives: dict[tuple, int] = {}  # (receiver, step, tensor, piece) -> fetch message
    relayed: list[int] = []
    for i, m in enumerate(plan.messages):
        src[i], dst[i] = m.src, m.dst
        nbytes[i] = m.words * itemsize(m.tensor)
        intra[i] = plan.machine is not None and plan.level_of(m.src, m.dst) > 0
        if m.kind == FETCH:
            arrives[(m.dst, m.step, m.tensor, m.box)] = i
        if m.kind == FETCH and m.relay:
            forwards[(m.src, m.step)].append(i)
            relayed.append(i)
        else:
            sends[(m.src, m.step, m.kind)].append(i)
        if m.kind == PARTIAL and m.relay:
            combines[(m.dst, m.step)].append(i)
        recvs[(m.dst, m.step, m.kind)].append(i)
    after = {}
    for i in relayed:
        m = plan.messages[i]
        own = arrives.get((m.src, m.step, m.tensor, m.box))
        if own is None:
            raise ValueError(f"relay {m.src} forwards {m.tensor}{m.box} it never receives")
        after[i] = own
    return Wire(
        src, dst, nbytes, intra, dict(sends), dict(recvs), dict(forwards), after, dict(combines)
    )


class Engine:
    """Event loop: processors (generators), message transfers and arrivals."""

    def __init__(
        self,
        wire: Wire,
        bandwidth: np.ndarray,
        latency: float,
        intra_bandwidth: float,
        intra_latency: float,
        eager_bytes: int,
        cores: float | None = None,
        core_efficiency: float = 1.0,
    ) -> None:
        self.wire = wire
        self.cores = cores
        self.core_eff = core_efficiency
        self.busy_left: dict[int, float] = {}  # processor sharing: CPU seconds still to run
        self.busy_token: dict[int, int] = {}  # the heap entry of each busy processor's end
        self.busy_since = 0.0
        n, nprocs = len(wire.src), len(bandwidth)
        self.bw = [float(b) for b in bandwidth]
        self.latency, self.intra_bw, self.intra_lat = latency, intra_bandwidth, intra_latency
        self.eager = eager_bytes
        self.now = 0.0
        self.end = 0.0  # when the last event happened (set by ``run``)
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = itertools.count()
        self.inj_free = [0.0] * nprocs
        self.ej_free = [0.0] * nprocs
        self.src_posted = bytearray(n)
        self.dst_posted = bytearray(n)
        self.started = bytearray(n)
        self.arrival = [-1.0] * n
        self.sent_at = [-1.0] * n  # when the message started to occupy its ports
        self.waited_dst = bytearray(n)  # the receiver waits for this message's arrival
        self.waited_src = bytearray(n)  # the sender waits for it (its send to complete)
        self.pending = [0] * nprocs
        self.done = [0.0] * nprocs
        self.port_busy = [0.0] * nprocs  # seconds each processor's ejection port carried data
        self.on_arrival: dict[int, list[int]] = {}  # message -> relayed sends posted then
        self.gens: list[Generator[Request, None, None]] = []
        self._src = wire.src.tolist()
        self._dst = wire.dst.tolist()
        self._bytes = wire.nbytes.tolist()
        self._intra = wire.intra.tolist()

    # -- messages ------------------------------------------------------------------------
    def post_send(self, ids: Sequence[int]) -> None:
        for m in ids:
            self.src_posted[m] = 1
            if not self.started[m] and (self.dst_posted[m] or self._bytes[m] <= self.eager):
                self._start(m)

    def post_recv(self, ids: Sequence[int]) -> None:
        for m in ids:
            self.dst_posted[m] = 1
            if self.src_posted[m] and not self.started[m]:
                self._start(m)

    def post_forward(self, ids: Sequence[int]) -> None:
        """Relayed fetches: each is posted once the relay's own copy has arrived (now or later)."""
        for m in ids:
            own = self.wire.after[m]
            if self.arrival[own] >= 0:
                self.post_send((m,))
            else:
                self.on_arrival.setdefault(own, []).append(m)

    def _start(self, m: int) -> None:
        self.started[m] = 1
        s, d, b = self._src[m], self._dst[m], self._bytes[m]
        if self._intra[m]:
            t = self.now
            arrive = t + b / self.intra_bw + self.intra_lat
        else:
            t = max(self.now, self.inj_free[s], self.ej_free[d])
            dur = b / min(self.bw[s], self.bw[d])
            self.inj_free[s] = self.ej_free[d] = t + dur
            self.port_busy[d] += dur
            arrive = t + dur + self.latency
        self.sent_at[m] = t
        heapq.heappush(self.heap, (arrive, next(self.seq), 1, m))

    # -- processors ----------------------------------------------------------------------
    def _resume(self, p: int) -> None:
        gen = self.gens[p]
        while True:
            try:
                kind, arg = next(gen)
            except StopIteration:
                self.done[p] = self.now
                return
            if kind == BUSY:
                if arg > 0:  # type: ignore[operator]
                    if self.cores is None:
                        heapq.heappush(self.heap, (self.now + arg, next(self.seq), 0, p))  # type: ignore[operator]
                    else:
                        self._share(p, arg)  # type: ignore[arg-type]
                    return
                continue
            count = 0
            for m in arg:  # type: ignore[attr-defined]
                if self.arrival[m] < 0:
                    if self._dst[m] == p:
                        self.waited_dst[m] = 1
                    else:
                        self.waited_src[m] = 1
                    count += 1
            if count:
                self.pending[p] = count
                return

    def _rate(self, busy: int) -> float:
        """Speed of each of ``busy`` processors sharing ``cores`` (1: a core of its own)."""
        cores = self.cores or 1
        active = min(busy, cores)
        slow = (1 - self.core_eff) * (active - 1) / (cores - 1) if cores > 1 else 0.0
        return min(1.0, cores / busy) * (1 - slow)

    def _share(self, p: int, work: float | None) -> None:
        """Processor sharing of ``cores``: ``p`` starts ``work`` CPU seconds (None: it ended);
        every busy processor runs at :meth:`_rate` and its end is rescheduled."""
        busy = self.busy_left
        if busy:
            rate = self._rate(len(busy))
            done = (self.now - self.busy_since) * rate
            for q in busy:
                busy[q] -= done
        self.busy_since = self.now
        if work is None:
            busy.pop(p, None)
            self.busy_token.pop(p, None)
        else:
            busy[p] = work
        if busy:
            rate = self._rate(len(busy))
            for q, left in busy.items():
                token = next(self.seq)
                self.busy_token[q] = token
                heapq.heappush(self.heap, (self.now + max(left, 0.0) / rate, token, 2, q))

    def run(self, gens: list[Generator[Request, None, None]]) -> float:
        """Run every processor to its end; the time the last event happened."""
        self.gens = gens
        for p in range(len(gens)):
            heapq.heappush(self.heap, (0.0, next(self.seq), 0, p))
        heap, end = self.heap, 0.0
        while heap:
            t, token, kind, x = heapq.heappop(heap)
            if kind == 2:  # a shared-core processor's work ends (unless rescheduled since)
                if self.busy_token.get(x) != token:
                    continue
                self.now = end = t
                self._share(x, None)
                self._resume(x)
                continue
            self.now = end = t
            if kind == 0:
                self._resume(x)
                continue
            self.arrival[x] = t
            if x in self.on_arrival:
                self.post_send(self.on_arrival.pop(x))
            for flags, who in ((self.waited_dst, self._dst), (self.waited_src, self._src)):
                if flags[x]:
                    flags[x] = 0
                    q = who[x]
                    self.pending[q] -= 1
                    if self.pending[q] == 0:
                        self._resume(q)
        self.end = end
        return end


class _Costs(Interpreter):
    """Adds each instruction's CPU seconds to the step it runs in (see :func:`step_costs`)."""

    def __init__(
        self,
        plan: Plan,
        p: int,
        compute_seconds: Callable[[tuple], float],
        mem_bandwidth: float,
        itemsize: Callable[[str], int],
        overhead: float,
        copy_remote: bool,
    ) -> None:
        n = plan.nsteps + 1
        self.c = StepCosts([0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n, [0] * n)
        self.p, self.nsteps = p, plan.nsteps
        self.compute_seconds = compute_seconds
        self.bw, self.itemsize, self.overhead = mem_bandwidth, itemsize, overhead
        self.copy_remote = copy_remote
        self.out_b = itemsize(plan.output)

    @impl(Fetch)
    def fetch(self, op: Fetch) -> None:
        c = self.c
        c.copy[op.step] += self.overhead
        if op.box is None or op.view:
            return
        w = sum(words(pc) for src, pc in op.pieces if self.copy_remote or src == self.p)
        c.copy[op.step] += 2 * w * self.itemsize(op.tensor) / self.bw

    @impl(Compute)
    def compute(self, op: Compute) -> None:
        c, s = self.c, op.step
        if op.work is not None:
            # a leaf over stored entries streams memory: per iteration point the entry's
            # value and index, the gathered operand words and the output word
            per = 3 + sum(len(t.dense) for t in op.work.terms)
            c.compute[s] += op.work.iterations * per * self.out_b / self.bw + self.overhead
        else:
            for box in op.boxes:
                c.compute[s] += self.compute_seconds(box) + self.overhead
        c.iterations[s] += op.iterations

    @impl(Flush)
    def flush(self, op: Flush) -> None:
        c, s, out_b = self.c, op.step, self.out_b
        w = sum(words(b) for b in op.local)
        sent = sum(words(b) for _, b in op.sends)
        c.flush[s] += self.overhead * (1 + len(op.sends)) + 3 * w * out_b / self.bw
        if self.copy_remote:
            c.flush[s] += 2 * sent * out_b / self.bw

    @impl(Reduce)
    def reduce(self, op: Reduce) -> None:
        self.c.reduce[op.step] += self.overhead + 3 * words(op.box) * self.out_b / self.bw

    @impl(Combine)
    def combine(self, op: Combine) -> None:
        """A child's sum added into the partial buffer."""
        self.c.flush[op.step] += self.overhead + 3 * words(op.box) * self.out_b / self.bw

    @impl(Forward)
    def forward(self, op: Forward) -> None:
        """One more send call while the fetches are posted."""
        self.c.copy[op.step] += self.overhead

    @impl(SendFinal, RecvFinal)
    def final(self, op: SendFinal | RecvFinal) -> None:
        s = self.nsteps
        self.c.reduce[s] += self.overhead + 2 * box_volume(op.box) * self.out_b / self.bw

    @impl(OpenOutput)
    def open_output(self, op: OpenOutput) -> None:
        self.c.compute[op.step] += self.overhead


def step_costs(
    plan: Plan,
    p: int,
    compute_seconds: Callable[[tuple], float],
    mem_bandwidth: float,
    itemsize: Callable[[str], int],
    overhead: float,
    copy_remote: bool,
) -> StepCosts:
    """CPU seconds of each step of processor ``p`` (``copy_remote``: the local runtime copies
    remote pieces itself)."""
    costs = _Costs(plan, p, compute_seconds, mem_bandwidth, itemsize, overhead, copy_remote)
    for op in plan.ops(p):
        costs.visit(op)
    return costs.c


def processor(
    eng: Engine, p: int, nsteps: int, costs: StepCosts, events: list[Event]
) -> Generator[Request, None, None]:
    """Processor ``p``'s program as the MPI runtime runs it (see the module docstring)."""
    sends, recvs = eng.wire.sends, eng.wire.recvs
    forwards, combines = eng.wire.forwards, eng.wire.combines
    none: list[int] = []

    def ids(table: dict, s: int, kind: str) -> list[int]:
        return table.get((p, s, kind), none)

    def waited(msgs: list[int], s: int) -> Generator[Request, None, None]:
        t = eng.now
        yield WAITING, msgs
        if eng.now > t:
            events.append(Event(p, WAIT, s, t, eng.now))

    def busy(kind: str, s: int, dt: float, words: int = 0) -> Generator[Request, None, None]:
        t = eng.now
        yield BUSY, dt
        if dt > 0:
            events.append(Event(p, kind, s, t, eng.now, words))

    def post_fetches(s: int) -> Generator[Request, None, None]:
        eng.post_send(ids(sends, s, FETCH))
        eng.post_recv(ids(recvs, s, FETCH))
        eng.post_forward(forwards.get((p, s), none))  # each leaves once its copy is here
        yield from busy(EV_FETCH, s, costs.copy[s])

    def fetched(s: int) -> Generator[Request, None, None]:
        yield from waited(ids(recvs, s, FETCH), s)

    if nsteps:
        yield from post_fetches(0)
        yield from fetched(0)
    for s in range(nsteps):
        if s + 1 < nsteps:
            yield from post_fetches(s + 1)
        eng.post_recv(ids(recvs, s, PARTIAL))
        yield from busy(COMPUTE, s, costs.compute[s], costs.iterations[s])
        yield from waited(combines.get((p, s), none), s)  # the relay's Flush adds them first
        yield from busy(FLUSH, s, costs.flush[s])
        eng.post_send(ids(sends, s, PARTIAL))
        yield from waited(ids(recvs, s, PARTIAL) + ids(sends, s, PARTIAL), s)
        yield from busy(REDUCE, s, costs.reduce[s])
        if s + 1 < nsteps:
            yield from fetched(s + 1)
    eng.post_send(ids(sends, nsteps, FINAL))
    eng.post_recv(ids(recvs, nsteps, FINAL))
    yield from waited(ids(recvs, nsteps, FINAL) + ids(sends, nsteps, FINAL), nsteps)
    yield from busy(EV_FINAL, nsteps, costs.reduce[nsteps])
    mine = [m for s in range(nsteps) for m in ids(sends, s, FETCH) + forwards.get((p, s), none)]
    yield from waited(mine, nsteps)
