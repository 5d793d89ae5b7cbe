"""The elastic runtime: a plan's work as Dask tasks over a pool of unequal, unreliable workers.

The plan's processors are *virtual*: compile for more processors than the pool has workers
(over-decomposition) and Dask spreads the pieces, so faster workers take more of them. The
runtime never schedules, sends or retries anything itself; Dask does placement, work stealing
and recovery from lost workers. This module turns a plan into three kinds of tasks:

- **input blocks**: one per distinct block of each input's placement. An array's block is
  carried in the task itself (so Dask can rebuild it after losing the worker that held it);
  a block source is read inside the task, on a worker.
- **units**: the computation of one processor into one output buffer (``OpenOutput`` up to
  its ``Flush``), or a slice of its steps (``granularity``). A unit rebuilds, from the input
  blocks, exactly the fetch boxes the plan gives that processor at each step, runs the same
  leaf kernels over the same ``Compute`` boxes, and returns its partial output box.
- **blocks**: one per output block: the sum of the pieces of every unit partial that the
  plan sends (or adds locally) to that block's reducer, in a fixed order (so a run is
  deterministic whatever the completion order).

With ``checkpoint=``, every unit partial and every finished block is written by the worker
that made it (see :mod:`distal.runtime.checkpoint`); a rerun loads finished blocks on the
driver, submits only the units that unfinished blocks still need, and those load their
partial when it is there. ``verify=k`` runs each unit on ``k`` different workers and accepts
it only when the copies agree.

``Result.stats`` are the plan's (logical) stats: words between virtual processors as the
plan moves them. Dask's own transfers depend on where it places tasks and are not counted.
Only this module imports ``distributed``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from distributed import Client, Future, LocalCluster, as_completed, get_worker

from distal.errors import InputError, RuntimeFailure
from distal.kernels.leaf import TermKernel, run_leaf
from distal.plan.ir import Compute, Fetch, OpenOutput, Plan
from distal.plan.stats import ops_by_step
from distal.runtime.checkpoint import (
    CORRUPT,
    CheckpointStore,
    combine,
    describe,
    fingerprint_array,
    input_fingerprints,
    run_key,
)
from distal.runtime.source import is_block_source, read_block
from distal.typing import Box, box_contains, box_intersect, box_is_empty, box_shape

GRANULARITIES = ("flush", "step")

STATS_NOTE = (
    "dask runtime: Result.stats are the plan's logical traffic between virtual processors; "
    "the bytes Dask moves between workers depend on its placement and are not counted"
)


class VerificationFailed(RuntimeFailure):
    """Copies of one task computed on different workers disagree (``verify=k``)."""


# -- the plan as tasks --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Unit:
    """The work of virtual processor ``proc`` into one output buffer, over some steps.

    Attributes:
        name: checkpoint entry name, stable across runs (``part-p<proc>-s<first>-<last>``).
        proc: the plan's processor.
        out_box: the output buffer (the plan's ``OpenOutput`` box).
        steps: per step: the input buffers ``(tensor, box)`` in use, and the compute boxes.
        needs: the input blocks ``(tensor, block index)`` the buffers are cut from.
        pieces: ``(output block index, piece)``: where the partial goes.
        final: the unit alone computes the whole of one output block, so its result *is*
            that block (named ``block-...``; no separate reduction task or partial file).
    """

    name: str
    proc: int
    first: int
    out_box: Box
    steps: tuple[tuple[tuple[tuple[str, Box], ...], tuple[Box, ...]], ...]
    needs: tuple[tuple[str, tuple[int, ...]], ...]
    pieces: tuple[tuple[tuple[int, ...], Box], ...]
    final: bool = False


def _chunks(items: list[Any], granularity: str | int) -> list[list[Any]]:
    if granularity == "flush":
        return [items] if items else []
    size = 1 if granularity == "step" else int(granularity)
    return [items[i : i + size] for i in range(0, len(items), size)]


def decompose(plan: Plan, granularity: str | int = "flush") -> list[Unit]:
    """The units of a plan, in (processor, step) order.

    ``granularity``: ``"flush"`` (one unit per output buffer: everything a processor adds
    up before flushing), ``"step"`` (one per processor and step) or an integer ``k`` (up to
    ``k`` steps of one output buffer). Finer units cost more partial sums; coarser ones
    leave Dask less to balance. For more parallelism, compile for more virtual processors.
    """
    out_pl = plan.placements[plan.output]
    units: list[Unit] = []
    for p in range(plan.nprocs):
        buffers: dict[str, Box | None] = {}
        segments: list[tuple[Box, list[tuple[int, tuple[tuple[str, Box], ...], tuple]]]] = []
        for s, ops in enumerate(ops_by_step(plan, p)[: plan.nsteps]):
            for op in ops:
                if isinstance(op, Fetch) and op.tensor in plan.inputs:
                    buffers[op.tensor] = op.box
                elif isinstance(op, OpenOutput):
                    segments.append((op.box, []))
                elif isinstance(op, Compute) and segments:
                    bufs = tuple(sorted((t, b) for t, b in buffers.items() if b is not None))
                    segments[-1][1].append((s, bufs, op.boxes))
        for out_box, steps in segments:
            pieces = tuple(out_pl.split(out_box))
            for chunk in _chunks(steps, granularity):
                needs: set[tuple[str, tuple[int, ...]]] = set()
                for _, bufs, _ in chunk:
                    for t, b in bufs:
                        needs.update((t, idx) for idx, _ in plan.placements[t].split(b))
                units.append(
                    Unit(
                        name=f"part-p{p}-s{chunk[0][0]}-{chunk[-1][0]}",
                        proc=p,
                        first=chunk[0][0],
                        out_box=out_box,
                        steps=tuple((bufs, boxes) for _, bufs, boxes in chunk),
                        needs=tuple(sorted(needs)),
                        pieces=pieces,
                    )
                )
    return units


def fuse(units: list[Unit], blocks: Mapping[tuple[int, ...], Box]) -> list[Unit]:
    """Mark units that alone make a whole output block (e.g. a GEMM owner's direct sum).

    Such a unit's result is the finished block: it is checkpointed under the block's name
    and needs no reduction task, which halves the tasks and files of owner-computes plans.
    """
    contributors: dict[tuple[int, ...], list[Unit]] = defaultdict(list)
    for u in units:
        for idx, _ in u.pieces:
            contributors[idx].append(u)
    out = []
    for u in units:
        if len(u.pieces) == 1:
            idx, piece = u.pieces[0]
            if idx in blocks and len(contributors[idx]) == 1 and piece == u.out_box == blocks[idx]:
                u = replace(u, name=block_name(idx), final=True)
        out.append(u)
    return out


def block_name(idx: tuple[int, ...]) -> str:
    """Checkpoint entry name of output block ``idx``."""
    return "block-" + "-".join(str(i) for i in idx) if idx else "block"


# -- what runs on the workers -------------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    """Everything a task needs besides its data (small; pickled with each task)."""

    topic: str
    kernels: tuple[TermKernel, ...]
    out_dtype: np.dtype
    store: CheckpointStore | None
    delay: float = 0.0
    slow: Mapping[Any, float] = field(default_factory=dict)
    trace: str | None = None
    lie: frozenset[Any] = frozenset()


def _sl(box: Box, origin: Box) -> tuple[Any, ...]:
    if not box:
        return (Ellipsis,)
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin, strict=True))


def _event(ctx: _Ctx, kind: str, label: str, **more: Any) -> Any:
    """Tell the driver (through the scheduler's event log) what this task is doing."""
    w = get_worker()
    msg = {"kind": kind, "name": label, "worker": w.address, "t": time.time(), **more}
    w.log_event(ctx.topic, msg)
    if ctx.trace:
        with open(ctx.trace, "a") as f:
            f.write(f"{kind} {label} {more.get('status', '')}\n")
    return w


def _stall(ctx: _Ctx, worker: Any, seconds: float) -> None:
    """Test hooks: a fixed delay per task, scaled on workers marked slow."""
    factor = float(ctx.slow.get(worker.name, 1.0))
    extra = ctx.delay * factor + (factor - 1.0) * seconds
    if extra > 0:
        time.sleep(extra)


def _input_block(arr: np.ndarray) -> np.ndarray:
    """An array block travels inside its task, so Dask can always rebuild it."""
    return arr


def _source_block(name: str, src: Any, box: Box, dtype: np.dtype) -> np.ndarray:
    """A block source is read on the worker."""
    return read_block(name, src, box, dtype)


def _hash_block(arr: np.ndarray) -> str:
    return fingerprint_array(arr)


def _assemble(box: Box, blocks: list[tuple[Box, np.ndarray]], dtype: np.dtype) -> np.ndarray:
    """The fetch buffer ``box`` cut from the input blocks (a view when one block holds it)."""
    if box and box_is_empty(box):
        return np.zeros(box_shape(box), dtype)
    for bbox, arr in blocks:
        if box_contains(bbox, box):
            return arr[_sl(box, bbox)]
    buf = np.empty(box_shape(box), dtype)
    for bbox, arr in blocks:
        inter = box_intersect(bbox, box)
        if not box_is_empty(inter):
            buf[_sl(inter, box)] = arr[_sl(inter, bbox)]
    return buf


def _compute(ctx: _Ctx, unit: Unit, blocks: list[tuple[str, Box, np.ndarray]]) -> np.ndarray:
    by_tensor: dict[str, list[tuple[Box, np.ndarray]]] = defaultdict(list)
    for t, bbox, arr in blocks:
        by_tensor[t].append((bbox, arr))
    out = np.zeros(box_shape(unit.out_box), ctx.out_dtype)
    cache: dict[tuple[str, Box], tuple[np.ndarray, Box]] = {}
    for bufs, boxes in unit.steps:
        operands = {}
        for t, b in bufs:
            if (t, b) not in cache:
                dtype = by_tensor[t][0][1].dtype if by_tensor[t] else ctx.out_dtype
                cache[(t, b)] = (_assemble(b, by_tensor[t], dtype), b)
            operands[t] = cache[(t, b)]
        for box in boxes:
            run_leaf(ctx.kernels, box, operands, out, unit.out_box)
    return out


def _unit_task(
    ctx: _Ctx,
    unit: Unit,
    blocks: list[tuple[str, Box, np.ndarray]],
    try_load: bool,
    save: bool,
    replica: int | None = None,
) -> Any:
    """Load the unit's partial from the checkpoint, or compute (and save) it."""
    label = unit.name if replica is None else f"{unit.name}#v{replica}"
    w = _event(ctx, "start", label)
    t0 = time.perf_counter()
    corrupt = False
    if try_load and ctx.store is not None:
        arr, status = ctx.store.load(unit.name)
        if arr is not None:
            _event(ctx, "done", label, status="reused", seconds=time.perf_counter() - t0)
            return arr
        corrupt = status == CORRUPT
    out = _compute(ctx, unit, blocks)
    _stall(ctx, w, time.perf_counter() - t0)
    if w.name in ctx.lie:
        out = out + 1
    if save and ctx.store is not None:
        ctx.store.save(unit.name, out)
    seconds = time.perf_counter() - t0
    _event(ctx, "done", label, status="computed", corrupt=corrupt, seconds=seconds)
    return out if replica is None else (out, w.address)


def _agree_task(
    ctx: _Ctx, unit: Unit, copies: list[tuple[np.ndarray, str]], rtol: float, atol: float
) -> np.ndarray:
    """Accept a unit computed on several workers only when every copy agrees."""
    w = _event(ctx, "start", unit.name)
    first, where = copies[0]
    for arr, other in copies[1:]:
        if not np.allclose(arr, first, rtol=rtol, atol=atol):
            raise VerificationFailed(
                f"task {unit.name} (virtual processor {unit.proc}) disagrees between workers "
                f"{where} and {other} (rtol={rtol}, atol={atol})",
                processor=unit.proc,
            )
    distinct = len({a for _, a in copies})
    if ctx.store is not None:
        ctx.store.save(unit.name, first)
    _event(ctx, "done", unit.name, status="verified", distinct=distinct, seconds=0.0)
    del w
    return first


def _reduce_task(
    ctx: _Ctx, name: str, box: Box, contribs: list[tuple[np.ndarray, Box, Box]]
) -> np.ndarray:
    """Sum the unit partials' pieces of one output block; checkpoint the finished block.

    A re-run (after the worker holding the block died) loads the block it already saved.
    """
    _event(ctx, "start", name)
    t0 = time.perf_counter()
    if ctx.store is not None:
        saved, _ = ctx.store.load(name)
        if saved is not None:
            _event(ctx, "done", name, status="reused", seconds=time.perf_counter() - t0)
            return saved
    block = np.zeros(box_shape(box), ctx.out_dtype)
    for arr, out_box, piece in contribs:
        block[_sl(piece, box)] += arr[_sl(piece, out_box)]
    if ctx.store is not None:
        ctx.store.save(name, block)
    _event(ctx, "done", name, status="computed", seconds=time.perf_counter() - t0)
    return block


# -- the driver ---------------------------------------------------------------------------


@dataclass
class Summary:
    """What happened in one elastic run (``Result.extra["summary"]``).

    ``recomputed`` counts task executions beyond the first that did the work again (Dask
    re-runs a task after losing the worker that ran it or held its result; with a checkpoint
    a re-run of a finished unit loads its saved partial instead and is not counted);
    ``lost_seconds`` estimates the compute time the lost executions had spent. ``corrupt``
    counts checkpoint entries that failed their checksum and were recomputed.
    ``per_worker`` is the number of tasks each worker finished (checkpoint loads included).
    """

    tasks_total: int
    tasks_executed: int
    tasks_reused: int
    recomputed: int = 0
    lost_seconds: float = 0.0
    corrupt: int = 0
    per_worker: dict[str, int] = field(default_factory=dict)
    workers_joined: list[str] = field(default_factory=list)
    workers_lost: list[str] = field(default_factory=list)
    verified: int = 0
    verify_same_worker: int = 0
    checkpoint: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain dictionary (JSON-friendly)."""
        return asdict(self)

    def __str__(self) -> str:
        lines = [
            f"tasks: {self.tasks_total} ({self.tasks_executed} computed, "
            f"{self.tasks_reused} from checkpoint)",
            f"failures: {self.recomputed} task(s) recomputed, ~{self.lost_seconds:.2f}s of work "
            f"lost, {len(self.workers_lost)} worker(s) lost, {len(self.workers_joined)} joined",
        ]
        if self.corrupt:
            lines.append(f"checkpoint: {self.corrupt} corrupt entr(y/ies) recomputed")
        if self.verified:
            lines.append(f"verify: {self.verified} task(s) accepted by agreement")
        for w, n in sorted(self.per_worker.items()):
            lines.append(f"  {w}: {n} task(s)")
        return "\n".join(lines)


@dataclass
class _Options:
    client: Any = None
    checkpoint: Any = None
    granularity: str | int = "flush"
    verify: int = 1
    verify_rtol: float = 1e-9
    verify_atol: float = 0.0
    progress: bool | None = None
    n_workers: int = 2
    processes: bool = True
    timeout: float | None = None
    window: int | None = None
    keep_partials: bool = False
    fsync: bool = True
    _delay: float = 0.0
    _slow: Mapping[Any, float] = field(default_factory=dict)
    _trace: str | None = None
    _lie: Any = ()

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> _Options:
        known = cls.__dataclass_fields__
        for k in options:
            if k not in known:
                public = [n for n in known if not n.startswith("_")]
                raise InputError(f"unknown option {k!r} for runtime 'dask'; options are {public}")
        o = cls(**options)
        g = o.granularity
        if not (g in GRANULARITIES or (isinstance(g, int) and not isinstance(g, bool) and g > 0)):
            raise InputError(
                f"granularity {g!r} is not valid; use 'flush', 'step' or a positive integer"
            )
        if not isinstance(o.verify, int) or isinstance(o.verify, bool) or o.verify < 1:
            raise InputError(f"verify must be a positive integer, got {o.verify!r}")
        if o.window is not None and (not isinstance(o.window, int) or o.window < 1):
            raise InputError(f"window must be a positive integer or None, got {o.window!r}")
        if o.n_workers < 1:
            raise InputError(f"n_workers must be positive, got {o.n_workers!r}")
        return o


class _Progress:
    """A progress bar on a terminal (tqdm, else rich, else plain text); silent otherwise."""

    def __init__(self, total: int, enabled: bool | None) -> None:
        self.total = total
        self.on = sys.stderr.isatty() if enabled is None else bool(enabled)
        self.kind = ""
        self.bar: Any = None
        self.last = 0.0
        if not self.on:
            return
        try:
            from tqdm import tqdm

            self.bar, self.kind = tqdm(total=total, desc="distal", unit="task"), "tqdm"
            return
        except ImportError:
            pass
        try:
            from rich.progress import Progress

            self.bar, self.kind = Progress(transient=False), "rich"
            self.bar.start()
            self.task = self.bar.add_task("distal", total=total)
            return
        except ImportError:
            self.kind = "plain"

    def update(self, done: int, reused: int, recomputed: int, force: bool = False) -> None:
        if not self.on:
            return
        now = time.monotonic()
        if not force and now - self.last < 0.2:
            return
        self.last = now
        note = f"checkpointed {reused}, recomputed {recomputed}"
        if self.kind == "tqdm":
            self.bar.n = done
            self.bar.set_postfix_str(note, refresh=True)
        elif self.kind == "rich":
            self.bar.update(self.task, completed=done, description=f"distal ({note})")
        else:
            sys.stderr.write(f"\rdistal: {done}/{self.total} tasks ({note})")
            sys.stderr.flush()

    def close(self) -> None:
        if not self.on:
            return
        if self.kind == "tqdm":
            self.bar.close()
        elif self.kind == "rich":
            self.bar.stop()
        else:
            sys.stderr.write("\n")


class _Events:
    """Task events of one run, as the workers logged them."""

    def __init__(self, client: Client, topic: str) -> None:
        self.client, self.topic = client, topic
        self.lock = threading.Lock()
        self.seen: dict[tuple, dict[str, Any]] = {}
        client.subscribe_topic(topic, self._add)

    def _add(self, event: tuple[float, dict[str, Any]]) -> None:
        msg = event[1]
        with self.lock:
            self.seen[(msg["kind"], msg["name"], msg["worker"], msg["t"])] = msg

    def sync(self) -> None:
        """Pull the scheduler's copy too (in case a subscription message raced)."""
        try:
            for ev in self.client.get_events(self.topic):
                self._add(ev)
        except Exception:  # pragma: no cover - best effort
            pass

    def close(self) -> None:
        try:
            self.client.unsubscribe_topic(self.topic)
        except Exception:  # pragma: no cover - best effort
            pass

    def by_name(self) -> dict[str, list[dict[str, Any]]]:
        with self.lock:
            msgs = sorted(self.seen.values(), key=lambda m: m["t"])
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for m in msgs:
            out[m["name"]].append(m)
        return out

    def recomputed(self) -> int:
        """Executions beyond the first that did the work again (loads do not count)."""
        n = 0
        for ms in self.by_name().values():
            starts = sum(m["kind"] == "start" for m in ms)
            dones = [m for m in ms if m["kind"] == "done"]
            work = sum(d.get("status") != "reused" for d in dones) + starts - len(dones)
            n += max(work - 1, 0)
        return n


def _connect(opts: _Options) -> tuple[Client, list[Any]]:
    """The client to use and what to close afterwards (only what this run started)."""
    c = opts.client
    if c is None:
        cluster = LocalCluster(
            n_workers=opts.n_workers,
            threads_per_worker=1,
            processes=opts.processes,
            dashboard_address="127.0.0.1:0",
            # loopback only; in-process workers talk over inproc:// (no sockets at all)
            **({"host": "127.0.0.1"} if opts.processes else {}),
        )
        client = Client(cluster)
        return client, [client, cluster]
    if isinstance(c, str):
        try:
            client = Client(c, timeout=30)
        except OSError as e:
            raise InputError(f"cannot reach the Dask scheduler at {c!r}: {e}") from e
        return client, [client]
    if isinstance(c, Client):
        return c, []
    raise InputError(
        f"client must be a distributed.Client, a scheduler address or None, not {type(c).__name__}"
    )


def _workers(client: Client) -> dict[str, Any]:
    return dict(client.scheduler_info(n_workers=-1).get("workers", {}))


def run(kernel: Any, data: dict[str, Any], **options: Any) -> Any:
    """Run ``kernel`` on Dask; see the module docstring and ``docs/elastic.md``."""
    opts = _Options.parse(options)
    client, owned = _connect(opts)
    try:
        return _Driver(kernel, data, opts, client).run()
    finally:
        for thing in owned:
            try:
                thing.close()
            except Exception:  # pragma: no cover - best effort shutdown
                pass


class _Feeder:
    """Hands units to Dask a window at a time, and each block's reduction once it can.

    Dask queues root tasks on the scheduler until a worker has a free thread, so a slow
    worker never hoards work; our units depend on input blocks, which would make Dask assign
    them all up front and rely on work stealing, which does not know one worker is slower.
    Keeping only ``window`` units submitted (default: twice the pool's threads, re-read as
    workers join or leave) restores that pull behaviour; Dask still chooses the worker.
    Units go in block order, so blocks finish (and are checkpointed) progressively.
    """

    def __init__(
        self,
        driver: _Driver,
        ctx: _Ctx,
        needed: list[Unit],
        pending: dict[tuple[int, ...], Box],
        present: set[str],
        finals: set[tuple[int, ...]],
    ) -> None:
        self.driver, self.ctx, self.present = driver, ctx, present
        contrib: dict[tuple[int, ...], list[tuple[Unit, Box]]] = defaultdict(list)
        for u in sorted(needed, key=lambda u: (u.first, u.proc, u.name)):
            for idx, piece in u.pieces:
                if idx in pending:
                    contrib[idx].append((u, piece))
        self.queue: list[Unit] = []
        queued: set[str] = set()
        for idx in sorted(pending):
            for u, _ in contrib[idx]:
                if u.name not in queued:
                    queued.add(u.name)
                    self.queue.append(u)
        self.queue.reverse()  # pop() from the end
        self.reduces = {idx: box for idx, box in pending.items() if idx not in finals}
        self.contrib = contrib
        self.waiting = {idx: len({u.name for u, _ in contrib[idx]}) for idx in self.reduces}
        self.unit_f: dict[str, Future] = {}
        self.users: dict[str, int] = defaultdict(int)
        for idx in self.reduces:
            for u, _ in contrib[idx]:
                self.users[u.name] += 1
        self.block_of: dict[str, tuple[int, ...]] = {}
        self.inflight: set[str] = set()
        self.count = 0

    def feed(self, window: int) -> list[Future]:
        """Submit units up to the window, and every reduction whose units are all submitted."""
        out: list[Future] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "large graph": array blocks travel in their tasks
            ready = [idx for idx, w in self.waiting.items() if w == 0]
            while self.queue and len(self.inflight) < window:
                u = self.queue.pop()
                f = self.driver._submit_unit(self.ctx, u, self.count, self.present)
                self.count += 1
                if self.users[u.name]:
                    self.unit_f[u.name] = f
                self.inflight.add(f.key)
                out.append(f)
                if u.final:
                    self.block_of[f.key] = u.pieces[0][0]
                for idx, _ in u.pieces:
                    if idx in self.waiting:
                        self.waiting[idx] -= 1
                        if self.waiting[idx] == 0:
                            ready.append(idx)
            for idx in ready:
                del self.waiting[idx]
                contribs = [
                    (self.unit_f[u.name], u.out_box, piece) for u, piece in self.contrib[idx]
                ]
                f = self.driver.client.submit(
                    _reduce_task,
                    self.ctx,
                    block_name(idx),
                    self.reduces[idx],
                    contribs,
                    key=f"distal-block-{self.driver.nonce}-{'.'.join(map(str, idx))}",
                    pure=False,
                )
                self.block_of[f.key] = idx
                out.append(f)
                # Dask keeps a unit's result while a submitted reduction needs it; we hold
                # the future only until every reduction using it is submitted.
                for u, _ in self.contrib[idx]:
                    self.users[u.name] -= 1
                    if self.users[u.name] == 0:
                        del self.unit_f[u.name]
        return out

    def finished(self, key: str) -> None:
        self.inflight.discard(key)


class _Driver:
    """One run: build the tasks, hand them to Dask, collect blocks and the summary."""

    def __init__(self, kernel: Any, data: dict[str, Any], opts: _Options, client: Client) -> None:
        self.kernel, self.data, self.opts, self.client = kernel, data, opts, client
        self.plan: Plan = kernel.plan
        self.nonce = uuid.uuid4().hex[:12]
        self.out_pl = self.plan.placements[self.plan.output]
        self.out_dtype = np.dtype(kernel.dtypes[self.plan.output])
        self.inputs_f: dict[tuple[str, tuple[int, ...]], Future] = {}

    # the input blocks, submitted on demand and shared by every unit that reads them
    def _block_future(self, t: str, idx: tuple[int, ...]) -> Future:
        key = (t, idx)
        if key not in self.inputs_f:
            pl = self.plan.placements[t]
            box = pl.block_box(idx)
            dtype = np.dtype(self.kernel.dtypes[t])
            name = f"distal-in-{self.nonce}-{t}-{'.'.join(map(str, idx))}"
            x = self.data[t]
            if is_block_source(x):
                f = self.client.submit(_source_block, t, x, box, dtype, key=name, pure=False)
            else:
                block = np.ascontiguousarray(x[_sl(box, ((0, 0),) * len(box))], dtype=dtype)
                f = self.client.submit(_input_block, block, key=name, pure=False)
            self.inputs_f[key] = f
        return self.inputs_f[key]

    def _fingerprints(self, units: list[Unit]) -> dict[str, str]:
        """Input fingerprints; block sources without ``fingerprint()`` hash the blocks read."""
        fps = input_fingerprints(self.data)
        for t, fp in fps.items():
            if fp is not None:
                continue
            idxs = sorted({idx for u in units for (tt, idx) in u.needs if tt == t})
            hashes = self.client.gather(
                [
                    self.client.submit(_hash_block, self._block_future(t, i), pure=False)
                    for i in idxs
                ]
            )
            fps[t] = combine({str(i): h for i, h in zip(idxs, hashes, strict=True)})
        return {t: str(fp) for t, fp in fps.items()}

    def run(self) -> Any:
        from distal.kernel import Result

        opts, plan, client = self.opts, self.plan, self.client
        t0 = time.perf_counter()
        units = decompose(plan, opts.granularity)
        blocks = {
            idx: self.out_pl.block_box(idx)
            for idx in sorted(plan.primary)
            if not (self.out_pl.block_box(idx) and box_is_empty(self.out_pl.block_box(idx)))
        }
        units = fuse(units, blocks)
        finals = {u.pieces[0][0]: u for u in units if u.final}
        total = len(units) + len(blocks) - len(finals)
        store = self._store(units)
        value = np.zeros(self.out_pl.shape, self.out_dtype)
        origin = tuple((0, n) for n in self.out_pl.shape)

        # Finished blocks come straight from the checkpoint (checksummed) on the driver.
        present = store.names() if store is not None else set()
        corrupt_blocks = 0
        pending: dict[tuple[int, ...], Box] = {}
        for idx, box in blocks.items():
            arr = None
            if store is not None and block_name(idx) in present:
                arr, status = store.load(block_name(idx))
                corrupt_blocks += status == CORRUPT
            if arr is None:
                pending[idx] = box
            else:
                value[_sl(box, origin)] = arr
        needed = [u for u in units if any(idx in pending for idx, _ in u.pieces)]
        reused_direct = total - len(needed) - len(set(pending) - set(finals))

        topic = f"distal-{self.nonce}"
        events = _Events(client, topic)
        ctx = _Ctx(
            topic=topic,
            kernels=self.kernel.kernels,
            out_dtype=self.out_dtype,
            store=store,
            delay=float(opts._delay),
            slow=dict(opts._slow),
            trace=opts._trace,
            lie=frozenset(opts._lie),
        )
        workers_before = set(_workers(client))
        bar = _Progress(total, opts.progress)
        try:
            feeder = _Feeder(self, ctx, needed, pending, present, set(finals))
            done = self._collect(feeder, pending, value, origin, bar, events, reused_direct)
            del done
            events.sync()
        except BaseException:
            client.cancel(list(self.inputs_f.values()))
            raise
        finally:
            bar.close()
            events.close()
        self.inputs_f.clear()
        summary = self._summary(
            events,
            total,
            needed,
            pending,
            corrupt_blocks,
            reused_direct,
            workers_before,
            store,
        )
        summary.seconds = time.perf_counter() - t0
        if store is not None:
            self._finish_checkpoint(store, units, blocks)
        return Result(
            value,
            self.kernel.stats(),
            summary.seconds,
            tasks_executed=summary.tasks_executed,
            tasks_reused=summary.tasks_reused,
            extra={
                "summary": summary,
                "stats_note": STATS_NOTE,
                "checkpoint": store.root if store is not None else None,
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
        store = CheckpointStore(opts.checkpoint, run_key(self.kernel, fps, gran), opts.fsync)
        if store.protocol == "memory":
            pids = set(self.client.run(os.getpid).values())
            if pids - {os.getpid()}:
                raise InputError(
                    f"checkpoint {opts.checkpoint!r}: memory:// is private to each process, and "
                    "this pool's workers run in other processes; use a directory or shared URL"
                )
        if store.read_manifest() is None:
            store.write_manifest(
                describe(self.kernel, fps, gran) | {"run": store.run, "complete": False}
            )
        return store

    def _submit_unit(self, ctx: _Ctx, u: Unit, n: int, present: set[str]) -> Future:
        """One unit (or, with ``verify=k``, k pinned copies and their agreement)."""
        client, opts = self.client, self.opts
        k, save = opts.verify, ctx.store is not None
        blocks = [
            (t, self.plan.placements[t].block_box(idx), self._block_future(t, idx))
            for t, idx in u.needs
        ]
        key = f"distal-unit-{self.nonce}-{n}"
        if k == 1 or u.name in present:
            # Always look in the checkpoint first: when Dask re-runs a unit after losing
            # the worker that held its result, the saved partial is loaded, not redone.
            return client.submit(_unit_task, ctx, u, blocks, save, save, key=key, pure=False)
        pool = sorted(_workers(client))
        if len(pool) < k:
            raise InputError(f"verify={k} needs at least {k} workers; the pool has {len(pool)}")
        copies = [
            client.submit(
                _unit_task,
                ctx,
                u,
                blocks,
                False,
                False,
                r,
                key=f"distal-copy-{self.nonce}-{n}-{r}",
                workers=[pool[(n + r) % len(pool)]],
                allow_other_workers=True,
                pure=False,
            )
            for r in range(k)
        ]
        return client.submit(
            _agree_task, ctx, u, copies, opts.verify_rtol, opts.verify_atol, key=key, pure=False
        )

    def _window(self) -> int:
        if self.opts.window is not None:
            return self.opts.window
        threads = sum(w.get("nthreads", 1) for w in _workers(self.client).values())
        return max(2 * threads, 2)

    def _collect(
        self,
        feeder: _Feeder,
        pending: dict[tuple[int, ...], Box],
        value: np.ndarray,
        origin: Box,
        bar: _Progress,
        events: _Events,
        reused_direct: int,
    ) -> int:
        """Feed Dask, wait for every task; copy finished blocks into the result as they arrive."""
        opts = self.opts
        deadline = None if opts.timeout is None else time.monotonic() + opts.timeout
        window = self._window()
        ac = as_completed(feeder.feed(window))
        done = reused_direct
        idle_since: float | None = None
        checked = time.monotonic()

        def tick(force: bool = False) -> None:
            if bar.on:
                bar.update(
                    done, self._reused_now(events, reused_direct), events.recomputed(), force
                )

        tick(True)
        while not ac.is_empty():
            batch = ac.next_batch(block=False)
            if not batch:
                time.sleep(0.01)
                now = time.monotonic()
                if deadline is not None and now > deadline:
                    raise RuntimeFailure(f"dask run exceeded timeout={opts.timeout}s")
                if now - checked > 1.0:
                    checked = now
                    window = self._window()
                    if window <= 2 and not _workers(self.client):
                        idle_since = idle_since or now
                        if now - idle_since > 120:
                            raise RuntimeFailure("no Dask workers for 120s; the pool is gone")
                    else:
                        idle_since = None
                    ac.update(feeder.feed(window))
                tick()
                continue
            for f in batch:
                # "lost" is fine: a worker holding the result died after it finished; Dask
                # recomputes it for the tasks that still need it.
                if f.status in ("error", "cancelled"):
                    self._fail(f)
                if f.key in feeder.block_of:
                    idx = feeder.block_of[f.key]
                    value[_sl(pending[idx], origin)] = f.result()
                feeder.finished(f.key)
                done += 1
            ac.update(feeder.feed(window))
            tick()
        tick(True)
        return done

    @staticmethod
    def _reused_now(events: _Events, reused_direct: int) -> int:
        n = 0
        for ms in events.by_name().values():
            dones = [m.get("status") for m in ms if m["kind"] == "done"]
            n += bool(dones) and all(st == "reused" for st in dones)
        return reused_direct + n

    def _fail(self, f: Future) -> None:
        try:
            exc = f.exception(timeout=10)
        except Exception as e:  # cancelled or lost
            exc = e
        if isinstance(exc, RuntimeFailure):
            raise exc
        kind = str(f.key).split("-")[1] if "-" in str(f.key) else str(f.key)
        raise RuntimeFailure(
            f"dask task {f.key!r} ({kind}) failed: {type(exc).__name__}: {exc}"
        ) from exc

    def _summary(
        self,
        events: _Events,
        total: int,
        needed: list[Unit],
        pending: dict[tuple[int, ...], Box],
        corrupt_blocks: int,
        reused_direct: int,
        workers_before: set[str],
        store: CheckpointStore | None,
    ) -> Summary:
        byname = events.by_name()
        logical = {u.name for u in needed} | {block_name(i) for i in pending}
        reused = computed = corrupt = recomputed = verified = same = 0
        lost = 0.0
        per_worker: dict[str, int] = defaultdict(int)
        seen_workers: set[str] = set()
        for name, ms in byname.items():
            starts = [m for m in ms if m["kind"] == "start"]
            dones = [m for m in ms if m["kind"] == "done"]
            work = sum(d.get("status") != "reused" for d in dones) + len(starts) - len(dones)
            recomputed += max(work - 1, 0)
            for m in ms:
                seen_workers.add(m["worker"])
            for m in dones:
                per_worker[m["worker"]] += 1
            # lost work: results computed more than once, and attempts cut short by a failure
            worked = [d for d in dones if d.get("status") != "reused"]
            lost += sum(d.get("seconds", 0.0) for d in worked[:-1])
            for n, st in enumerate(starts[:-1]):
                if not any(d["worker"] == st["worker"] and d["t"] >= st["t"] for d in dones):
                    lost += starts[n + 1]["t"] - st["t"]
            if name in logical and dones:
                status = worked[-1].get("status") if worked else "reused"
                reused += status == "reused"
                computed += status != "reused"
                corrupt += any(d.get("corrupt") for d in dones)
                if status == "verified":
                    verified += 1
                    same += dones[-1].get("distinct", 0) < self.opts.verify
        # tasks whose events did not reach us (should not happen) count as computed
        computed += len(logical) - sum(
            1 for n in logical if any(m["kind"] == "done" for m in byname.get(n, []))
        )
        after = set(_workers(self.client))
        return Summary(
            tasks_total=total,
            tasks_executed=computed,
            tasks_reused=reused + reused_direct,
            recomputed=recomputed,
            lost_seconds=lost,
            corrupt=corrupt + corrupt_blocks,
            per_worker=dict(per_worker),
            workers_joined=sorted((seen_workers | after) - workers_before),
            workers_lost=sorted((workers_before | seen_workers) - after),
            verified=verified,
            verify_same_worker=same,
            checkpoint=store.root if store is not None else None,
        )

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


__all__ = [
    "GRANULARITIES",
    "STATS_NOTE",
    "Summary",
    "Unit",
    "VerificationFailed",
    "decompose",
    "run",
]
