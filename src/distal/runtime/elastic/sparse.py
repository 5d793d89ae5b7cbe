"""A bound sparse kernel on the elastic (Dask) runtime: the four phases of
:mod:`distal.runtime.sparse_exec` as a task graph.

Per virtual processor ``p`` of the bound :class:`~distal.plan.sparse.SparsePlan`:

- **owned**: ``owned_data(plan, p, inputs)``, cut on the driver and carried in its task, so
  Dask can rebuild it after losing the worker that held it;
- **payloads**: one task per (source, receiver) pair with something to send, next to the
  source's owned data: ``payload(...)`` for every piece of the receiver's needs that source
  serves, in the needs' piece order;
- **compute** (``compute-p<p>``): ``Compute(plan, p).run(owned, received)``, the
  processor's contributions to the output rows it touches;
- **partials**: one task per (computer, owner) pair, ``partial(...)`` of each piece of the
  computer's output the owner reduces;
- **reduce** (``block-p<q>``): ``reduce_output(plan, q, y, {src: parts})``, partial sums in
  increasing source order, so the bits never depend on which task finished first;

and the driver assembles the blocks. The plan travels once: one task carries it (like an
input block, so it is rebuilt if every worker holding it is lost) and Dask copies it to each
worker that runs a task needing it; the other tasks carry only small arguments.

``Result.stats`` are counted by the tasks from the arrays they were handed: a compute task
counts the values and index arrays of every payload it received (one message per tensor and
source), a reduction the partial sums it added (one message per source); iterations are the
processor's plan's, and ``peak_words`` is what the local runtime measures (owned data, the
payloads received, the partials sent and received). A first run moves exactly what the
plan says, so ``Result.stats == bound.stats()``; work loaded from a checkpoint moved nothing
and counts nothing. Dask's own transfers (the plan, payloads, partials and results moved
between workers wherever it placed the tasks) are ``Result.extra["dask_transfer_bytes"]``.

With ``checkpoint=``, each compute result and each reduced output block is an entry of the
dense runtime's :class:`~distal.runtime.checkpoint.CheckpointStore` (checksummed, written
behind the task). The run key hashes the statement, schedule, formats, shapes, dtypes,
every sparse input's ``pattern_fingerprint()`` and a fingerprint of every input's values,
so a changed value or pattern never meets a stale entry. A rerun loads finished blocks on
the driver and finished compute results on a worker (only their partials move), and
computes the rest (entries are not re-verified when loaded, whatever ``verify`` says). Each
entry's task first records what it received (``moved-<entry>``), so a task whose worker died
before its ``done`` event reached the driver is still counted; those records are removed
when the run completes.

**Untrusted workers** (``verify=``; the dense runtime's semantics, :class:`_Verifier`).
With verification, tasks go to Dask as their inputs are accepted: compute tasks a window at
a time (twice the trusted workers' threads), pinned round-robin over the trusted workers;
a reduction once every compute result it sums is accepted, cutting their partials itself
(nothing unchecked enters a sum).

- ``verify="check"``: each compute result is checked on a trusted worker other than the
  one holding it (:func:`check_task`, pinned there strictly), by the randomized projection
  (:func:`project_compute`) where that costs less than computing the result again, else
  by computing it again and comparing within the rounding bound (:func:`recompute_verdict`;
  SpMV, one product per entry, is such a kernel: see :func:`recompute_cheaper`). Each
  block is checked by summing it again elsewhere (a sum costs what its check would). A
  result that fails is computed (summed) again on another trusted worker and checked in
  turn; the worker that made it is *excluded*: no further task goes to it (a task already
  handed to it may still finish there, and is checked like any other), and the checkpoint
  entries it wrote in this run are re-verified on a trusted worker (recomputed and
  rewritten if they fail; once more at the end of the run for entries that landed after).
  A passing check writes the entry, so an entry is only ever a checked result.
- ``verify=k``: every compute task and every reduction runs as ``k`` copies pinned to
  distinct trusted workers, and a strict majority is accepted (the dense runtime's
  agreement tasks); the workers whose copies it outvoted are excluded as above. No
  majority (``verify=2``: any disagreement) is
  :class:`~distal.runtime.elastic.tasks.VerificationFailed`, as is running out of trusted
  workers.

``Result.extra["summary"]`` reports it as the dense runtime's summary does: ``checked``,
``reductions_checked``, ``units_rejected`` (compute results), ``reductions_rejected``,
``rejections`` (per rejected result: ``unit`` = its entry name, ``kind``, the ``worker``
that made it, ``how``, and with a check ``recomputed_on``), ``excluded_workers`` and
``rechecked``. Loaded checkpoint entries are not checked. Test hooks: ``_lie`` makes the
named workers add 1 to every compute result and block; a worker process started with
``DISTAL_FAULT_CORRUPT=q`` (:data:`~distal.runtime.elastic.tasks.FAULT_ENV`, the dense
runtime's hook) adds 1.0 to one element of each compute result and block it computes with
probability ``q``.

The dense runtime's ``granularity``, ``window`` and ``speculate`` options do not apply (a
processor's computation is one task; there is no feeder to speculate with): setting them
is refused.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from distal.errors import InputError, NotSupportedYet, RuntimeFailure
from distal.plan.sparse import SparsePlan
from distal.plan.stats import Stats
from distal.runtime import dask as adapter
from distal.runtime.checkpoint import (
    CORRUPT,
    FORMAT,
    CheckpointStore,
    combine,
    fingerprint_array,
    source_fingerprint,
)
from distal.runtime.elastic.check import (
    U64,
    Verdict,
    _gamma,
    _unit_roundoff,
    default_repeats,
    vectors,
)
from distal.runtime.elastic.driver import drain_checkpoint, task_exception, workers
from distal.runtime.elastic.options import Options
from distal.runtime.elastic.summary import Events, summarize
from distal.runtime.elastic.tasks import (
    CheckFailed,
    Ctx,
    VerificationFailed,
    _fault,
    _judge,
    _stall,
    agree_block_task,
    agree_task,
    event,
    finish,
    transfer_bytes,
)
from distal.runtime.progress import Progress
from distal.runtime.result import Result
from distal.runtime.source import is_block_source
from distal.runtime.sparse_exec import (
    Compute,
    Owned,
    assemble,
    owned_data,
    owned_words,
    partial,
    payload,
    reduce_output,
    words_of,
)

STATS_NOTE = (
    "dask runtime, sparse kernel: Result.stats words, index words and messages are counted "
    "by the tasks from the arrays they received (each compute task's payloads, each "
    "reduction's partial sums), between the plan's virtual processors; iterations are the "
    "plan's; peak_words is owned data plus what was received and the partials sent; work "
    "loaded from a checkpoint moved nothing and counts nothing. Dask's own transfers are "
    "extra['dask_transfer_bytes']"
)

#: options of ``runtime="dask"`` that have no meaning for a sparse kernel (and their defaults)
_DENSE_ONLY = {"granularity": "flush", "window": None, "speculate": False}

Moved = list[list[int]]
"""Messages as ``[source, destination, words, index words]``, counted by their receiver."""


def compute_name(p: int) -> str:
    """Checkpoint entry (and event label) of processor ``p``'s compute result."""
    return f"compute-p{p}"


def block_name(q: int) -> str:
    """Checkpoint entry (and event label) of processor ``q``'s reduced output block."""
    return f"block-p{q}"


@dataclass(frozen=True)
class _Named:
    """What :func:`~distal.runtime.elastic.tasks.agree_task` reads of a unit: its entry name
    and processor."""

    name: str
    proc: int


# ---------------------------------------------------------------------------------------
# Run key: what decides the numbers
# ---------------------------------------------------------------------------------------


def fingerprints(plan: SparsePlan, data: Mapping[str, Any], owned: list[Owned]) -> dict[str, str]:
    """Per input: the pattern's fingerprint and the values' (sparse), the array's (dense),
    or a block source's own ``fingerprint()`` (without one: the blocks the processors own,
    which the driver has read anyway)."""
    out: dict[str, str] = {}
    for name, x in sorted(data.items()):
        if name in plan.arrays:
            out[name] = f"pattern={x.pattern_fingerprint()};values={fingerprint_array(x.vals)}"
        elif is_block_source(x):
            fp = source_fingerprint(x)
            if fp is None:
                fp = combine(
                    {
                        str(o.p): fingerprint_array(o.dense[name][0])
                        for o in owned
                        if name in o.dense
                    }
                )
            out[name] = fp
        else:
            out[name] = fingerprint_array(np.asarray(x))
    return out


def describe(plan: SparsePlan, prints: Mapping[str, str]) -> dict[str, Any]:
    """The manifest's human-readable part (``distal checkpoint`` lists ``statement``)."""
    a = plan.analysis
    s = a.schedule
    return {
        "format": FORMAT,
        "kind": "sparse",
        "statement": str(a.statement.assignment),
        "schedule": repr(s),
        "distributions": dict(s.distributions),
        "formats": {n: str(t.format) for n, t in a.tensors.items()},
        "shapes": {n: list(t.shape) for n, t in a.tensors.items()},
        "dtypes": {n: np.dtype(t.dtype).str for n, t in a.tensors.items()},
        "machine": list(a.grid),
        "fingerprints": dict(prints),
    }


def run_key(plan: SparsePlan, prints: Mapping[str, str]) -> str:
    """The checkpoint directory of one (sparse kernel, inputs): the plan is a function of
    the schedule and the patterns, so these decide every entry's bytes."""
    d = describe(plan, prints)
    desc = repr(sorted((k, repr(v)) for k, v in d.items()))
    return hashlib.sha256(f"sparse:{desc}".encode()).hexdigest()[:32]


# ---------------------------------------------------------------------------------------
# Tasks (run on the workers)
# ---------------------------------------------------------------------------------------


def carry(x: Any) -> Any:
    """The plan or a processor's owned data, carried in its task so Dask can rebuild it."""
    return x


def payload_task(plan: SparsePlan, owned: Owned, dst: int) -> dict[str, list[list[np.ndarray]]]:
    """Everything ``owned.p`` sends to ``dst``: per tensor, the payload of each piece of
    ``dst``'s need it serves, in the need's piece order."""
    out: dict[str, list[list[np.ndarray]]] = {}
    for name, need in plan.procs[dst].needs.items():
        arrays = [payload(plan, owned, need, pc) for pc in need.pieces if pc.peer == owned.p]
        if arrays:
            out[name] = arrays
    return out


def _received(
    p: int, senders: list[tuple[int, dict[str, list[list[np.ndarray]]]]]
) -> tuple[dict[tuple[str, int], list[list[np.ndarray]]], Moved]:
    """``received[(tensor, src)]`` as :class:`Compute` takes it, and what it counts."""
    received: dict[tuple[str, int], list[list[np.ndarray]]] = {}
    moved: Moved = []
    for src, by_tensor in senders:
        for name, pieces in by_tensor.items():
            received[(name, src)] = pieces
            w = iw = 0
            for arrays in pieces:
                a, b = words_of(arrays)
                w, iw = w + a, iw + b
            if w or iw:
                moved.append([src, p, w, iw])
    return received, moved


def moved_name(name: str) -> str:
    """The entry holding what the task that wrote entry ``name`` received in this run."""
    return f"moved-{name}"


def _save_moved(ctx: Ctx, name: str, moved: Moved) -> None:
    """Record ``moved`` before entry ``name`` is written: a re-run in this run that loads the
    entry (its worker died before its ``done`` event reached the driver) still reports the
    words the first execution received."""
    if ctx.store is not None:
        ctx.store.save(moved_name(name), np.asarray(moved, np.int64).reshape(-1, 4))


def _reloaded(ctx: Ctx, name: str) -> dict[str, Any]:
    """The counts of a re-run that loaded entry ``name`` written earlier in this run."""
    arr, _ = _load(ctx, moved_name(name))
    return {} if arr is None else {"moved": arr.tolist()}


def _load(ctx: Ctx, name: str) -> tuple[np.ndarray | None, bool]:
    """Entry ``name`` from the checkpoint (None when absent), and whether it was corrupt."""
    if ctx.store is None:
        return None, False
    arr, status = ctx.store.load(name)
    return arr, status == CORRUPT


def load_task(ctx: Ctx, name: str) -> np.ndarray:
    """A finished entry, read on a worker (a rerun's compute result: only its partials move
    on). A missing or damaged entry fails the task; the driver then computes it."""
    w = event(ctx, "start", name)
    t0 = time.perf_counter()
    arr, corrupt = _load(ctx, name)
    if arr is None:
        event(ctx, "fail", name, w, corrupt=corrupt)
        raise RuntimeFailure(f"checkpoint entry {name!r} is {'corrupt' if corrupt else 'gone'}")
    event(ctx, "done", name, w, status="reused", seconds=time.perf_counter() - t0)
    return arr


def compute_task(
    ctx: Ctx,
    plan: SparsePlan,
    p: int,
    owned: Owned,
    senders: list[tuple[int, dict[str, list[list[np.ndarray]]]]],
    save: bool,
    replica: int | None = None,
) -> Any:
    """Processor ``p``'s contributions from its owned data and the payloads it was sent.

    A re-run (Dask lost the worker holding the result) loads the entry it saved, with what
    the first execution received (the driver submits this task only for entries that were
    not there when the run began, so an entry it finds is this run's). ``replica`` is copy
    ``r`` of ``verify=k``: it returns ``(y, worker, counts)`` for the agreement. A worker
    started with ``DISTAL_FAULT_CORRUPT=q`` corrupts what it returns with probability ``q``
    (the dense runtime's hook, :data:`~distal.runtime.elastic.tasks.FAULT_ENV`).
    """
    name = compute_name(p)
    label = name if replica is None else f"{name}#v{replica}"
    w = event(ctx, "start", label, unit=True)
    t0 = time.perf_counter()
    corrupt = False
    if save and replica is None:
        arr, corrupt = _load(ctx, name)
        if arr is not None:
            counts = _reloaded(ctx, name) | {"iterations": [p, plan.procs[p].iterations]}
            seconds = time.perf_counter() - t0
            event(ctx, "done", label, w, status="reused", seconds=seconds, **counts)
            return _fault(arr)
    received, moved = _received(p, senders)
    comp = Compute(plan, p)
    y = comp.run(owned, received)
    # what the processor held beyond its owned data (operand and partial buffers), as a row
    # (-1, p, words, 0) of the counts, so a re-run that loads the entry reports it too
    moved = [*moved, [-1, p, comp.held, 0]]
    _stall(ctx, w, time.perf_counter() - t0)
    if w.name in ctx.lie:
        y = y + 1
    y = _fault(y)
    counts = {"moved": moved, "iterations": [p, plan.procs[p].iterations]}
    done = {"status": "computed", "corrupt": corrupt, "seconds": time.perf_counter() - t0}
    if replica is not None:
        event(ctx, "done", label, w, **done)
        return y, w.address, counts
    if save and ctx.store is not None:
        _save_moved(ctx, name, moved)
        finish(ctx, w, name, y, label, **done, **counts)
    else:
        event(ctx, "done", label, w, **done, **counts)
    return y


def compute_verdict(
    plan: SparsePlan,
    p: int,
    owned: Owned,
    received: Mapping[tuple[str, int], list[list[np.ndarray]]],
    claimed: np.ndarray,
    seed: int,
    reps: int | None,
) -> Verdict:
    """The check of ``claimed`` as processor ``p``'s compute result: by the randomized
    projection (:func:`project_compute`) where that costs less than computing the result
    again (:func:`recompute_cheaper`), else by computing it again (:func:`recompute_verdict`).
    Non-finite operands are checked by recomputing (the bits must then be identical, ``nan``
    for ``nan``)."""
    comp = Compute(plan, p)
    xs = comp.operands(owned, {k: list(v) for k, v in received.items()})
    if recompute_cheaper(comp):
        return recompute_verdict(comp, xs, claimed)
    v = project_compute(comp, xs, claimed, seed, reps)
    if v.exact:
        want = comp.run(owned, received)
        claimed = np.asarray(claimed)
        same = claimed.shape == want.shape and bool(np.array_equal(claimed, want, equal_nan=True))
        v = Verdict(same, 0.0 if same else math.inf, 0.0, 0, v.dims, exact=True)
    return v


def recompute_cheaper(comp: Compute) -> bool:
    """Whether computing ``comp``'s result again costs less than projecting it.

    A term's computation does, per entry, one product per element of its dense factors'
    letters (1 for SpMV, ``K`` for SpMM with ``K`` columns, ``J`` for SDDMM's inner
    dimension); the projection reads each entry's value, row and operand indices, for the
    value and again for the magnitude bound (about ``2 (factors + 2)`` passes over the
    entries per repetition, and the batch of repetitions shares them). Where the product
    count is the smaller, the check computes the result again: with one product per entry
    (SpMV) no order of evaluation makes a check cheaper than the kernel itself.
    """
    work = passes = 0
    for t, leaf in zip(comp.pp.terms, comp.leaves, strict=True):
        if leaf is None or len(t.out) == 0:
            continue
        letters = {c for _, _, ls in t.dense for c in ls}
        work += len(t.out) * math.prod(comp.extents[c] for c in letters)
        passes += len(t.out) * 2 * (len(t.sparse) + len(t.dense) + 2)
    return work <= passes


def _run_on(comp: Compute, xs: Mapping[str, np.ndarray], absolute: bool) -> np.ndarray:
    """``comp``'s contributions from its operands ``xs`` (as :meth:`Compute.run`, the same
    leaves in the same order); with ``absolute``, of every operand's absolute value."""
    f = np.abs if absolute else (lambda a: a)
    dtype = np.dtype(comp.dtype)
    if absolute:
        dtype = np.abs(np.zeros(0, dtype)).dtype
    y = np.zeros(comp.out_shape, dtype=dtype)
    for t, leaf in zip(comp.pp.terms, comp.leaves, strict=True):
        if leaf is None or len(t.out) == 0:
            continue
        v = None
        for name, idx in t.sparse:
            vals = f(xs[name] if comp.direct[(id(t), name)] else xs[name][idx])
            v = vals if v is None else v * vals
        coeff = t.coeff * t.scale
        if coeff != 1:
            v = v * (abs(coeff) if absolute else coeff)
        dense = [np.ascontiguousarray(f(xs[n])) for n, _, _ in t.dense]
        leaf(y, np.ascontiguousarray(v, dtype=dtype), dense)
    return y


def recompute_verdict(comp: Compute, xs: Mapping[str, np.ndarray], claimed: Any) -> Verdict:
    """Check ``claimed`` by computing ``comp``'s result again from its operands ``xs``.

    Bit-identical is a pass (the same leaves in the same order give the same bits on every
    machine that rounds as IEEE 754 says). Otherwise the two results must agree within the
    rounding of two evaluations of the same sum in any order: each element of either is
    within ``gamma_(K+p) M`` of the exact value (Higham, ch. 3), ``K`` the products summed
    into the element, ``p`` the factors of each, ``M`` the sum of the products' absolute
    values, computed here from the operands (never from the claim), so elementwise
    ``|claimed - recomputed| <= 2 gamma_(K+p) M / (1 - gamma_(K+p))``. Deterministic: a
    wrong result passes only if every element's error is below that bound (integers: exact).
    """
    dims = len(comp.out_shape)
    claimed = np.asarray(claimed)
    want = _run_on(comp, xs, False)
    if claimed.shape != want.shape:
        return Verdict(False, math.inf, 0.0, 0, dims, exact=True)
    if np.array_equal(claimed, want, equal_nan=True):
        return Verdict(True, 0.0, 0.0, 0, dims, exact=True)
    mag = _run_on(comp, xs, True)
    K = p = 0
    for t, leaf in zip(comp.pp.terms, comp.leaves, strict=True):
        if leaf is None or len(t.out) == 0:
            continue
        letters = {c for _, _, ls in t.dense for c in ls}
        rows = int(np.bincount(t.out).max())
        K += rows * math.prod(comp.extents[c] for c in letters - set(comp.pp.out_letters))
        p = max(p, len(t.sparse) + len(t.dense) + (t.coeff * t.scale != 1))
    cplx = 2 if np.dtype(comp.dtype).kind == "c" else 1
    g = _gamma(K + cplx * (p + 1), _unit_roundoff(np.dtype(comp.dtype)))
    with np.errstate(invalid="ignore", over="ignore"):
        tol = 2 * g * mag / (1 - g) if g < 1 else np.full(mag.shape, math.inf)
        tol = np.where(np.isfinite(mag), tol, 0.0)  # no bound from inf: the bits must agree
        diff = np.abs(claimed - want)
        same = (claimed == want) | (np.isnan(claimed) & np.isnan(want))
        excess = np.where(same, -np.inf, np.where(np.isnan(diff), np.inf, diff - tol))
    worst = int(np.argmax(excess))
    ok = bool(excess.reshape(-1)[worst] <= 0)
    d, t = float(diff.reshape(-1)[worst]), float(tol.reshape(-1)[worst])
    return Verdict(ok, d, t, 0, dims, exact=True)


def check_task(
    ctx: Ctx,
    plan: SparsePlan,
    p: int,
    owned: Owned,
    senders: list[tuple[int, dict[str, list[list[np.ndarray]]]]],
    claimed: np.ndarray,
    computed_by: str,
    seed: int,
    reps: int | None,
    save: bool,
) -> np.ndarray:
    """Check processor ``p``'s compute result ``claimed`` (computed on ``computed_by``) on
    another worker (``verify="check"``; the driver pins this task away from it).

    A passing result is checkpointed here (an entry is only ever a checked result) and
    returned: the reductions read this task's copy. A failing one raises
    :class:`~distal.runtime.elastic.tasks.CheckFailed`; the driver then excludes
    ``computed_by`` and computes ``p`` again on another worker."""
    w = ctx.worker()
    t0 = time.perf_counter()
    received, _ = _received(p, senders)
    v = compute_verdict(plan, p, owned, received, claimed, seed, reps)
    what = f"compute result {compute_name(p)} (virtual processor {p})"
    return _judge(ctx, w, compute_name(p), what, v, claimed, computed_by, save, t0)


def partial_task(plan: SparsePlan, p: int, y: np.ndarray, dst: int) -> list[np.ndarray]:
    """The parts of ``p``'s contributions that ``dst`` reduces, in ``p``'s piece order."""
    pp = plan.procs[p]
    return [partial(pp, y, pc) for pc in pp.out.pieces if pc.peer == dst]


def _cut(
    plan: SparsePlan, q: int, ys: Mapping[int, np.ndarray]
) -> tuple[np.ndarray | None, dict[int, list[np.ndarray]]]:
    """``q``'s own contributions and the partials it reduces, cut from the accepted compute
    results ``ys`` (every processor sending to ``q``, ``q`` itself if it adds its own)."""
    parts = {p: partial_task(plan, p, y, q) for p, y in ys.items() if p != q}
    return ys.get(q), parts


def reduce_task(
    ctx: Ctx,
    plan: SparsePlan,
    q: int,
    y: np.ndarray | None,
    parts: dict[int, list[np.ndarray]],
    save: bool,
    replica: int | None = None,
) -> Any:
    """``q``'s output block: its own contributions, then the partial sums received in
    increasing source order. A re-run loads the block it saved; ``replica`` is a
    ``verify=k`` copy, returning ``(block, worker, counts)``. The fault hook corrupts a
    computed block as it does a compute result."""
    name = block_name(q)
    label = name if replica is None else f"{name}#v{replica}"
    w = event(ctx, "start", label)
    t0 = time.perf_counter()
    if save and replica is None:  # as compute_task: an entry found here is this run's
        arr, _ = _load(ctx, name)
        if arr is not None:
            seconds = time.perf_counter() - t0
            event(ctx, "done", label, w, status="reused", seconds=seconds, **_reloaded(ctx, name))
            return _fault(arr)
    block = reduce_output(plan, q, y, parts)
    moved: Moved = []
    for src in sorted(parts):
        words = int(sum(x.size for x in parts[src]))
        if src != q and words:
            moved.append([src, q, words, 0])
    if block is not None:
        if w.name in ctx.lie:
            block = block + 1
        block = _fault(block)
    counts = {"moved": moved}
    seconds = time.perf_counter() - t0
    if replica is not None:
        event(ctx, "done", label, w, status="computed", seconds=seconds)
        return block, w.address, counts
    if save and ctx.store is not None and block is not None:
        _save_moved(ctx, name, moved)
        finish(ctx, w, name, block, label, status="computed", seconds=seconds, **counts)
    else:
        event(ctx, "done", label, w, status="computed", seconds=seconds, **counts)
    return block


def reduce_cut_task(
    ctx: Ctx,
    plan: SparsePlan,
    q: int,
    ys: dict[int, np.ndarray],
    save: bool,
    replica: int | None = None,
) -> Any:
    """:func:`reduce_task` from the accepted compute results themselves (with verification:
    the partials are cut here, so nothing unchecked enters the sum)."""
    y, parts = _cut(plan, q, ys)
    return reduce_task(ctx, plan, q, y, parts, save, replica)


def check_reduce_task(
    ctx: Ctx,
    plan: SparsePlan,
    q: int,
    ys: dict[int, np.ndarray],
    claimed: np.ndarray | None,
    computed_by: str,
    save: bool,
) -> np.ndarray | None:
    """Check ``q``'s block (summed on ``computed_by``) on another worker
    (``verify="check"``).

    A reduction reads each partial sum once and adds it, so checking it costs what summing
    it again costs: the block is summed again here, from the same accepted compute results
    in the same fixed order, and must be bit-identical (``nan`` for ``nan``). A passing
    block is checkpointed here and returned; a failing one raises
    :class:`~distal.runtime.elastic.tasks.CheckFailed` (the driver excludes the reducer and
    sums the block again elsewhere)."""
    w = ctx.worker()
    t0 = time.perf_counter()
    name = block_name(q)
    y, parts = _cut(plan, q, ys)
    want = reduce_output(plan, q, y, parts)
    if claimed is None or want is None:
        ok = claimed is None and want is None
    else:
        claimed = np.asarray(claimed)
        ok = claimed.shape == want.shape and bool(np.array_equal(claimed, want, equal_nan=True))
    detail = "summed again: " + ("identical" if ok else "different")
    info = {"ok": ok, "by": computed_by, "block": True, "detail": detail}
    info["seconds"] = time.perf_counter() - t0
    if not ok:
        event(ctx, "check", name, w, **info)
        raise CheckFailed(
            f"reduction {name} summed on {computed_by} failed its check on {w.address}: {detail}",
            name,
            computed_by,
            detail,
        )
    if save and ctx.store is not None and claimed is not None:
        finish(ctx, w, name, claimed, name, kind="check", **info)
    else:
        event(ctx, "check", name, w, **info)
    return claimed


def recheck_compute_task(
    ctx: Ctx,
    plan: SparsePlan,
    p: int,
    owned: Owned,
    senders: list[tuple[int, dict[str, list[list[np.ndarray]]]]],
    seed: int,
    reps: int | None,
) -> bool:
    """Re-verify the entry of ``p``'s compute result (written by a worker since excluded).

    A damaged, missing or failing entry is recomputed here and rewritten. True when the
    entry was sound."""
    w = ctx.worker()
    name = compute_name(p)
    arr, _ = _load(ctx, name)
    received, _ = _received(p, senders)
    if arr is not None and compute_verdict(plan, p, owned, received, arr, seed, reps).ok:
        event(ctx, "recheck", name, w, ok=True)
        return True
    if ctx.store is not None:
        ctx.store.save(name, Compute(plan, p).run(owned, received))
    event(ctx, "recheck", name, w, ok=False)
    return False


def recheck_block_task(ctx: Ctx, plan: SparsePlan, q: int, ys: dict[int, np.ndarray]) -> bool:
    """Re-verify the entry of ``q``'s block (written by a worker since excluded) against a
    sum made here from the accepted compute results; rewritten when it differs."""
    w = ctx.worker()
    name = block_name(q)
    arr, _ = _load(ctx, name)
    y, parts = _cut(plan, q, ys)
    want = reduce_output(plan, q, y, parts)
    if want is None:
        return True
    ok = arr is not None and arr.shape == want.shape
    ok = ok and bool(np.array_equal(arr, want, equal_nan=True))
    if not ok and ctx.store is not None:
        ctx.store.save(name, want)
    event(ctx, "recheck", name, w, ok=ok)
    return ok


# ---------------------------------------------------------------------------------------
# The randomized check of a compute result
# ---------------------------------------------------------------------------------------

_REP, _ENT, _ROW = "Q", "E", "R"  # letters the leaves never use (theirs are a, b, ...)


def _term_projection(
    comp: Compute,
    t: Any,
    xs: Mapping[str, np.ndarray],
    R: list[np.ndarray],
    absolute: bool,
) -> tuple[np.ndarray, int, int, int]:
    """One term of ``comp`` projected on the vectors ``R`` (rows first, then the output's
    dense letters): ``sum_e coeff v[e] r_0[o[e]] contract(X_T[idx_T[e]], r_d)``.

    Each dense factor is contracted with the vectors of the output letters only it carries,
    and summed over the letters only it carries, *before* its rows are gathered to the
    entries (Freivalds: ``C r`` before ``B (C r)``), so the cost is about the operands' words.
    With ``absolute``, every operand is taken by absolute value (the magnitude bound).
    Returns the projection (one value per repetition), the additions any product goes
    through, the products summed into one output element, and the factors multiplied.
    """
    out_letters = comp.pp.out_letters
    ext = comp.extents
    f = np.abs if absolute else (lambda a: a)
    v = None
    for name, idx in t.sparse:
        vals = f(xs[name][idx])
        v = vals if v is None else v * vals
    n = len(t.out)
    if v is None:
        v = np.ones(n)
    coeff = t.coeff * t.scale
    count: dict[str, int] = defaultdict(int)
    for _, _, letters in t.dense:
        for c in letters:
            count[c] += 1
    ops: list[np.ndarray] = [np.asarray(v, np.result_type(v, np.float64))[None, :] * R[0][:, t.out]]
    specs = [_REP + _ENT]
    pre = 0
    for name, idx, letters in t.dense:
        x = f(xs[name])
        mine_out = [c for c in letters if count[c] == 1 and c in out_letters]
        mine_sum = [c for c in letters if count[c] == 1 and c not in out_letters]
        shared = [c for c in letters if count[c] > 1]
        args: list[np.ndarray] = [x]
        subs = [_ROW + letters]
        for c in mine_out:
            args.append(R[1 + out_letters.index(c)])
            subs.append(_REP + c)
        keep = _ROW + (_REP if mine_out else "") + "".join(shared)
        if mine_out or mine_sum:
            x = np.einsum(",".join(subs) + "->" + keep, *args, optimize=True)
            pre = max(pre, math.prod(ext[c] for c in (*mine_out, *mine_sum)))
        ops.append(x[idx])
        specs.append(_ENT + keep[1:])
    shared_all = sorted(c for c, k in count.items() if k > 1)
    summands = n * math.prod(ext[c] for c in shared_all)
    val = np.einsum(",".join(specs) + "->" + _REP, *ops, optimize=True)
    # an output letter no factor carries gets the same contribution at each index
    for d, c in enumerate(out_letters):
        if c not in count:
            val = val * R[1 + d].sum(axis=1)
            summands *= ext[c]
    val = val * (abs(coeff) if absolute else coeff)
    rows = np.bincount(t.out).max() if n else 0
    per_elem = int(rows) * math.prod(ext[c] for c in count if c not in out_letters)
    factors = len(t.sparse) + len(t.dense) + (coeff != 1)
    return val, pre + summands, per_elem, factors


def project_compute(
    comp: Compute,
    xs: Mapping[str, np.ndarray],
    claimed: np.ndarray,
    seed: int,
    reps: int | None = None,
) -> Verdict:
    """Check ``claimed`` (processor ``comp.pp.p``'s contributions) against its operands
    ``xs`` (:meth:`Compute.operands`) by a randomized projection.

    The dense runtime's check (:mod:`distal.runtime.elastic.check`), with the entries as the
    summation: one random vector per output dimension (the rows the processor touches,
    then each dense output letter), the claimed result projected on all of them, and each
    term's entries projected on the same vectors (for SpMV ``sum_e v[e] r[o[e]] x[idx[e]]``).
    **False accepts.** The entries of the random vectors take ``2^21`` distinct real values
    (:func:`~distal.runtime.elastic.check.vectors`), and the two sides differ, in exact real
    arithmetic, by a nonzero polynomial of degree ``D = dims`` (the processor's output
    dimensions: 1 for SpMV, 2 for SpMM) in them, so by the Schwartz-Zippel lemma a wrong
    result passes one repetition with probability at most ``D / 2^21`` (SpMV: ``2^-21``),
    independently per repetition: ``(D / 2^21)^reps`` in all. ``reps`` is
    ``verify_repeats``, by default the fewest reaching ``2^-20`` (one for ``D <= 2``).
    Beyond that, an error below the rounding tolerance passes. The
    tolerance follows ``check.project``'s rounding bound (Higham's ``gamma``): the claimed
    result's roundings (products per output element and factors), both projections'
    additions, and the magnitude ``2^D sum |coeff v| contract(|X|...)`` computed from the
    operands, never from the claim. Non-finite operands give ``exact=True`` (the caller
    recomputes).

    Cost: one pass over the entries and the dense operands per batch of repetitions, except
    where two dense factors share a summed letter (SDDMM's ``C[i, j] D[j, k]``): their
    per-entry contraction is the kernel's own work, so that check costs a recomputation's
    flops (in a different order).
    """
    pp = comp.pp
    out_shape = comp.out_shape
    dims = len(out_shape)
    reps = default_repeats(dims) if reps is None else int(reps)
    claimed = np.asarray(claimed)
    if claimed.shape != tuple(out_shape):
        return Verdict(False, math.inf, 0.0, reps, dims)
    dtype = np.dtype(comp.dtype)
    R = vectors(seed, out_shape, reps)
    letters = _ROW + pp.out_letters
    spec = ",".join([letters, *(_REP + c for c in letters)]) + "->" + _REP
    lhs = np.einsum(spec, np.asarray(claimed, np.result_type(claimed, 1.0)), *R, optimize=True)
    depth_lhs = math.prod(out_shape)
    rhs = np.zeros(reps, dtype=lhs.dtype)
    ones = [np.ones((1, n)) for n in out_shape]
    mag = 0.0
    depth_rhs = depth_mag = n_terms = factors = 0
    per_elem = 0
    for t, leaf in zip(pp.terms, comp.leaves, strict=True):
        if leaf is None or len(t.out) == 0:
            continue
        n_terms += 1
        val, dep, k, nf = _term_projection(comp, t, xs, R, False)
        rhs = rhs + val
        m, depm, _, _ = _term_projection(comp, t, xs, ones, True)
        mag += float(np.real(m[0]))
        depth_rhs, depth_mag = max(depth_rhs, dep), max(depth_mag, depm)
        per_elem += k
        factors = max(factors, nf)
    if not math.isfinite(mag):
        return Verdict(False, math.nan, math.nan, reps, dims, exact=True)
    cplx = 2 if dtype.kind == "c" else 1
    p = cplx * (factors + 1)
    D = cplx * dims
    g_a = _gamma(per_elem + p, _unit_roundoff(dtype))
    g_l = _gamma(depth_lhs + D, U64)
    g_r = _gamma(depth_rhs + p + D + n_terms, U64)
    g_m = _gamma(depth_mag + factors + 1 + n_terms, U64)
    bound = mag * 2.0**dims / (1.0 - g_m) if g_m < 1 else math.inf
    tol = ((1 + g_a) * (1 + g_l) - 1 + g_r) * bound
    diff = float(np.max(np.abs(lhs - rhs))) if reps else 0.0
    return Verdict(bool(diff <= tol), diff, tol, reps, dims)


# ---------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------


def _options(options: Mapping[str, Any]) -> Options:
    for k, default in _DENSE_ONLY.items():
        if k in options and options[k] != default:
            raise NotSupportedYet(
                f"option {k!r} is not used by sparse kernels on the dask runtime: each "
                "processor's computation is one task, which Dask places and retries"
            )
    return Options.parse(options)


def run(
    bound: Any,
    inputs: Mapping[str, Any],
    client: Any = None,
    checkpoint: Any = None,
    **options: Any,
) -> Result:
    """Run ``bound`` (a :class:`~distal.kernel.BoundKernel` of a sparse kernel) on Dask.

    ``client``: a ``distributed.Client``, a scheduler address, or None for a local cluster
    of ``n_workers`` (as the dense runtime). ``checkpoint``: a directory or fsspec URL. The
    other options are the dense runtime's (``verify``, ``verify_repeats``, ``verify_rtol``,
    ``verify_atol``, ``progress``, ``timeout``, ``keep_partials``, ``fsync``, the test hooks);
    see the module docstring.
    """
    if getattr(bound, "plan", None) is None:
        raise InputError("the sparse dask runtime takes a bound sparse kernel (kernel.bind)")
    if len(bound.binding.steps) > 1:
        raise NotSupportedYet(
            "a sparse kernel that streams in steps (communicate inside the distributed loops) "
            "on the dask runtime is not in this version (the local and mpi runtimes run it)"
        )
    if bound.binding.primary:
        raise NotSupportedYet(
            f"a replicated output ({bound.binding.analysis.output.name!r}) of a sparse kernel on "
            "the dask runtime is not in this version (the local and mpi runtimes run it)"
        )
    opts = _options({"client": client, "checkpoint": checkpoint, **options})
    data = bound.check_inputs(inputs)
    with adapter.connected(opts) as c:
        return _Run(bound.binding, data, opts, c).run()


class _Run:
    """One run: submit the graph, wait for the blocks, count what the tasks counted."""

    def __init__(self, plan: SparsePlan, data: dict[str, Any], opts: Options, client: Any):
        self.plan, self.data, self.opts, self.client = plan, data, opts, client
        self.nonce = uuid.uuid4().hex[:12]
        self.secret = secrets.token_bytes(16)
        self.P = plan.nprocs
        self.futures: list[Any] = []
        self.fresh: set[str] = set()  # entries this run computes (and records moved- for)
        self.owned: list[Owned] = []
        self.plan_f: Any = None
        self.owned_f: dict[int, Any] = {}
        self.senders_f: dict[int, list[tuple[int, Any]]] = {}
        # where data tasks may go (with verification: off excluded workers)
        self.placement: Any = dict

    def key(self, what: str) -> str:
        """A task key of this run (the nonce lets ``transfer_bytes`` find its transfers)."""
        return f"distal-sparse-{self.nonce}-{what}"

    def submit(self, fn: Any, *args: Any, key: str, **kw: Any) -> Any:
        with warnings.catch_warnings():
            # "large graph": the plan and the owned data travel in their tasks on purpose
            warnings.filterwarnings("ignore", message="Sending large graph")
            f = self.client.submit(fn, *args, key=self.key(key), pure=False, **kw)
        self.futures.append(f)
        return f

    def _store(self, owned: list[Owned]) -> CheckpointStore | None:
        opts = self.opts
        if opts.checkpoint is None:
            return None
        if not isinstance(opts.checkpoint, str | os.PathLike):
            raise InputError(f"checkpoint must be a directory or URL, got {opts.checkpoint!r}")
        prints = fingerprints(self.plan, self.data, owned)
        store = CheckpointStore(opts.checkpoint, run_key(self.plan, prints), opts.fsync)
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
                    describe(self.plan, prints) | {"run": store.run, "complete": False}
                )
            except OSError as e:
                raise InputError(
                    f"checkpoint {opts.checkpoint!r} is not a usable location: "
                    f"cannot write {store.root}/manifest.json ({e})"
                ) from e
        return store

    def _seed(self, name: str) -> int:
        h = hashlib.blake2b(self.secret + name.encode(), digest_size=8)
        return int.from_bytes(h.digest(), "little")

    def run(self) -> Result:
        plan, opts, client, P = self.plan, self.opts, self.client, self.P
        t0 = time.perf_counter()
        oname = plan.analysis.output.name
        owners = [q for q in range(P) if plan.owned[oname][q] is not None]
        # who sends partial sums to whom, and who adds its own contributions
        sends = {p: sorted({pc.peer for pc in plan.procs[p].out.pieces}) for p in range(P)}
        computers = [p for p in range(P) if sends[p]]
        total = len(computers) + len(owners)
        self.owned = owned = [owned_data(plan, p, self.data) for p in range(P)]
        store = self._store(owned)
        present = store.names() if store is not None else set()
        blocks: dict[int, np.ndarray | None] = {p: None for p in range(P)}
        corrupt_blocks = 0
        pending = []
        for q in owners:
            arr = None
            if store is not None and block_name(q) in present:
                arr, status = store.load(block_name(q))
                corrupt_blocks += status == CORRUPT
            if arr is None:
                pending.append(q)
            else:
                blocks[q] = arr
        needed = [p for p in computers if any(q in pending for q in sends[p])]
        logical = {compute_name(p) for p in needed} | {block_name(q) for q in pending}
        reused_direct = total - len(logical)

        before = set(workers(client))
        if opts.verify != 1 and len(before) < max(2, opts.copies):
            raise InputError(
                f"verify={opts.verify!r} needs at least {max(2, opts.copies)} workers; the pool "
                f"has {len(before)}"
            )
        topic = f"distal-{self.nonce}"
        events = Events(client, topic)
        ctx = Ctx(
            topic=topic,
            kernels=(),
            out_dtype=np.dtype(plan.analysis.output.dtype),
            store=store,
            worker=adapter.get_worker,
            delay=float(opts._delay),
            slow=dict(opts._slow),
            trace=opts._trace,
            lie=frozenset(opts._lie),
        )
        bar = Progress(total, enabled=opts.progress, label="tasks")
        verifier = None
        try:
            loaded = self._loads(ctx, needed, present)
            todo = [p for p in needed if p not in loaded]
            self.fresh = {*map(compute_name, todo), *map(block_name, pending)}
            if store is not None:  # a crashed earlier run's records are not this run's
                for name in self.fresh:
                    store.remove(moved_name(name))
            # the plan as the phases read it: without the bind's id()-keyed cache (ids mean
            # nothing in another process) and without the iteration pattern (no phase reads it)
            if todo or pending:
                shipped = replace(plan, cache={}, pattern=None)
                self.plan_f = self.submit(carry, shipped, key="plan")
            done = reused_direct
            bar.update(done, force=True)
            if opts.verify == 1:
                blocks.update(self._plain(ctx, loaded, todo, pending, sends, bar, done))
                if store is not None:
                    self._drain(topic, store.root, events)
            else:
                verifier = _Verifier(self, ctx, events, bar, done, loaded, todo, pending, sends)
                blocks.update(verifier.go())
            events.sync()
        except BaseException:
            client.cancel(self.futures)
            raise
        finally:
            bar.close()
            events.close()
        alive = set(workers(client))
        moved = client.run(transfer_bytes, self.nonce, on_error="return")
        self.futures.clear()
        stats = self._stats(events, owned, store)
        summary = summarize(
            events,
            total,
            logical=logical,
            verify=opts.copies,
            reused_direct=reused_direct,
            corrupt_blocks=corrupt_blocks,
            workers_before=before,
            workers_after=alive,
            checkpoint=store.root if store is not None else None,
        )
        if verifier is not None:
            verifier.report(summary)
        summary.seconds = time.perf_counter() - t0
        if store is not None:
            self._finish_checkpoint(store, owners, computers)
        return Result(
            assemble(plan, blocks),
            stats,
            summary.seconds,
            tasks_executed=summary.tasks_executed,
            tasks_reused=summary.tasks_reused,
            extra={
                "summary": summary,
                "stats_note": STATS_NOTE,
                "checkpoint": store.root if store is not None else None,
                "dask_transfer_bytes": sum(
                    int(n) for n in moved.values() if not isinstance(n, BaseException)
                ),
            },
        )

    def own(self, p: int) -> Any:
        """The future of processor ``p``'s owned data (submitted once)."""
        if p not in self.owned_f:
            self.owned_f[p] = self.submit(
                carry, self.owned[p], key=f"owned-{p}", **self.placement()
            )
        return self.owned_f[p]

    def senders(self, p: int) -> list[tuple[int, Any]]:
        """The payloads processor ``p`` receives, one future per source (submitted once)."""
        if p not in self.senders_f:
            plan = self.plan
            srcs = sorted(
                {pc.peer for nd in plan.procs[p].needs.values() for pc in nd.pieces} - {p}
            )
            self.senders_f[p] = [
                (
                    q,
                    self.submit(
                        payload_task,
                        *(self.plan_f, self.own(q), p),
                        key=f"payload-{q}-{p}",
                        **self.placement(),
                    ),
                )
                for q in srcs
            ]
        return self.senders_f[p]

    def _loads(self, ctx: Ctx, needed: list[int], present: set[str]) -> dict[int, Any]:
        """Finished compute results of a rerun, read on a worker first (only their partials
        move on); the ones that turn out damaged or gone are computed (with the payloads
        they need)."""
        loads = {
            p: self.submit(load_task, ctx, compute_name(p), key=f"load-{p}")
            for p in needed
            if compute_name(p) in present
        }
        return {p: f for p, f in loads.items() if f.exception(timeout=self.opts.timeout) is None}

    def _plain(
        self,
        ctx: Ctx,
        loaded: dict[int, Any],
        todo: list[int],
        pending: list[int],
        sends: dict[int, list[int]],
        bar: Progress,
        done: int,
    ) -> dict[int, Any]:
        """Without verification: every task this run needs, submitted at once; the blocks."""
        save = ctx.store is not None
        ys = dict(loaded)
        for p in todo:
            args = (ctx, self.plan_f, p, self.own(p), self.senders(p), save)
            ys[p] = self.submit(compute_task, *args, key=f"compute-{p}")
        futs = {}
        needed = sorted(ys)
        for q in pending:
            parts = {
                p: self.submit(partial_task, self.plan_f, p, ys[p], q, key=f"partial-{p}-{q}")
                for p in needed
                if p != q and q in sends[p]
            }
            y = ys.get(q) if q in sends.get(q, ()) else None
            futs[q] = self.submit(
                reduce_task, ctx, self.plan_f, q, y, parts, save, key=f"reduce-{q}"
            )
        timeout = self.opts.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for f in adapter.as_completed(
                [*(ys[p] for p in needed), *futs.values()], timeout=timeout
            ):
                if f.status != "finished":
                    self._fail(f)
                done += 1
                bar.update(done)
        except TimeoutError as e:
            raise RuntimeFailure(f"dask run exceeded timeout={timeout}s") from e
        blocks = {}
        for q, f in futs.items():
            left = None if deadline is None else max(deadline - time.monotonic(), 1.0)
            blocks[q] = self._result(f, left)
        return blocks

    def _fail(self, f: Any) -> None:
        """Raise what failed future ``f`` raised (a ``RuntimeFailure`` as it is)."""
        exc = task_exception(f)
        if isinstance(exc, RuntimeFailure):
            raise exc
        raise RuntimeFailure(f"dask task {f.key!r} failed: {type(exc).__name__}: {exc}") from exc

    def _result(self, f: Any, timeout: float | None) -> Any:
        try:
            return f.result(timeout=timeout)
        except TimeoutError as e:
            raise RuntimeFailure(f"dask run exceeded timeout={self.opts.timeout}s") from e
        except RuntimeFailure:
            raise
        except Exception as e:
            raise RuntimeFailure(f"dask task {f.key!r} failed: {type(e).__name__}: {e}") from e

    def _drain(self, topic: str, root: str, events: Events, patience: float = 10.0) -> None:
        """As the dense runtime: a failed checkpoint write fails the run."""
        drain_checkpoint(self.client, topic, root, events, patience)

    def _stats(self, events: Events, owned: list[Owned], store: CheckpointStore | None) -> Stats:
        """``Stats`` from the counts in the tasks' last ``done`` events, once per task (a
        recomputed task counted the same arrays again); with a checkpoint, a task of this
        run whose event was lost with its worker is read from its ``moved-`` entry."""
        plan, P = self.plan, self.P
        stats = Stats.zeros(P)
        held = [owned_words(plan, o) for o in owned]
        counts: dict[str, dict[str, Any]] = {}
        for name, ms in events.by_name().items():
            if "#v" in name:
                continue  # a verify=k copy: its agreement logs the accepted copy's counts
            counted = [m for m in ms if m["kind"] == "done" and "moved" in m]
            if counted:
                counts[name] = counted[-1]
        # a task whose worker died before its done event left (and which nothing needed
        # again) recorded what it received next to its entry
        for name in sorted(self.fresh - set(counts)) if store is not None else ():
            arr, _ = store.load(moved_name(name))
            if arr is not None:
                counts[name] = {"moved": arr.tolist()}
                if name.startswith("compute-"):
                    p = int(name.removeprefix("compute-p"))
                    counts[name]["iterations"] = [p, plan.procs[p].iterations]
        for name, last in counts.items():
            partials = name.startswith("block-")
            for src, dst, w, iw in last["moved"]:
                if src < 0:  # the buffers a compute task held (not a message)
                    held[dst] += w
                    continue
                stats.words_received[dst] += w
                stats.words_sent[src] += w
                stats.index_words_received[dst] += iw
                stats.index_words_sent[src] += iw
                stats.messages_received[dst] += 1
                stats.messages_sent[src] += 1
                if partials:  # a partial sum received (fetched pieces are in the buffers)
                    held[dst] += w
            if "iterations" in last:
                p, n = last["iterations"]
                stats.iterations[int(p)] += int(n)
        stats.peak_words = held
        # one machine level: every word received crosses level 0 (as in the plan's stats)
        stats.level_words_received = [list(stats.words_received)]
        return stats

    def _finish_checkpoint(
        self, store: CheckpointStore, owners: list[int], computers: list[int]
    ) -> None:
        """Mark the run complete; compute results are not needed once every block exists."""
        manifest = store.read_manifest() or {}
        manifest.update(
            {"run": store.run, "complete": True, "blocks": [block_name(q) for q in owners]}
        )
        store.write_manifest(manifest)
        # what the tasks received only matters within the run that wrote it
        for name in [*map(compute_name, computers), *map(block_name, owners)]:
            store.remove(moved_name(name))
        if not self.opts.keep_partials:
            for p in computers:
                store.remove(compute_name(p))


POOL_EVERY = 0.5
"""Seconds between asking the scheduler for the pool (whom tasks may be placed on)."""

Role = tuple[str, int, int, str]
"""What a submitted task is to :class:`_Verifier`: ``(kind, processor, attempt, worker)``,
``worker`` being the one whose result a check tests."""


class _Verifier:
    """A verified run (``verify="check"`` or ``verify=k``): tasks go to Dask as their inputs
    are accepted, so a rejected result is computed again elsewhere and the worker that made
    it gets no further task.

    Compute tasks go out a window at a time (twice the trusted workers' threads), each
    pinned loosely to the next trusted worker in turn until a worker is excluded, then to
    any trusted worker. With ``"check"`` each compute result, once made, is checked on a
    trusted worker other than the one holding it; a reduction is submitted once every
    compute result it sums has passed (it cuts their partials itself), and is checked the
    same way. With ``verify=k`` every compute and every reduction is ``k`` copies pinned to
    distinct trusted workers, and their agreement.
    """

    def __init__(
        self,
        run: _Run,
        ctx: Ctx,
        events: Events,
        bar: Progress,
        done: int,
        loaded: dict[int, Any],
        todo: list[int],
        pending: list[int],
        sends: dict[int, list[int]],
    ) -> None:
        self.r, self.ctx, self.events, self.bar = run, ctx, events, bar
        self.opts, self.client = run.opts, run.client
        self.save = ctx.store is not None
        self.excluded: set[str] = set()
        self.rejections: list[dict[str, Any]] = []
        self.rechecked: set[tuple[str, float]] = set()  # (entry, time it was written)
        self.accepted: dict[int, Any] = dict(loaded)
        self.blocks: dict[int, Any] = {}
        self.role: dict[str, Role] = {}
        self.attempts: dict[str, int] = defaultdict(int)
        self.avoid: dict[str, set[str]] = defaultdict(set)
        self.queue = list(reversed(todo))
        self.open: set[int] = set()
        needed = sorted({*loaded, *todo})
        self.contrib = {q: [p for p in needed if q in sends[p]] for q in pending}
        self.waiting = {q: set(ps) - set(loaded) for q, ps in self.contrib.items()}
        self.ready = [q for q in pending if not self.waiting[q]]
        self.done = done + len(loaded)
        self.n = 0  # pinned submissions so far (the round-robin's position)
        self.pool: dict[str, Any] = {}
        self.seen = -math.inf  # when the pool was last asked for
        run.placement = self.restrict  # data tasks submitted from now on avoid the excluded
        self.ac = adapter.as_completed([], timeout=self.opts.timeout)

    # --- placement -----------------------------------------------------------------------

    def trusted(self) -> list[str]:
        """The pool's workers not excluded, sorted."""
        return sorted(set(self.pool) - self.excluded)

    def restrict(self, avoid: set[str] | None = None) -> dict[str, Any]:
        """Submit keywords keeping a task off excluded workers (and ``avoid``)."""
        bad = self.excluded | (avoid or set())
        if not bad:
            return {}
        pool = [w for w in self.trusted() if w not in bad]
        if not pool:
            raise VerificationFailed(
                f"no trusted worker left to run on: excluded {sorted(self.excluded)}"
                + (f", and {sorted(avoid)} may not take this task" if avoid else "")
            )
        return {"workers": pool, "allow_other_workers": False}

    def pin(self) -> dict[str, Any]:
        """A first compute's placement: the next trusted worker in turn (loosely, so a
        worker that leaves does not strand it); once a worker is excluded, any trusted one."""
        if self.excluded:
            return self.restrict()
        pool = self.trusted()
        w = pool[self.n % len(pool)]
        self.n += 1
        return {"workers": [w], "allow_other_workers": True}

    def copies_on(self) -> list[str]:
        """``verify=k``: the next ``k`` trusted workers in turn (fewer distinct ones once
        workers are excluded; at least two)."""
        k, pool = self.opts.copies, self.trusted()
        if len(pool) < 2:
            raise VerificationFailed(
                f"verify={k}: {len(pool)} trusted worker(s) left (excluded "
                f"{sorted(self.excluded)}), nobody to outvote"
            )
        out = [pool[(self.n + r) % len(pool)] for r in range(k)]
        self.n += 1
        return out

    def window(self) -> int:
        threads = sum(int(self.pool[w].get("nthreads", 1)) for w in self.trusted())
        return max(2 * threads, 2)

    def submit(self, role: Role, fn: Any, *args: Any, key: str, **kw: Any) -> Any:
        f = self.r.submit(fn, *args, key=key, **kw)
        self.role[f.key] = role
        self.ac.add(f)
        return f

    def seed(self, name: str, attempt: Any) -> int:
        return self.r._seed(f"{name}#{attempt}")

    # --- what is submitted ---------------------------------------------------------------

    def compute(self, p: int) -> None:
        """Processor ``p``'s compute task (attempt ``attempts[p]``), or its ``k`` copies."""
        name = compute_name(p)
        a = self.attempts[name]
        args = (self.ctx, self.r.plan_f, p, self.r.own(p), self.r.senders(p), False)
        if self.opts.check:
            kw = self.pin() if a == 0 else self.restrict(self.avoid[name])
            key = f"compute-{p}" + (f"-a{a}" if a else "")
            self.submit(("compute", p, a, ""), compute_task, *args, key=key, **kw)
            return
        copies = [
            self.r.submit(
                compute_task,
                *args,
                r,
                key=f"compute-{p}-v{r}",
                workers=[w],
                allow_other_workers=not self.excluded,  # then copies stay on trusted ones
            )
            for r, w in enumerate(self.copies_on())
        ]
        o = self.opts
        self.submit(
            ("agree", p, a, ""),
            agree_task,
            *(self.ctx, _Named(name, p), copies, o.verify_rtol, o.verify_atol),
            key=f"compute-{p}",
            **self.restrict(),
        )

    def ys(self, q: int) -> dict[int, Any]:
        """The accepted compute results block ``q`` sums."""
        return {p: self.accepted[p] for p in self.contrib[q]}

    def reduce(self, q: int) -> None:
        """Block ``q``'s reduction (attempt ``attempts[block]``), or its ``k`` copies."""
        name = block_name(q)
        a = self.attempts[name]
        args = (self.ctx, self.r.plan_f, q, self.ys(q), False)
        if self.opts.check:
            key = f"reduce-{q}" + (f"-a{a}" if a else "")
            self.submit(
                ("reduce", q, a, ""),
                reduce_cut_task,
                *args,
                key=key,
                **self.restrict(self.avoid[name]),
            )
            return
        copies = [
            self.r.submit(
                reduce_cut_task,
                *args,
                r,
                key=f"reduce-{q}-v{r}",
                workers=[w],
                allow_other_workers=not self.excluded,
            )
            for r, w in enumerate(self.copies_on())
        ]
        o = self.opts
        self.submit(
            ("agree-block", q, a, ""),
            agree_block_task,
            *(self.ctx, name, copies, o.verify_rtol, o.verify_atol),
            key=f"reduce-{q}",
            **self.restrict(),
        )

    def feed(self) -> None:
        """Compute tasks up to the window, and every reduction whose inputs are accepted."""
        while self.queue and len(self.open) < self.window():
            p = self.queue.pop()
            self.open.add(p)
            self.compute(p)
        ready, self.ready = self.ready, []
        for q in ready:
            self.reduce(q)

    # --- what came back ------------------------------------------------------------------

    def finished(self, f: Any, holders: Mapping[str, Any]) -> None:
        """Act on a finished task (``holders``: the scheduler's ``who_has`` of the batch)."""
        kind, i, a, by = self.role.pop(f.key)
        if f.status != "finished":
            exc = self._exception(f)
            if kind in ("check", "reduce-check") and isinstance(exc, CheckFailed):
                self.rejected(kind, i, a, by, exc)
                return
            self.r._fail(f)
        ctx, plan_f, reps = self.ctx, self.r.plan_f, self.opts.verify_repeats
        if kind == "compute":
            name = compute_name(i)
            who = self.where(f, name, holders)
            self.redone(name, who)
            self.submit(
                ("check", i, a, who),
                check_task,
                *(ctx, plan_f, i, self.r.own(i), self.r.senders(i), f, who),
                *(self.seed(name, a), reps, self.save),
                key=f"check-{i}-{a}",
                **self.restrict({who}),
            )
        elif kind == "reduce":
            name = block_name(i)
            who = self.where(f, name, holders)
            self.redone(name, who)
            self.submit(
                ("reduce-check", i, a, who),
                check_reduce_task,
                *(ctx, plan_f, i, self.ys(i), f, who, self.save),
                key=f"check-reduce-{i}-{a}",
                **self.restrict({who}),
            )
        elif kind in ("check", "agree"):
            self.accept(i, f)
        elif kind in ("reduce-check", "agree-block"):
            self.blocks[i] = f.result()
            self.progress()
        if kind in ("agree", "agree-block"):
            # the agreement logged its "outvoted" event before it finished: ask for it now
            self.events.sync()
            self.outvoted()

    def progress(self) -> None:
        self.done += 1
        self.bar.update(self.done)

    def accept(self, p: int, f: Any) -> None:
        """``p``'s compute result passed: the reductions summing it may go."""
        self.accepted[p] = f
        self.open.discard(p)
        self.progress()
        for q, left in self.waiting.items():
            if p in left:
                left.discard(p)
                if not left:
                    self.ready.append(q)

    def rejected(self, kind: str, i: int, a: int, by: str, exc: CheckFailed) -> None:
        """A check failed: exclude the worker that made the result, make it again elsewhere."""
        unit = kind == "check"
        name = compute_name(i) if unit else block_name(i)
        what = "unit" if unit else "reduction"
        self.exclude(by, name, "check", kind=what, detail=exc.detail)
        self.attempts[name] = a + 1
        self.avoid[name].add(by)
        if unit:
            self.compute(i)
        else:
            self.reduce(i)

    def redone(self, name: str, who: str) -> None:
        """A task of ``name`` was computed (again) on ``who``: the rejections of ``name``
        not yet answered were recomputed there."""
        for r in self.rejections:
            if r["unit"] == name and "recomputed_on" not in r:
                r["recomputed_on"] = who

    def where(self, f: Any, name: str, holders: Mapping[str, Any]) -> str:
        """The worker holding future ``f`` (of entry ``name``): the scheduler's word, or
        failing that the worker of the last ``done`` event."""
        held = holders.get(f.key) or ()
        if held:
            return str(sorted(held)[0])
        self.events.sync()
        dones = [m for m in self.events.by_name().get(name, []) if m["kind"] == "done"]
        return str(dones[-1]["worker"]) if dones else ""

    def _exception(self, f: Any) -> BaseException | None:
        return task_exception(f)

    # --- exclusion -----------------------------------------------------------------------

    def exclude(self, worker: str, name: str, how: str, **more: Any) -> None:
        """Stop trusting ``worker`` (it made a rejected result of ``name``): no further task
        goes to it, and the entries it wrote in this run are re-verified."""
        self.rejections.append({"unit": name, "worker": worker, "how": how, **more})
        if not worker or worker in self.excluded:
            return
        self.excluded.add(worker)
        self.recheck(worker)

    def outvoted(self) -> None:
        """``verify=k``: exclude the workers whose copies a majority outvoted."""
        for m in self.events.take_notes("outvoted"):
            kind = "reduction" if m.get("block") else "unit"
            how = f"outvoted by {', '.join(m.get('accepted', ()))}"
            for w in m.get("workers", ()):
                self.exclude(str(w), m["name"], how, kind=kind)

    def written_by(self, worker: str) -> set[tuple[str, float]]:
        """Checkpoint entries ``worker`` wrote in this run, with when (as it logged them)."""
        return {
            (str(m.get("entry", name)), float(m["t"]))
            for name, ms in self.events.by_name().items()
            for m in ms
            if m.get("written") and m["worker"] == worker
        }

    def recheck(self, worker: str) -> None:
        """Re-verify, on trusted workers, the entries ``worker`` wrote that are not yet."""
        if self.ctx.store is None:
            return
        self.events.sync()
        for entry, t in sorted(self.written_by(worker) - self.rechecked):
            self.rechecked.add((entry, t))
            key = f"recheck-{entry}-{len(self.rechecked)}"
            if entry.startswith("compute-p"):
                p = int(entry.removeprefix("compute-p"))
                self.submit(
                    ("recheck", p, 0, worker),
                    recheck_compute_task,
                    *(self.ctx, self.r.plan_f, p, self.r.own(p), self.r.senders(p)),
                    *(self.seed(entry, "recheck"), self.opts.verify_repeats),
                    key=key,
                    **self.restrict(),
                )
            elif entry.startswith("block-p"):
                q = int(entry.removeprefix("block-p"))
                self.submit(
                    ("recheck", q, 0, worker),
                    recheck_block_task,
                    *(self.ctx, self.r.plan_f, q, self.ys(q)),
                    key=key,
                    **self.restrict(),
                )

    # --- the run -------------------------------------------------------------------------

    def loop(self) -> None:
        """Until every submitted task is done: act on each batch of finished ones."""
        try:
            for batch in self.ac.batches():
                if time.monotonic() - self.seen > POOL_EVERY:
                    self.pool, self.seen = workers(self.client), time.monotonic()
                ask = [
                    f
                    for f in batch
                    if f.status == "finished" and self.role[f.key][0] in ("compute", "reduce")
                ]
                holders = self.client.who_has(ask) if ask else {}
                for f in batch:
                    self.finished(f, holders)
                self.feed()
        except TimeoutError as e:
            raise RuntimeFailure(f"dask run exceeded timeout={self.opts.timeout}s") from e

    def go(self) -> dict[int, Any]:
        """Run to the end; the blocks. With a checkpoint, once every write has landed, the
        entries excluded workers wrote after their exclusion was decided are re-verified
        too."""
        self.pool, self.seen = workers(self.client), time.monotonic()
        self.feed()
        self.loop()
        store = self.ctx.store
        if store is not None:
            self.r._drain(self.ctx.topic, store.root, self.events)
        self.events.sync()
        self.outvoted()
        for w in sorted(self.excluded):
            self.recheck(w)
        self.loop()
        return self.blocks

    def report(self, summary: Any) -> None:
        """The verification's part of the run's summary."""
        summary.excluded_workers = sorted(self.excluded)
        summary.rejections = list(self.rejections)
        kinds = {r["unit"]: r["kind"] for r in self.rejections}
        summary.units_rejected = sum(k == "unit" for k in kinds.values())
        summary.reductions_rejected = sum(k == "reduction" for k in kinds.values())
        summary.rechecked = len(self.rechecked)
        if self.opts.check:
            summary.checked = self.events.checked()
            summary.reductions_checked = self.events.checked(blocks=True)


__all__ = ["STATS_NOTE", "block_name", "compute_name", "fingerprints", "project_compute", "run"]
