"""The embedded reference runtime: every processor's store in one process.

Each simulated processor has its own store holding exactly the blocks it owns
and the buffers the plan gives it; every message is a real copy out of the
sender's store, counted as it happens, so the measured ``Stats`` are honest.
Processors run step by step in lockstep, one after another inside a step, so
every BLAS call gets all of the machine's cores; the copies of the next step's
fetches run on a helper thread meanwhile, as an MPI rank receives them while it
computes.

This runtime is the correctness oracle the other runtimes are compared with.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from distal.errors import RuntimeFailure
from distal.kernels.leaf import TermKernel
from distal.plan.ir import (
    FETCH,
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
from distal.plan.stats import Stats, ops_by_step
from distal.runtime.progress import Progress
from distal.runtime.source import read_block
from distal.runtime.store import Store, box_index
from distal.runtime.trace import COMPUTE, FINAL, FLUSH, REDUCE, Recorder
from distal.typing import Box, box_shape, box_volume

_POOL: list[Any] = []


def _copier() -> Any:
    """The helper thread that copies the next step's fetches while this step computes."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(1, "distal-prefetch"))
    return _POOL[0]


ASYNC_FETCH_MIN = 1 << 18  # elements: a step fetching less copies inline (handing the copies to
# the helper thread and waiting for it costs more than copying a few MiB, more under load)

_KIND = {Fetch: FETCH, Compute: COMPUTE, Flush: FLUSH, RecvFinal: FINAL}
_ORIGIN = [((0, 0),) * n for n in range(33)]


class LocalRuntime:
    """Executes a plan in this process."""

    def __init__(
        self,
        plan: Plan,
        kernels: tuple[TermKernel, ...],
        dtypes: dict[str, Any],
        *,
        trace: bool | None = None,
        progress: bool | None = None,
    ) -> None:
        self.plan = plan
        self.kernels = kernels
        self.dtypes = dtypes
        if trace is None:
            trace = os.environ.get("DISTAL_TRACE", "1") != "0"
        self.tracing = trace
        self.progress = progress
        self.trace = Recorder()
        # routing (plan.engine): pieces a processor gets from a relay's fetch buffer,
        # and the tree position of every partial-sum message
        self.relayed = {
            (m.step, m.tensor, m.dst, m.box): m.hop
            for m in plan.messages
            if m.kind == FETCH and m.relay
        }
        self.partial_route = {
            (m.step, m.src, m.box): (m.hop, m.relay) for m in plan.messages if m.kind == PARTIAL
        }
        self.pending_fetch: list[tuple] = []
        self.pending_partial: list[tuple] = []

    def run(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, Stats, float]:
        """Scatter the inputs, execute every step, gather the output."""
        plan = self.plan
        procs = [Store(p, plan.output, self.dtypes[plan.output]) for p in range(plan.nprocs)]
        out_pl = plan.placements[plan.output]
        result = np.zeros(out_pl.shape, self.dtypes[plan.output])
        for name, pl in plan.placements.items():
            for q in procs:
                idx = pl.block_index(plan.coord_in(pl, q.p))
                if idx is None:
                    continue
                box = pl.block_box(idx)
                if name == plan.output:
                    # the reducer's block is a view of the result: gathering is free
                    arr = (
                        result[box_index(box, _ORIGIN[len(box)])]
                        if plan.primary.get(idx) == q.p
                        else np.zeros(box_shape(box), self.dtypes[name])
                    )
                    q.owned[name] = (arr, box)
                else:
                    q.owned[name] = (self._input_block(name, inputs[name], box), box)
        stats = Stats.zeros(plan.nprocs, plan.machine.nlevels if plan.machine else 1)
        by_step = [ops_by_step(plan, q.p) for q in procs]
        start = time.perf_counter()
        self.trace = Recorder()
        for q in procs:
            self._prefetch(q, by_step[q.p][0], procs, stats)
        self._relay_fetches(procs, stats)
        for q in procs:
            q.swap()
        bar = Progress(plan.nsteps, plan.nprocs, enabled=self.progress)
        try:
            for s in range(plan.nsteps):
                self._step(s, procs, by_step, stats, bar)
        finally:
            bar.close()
        for q in procs:
            stats.peak_words[q.p] = max(stats.peak_words[q.p], q.held_words())
        finals = [(q, op) for q in procs for op in by_step[q.p][plan.nsteps]]
        for q, op in finals:
            if isinstance(op, RecvFinal):
                self._exec(q, op, procs, stats)
        seconds = time.perf_counter() - start
        return result, stats, seconds

    def _step(self, s: int, procs: list[Store], by_step: list, stats: Stats, bar: Progress) -> None:
        """Step ``s`` of every processor: prefetch ``s+1``, compute, flush, then reduce."""
        plan = self.plan
        ahead = None
        if s + 1 < plan.nsteps and self._fetch_words(by_step, s + 1) < ASYNC_FETCH_MIN:
            for q in procs:
                self._prefetch(q, by_step[q.p][s + 1], procs, stats)
        elif s + 1 < plan.nsteps:
            # the copies read only input blocks (never written) into new buffers (not used
            # before the swap below), so they can run while the step computes: BLAS leaves
            # memory bandwidth the copies use (the counters they touch are not the compute's)
            ahead = _copier().submit(
                lambda: [self._prefetch(q, by_step[q.p][s + 1], procs, stats) for q in procs]
            )
        for q in procs:
            for op in by_step[q.p][s]:
                if not isinstance(op, Fetch):
                    self._exec(q, op, procs, stats)
            bar.advance(q.p, s)
        if ahead is not None:
            ahead.result()
        self._relay_fetches(procs, stats)
        self._send_partials(procs, stats)
        for q in procs:
            stats.peak_words[q.p] = max(stats.peak_words[q.p], q.held_words())
            t = self.trace.now()
            words = q.reduce_inbox()
            if words and self.tracing:
                self.trace.add(q.p, REDUCE, s, t, words)
            q.end_step()
            q.swap()

    def _fetch_words(self, by_step: list, s: int) -> int:
        """Elements the fetches of step ``s`` copy, over every processor."""
        return sum(
            box_volume(piece)
            for ops in by_step
            for op in ops[s]
            if isinstance(op, Fetch) and not op.view
            for _, piece in op.pieces
        )

    def _prefetch(self, q: Store, ops: list[Any], procs: list[Store], stats: Stats) -> None:
        """Carry out the next step's fetches now (overlap), or step 0's before the first."""
        for op in ops:
            if isinstance(op, Fetch):
                self._exec(q, op, procs, stats)

    def _exec(self, q: Store, op: Any, procs: list[Store], stats: Stats) -> None:
        plan = self.plan
        t = self.trace.now()
        before = stats.words_received[q.p] + stats.words_sent[q.p]
        try:
            if isinstance(op, Fetch):
                self._fetch(q, op, procs, stats)
            elif isinstance(op, OpenOutput):
                q.open_output(op)
            elif isinstance(op, Compute):
                stats.iterations[q.p] += q.compute(op, self.kernels)
            elif isinstance(op, Flush):
                q.flush_local(op)
                for dst, box in op.sends:
                    hop, relay = self.partial_route[op.step, q.p, box]
                    self.pending_partial.append((hop, q.p, dst, box, relay))
            elif isinstance(op, Reduce | SendFinal | Forward | Combine):
                pass  # the sender's Flush / the receiver's copy moves the data
            elif isinstance(op, RecvFinal):
                src_arr, sorigin = procs[op.src].owned[plan.output]
                own, origin = q.owned[plan.output]
                own[box_index(op.box, origin)] = src_arr[box_index(op.box, sorigin)].copy()
                self._count(stats, op.src, q.p, op.box)
        except Exception as e:
            raise RuntimeFailure(f"processor {q.p} failed at {op}: {e}", processor=q.p) from e
        kind = _KIND.get(type(op))
        if kind is not None and self.tracing:
            words = stats.words_received[q.p] + stats.words_sent[q.p] - before
            self.trace.add(q.p, kind, getattr(op, "step", plan.nsteps), t, words)

    def _fetch(self, q: Store, op: Fetch, procs: list[Store], stats: Stats) -> None:
        buf = q.fetch_buffer(op, self.dtypes[op.tensor])
        if buf is None:
            return
        for src, piece in op.pieces:
            hop = self.relayed.get((op.step, op.tensor, q.p, piece))
            if hop is not None:  # from the relay's fetch buffer, once it has its copy
                self.pending_fetch.append((hop, q.p, op.tensor, piece, src))
                continue
            sarr, sorigin = procs[src].owned[op.tensor]
            buf[box_index(piece, op.box)] = sarr[box_index(piece, sorigin)]
            if src != q.p:
                self._count(stats, src, q.p, piece)

    def _relay_fetches(self, procs: list[Store], stats: Stats) -> None:
        """Copies of routed pieces out of relays' buffers, nearest the owner first."""
        for _, dst, tensor, piece, src in sorted(self.pending_fetch, key=lambda x: x[:2]):
            sbuf, sbox = procs[src].next[tensor]  # type: ignore[misc]
            dbuf, dbox = procs[dst].next[tensor]  # type: ignore[misc]
            dbuf[box_index(piece, dbox)] = sbuf[box_index(piece, sbox)]
            self._count(stats, src, dst, piece)
        self.pending_fetch.clear()

    def _send_partials(self, procs: list[Store], stats: Stats) -> None:
        """Partial sums of this step: deepest tree nodes first, so a relay's message
        carries its children's sums (``Combine``) along with its own."""
        for _, src, dst, box, relay in sorted(self.pending_partial, key=lambda x: (-x[0], x[1])):
            arr, origin = procs[src].partial  # type: ignore[misc]
            piece = arr[box_index(box, origin)].copy()
            self._count(stats, src, dst, box)
            if relay:
                parr, porigin = procs[dst].partial  # type: ignore[misc]
                parr[box_index(box, porigin)] += piece
                procs[dst].combined.append((piece, box))
            else:
                procs[dst].inbox.append((piece, box))
        self.pending_partial.clear()

    def _count(self, stats: Stats, src: int, dst: int, box: Box) -> None:
        stats.record(src, dst, box_volume(box), self.plan.level_of(src, dst))

    def _input_block(self, name: str, data: Any, box: Box) -> np.ndarray:
        """A processor's owned block of an input: a read-only view of the caller's array
        (placing inputs is not traffic, and the caller's data can never be changed),
        or a block read from a block source."""
        if isinstance(data, np.ndarray) and data.dtype == self.dtypes[name]:
            view = data[box_index(box, _ORIGIN[len(box)])]
            view.flags.writeable = False
            return view
        return read_block(name, data, box, self.dtypes[name])
