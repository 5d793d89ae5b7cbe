"""What runs on the workers: input blocks, units, agreement of copies, block reductions.

These functions are pickled into Dask tasks. They reach the worker they run on through
``ctx.worker`` (Dask's ``get_worker``, handed over by :mod:`distal.runtime.dask`), so this
module needs no ``distributed`` import and stays testable without a pool.

With a checkpoint, a task returns its array as soon as it is computed and its entry is
written behind it (:meth:`~distal.runtime.checkpoint.CheckpointStore.save_soon`); the task's
``done`` event is logged once the entry is in place, so "done" always means "durable" and
a task counts as in flight until then. :func:`drain` is what the driver runs on every
worker at the end.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.errors import RuntimeFailure
from distal.kernels.leaf import TermKernel, run_leaf
from distal.runtime import checkpoint
from distal.runtime.checkpoint import CORRUPT, CheckpointStore, fingerprint_array
from distal.runtime.elastic.units import Unit
from distal.runtime.source import read_block
from distal.typing import (
    Box,
    box_contains,
    box_index,
    box_intersect,
    box_is_empty,
    box_shape,
    box_volume,
)


class VerificationFailed(RuntimeFailure):
    """Copies of one task computed on different workers disagree (``verify=k``)."""


@dataclass(frozen=True)
class Ctx:
    """Everything a task needs besides its data (small; pickled with each task).

    ``worker`` returns the Dask worker running the task (``distributed.get_worker``).
    ``delay``, ``slow``, ``trace`` and ``lie`` are test hooks (see ``docs/elastic.md``).
    """

    topic: str
    kernels: tuple[TermKernel, ...]
    out_dtype: np.dtype
    store: CheckpointStore | None
    worker: Callable[[], Any]
    delay: float = 0.0
    slow: Mapping[Any, float] = field(default_factory=dict)
    trace: str | None = None
    lie: frozenset[Any] = frozenset()


def event(ctx: Ctx, kind: str, label: str, w: Any = None, **more: Any) -> Any:
    """Tell the driver (through the scheduler's event log) what this task is doing.

    ``w`` is the worker, when the caller is not the task's own thread (a checkpoint writer).
    """
    w = ctx.worker() if w is None else w
    msg = {"kind": kind, "name": label, "worker": w.address, "t": time.time(), **more}
    w.log_event(ctx.topic, msg)
    if ctx.trace:
        with open(ctx.trace, "a") as f:
            f.write(f"{kind} {label} {more.get('status', '')}\n")
    return w


_written: Counter[tuple[str, str]] = Counter()  # (topic, worker) -> done events logged late
_written_lock = threading.Lock()


def finish(ctx: Ctx, w: Any, name: str, arr: np.ndarray, label: str, **done: Any) -> None:
    """Checkpoint ``arr`` as entry ``name`` behind the task, then log it ``done``.

    Without a checkpoint the task is done at once.
    """
    if ctx.store is None:
        event(ctx, "done", label, w, **done)
        return
    key = (ctx.topic, w.address)

    def then(_digest: str) -> None:
        event(ctx, "done", label, w, written=True, **done)
        with _written_lock:
            _written[key] += 1

    ctx.store.save_soon(name, arr, then)


async def drain(topic: str, root: str, dask_worker: Any = None) -> int:
    """Wait for this process's checkpoint writes (raising a failure of run directory
    ``root``); how many ``done`` events they logged on ``topic`` for this worker (the
    driver waits until it has heard that many).

    Run by the driver through ``Client.run`` (which passes ``dask_worker``); a coroutine, so
    the worker's event loop keeps sending the writers' events while it waits.
    """
    await asyncio.get_running_loop().run_in_executor(None, checkpoint.drain, root)
    with _written_lock:
        return _written.pop((topic, dask_worker.address), 0)


def transfer_bytes(nonce: str, dask_worker: Any = None) -> int:
    """Bytes of run ``nonce``'s task results this worker fetched from other workers.

    Read from Dask's own log of incoming transfers (``Worker.transfer_incoming_log``, a
    bounded deque: a very long-lived worker may have forgotten the oldest entries). Run
    by the driver through ``Client.run``, which passes ``dask_worker``.
    """
    log = getattr(dask_worker, "transfer_incoming_log", ())
    return sum(
        int(n) for entry in log for key, n in entry.get("keys", {}).items() if nonce in str(key)
    )


def _stall(ctx: Ctx, worker: Any, seconds: float) -> None:
    """Test hooks: a fixed delay per task, scaled on workers marked slow."""
    factor = float(ctx.slow.get(worker.name, 1.0))
    extra = ctx.delay * factor + (factor - 1.0) * seconds
    if extra > 0:
        time.sleep(extra)


def input_block(arr: np.ndarray) -> np.ndarray:
    """An array block travels inside its task, so Dask can always rebuild it."""
    return arr


def source_block(name: str, src: Any, box: Box, dtype: np.dtype) -> np.ndarray:
    """A block source is read on the worker."""
    return read_block(name, src, box, dtype)


def hash_block(arr: np.ndarray) -> str:
    """Fingerprint of one input block (block sources without ``fingerprint()``)."""
    return fingerprint_array(arr)


Traffic = list[tuple[int, int, int]]
"""Messages as ``(source processor, destination processor, words)``, counted by the task
that received them (sent in its ``done`` event; see :func:`~.summary.measured_traffic`)."""


def _assemble(
    unit: Unit, t: str, box: Box, blocks: list[tuple[Box, np.ndarray]], dtype: np.dtype
) -> np.ndarray:
    """The fetch buffer ``box`` cut from the input blocks (a view when one block holds it).

    Blocks that do not cover the box (a block the unit was not handed) are a failure, not
    a buffer with holes.
    """
    if box and box_is_empty(box):
        return np.zeros(box_shape(box), dtype)
    for bbox, arr in blocks:
        if box_contains(bbox, box):
            return arr[box_index(box, bbox)]
    buf = np.empty(box_shape(box), dtype)
    covered = 0
    for bbox, arr in blocks:
        inter = box_intersect(bbox, box)
        if not box_is_empty(inter):
            part = arr[box_index(inter, bbox)]
            buf[box_index(inter, box)] = part
            covered += part.size
    if covered != box_volume(box):
        raise RuntimeFailure(
            f"unit {unit.name} (virtual processor {unit.proc}): the blocks of {t!r} it was "
            f"handed hold {covered} of the {box_volume(box)} elements of its buffer {box}",
            processor=unit.proc,
        )
    return buf


def _received(unit: Unit, by_tensor: Mapping[str, list[tuple[Box, np.ndarray]]]) -> Traffic:
    """The plan's fetch pieces of ``unit``, counted in the blocks it was actually handed.

    Each piece's words are the elements of the piece that the unit's input blocks hold
    (what arrived with the task), not the piece's size in the plan; a block that never
    arrived counts nothing.
    """
    out: Traffic = []
    for t, pieces in unit.receives:
        for src, piece in pieces:
            words = 0
            for bbox, arr in by_tensor.get(t, ()):
                inter = box_intersect(bbox, piece)
                if not box_is_empty(inter):
                    words += arr[box_index(inter, bbox)].size
            if words:
                out.append((src, unit.proc, words))
    return out


def _compute(
    ctx: Ctx, unit: Unit, blocks: list[tuple[str, Box, np.ndarray]]
) -> tuple[np.ndarray, Traffic, int]:
    """The unit's partial output, the fetch traffic it received, and its iterations."""
    by_tensor: dict[str, list[tuple[Box, np.ndarray]]] = defaultdict(list)
    for t, bbox, arr in blocks:
        by_tensor[t].append((bbox, arr))
    out = np.zeros(box_shape(unit.out_box), ctx.out_dtype)
    cache: dict[tuple[str, Box], tuple[np.ndarray, Box]] = {}
    iterations = 0
    for bufs, boxes in unit.steps:
        operands = {}
        for t, b in bufs:
            if (t, b) not in cache:
                dtype = by_tensor[t][0][1].dtype if by_tensor[t] else ctx.out_dtype
                cache[(t, b)] = (_assemble(unit, t, b, by_tensor[t], dtype), b)
            operands[t] = cache[(t, b)]
        for box in boxes:
            run_leaf(ctx.kernels, box, operands, out, unit.out_box)
            iterations += box_volume(box)
    return out, _received(unit, by_tensor), iterations


def unit_task(
    ctx: Ctx,
    unit: Unit,
    blocks: list[tuple[str, Box, np.ndarray]],
    try_load: bool,
    save: bool,
    replica: int | None = None,
    spec: int = 0,
) -> Any:
    """Load the unit's partial from the checkpoint, or compute (and save) it.

    ``spec > 0`` marks a speculative duplicate: it logs under the unit's own name (one
    task, two copies) with ``spec`` set, and writes the very same checkpoint entry — same
    name, same bytes, atomically — so whichever copy lands last changes nothing.
    """
    label = unit.name if replica is None else f"{unit.name}#v{replica}"
    tags: dict[str, Any] = {"unit": True} | ({"spec": spec} if spec else {})
    w = event(ctx, "start", label, **tags)
    t0 = time.perf_counter()
    corrupt = False
    if try_load and ctx.store is not None:
        arr, status = ctx.store.load(unit.name)
        if arr is not None:
            event(ctx, "done", label, w, status="reused", seconds=time.perf_counter() - t0, **tags)
            return arr
        corrupt = status == CORRUPT
    out, traffic, iterations = _compute(ctx, unit, blocks)
    _stall(ctx, w, time.perf_counter() - t0)
    if w.name in ctx.lie:
        out = out + 1
    seconds = time.perf_counter() - t0
    counts = {"traffic": traffic, "iterations": [unit.proc, iterations]}
    done = {"status": "computed", "corrupt": corrupt, "seconds": seconds, **tags}
    if replica is not None:
        # a copy's counts travel to agree_task, which logs the accepted unit's once
        event(ctx, "done", label, w, **done)
        return out, w.address, counts
    done |= counts
    if save and ctx.store is not None:
        finish(ctx, w, unit.name, out, label, **done)
    else:
        event(ctx, "done", label, w, **done)
    return out


def agree_task(
    ctx: Ctx,
    unit: Unit,
    copies: list[tuple[np.ndarray, str, dict[str, Any]]],
    rtol: float,
    atol: float,
) -> np.ndarray:
    """Accept a unit computed on several workers only when every copy agrees.

    The accepted unit's traffic is the first copy's: the plan moves each piece once, the
    other copies' inputs are Dask's extra transfers (``dask_transfer_bytes``).
    """
    w = event(ctx, "start", unit.name)
    first, where, counts = copies[0]
    for arr, other, _ in copies[1:]:
        if not np.allclose(arr, first, rtol=rtol, atol=atol):
            raise VerificationFailed(
                f"task {unit.name} (virtual processor {unit.proc}) disagrees between workers "
                f"{where} and {other} (rtol={rtol}, atol={atol})",
                processor=unit.proc,
            )
    distinct = len({a for _, a, _ in copies})
    finish(
        ctx,
        w,
        unit.name,
        first,
        unit.name,
        status="verified",
        distinct=distinct,
        seconds=0.0,
        **counts,
    )
    return first


def reduce_task(
    ctx: Ctx, name: str, box: Box, contribs: list[tuple[np.ndarray, Box, Box, int, int]]
) -> np.ndarray:
    """Sum the unit partials' pieces of one output block; checkpoint the finished block.

    ``contribs`` are ``(partial, its box, piece, source, destination)``: the destination is
    where the plan's ``Flush`` sends the piece (the reducer, or a routing tree's parent),
    ``-1`` when the plan adds it locally or the piece is not the end of the processor's sum
    (an earlier unit of a split output buffer). The elements of each sent piece found in
    the partial that arrived are this block's received traffic.
    A re-run (after the worker holding the block died) loads the block it already saved.
    """
    w = event(ctx, "start", name)
    t0 = time.perf_counter()
    if ctx.store is not None:
        saved, _ = ctx.store.load(name)
        if saved is not None:
            event(ctx, "done", name, w, status="reused", seconds=time.perf_counter() - t0)
            return saved
    block = np.zeros(box_shape(box), ctx.out_dtype)
    traffic: Traffic = []
    for arr, out_box, piece, src, dst in contribs:
        part = arr[box_index(piece, out_box)]
        block[box_index(piece, box)] += part
        if dst >= 0 and part.size:
            traffic.append((src, dst, part.size))
    seconds = time.perf_counter() - t0
    finish(ctx, w, name, block, name, status="computed", seconds=seconds, traffic=traffic)
    return block


__all__ = [
    "Ctx",
    "Traffic",
    "VerificationFailed",
    "agree_task",
    "drain",
    "event",
    "finish",
    "hash_block",
    "input_block",
    "reduce_task",
    "source_block",
    "transfer_bytes",
    "unit_task",
]
