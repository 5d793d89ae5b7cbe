"""One elastic run: build the tasks, hand them to Dask, collect blocks and the summary.

The driver gets the Dask client and ``as_completed`` from :mod:`distal.runtime.dask` (the
only module importing ``distributed``); it never places or retries a task itself.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from distal.errors import InputError, NotSupportedYet, RuntimeFailure
from distal.plan.ir import Plan, RecvFinal
from distal.plan.region import Entries, Region, shape, words
from distal.plan.stats import Stats
from distal.progress import Progress
from distal.runtime.checkpoint import (
    CORRUPT,
    UNAUTHENTICATED,
    CheckpointStore,
    combine,
    describe,
    fingerprint_array,
    input_fingerprints,
    run_key,
)
from distal.runtime.checkpoint_auth import Sealer, content_digest
from distal.runtime.elastic.feeder import Feeder, release
from distal.runtime.elastic.held import WorkerValue
from distal.runtime.elastic.options import Options
from distal.runtime.elastic.summary import Events, measured_traffic, summarize
from distal.runtime.elastic.tasks import (
    CheckFailed,
    Ctx,
    Traffic,
    VerificationFailed,
    agree_block_task,
    agree_task,
    check_reduce_task,
    check_task,
    drain,
    hash_block,
    hold_unit,
    input_block,
    plan_key,
    recheck_block_task,
    recheck_task,
    reduce_task,
    source_block,
    transfer_bytes,
    unit_task,
)
from distal.runtime.elastic.units import (
    ForgedDescription,
    Key,
    Span,
    Unit,
    block_name,
    block_region,
    carries_entries,
    decompose,
    description,
    fuse,
)
from distal.runtime.result import Result
from distal.runtime.source import is_block_source
from distal.runtime.weakcache import WeakCache
from distal.typing import Box, box_index, box_intersect, box_is_empty, box_volume

#: plans whose units' held descriptions are kept (``Driver.unit_arg``), the most recently
#: used; each entry (a :class:`_Held`) goes with its plan
HELD_PLANS = 16
_HELD = WeakCache(HELD_PLANS)


@dataclass
class _Held:
    """A plan's held unit descriptions on one client: by unit name, the future and the
    digest of its bytes; ``forged``: one was found forged, so the driver sends them."""

    client: Any
    futures: dict[str, tuple[Any, str]] = field(default_factory=dict)
    forged: bool = False


STATS_NOTE = (
    "dask runtime: Result.stats words, index words and messages are counted by the tasks "
    "from the pieces of the plan's messages they received (each unit's fetch pieces in the "
    "input blocks it was handed, each reduction's partial pieces, each output block's "
    "replica copies), between the plan's virtual processors; iterations are what the "
    "units' leaves visited; work loaded from a checkpoint moved nothing and counts nothing; "
    "peak_words is the plan's memory model. Dask moves whole blocks and partials between "
    "workers wherever it placed the tasks: those bytes are extra['dask_transfer_bytes']"
)


def workers(client: Any) -> dict[str, Any]:
    """The pool's workers, by address, as the scheduler sees them now.

    Asked of the scheduler directly: ``Client.scheduler_info()`` returns the client's cached
    copy, which its periodic refresh may overwrite, between the fetch and the return, with
    one that lists no workers.
    """
    if getattr(client, "asynchronous", False) or not hasattr(client, "sync"):
        return dict(client.scheduler_info(n_workers=-1).get("workers", {}))
    info = client.sync(client.scheduler.identity, n_workers=-1)
    return dict(info.get("workers", {}))


def _wait_for_result(ac: Any, seconds: float) -> None:
    """Wait up to ``seconds`` for Dask's ``as_completed`` ``ac`` to hold a finished future,
    woken by it when one arrives (it notifies its ``thread_condition`` after queueing
    each): a kernel of short tasks is not held up by a polling interval, as a plain sleep
    held each of a CG iteration's kernels by a few milliseconds."""
    cond = getattr(ac, "thread_condition", None)
    if cond is None or not hasattr(ac, "has_ready"):  # another as_completed: poll
        time.sleep(seconds)
        return
    with cond:
        if not ac.has_ready():
            cond.wait(timeout=seconds)


def drain_checkpoint(
    client: Any, topic: str, root: str, events: Events, patience: float = 10.0
) -> None:
    """Wait for the workers' checkpoint writes, then for the ``done`` events they log.

    Every result is with the driver by now; a write that failed fails the run (the
    user asked for a checkpoint), a worker that died meanwhile only loses entries that a
    rerun recomputes. The events travel by another route than ``Client.run``'s reply, so
    the driver waits (up to ``patience`` seconds) until it has heard, for each worker,
    every entry it reports written (by name: a forged report in the worker's name must not
    end the wait before the honest one arrives).
    """
    replies = client.run(drain, topic, root, on_error="return")
    expect: dict[str, dict[str, int]] = {}
    for addr, r in replies.items():
        if isinstance(r, RuntimeFailure):
            raise r
        if not isinstance(r, BaseException):
            expect[addr] = dict(r)
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        heard = events.written()
        if all(heard[(a, e)] >= n for a, es in expect.items() for e, n in es.items()):
            return
        time.sleep(0.01)
    events.sync()


def task_exception(f: Any) -> BaseException | None:
    """What future ``f`` raised (or why it cannot say: cancelled, lost)."""
    try:
        return f.exception(timeout=10)
    except Exception as e:  # cancelled or lost
        return e


POOL_FRESH = 0.5
"""Seconds a look at the pool's workers is reused for (see :meth:`Driver.pool`)."""

PLACED_KEPT = 1024
"""Input blocks a session value keeps placed on the workers (per value), oldest dropped."""


def _placed_key(region: Region, dtype: np.dtype) -> tuple:
    """What identifies an input block placed from this process across runs: its box, or
    the array of stored positions it holds (by identity: a bound plan, reused for every run
    on the same pattern, keeps the same arrays; the cache keeps that array alive, so its id
    is not reused), and its dtype."""
    if isinstance(region, Entries):
        return ("entries", id(region.positions), dtype.str)
    return ("box", region, dtype.str)


def _work_shape(work: Any) -> tuple[int, ...]:
    """The output buffer a leaf over stored entries adds into."""
    ext = dict(work.extents)
    return (work.out_rows, *(ext[c] for c in work.out_letters))


class Driver:
    """One run: build the tasks, hand them to Dask, collect blocks and the summary.

    ``client`` is a ``distributed.Client``; ``as_completed`` and ``get_worker`` are Dask's.
    """

    def __init__(
        self,
        kernel: Any,
        data: dict[str, Any],
        opts: Options,
        client: Any,
        as_completed: Callable[[Iterable[Any]], Any],
        get_worker: Callable[[], Any],
    ) -> None:
        self.kernel, self.data, self.opts, self.client = kernel, data, opts, client
        self.as_completed, self.get_worker = as_completed, get_worker
        self.plan: Plan = kernel.plan
        self.nonce = uuid.uuid4().hex[:12]
        self.out_pl = self.plan.placements.get(self.plan.output)
        self.pattern = self.plan.patterns.get(self.plan.output)  # a sparse output's
        self.out_dtype = np.dtype(kernel.dtypes[self.plan.output])
        self.hold = bool(opts._hold) and self.pattern is None
        self.inputs_f: dict[tuple[str, tuple[int, ...]], Any] = {}
        # keys of input futures that outlive the run (held values' blocks, placed blocks)
        self.shared: set[str] = set()
        # copies of input blocks made for speculative copies, by (tensor, key, worker)
        self.pinned_inputs: dict[tuple[str, tuple[int, ...], str], Any] = {}
        # _hold: the output's finished blocks, left on the workers, by box
        self.kept: dict[Box, Any] = {}
        self.units: dict[str, Unit] = {}
        # messages counted on the driver as results arrive (see _delivered)
        self.delivered: Traffic = []
        self.replicas = self._replica_copies()
        # verification: workers caught lying (no further tasks go there), what was rejected
        self.excluded: set[str] = set(opts._excluded)
        self._pool: set[str] = set()  # see pool()
        self._info: dict[str, Any] = {}
        self._pool_at = -math.inf
        # workers holding a unit past its deadline: new units prefer the others
        self.stalled_workers: set[str] = set()
        self.rejections: list[dict[str, Any]] = []
        self.rechecked = 0
        self.n_reduce = 0  # reductions submitted as verify=k copies (round-robin start)
        # the checks' random vectors derive from a secret only the check tasks carry, so a
        # worker computing a unit cannot know the vectors its result will be tested with
        self.secret = secrets.token_bytes(16)
        self.events: Events | None = None
        self.present: set[str] = set()
        self.feeder: Feeder | None = None
        # checkpoint_key=: the driver alone holds the key (see _authenticate and _seal)
        key = opts.checkpoint_key
        self.sealer = Sealer(key) if key is not None else None
        self.sealed: dict[str, str] = {}  # entry -> content digest its seal vouched for
        self.unauthenticated: set[str] = set()  # entries refused (recomputed, never used)
        self.received: dict[str, str] = {}  # block -> digest of what reached the driver
        self.to_seal: dict[str, str] = {}  # entry -> digest reported, not sealed yet
        self.reports: dict[str, set[str]] = {}  # entry -> every digest reported in the run
        self.writable: set[str] = set()  # the entries this run's tasks may write
        self.heard = 0  # events already looked at for entries to seal
        self.store: CheckpointStore | None = None

    def _replica_copies(self) -> list[tuple[int, int, Box]]:
        """The plan's copies of finished output pieces to other replicas ``(src, dst, box)``."""
        out = []
        for p, prog in enumerate(self.plan.programs):
            for op in prog:
                if isinstance(op, RecvFinal):
                    out.append((op.src, p, op.box))
        return out

    def _delivered(self, box: Region, unit: Unit | None) -> None:
        """Count what a finished block brings to the driver, in the plan's terms.

        A unit that alone makes its block (``final``) sends its partial to the block's
        reducer when it is not that processor; and every replica of the block gets its copy
        of it. The words are the elements of those pieces within the block.
        """
        if unit is not None:
            for dst, piece in unit.sends:
                assert isinstance(piece, tuple)
                assert isinstance(box, tuple)
                inter = box_intersect(piece, box) if box else piece
                self.delivered.append((unit.proc, dst, box_volume(inter), 0))
        for src, dst, rbox in self.replicas:
            assert isinstance(box, tuple)
            inter = box_intersect(rbox, box) if box else rbox
            if not box_is_empty(inter):
                self.delivered.append((src, dst, box_volume(inter), 0))

    def _output_blocks(self) -> dict[Key, Region]:
        """The output's blocks by key, each once (empty boxes left out): a placement's
        blocks with their reducers, or the stored entries each processor owns."""
        plan = self.plan
        if self.out_pl is None:
            regions = plan.owned[plan.output]
            return {(q,): r for q, r in enumerate(regions) if r is not None and words(r) > 0}
        pl = self.out_pl
        return {
            idx: pl.block_box(idx)
            for idx in sorted(plan.primary)
            if not (pl.block_box(idx) and box_is_empty(pl.block_box(idx)))
        }

    def _owners(self, blocks: dict[Key, Region]) -> dict[Key, int]:
        """The processor that reduces each output block (its own piece is summed first)."""
        if self.out_pl is None:
            return {idx: idx[0] for idx in blocks}
        return {idx: self.plan.primary[idx] for idx in blocks}

    def _place(self, value: np.ndarray, region: Region, arr: np.ndarray) -> None:
        """Write a finished block into the result (a box of the output, or its owned stored
        entries' values)."""
        if isinstance(region, Entries):
            value[region.positions] = arr
        else:
            value[box_index(region, ((0, 0),) * len(region))] = arr

    def _measured(self, events: Events) -> Stats:
        """``Stats`` from what the tasks and the driver counted (see ``STATS_NOTE``)."""
        plan = self.plan
        traffic, iterations = measured_traffic(events)
        stats = Stats.zeros(plan.nprocs, plan.machine.nlevels if plan.machine else 1)
        for src, dst, n, iw in [*traffic, *self.delivered]:
            stats.record(src, dst, n, plan.level_of(src, dst), iw)
        for p, n in iterations.items():
            stats.iterations[p] += n
        # memory per virtual processor has no counterpart on a Dask worker
        stats.peak_words = list(self.kernel.stats().peak_words)
        return stats

    def prefetch(self, units: list[Unit]) -> None:
        """Submit the input blocks of ``units`` (in order) before any unit.

        An input-block task is cheap, so Dask never steals it, and Dask places it by its
        estimate of each worker's occupancy, which does not know a worker is slow: submitted
        together with the first unit that needs it, it can land behind a slow worker's long
        unit and stall every unit that reads it while other workers idle. Submitted up
        front — as the MPI runtime places all inputs before it runs — the blocks are read
        while every worker is free.
        """
        for u in units:
            for t, idx in u.needs:
                self._block_future(t, idx)

    # the input blocks, each submitted once and shared by every unit that reads them
    def _block_future(self, t: str, idx: tuple[int, ...]) -> Any:
        key = (t, idx)
        if key not in self.inputs_f:
            box = block_region(self.plan, t, idx)
            dtype = np.dtype(self.kernel.dtypes[t])
            x = self.data[t]
            if isinstance(x, WorkerValue) and isinstance(box, tuple):
                # held on the workers: its block, or a cut of its blocks made there
                f = self.inputs_f[key] = x.part(box, dtype)
                self.shared.add(f.key)
                return f
            cache = self.opts._placed.get(t)
            ckey = _placed_key(box, dtype) if cache is not None else None
            if cache is not None and ckey in cache:
                f = self.inputs_f[key] = cache[ckey][1]
                self.shared.add(f.key)
                return f
            name = f"distal-in-{self.nonce}-{t}-{'.'.join(map(str, idx))}"
            f = self._submit_block(t, box, dtype, name)
            self.inputs_f[key] = f
            if cache is not None and not is_block_source(x):
                # placed: the session's next run reads it there (the positions kept with
                # it, so the key's id stays theirs)
                while len(cache) >= PLACED_KEPT:
                    cache.pop(next(iter(cache)))  # the oldest: a plan no longer used, likely
                cache[ckey] = (getattr(box, "positions", None), f)
                self.shared.add(f.key)
        return self.inputs_f[key]

    def _submit_block(self, t: str, box: Region, dtype: np.dtype, key: str, **where: Any) -> Any:
        """The task making input block ``box`` of ``t`` from this process's value (its data
        in the task), or reading it from a block source on the worker."""
        x = self.data[t]
        if isinstance(box, Entries):  # a sparse input: the values of its owned entries
            block = np.asarray(x.vals, dtype=dtype)[box.positions]
        elif is_block_source(x):
            return self.client.submit(source_block, t, x, box, dtype, key=key, pure=False, **where)
        else:
            # np.array, not ascontiguousarray: that makes a 0-d block (a scalar) 1-d
            block = np.array(x[box_index(box, ((0, 0),) * len(box))], dtype=dtype, order="C")
        with warnings.catch_warnings():
            # "large graph": the block travels in its task on purpose (see input_block)
            warnings.filterwarnings("ignore", message="Sending large graph")
            return self.client.submit(input_block, block, key=key, pure=False, **where)

    def _block_on(self, t: str, idx: tuple[int, ...], worker: str) -> Any:
        """Input block ``(t, idx)`` for a copy pinned to ``worker``: the run's own future
        once it has finished; before that, a copy of its task on ``worker`` (the original
        may be queued behind a stuck unit on the worker holding it: a copy sent away from
        that worker must not wait for it)."""
        f = self._block_future(t, idx)
        if f.status != "pending" or isinstance(self.data[t], WorkerValue):
            return f
        key = (t, idx, worker)
        if key not in self.pinned_inputs:
            box = block_region(self.plan, t, idx)
            dtype = np.dtype(self.kernel.dtypes[t])
            n = len(self.pinned_inputs)
            name = f"distal-in-{self.nonce}-{t}-{'.'.join(map(str, idx))}-on-{n}"
            self.pinned_inputs[key] = self._submit_block(
                t, box, dtype, name, workers=[worker], allow_other_workers=False
            )
        return self.pinned_inputs[key]

    def _fingerprints(self, units: list[Unit]) -> dict[str, str]:
        """Input fingerprints; block sources without ``fingerprint()`` hash the blocks read."""
        patterns = self.plan.patterns
        fps = input_fingerprints({t: x for t, x in self.data.items() if t not in patterns})
        for t, x in self.data.items():
            if t in patterns:  # the pattern decides the plan, the values the numbers
                fps[t] = f"pattern={x.pattern_fingerprint()};values={fingerprint_array(x.vals)}"
        for t, fp in fps.items():
            if fp is not None:
                continue
            idxs = sorted({idx for u in units for (tt, idx) in u.needs if tt == t})
            hashes = self.client.gather(
                [self.client.submit(hash_block, self._block_future(t, i), pure=False) for i in idxs]
            )
            fps[t] = combine({str(i): h for i, h in zip(idxs, hashes, strict=True)})
        return {t: str(fp) for t, fp in fps.items()}

    def run(self) -> Any:
        """Carry out the plan on the pool; the ``Result`` with the summary in ``extra``.

        Under ``verify=``, a held unit description found forged (a task's
        :class:`~.units.ForgedDescription`) ends this attempt: the plan's units get their
        descriptions from the driver from then on, and the run is made again (its
        checkpoint entries are only ever checked results, so nothing it wrote is lost or
        wrong)."""
        try:
            return self._run()
        except ForgedDescription:
            if self.opts.verify == 1:
                raise
            self.forged()
            again = Driver(
                self.kernel, self.data, self.opts, self.client, self.as_completed,
                self.get_worker,
            )  # fmt: skip
            # what this attempt found out stays found: whom it excluded, and why
            again.excluded |= self.excluded
            again.rejections = list(self.rejections)
            again.rechecked = self.rechecked
            res = again._run()
            for r in again.rejections:  # a rejected unit recomputed by the run made again
                if "recomputed_on" not in r and r.get("kind") != "reduction":
                    dones = [m for m in again.events.by_name().get(r["unit"], ())
                             if m["kind"] == "done"]  # fmt: skip
                    if dones:
                        r["recomputed_on"] = str(dones[-1]["worker"])
            return res

    def _run(self) -> Any:
        opts, plan, client = self.opts, self.plan, self.client
        t0 = time.perf_counter()
        units = decompose(plan, opts.granularity)
        if any(
            _work_shape(w) != shape(u.out_box) for u in units for _, _, ws in u.steps for w in ws
        ):
            raise NotSupportedYet(
                "a sparse kernel whose output buffer is held over several steps (communicate "
                f"{plan.output!r} outside the loop that streams its operands) is not in this "
                "version of the dask runtime (the local and mpi runtimes run it)"
            )
        blocks = self._output_blocks()
        units = fuse(units, blocks)
        self.units = {u.name: u for u in units}
        self.delivered = []
        finals = {u.pieces[0][0]: u for u in units if u.final}
        total = len(units) + len(blocks) - len(finals)
        store = self._store(units)
        whole = (self.pattern.nnz,) if self.pattern is not None else self.out_pl.shape
        # _hold: the blocks stay on the workers and no whole array is made here
        value = np.zeros((0,) if self.hold else whole, self.out_dtype)

        # Finished blocks come straight from the checkpoint (checksummed) on the driver.
        present = store.names() if store is not None else set()
        if store is not None and self.sealer is not None:
            present = self._authenticate(store, present)
        corrupt_blocks: set[str] = set()  # by name: the block's own task may find it too
        pending: dict[Key, Region] = {}
        for idx, box in blocks.items():
            arr = None
            if store is not None and block_name(idx) in present:
                arr, status = store.load(block_name(idx), self.sealed.get(block_name(idx)))
                if status == CORRUPT:
                    corrupt_blocks.add(block_name(idx))
                if status == UNAUTHENTICATED:
                    self._refuse(store, block_name(idx))
                    present.discard(block_name(idx))
            if arr is None:
                pending[idx] = box
            elif self.hold:
                self.kept[box] = client.submit(input_block, arr, pure=False)
            else:
                self._place(value, box, arr)
        needed = [u for u in units if any(idx in pending for idx, _ in u.pieces)]
        self.writable = {u.name for u in needed} | {block_name(i) for i in pending}
        reused_direct = total - len(needed) - len(set(pending) - set(finals))

        topic = f"distal-{self.nonce}"
        events = Events(client, topic)
        self.events, self.present = events, present
        ctx = Ctx(
            topic=topic,
            kernels=self.kernel.kernels,
            out_dtype=self.out_dtype,
            store=store,
            worker=self.get_worker,
            delay=float(opts._delay),
            slow=dict(opts._slow),
            trace=opts._trace,
            lie=frozenset(opts._lie),
            checksums=opts.verify_checksums,
            plan_key=plan_key(self.kernel.plan),
        )
        workers_before = set(self.pool())
        bar = Progress(total, enabled=opts.progress, label="tasks")
        try:
            # speculation: only with single copies (verify=k pins its copies on purpose)
            spec = opts.speculate and opts.copies == 1
            if opts.verify != 1 and len(self.allowed()) < 2:
                raise InputError(
                    f"verify={opts.verify!r} needs at least 2 workers; the pool has "
                    f"{len(self.allowed())}"
                )
            feeder = Feeder(
                self, ctx, needed, self._shapes(pending), present, set(finals), spec, opts.check,
                self._owners(blocks),
            )  # fmt: skip
            self.feeder = feeder
            self._collect(feeder, pending, value, bar, events, reused_direct)
            if store is not None:
                self._drain(topic, store.root, events)
            events.sync()
            self._seal(events)
        except BaseException:
            # released, not cancelled: the scheduler forgets what no one else wants either
            # way, and ``Client.cancel`` walks a key's dependents asserting each is wanted,
            # which a unit whose future was dropped while its reduction still needs it is
            # not (the assertion kills the client's stream, and the client reconnects)
            release([f for f in self.inputs_f.values() if f.key not in self.shared])
            release(list(self.pinned_inputs.values()))
            self.inputs_f.clear()
            self.pinned_inputs.clear()
            raise
        finally:
            bar.close()
            events.close()
        self.inputs_f.clear()
        self.pinned_inputs.clear()
        # every worker the scheduler lists answers (or fails) this one broadcast: its
        # addresses are the pool at the end, without another round trip
        moved = client.run(transfer_bytes, self.nonce, on_error="return")
        alive = {str(w) for w in moved}
        stats = self._measured(events)
        summary = summarize(
            events,
            total,
            logical={u.name for u in needed} | {block_name(i) for i in pending},
            verify=opts.copies,
            reused_direct=reused_direct,
            corrupt_blocks=corrupt_blocks,
            workers_before=workers_before,
            workers_after=alive,
            checkpoint=store.root if store is not None else None,
            speculative=feeder.n_dups,
            speculative_won=len(feeder.won),
        )
        summary.excluded_workers = sorted(self.excluded)
        summary.overdue = feeder.n_overdue
        blocks_out = {r["unit"] for r in self.rejections if r.get("kind") == "reduction"}
        summary.units_rejected = len({r["unit"] for r in self.rejections} - blocks_out)
        summary.reductions_rejected = len(blocks_out)
        summary.rejections = list(self.rejections)
        summary.rechecked = self.rechecked
        summary.unauthenticated = sorted(self.unauthenticated | events.unauthenticated())
        if opts.check:
            summary.checked = events.checked()
            summary.reductions_checked = events.checked(blocks=True)
            summary.unchecked = feeder.n_unchecked
        summary.seconds = time.perf_counter() - t0
        if store is not None:
            self._finish_checkpoint(store, units, blocks)
        if self.pattern is not None:  # a sparse output: its values in the bound pattern
            value = self.pattern.with_values(value)
        elif self.hold:
            value = WorkerValue(tuple(whole), self.out_dtype, dict(self.kept), client)
        return Result(
            value,
            stats,
            summary.seconds,
            tasks_executed=summary.tasks_executed,
            tasks_reused=summary.tasks_reused,
            extra={
                "summary": summary,
                "stats_note": STATS_NOTE,
                "checkpoint": store.root if store is not None else None,
                # bytes of this run's task results fetched worker to worker (the workers
                # alive at the end; inputs travel in their tasks, results to the driver)
                "dask_transfer_bytes": sum(
                    int(n) for n in moved.values() if not isinstance(n, BaseException)
                ),
            },
        )

    def _store(self, units: list[Unit]) -> CheckpointStore | None:
        opts = self.opts
        if opts.checkpoint is None:
            return None
        if not isinstance(opts.checkpoint, str | os.PathLike):
            raise InputError(f"checkpoint must be a directory or URL, got {opts.checkpoint!r}")
        fps = self._fingerprints(units)
        gran = str(opts.granularity)
        store = CheckpointStore(
            opts.checkpoint,
            run_key(self.kernel, fps, gran),
            opts.fsync,
            sealed=self.sealer is not None,
        )
        self.store = store
        if store.protocol == "memory":
            pids = set(self.client.run(os.getpid).values())
            if pids - {os.getpid()}:
                raise InputError(
                    f"checkpoint {opts.checkpoint!r}: memory:// is private to each process, and "
                    "this pool's workers run in other processes; use a directory or shared URL"
                )
        if store.read_manifest() is None:
            try:
                store.write_manifest(
                    describe(self.kernel, fps, gran) | {"run": store.run, "complete": False}
                )
            except OSError as e:  # a file in the way, no permission, a read-only filesystem
                raise InputError(
                    f"checkpoint {opts.checkpoint!r} is not a usable location: "
                    f"cannot write {store.root}/manifest.json ({e})"
                ) from e
        return store

    def _workers(self) -> dict[str, Any]:
        """The pool's workers by address, as the scheduler listed them at most
        ``POOL_FRESH`` seconds ago: a unit's submission, its check's draw, the window and the
        run's start all ask for them, and one round trip to the scheduler costs about what
        a small unit computes (a session's SpMV run on 10^6 rows made three)."""
        now = time.monotonic()
        if now - self._pool_at > POOL_FRESH:
            self._info, self._pool_at = workers(self.client), now
            self._pool = set(self._info)
        return self._info

    def pool(self) -> set[str]:
        """The addresses of :meth:`_workers`."""
        self._workers()
        return self._pool

    def allowed(self) -> list[str]:
        """The pool's workers still trusted (not excluded), sorted."""
        return sorted(self.pool() - self.excluded)

    def restrict(self, avoid: set[str] | None = None) -> dict[str, Any]:
        """Submit keywords keeping a task off excluded workers (and ``avoid``)."""
        bad = self.excluded | (avoid or set())
        if not bad:
            return {}
        pool = [w for w in self.allowed() if w not in bad]
        if not pool:
            raise VerificationFailed(
                f"no trusted worker left to run on: excluded {sorted(self.excluded)}"
                + (f", and {sorted(avoid)} may not take this task" if avoid else "")
            )
        return {"workers": pool, "allow_other_workers": False}

    def prefer(self) -> dict[str, Any]:
        """Submit keywords preferring the workers that hold no overdue unit (loose: Dask
        may still use the others when these are gone)."""
        if not self.stalled_workers:
            return {}
        pool = [w for w in self.allowed() if w not in self.stalled_workers]
        return {"workers": pool, "allow_other_workers": True} if pool else {}

    def spread(self, n: int) -> dict[str, Any]:
        """Submit keywords preferring the ``n``-th trusted worker, round-robin: loose while
        every worker is trusted, the strict :meth:`restrict` once one is excluded."""
        if self.excluded:
            return self.restrict()
        pool = self.allowed()
        return {"workers": [pool[n % len(pool)]], "allow_other_workers": True} if pool else {}

    def _shapes(self, pending: dict[Key, Region]) -> dict[Key, Any]:
        """What a reduction is told of its block: a box, or the shape of stored entries."""
        return {idx: r if isinstance(r, tuple) else Span(shape(r)) for idx, r in pending.items()}

    def _blocks(self, u: Unit, worker: str | None = None) -> list[tuple[str, Any, Any]]:
        """The input blocks a unit's tasks are handed, in the order of its ``needs``: a box
        with its block, or only the shape of a processor's owned stored values
        (``worker``: for a copy pinned there, see :meth:`_block_on`)."""
        out = []
        for t, idx in u.needs:
            region = block_region(self.plan, t, idx)
            holder = region if isinstance(region, tuple) else Span(shape(region))
            f = self._block_future(t, idx) if worker is None else self._block_on(t, idx, worker)
            out.append((t, holder, f))
        return out

    def _seed(self, name: str, attempt: int) -> int:
        h = hashlib.blake2b(self.secret + f"{name}#{attempt}".encode(), digest_size=8)
        return int.from_bytes(h.digest(), "little")

    def submit_unit(self, ctx: Ctx, u: Unit, n: int, present: set[str]) -> Any:
        """One unit (or, with ``verify=k``, k pinned copies and their agreement)."""
        client, opts = self.client, self.opts
        k, save = opts.copies, ctx.store is not None
        blocks = self._blocks(u)
        key = f"distal-unit-{self.nonce}-{n}"
        if opts.check:
            # spread round-robin over the trusted workers (a preference Dask may override,
            # until a worker is excluded), so every worker's results meet the check; saved
            # by its check, so an entry is only ever a checked result; a saved entry is
            # loaded (and checked all the same)
            load = u.name in present
            where = self.spread(n)
            return client.submit(
                unit_task,
                ctx,
                self.unit_arg(ctx, u, where),
                blocks,
                load,
                False,
                key=key,
                pure=False,
                expect=self.sealed.get(u.name),
                **where,
            )
        if k == 1 or u.name in present:
            # Always look in the checkpoint first: when Dask re-runs a unit after losing
            # the worker that held its result, the saved partial is loaded, not redone.
            where = self.restrict() or self.prefer()
            return client.submit(
                unit_task,
                ctx,
                self.unit_arg(ctx, u, where),
                blocks,
                save,
                save,
                key=key,
                pure=False,
                fresh=u.name not in present,
                expect=self.sealed.get(u.name),
                **where,
            )
        pool = self.allowed()
        if len(pool) < min(k, 2) or (not self.excluded and len(pool) < k):
            raise InputError(f"verify={k} needs at least {k} workers; the pool has {len(pool)}")
        copies = [
            client.submit(
                unit_task,
                ctx,
                self.unit_arg(ctx, u),
                blocks,
                False,
                False,
                r,
                key=f"distal-copy-{self.nonce}-{n}-{r}",
                workers=[pool[(n + r) % len(pool)]],
                # once a worker is excluded, copies stay on the trusted ones
                allow_other_workers=not self.excluded,
                pure=False,
            )
            for r in range(k)
        ]
        return client.submit(
            agree_task,
            ctx,
            replace(u.task(), steps=(), receives=()),  # it reads the name and processor
            copies,
            opts.verify_rtol,
            opts.verify_atol,
            key=key,
            pure=False,
            **self.restrict(),
        )

    def unit_arg(self, ctx: Ctx, u: Unit, where: dict[str, Any] | None = None) -> Any:
        """What a task of unit ``u`` is handed as its unit: for a unit carrying stored-entry
        structure, the future of its description held on the workers
        (:class:`~.units.HeldUnit`), made once per plan, client and unit and placed as
        ``where`` says the unit's own task is (so the unit runs where its structure and
        prepared leaves lie); under ``verify=`` with the digest of the bytes the driver
        made, which the task checks before it reads them. Otherwise, and once a held
        description was found forged in this plan, the description itself."""
        if not carries_entries(u):
            return u.task()
        held = self._held()
        if held.forged:
            return u.task()
        f, digest = held.futures.get(u.name, (None, ""))
        if f is None or f.status in ("error", "cancelled"):
            blob, digest = description(u)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "large graph": the structure travels once
                f = self.client.submit(
                    hold_unit,
                    ctx,
                    blob,
                    key=f"distal-held-{plan_key(self.plan)}-{u.name}",
                    pure=False,
                    **(where or {}),
                )
            held.futures[u.name] = (f, digest)
        return f if self.opts.verify == 1 else (f, digest)

    def _held(self) -> _Held:
        """This plan's held descriptions on this client (made empty on first use)."""
        held = _HELD.get(self.plan)
        if held is None or held.client is not self.client:
            held = _Held(self.client)
            _HELD.put(self.plan, held)
        return held

    def forged(self) -> None:
        """A task found a held description forged: this plan's units get their descriptions
        from the driver from now on (the held ones are dropped)."""
        held = self._held()
        release([f for f, _ in held.futures.values()])
        held.futures.clear()
        held.forged = True

    def where(self, f: Any, name: str) -> str:
        """The worker that computed future ``f`` (of unit ``name``)."""
        holders = self.client.who_has([f]).get(f.key) or ()
        if holders:
            return str(sorted(holders)[0])
        assert self.events is not None
        self.events.sync()
        dones = [m for m in self.events.by_name().get(name, []) if m["kind"] == "done"]
        return str(dones[-1]["worker"]) if dones else ""

    def submit_check(self, ctx: Ctx, u: Unit, f: Any, who: str, attempt: int) -> Any:
        """The check of unit ``u``'s result ``f`` (computed on ``who``), on another worker.

        A result loaded from the checkpoint is not saved again, except with a key: the
        task that loaded it may instead have found the entry forged and recomputed it (the
        driver hears so only by an event, which may come later), so the check rewrites
        the checked result and the driver seals it anew.
        """
        save = ctx.store is not None and (u.name not in self.present or self.sealer is not None)
        return self.client.submit(
            check_task,
            ctx,
            self.unit_arg(ctx, u),
            self._blocks(u),
            f,
            self._seed(u.name, attempt),
            self.opts.verify_repeats,
            who,
            save,
            key=f"distal-check-{self.nonce}-{u.name}-{attempt}",
            pure=False,
            **self.restrict({who}),
        )

    def submit_reduce(
        self, ctx: Ctx, name: str, box: Box, contribs: list[Any], key: str, avoid: set[str]
    ) -> Any:
        """Block ``name``'s reduction: once (``verify="check"``: unsaved, its check saves
        it; away from ``avoid``), or with ``verify=k`` as ``k`` pinned copies and their
        agreement, like a unit."""
        client, opts = self.client, self.opts
        k = opts.copies
        if k == 1:
            return client.submit(
                reduce_task,
                ctx,
                name,
                box,
                contribs,
                not opts.check,
                key=key,
                pure=False,
                **self.restrict(avoid),
            )
        pool = self.allowed()
        if len(pool) < min(k, 2) or (not self.excluded and len(pool) < k):
            raise InputError(f"verify={k} needs at least {k} workers; the pool has {len(pool)}")
        self.n_reduce += 1
        copies = [
            client.submit(
                reduce_task,
                ctx,
                name,
                box,
                contribs,
                False,
                r,
                key=f"{key}-v{r}",
                workers=[pool[(self.n_reduce + r) % len(pool)]],
                allow_other_workers=not self.excluded,
                pure=False,
            )
            for r in range(k)
        ]
        return client.submit(
            agree_block_task,
            ctx,
            name,
            copies,
            opts.verify_rtol,
            opts.verify_atol,
            key=key,
            pure=False,
            **self.restrict(),
        )

    def submit_reduce_check(
        self, ctx: Ctx, name: str, box: Box, contribs: list[Any], f: Any, who: str, attempt: int
    ) -> Any:
        """The check of block ``name``'s reduction ``f`` (summed on ``who``), elsewhere."""
        save = ctx.store is not None
        return self.client.submit(
            check_reduce_task,
            ctx,
            name,
            box,
            contribs,
            f,
            self._seed(name, attempt),
            self.opts.verify_repeats,
            who,
            save,
            key=f"distal-check-{self.nonce}-{name}-{attempt}",
            pure=False,
            **self.restrict({who}),
        )

    def submit_redo(self, ctx: Ctx, u: Unit, attempt: int, avoid: set[str]) -> Any:
        """Unit ``u`` again, after its result was rejected, away from ``avoid``."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "large graph": array blocks travel in their tasks
            return self.client.submit(
                unit_task,
                ctx,
                u.task(),
                self._blocks(u),
                False,
                False,
                redo=attempt,
                key=f"distal-unit-{self.nonce}-{u.name}-redo-{attempt}",
                pure=False,
                **self.restrict(avoid),
            )

    def exclude(self, worker: str, unit: str, how: str, **more: Any) -> list[Any]:
        """Stop trusting ``worker`` (it computed a rejected result of ``unit``).

        No further task is submitted to it; the checkpoint entries it wrote in this run are
        re-verified on a trusted worker (and recomputed if they fail). Returns the futures
        of those re-verifications.
        """
        self.rejections.append({"unit": unit, "worker": worker, "how": how, **more})
        if not worker or worker in self.excluded:
            return []
        self.excluded.add(worker)
        out: list[Any] = []
        if self.events is None or self.feeder is None:
            return out
        self.events.sync()
        wrote = self.events.entries_written_by(worker)
        for name in sorted(wrote):
            self._withdraw(name)
            u = self.units.get(name)
            if u is None:
                summed = self.feeder.summed.get(name)
                if summed is None:
                    continue
                f = self.client.submit(
                    recheck_block_task,
                    self.feeder.ctx,
                    name,
                    *summed,
                    key=f"distal-recheck-{self.nonce}-{name}",
                    pure=False,
                    **self.restrict(),
                )
                self.feeder.aux.add(f.key)
                self.rechecked += 1
                out.append(f)
                continue
            f = self.client.submit(
                recheck_task,
                self.feeder.ctx,
                u.task(),
                self._blocks(u),
                self._seed(name, -1),
                self.opts.verify_repeats,
                key=f"distal-recheck-{self.nonce}-{name}",
                pure=False,
                **self.restrict(),
            )
            self.feeder.aux.add(f.key)
            self.rechecked += 1
            out.append(f)
        return out

    def _outvoted(self, events: Events) -> None:
        """``verify=k``: exclude the workers whose copies a majority outvoted."""
        for m in events.take_notes("outvoted"):
            kind = "reduction" if m.get("block") else "unit"
            for w in m.get("workers", ()):
                how = f"outvoted by {', '.join(m.get('accepted', ()))}"
                self.exclude(str(w), m["name"], how, kind=kind)

    def submit_copy(self, ctx: Ctx, u: Unit, key: str, n: int, worker: str) -> Any:
        """A speculative duplicate of unit ``u``, pinned to ``worker``.

        Same function, same inputs, same checkpoint entry as the original (it first looks
        in the checkpoint too, so a copy started after the original saved just loads).
        With ``verify="check"`` neither copy saves: the check of the winner does.
        """
        save = ctx.store is not None and not self.opts.check
        load = save or (self.opts.check and u.name in self.present)
        blocks = self._blocks(u, worker)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "large graph": array blocks travel in their tasks
            return self.client.submit(
                unit_task,
                ctx,
                u.task(),  # not the held description: its holder may be the stuck worker
                blocks,
                load,
                save,
                None,
                n,
                u.name not in self.present,
                key=key,
                expect=self.sealed.get(u.name),
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )

    def _window(self) -> int:
        if self.opts.window is not None:
            return self.opts.window
        threads = sum(w.get("nthreads", 1) for w in self._workers().values())
        return max(2 * threads, 2)

    def _collect(
        self,
        feeder: Feeder,
        pending: dict[Key, Region],
        value: np.ndarray,
        bar: Progress,
        events: Events,
        reused_direct: int,
    ) -> int:
        """Feed Dask, wait for every task; copy finished blocks into the result as they arrive."""
        opts = self.opts
        deadline = None if opts.timeout is None else time.monotonic() + opts.timeout
        window = self._window()
        ac = self.as_completed(feeder.feed(window))
        done = reused_direct
        idle_since: float | None = None
        checked = time.monotonic()
        spins = 0  # empty polls since the last result

        def tick(force: bool = False) -> None:
            if bar.enabled:
                note = (
                    f"checkpointed {events.reused_now(reused_direct)}, "
                    f"recomputed {events.recomputed()}"
                )
                bar.update(done, note, force)

        tick(True)
        while not ac.is_empty():
            batch = ac.next_batch(block=False)
            if not batch:
                # wait for a result, waking at once when one comes, at most from 0.5 ms to
                # 10 ms between the checks below (the exponent capped: after ~10 s without
                # a result 2**spins no longer fits a float)
                _wait_for_result(ac, min(0.01, 0.0005 * 2 ** min(spins, 5)))
                spins += 1
                now = time.monotonic()
                if deadline is not None and now > deadline:
                    raise RuntimeFailure(f"dask run exceeded timeout={opts.timeout}s")
                if now - checked > 1.0:
                    checked = now
                    window = self._window()
                    if window <= 2 and not workers(self.client):
                        idle_since = idle_since or now
                        if now - idle_since > 120:
                            raise RuntimeFailure("no Dask workers for 120s; the pool is gone")
                    else:
                        idle_since = None
                    ac.update(feeder.feed(window))
                ac.update(feeder.speculate(events))
                self._outvoted(events)
                tick()
                continue
            spins = 0
            for f in batch:
                if feeder.ignored(f.key):
                    continue  # a losing copy, cancelled (or too late)
                # "lost" is fine: a worker holding the result died after it finished; Dask
                # recomputes it for the tasks that still need it.
                if f.status in ("error", "cancelled"):
                    if feeder.is_dup(f.key):
                        feeder.drop(f.key)  # a failed copy; the original still runs
                        continue
                    if feeder.is_check(f.key) and isinstance(self._exception(f), CheckFailed):
                        feeder.rejected(f)
                        continue
                    self._fail(f)
                if f.key in feeder.aux:
                    continue
                # first: finishing a unit may make it a block of the output (accepted
                # without a check under verify="adaptive")
                done += feeder.finished(f)
                if f.key in feeder.block_of:
                    idx = feeder.block_of[f.key]
                    if self.hold:
                        self.kept[pending[idx]] = f  # stays on its worker
                        arr = f.result() if self.sealer is not None else None
                    else:
                        arr = f.result()
                        self._place(value, pending[idx], arr)
                    if self.sealer is not None:
                        self.received[block_name(idx)] = content_digest(arr)
                    name = feeder.unit_of.get(f.key)
                    self._delivered(pending[idx], self.units[name] if name else None)
            self._outvoted(events)
            self._seal(events)
            ac.update(feeder.feed(window))
            ac.update(feeder.speculate(events))
            tick()
        tick(True)
        return done

    # -- checkpoint_key: seals, made and checked here only ------------------------------

    def _authenticate(self, store: CheckpointStore, present: set[str]) -> set[str]:
        """The entries present whose seal opens with the key (their digests go to
        ``self.sealed``); the others are refused: recomputed as if absent, never loaded."""
        assert self.sealer is not None
        good: set[str] = set()
        for name in sorted(present):
            digest = self.sealer.open_document(store.run, name, store.read_seal(name))
            if digest is None:
                self._refuse(store, name)
            else:
                self.sealed[name] = digest
                good.add(name)
        return good

    def _refuse(self, store: CheckpointStore, name: str) -> None:
        """Entry ``name`` failed authentication: reported, its seal withdrawn (so no later
        run trusts it before it is rewritten and sealed again)."""
        self.unauthenticated.add(name)
        self.sealed.pop(name, None)
        store.remove_seal(name)

    def _withdraw(self, name: str) -> None:
        """An entry written by a worker that lost the run's trust: its seal goes until a
        recheck on a trusted worker vouches for it again."""
        self.to_seal.pop(name, None)
        self.reports.pop(name, None)  # its reports no longer count; the recheck's will
        self.sealed.pop(name, None)
        if self.sealer is not None and self.store is not None:
            self.store.remove_seal(name)

    def _seal(self, events: Events) -> None:
        """Seal the entries workers reported written (or rechecks vouched for) since the
        last call.

        A seal is the key's MAC over the run key, the entry's name and the content digest
        its writer reported in the run's event log. Only entries this run's tasks write are
        sealed, reports from excluded workers are ignored, and an entry is sealed only
        while every report of it in this run names the same digest: the event log is open
        to every worker of the pool, so a worker that wrote a forgery and reported it under
        another worker's name meets the honest writer's report, and the entry is left
        unsealed (refused by the next run) rather than sealed. A block is sealed only when
        the digest of the block that reached the driver is the one reported. An entry a
        task found holding other bytes than its seal vouches for loses its seal.
        """
        if self.sealer is None or self.store is None:
            return
        store, sealer = self.store, self.sealer
        for m in events.since(self.heard):
            self.heard += 1
            if m.get("unauthenticated"):
                self.unauthenticated.add(str(m["name"]))
                self.sealed.pop(str(m["name"]), None)
                store.remove_seal(str(m["name"]))
            digest, entry = m.get("digest"), str(m.get("entry", ""))
            if not isinstance(digest, str) or entry not in self.writable:
                continue
            if str(m["worker"]) in self.excluded:
                continue
            written = m["kind"] in ("done", "check") and m.get("written")
            if written or m["kind"] == "recheck":
                self.reports.setdefault(entry, set()).add(digest)
                self.to_seal[entry] = digest
        for name, digest in list(self.to_seal.items()):
            if len(self.reports.get(name, ())) > 1:  # conflicting reports: no seal at all
                del self.to_seal[name]
                self.sealed.pop(name, None)
                store.remove_seal(name)
                continue
            if name not in self.units or self.units[name].final:
                got = self.received.get(name)
                if got is None:
                    continue  # the block has not reached the driver yet
                if got != digest:
                    del self.to_seal[name]
                    continue
            if self.sealed.get(name) != digest:
                store.write_seal(name, sealer.seal_document(store.run, name, digest))
                self.sealed[name] = digest
            del self.to_seal[name]

    def _drain(self, topic: str, root: str, events: Events, patience: float = 10.0) -> None:
        drain_checkpoint(self.client, topic, root, events, patience)

    def _exception(self, f: Any) -> BaseException | None:
        return task_exception(f)

    def _fail(self, f: Any) -> None:
        status = getattr(self.client, "status", "running")
        if status != "running":
            # a client that lost its scheduler cancels every future: the task did not fail,
            # the pool went away (the adapter reports it as PoolLost)
            raise ConnectionError(f"the Dask client lost its scheduler (client status {status!r})")
        exc = task_exception(f)
        if isinstance(exc, RuntimeFailure):
            raise exc
        kind = str(f.key).split("-")[1] if "-" in str(f.key) else str(f.key)
        raise RuntimeFailure(
            f"dask task {f.key!r} ({kind}) failed: {type(exc).__name__}: {exc}"
        ) from exc

    def _finish_checkpoint(
        self, store: CheckpointStore, units: list[Unit], blocks: dict[tuple[int, ...], Box]
    ) -> None:
        """Mark the run complete; partial sums are no longer needed once blocks exist."""
        manifest = store.read_manifest() or {}
        manifest.update(
            {"run": store.run, "complete": True, "blocks": [block_name(i) for i in blocks]}
        )
        store.write_manifest(manifest)
        if not self.opts.keep_partials:
            for u in units:
                if not u.final:
                    store.remove(u.name)


__all__ = ["STATS_NOTE", "Driver", "workers"]
