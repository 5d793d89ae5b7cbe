"""The embedded reference runtime: every processor's store in one process.

Each simulated processor has its own store holding exactly the blocks it owns
and the buffers the plan gives it; every message is a real copy out of the
sender's store, counted as it happens, so the measured ``Stats`` are honest.
Processors run step by step in lockstep, one after another inside a step, so
every BLAS call gets all of the machine's cores; the next step's fetches are copied
at the start of a step, before its computation (a large step's copies in one share
per core), so no copy competes with a BLAS thread for a core.

Everything a run derives from the plan alone (which blocks each processor owns, the
slices of every fetched piece, the machine level of every message, the instructions of
each step) is worked out once per plan and kept (:func:`prepared`), so a run of a small
kernel pays only for its copies, its leaves and one dispatch per instruction.

This runtime is the correctness oracle the other runtimes are compared with.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from distal.errors import InternalError, RuntimeFailure
from distal.kernels.leaf import TermKernel, cores
from distal.kernels.recycle import Recycler
from distal.kernels.sparse_leaf import EntryLeaves
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
from distal.plan.region import Entries, as_slice, content, index_words, shape, words
from distal.plan.stats import Stats, ops_by_step
from distal.plan.visit import Interpreter, impl
from distal.progress import Progress
from distal.progress import _wanted as progress_wanted
from distal.runtime.source import read_block
from distal.runtime.store import Store, add_at, box_index, copy_into, copy_piece, read, where
from distal.runtime.weakcache import WeakCache
from distal.trace import COMPUTE, FINAL, FLUSH, REDUCE, Recorder
from distal.typing import Box

_POOL: list[Any] = []


def _copiers() -> Any:
    """Helper threads that copy a step's fetches beside this thread (one per other core)."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(max(1, cores() - 1), "distal-copy"))
    return _POOL[0]


_WORKERS: list[Any] = []


def _workers() -> Any:
    """Threads that run processors side by side (one per core), made once per process."""
    if not _WORKERS:
        from concurrent.futures import ThreadPoolExecutor

        _WORKERS.append(ThreadPoolExecutor(max(1, cores()), "distal-proc"))
    return _WORKERS[0]


def side_by_side(f: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``f`` over ``items``, the first in this thread and the others in the processors'
    threads (work that lets go of the GIL, as numpy's and the numba kernels do), in order."""
    if len(items) <= 1:
        return [f(x) for x in items]
    futs = [_workers().submit(f, x) for x in items[1:]]
    try:
        first = f(items[0])
    finally:  # every one finished (or failed) before anything is raised or returned
        for g in futs:
            g.exception()
    return [first, *(g.result() for g in futs)]


PARALLEL_COPY_MIN = 1 << 18  # elements: a step fetching this many or more copies them in one
# share per core (before it computes); below, this thread copies them alone (handing copies to
# other threads and waiting for them costs more than copying a few MiB, more under load)


Job = tuple[np.ndarray, Any, np.ndarray, Any, int]  # dst, where in dst, src, where in src, words


def _copy(job: Job) -> None:
    dst, dix, src, six, _ = job  # numpy lets go of the GIL while it copies or gathers
    copy_piece(dst, dix, src, six)


def _copy_all(jobs: list[Job]) -> None:
    """Every job's copy (a box, or rows / stored entries gathered from their holder), in
    one share of about equal size per core."""
    parts = min(cores(), len(jobs))
    if parts <= 1:
        for job in jobs:
            _copy(job)
        return
    shares: list[list[Job]] = [[] for _ in range(parts)]
    sizes = [0] * parts
    for job in sorted(jobs, key=lambda j: -j[4]):
        t = sizes.index(min(sizes))
        shares[t].append(job)
        sizes[t] += job[4]

    def run(share: list[Job]) -> None:
        for job in share:
            _copy(job)

    futs = [_copiers().submit(run, share) for share in shares[1:]]
    run(shares[0])
    for f in futs:
        f.result()


_KIND = {Compute: COMPUTE, Flush: FLUSH, RecvFinal: FINAL}


class _NoBar:
    """The progress bar of a run that shows none (most runs: not on a terminal)."""

    def advance(self, proc: int, step: int | None = None) -> None:
        pass

    def close(self) -> None:
        pass


_NO_BAR = _NoBar()
_ORIGIN = [((0, 0),) * n for n in range(33)]
_INPUT, _PRIMARY, _REPLICA = 0, 1, 2  # roles of an owned block
_NOTHING, _VIEW, _BUFFER = 0, 1, 2  # what a fetch makes


TOUCH_MAX = 1 << 22  # bytes: zeroed arrays up to this size are written here, not mapped lazily


def _zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zeroed array whose pages are touched by this thread when it is small.

    ``np.zeros`` maps fresh zero pages that fault on their first write, which for an output
    means inside the BLAS threads: two threads faulting the same few hundred pages at once
    cost more than the GEMMs of a small kernel (n=256: 1.4 ms against 0.5 ms). Large arrays
    keep the lazy mapping (numpy asks for huge pages there, so faults are few).
    """
    if math.prod(shape) * np.dtype(dtype).itemsize > TOUCH_MAX:
        return np.zeros(shape, dtype)
    arr = np.empty(shape, dtype)
    arr.fill(0)
    return arr


RESULTS_KEPT = 3  # a plan's large results of earlier runs looked at for reuse

SPARE_BYTES = 1 << 23  # a plan's fetch buffers up to this size are kept for its next run


class _Buffers:
    """The fetch buffers of one run: a buffer a step lets go of serves a later fetch of the
    same shape, and a small plan's buffers serve its next run, so copies land in memory
    that is already mapped (a fresh 128 KiB buffer costs more in page faults than the copy
    into it: 16 fetches at n=256 took 0.79 ms fresh against 0.06 ms reused)."""

    def __init__(self) -> None:
        self.free: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}
        self.mine: set[int] = set()
        self.nbytes = 0

    def take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dt = np.dtype(dtype)
        stack = self.free.get((shape, dt.str))
        if stack:
            return stack.pop()
        arr = np.empty(shape, dt)
        self.mine.add(id(arr))
        self.nbytes += arr.nbytes
        return arr

    def give(self, arr: np.ndarray) -> None:
        if id(arr) in self.mine:
            self.free.setdefault((arr.shape, arr.dtype.str), []).append(arr)


def _whole_index(region: Any) -> Any:
    """Where an owned region lies in the whole tensor's array: a box's slices, or the stored
    positions (a slice when they are a run)."""
    if isinstance(region, Entries):
        return (as_slice(region.positions),)
    return box_index(region, _ORIGIN[len(region)])


def _in_caller_array(region: Any) -> tuple | None:
    """Slices of an input's whole array that hold ``region`` in its buffer's layout: a dense
    box, or rows of the first dimension that are one ascending run times a box over the
    others (a halo); None for anything else (a gather of scattered rows)."""
    if isinstance(region, tuple):
        return box_index(region, _ORIGIN[len(region)])
    rows = getattr(region, "rows", None)
    if rows is None or region.sdims != (0,) or region.ddims != tuple(range(1, 1 + len(region.box))):
        return None
    r = rows[:, 0] if rows.ndim == 2 else rows
    if not len(r) or not (
        r[-1] - r[0] == len(r) - 1 and (len(r) < 2 or bool(np.all(np.diff(r) == 1)))
    ):
        return None
    return (slice(int(r[0]), int(r[-1]) + 1), *box_index(region.box, _ORIGIN[len(region.box)]))


def _gathered_rows(region: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """The rows of the first dimension of a tensor of ``shape`` that a fetched ``region``
    gathers, where it is such rows times the whole of every other dimension (SpMV's ``x``
    entries, SpMM's rows of ``C``); None for any other region."""
    rows = getattr(region, "rows", None)
    if rows is None or region.sdims != (0,) or region.ddims != tuple(range(1, len(shape))):
        return None
    if tuple(region.box) != tuple((0, n) for n in shape[1:]):
        return None
    return np.ascontiguousarray(rows[:, 0] if rows.ndim == 2 else rows, dtype=np.int64)


class Prepared:
    """What runs of one plan share, derived once from the plan.

    ``blocks[p]``: ``(tensor, box, slices in the whole array, role)`` of every block ``p``
    owns. ``fetches[s][p]``: ``(op, what, tensor, box, shape, own slices, pieces, whole,
    borrow, inplace)`` for each fetch of step ``s``, where

    * a piece is ``(source, slices in the buffer, slices in the source's block -- for a
      relayed piece, in the relay's fetch buffer --, words, machine level, routing hop or
      None, the piece's region)``;
    * ``whole``: the buffer is one direct piece (a copy of a view);
    * ``borrow``: that piece is of an input, which no processor writes, so the buffer is
      the source's block itself, not a copy (the message is still counted: this runtime's
      processors share one memory);
    * ``inplace``: where the buffer lies in the caller's whole array of an input (a box, or
      a run of rows times a box), read there whatever the pieces when the run is given
      that array (None: not such a region, or a routed fetch).

    ``work[s][p]``: the other instructions that act here.
    """

    def __init__(self, plan: Plan, dtypes: dict[str, Any]) -> None:
        try:  # held weakly: kept by plan (_PREPARED), this must not keep the plan alive
            self._plan: Any = weakref.ref(plan)
        except TypeError:  # (Python 3.10: a slotted plan has no weak references)
            self._plan = lambda: plan
        n, nsteps = plan.nprocs, plan.nsteps
        self.levels: dict[tuple[int, int], int] = {}
        owned_box: list[dict[str, Any]] = [{} for _ in range(n)]
        self.blocks: list[list[tuple[str, Any, Any, int]]] = [[] for _ in range(n)]
        for name, regions in plan.owned.items():  # what a pattern decides: stored entries
            for p in range(n):
                region = regions[p]
                if region is None:
                    continue
                role = _INPUT if name != plan.output else _PRIMARY
                owned_box[p][name] = region
                self.blocks[p].append((name, region, _whole_index(region), role))
        for name, pl in plan.placements.items():
            for p in range(n):
                idx = pl.block_index(plan.coord_in(pl, p))
                if idx is None:
                    continue
                box = pl.block_box(idx)
                if name != plan.output:
                    role = _INPUT
                else:
                    role = _PRIMARY if plan.primary.get(idx) == p else _REPLICA
                owned_box[p][name] = box
                self.blocks[p].append((name, box, box_index(box, _ORIGIN[len(box)]), role))
        self.owned_words = [sum(words(b) for b in ob.values()) for ob in owned_box]
        self.leaves: dict[int, EntryLeaves] = {}  # leaves over stored entries, per Compute
        for p in range(n):
            for op in plan.ops(p):
                if isinstance(op, Compute) and op.work is not None:
                    self.leaves[id(op)] = EntryLeaves(op.work, dtypes[plan.output])
        relayed = {
            (m.step, m.tensor, m.dst, m.box): m.hop
            for m in plan.messages
            if m.kind == FETCH and m.relay
        }
        self.partial_route = {
            (m.step, m.src, m.box): (m.hop, m.relay) for m in plan.messages if m.kind == PARTIAL
        }
        by_step = [ops_by_step(plan, p) for p in range(n)]
        # routing: each relay's fetches, where the pieces it passes on lie in its buffer
        self.fetch_of: dict[tuple[int, str, int], Fetch] = {}
        self._copies: dict[tuple[int, str, int], dict[Any, Any]] = {}
        if relayed:
            for p in range(n):
                for op in LocalRuntime.split(plan.ops(p))["fetch"]:
                    self.fetch_of[op.step, op.tensor, p] = op
        self.fetches: list[list[list[tuple]]] = []
        self.work: list[list[list[Any]]] = []
        self.fetch_words: list[int] = []
        self.side_by_side: list[bool] = []
        for s in range(nsteps):
            fs, ws, copied = [], [], 0
            for p in range(n):
                phase = LocalRuntime.split(by_step[p][s])
                fs.append([self._fetch(op, p, owned_box[p], relayed) for op in phase["fetch"]])
                copied += sum(
                    words(piece) for op in phase["fetch"] if not op.view for _, piece in op.pieces
                )
                ws.append(phase["work"])
            self.fetches.append(fs)
            self.work.append(ws)
            self.fetch_words.append(copied)
            # leaves over stored entries run one thread each and let go of the GIL: the
            # processors of such a step run side by side (dense leaves get every core from
            # BLAS, so their processors run one after another)
            self.side_by_side.append(
                n > 1
                and any(isinstance(op, Compute) and op.work is not None for w in ws for op in w)
            )
        self._read_whole(dtypes)
        self.finals = [LocalRuntime.split(by_step[p][nsteps])["final"] for p in range(n)]
        self.spare: list[_Buffers] = []  # buffers of an earlier run, free to take
        self.results = Recycler(RESULTS_KEPT)  # large results of earlier runs (see result)
        self.nlevels = plan.machine.nlevels if plan.machine else 1
        # whether the primary blocks of the output, every one a box of the result, cover it
        # (then each processor zeroes its own block, in its own thread, before it first adds
        # into it: see result)
        out_blocks = [
            (box, sl)
            for blocks in self.blocks
            for name, box, sl, role in blocks
            if name == plan.output and role == _PRIMARY
        ]
        pattern = plan.patterns.get(plan.output)
        size = pattern.nnz if pattern is not None else math.prod(plan.placements[plan.output].shape)
        self.blocks_cover = (
            all(all(isinstance(x, slice) for x in sl) for _, sl in out_blocks)
            and sum(math.prod(shape(box)) for box, _ in out_blocks) == size
        )

    def _read_whole(self, dtypes: dict[str, Any]) -> None:
        """Leaves over stored entries that read a gathered input where the caller's whole
        array holds it: in a one-step plan, a processor's fetch of rows of a dense input
        (times the whole of its other dimensions) is read by its leaves alone; given the
        input whole, those leaves read it there by global rows (the rows each entry reads in
        the buffer, mapped through the gathered rows), and nothing is copied. The message
        is still counted, as for any fetch read in place (``borrow``, ``inplace``).

        ``whole[p]``: ``{tensor: words of the buffer it stands for}`` (empty: none);
        ``whole_leaves[id(op)]``: the leaves of Compute ``op`` reading them so."""
        plan = self.plan
        self.whole: list[dict[str, int]] = [{} for _ in range(plan.nprocs)]
        self.whole_leaves: dict[int, EntryLeaves] = {}
        if plan.nsteps != 1:
            return  # (a buffer may be read over several steps)
        for p in range(plan.nprocs):
            rows: dict[str, np.ndarray] = {}
            for item in self.fetches[0][p]:
                op, what, tensor = item[0], item[1], item[2]
                pl = plan.placements.get(tensor)
                if what != _BUFFER or tensor == plan.output or pl is None or item[9] is not None:
                    continue  # (a run of rows is read in place already: ``inplace``)
                got = _gathered_rows(op.box, tuple(pl.shape))
                if got is not None and all(pc[5] is None for pc in item[6]):
                    rows[tensor] = got
            if not rows:
                continue
            computes = [op for op in self.work[0][p] if isinstance(op, Compute)]
            if any(op.work is None or any(t in rows for t, _ in op.work.views) for op in computes):
                continue  # a dense leaf, or a view of the buffer: it stays a buffer
            for op in computes:
                w = op.work
                terms = tuple(
                    dataclasses.replace(
                        t,
                        dense=tuple(
                            (name, rows[name][np.asarray(r)] if name in rows else r, letters)
                            for name, r, letters in t.dense
                        ),
                    )
                    for t in w.terms
                )
                self.whole_leaves[id(op)] = EntryLeaves(
                    dataclasses.replace(w, terms=terms), dtypes[plan.output]
                )
            self.whole[p] = {
                item[2]: words(item[3]) for item in self.fetches[0][p] if item[2] in rows
            }

    def result(self, shape: tuple[int, ...], dtype: Any) -> tuple[np.ndarray, bool]:
        """An array for a run's result, and whether it is zeroed. A small one is zeroed
        here; a large one (over :data:`TOUCH_MAX` bytes) is an earlier run's result that
        nothing holds any more where there is one (a loop reruns the kernel and drops the
        result it read: CG's ``q``), zeroed here only where the processors' own blocks do
        not cover it: otherwise each processor zeroes its block in its own thread where it
        first writes it (:meth:`~distal.runtime.store.Store.own_output`), side by side with
        the others and just before its leaves write there, or not at all where its leaf
        writes every element (an SpMV's block of rows, each with an entry); one pass over
        the result on one core was a fifth of a 2-processor SpMV of 5 M entries."""
        dt = np.dtype(dtype)
        if math.prod(shape) * dt.itemsize <= TOUCH_MAX:
            return _zeros(shape, dt), True
        zero = not self.blocks_cover
        return self.results.take(shape, dt, zero=zero), zero

    def level(self, src: int, dst: int) -> int:
        """Machine level a message from ``src`` to ``dst`` crosses (cached)."""
        lv = self.levels.get((src, dst))
        if lv is None:
            lv = self.levels[src, dst] = self.plan.level_of(src, dst)
        return lv

    def _fetch(self, op: Fetch, p: int, owned: dict[str, Box], relayed: dict) -> tuple:
        if op.box is None:
            return (op, _NOTHING, op.tensor, None, (), (), (), False, False, None)
        if op.view:
            own_sl = where(op.box, owned[op.tensor])
            return (op, _VIEW, op.tensor, op.box, (), own_sl, (), False, False, None)
        pieces = []
        for src, piece in op.pieces:
            hop = relayed.get((op.step, op.tensor, p, piece))
            src_box = None if hop is not None else self._owner_box(op.tensor, src)
            if hop is not None:
                src_ix = self._relay_index(op.step, op.tensor, src, piece)
            else:
                src_ix = None if src_box is None else where(piece, src_box)
            pieces.append(
                (
                    src,
                    where(piece, op.box),
                    src_ix,
                    words(piece),
                    self.level(src, p),
                    hop,
                    piece,
                )
            )
        whole = (
            len(pieces) == 1
            and pieces[0][5] is None
            and isinstance(op.box, tuple)
            and pieces[0][6] == op.box
        )
        is_input = op.tensor != self.plan.output
        borrow = whole and is_input
        direct = all(pc[5] is None for pc in pieces)
        inplace = _in_caller_array(op.box) if is_input and direct else None
        return (
            op, _BUFFER, op.tensor, op.box, shape(op.box), (), tuple(pieces), whole, borrow,
            inplace,
        )  # fmt: skip

    def _relay_index(self, step: int, tensor: str, relay: int, piece: Any) -> Any:
        """Where a piece that ``relay`` passes on lies in its own fetch buffer: its own copy
        of the same region (:func:`content`), located there."""
        key = (step, tensor, relay)
        op = self.fetch_of[key]
        if isinstance(piece, tuple):
            return where(piece, op.box)
        copies = self._copies.get(key)
        if copies is None:
            copies = self._copies[key] = {content(x): x for _, x in op.pieces}
        return where(copies[content(piece)], op.box)

    @property
    def plan(self) -> Plan:
        """The plan (alive while a run of it holds it)."""
        plan = self._plan()
        if plan is None:
            raise InternalError("a prepared plan was used after its plan was dropped")
        return plan

    def _owner_box(self, tensor: str, p: int) -> Any:
        for name, box, _, _ in self.blocks[p]:
            if name == tensor:
                return box
        return None


PREPARED_PLANS = 16  # plans whose prepared runs are kept (the most recently prepared): an
# iterative program runs several kernels per iteration (CG: 7, with the copy kernels more)
#: by plan, each dropped with its plan (its leaves, index arrays and recycled results)
_PREPARED = WeakCache(PREPARED_PLANS)


def prepared(plan: Plan, dtypes: dict[str, Any]) -> Prepared:
    """The run-independent part of executing ``plan`` here (made once, then reused)."""
    e = _PREPARED.get(plan)
    if e is not None:
        return e
    e = Prepared(plan, dtypes)
    _PREPARED.put(plan, e)
    return e


class LocalRuntime(Interpreter):
    """Executes a plan in this process: a handler per instruction type, in three phases
    (``fetch``: a step's fetches, copied ahead of the step before; ``work``: the step's
    output buffer and leaves; ``final``: finished blocks copied to the other replicas)."""

    #: the sender's Flush / the receiver's copy moves their data; nothing to do or trace
    ignores = (Reduce, SendFinal, Forward, Combine)

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
        self.prep = prepared(plan, dtypes)
        self.pending_fetch: list[tuple] = []
        self.pending_partial: list[tuple] = []
        self.bufs = _Buffers()
        self.borrowed: dict[int, np.ndarray] = {}  # fetched inputs' blocks read in place
        self.caller: dict[str, np.ndarray] = {}  # the inputs given whole, by name
        #: this run's processors whose leaves read gathered inputs in the caller's arrays
        #: (see Prepared._read_whole), and those arrays' views standing for the buffers, by
        #: id, with the words of the buffer each stands for (what the memory model counts)
        self.whole_now: set[int] = set()
        self.stand_in: dict[int, tuple[np.ndarray, int]] = {}

    def run(self, inputs: dict[str, Any]) -> tuple[Any, Stats, float]:
        """Scatter the inputs, execute every step, gather the output."""
        plan, prep = self.plan, self.prep
        out_dtype = self.dtypes[plan.output]
        procs = [Store(p, plan.output, out_dtype) for p in range(plan.nprocs)]
        pattern = plan.patterns.get(plan.output)
        result, zeroed = prep.result(
            (pattern.nnz,) if pattern is not None else plan.placements[plan.output].shape,
            out_dtype,
        )
        scatter = []  # owned output blocks that cannot be views of the result
        for q in procs:
            owned = q.owned
            for name, box, sl, role in prep.blocks[q.p]:
                if role == _INPUT:
                    owned[name] = (self._input_block(name, inputs[name], box, sl), box)
                elif role == _PRIMARY:
                    # the reducer's block is a view of the result: gathering is free
                    if all(isinstance(x, slice) for x in sl):
                        owned[name] = (result[sl], box)
                        q.own_dirty = not zeroed
                    else:
                        owned[name] = (_zeros(shape(box), out_dtype), box)
                        scatter.append((owned[name][0], sl))
                else:
                    owned[name] = (_zeros(shape(box), out_dtype), box)
        stats = Stats.zeros(plan.nprocs, prep.nlevels)
        try:
            self.bufs = prep.spare.pop()
        except IndexError:
            self.bufs = _Buffers()
        self.borrowed = {}
        # inputs given as arrays of their dtype: their owned blocks are views of them, and a
        # fetched buffer that is one box of them is read there too
        self.caller = {
            name: data
            for name, data in inputs.items()
            if isinstance(data, np.ndarray) and data.dtype == self.dtypes.get(name)
            and name != plan.output
        }  # fmt: skip
        self.whole_now = {
            p
            for p, ts in enumerate(prep.whole)
            if ts and all(t in self.caller and self.caller[t].flags.c_contiguous for t in ts)
        }
        # a scipy matrix's own 32-bit column indices of a processor's entries may stand for
        # its leaves' copy, over the vector given whole (``TermLeaf.__call__``)
        for q in procs:
            for name, box, sl, role in prep.blocks[q.p]:
                crd32 = getattr(inputs.get(name), "_crd32", None)
                if role == _INPUT and crd32 is not None and isinstance(box, Entries):
                    cut = sl[0] if isinstance(sl, tuple) and len(sl) == 1 else sl
                    if isinstance(cut, slice):
                        q.crd[name] = crd32[cut]
            if q.crd:
                q.whole = {t: a for t, a in self.caller.items() if a.flags.c_contiguous}
        start = time.perf_counter()
        self.trace = Recorder()
        if plan.nsteps:
            self._fetch_step(0, procs, stats)
            self._relay_fetches(procs, stats)
            for q in procs:
                q.swap()
        bar = (
            Progress(plan.nsteps, plan.nprocs, enabled=self.progress)
            if progress_wanted(self.progress, sys.stderr)
            else _NO_BAR
        )
        try:
            for s in range(plan.nsteps):
                self._step(s, procs, stats, bar)
        finally:
            bar.close()
        for q in procs:
            stats.held(q.p, self._held(q))
        for q in procs:
            for op in prep.finals[q.p]:
                self._exec(q, op, procs, stats)
        for q in procs:
            if q.own_dirty:
                q.own_output()  # (a block nothing wrote into is zero all the same)
        for block, sl in scatter:
            result[sl] = block
        if pattern is not None:  # a sparse output: its values in the bound pattern (the
            # buffer itself, read-only: the recycler reuses it only once the array is gone)
            result = pattern.with_values(result, copy=False)
        seconds = time.perf_counter() - start
        self.borrowed, self.caller, self.whole_now, self.stand_in = {}, {}, set(), {}
        if self.bufs.nbytes <= SPARE_BYTES and not prep.spare:
            for q in procs:
                self._release(q, q.buffers)
                self._release(q, q.next)
            prep.spare.append(self.bufs)
        return result, stats, seconds

    def _release(self, q: Store, held: dict[str, Any]) -> None:
        """Give ``held``'s fetch buffers back (they are not used again in this run)."""
        for b in held.values():
            if b is not None:
                self.bufs.give(b[0])
        held.clear()

    def _step(self, s: int, procs: list[Store], stats: Stats, bar: Progress | _NoBar) -> None:
        """Step ``s`` of every processor: prefetch ``s+1``, compute, flush, then reduce.

        The prefetch copies run before the computation, not beside it: every leaf's BLAS call
        uses all the cores, and a copy running on one of them holds up the BLAS thread there
        (on 2 cores, GEMM n=4096 went from 0.86x to 0.90x numpy with the copies moved out).
        """
        plan, prep = self.plan, self.prep
        if s + 1 < plan.nsteps:
            self._fetch_step(s + 1, procs, stats)
        work = prep.work[s]
        if prep.side_by_side[s]:

            def run(q: Store) -> None:
                for op in work[q.p]:
                    self._exec(q, op, procs, stats)

            side_by_side(run, procs)  # the first here: one hand-over fewer per step
            for q in procs:
                bar.advance(q.p, s)
        else:
            for q in procs:
                for op in work[q.p]:
                    self._exec(q, op, procs, stats)
                bar.advance(q.p, s)
        self._relay_fetches(procs, stats)
        self._send_partials(procs, stats)
        for q in procs:
            stats.held(q.p, self._held(q))
            t = self.trace.now()
            words = q.reduce_inbox()
            if words and self.tracing:
                self.trace.add(q.p, REDUCE, s, t, words)
            q.end_step()
            for name, b in q.next.items():
                old = q.buffers.get(name)
                if old is not None and (b is None or old[0] is not b[0]):
                    self.bufs.give(old[0])
            q.swap()

    def _held(self, q: Store) -> int:
        """``q.held_words()`` with the owned blocks' size known in advance."""
        total = self.prep.owned_words[q.p]
        borrowed = self.borrowed  # counted as the copies they stand for
        stand_in = self.stand_in
        for a, _ in q.buffers.values():
            if id(a) in stand_in:
                total += stand_in[id(a)][1]
            elif a.base is None or id(a) in borrowed:
                total += a.size
        for b in q.next.values():
            if b is None:
                continue
            if id(b[0]) in stand_in:
                total += stand_in[id(b[0])][1]
            elif b[0].base is None or id(b[0]) in borrowed:
                total += b[0].size
        if q.partial is not None and not q.direct:
            total += q.partial[0].size
        for a, _ in q.inbox:
            total += a.size
        for a, _ in q.combined:
            total += a.size
        return total

    def _fetch_step(self, s: int, procs: list[Store], stats: Stats) -> None:
        """Every processor's fetches of step ``s``: large steps' copies spread over the cores
        (their buffers made and counted here, filled by :func:`_copy_all`)."""
        if self.prep.fetch_words[s] < PARALLEL_COPY_MIN:
            for q in procs:
                self._fetch_all(q, s, procs, stats)
            return
        jobs: list[Job] = []
        events: list[tuple[int, int]] = []
        t = self.trace.now() if self.tracing else 0.0
        for q in procs:
            self._fetch_all(q, s, procs, stats, jobs, events)
        _copy_all(jobs)
        if self.tracing:
            for p, words in events:
                self.trace.add(p, FETCH, s, t, words)

    def _fetch_all(
        self,
        q: Store,
        s: int,
        procs: list[Store],
        stats: Stats,
        jobs: list[Job] | None = None,
        events: list[tuple[int, int]] | None = None,
    ) -> None:
        """Carry out processor ``q``'s fetches of step ``s`` (into its next buffers); with
        ``jobs``, the copies are left there and the trace events in ``events``."""
        for item in self.prep.fetches[s][q.p]:
            self.visit(item[0], q, item, procs, stats, jobs, events)

    @impl(Fetch, phase="fetch")
    def _fetch(
        self,
        op: Fetch,
        q: Store,
        item: tuple,
        procs: list[Store],
        stats: Stats,
        jobs: list[Job] | None,
        events: list[tuple[int, int]] | None,
    ) -> None:
        """Carry out fetch ``op`` of processor ``q`` as derived once per plan (``item``: see
        :class:`Prepared`), into its next buffers; ``jobs`` and ``events`` as for
        :meth:`_fetch_all`."""
        p = q.p
        tracing = self.tracing and events is None
        _, what, tensor, box, shape, own_sl, pieces, whole, borrow, inplace = item
        caller = self.caller.get(tensor) if inplace is not None else None
        t = self.trace.now() if tracing else 0.0
        words = 0
        try:
            if p in self.whole_now and tensor in self.prep.whole[p]:
                # its leaves read the caller's array by global rows
                view = self.caller[tensor].view()
                view.flags.writeable = False
                self.stand_in[id(view)] = (view, self.prep.whole[p][tensor])
                for src, _, _, w, level, _, piece in pieces:
                    if src != p:
                        stats.record(src, p, w, level, index_words(piece))
                        words += w
                q.next[tensor] = (view, box)
            elif what == _NOTHING:
                q.next[tensor] = None
            elif what == _VIEW:
                q.next[tensor] = (read(q.owned[tensor][0], own_sl), box)
            elif caller is not None:  # the caller's array holds the buffer as it is
                view = caller[inplace]
                view.flags.writeable = False  # as the owned blocks: inputs are read only
                self.borrowed[id(view)] = view
                for src, _, _, w, level, _, piece in pieces:
                    if src != p:
                        stats.record(src, p, w, level, index_words(piece))
                        words += w
                q.next[tensor] = (view, box)
            elif borrow:  # an input's block is never written: read it where it is
                src, _, ssl, w, level, _, _ = pieces[0]
                view = read(procs[src].owned[tensor][0], ssl)
                self.borrowed[id(view)] = view
                if src != p:
                    stats.record(src, p, w, level, index_words(pieces[0][6]))
                    words = w
                q.next[tensor] = (view, box)
            else:
                if whole and jobs is None:
                    src, _, ssl, w, level, _, _ = pieces[0]
                    buf = self.bufs.take(shape, self.dtypes[tensor])
                    copy_into(buf, procs[src].owned[tensor][0], ssl)
                    if src != p:
                        stats.record(src, p, w, level, index_words(pieces[0][6]))
                        words = w
                else:
                    buf = self.bufs.take(shape, self.dtypes[tensor])
                    for src, dsl, ssl, w, level, hop, piece in pieces:
                        if hop is not None:  # from the relay's fetch buffer, once it has it
                            self.pending_fetch.append((hop, p, tensor, dsl, ssl, piece, src))
                            continue
                        if jobs is None:
                            _copy((buf, dsl, procs[src].owned[tensor][0], ssl, w))
                        else:
                            jobs.append((buf, dsl, procs[src].owned[tensor][0], ssl, w))
                        if src != p:
                            stats.record(src, p, w, level, index_words(piece))
                            words += w
                q.next[tensor] = (buf, box)
        except Exception as e:
            raise RuntimeFailure(f"processor {p} failed at {op}: {e}", processor=p) from e
        if tracing:
            self.trace.add(p, FETCH, op.step, t, words)
        elif events is not None:
            events.append((p, words))

    def _exec(self, q: Store, op: Any, procs: list[Store], stats: Stats) -> None:
        """Carry out ``op`` of processor ``q`` by its handler (and trace it)."""
        t = self.trace.now() if self.tracing else 0.0
        try:
            words = self.table[type(op)](self, op, q, procs, stats)
        except Exception as e:
            raise RuntimeFailure(f"processor {q.p} failed at {op}: {e}", processor=q.p) from e
        if self.tracing:
            kind = _KIND.get(type(op))
            if kind is not None:
                self.trace.add(q.p, kind, getattr(op, "step", self.plan.nsteps), t, words)

    @impl(Compute, phase="work")
    def _compute(self, op: Compute, q: Store, procs: list[Store], stats: Stats) -> int:
        leaves = (
            self.prep.whole_leaves.get(id(op))
            if q.p in self.whole_now
            else self.prep.leaves.get(id(op))
        )
        stats.computed(q.p, q.compute(op, self.kernels, leaves))
        return 0

    @impl(OpenOutput, phase="work")
    def _open_output(self, op: OpenOutput, q: Store, procs: list[Store], stats: Stats) -> int:
        q.open_output(op)
        return 0

    @impl(Flush, phase="work")
    def _flush(self, op: Flush, q: Store, procs: list[Store], stats: Stats) -> int:
        """Local pieces now; the sends after every processor's work (:meth:`_send_partials`)."""
        q.flush_local(op)
        for dst, box in op.sends:
            hop, relay = self.prep.partial_route[op.step, q.p, box]
            self.pending_partial.append((hop, q.p, dst, box, relay))
        return 0

    @impl(RecvFinal, phase="final")
    def _recv_final(self, op: RecvFinal, q: Store, procs: list[Store], stats: Stats) -> int:
        src_arr, sorigin = procs[op.src].own_output()
        own, origin = q.own_output()
        own[box_index(op.box, origin)] = src_arr[box_index(op.box, sorigin)].copy()
        return self._count(stats, op.src, q.p, op.box) * (1 + (op.src == q.p))

    def _relay_fetches(self, procs: list[Store], stats: Stats) -> None:
        """Copies of routed pieces out of relays' buffers, nearest the owner first."""
        if not self.pending_fetch:
            return
        for _, dst, tensor, dsl, ssl, piece, src in sorted(self.pending_fetch, key=lambda x: x[:2]):
            sbuf, _ = procs[src].next[tensor]  # type: ignore[misc]
            dbuf, _ = procs[dst].next[tensor]  # type: ignore[misc]
            value = read(sbuf, ssl)
            if type(dsl) is tuple:
                dbuf[dsl] = value
            else:
                dsl.put(dbuf, value)
            self._count(stats, src, dst, piece)
        self.pending_fetch.clear()

    def _send_partials(self, procs: list[Store], stats: Stats) -> None:
        """Partial sums of this step: deepest tree nodes first, so a relay's message
        carries its children's sums (``Combine``) along with its own."""
        if not self.pending_partial:
            return
        for _, src, dst, box, relay in sorted(self.pending_partial, key=lambda x: (-x[0], x[1])):
            arr, origin = procs[src].clean_partial()
            piece = np.array(read(arr, where(box, origin)))
            self._count(stats, src, dst, box)
            if relay:
                parr, porigin = procs[dst].clean_partial()
                add_at(parr, where(box, porigin), piece)
                procs[dst].combined.append((piece, box))
            else:
                procs[dst].inbox.append((piece, box))
        self.pending_partial.clear()

    def _count(self, stats: Stats, src: int, dst: int, box: Any) -> int:
        n = words(box)
        stats.record(src, dst, n, self.prep.level(src, dst), index_words(box))
        return n

    def _input_block(self, name: str, data: Any, box: Box, sl: tuple) -> np.ndarray:
        """A processor's owned block of an input: a read-only view of the caller's array
        (placing inputs is not traffic, and the caller's data can never be changed),
        or a block read from a block source."""
        if isinstance(box, Entries):  # a sparse input: the values of its owned entries
            vals = np.asarray(data.vals, dtype=self.dtypes[name])
            out = vals[sl]
            out.flags.writeable = False
            return out
        if isinstance(data, np.ndarray) and data.dtype == self.dtypes[name]:
            view = data[sl]
            view.flags.writeable = False
            return view
        return read_block(name, data, box, self.dtypes[name])
