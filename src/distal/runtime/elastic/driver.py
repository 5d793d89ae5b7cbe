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
from distal.plan.stats import Stats
from distal.progress import Progress
from distal.runtime.checkpoint_auth import content_digest
from distal.runtime.elastic.checkpointing import RunCheckpoint
from distal.runtime.elastic.core import Core, Policy, RunSpec, Work
from distal.runtime.elastic.events import (
    AskQueues,
    Computed,
    Deliver,
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
    Wrote,
)
from distal.runtime.elastic.held import WorkerValue
from distal.runtime.elastic.options import Options
from distal.runtime.elastic.submit import Submitter, release
from distal.runtime.elastic.summary import Events, measured_traffic, summarize
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
from distal.runtime.result import Result
from distal.typing import Box, box_index, box_intersect, box_is_empty, box_volume

STATS_NOTE = (
    "dask runtime: Result.stats words, index words and messages are counted by the tasks "
    "from the pieces of the plan's messages they received (each unit's fetch pieces in the "
    "input blocks it was handed, each reduction's partial pieces, each output block's "
    "replica copies), between the plan's virtual processors; iterations are what the "
    "units' leaves visited; work loaded from a checkpoint moved nothing and counts nothing; "
    "peak_words is the plan's memory model. Dask moves whole blocks and partials between "
    "workers wherever it placed the tasks: those bytes are extra['dask_transfer_bytes']"
)

POOL_FRESH = 0.5
"""Seconds a look at the pool's workers is reused for (a session's runs share it)."""

_LOOKS: dict[int, tuple[float, dict[str, Any]]] = {}


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


def recent_workers(client: Any) -> dict[str, Any]:
    """:func:`workers`, as listed at most ``POOL_FRESH`` seconds ago: a session's runs
    follow each other by milliseconds, and a look costs a scheduler round trip."""
    now = time.monotonic()
    got = _LOOKS.get(id(client))
    if got is None or now - got[0] > POOL_FRESH:
        got = _LOOKS[id(client)] = (now, workers(client))
    return got[1]


def pool_event(info: dict[str, Any], now: float) -> Pool:
    """The core's :class:`Pool` from the scheduler's list of workers: their threads, and
    those holding no data and no task (by their last heartbeat)."""
    empty = frozenset(
        a
        for a, w in info.items()
        if not w.get("metrics", {}).get("managed_bytes", 1)
        and not sum(w.get("metrics", {}).get("task_counts", {"?": 1}).values())
    )
    threads = tuple(sorted((a, int(w.get("nthreads", 1))) for a, w in info.items()))
    return Pool(now, threads, empty)


def _wait_for_result(ac: Any, seconds: float) -> None:
    """Wait up to ``seconds`` for ``as_completed`` ``ac`` to hold a finished future, woken
    by it when one arrives (it notifies its ``thread_condition`` after queueing each)."""
    cond = getattr(ac, "thread_condition", None)
    if cond is None or not hasattr(ac, "has_ready"):  # another as_completed: poll
        time.sleep(seconds)
        return
    with cond:
        if not ac.has_ready():
            cond.wait(timeout=seconds)


def backoff(spins: int) -> float:
    """Seconds to wait for a result after ``spins`` empty polls: 0.5 ms doubling to 10 ms
    (the exponent capped, so a long wait never overflows a float)."""
    return min(0.01, 0.0005 * 2 ** min(spins, 5))


def task_exception(f: Any) -> BaseException | None:
    """What future ``f`` raised (or why it cannot say: cancelled, lost)."""
    try:
        return f.exception(timeout=10)
    except Exception as e:  # cancelled or lost
        return e


def _work_shape(work: Any) -> tuple[int, ...]:
    """The output buffer a leaf over stored entries adds into."""
    ext = dict(work.extents)
    return (work.out_rows, *(ext[c] for c in work.out_letters))


def core_events(msgs: list[dict[str, Any]]) -> list[Any]:
    """The core's events in the workers' log messages (see :mod:`.tasks`)."""
    out: list[Any] = []
    for m in msgs:
        kind, name, worker = m["kind"], str(m["name"]), str(m["worker"])
        if m.get("unauthenticated"):
            out.append(Refused(name))
        if kind == "outvoted":
            losers, winners = tuple(m.get("workers", ())), tuple(m.get("accepted", ()))
            out.append(Outvoted(name, losers, winners, bool(m.get("block"))))
            continue
        if m.get("written") and kind in ("done", "check"):
            out.append(Wrote(str(m.get("entry", name)), worker, m.get("digest")))
        elif kind == "recheck" and isinstance(m.get("digest"), str):
            out.append(Wrote(str(m.get("entry", name)), worker, m["digest"], recheck=True))
        if not m.get("unit") or "#" in name:
            continue
        copy = int(m.get("spec", 0))
        if kind == "start":
            fetched = m.get("fetched", (0, 0.0))
            out.append(Started(m["recv"], name, worker, copy, int(fetched[0]), float(fetched[1])))
        elif kind == "done":
            its = int(m["iterations"][1]) if m.get("iterations") else 0
            reused = m.get("status") != "computed"
            out.append(Computed(name, worker, float(m.get("seconds", 0.0)), its, copy, reused))
    return out


class Driver:
    """One run on Dask: the plan's units, the core's loop, the ``Result``.

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
        self.kept: dict[Box, Any] = {}  # _hold: the output's finished blocks, by box
        self.units: dict[str, Unit] = {}
        self.delivered: list[tuple[int, int, int, int]] = []  # counted here (_delivered)
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
                self.kernel, self.data, self.opts, self.client, self.as_completed,
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
            n += words(block_region(self.plan, t, idx)) * np.dtype(self.kernel.dtypes[t]).itemsize
        return n

    # -- the run --------------------------------------------------------------------------------

    def _run(self) -> Any:
        opts, plan, client = self.opts, self.plan, self.client
        t0 = time.perf_counter()
        units, blocks = self._units()
        self.units = {u.name: u for u in units}
        finals = {u.pieces[0][0] for u in units if u.final}
        total = len(units) + len(blocks) - len(finals)
        whole = (self.pattern.nnz,) if self.pattern is not None else self.out_pl.shape
        value = np.zeros((0,) if self.hold else whole, self.out_dtype)
        self.io = io = Submitter(plan, self.kernel.dtypes, self.data, opts, client, self.nonce)
        store = self.ck.open(units) if self.ck is not None else None
        present: set[str] = set()
        pending: dict[Key, Region] = {}
        corrupt_blocks: set[str] = set()
        if store is not None:
            present = self.ck.present(store)
        for idx, box in blocks.items():
            arr = None
            if self.ck is not None and store is not None:
                arr = self.ck.load_block(store, block_name(idx), present, corrupt_blocks)
            if arr is None:
                pending[idx] = box
            elif self.hold:
                self.kept[box] = client.submit(input_block, arr, pure=False)
            else:
                self._place(value, box, arr)
        needed = [u for u in units if any(idx in pending for idx, _ in u.pieces)]
        reused_direct = total - len(needed) - len(set(pending) - finals)
        topic = f"distal-{self.nonce}"
        events = self.events = Events(client, topic)
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
            plan_key=plan_key(plan),
        )
        contrib = self._contrib(needed, pending, self._owners(blocks))
        shapes = {
            block_name(i): r if isinstance(r, tuple) else Span(shape(r)) for i, r in pending.items()
        }
        io.setup(ctx, self.units, {block_name(i): cs for i, cs in contrib.items()}, shapes)
        order = [u for i in sorted(pending) for u, _ in contrib[i]] + [u for u in needed if u.final]
        work = tuple(
            Work(
                u.name,
                tuple(dict.fromkeys(block_name(i) for i, _ in u.pieces if i in pending)),
                u.final,
                planned_iterations(u),
                self._in_bytes(u),
            )
            for u in dict.fromkeys(order)
        )
        writable = {u.name for u in needed} | {block_name(i) for i in pending}
        sealed = self.ck.sealed if self.ck is not None else {}
        spec = RunSpec(
            work, tuple(block_name(i) for i in sorted(pending)), self.nonce,
            frozenset(present), tuple(sealed.items()), frozenset(writable),
        )  # fmt: skip
        policy = Policy(
            opts.verify, opts.window, opts.speculate, store is not None,
            self.ck is not None and self.ck.sealer is not None, opts.timeout,
            frozenset(self.excluded),
        )  # fmt: skip
        self.core = core = Core(spec, policy, opts._trust)
        core.rejections = list(self.rejections)
        core.rechecked = self.rechecked
        io.sealed = core.sealed
        io.prefetch([u for u in dict.fromkeys(order)])
        info = recent_workers(client)
        workers_before = set(info)
        bar = Progress(total, enabled=opts.progress, label="tasks")
        try:
            first = pool_event(info, time.monotonic())
            self._loop(core, first, value, pending, bar, reused_direct)
            if store is not None:
                assert self.ck is not None
                self.ck.drain(topic, store.root, events)
                events.sync()
                last = core_events(events.since(self._heard))
                self._do(core.handle(*last), value, pending, None)
        except BaseException:
            # released, not cancelled: ``Client.cancel`` walks a key's dependents asserting
            # each is wanted, which a unit whose future was dropped while its reduction
            # still needs it is not (the assertion kills the client's stream)
            io.release_inputs()
            raise
        finally:
            bar.close()
            events.close()
        io.inputs_f.clear()
        io.pinned.clear()
        if self.hold and store is None:
            # a session's run: the pool as last seen, and no broadcast to every worker
            # (Dask's transfer bytes are measured by one-off runs)
            moved: dict[str, Any] = {}
            alive = set(recent_workers(client))
        else:
            moved = client.run(transfer_bytes, self.nonce, on_error="return")
            alive = {str(w) for w in moved}
        stats = self._measured(events)
        summary = summarize(
            events, total,
            logical={u.name for u in needed} | {block_name(i) for i in pending},
            verify=opts.copies, reused_direct=reused_direct, corrupt_blocks=corrupt_blocks,
            workers_before=workers_before, workers_after=alive,
            checkpoint=store.root if store is not None else None,
            speculative=core.n_dups, speculative_won=len(core.won),
        )  # fmt: skip
        summary.excluded_workers = sorted(core.excluded)
        summary.overdue = core.n_overdue
        blocks_out = {r["unit"] for r in core.rejections if r.get("kind") == "reduction"}
        summary.units_rejected = len({r["unit"] for r in core.rejections} - blocks_out)
        summary.reductions_rejected = len(blocks_out)
        summary.rejections = list(core.rejections)
        summary.rechecked = core.rechecked
        refused = self.ck.unauthenticated if self.ck is not None else set()
        summary.unauthenticated = sorted(refused | core.unauthenticated)
        if opts.check:
            summary.checked = events.checked()
            summary.reductions_checked = events.checked(blocks=True)
            summary.unchecked = core.n_unchecked
        summary.seconds = time.perf_counter() - t0
        if store is not None:
            assert self.ck is not None
            self.ck.finish(store, units, blocks)
        if self.pattern is not None:  # a sparse output: its values in the bound pattern
            value = self.pattern.with_values(value)
        elif self.hold:
            value = WorkerValue(tuple(whole), self.out_dtype, dict(self.kept), client)
        return Result(
            value, stats, summary.seconds,
            tasks_executed=summary.tasks_executed, tasks_reused=summary.tasks_reused,
            extra={
                "summary": summary, "stats_note": STATS_NOTE,
                "checkpoint": store.root if store is not None else None,
                # bytes of this run's task results fetched worker to worker (the workers
                # alive at the end; inputs travel in their tasks, results to the driver)
                "dask_transfer_bytes": (
                    sum(int(n) for n in moved.values() if not isinstance(n, BaseException))
                    if moved or not self.hold else None
                ),
            },
        )  # fmt: skip

    def _loop(
        self,
        core: Core,
        first: Pool,
        value: np.ndarray,
        pending: dict[Key, Region],
        bar: Progress,
        reused_direct: int,
    ) -> None:
        """Hand the core what happened until it has delivered every block."""
        assert self.events is not None
        assert self.io is not None
        events = self.events
        self._heard = 0
        self.ac = ac = self.as_completed([])
        self._do(core.handle(first), value, pending, bar)
        looked, spins = time.monotonic(), 0

        def tick(force: bool = False) -> None:
            if bar.enabled:
                note = (
                    f"checkpointed {events.reused_now(reused_direct)}, "
                    f"recomputed {events.recomputed()}"
                )
                bar.update(reused_direct + core.completed, note, force)

        tick(True)
        while not core.done:
            batch = ac.next_batch(block=False)
            todo: list[Any] = []
            if batch:
                spins = 0
            else:
                if ac.is_empty():
                    raise InternalError(f"the elastic core waits for nothing: {core.__dict__}")
                _wait_for_result(ac, backoff(spins))
                spins += 1
                if time.monotonic() - looked > 1.0:
                    looked = time.monotonic()
                    todo.append(pool_event(workers(self.client), looked))
            msgs = events.since(self._heard)
            self._heard += len(msgs)
            todo += core_events(msgs)
            todo += [self._outcome(f, core) for f in batch if f.key in self.io.futures]
            todo.append(Tick(time.monotonic()))
            self._do(core.handle(*todo), value, pending, bar)
            tick()
        tick(True)

    def _outcome(self, f: Any, core: Core) -> Finished | Failed:
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
        worker = self._where(f) if self.opts.check else ""
        return Finished(f.key, worker)

    def _where(self, f: Any) -> str:
        """The worker holding future ``f``'s result, as the scheduler says (the event log
        is open to every worker, so it does not say who computed what)."""
        holders = self.client.who_has([f]).get(f.key) or ()
        return str(sorted(holders)[0]) if holders else ""

    def _do(
        self, todo: list[Instruction], value: np.ndarray, pending: dict[Key, Region], bar: Any
    ) -> None:
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
        more += self._deliver(deliveries, value, pending)
        if more:
            self._do(core.handle(*more), value, pending, bar)

    def _deliver(
        self, todo: list[Deliver], value: np.ndarray, pending: dict[Key, Region]
    ) -> list[Received]:
        """Finished blocks: left on the workers (``_hold``) or copied into the result, their
        digests reported for sealing, and the plan's messages they stand for counted."""
        if not todo:
            return []
        assert self.io is not None
        by_name = {block_name(i): r for i, r in pending.items()}
        futures = [self.io.futures[d.key] for d in todo]
        sealing = self.ck is not None and self.ck.sealer is not None
        arrays = self.client.gather(futures) if sealing or not self.hold else [None] * len(todo)
        out = []
        for d, f, arr in zip(todo, futures, arrays, strict=True):
            region = by_name[d.block]
            if self.hold:
                self.kept[region] = f
            else:
                self._place(value, region, arr)
            if sealing:
                out.append(Received(d.block, content_digest(arr)))
            self._delivered(region, self.units[d.unit] if d.unit else None)
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

    def _delivered(self, box: Region, unit: Unit | None) -> None:
        """Count what a finished block brings to the driver, in the plan's terms: a unit
        that alone makes its block sends its partial to the block's reducer when it is not
        that processor, and every replica of the block gets its copy of it."""
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


__all__ = ["POOL_FRESH", "STATS_NOTE", "Driver", "backoff", "core_events", "workers"]
