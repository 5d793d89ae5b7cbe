"""A bound sparse kernel on the MPI runtime: one rank per processor, real messages.

Rank ``p`` runs the four phases of :mod:`distal.runtime.sparse_exec` on its own part of the
:class:`~distal.plan.sparse.SparsePlan` (every rank binds the same patterns, so every rank
holds the same plan and knows, without asking, what each peer sends it and how large it is):

1. its inputs are checked and all ranks agree that every one passed (as in
   :mod:`.entry`: a bad input raises ``InputError`` on its rank and :class:`PeerFailure`
   on the others, together, with nothing pending), then cut to what ``p`` owns;
2. every piece a peer needs from ``p`` travels in **one message per (tensor, source,
   destination)** carrying all its pieces' arrays -- values, then for sparse pieces their
   ``pos``/``crd`` arrays -- described by one MPI struct datatype over the numpy buffers
   themselves, so nothing is pickled or packed; the receiver allocates its buffers from
   the plan (shapes, dtypes, index lengths) and receives straight into them;
3. ``p`` computes, sends each owner its partial sums (one message per destination), and
   adds the partial sums it receives in increasing source order (the fixed order that
   gives every runtime the same bits);
4. the owned output parts are all-gathered (``gather="all"``) or gathered on rank 0
   (``"root"``) and assembled: a dense array, or the output pattern's ``SparseArray``.

A message's tag is its tensor's number in the sorted list of input names (partial sums:
one past the last); there is at most one message per (tag, source, destination) in a run,
and runs on one communicator are matched in order, so tags never collide. The stats are
counted from the buffers actually sent and received (values and index words separately,
one message per non-empty transfer, ``peak_words`` as the local runtime counts it) and
all-gathered, so every rank's ``Result.stats`` is the full ``Stats`` and equals
``bound.stats()``.

Every wait polls (``Channel.wait``): a rank whose run fails tells the others, which raise
:class:`PeerFailure` at their next poll; nothing blocks inside MPI.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, NoReturn

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from distal.errors import InputError, RuntimeFailure
from distal.plan.sparse import Need, Piece, SparsePlan, piece_levels
from distal.plan.stats import Stats
from distal.runtime.mpi.channel import Channel, PeerFailure, bury, channel
from distal.runtime.mpi.entry import (
    GATHER_MODES,
    _agree,
    _fingerprint,
    check_job_size,
)
from distal.runtime.result import Result
from distal.runtime.sparse_exec import (
    Compute,
    assemble,
    owned_data,
    owned_words,
    partial,
    payload,
    reduce_output,
    words_of,
)

#: the options this runtime takes (``_fail_on_rank``: testing only)
OPTIONS = ("gather", "comm", "_fail_on_rank")

#: the per-rank counts all-gathered into ``Stats`` (its compared fields, in their order)
STAT_FIELDS = tuple(f.name for f in fields(Stats) if f.compare)

Layout = list[tuple[tuple[int, ...], np.dtype]]  # one piece's arrays: (shape, dtype) each


@dataclass(frozen=True, slots=True, eq=False)
class Transfer:
    """One message of a rank: the pieces of one tensor between it and ``peer``, in the
    order of the receiver's need (or of the sender's output pieces, for partial sums).

    ``layouts`` (receives only) are the shapes and dtypes of every piece's arrays; ``live``
    says whether anything travels (a transfer of only empty pieces is no message, as the
    plan counts it).
    """

    peer: int
    seq: int
    tensor: str
    need: Need | None
    pieces: tuple[Piece, ...]
    layouts: tuple[Layout, ...]
    live: bool


class RankPlan:
    """Rank ``p``'s part of a bound plan, derived once per bound kernel: its prepared
    leaves and every transfer it sends or receives."""

    def __init__(self, bound: Any, p: int) -> None:
        plan: SparsePlan = bound.binding
        a = plan.analysis
        self.p = p
        prepared = getattr(bound, "_computes", None)  # a local run may have built them
        self.compute: Compute = prepared[p] if prepared is not None else Compute(plan, p)
        out = a.output
        names = sorted(n for n in a.tensors if n != out.name)
        self.partial_seq = len(names)
        self.sends: list[Transfer] = []
        self.recvs: list[Transfer] = []
        for q, qp in enumerate(plan.procs):
            for name, need in qp.needs.items():
                by_src: dict[int, list[Piece]] = {}
                for pc in need.pieces:
                    if pc.peer != q:
                        by_src.setdefault(pc.peer, []).append(pc)
                seq = names.index(name)
                if q == p:
                    for src, pcs in sorted(by_src.items()):
                        layouts = tuple(self._layout(plan, need, pc) for pc in pcs)
                        tr = Transfer(src, seq, name, need, tuple(pcs), layouts, _live(pcs))
                        self.recvs.append(tr)
                elif p in by_src:
                    pcs = by_src[p]
                    self.sends.append(Transfer(q, seq, name, need, tuple(pcs), (), _live(pcs)))
        mine: dict[int, list[Piece]] = {}
        for pc in plan.procs[p].out.pieces:
            if pc.peer != p:
                mine.setdefault(pc.peer, []).append(pc)
        self.partial_sends = [
            Transfer(q, self.partial_seq, out.name, None, tuple(pcs), (), _live(pcs))
            for q, pcs in sorted(mine.items())
        ]
        self.partial_recvs = []
        for src, sp in enumerate(plan.procs):
            if src == p:
                continue
            pcs = [pc for pc in sp.out.pieces if pc.peer == p]
            if pcs:
                layouts = tuple([(_shape(pc), out.dtype)] for pc in pcs)
                self.partial_recvs.append(
                    Transfer(src, self.partial_seq, out.name, None, tuple(pcs), layouts, _live(pcs))
                )

    @staticmethod
    def _layout(plan: SparsePlan, need: Need, pc: Piece) -> Layout:
        """The arrays :func:`~distal.runtime.sparse_exec.payload` makes for ``pc``: values
        ``rows x box`` (dense) or one per stored entry, then per compressed level of a
        sparse piece its ``pos`` and ``crd``, per singleton level its ``crd`` (int64)."""
        t = plan.analysis.tensors[need.tensor]
        if t.format.is_dense:
            return [(_shape(pc), t.dtype)]
        out: Layout = [((len(pc.sel),), t.dtype)]
        if not len(pc.sel):
            return out
        i64 = np.dtype(np.int64)
        arr = plan.arrays[need.tensor]
        for kind, parents, own in piece_levels(arr, need.rows[pc.sel], plan.cache):
            if kind in "cq":
                out += [((parents + 1,), i64), ((own,), i64)]
            elif kind == "s":
                out.append(((own,), i64))
        return out


def _shape(pc: Piece) -> tuple[int, ...]:
    """A dense piece's (or a partial sum's) values: its rows x its box."""
    return (len(pc.sel), *(hi - lo for lo, hi in pc.box))


def _live(pieces: list[Piece]) -> bool:
    return any(pc.words or pc.index_words for pc in pieces)


def rank_plan(bound: Any, p: int) -> RankPlan:
    """Rank ``p``'s :class:`RankPlan`, kept on the bound kernel for later runs."""
    cache = bound.__dict__.setdefault("_mpi_ranks", {})
    if p not in cache:
        cache[p] = RankPlan(bound, p)
    return cache[p]


class Exchange:
    """One run's requests, buffers and MPI datatypes on this rank; after a failure all of
    them are kept alive for good (a peer may still write into a receive buffer)."""

    def __init__(self, chan: Channel) -> None:
        self.chan = chan
        self.sends: list[Any] = []
        self.recvs: dict[str, list[Any]] = {}  # by group: pieces, partial sums
        self.buffers: list[Any] = []
        self.types: list[Any] = []
        self.base: dict[str, Any] = {}
        self.where = "setup"

    def _spec(self, arrays: list[np.ndarray]) -> list[Any]:
        """One MPI buffer over the non-empty ``arrays`` (contiguous), without copying: the
        array itself when there is one, else a struct datatype of their addresses."""
        full = [x for x in arrays if x.size]
        for x in full:
            if x.dtype.str not in self.base:
                self.base[x.dtype.str] = from_numpy_dtype(x.dtype)
        if len(full) == 1:
            return [full[0], self.base[full[0].dtype.str]]
        t = MPI.Datatype.Create_struct(
            [x.size for x in full],
            [MPI.Get_address(x) for x in full],
            [self.base[x.dtype.str] for x in full],
        ).Commit()
        self.types.append(t)
        return [MPI.BOTTOM, 1, t]

    def send(self, arrays: list[np.ndarray], dst: int, seq: int) -> None:
        self.buffers.append(arrays)
        spec = self._spec(arrays)
        self.sends.append(self.chan.data.Isend(spec, dest=dst, tag=self.chan.tag(seq)))

    def recv(self, arrays: list[np.ndarray], src: int, seq: int, group: str) -> None:
        self.buffers.append(arrays)
        spec = self._spec(arrays)
        req = self.chan.data.Irecv(spec, source=src, tag=self.chan.tag(seq))
        self.recvs.setdefault(group, []).append(req)

    def wait_recvs(self, group: str) -> None:
        reqs = self.recvs.pop(group, [])
        try:
            self.chan.wait(reqs, keep=tuple(self.buffers), cancel=reqs)
        except BaseException:
            self.recvs[group] = reqs  # still pending: abandon() withdraws them
            raise

    def wait_sends(self) -> None:
        self.chan.wait(self.sends, keep=tuple(self.buffers))
        self.sends = []

    def abandon(self) -> None:
        """After a failure: withdraw the posted receives, keep everything alive for good."""
        recvs = [r for reqs in self.recvs.values() for r in reqs]
        bury(self, recvs, self.sends + recvs)

    def free(self) -> None:
        for t in self.types:
            t.Free()
        self.types = []
        self.buffers = []


def _kernel_fingerprint(bound: Any, predicted: Stats) -> float:
    """The dense runtime's kernel fingerprint, extended by the bound patterns' fingerprints:
    ranks that bound different patterns fail together before anything moves."""
    base = int(_fingerprint(bound.kernel, predicted))
    prints = repr(sorted(bound.fingerprints.items())).encode()
    return float(zlib.crc32(prints, base))


def fail_together(error: Exception, comm: Any = None) -> NoReturn:
    """Take part in a run's agreement with ``error`` (raised here; the other ranks, which
    entered :func:`run`, raise :class:`PeerFailure` naming this rank).

    For a failure before there is a bound kernel -- ``kernel.bind(inputs)`` rejecting this
    rank's sparse inputs -- so that it fails every rank together instead of leaving the
    others waiting in :func:`run`.
    """
    chan = channel(MPI.COMM_WORLD if comm is None else comm)
    _agree(chan, error, 0.0)
    raise error  # pragma: no cover - _agree raises it


def run(bound: Any, inputs: Mapping[str, Any], **options: Any) -> Result:
    """Run the bound sparse kernel with one MPI rank per processor; call it on every rank.

    Args:
        bound: the bound kernel (``kernel.bind(inputs)``), the same patterns on every rank.
        inputs: the full inputs on every rank (sparse ones with the bound patterns); every
            rank checks its own (``bound.check_inputs``) and all ranks agree on the outcome
            before anything moves. A rank reads only what it owns.
        gather: ``"all"`` (default: every rank gets ``Result.value``), ``"root"`` (rank 0
            only) or ``"none"`` (no gather: ``value`` is None; ``extra["block"]`` is this
            rank's owned output part, ``extra["owned"]`` its box, or its stored positions
            in the output pattern for a sparse output).
        comm: the communicator (default ``MPI.COMM_WORLD``); its size must be the machine's.
        _fail_on_rank: testing only -- that rank raises after posting its messages.

    Raises:
        InputError: this rank's inputs or options are wrong (the others: PeerFailure).
        MPISizeError: the job's size is not the machine's (on every rank).
        PeerFailure: another rank failed; RuntimeFailure: this rank's run failed.
    """
    if bound.binding is None:  # a dense kernel: the dense runtime
        from distal.runtime.mpi.entry import run as dense_run

        return dense_run(bound.kernel, dict(inputs), **options)
    t_start = time.perf_counter()
    comm = options.get("comm")
    chan = channel(MPI.COMM_WORLD if comm is None else comm)
    size, rank = chan.size, chan.rank
    if chan.broken is not None:
        raise RuntimeFailure(
            f"an earlier run on this communicator failed ({chan.broken}); the MPI runtime "
            "does not use a communicator again after a failure: end the job",
            processor=rank,
        )
    gather = options.get("gather", "all")
    error: Exception | None = None
    fingerprint = 0.0
    try:  # every rank's checks, then one agreement: a rank that fails here fails them all
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise InputError(
                f"unknown option(s) {unknown} for sparse kernels on the mpi runtime; valid "
                f"options are {[o for o in OPTIONS if not o.startswith('_')]}"
            )
        if gather not in GATHER_MODES:
            raise InputError(f"gather={gather!r} is not one of {list(GATHER_MODES)}")
        predicted = bound.stats()
        check_job_size(predicted.nprocs, size, rank)
        data = bound.check_inputs(inputs)
        fingerprint = _kernel_fingerprint(bound, predicted)
    except Exception as e:
        error = e
    _agree(chan, error, fingerprint)
    ex = Exchange(chan)
    try:
        value, block, counts, seconds = _execute(
            bound, data, ex, gather, options.get("_fail_on_rank") == rank
        )
        ex.where = "collecting the stats"
        table = chan.allgather(np.array([*counts, *seconds], np.float64))
    except PeerFailure:
        ex.abandon()
        raise
    except Exception as e:
        text = f"{type(e).__name__}: {e} (at {ex.where})"
        chan.notify(text)
        ex.abandon()
        raise RuntimeFailure(f"{chan.name(rank)} failed: {text}", processor=rank) from e
    ex.free()
    nf = len(STAT_FIELDS)
    lists = [[int(x) for x in table[:, c]] for c in range(nf)]
    # one machine level: every word received crosses level 0 (as in the plan's stats)
    stats = Stats(*lists, level_words_received=[list(lists[0])])
    plan: SparsePlan = bound.binding
    return Result(
        value,
        stats,
        time.perf_counter() - t_start,
        extra={
            "execute_seconds": float(table[:, nf].max()),
            "compute_seconds": [float(x) for x in table[:, nf + 1]],
            "gather_seconds": float(table[:, nf + 2].max()),
            "block": block,
            "owned": plan.owned[plan.analysis.output.name][rank],
        },
    )


def _execute(
    bound: Any, data: dict[str, Any], ex: Exchange, gather: str, fail: bool
) -> tuple[Any, np.ndarray | None, list[int], list[float]]:
    """This rank's run: exchange, compute, partial sums, reduction, gather. Returns the
    gathered value (or None), the owned output part, the counts and the phase times."""
    plan: SparsePlan = bound.binding
    rank = ex.chan.rank
    ex.where = "preparing the rank's plan"
    rp = rank_plan(bound, rank)
    count = dict.fromkeys(STAT_FIELDS, 0)
    t_exec = time.perf_counter()
    ex.where = "reading the owned inputs"
    owned = owned_data(plan, rank, data)
    held = owned_words(plan, owned)
    ex.where = "posting the receives"
    received: dict[tuple[str, int], list[list[np.ndarray]]] = {}
    for tr in rp.recvs:
        arrays = [[np.empty(s, dt) for s, dt in lay] for lay in tr.layouts]
        received[(tr.tensor, tr.peer)] = arrays
        if not tr.live:
            continue
        flat = [x for xs in arrays for x in xs]
        ex.recv(flat, tr.peer, tr.seq, "pieces")
        w, iw = _totals(arrays)
        count["messages_received"] += 1
        count["words_received"] += w
        count["index_words_received"] += iw
    parts: dict[int, list[np.ndarray]] = {}
    for tr in rp.partial_recvs:
        bufs = [np.empty(s, dt) for lay in tr.layouts for s, dt in lay]
        parts[tr.peer] = bufs
        if not tr.live:
            continue
        ex.recv(bufs, tr.peer, tr.seq, "partials")
        w = sum(x.size for x in bufs)
        count["messages_received"] += 1
        count["words_received"] += w
        held += w
    ex.where = "sending the pieces peers need"
    for tr in rp.sends:
        assert tr.need is not None
        arrays = [_contiguous(payload(plan, owned, tr.need, pc)) for pc in tr.pieces]
        for pc, xs in zip(tr.pieces, arrays, strict=True):
            if words_of(xs) != (pc.words, pc.index_words):
                raise RuntimeError(
                    f"the payload of {tr.tensor!r} for processor {tr.peer} holds "
                    f"{words_of(xs)} (values, index words); the plan says "
                    f"{(pc.words, pc.index_words)}"
                )
        if not tr.live:
            continue
        ex.send([x for xs in arrays for x in xs], tr.peer, tr.seq)
        w, iw = _totals(arrays)
        count["messages_sent"] += 1
        count["words_sent"] += w
        count["index_words_sent"] += iw
    ex.where = "waiting for the pieces"
    if fail:
        raise RuntimeError("injected failure after posting the messages")
    ex.wait_recvs("pieces")
    ex.where = "computing"
    t_compute = time.perf_counter()
    y = rp.compute.run(owned, received)
    held += rp.compute.held  # operand and partial buffers (the fetched pieces are in them)
    compute_seconds = time.perf_counter() - t_compute
    ex.where = "sending the partial sums"
    pp = plan.procs[rank]
    for tr in rp.partial_sends:
        bufs = [partial(pp, y, pc) for pc in tr.pieces]
        if not tr.live:
            continue
        ex.send(bufs, tr.peer, tr.seq)
        w = sum(x.size for x in bufs)
        count["messages_sent"] += 1
        count["words_sent"] += w
    ex.where = "waiting for the partial sums"
    ex.wait_recvs("partials")
    ex.where = "reducing the output"
    block = reduce_output(plan, rank, y, parts)
    ex.where = "waiting for the sends"
    ex.wait_sends()
    exec_seconds = time.perf_counter() - t_exec
    count["iterations"] = pp.iterations
    count["peak_words"] = held
    ex.where = "gathering the result"
    t_gather = time.perf_counter()
    value = _gather(plan, ex.chan, block, gather)
    gather_seconds = time.perf_counter() - t_gather
    seconds = [exec_seconds, compute_seconds, gather_seconds]
    return value, block, [count[f] for f in STAT_FIELDS], seconds


def _contiguous(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """A payload's arrays as MPI sends them: contiguous, indices as int64."""
    out = [np.ascontiguousarray(arrays[0])]
    out += [np.ascontiguousarray(x, dtype=np.int64) for x in arrays[1:]]
    return out


def _totals(arrays: list[list[np.ndarray]]) -> tuple[int, int]:
    """(values, index words) of a transfer's pieces."""
    w = iw = 0
    for xs in arrays:
        a, b = words_of(xs)
        w, iw = w + a, iw + b
    return w, iw


def _gather(plan: SparsePlan, chan: Channel, block: np.ndarray | None, mode: str) -> Any:
    """The whole output on the ranks ``mode`` names, from every owner's part (one polled
    ``Iallgatherv`` or ``Igatherv``; not counted as traffic)."""
    if mode == "none":
        return None
    o = plan.analysis.output
    own = plan.owned[o.name]
    counts = []
    for q in range(chan.size):
        if own[q] is None:
            counts.append(0)
        elif o.format.is_dense:
            counts.append(math.prod(hi - lo for lo, hi in own[q]))  # type: ignore[union-attr]
        else:
            counts.append(len(own[q]))  # type: ignore[arg-type]
    displs = np.r_[0, np.cumsum(counts)[:-1]].astype(int).tolist() if counts else []
    dtype = np.dtype(o.dtype)
    mpitype = from_numpy_dtype(dtype)
    mine = np.zeros(0, dtype) if block is None else np.ascontiguousarray(block).ravel()
    gets = mode == "all" or chan.rank == 0
    flat = np.empty(sum(counts), dtype) if gets else None
    target = [flat, (counts, displs), mpitype] if gets else None
    if mode == "all":
        req = chan.data.Iallgatherv([mine, mpitype], target)
    else:
        req = chan.data.Igatherv([mine, mpitype], target, root=0)
    chan.wait([req], keep=(mine, flat))
    if flat is None:
        return None
    blocks: dict[int, np.ndarray | None] = {}
    for q in range(chan.size):
        if own[q] is None:
            blocks[q] = None
            continue
        part = flat[displs[q] : displs[q] + counts[q]]
        if o.format.is_dense:
            part = part.reshape(tuple(hi - lo for lo, hi in own[q]))  # type: ignore[union-attr]
        blocks[q] = part
    return assemble(plan, blocks)


__all__ = ["OPTIONS", "RankPlan", "Transfer", "fail_together", "rank_plan", "run"]
