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
import dataclasses
import hashlib
import itertools
import math
import os
import secrets
import threading
import time
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.errors import RuntimeFailure
from distal.kernels.leaf import TermKernel, run_leaf, term_calls
from distal.kernels.sparse_leaf import EntryLeaves
from distal.plan.region import Location, shape
from distal.runtime import checkpoint, checkpoint_hash
from distal.runtime.checkpoint import (
    CORRUPT,
    UNAUTHENTICATED,
    CheckpointStore,
    fingerprint_array,
)
from distal.runtime.checkpoint_auth import content_digest
from distal.runtime.elastic.check import (
    Call,
    EntryChecksum,
    Verdict,
    checksum_verdict,
    entry_checksum,
    entry_costs,
    project,
    project_entries,
    recompute_cheaper,
    recompute_verdict,
)
from distal.runtime.elastic.units import (
    Cut,
    Cuts,
    Gather,
    HeldUnit,
    Unit,
    UnitArg,
    gather_cuts,
    unheld,
)
from distal.runtime.source import read_block
from distal.runtime.store import add_at, read
from distal.runtime.weakcache import WeakCache
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
    """No agreement on a unit's result: ``verify=2``'s copies differ, ``verify=k`` has no
    majority, or no trusted worker is left to compute or check a unit on."""


class CheckFailed(RuntimeFailure):
    """A unit's result failed its randomized check (``verify="check"``).

    ``unit`` is the unit's name, ``worker`` the address of the worker that computed the
    rejected result, ``detail`` what the check found. The driver recomputes the unit
    elsewhere and excludes that worker.
    """

    def __init__(self, message: str, unit: str = "", worker: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.unit, self.worker, self.detail = unit, worker, detail

    def __reduce__(self) -> Any:
        return (CheckFailed, (str(self), self.unit, self.worker, self.detail))


FAULT_ENV = "DISTAL_FAULT_CORRUPT"
"""Test hook: a worker process whose environment sets this to ``q`` perturbs each unit
result, each reduction (summed block) and each block of an element-wise map it returns
with probability ``q`` (adds 1.0 to one random element)."""

_fault_rng: list[np.random.Generator] = []


def _fault(arr: np.ndarray) -> np.ndarray:
    """Apply the ``DISTAL_FAULT_CORRUPT`` test hook (off unless the variable is set)."""
    q = os.environ.get(FAULT_ENV)
    if not q:
        return arr
    if not _fault_rng:
        _fault_rng.append(np.random.default_rng())
    rng = _fault_rng[0]
    if arr.size == 0 or rng.random() >= float(q):
        return arr
    out = np.array(arr, copy=True)
    out.reshape(-1)[rng.integers(out.size)] += 1.0
    return out


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
    checksums: bool = True  # SpMV units checked against kept checksums (verify_checksums)
    #: the driver's name for the bound plan (:func:`plan_key`): with it, a unit's structure
    #: is known by its name, and a checksum's key hashes the unit's values only
    plan_key: str = ""


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


# (topic, worker) -> the entries whose ``done`` events were logged behind their tasks
_written: dict[tuple[str, str], Counter[str]] = {}
_written_lock = threading.Lock()


def finish(
    ctx: Ctx, w: Any, name: str, arr: np.ndarray, label: str, kind: str = "done", **done: Any
) -> None:
    """Checkpoint ``arr`` as entry ``name`` behind the task, then log it ``done`` (or
    ``kind``: a check logs ``checked``).

    Without a checkpoint the task is done at once.
    """
    if ctx.store is None:
        event(ctx, kind, label, w, **done)
        return
    key = (ctx.topic, w.address)

    def then(digest: str) -> None:
        # a sealed store reports the content digest, which the driver seals (the key
        # never leaves the driver); a plain store's checksum is not needed there
        more = {"digest": digest} if ctx.store is not None and ctx.store.sealed else {}
        event(ctx, kind, label, w, written=True, entry=name, **more, **done)
        with _written_lock:
            _written.setdefault(key, Counter())[name] += 1

    ctx.store.save_soon(name, arr, then)


async def drain(topic: str, root: str, dask_worker: Any = None) -> dict[str, int]:
    """Wait for this process's checkpoint writes (raising a failure of run directory
    ``root``); the entries whose ``done`` events they logged on ``topic`` for this worker,
    with how many times each (the driver waits until it has heard each of them: a count
    alone would be met early by a report another worker forged under this one's name).

    Run by the driver through ``Client.run`` (which passes ``dask_worker``); a coroutine, so
    the worker's event loop keeps sending the writers' events while it waits.
    """
    await asyncio.get_running_loop().run_in_executor(None, checkpoint.drain, root)
    with _written_lock:
        return dict(_written.pop((topic, dask_worker.address), Counter()))


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


def fetched(w: Any, recent: int = 256) -> tuple[int, float]:
    """Bytes of the running task's inputs that came to worker ``w`` over the network, and
    the seconds those transfers took (Dask's log of incoming transfers, its last
    ``recent`` entries): how the driver learns what a link delivers. ``(0, 0.0)`` where
    nothing came, or the worker keeps no such log."""
    try:
        deps = {d.key for d in w.state.tasks[w.get_current_task()].dependencies}
        n, secs = 0, 0.0
        for e in itertools.islice(reversed(w.transfer_incoming_log), recent):
            if deps.intersection(e.get("keys", ())):
                n += int(e.get("total", 0))
                secs += float(e["stop"]) - float(e["start"])
        return n, secs
    except Exception:  # a stand-in worker, another Dask version: nothing measured
        return 0, 0.0


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


Traffic = list[tuple[int, int, int, int]]
"""Messages as ``(source processor, destination processor, words, index words)``, counted by
the task that received them (sent in its ``done`` event; see
:func:`~.summary.measured_traffic`)."""

Blocks = list[tuple[str, Any, np.ndarray]]
"""A unit's input blocks, in the order of its ``needs``: ``(tensor, box or Span, array)``."""


def _put(arr: np.ndarray, ix: Any, value: np.ndarray) -> None:
    """``arr`` at ``ix`` (from :func:`~distal.runtime.store.where`) ``= value``."""
    if type(ix) is Location:
        ix.put(arr, value)
    else:
        arr[ix] = value


def _piece(blocks: Blocks, cut: Cut, positions: Mapping[int, int]) -> np.ndarray:
    """Cut ``cut``'s piece: read from the block it was handed, or the piece itself when the
    block was handed already cut (``positions``: each cut's place among its pieces)."""
    _, holder, arr = blocks[cut.need]
    if isinstance(holder, Cuts):
        return arr[positions[id(cut)]]
    return read(arr, cut.src)


def _positions(unit: Unit) -> dict[int, int]:
    """Each cut's place among the pieces of a block handed already cut (:func:`cut_block`)."""
    return {id(c): k for cs in gather_cuts(unit).values() for k, c in enumerate(cs)}


def cut_block(block: np.ndarray, srcs: list[Any]) -> tuple[np.ndarray, ...]:
    """The pieces of an input block that a unit reads (``srcs``: where each lies in it, in
    :func:`~.units.gather_cuts` order), made where the block lies so only they travel."""
    return tuple(np.ascontiguousarray(read(block, s)) for s in srcs)


def _gather(
    unit: Unit, t: str, g: Gather, blocks: Blocks, dtype: np.dtype, positions: Mapping[int, int]
) -> np.ndarray:
    """A buffer of rows or stored entries, gathered piece by piece from the owned blocks of
    the pieces' sources (a block the unit was not handed is a failure). A buffer that is
    one piece, whole and in order (a row-split SpMV's span of its own stored entries), is
    that piece itself: a view of the block, not a copy of it made every run."""
    pieces = []
    for src, cut in g.pieces:
        if not 0 <= cut.need < len(blocks) or blocks[cut.need][0] != t:
            raise RuntimeFailure(
                f"unit {unit.name} (virtual processor {unit.proc}): it was not handed the "
                f"block of {t!r} that processor {src} owns, which its buffer needs",
                processor=unit.proc,
            )
        pieces.append((cut.dst, _piece(blocks, cut, positions)))
    if len(pieces) == 1 and _whole(pieces[0][0], g.shape):
        piece = pieces[0][1]
        if piece.shape == tuple(g.shape) and piece.dtype == dtype and piece.flags.c_contiguous:
            return piece
    buf = np.empty(g.shape, dtype)
    for dst, piece in pieces:
        _put(buf, dst, piece)
    return buf


def _whole(ix: Any, shape: tuple[int, ...]) -> bool:
    """Whether index ``ix`` (from :func:`~distal.runtime.store.where`) is every element of an
    array of ``shape``, in order: full slices, one per dimension."""
    if type(ix) is not tuple or len(ix) != len(shape):
        return False
    return all(
        type(s) is slice and (s.start or 0) == 0 and s.step in (None, 1) and s.stop in (None, n)
        for s, n in zip(ix, shape, strict=True)
    )


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


def _received(
    unit: Unit, blocks: Blocks, by_tensor: Mapping[str, list[tuple[Box, np.ndarray]]]
) -> Traffic:
    """The plan's fetch pieces of ``unit``, counted in the blocks it was actually handed.

    Each piece's words are the elements of the piece that the unit's input blocks hold
    (what arrived with the task), not the piece's size in the plan; a block that never
    arrived counts nothing. A piece of stored entries carries its index words too.
    """
    out: Traffic = []
    positions = _positions(unit) if any(isinstance(h, Cuts) for _, h, _ in blocks) else {}
    for t, pieces in unit.receives:
        for src, piece in pieces:
            words = 0
            if isinstance(piece, Cut):
                if 0 <= piece.need < len(blocks) and blocks[piece.need][0] == t:
                    words = int(np.size(_piece(blocks, piece, positions)))
                if words or piece.index_words:
                    out.append((src, unit.proc, words, piece.index_words))
                continue
            for bbox, arr in by_tensor.get(t, ()):
                inter = box_intersect(bbox, piece)
                if not box_is_empty(inter):
                    words += arr[box_index(inter, bbox)].size
            if words:
                out.append((src, unit.proc, words, 0))
    return out


def _by_tensor(blocks: Blocks) -> dict[str, list[tuple[Box, np.ndarray]]]:
    """The box-shaped blocks by tensor (what box buffers are cut from)."""
    by_tensor: dict[str, list[tuple[Box, np.ndarray]]] = defaultdict(list)
    for t, bbox, arr in blocks:
        if isinstance(bbox, tuple):
            by_tensor[t].append((bbox, arr))
    return by_tensor


def _steps(
    ctx: Ctx, unit: Unit, blocks: Blocks, absolute: bool = False, skip: frozenset = frozenset()
) -> Any:
    """Per step of the unit: its operands ``{tensor: (buffer, box or Gather)}``, compute boxes
    and leaves over stored entries (``absolute``: every operand by absolute value; ``skip``:
    tensors whose buffers are not made)."""
    by_tensor = _by_tensor(blocks)
    dtypes = {t: arr.dtype for t, h, arr in blocks if not isinstance(h, Cuts)}
    dtypes |= {t: arr[0].dtype for t, h, arr in blocks if isinstance(h, Cuts) and arr}
    positions = _positions(unit) if any(isinstance(h, Cuts) for _, h, _ in blocks) else {}
    cache: dict[tuple[str, int], tuple[np.ndarray, Any]] = {}
    for bufs, boxes, works in unit.steps:
        operands = {}
        for t, b in bufs:
            if t in skip:
                continue
            key = (t, id(b))
            if key not in cache:
                dtype = dtypes.get(t, ctx.out_dtype)
                if isinstance(b, Gather):
                    arr = _gather(unit, t, b, blocks, dtype, positions)
                else:
                    arr = _assemble(unit, t, b, by_tensor.get(t, []), dtype)
                cache[key] = (np.abs(arr) if absolute else arr, b)
            operands[t] = cache[key]
        yield operands, boxes, works


def _abs_dtype(dtype: np.dtype) -> np.dtype:
    return np.abs(np.zeros(0, dtype)).dtype


def _buffers(unit: Unit, blocks: Blocks, operands: Mapping[str, Any]) -> int:
    """Elements of a step's fetch buffers, as the plan's memory model counts them: a buffer
    that is a view of a block its processor owns costs nothing; one made of other blocks,
    or a view of a block received from another processor, is a buffer."""
    own = [blocks[n][2] for n in unit.own if n < len(blocks)]
    total = 0
    for arr, _ in operands.values():
        if arr.base is not None and any(np.may_share_memory(arr, b) for b in own):
            continue
        total += arr.size
    return total


def _compute(
    ctx: Ctx,
    unit: Unit,
    blocks: Blocks,
    absolute: bool = False,
    prepared: dict[tuple[int, int, str], Any] | None = None,
    held: list[int] | None = None,
) -> tuple[np.ndarray, Traffic, int]:
    """The unit's partial output, the fetch traffic it received, and the iterations its
    leaves visited. ``absolute``: the same sums over the operands' absolute values and the
    terms' absolute coefficients (a recomputing check's magnitude bound). ``prepared``: the
    leaves over stored entries kept with a held unit (:class:`~.units.HeldUnit`), used and
    filled here. ``held``: appended the most elements the unit held at the end of a step
    beside its processor's owned blocks (its fetch buffers, and its output buffer unless the
    plan adds it straight into the owned block), measured on the arrays it made."""
    dtype = _abs_dtype(ctx.out_dtype) if absolute else ctx.out_dtype
    kernels = ctx.kernels
    if absolute:
        kernels = tuple(dataclasses.replace(k, coeff=abs(k.coeff)) for k in kernels)
    out = np.zeros(shape(unit.out_box), dtype)
    iterations = 0
    most = 0
    for s, (operands, boxes, works) in enumerate(_steps(ctx, unit, blocks, absolute)):
        if held is not None:
            most = max(most, _buffers(unit, blocks, operands) + (0 if unit.direct else out.size))
        for box in boxes:
            run_leaf(kernels, box, operands, out, unit.out_box)
            iterations += box_volume(box)
        for j, work in enumerate(works):
            if absolute:
                terms = tuple(dataclasses.replace(t, coeff=abs(t.coeff)) for t in work.terms)
                work = dataclasses.replace(work, terms=terms)
            leaves = None
            if prepared is not None and not absolute:
                leaves = prepared.get((s, j, dtype.str))
                if leaves is None:
                    leaves = prepared[(s, j, dtype.str)] = EntryLeaves(work, dtype)
            iterations += (leaves or EntryLeaves(work, dtype))(out, operands)
    traffic = [] if absolute else _received(unit, blocks, _by_tensor(blocks))
    if held is not None:
        held.append(most)
    return out, traffic, iterations


def _bare(kernels: tuple[TermKernel, ...], out_dtype: Any, **more: Any) -> Ctx:
    """A context for computing and checking outside a Dask task (no worker, no log)."""
    return Ctx("", tuple(kernels), np.dtype(out_dtype), None, lambda: None, **more)


def compute(
    kernels: tuple[TermKernel, ...],
    out_dtype: Any,
    unit: Unit,
    blocks: Blocks,
    prepared: dict[tuple[int, int, str], Any] | None = None,
) -> tuple[np.ndarray, Traffic, int]:
    """Unit ``unit``'s partial output from its input ``blocks`` (in the order of its
    ``needs``), the fetch traffic it received and the iterations its leaves visited: what
    a unit's task computes, for any transport (a volunteer runs the same code as a Dask
    worker). ``prepared``: leaves over stored entries kept between calls."""
    return _compute(_bare(kernels, out_dtype), unit, blocks, prepared=prepared)


def check(
    kernels: tuple[TermKernel, ...],
    out_dtype: Any,
    unit: Unit,
    blocks: Blocks,
    claimed: np.ndarray,
    seed: int,
    reps: int | None = None,
    plan_key: str = "",
    checksums: bool = True,
) -> Verdict:
    """The check of ``claimed`` as unit ``unit``'s result (:func:`verdict`) for any
    transport: ``seed`` draws its random vectors (keep it from the worker checked),
    ``plan_key`` names the unit's plan for kept checksums (:func:`plan_key`)."""
    ctx = _bare(kernels, out_dtype, checksums=checksums, plan_key=plan_key)
    return verdict(ctx, unit, blocks, claimed, seed, reps)


def received(unit: Unit, blocks: Blocks) -> Traffic:
    """The plan's fetch pieces of ``unit`` found in the input ``blocks`` it was handed
    (``(source, destination, words, index words)``): what a unit's task reports it
    received, for any transport."""
    return _received(unit, blocks, _by_tensor(blocks))


def sum_block(
    kernels: tuple[TermKernel, ...], out_dtype: Any, box: Any, contribs: Contribs
) -> tuple[np.ndarray, Traffic]:
    """Block ``box`` (a box, or a ``Span``) summed from ``contribs`` in their order, and the
    partial-sum traffic it received: what a reduction task computes, for any transport."""
    return _sum_block(_bare(kernels, out_dtype), box, contribs)


def planned_iterations(unit: Unit) -> int:
    """The iterations a unit's leaves visit (what an earlier execution of it in this run
    visited, when a re-run loads the entry that execution wrote)."""
    return sum(
        sum(map(box_volume, boxes)) + sum(w.iterations for w in works)
        for _, boxes, works in unit.steps
    )


def _calls(ctx: Ctx, unit: Unit, blocks: Blocks) -> list[Call]:
    """The leaf calls the unit makes: every term on every compute box (as ``run_leaf``)."""
    out: list[Call] = []
    for operands, boxes, _ in _steps(ctx, unit, blocks):
        for box in boxes:
            for tk, alpha, ops in term_calls(ctx.kernels, box, operands):
                ranges = tuple(
                    (box[i][0] - o[0], box[i][1] - o[0])
                    for i, o in zip(tk.out, unit.out_box, strict=True)
                )
                out.append((tk, alpha, ops, ranges))
    return out


#: units' costs (:func:`_costs`) by the driver's name for them (``plan_key``, unit name)
_COSTS: OrderedDict[tuple[str, str], tuple[int, int, int, int]] = OrderedDict()
_COSTS_LOCK = threading.Lock()
COSTS_KEPT = 1024


def _costs(ctx: Ctx, unit: Unit, blocks: Blocks) -> tuple[int, int, int, int]:
    """(products the unit computes, words a projection of it reads, products summed into
    one output element, factors per product): what decides between projecting and
    recomputing, and the recomputation's rounding bound. They follow from the unit's
    structure alone, so a unit the driver names (``ctx.plan_key``) is costed once per
    process: a session loop's checks of an SpMV unit spent a third of their time here."""
    key = (ctx.plan_key, unit.name) if ctx.plan_key else None
    got = _COSTS.get(key) if key is not None else None
    if got is None:
        got = _unit_costs(ctx, unit, blocks)
        if key is not None:
            with _COSTS_LOCK:
                _COSTS[key] = got
                while len(_COSTS) > COSTS_KEPT:
                    _COSTS.popitem(last=False)
    return got


def _unit_costs(ctx: Ctx, unit: Unit, blocks: Blocks) -> tuple[int, int, int, int]:
    products = words = K = p = 0
    for operands, boxes, works in _steps(ctx, unit, blocks):
        for box in boxes:
            for tk, alpha, ops in term_calls(ctx.kernels, box, operands):
                vol = box_volume(box)
                out_vol = math.prod(box[i][1] - box[i][0] for i in tk.out)
                products += vol
                words += sum(o.size for o in ops)
                K += vol // max(out_vol, 1)
                p = max(p, len(ops) + (alpha != 1))
        for work in works:
            a, b, k, f = entry_costs(work)
            products, words, K, p = products + a, words + b, K + k, max(p, f)
    return products, words + int(np.prod(shape(unit.out_box))), K, p


def verdict(
    ctx: Ctx, unit: Unit, blocks: Blocks, claimed: np.ndarray, seed: int, reps: int | None
) -> Verdict:
    """The check of ``claimed`` as the unit's result (see :mod:`.check`): by the randomized
    projection, or where that costs no more than computing it again (one product per entry:
    SpMV), by the unit's kept checksum ``c = r^T A`` (:func:`_checksum_verdict`), else by
    computing it again; also again where an operand holds ``inf`` or ``nan``."""
    products, words, K, p = _costs(ctx, unit, blocks)
    if recompute_cheaper(products, words):
        v = _checksum_verdict(ctx, unit, blocks, claimed, reps) if ctx.checksums else None
        if v is not None:
            return v
    else:
        out_shape = shape(unit.out_box)
        entry = [
            (w, {t: a for t, (a, _) in ops.items()})
            for ops, _, works in _steps(ctx, unit, blocks)
            for w in works
        ]
        if entry:
            v = project_entries(claimed, entry, out_shape, ctx.out_dtype, seed, reps)
        else:
            v = project(claimed, _calls(ctx, unit, blocks), out_shape, ctx.out_dtype, seed, reps)
        if not v.exact:
            return v
    want, _, _ = _compute(ctx, unit, blocks)
    mag, _, _ = _compute(ctx, unit, blocks, absolute=True)
    return recompute_verdict(claimed, want, mag, K, p, ctx.out_dtype)


#: this process's own secret: the checksums' random vectors derive from it and never leave
#: the process, so a worker checked by this one cannot know them (see :mod:`.check`)
_SECRET = secrets.token_bytes(16)
#: the checksums this process keeps (the most recently used), by unit structure and values
CHECKSUMS_KEPT = 64
_CHECKSUMS: OrderedDict[bytes, EntryChecksum] = OrderedDict()
_CHECKSUMS_LOCK = threading.Lock()
#: checksums made and reused by this process (what tests and benchmarks read)
checksum_counts: Counter[str] = Counter()


_PLAN_KEYS = WeakCache(64)


def plan_key(plan: Any) -> str:
    """A random name for ``plan`` in this (the driver's) process, the same for as long as the
    plan lives: a unit of it is known by ``(plan_key, unit name)``, a name the driver
    gives its checks (trusted as the driver is) instead of their hashing the unit's
    indices on every check."""
    got = _PLAN_KEYS.get(plan)
    if got is None:
        got = secrets.token_hex(16)
        _PLAN_KEYS.put(plan, got)
    return got


def _checksum_key(
    ctx: Ctx, unit: Unit, blocks: Blocks, sparse: frozenset, reps: int | None
) -> bytes:
    """What decides a unit's checksum: its structure (the entries' rows, columns and
    gathers: named by the driver's :func:`plan_key` and the unit's name, or else hashed in
    their pickle's buffers) and the values of its sparse operands' blocks. Hashed at
    memory speed: no arithmetic per entry; with the driver's name, a third of the bytes
    (an SpMV entry's 8-byte value, not its two 8-byte indices too)."""
    import pickle

    h = checkpoint_hash.hasher()  # XXH3-128, or BLAKE2b-128 without xxhash
    if ctx.plan_key:
        h.update(repr((ctx.plan_key, unit.name, reps, unit.out_box)).encode())
    else:
        buffers: list[Any] = []
        h.update(pickle.dumps((reps, unit.out_box, unit.steps), 5, buffer_callback=buffers.append))
        for b in buffers:
            h.update(b.raw())
    for t, box, arr in blocks:
        if t in sparse:
            for a in arr if isinstance(box, Cuts) else (arr,):
                a = np.ascontiguousarray(a)
                h.update(f"{t}{box!r}{a.dtype.str}{a.shape}".encode())
                h.update(memoryview(a).cast("B"))
    return h.digest()


def _checksum_verdict(
    ctx: Ctx, unit: Unit, blocks: Blocks, claimed: np.ndarray, reps: int | None
) -> Verdict | None:
    """The check of an SpMV-shaped unit against its checksum ``c = r^T A``, made on this
    process's first check of the unit with these values and kept for the next ones (a
    session loop's matrix is fixed): then the check costs the unit's rows and columns, not
    its entries. None where the unit has another shape or an operand is not finite."""
    out_shape = shape(unit.out_box)
    if len(out_shape) != 1 or any(boxes for _, boxes, _ in unit.steps):
        return None
    sparse = frozenset(
        n for _, _, works in unit.steps for w in works for t in w.terms for n, _ in t.sparse
    )
    if not sparse:
        return None
    key = _checksum_key(ctx, unit, blocks, sparse, reps)
    with _CHECKSUMS_LOCK:
        cs = _CHECKSUMS.get(key)
        if cs is not None:
            _CHECKSUMS.move_to_end(key)
    if cs is None:
        steps = [(i, ops, works) for i, (ops, _, works) in enumerate(_steps(ctx, unit, blocks))]
        seed = int.from_bytes(hashlib.blake2b(_SECRET + key, digest_size=8).digest(), "little")
        calls = [(i, w, {t: a for t, (a, _) in ops.items()}) for i, ops, ws in steps for w in ws]
        cs = entry_checksum(calls, out_shape[0], seed, reps)
        if cs is None:
            return None
        with _CHECKSUMS_LOCK:
            _CHECKSUMS[key] = cs
            while len(_CHECKSUMS) > CHECKSUMS_KEPT:
                _CHECKSUMS.popitem(last=False)
        checksum_counts["made"] += 1
        xs = {i: {t: a for t, (a, _) in ops.items()} for i, ops, _ in steps}
    else:
        checksum_counts["reused"] += 1
        xs = {
            i: {t: a for t, (a, _) in ops.items()}
            for i, (ops, _, _) in enumerate(_steps(ctx, unit, blocks, skip=sparse))
        }
    return checksum_verdict(cs, claimed, xs, ctx.out_dtype)


def hold_unit(ctx: Ctx, blob: bytes) -> HeldUnit:
    """The task that makes a unit's held description (:class:`~.units.HeldUnit`) on the
    worker it runs on (the ``lie`` hook: a named worker holds other bytes)."""
    w = ctx.worker()
    if ctx.lie and w is not None and w.name in ctx.lie:
        k = len(blob) // 2  # inside the index arrays: unpickles, as another unit
        blob = blob[:k] + bytes([blob[k] ^ 1]) + blob[k + 1 :]
    return HeldUnit(blob)


def unit_task(
    ctx: Ctx,
    unit: UnitArg,
    blocks: Blocks,
    try_load: bool,
    save: bool,
    replica: int | None = None,
    spec: int = 0,
    fresh: bool = False,
    redo: int = 0,
    expect: str | None = None,
) -> Any:
    """Load the unit's partial from the checkpoint, or compute (and save) it.

    ``expect``: on a sealed store (``checkpoint_key=``), the content digest the driver
    found the entry's seal vouching for; without it a sealed store's entry is never loaded
    (it was not sealed when the run began), and an entry holding other bytes is recomputed
    and reported (``unauthenticated`` in its ``done`` event).

    ``spec > 0`` marks a speculative duplicate: it logs under the unit's own name (one
    task, two copies) with ``spec`` set, and writes the very same checkpoint entry — same
    name, same bytes, atomically — so whichever copy lands last changes nothing.

    ``fresh``: the entry was not in the checkpoint when the run began, so one it finds was
    written by an earlier execution of this task in this run (whose worker died before its
    ``done`` event left): the load reports what that execution received (counted in the
    blocks this one was handed) and visited, so the run's stats still count it once.
    ``redo > 0``: attempt ``redo`` after a check rejected the unit's result (a
    recomputation, whatever speculative race the rejected copy was in).
    """
    unit, prepared = unheld(unit)
    label = unit.name if replica is None else f"{unit.name}#v{replica}"
    tags: dict[str, Any] = {"unit": True} | ({"spec": spec} if spec else {})
    tags |= {"redo": redo} if redo else {}
    w = ctx.worker()
    w = event(ctx, "start", label, w, fetched=fetched(w), **tags)
    t0 = time.perf_counter()
    corrupt = False
    store = ctx.store
    if try_load and store is not None and (expect is not None or not store.sealed):
        arr, status = store.load(unit.name, expect)
        if arr is not None:
            if fresh:
                # (what this task held: the loaded partial, unless it is the owned block)
                tags |= {
                    "traffic": _received(unit, blocks, _by_tensor(blocks)),
                    "iterations": [unit.proc, planned_iterations(unit)],
                    "held": [unit.proc, 0 if unit.direct else int(np.size(arr))],
                }
            event(ctx, "done", label, w, status="reused", seconds=time.perf_counter() - t0, **tags)
            return _fault(arr) if replica is None else (_fault(arr), w.address, {})
        corrupt = status == CORRUPT
        if status == UNAUTHENTICATED:
            tags |= {"unauthenticated": True}
    most: list[int] = []
    out, traffic, iterations = _compute(ctx, unit, blocks, prepared=prepared, held=most)
    _stall(ctx, w, time.perf_counter() - t0)
    if w.name in ctx.lie:
        out = out + 1
    out = _fault(out)
    seconds = time.perf_counter() - t0
    counts = {
        "traffic": traffic,
        "iterations": [unit.proc, iterations],
        "held": [unit.proc, most[0]],
    }
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


def _groups(
    copies: list[tuple[np.ndarray, str, dict[str, Any]]], rtol: float, atol: float
) -> list[list[int]]:
    """Copies grouped by agreement with each group's first copy (in copy order)."""
    groups: list[list[int]] = []
    for n, (arr, _, _) in enumerate(copies):
        for g in groups:
            first = copies[g[0]][0]
            if arr.shape == first.shape and np.allclose(arr, first, rtol=rtol, atol=atol):
                g.append(n)
                break
        else:
            groups.append([n])
    return groups


def _votes(
    copies: list[tuple[np.ndarray, str, dict[str, Any]]], rtol: float, atol: float
) -> tuple[list[list[int]], list[set[str]], list[str]]:
    """The copies' groups (:func:`_groups`), the workers voting for each, and every worker
    that ran a copy (sorted).

    A vote is a worker, not a copy: two copies Dask ran on one worker are not independent
    (a lying worker's two copies would outvote an honest one), so a worker votes once, and
    a worker whose own copies disagree votes for nothing (it is outvoted wherever a group
    wins).
    """
    groups = _groups(copies, rtol, atol)
    of: dict[str, set[int]] = {}
    for g, members in enumerate(groups):
        for n in members:
            of.setdefault(copies[n][1], set()).add(g)
    votes: list[set[str]] = [set() for _ in groups]
    for worker, gs in of.items():
        if len(gs) == 1:
            votes[next(iter(gs))].add(worker)
    return groups, votes, sorted(of)


def agree_task(
    ctx: Ctx,
    unit: UnitArg,
    copies: list[tuple[np.ndarray, str, dict[str, Any]]],
    rtol: float,
    atol: float,
) -> np.ndarray:
    """Accept a unit computed on several workers when a strict majority of the workers that
    ran its copies agree, at least two of them (:func:`_votes`: copies Dask ran on one
    worker count once).

    With two copies that means both, on two workers. The workers whose copies disagree with
    the majority are reported (an ``outvoted`` event) so the driver excludes them. No majority is
    :class:`VerificationFailed`. The accepted unit's traffic is a majority copy's: the plan
    moves each piece once, the other copies' inputs are Dask's extra transfers
    (``dask_transfer_bytes``).
    """
    unit, _ = unheld(unit)
    return _agree(
        ctx,
        unit.name,
        f"task {unit.name} (virtual processor {unit.proc})",
        unit.proc,
        copies,
        rtol,
        atol,
    )


def agree_block_task(
    ctx: Ctx,
    name: str,
    copies: list[tuple[np.ndarray, str, dict[str, Any]]],
    rtol: float,
    atol: float,
) -> np.ndarray:
    """:func:`agree_task` for a reduction's copies (``verify=k``): block ``name``."""
    return _agree(ctx, name, f"reduction {name}", None, copies, rtol, atol, block=True)


def _agree(
    ctx: Ctx,
    name: str,
    what: str,
    proc: int | None,
    copies: list[tuple[np.ndarray, str, dict[str, Any]]],
    rtol: float,
    atol: float,
    **tags: Any,
) -> np.ndarray:
    w = event(ctx, "start", name)
    groups, votes, workers = _votes(copies, rtol, atol)
    best = max(range(len(groups)), key=lambda g: len(votes[g]))
    if len(votes[best]) < 2 or 2 * len(votes[best]) <= len(workers):
        same = (
            f"; they ran on {len(workers)} distinct worker(s), and copies from one worker "
            "count once"
            if len(workers) < len(copies)
            else ""
        )
        raise VerificationFailed(
            f"{what} disagrees between workers "
            f"{', '.join(workers)}: no majority of the {len(copies)} copies agrees "
            f"(rtol={rtol}, atol={atol}){same}",
            processor=proc,
        )
    first, _, counts = copies[groups[best][0]]
    winners = sorted(votes[best])
    losers = sorted({copies[n][1] for g in groups if g is not groups[best] for n in g})
    if losers:
        event(ctx, "outvoted", name, w, workers=losers, accepted=winners, **tags)
    distinct = len(workers)
    finish(
        ctx,
        w,
        name,
        first,
        name,
        status="verified",
        distinct=distinct,
        seconds=0.0,
        **counts,
    )
    return first


def check_task(
    ctx: Ctx,
    unit: UnitArg,
    blocks: Blocks,
    claimed: np.ndarray,
    seed: int,
    reps: int | None,
    computed_by: str,
    save: bool,
) -> np.ndarray:
    """Check a unit's result away from the worker that computed it; the result if it passes.

    Run pinned to another worker. A passing result is checkpointed here (so an entry is
    only ever a checked result) and returned: reductions and the driver read this task's
    copy, not the computing worker's. A failing one raises :class:`CheckFailed`.
    """
    unit, _ = unheld(unit)
    w = ctx.worker()
    t0 = time.perf_counter()
    v = verdict(ctx, unit, blocks, claimed, seed, reps)
    what = f"unit {unit.name} (virtual processor {unit.proc})"
    return _judge(ctx, w, unit.name, what, v, claimed, computed_by, save, t0)


def _judge(
    ctx: Ctx,
    w: Any,
    name: str,
    what: str,
    v: Verdict,
    claimed: np.ndarray,
    computed_by: str,
    save: bool,
    t0: float,
    **tags: Any,
) -> np.ndarray:
    """Log a check's verdict; raise :class:`CheckFailed`, or checkpoint and return."""
    seconds = time.perf_counter() - t0
    info = {"ok": v.ok, "by": computed_by, "seconds": seconds, "diff": v.diff, "tol": v.tol}
    info |= tags
    if not v.ok:
        event(ctx, "check", name, w, **info)
        raise CheckFailed(
            f"{what} computed on {computed_by} failed its check on {w.address}: {v.describe()}",
            name,
            computed_by,
            v.describe(),
        )
    if save and ctx.store is not None:
        finish(ctx, w, name, claimed, name, kind="check", **info)
    else:
        event(ctx, "check", name, w, **info)
    return claimed


Contribs = list[tuple[np.ndarray, Box | None, Box | Cut, int, int]]
"""A reduction's summands: ``(partial, its box, piece, source, destination)``; a piece of
rows or stored entries is a :class:`~.units.Cut` (from the partial into the block)."""


def reduction_verdict(
    ctx: Ctx, box: Any, contribs: Contribs, claimed: np.ndarray, seed: int, reps: int | None
) -> Verdict:
    """The check of a claimed block against its summands: summed again, in the reducer's
    order. A sum does one addition per summand element, no more than projecting it would
    read (:func:`.check.recompute_cheaper` always holds), so the block is recomputed and
    accepted by the recomputation's rounding rule (:func:`.check.recompute_verdict`: the
    same bits, or within ``2 gamma_c M``; ``nan`` for ``nan`` where a summand is not
    finite). ``seed`` and ``reps`` are unused: nothing random is drawn."""
    want, _ = _sum_block(ctx, box, contribs)
    mag, _ = _sum_block(ctx, box, contribs, absolute=True)
    return recompute_verdict(claimed, want, mag, len(contribs), 0, ctx.out_dtype)


def check_reduce_task(
    ctx: Ctx,
    name: str,
    box: Box,
    contribs: Contribs,
    claimed: np.ndarray,
    seed: int,
    reps: int | None,
    computed_by: str,
    save: bool,
) -> np.ndarray:
    """Check a reduction's block away from the worker that summed it (``verify="check"``);
    the block if it passes (checkpointed here), else :class:`CheckFailed`."""
    w = ctx.worker()
    t0 = time.perf_counter()
    v = reduction_verdict(ctx, box, contribs, claimed, seed, reps)
    return _judge(ctx, w, name, f"reduction {name}", v, claimed, computed_by, save, t0, block=True)


def recheck_task(
    ctx: Ctx,
    unit: UnitArg,
    blocks: Blocks,
    seed: int,
    reps: int | None,
) -> bool:
    """Re-verify the checkpoint entry of ``unit`` (written by a worker since excluded).

    A damaged, missing or failing entry is recomputed here and rewritten. True when the
    entry was sound.
    """
    unit, _ = unheld(unit)
    w = ctx.worker()
    arr, _ = ctx.store.load(unit.name) if ctx.store is not None else (None, None)
    if arr is not None and verdict(ctx, unit, blocks, arr, seed, reps).ok:
        event(ctx, "recheck", unit.name, w, ok=True, **_vouch(ctx, unit.name, arr))
        return True
    out, _, _ = _compute(ctx, unit, blocks)
    if ctx.store is not None:
        ctx.store.save(unit.name, out)
    event(ctx, "recheck", unit.name, w, ok=False, **_vouch(ctx, unit.name, out))
    return False


def _vouch(ctx: Ctx, name: str, arr: np.ndarray) -> dict[str, Any]:
    """What a recheck tells a driver that seals entries: the content digest of the entry
    it verified or rewrote (nothing on an unsealed store)."""
    if ctx.store is None or not ctx.store.sealed:
        return {}
    return {"entry": name, "digest": content_digest(arr)}


def recheck_block_task(ctx: Ctx, name: str, box: Any, contribs: Contribs) -> bool:
    """Re-verify the entry of block ``name`` (written by a worker since excluded) against
    its summands, the checked partials (:func:`reduction_verdict`); a damaged, missing or
    failing entry is summed again here and rewritten. True when the entry was sound."""
    w = ctx.worker()
    arr, _ = ctx.store.load(name) if ctx.store is not None else (None, None)
    if arr is not None and reduction_verdict(ctx, box, contribs, arr, 0, None).ok:
        event(ctx, "recheck", name, w, ok=True, **_vouch(ctx, name, arr))
        return True
    block, _ = _sum_block(ctx, box, contribs)
    if ctx.store is not None:
        ctx.store.save(name, block)
    event(ctx, "recheck", name, w, ok=False, **_vouch(ctx, name, block))
    return False


def _sum_block(
    ctx: Ctx, box: Any, contribs: Contribs, absolute: bool = False
) -> tuple[np.ndarray, Traffic]:
    """Block ``box`` (a box, or a Span) summed from ``contribs`` in their order, and the
    partial-sum traffic it received (``absolute``: the sum of the summands' magnitudes)."""
    dtype = _abs_dtype(ctx.out_dtype) if absolute else ctx.out_dtype
    block = np.zeros(shape(box), dtype)
    traffic: Traffic = []
    for arr, out_box, piece, src, dst in contribs:
        if isinstance(piece, Cut):
            part = read(arr, piece.src)
            add_at(block, piece.dst, np.abs(part) if absolute else part)
            iw = piece.index_words
        else:
            assert out_box is not None
            part = arr[box_index(piece, out_box)]
            block[box_index(piece, box)] += np.abs(part) if absolute else part
            iw = 0
        if dst >= 0 and part.size:
            traffic.append((src, dst, part.size, iw))
    return block, traffic


def reduce_task(
    ctx: Ctx,
    name: str,
    box: Box,
    contribs: Contribs,
    save: bool = True,
    replica: int | None = None,
    owner: int = -1,
) -> Any:
    """Sum the unit partials' pieces of one output block; checkpoint the finished block.

    ``contribs`` are ``(partial, its box, piece, source, destination)``: the destination is
    where the plan's ``Flush`` sends the piece (the reducer, or a routing tree's parent),
    ``-1`` when the plan adds it locally or the piece is not the end of the processor's sum
    (an earlier unit of a split output buffer). The elements of each sent piece found in
    the partial that arrived are this block's received traffic.
    A re-run (after the worker holding the block died) loads the block it already saved.

    ``save=False`` (``verify="check"``: the block's check saves it) only sums.
    ``replica=r`` is copy ``r`` of ``verify=k``: it returns ``(block, worker, counts)`` for
    :func:`agree_block_task`, which saves the agreed block and logs its traffic.
    ``owner``: the processor that reduces the block (whose memory the received partials
    are counted to).
    """
    label = name if replica is None else f"{name}#v{replica}"
    w = event(ctx, "start", label)
    t0 = time.perf_counter()
    # a sealed store's blocks are loaded, authenticated, by the driver: one it did not
    # load is not to be trusted here
    if ctx.store is not None and replica is None and not ctx.store.sealed:
        saved, _ = ctx.store.load(name)
        if saved is not None:
            event(ctx, "done", label, w, status="reused", seconds=time.perf_counter() - t0)
            return _fault(saved)
    block, traffic = _sum_block(ctx, box, contribs)
    if w.name in ctx.lie:  # a lying worker is wrong on its reductions as on its units
        block = block + 1
    block = _fault(block)
    seconds = time.perf_counter() - t0
    # the reducer holds, beside its owned blocks, the partial sums it received (its inbox)
    inbox = {"held": [owner, sum(words for _, _, words, _ in traffic)]}
    if replica is not None:
        event(ctx, "done", label, w, status="computed", seconds=seconds)
        return block, w.address, {"traffic": traffic, **inbox}
    done = {"status": "computed", "seconds": seconds, "traffic": traffic, **inbox}
    if save:
        finish(ctx, w, name, block, name, **done)
    else:
        event(ctx, "done", label, w, **done)
    return block


__all__ = [
    "FAULT_ENV",
    "CheckFailed",
    "Ctx",
    "Traffic",
    "VerificationFailed",
    "agree_block_task",
    "agree_task",
    "check",
    "check_reduce_task",
    "check_task",
    "compute",
    "cut_block",
    "drain",
    "event",
    "fetched",
    "finish",
    "hash_block",
    "input_block",
    "planned_iterations",
    "received",
    "recheck_block_task",
    "recheck_task",
    "reduce_task",
    "reduction_verdict",
    "source_block",
    "sum_block",
    "transfer_bytes",
    "unit_task",
    "verdict",
]
