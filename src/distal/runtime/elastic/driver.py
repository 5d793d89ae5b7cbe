"""One elastic run on Dask: the plan's units, a loop around the core, the ``Result``.

The decisions are the core's (:class:`~.core.Core`); this module is the IO around it. It
turns finished futures and the workers' event log into the core's events, carries out its
instructions with Dask calls (:class:`~.submit.Submitter`), loads and seals checkpoint
entries, and counts what the tasks report. It gets the Dask client and ``as_completed``
from :mod:`distal.runtime.dask` (the only module importing ``distributed``); it never
places, copies or retries a task by itself.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from distal.errors import InputError, InternalError, NotSupportedYet, RuntimeFailure
from distal.plan.ir import Plan, RecvFinal
from distal.plan.region import Entries, Region, shape, words
from distal.progress import Progress
from distal.runtime.checkpoint_auth import content_digest
from distal.runtime.elastic.checkpointing import RunCheckpoint
from distal.runtime.elastic.core import Core, Policy, RunSpec, Work
from distal.runtime.elastic.events import (
    AskQueues,
    Deliver,
    Fail,
    Failed,
    Finished,
    Instruction,
    Queues,
    Received,
    Release,
    Seal,
    SubmitAgreed,
    SubmitCheck,
    SubmitRecheck,
    SubmitReduce,
    SubmitReduceCheck,
    SubmitUnit,
    Tick,
    Unseal,
)
from distal.runtime.elastic.held import WorkerValue
from distal.runtime.elastic.listen import (
    POOL_FRESH,
    backoff,
    core_events,
    pool_event,
    recent_workers,
    task_exception,
    wait_for_result,
    workers,
)
from distal.runtime.elastic.options import Options
from distal.runtime.elastic.pending import PendingResult, keep_open, tidy
from distal.runtime.elastic.submit import Submitter, release
from distal.runtime.elastic.summary import Events, delivered, measured_stats, summarize
from distal.runtime.elastic.tasks import (
    CheckFailed,
    Ctx,
    VerificationFailed,
    input_block,
    plan_key,
    planned_iterations,
    transfer_bytes,
)
from distal.runtime.elastic.units import (
    ForgedDescription,
    Key,
    Span,
    Unit,
    block_name,
    decompose,
    fuse,
)
from distal.runtime.executable import Executable
from distal.runtime.result import Result
from distal.typing import Box, box_index, box_is_empty

STATS_NOTE = (
    "dask runtime: Result.stats words, index words and messages are counted by the tasks "
    "from the pieces of the plan's messages they received (each unit's fetch pieces in the "
    "input blocks it was handed, each reduction's partial pieces, each output block's "
    "replica copies), between the plan's virtual processors; iterations are what the "
    "units' leaves visited; work loaded from a checkpoint moved nothing and counts nothing; "
    "peak_words is, per processor, its owned blocks plus the most its tasks held at once "
    "(fetch buffers, output buffer, received partial sums), measured by each task on the "
    "arrays it made. Dask moves whole blocks and partials between workers wherever it "
    "placed the tasks: those bytes are extra['dask_transfer_bytes']"
)


def _work_shape(work: Any) -> tuple[int, ...]:
    """The output buffer a leaf over stored entries adds into."""
    ext = dict(work.extents)
    return (work.out_rows, *(ext[c] for c in work.out_letters))


class Driver:
    """One run of executable ``exe`` on Dask: the plan's units, the core's loop, the
    ``Result`` (nothing it does calls back into the compiler).

    ``client`` is a ``distributed.Client``; ``as_completed`` and ``get_worker`` are Dask's.
    """

    def __init__(
        self,
        exe: Executable,
        data: dict[str, Any],
        opts: Options,
        client: Any,
        as_completed: Callable[[Iterable[Any]], Any],
        get_worker: Callable[[], Any],
    ) -> None:
        self.exe, self.data, self.opts, self.client = exe, data, opts, client
        self.as_completed, self.get_worker = as_completed, get_worker
        self.plan: Plan = exe.plan
        self.nonce = uuid.uuid4().hex[:12]
        self.out_pl = self.plan.placements.get(self.plan.output)
        self.pattern = self.plan.patterns.get(self.plan.output)  # a sparse output's
        self.out_dtype = np.dtype(exe.dtypes[self.plan.output])
        self.hold = bool(opts._hold) and self.pattern is None
        self.kept: dict[Box, Any] = {}  # _hold: the output's finished blocks, by box
        self.units: dict[str, Unit] = {}
        self.delivered: list[tuple[int, int, int, int]] = []  # counted here (delivered)
        self.replicas = [
            (op.src, p, op.box)
            for p, prog in enumerate(self.plan.programs)
            for op in prog
            if isinstance(op, RecvFinal)
        ]
        # what a run made again (after a forged description) carries over
        self.excluded: set[str] = set(opts._excluded)
        self.rejections: list[dict[str, Any]] = []
        self.rechecked = 0
        self.events: Events | None = None
        self._heard = 0  # the log messages handed to the core so far
        self.core: Core | None = None
        self.io: Submitter | None = None
        self.ck = RunCheckpoint(self) if opts.checkpoint is not None else None

    def run(self) -> Any:
        """Carry out the plan on the pool; the ``Result`` with the summary in ``extra``.

        Under ``verify=``, a held unit description found forged (a task's
        :class:`~.units.ForgedDescription`) ends this attempt: the plan's units get their
        descriptions from the driver from then on, and the run is made again (its
        checkpoint entries are only ever checked results, so nothing it wrote is lost)."""
        try:
            return self._run()
        except ForgedDescription:
            if self.opts.verify == 1:
                raise
            assert self.io is not None
            assert self.core is not None
            self.io.forged()
            again = Driver(
                self.exe, self.data, self.opts, self.client, self.as_completed,
                self.get_worker,
            )  # fmt: skip
            again.excluded |= self.core.excluded
            again.rejections = list(self.core.rejections)
            again.rechecked = self.core.rechecked
            res = again._run()
            assert again.events is not None
            for r in again.rejections:  # a rejected unit recomputed by the run made again
                if "recomputed_on" not in r and r.get("kind") != "reduction":
                    dones = [m for m in again.events.by_name().get(r["unit"], ())
                             if m["kind"] == "done"]  # fmt: skip
                    if dones:
                        r["recomputed_on"] = str(dones[-1]["worker"])
            return res

    # -- the plan as units and blocks ---------------------------------------------------------

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

    def _units(self) -> tuple[list[Unit], dict[Key, Region]]:
        plan = self.plan
        units = decompose(plan, self.opts.granularity)
        if any(
            _work_shape(w) != shape(u.out_box) for u in units for _, _, ws in u.steps for w in ws
        ):
            raise NotSupportedYet(
                "a sparse kernel whose output buffer is held over several steps (communicate "
                f"{plan.output!r} outside the loop that streams its operands) is not in this "
                "version of the dask runtime (the local and mpi runtimes run it)"
            )
        blocks = self._output_blocks()
        return fuse(units, blocks), blocks

    def _contrib(
        self, needed: list[Unit], pending: dict[Key, Region], owners: dict[Key, int]
    ) -> dict[Key, list[tuple[Unit, Any]]]:
        """Each pending block's summands ``(unit, piece)`` in the reducer's order: its own
        piece first, then the others by source and step (as the plan's ``Flush`` and
        ``Reduce`` add them), so the bits never depend on which task finished first."""
        contrib: dict[Key, list[tuple[Unit, Any]]] = defaultdict(list)
        for u in needed:
            for idx, piece in u.pieces:
                if idx in pending:
                    contrib[idx].append((u, piece))
        for idx, cs in contrib.items():
            cs.sort(key=lambda c: (c[0].proc != owners.get(idx), c[0].first, c[0].proc, c[0].name))
        return contrib

    def _in_bytes(self, u: Unit) -> int:
        """Bytes of the input blocks unit ``u`` reads (what may cross a link before it runs)."""
        from distal.runtime.elastic.units import block_region

        n = 0
        for t, idx in u.needs:
            n += words(block_region(self.plan, t, idx)) * np.dtype(self.exe.dtypes[t]).itemsize
        return n

    # -- the run --------------------------------------------------------------------------------

    def _run(self) -> Any:
        """Start the run; a session's pipelined one returns at once (:mod:`.pending`)."""
        tidy(self.client)
        self._start()
        if self.core is not None and self.core.policy.eager:
            held = WorkerValue(self.whole, self.out_dtype, dict(self.kept), self.client)
            res = PendingResult(held, self._finish, self._over)
            keep_open(self.client, res)
            return res
        return self._finish()

    def _over(self) -> bool:
        """Every task the core waits for has finished (a pipelined run's)."""
        assert self.core is not None
        assert self.io is not None
        fs = self.io.futures
        return all(k in fs and fs[k].done() for k in self.core.outstanding)

    def _start(self) -> None:
        """Everything up to the first instructions: the units, the checkpoint's finished
        blocks, the core and what it hands out first."""
        opts, plan, client = self.opts, self.plan, self.client
        self.t0 = time.perf_counter()
        units, blocks = self._units()
        self.all_units, self.blocks = units, blocks
        self.units = {u.name: u for u in units}
        finals = {u.pieces[0][0] for u in units if u.final}
        self.total = len(units) + len(blocks) - len(finals)
        self.whole = (self.pattern.nnz,) if self.pattern is not None else tuple(self.out_pl.shape)
        self.value = np.zeros((0,) if self.hold else self.whole, self.out_dtype)
        self.io = io = Submitter(plan, self.exe.dtypes, self.data, opts, client, self.nonce)
        store = self.store = self.ck.open(units) if self.ck is not None else None
        present: set[str] = set()
        pending: dict[Key, Region] = {}
        self.corrupt_blocks: set[str] = set()
        if self.ck is not None and store is not None:
            present = self.ck.present(store)
        for idx, box in blocks.items():
            arr = None
            if self.ck is not None and store is not None:
                arr = self.ck.load_block(store, block_name(idx), present, self.corrupt_blocks)
            if arr is None:
                pending[idx] = box
            elif self.hold:
                self.kept[box] = client.submit(input_block, arr, pure=False)
            else:
                self._place(self.value, box, arr)
        self.pending = pending
        needed = self.needed = [u for u in units if any(idx in pending for idx, _ in u.pieces)]
        self.reused_direct = self.total - len(needed) - len(set(pending) - finals)
        topic = f"distal-{self.nonce}"
        self.events = Events(client, topic)
        ctx = Ctx(
            topic=topic,
            kernels=self.exe.leaves,
            out_dtype=self.out_dtype,
            store=store,
            worker=self.get_worker,
            delay=opts.faults.delay,
            slow=dict(opts.faults.slow),
            trace=opts.faults.trace,
            lie=opts.faults.lie,
            checksums=opts.verify_checksums,
            plan_key=plan_key(plan),
        )
        contrib = self._contrib(needed, pending, self._owners(blocks))
        shapes = {
            block_name(i): r if isinstance(r, tuple) else Span(shape(r)) for i, r in pending.items()
        }
        owners = {block_name(i): q for i, q in self._owners(blocks).items()}
        io.setup(ctx, self.units, {block_name(i): cs for i, cs in contrib.items()}, shapes, owners)
        order = [u for i in sorted(pending) for u, _ in contrib[i]] + [u for u in needed if u.final]
        order = list(dict.fromkeys(order))
        work = tuple(
            Work(
                u.name,
                tuple(dict.fromkeys(block_name(i) for i, _ in u.pieces if i in pending)),
                u.final,
                planned_iterations(u),
                self._in_bytes(u),
            )
            for u in order
        )
        writable = {u.name for u in needed} | {block_name(i) for i in pending}
        sealed = self.ck.sealed if self.ck is not None else {}
        spec = RunSpec(
            work, tuple(block_name(i) for i in sorted(pending)), self.nonce,
            frozenset(present), tuple(sealed.items()), frozenset(writable),
        )  # fmt: skip
        eager = self.hold and store is None and opts.verify == 1 and opts.timeout is None
        policy = Policy(
            opts.verify, opts.window, opts.speculate, store is not None,
            self.ck is not None and self.ck.sealer is not None, opts.timeout,
            frozenset(self.excluded), eager,
        )  # fmt: skip
        self.core = core = Core(spec, policy, opts._trust)
        core.rejections = list(self.rejections)
        core.rechecked = self.rechecked
        io.sealed = core.sealed
        io.prefetch(order)
        info = recent_workers(client)
        self.workers_before = set(info)
        # (its loop the client's: with no future to go by it would take the default client's)
        self.ac = self.as_completed([], loop=self.client.loop)
        self.bar = Progress(self.total, enabled=opts.progress and not eager, label="tasks")
        self._guarded(lambda: self._do(core.handle(pool_event(info, time.monotonic()))))

    def _guarded(self, step: Callable[[], None]) -> None:
        """Run ``step``; on any failure drop the run's input blocks and stop listening."""
        assert self.io is not None
        assert self.events is not None
        try:
            step()
        except BaseException:
            # released, not cancelled: ``Client.cancel`` walks a key's dependents asserting
            # each is wanted, which a unit whose future was dropped while its reduction
            # still needs it is not (the assertion kills the client's stream)
            self.io.release_inputs()
            self.bar.close()
            self.events.close()
            raise

    def _finish(self) -> Result:
        """Wait for the run's tasks (handing the core what happens), then the ``Result``."""
        assert self.core is not None
        assert self.events is not None
        assert self.io is not None
        core, events, store, opts = self.core, self.events, self.store, self.opts
        self._guarded(self._loop)
        if store is not None:
            assert self.ck is not None
            self._guarded(lambda: self.ck.drain(events.topic, store.scope, events))  # type: ignore[union-attr]
            events.sync()
            self._guarded(lambda: self._do(core.handle(*self._heard_now())))
        self.bar.close()
        events.close()
        self.io.inputs_f.clear()
        self.io.pinned.clear()
        if self.hold and store is None:
            # a session's run: the pool as last seen, and no broadcast to every worker
            # (Dask's transfer bytes are measured by one-off runs)
            moved: dict[str, Any] = {}
            alive = set(recent_workers(self.client))
        else:
            moved = self.client.run(transfer_bytes, self.nonce, on_error="return")
            alive = {str(w) for w in moved}
        summary = summarize(
            events, self.total,
            logical={u.name for u in self.needed} | {block_name(i) for i in self.pending},
            verify=opts.copies, reused_direct=self.reused_direct,
            corrupt_blocks=self.corrupt_blocks, workers_before=self.workers_before,
            workers_after=alive, checkpoint=store.root if store is not None else None,
            speculative=core.n_dups, speculative_won=len(core.won),
        )  # fmt: skip
        self._judged(summary)
        if opts.check:
            summary.checked = events.checked()
            summary.reductions_checked = events.checked(blocks=True)
            summary.unchecked = core.n_unchecked
        summary.seconds = time.perf_counter() - self.t0
        if store is not None:
            assert self.ck is not None
            self.ck.finish(store, self.all_units, self.blocks)
        value: Any = self.value
        if self.pattern is not None:  # a sparse output: its values in the bound pattern
            value = self.pattern.with_values(value)
        elif self.hold:
            value = WorkerValue(self.whole, self.out_dtype, dict(self.kept), self.client)
        transfers = None
        if moved or not self.hold:
            # bytes of this run's task results fetched worker to worker (the workers alive
            # at the end; inputs travel in their tasks, results to the driver)
            transfers = sum(int(n) for n in moved.values() if not isinstance(n, BaseException))
        extra = {
            "summary": summary,
            "stats_note": STATS_NOTE,
            "checkpoint": store.root if store is not None else None,
            "dask_transfer_bytes": transfers,
        }
        return Result(
            value, measured_stats(self.plan, events, self.delivered), summary.seconds,
            tasks_executed=summary.tasks_executed, tasks_reused=summary.tasks_reused,
            extra=extra,
        )  # fmt: skip

    def _judged(self, summary: Any) -> None:
        """What verification decided, into the summary."""
        assert self.core is not None
        core = self.core
        summary.excluded_workers = sorted(core.excluded)
        summary.overdue = core.n_overdue
        blocks_out = {r["unit"] for r in core.rejections if r.get("kind") == "reduction"}
        summary.units_rejected = len({r["unit"] for r in core.rejections} - blocks_out)
        summary.reductions_rejected = len(blocks_out)
        summary.rejections = list(core.rejections)
        summary.rechecked = core.rechecked
        refused = self.ck.unauthenticated if self.ck is not None else set()
        summary.unauthenticated = sorted(refused | core.unauthenticated)

    def _heard_now(self) -> list[Any]:
        """The core's events in the log messages heard since the last call."""
        assert self.events is not None
        msgs = self.events.since(self._heard)
        self._heard += len(msgs)
        return core_events(msgs)

    def _loop(self) -> None:
        """Hand the core what happened until the run is over."""
        assert self.core is not None
        assert self.io is not None
        core, ac, bar, events = self.core, self.ac, self.bar, self.events
        assert events is not None
        looked, spins = time.monotonic(), 0

        def tick(force: bool = False) -> None:
            if bar.enabled:
                note = (
                    f"checkpointed {events.reused_now(self.reused_direct)}, "
                    f"recomputed {events.recomputed()}"
                )
                bar.update(self.reused_direct + core.completed, note, force)

        tick(True)
        while not core.done:
            batch = ac.next_batch(block=False)
            todo: list[Any] = []
            if batch:
                spins = 0
            else:
                if ac.is_empty():
                    raise InternalError(f"the elastic core waits for nothing: {vars(core)}")
                wait_for_result(ac, backoff(spins))
                spins += 1
                if time.monotonic() - looked > 1.0:
                    looked = time.monotonic()
                    todo.append(pool_event(workers(self.client), looked))
            todo += self._heard_now()
            ours = [f for f in batch if f.key in self.io.futures or f.key in core.outstanding]
            asked = [f for f in ours if core.wants_worker(f.key)]
            where = self._where(asked) if asked else {}
            todo += [self._outcome(f, core, where) for f in ours]
            todo.append(Tick(time.monotonic()))
            self._do(core.handle(*todo))
            tick()
        tick(True)

    def _outcome(self, f: Any, core: Core, where: dict[str, tuple[str, ...]]) -> Finished | Failed:
        """The core's event for future ``f``, which came out of ``as_completed``."""
        if f.status in ("error", "cancelled"):
            if f.key in core.dup_keys or f.key in core.dropped:
                return Failed(f.key)
            status = getattr(self.client, "status", "running")
            if status != "running":
                # a client that lost its scheduler cancels every future: the pool went away
                msg = f"the Dask client lost its scheduler (client status {status!r})"
                raise ConnectionError(msg)
            exc = task_exception(f)
            return Failed(f.key, isinstance(exc, CheckFailed), f"{type(exc).__name__}: {exc}")
        # "lost" is fine: a worker holding the result died after it finished; Dask
        # recomputes it for the tasks that still need it
        holders = where.get(f.key, ())
        # who computed it: the worker it was meant for if that one holds it (nothing but
        # its check, kept off that worker, reads it yet), else its only holder
        meant = core.expected(f.key)
        worker = meant if meant in holders else holders[0] if len(holders) == 1 else ""
        return Finished(f.key, worker, holders)

    def _where(self, fs: list[Any]) -> dict[str, tuple[str, ...]]:
        """The workers holding each future's result, as the scheduler says (one round trip
        for a batch; the event log is open to every worker, so it does not say who
        computed what)."""
        who = self.client.who_has([f for f in fs if f.status == "finished"])
        return {k: tuple(sorted(str(w) for w in ws)) for k, ws in who.items()}

    def _do(self, todo: list[Instruction]) -> None:
        """Carry out the core's instructions (a failure first: it ends the run)."""
        assert self.io is not None
        assert self.core is not None
        io, core = self.io, self.core
        for i in todo:
            if isinstance(i, Fail):
                self._raise(i)
        more: list[Any] = []
        deliveries: list[Deliver] = []
        submit = {
            SubmitUnit: io.unit, SubmitAgreed: io.agreed, SubmitCheck: io.check,
            SubmitReduce: io.reduce, SubmitReduceCheck: io.reduce_check,
            SubmitRecheck: io.recheck,
        }  # fmt: skip
        for i in todo:
            if type(i) in submit:
                self.ac.add(submit[type(i)](i))  # type: ignore[operator]
            elif isinstance(i, Release):
                release([io.futures.pop(k) for k in i.keys if k in io.futures])
            elif isinstance(i, Deliver):
                deliveries.append(i)
            elif isinstance(i, AskQueues):
                busy = self.client.processing()
                q = tuple((str(w), tuple(str(k) for k in ks)) for w, ks in busy.items())
                more.append(Queues(time.monotonic(), q))
            elif isinstance(i, Seal | Unseal) and self.ck is not None:
                self.ck.seal(i)
        more += self._deliver(deliveries)
        if more:
            self._do(core.handle(*more))

    def _deliver(self, todo: list[Deliver]) -> list[Received]:
        """Finished blocks: left on the workers (``_hold``) or copied into the result, their
        digests reported for sealing, and the plan's messages they stand for counted."""
        if not todo:
            return []
        assert self.io is not None
        by_name = {block_name(i): r for i, r in self.pending.items()}
        futures = [self.io.futures[d.key] for d in todo]
        sealing = self.ck is not None and self.ck.sealer is not None
        arrays = self.client.gather(futures) if sealing or not self.hold else [None] * len(todo)
        out = []
        for d, f, arr in zip(todo, futures, arrays, strict=True):
            region = by_name[d.block]
            if self.hold:
                self.kept[region] = f
            else:
                self._place(self.value, region, arr)
            if sealing:
                out.append(Received(d.block, content_digest(arr)))
            unit = self.units[d.unit] if d.unit else None
            self.delivered += delivered(region, unit, self.replicas)
        return out

    def _raise(self, i: Fail) -> None:
        if i.kind == "input":
            raise InputError(i.message)
        if i.kind == "verification":
            raise VerificationFailed(i.message)
        if i.kind != "task":
            raise RuntimeFailure(i.message)
        assert self.io is not None
        f = self.io.futures.get(i.key)
        exc = task_exception(f) if f is not None else None
        if isinstance(exc, RuntimeFailure):
            raise exc
        kind = i.key.split("-")[1] if "-" in i.key else i.key
        raise RuntimeFailure(f"dask task {i.key!r} ({kind}) failed: {i.message}") from exc

    # -- the result and its counts ----------------------------------------------------------

    def _place(self, value: np.ndarray, region: Region, arr: np.ndarray) -> None:
        """Write a finished block into the result (a box of the output, or its owned stored
        entries' values)."""
        if isinstance(region, Entries):
            value[region.positions] = arr
        else:
            value[box_index(region, ((0, 0),) * len(region))] = arr


__all__ = ["POOL_FRESH", "STATS_NOTE", "Driver", "workers"]
