"""``run``: one kernel on every rank — checks, execution, the collective result and stats.

Before anything else every rank checks its part (the options, the number of ranks, its
inputs, its kernel's fingerprint) and all ranks agree on the outcome with one polled
``Iallgather``: a rank whose inputs are wrong raises its ``InputError`` and every other rank
raises :class:`PeerFailure` naming it and carrying the error's text, all at the same point,
with nothing left pending (the communicator stays usable). The first run on a communicator
is also the first time its ranks meet (:func:`~.channel.channel` makes its duplicates): a
rank that never comes -- it raised before its first run, where no hook could report it --
makes the others raise :class:`~.channel.JoinTimeout` at the join deadline and end the job.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from mpi4py import MPI

from distal.errors import DistalUserError, InputError, RuntimeFailure
from distal.plan.ir import FETCH, FINAL, Plan
from distal.plan.stats import Stats, ops_by_step
from distal.runtime.data import DistributedResult, chunks_for
from distal.runtime.executable import Executable
from distal.runtime.mpi.channel import Channel, PeerFailure, channel, job
from distal.runtime.mpi.rank import STAT_FIELDS, Rank
from distal.runtime.store import stores_once
from distal.trace import COMPUTE, FLUSH, REDUCE, WAIT, Event
from distal.typing import box_volume

GATHER_MODES = ("all", "root", "none")


class MPISizeError(DistalUserError):
    """The job's size is not the machine's: raised on every rank before anything runs (on
    the others, if only some ranks compiled such a kernel, as a :class:`PeerFailure`)."""

    collective = True


def _fingerprint(exe: Executable) -> float:
    """The executable's key as a number every rank compares: equal on every rank that
    compiled the same kernel (the plan is a function of what the key names), so no rank
    builds a plan or its stats to compare."""
    return float(zlib.crc32(exe.key.encode()))


def fail_together(error: Exception, comm: Any = None) -> None:
    """Take part in a run's agreement with ``error`` (raised here; the other ranks, which
    entered :func:`run`, raise :class:`PeerFailure` naming this rank): for a failure before
    there is a kernel to run -- ``kernel.bind(inputs)`` rejecting this rank's sparse inputs
    -- so that it fails every rank together instead of leaving the others waiting."""
    _agree(channel(MPI.COMM_WORLD if comm is None else comm), error, 0.0)
    raise error  # pragma: no cover - _agree raises it


_TEXT_WIDTH = 2000  # bytes of each failed rank's error text sent to the others


def _agree(chan: Channel, error: Exception | None, fingerprint: float) -> None:
    """All ranks learn whether every rank passed its checks, and raise together if not: a
    failed rank its own error, the others :class:`PeerFailure` naming the first failed rank
    and carrying its error's text; ranks that compiled different kernels a
    :class:`DistalUserError` each. Two polled collectives, nothing left pending."""
    text = b"" if error is None else f"{type(error).__name__}: {error}".encode()[:_TEXT_WIDTH]
    table = chan.allgather(np.array([error is not None, fingerprint, len(text)], np.float64))
    failed = [r for r in range(chan.size) if table[r, 0]]
    if failed:
        lengths = [int(n) for n in table[:, 2]]
        rows = chan.allgather_bytes(text, max(lengths))
        texts = [row[:n].decode("utf-8", "replace") for row, n in zip(rows, lengths, strict=True)]
        who = failed[0] if error is None else chan.rank
        msg = f"{chan.name(who)} failed before the run: {texts[who]}"
        others = [r for r in failed if r != who]
        if error is None and others:
            msg += f" (and {', '.join(chan.name(r) for r in others)})"
        job().record(msg)
        if error is not None:
            raise error
        raise PeerFailure(msg, processor=who)
    prints = [int(x) for x in table[:, 1]]
    differ = [r for r, x in enumerate(prints) if x != prints[0]]
    if differ:
        raise DistalUserError(
            f"the ranks compiled different kernels: rank(s) {differ} differ from rank 0 in "
            f"schedule, routing, tensors or predicted stats (kernel fingerprints by rank: "
            f"{prints}); every rank must build the same kernel"
        )


def check_job_size(nprocs: int, size: int, rank: int) -> None:
    """A kernel for ``nprocs`` processors runs on a job of exactly that many ranks."""
    if size != nprocs:
        raise MPISizeError(
            f"the machine has {nprocs} processors but this MPI job has {size} ranks "
            f"(this is rank {rank}): launch with `mpiexec -n {nprocs} python SCRIPT` "
            f"or `distal run -n {nprocs} SCRIPT`"
        )


def run(
    exe: Executable,
    data: Mapping[str, Any],
    *,
    gather: str = "all",
    comm: Any = None,
    trace: bool | None = None,
    fault: tuple[int, int] | None = None,
    dot_with: str | None = None,
) -> DistributedResult:
    """Execute ``exe`` with one MPI rank per processor; call it on every rank.

    Args:
        exe: the executable (the same kernel on every rank; of this rank's program at least).
        data: input name -> array or block source; every rank checks its own
            (``exe.check_inputs``) before anything runs, and if any rank's are wrong every
            rank raises (see the module docstring). A rank reads only its own blocks.
        gather: ``"all"`` (every rank gets ``Result.value``), ``"root"`` (rank 0 only) or
            ``"none"`` (the output stays distributed: ``Result.blocks`` and the collective
            writers of :class:`~distal.data.DistributedResult`).
        comm: the communicator to run on (default ``MPI.COMM_WORLD``); its size must equal
            the machine's, and rank ``p`` plays processor ``p``.
        trace: gather every rank's trace events into ``Result.trace`` (default: unless
            ``DISTAL_TRACE=0``, as on the local runtime): up to :data:`INLINE_EVENTS`
            events a rank ride in the stats' collective, more take a second one; ``False``
            leaves it empty (a session's runs pass ``False`` unless asked).
        fault: testing only -- ``(rank, step)``: raise on that rank at that step (-1: while
            placing the inputs).
        dot_with: a session's request (see :attr:`distal.runtime.store.Store.dot_with`):
            where this rank's program allows, ``Result.extra["dot"]`` is the dot product of
            that input's owned block with the output's, else None.
    """
    t_start = time.perf_counter()
    comm = MPI.COMM_WORLD if comm is None else comm
    chan = channel(comm)
    size, rank = chan.size, chan.rank
    if chan.broken is not None:
        raise RuntimeFailure(
            f"an earlier run on this communicator failed ({chan.broken}); the MPI runtime "
            "does not use a communicator again after a failure: end the job",
            processor=rank,
        )
    error: Exception | None = None
    fingerprint = 0.0
    try:  # every rank's checks, then one agreement: a rank that fails here fails them all
        if gather not in GATHER_MODES:
            raise InputError(f"gather={gather!r} is not one of {list(GATHER_MODES)}")
        check_job_size(exe.nprocs, size, rank)
        data = exe.check_inputs(data)
        fingerprint = _fingerprint(exe)
    except Exception as e:
        error = e
    _agree(chan, error, fingerprint)
    me: Rank | None = None
    try:
        me = Rank(exe, data, chan)
        plan: Plan = me.plan
        if dot_with is not None and stores_once(plan.ops(rank)):
            me.dot_with = dot_with
        steps = ops_by_step(plan, rank)
        fail_at = fault[1] if fault is not None and fault[0] == rank else None
        me.where = "placing the inputs"
        if fail_at is not None and fail_at < 0:
            raise RuntimeError("injected failure while placing the inputs")
        me.place()
        t_exec = time.perf_counter()
        me.execute(steps, fail_at)
        exec_seconds = time.perf_counter() - t_exec
        me.where = "gathering the result"
        t_gather = time.perf_counter()
        value = me.gather(gather)
        gather_seconds = time.perf_counter() - t_gather
        me.where = "collecting the stats"
        if trace is None:
            trace = os.environ.get("DISTAL_TRACE", "1") != "0"
        row = [getattr(me.stats, f)[rank] for f in STAT_FIELDS]
        # the trace rides with the stats: its event count, whether this rank wants it, and
        # up to INLINE_EVENTS events (a run of a few steps has no more): one collective
        nevents = len(me.trace.events)
        row += [exec_seconds, me.compute_seconds, gather_seconds, nevents, bool(trace)]
        row += [lw[rank] for lw in me.stats.level_words_received]
        inline = _event_rows(me.trace.events if trace and nevents <= INLINE_EVENTS else [])
        table = chan.allgather(np.concatenate([np.array(row, np.float64), inline.ravel()]))
        nf = len(STAT_FIELDS)
        most, wanted = int(table[:, nf + 3].max()), bool(table[:, nf + 4].any())
        table, inlined = table[:, : len(row)], table[:, len(row) :]
        events: list[Event] = []
        if wanted and most > INLINE_EVENTS:  # (every rank decides alike, from the table)
            events = _gather_trace(chan, me.trace.events, most)
            events = events if trace else []
        elif trace:
            events = _events(inlined.reshape(chan.size, INLINE_EVENTS, 6))
    except PeerFailure:
        if me is not None:
            me.abandon()
        raise
    except Exception as e:
        where = me.where if me is not None else "setup"
        text = f"{type(e).__name__}: {e} (at {where})"
        chan.notify(text)
        if me is not None:
            me.abandon()
        raise RuntimeFailure(f"{chan.name(rank)} failed: {text}", processor=rank) from e
    me.free_types()
    columns = table.T.tolist()  # (Python numbers in one call, not one element at a time)
    counts = [[int(x) for x in col] for col in columns[:nf]]
    levels = [[int(x) for x in col] for col in columns[nf + 5 :]]
    stats = Stats(*counts, level_words_received=levels)
    extra = {
        "execute_seconds": max(columns[nf]),
        "compute_seconds": columns[nf + 1],
        "gather_seconds": max(columns[nf + 2]),
        "dot": me.dot_partial,
    }
    own = me.owned.get(plan.output)
    if plan.patterns:  # bound to sparse patterns: the owned part and what it holds
        extra["block"] = None if own is None else own[0]
        region = plan.owned_region(plan.output, rank)
        extra["owned"] = getattr(region, "positions", region)
    common = {
        "value": value,
        "stats": stats,
        "trace": events,
        "seconds": time.perf_counter() - t_start,
        "extra": extra,
        "rank": rank,
        "nprocs": size,
        "dtype": exe.dtypes[plan.output],
        "barrier": chan.barrier,
        "notify": chan.notify,
    }
    if plan.output not in plan.placements:  # a sparse output: its stored values
        return DistributedResult(shape=tuple(plan.patterns[plan.output].shape), **common)
    pl = plan.placements[plan.output]
    boxes = [(idx, pl.block_box(idx), q) for idx, q in sorted(plan.primary.items())]
    return DistributedResult(
        shape=pl.shape,
        blocks={} if own is None else {own[1]: own[0]},
        primary=tuple(b for _, b, q in boxes if q == rank and box_volume(b) > 0),
        all_boxes=tuple(b for _, b, _ in boxes if box_volume(b) > 0),
        chunks=chunks_for(pl.bounds, pl.shape),
        **common,
    )


_KINDS = (FETCH, COMPUTE, FLUSH, REDUCE, FINAL, WAIT)  # FETCH, FINAL: the plan's words
#: trace events per rank sent inside the stats' collective (more take a second one)
INLINE_EVENTS = 16


def _event_rows(events: list[Event], n: int = INLINE_EVENTS) -> np.ndarray:
    """``events`` as ``n`` rows of six floats (unused rows: processor -1)."""
    rows = np.zeros((max(n, 1), 6), np.float64)
    rows[len(events) :, 0] = -1
    if events:
        rows[: len(events)] = [
            (e.proc, _KINDS.index(e.kind), e.step, e.start, e.end, e.words) for e in events
        ]
    return rows


def _events(table: np.ndarray) -> list[Event]:
    """Every rank's events from their rows (``(ranks, rows, 6)``), by start time."""
    rows = table.reshape(-1, 6)
    out = [
        Event(int(p), _KINDS[int(k)], int(st), a, b, int(w))
        for p, k, st, a, b, w in rows[rows[:, 0] >= 0].tolist()
    ]
    return sorted(out, key=lambda e: (e.start, e.proc))


def _gather_trace(chan: Channel, events: list[Event], n: int) -> list[Event]:
    """Every rank's trace events on every rank (times from each rank's own start, which the
    collective before execution lines up to within a message latency); ``n``: the most
    events any rank has."""
    table = chan.allgather(_event_rows(events, n).ravel()).reshape(chan.size, -1, 6)
    return _events(table)


def world() -> tuple[int, int]:
    """``(rank, size)`` of ``MPI.COMM_WORLD``, for scripts that must not import mpi4py."""
    return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


__all__ = ["GATHER_MODES", "MPISizeError", "run", "world"]
