"""The MPI runtime: SPMD execution of a plan, one MPI rank per processor.

Every rank runs the same script, so every rank compiles the same plan; rank ``p`` carries
out ``plan.programs[p]`` and holds only its own blocks. It mirrors
:mod:`distal.runtime.local` (the oracle) step for step, with real transfers:

* every message of ``plan.messages`` is one MPI point-to-point transfer of a numpy buffer
  (``Isend``/``Irecv``, no pickling); a non-contiguous box is described by an MPI subarray
  datatype, so blocks are sent from and received into place without copies;
* a message's tag is its sequence number among the plan's messages between the same two
  ranks (the plan orders messages by step, kind, source, destination), so tags never collide;
* the fetches of step ``s+1`` (receives posted, owners' sends issued) start before step
  ``s`` computes: communication overlaps computation, as the memory model assumes;
* partial sums go to their reducers at ``Flush``; the reducers' receives are posted when the
  step starts; finished blocks go to the other replicas after the last step;
* measured per-rank ``Stats`` use the plan's memory model on the real buffers and are
  all-gathered, so every rank's ``Result.stats`` is the full ``Stats``.

Failures never hang the job: every wait polls its requests with ``Test`` and, in between,
an *error channel* (a private duplicate communicator, probed with ``Iprobe``). A rank whose
execution raises sends its error text to every other rank there and raises
:class:`~distal.errors.RuntimeFailure` with its own number; the others raise a
``RuntimeFailure`` naming that rank at their next poll. An uncaught exception then ends the
whole job with ``MPI_Abort`` (see :func:`install_excepthook`).

This is the only module that imports ``mpi4py``.
"""

from __future__ import annotations

import sys
import time
import zlib
from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from distal.data import DistributedResult, chunks_for
from distal.errors import DistalUserError, InputError, RuntimeFailure
from distal.plan.ir import (
    FETCH,
    FINAL,
    PARTIAL,
    Combine,
    Compute,
    Fetch,
    Flush,
    Forward,
    Message,
    OpenOutput,
    Plan,
    RecvFinal,
    Reduce,
    SendFinal,
)
from distal.plan.stats import Stats, ops_by_step
from distal.runtime.source import read_block
from distal.runtime.store import Store, box_index
from distal.runtime.trace import (
    COMPUTE,
    FLUSH,
    REDUCE,
    WAIT,
    Event,
    Recorder,
)  # FETCH, FINAL: same words as the plan's
from distal.typing import Box, box_shape, box_volume

GATHER_MODES = ("all", "root", "none")
ERR_TAG = 7
TAG_BASE = 16
STAT_FIELDS = (
    "words_received",
    "words_sent",
    "messages_received",
    "messages_sent",
    "iterations",
    "peak_words",
)


class PeerFailure(RuntimeFailure):
    """Another rank failed; ``processor`` is that rank, the message carries its error."""


class MPISizeError(DistalUserError):
    """Raised identically on every rank, so no rank needs to abort the others."""

    collective = True


# --------------------------------------------------------------------------------------------
# Communicators and the error channel
# --------------------------------------------------------------------------------------------

_CHANNELS: dict[int, _Channel] = {}
_GRAVEYARD: list[Any] = []  # stores of failed runs: peers may still touch their buffers


class _Channel:
    """Private duplicates of the user's communicator: one for data, one for errors.

    Waits never block inside MPI: they poll the requests and the error channel, backing off
    to short sleeps so that oversubscribed ranks leave the cores to those computing.
    """

    def __init__(self, comm: Any) -> None:
        self.data = comm.Dup()
        self.err = comm.Dup()
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        ub = self.data.Get_attr(MPI.TAG_UB) or 32767
        self.span = max(1, (int(ub) - TAG_BASE) // 2)
        self.gather_base = TAG_BASE + self.span

    def tag(self, seq: int) -> int:
        """Data tag of the ``seq``-th plan message between one pair of ranks."""
        return TAG_BASE + seq % self.span

    def gather_tag(self, seq: int) -> int:
        return self.gather_base + seq % self.span

    def check(self) -> None:
        """Raise :class:`PeerFailure` if another rank has reported an error."""
        status = MPI.Status()
        if not self.err.Iprobe(source=MPI.ANY_SOURCE, tag=ERR_TAG, status=status):
            return
        src = status.Get_source()
        buf = bytearray(status.Get_count(MPI.BYTE))
        self.err.Recv([buf, MPI.BYTE], source=src, tag=ERR_TAG)
        text = buf.decode("utf-8", "replace")
        raise PeerFailure(f"processor {src} (MPI rank {src}) failed: {text}", processor=src)

    def wait(self, reqs: Sequence[Any], keep: tuple[Any, ...] = ()) -> None:
        """Wait for all ``reqs`` while watching the error channel.

        If a peer fails meanwhile, the requests are withdrawn where MPI allows and they,
        with the buffers in ``keep``, are kept alive for good: MPI may still write into a
        receive buffer after the wait is abandoned, so freeing it would corrupt the heap.
        """
        if not reqs:
            return
        spins = 0
        try:
            while not MPI.Request.Testall(list(reqs)):
                self.check()
                spins += 1
                if spins > 100:
                    time.sleep(min(2e-3, 2e-6 * spins))
        except BaseException:
            for r in reqs:
                try:
                    r.Cancel()
                except Exception:
                    pass
            _GRAVEYARD.append((list(reqs), keep))
            raise

    def barrier(self) -> None:
        """A barrier that still notices failures (non-blocking barrier, polled)."""
        self.wait([self.data.Ibarrier()])

    def allgather(self, row: np.ndarray) -> np.ndarray:
        """All ranks' ``row`` (float64) stacked, via a polled ``Iallgather``."""
        row = np.ascontiguousarray(row, dtype=np.float64)
        out = np.empty((self.size, row.size), np.float64)
        self.wait([self.data.Iallgather([row, MPI.DOUBLE], [out, MPI.DOUBLE])], keep=(row, out))
        return out

    def notify(self, text: str, grace: float = 2.0) -> None:
        """Tell every other rank that this one failed (best effort, bounded time)."""
        buf = bytearray(text.encode("utf-8")[:8000])
        reqs = [
            self.err.Isend([buf, MPI.BYTE], dest=r, tag=ERR_TAG)
            for r in range(self.size)
            if r != self.rank
        ]
        _GRAVEYARD.append((reqs, buf))  # a send still in flight must keep its buffer
        deadline = time.monotonic() + grace
        while reqs and not MPI.Request.Testall(reqs) and time.monotonic() < deadline:
            time.sleep(1e-3)


def _channel(comm: Any) -> _Channel:
    key = comm.py2f()
    if key not in _CHANNELS:
        _CHANNELS[key] = _Channel(comm)
    return _CHANNELS[key]


def install_excepthook() -> None:
    """End the whole MPI job when an exception escapes a rank's script.

    Like ``python -m mpi4py``: the traceback is printed, then ``MPI_Abort`` stops every rank
    (a rank that merely learned of another's failure waits a moment first, so the failing
    rank's own report comes out). Errors raised identically on every rank (a wrong number
    of ranks) exit normally instead, so that every rank prints its message.
    """
    if getattr(sys.excepthook, "_distal_mpi", False):
        return
    previous = sys.excepthook

    def hook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
        previous(tp, value, tb)
        if getattr(value, "collective", False) or MPI.COMM_WORLD.Get_size() == 1:
            return
        # let the other ranks print their reports before the abort reaches them
        time.sleep(2.0 if isinstance(value, PeerFailure) else 0.5)
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)

    hook._distal_mpi = True  # type: ignore[attr-defined]
    sys.excepthook = hook


# --------------------------------------------------------------------------------------------
# One rank's execution
# --------------------------------------------------------------------------------------------


class _Rank(Store):
    """One rank's store (see ``runtime/store.py``), requests and counters."""

    def __init__(self, kernel: Any, data: dict[str, Any], chan: _Channel) -> None:
        plan: Plan = kernel.plan
        super().__init__(chan.rank, plan.output, kernel.dtypes[plan.output])
        self.kernel = kernel
        self.plan = plan
        self.dtypes: dict[str, Any] = kernel.dtypes
        self.chan = chan
        self.data = data
        self.next_reqs: list[Any] = []
        self.next_keys: list[tuple] = []  # (step, tensor, piece) of each posted fetch receive
        self.combine_reqs: list[Any] = []
        self.step_reqs: list[Any] = []
        self.fetch_sends: list[Any] = []
        self.counts = dict.fromkeys(STAT_FIELDS, 0)
        machine = getattr(self.plan, "machine", None)
        self.level_words = [0] * (machine.nlevels if machine is not None else 1)
        self.types: dict[tuple, Any] = {}
        self.mpitypes: dict[str, Any] = {}
        self.compute_seconds = 0.0
        self.where = "setup"
        self.trace = Recorder()
        self._index_messages()

    # -- tags -----------------------------------------------------------------------------

    def _index_messages(self) -> None:
        """Tag every message this rank sends or receives, and group its fetch sends by step."""
        seq: dict[tuple[int, int], int] = defaultdict(int)
        self.send_tags: dict[tuple, deque[int]] = defaultdict(deque)
        self.recv_tags: dict[tuple, deque[int]] = defaultdict(deque)
        self.fetch_out: list[list[tuple[Message, int]]] = [[] for _ in range(self.plan.nsteps)]
        # routing: pieces this rank passes on once its own copy has arrived
        self.forwards: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for m in self.plan.messages:
            pair = (m.src, m.dst)
            tag = self.chan.tag(seq[pair])
            seq[pair] += 1
            if m.src == self.p:
                if m.kind == FETCH and m.relay:
                    self.forwards[(m.step, m.tensor, m.box)].append((m.dst, tag))
                elif m.kind == FETCH:
                    self.fetch_out[m.step].append((m, tag))
                else:
                    self.send_tags[(m.step, m.kind, m.dst, m.box)].append(tag)
            if m.dst == self.p:
                self.recv_tags[(m.step, m.kind, m.tensor, m.src, m.box)].append(tag)

    def _recv_tag(self, step: int, kind: str, tensor: str, src: int, box: Box) -> int:
        return self.recv_tags[(step, kind, tensor, src, box)].popleft()

    # -- buffers ---------------------------------------------------------------------------

    def _spec(self, arr: np.ndarray, box: Box, origin: Box) -> list[Any]:
        """An MPI buffer for ``box`` of ``arr`` (which holds ``origin``), without copying."""
        key = arr.dtype.str
        if key not in self.mpitypes:
            self.mpitypes[key] = from_numpy_dtype(arr.dtype)
        base = self.mpitypes[key]
        if box_volume(box) == 0:
            return [arr, 0, base]
        view = arr[box_index(box, origin)]
        if view.flags.c_contiguous:
            return [view, base]
        starts = tuple(lo - o for (lo, _), (o, _) in zip(box, origin, strict=True))
        tkey = (key, arr.shape, box_shape(box), starts)
        if tkey not in self.types:
            self.types[tkey] = base.Create_subarray(
                list(arr.shape), list(box_shape(box)), list(starts)
            ).Commit()
        return [arr, 1, self.types[tkey]]

    def _send(self, arr: np.ndarray, box: Box, origin: Box, dst: int, tag: int) -> Any:
        self.counts["words_sent"] += box_volume(box)
        self.counts["messages_sent"] += 1
        return self.chan.data.Isend(self._spec(arr, box, origin), dest=dst, tag=tag)

    def _recv(self, arr: np.ndarray, box: Box, origin: Box, src: int, tag: int) -> Any:
        self.counts["words_received"] += box_volume(box)
        self.counts["messages_received"] += 1
        self.level_words[self.plan.level_of(src, self.p)] += box_volume(box)
        return self.chan.data.Irecv(self._spec(arr, box, origin), source=src, tag=tag)

    def _peak(self) -> None:
        self.counts["peak_words"] = max(self.counts["peak_words"], self.held_words())

    # -- phases ----------------------------------------------------------------------------

    def place(self) -> None:
        """Read the owned blocks of the inputs; the output's owned block starts at zero."""
        plan = self.plan
        for name, pl in plan.placements.items():
            box = pl.owned_box(plan.coord_in(pl, self.p))
            if box is None:
                continue
            self.where = f"reading the owned block {box} of {name!r}"
            if name == plan.output:
                self.owned[name] = (np.zeros(box_shape(box), self.dtypes[name]), box)
            else:
                self.owned[name] = (read_block(name, self.data[name], box, self.dtypes[name]), box)
        self._peak()

    def execute(self, steps: list[list[Any]], fail_at: int | None) -> None:
        """All steps in order, then the final phase."""
        plan = self.plan
        self.where = "step 0 (prefetch)"
        if plan.nsteps > 0:
            self._start_fetches(steps, 0)
            self._finish_fetches()
        for s in range(plan.nsteps):
            self.where = f"step {s}"
            self.chan.check()
            if fail_at == s:
                raise RuntimeError(f"injected failure at step {s}")
            if s + 1 < plan.nsteps:
                self._start_fetches(steps, s + 1)
            for op in steps[s]:
                if isinstance(op, Combine):
                    arr = np.empty(box_shape(op.box), self.dtypes[plan.output])
                    tag = self._recv_tag(s, PARTIAL, plan.output, op.src, op.box)
                    self.combine_reqs.append(self._recv(arr, op.box, op.box, op.src, tag))
                    self.combined.append((arr, op.box))
                if isinstance(op, Reduce):
                    arr = np.empty(box_shape(op.box), self.dtypes[plan.output])
                    tag = self._recv_tag(s, PARTIAL, plan.output, op.src, op.box)
                    self.step_reqs.append(self._recv(arr, op.box, op.box, op.src, tag))
                    self.inbox.append((arr, op.box))
            for op in steps[s]:
                if not isinstance(op, Fetch | Reduce | Combine | Forward):
                    self.where = f"step {s}: {op}"
                    t = self.trace.now()
                    self._exec(op)
                    kind = COMPUTE if isinstance(op, Compute) else FLUSH
                    if isinstance(op, Compute | Flush):
                        words = sum(box_volume(b) for _, b in op.sends) if kind == FLUSH else 0
                        self.trace.add(self.p, kind, s, t, words)
            self.where = f"step {s}: waiting for partial sums"
            t = self.trace.now()
            self.chan.wait(self.step_reqs)
            if self.step_reqs:
                self.trace.add(self.p, WAIT, s, t)
            self.step_reqs = []
            self._peak()
            t = self.trace.now()
            words = self.reduce_inbox()
            if words:
                self.trace.add(self.p, REDUCE, s, t, words)
            self.end_step()
            self.fetch_sends = [r for r in self.fetch_sends if not r.Test()]
            self.where = f"step {s}: waiting for the fetches of step {s + 1}"
            self._finish_fetches(s + 1)
        if fail_at is not None and fail_at >= plan.nsteps:
            self.where = "after the last step"
            raise RuntimeError(f"injected failure after step {plan.nsteps - 1}")
        self._peak()
        self.where = "final phase"
        t = self.trace.now()
        self._finals(steps[plan.nsteps])
        if steps[plan.nsteps]:
            self.trace.add(self.p, FINAL, plan.nsteps, t)
        self.where = "final phase: waiting for fetch sends"
        self.chan.wait(self.fetch_sends)
        self.fetch_sends = []

    def _start_fetches(self, steps: list[list[Any]], s: int) -> None:
        """Issue this rank's sends of step ``s`` fetches and post its own step-``s`` fetches."""
        for m, tag in self.fetch_out[s]:
            own, origin = self.owned[m.tensor]
            self.fetch_sends.append(self._send(own, m.box, origin, m.dst, tag))
        for op in steps[s]:
            if isinstance(op, Fetch):
                self._fetch(op)

    def _fetch(self, op: Fetch) -> None:
        if op.box is None:
            self.next[op.tensor] = None
            return
        if op.view:
            own, origin = self.owned[op.tensor]
            self.next[op.tensor] = (own[box_index(op.box, origin)], op.box)
            return
        buf = np.empty(box_shape(op.box), self.dtypes[op.tensor])
        for src, piece in op.pieces:
            if src == self.p:
                own, origin = self.owned[op.tensor]
                buf[box_index(piece, op.box)] = own[box_index(piece, origin)]
            else:
                tag = self._recv_tag(op.step, FETCH, op.tensor, src, piece)
                self.next_reqs.append(self._recv(buf, piece, op.box, src, tag))
                self.next_keys.append((op.step, op.tensor, piece))
        self.next[op.tensor] = (buf, op.box)

    def _finish_fetches(self, step: int = 0) -> None:
        """The prefetched buffers are complete: they replace the old ones."""
        t = self.trace.now()
        pending = len(self.next_reqs)
        if self.forwards:
            self._forward_as_they_arrive()
        self.chan.wait(self.next_reqs)
        if pending:
            self.trace.add(self.p, FETCH, step, t)
        self.next_reqs, self.next_keys = [], []
        self.swap()

    def _forward_as_they_arrive(self) -> None:
        """Routing: pass each relayed piece on as soon as this rank's own copy is complete
        (one piece at a time, so trees that cross never wait on each other)."""
        todo = {
            n: self.forwards.pop(key)
            for n, key in enumerate(self.next_keys)
            if key in self.forwards
        }
        spins = 0
        while todo:
            for n in [n for n in todo if self.next_reqs[n].Test()]:
                _, tensor, piece = self.next_keys[n]
                buf, box = self.next[tensor]  # type: ignore[misc]
                for dst, tag in todo.pop(n):
                    self.fetch_sends.append(self._send(buf, piece, box, dst, tag))
            if todo:
                self.chan.check()
                spins += 1
                if spins > 100:
                    time.sleep(min(2e-3, 2e-6 * spins))

    def _exec(self, op: Any) -> None:
        if isinstance(op, OpenOutput):
            self.open_output(op)
        elif isinstance(op, Compute):
            t0 = time.perf_counter()
            self.counts["iterations"] += self.compute(op, self.kernel.kernels)
            self.compute_seconds += time.perf_counter() - t0
        elif isinstance(op, Flush):
            if self.combine_reqs:  # routing: children's partial sums ride along
                self.chan.wait(self.combine_reqs, keep=tuple(a for a, _ in self.combined))
                self.combine_reqs = []
                self.combine()
            arr, origin = self.flush_local(op)
            for dst, box in op.sends:
                tag = self.send_tags[(op.step, PARTIAL, dst, box)].popleft()
                self.step_reqs.append(self._send(arr, box, origin, dst, tag))

    def _finals(self, ops: list[Any]) -> None:
        """Finished blocks go from their reducers to the other replicas."""
        plan = self.plan
        reqs = []
        for op in ops:
            own, origin = self.owned[plan.output]
            if isinstance(op, RecvFinal):
                tag = self._recv_tag(plan.nsteps, FINAL, plan.output, op.src, op.box)
                reqs.append(self._recv(own, op.box, origin, op.src, tag))
            elif isinstance(op, SendFinal):
                tag = self.send_tags[(plan.nsteps, FINAL, op.dst, op.box)].popleft()
                reqs.append(self._send(own, op.box, origin, op.dst, tag))
        self.chan.wait(reqs)

    def gather(self, mode: str) -> np.ndarray | None:
        """The whole output on the ranks ``mode`` names (not counted as traffic)."""
        plan = self.plan
        pl = plan.placements[plan.output]
        targets = list(range(self.chan.size)) if mode == "all" else [0] if mode == "root" else []
        value = np.zeros(pl.shape, self.dtypes[plan.output]) if self.p in targets else None
        zero = tuple((0, n) for n in pl.shape)
        reqs = []
        for n, (idx, q) in enumerate(sorted(plan.primary.items())):
            box = pl.block_box(idx)
            if box_volume(box) == 0:
                continue
            tag = self.chan.gather_tag(n)
            if q == self.p:
                own, origin = self.owned[plan.output]
                for t in targets:
                    if t == self.p:
                        value[box_index(box, zero)] = own[box_index(box, origin)]  # type: ignore[index]
                    else:
                        spec = self._spec(own, box, origin)
                        reqs.append(self.chan.data.Isend(spec, dest=t, tag=tag))
            elif value is not None:
                spec = self._spec(value, box, zero)
                reqs.append(self.chan.data.Irecv(spec, source=q, tag=tag))
        self.chan.wait(reqs, keep=(value,))
        return value

    def abandon(self) -> None:
        """After a failure: withdraw posted receives, and keep every buffer alive for good.

        A peer may still be sending into (or reading from) our buffers, so nothing that a
        pending request refers to may be freed: the whole store goes to a graveyard.
        """
        pending = [r for r in self.next_reqs + self.step_reqs + self.fetch_sends if r]
        pending += self.combine_reqs
        for r in self.next_reqs + self.step_reqs + self.combine_reqs:
            try:
                r.Cancel()
            except Exception:
                pass
        deadline = time.monotonic() + 0.5
        try:
            while pending and not MPI.Request.Testall(pending) and time.monotonic() < deadline:
                time.sleep(1e-3)
        except Exception:
            pass
        _GRAVEYARD.append(self)

    def free_types(self) -> None:
        for t in self.types.values():
            t.Free()
        self.types.clear()


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def _fingerprint(plan: Plan) -> float:
    """A cheap summary of the plan, equal on every rank that compiled the same kernel."""
    words = sum(m.words for m in plan.messages)
    shapes = sorted((n, pl.shape, pl.grid) for n, pl in plan.placements.items())
    text = repr((plan.nprocs, plan.nsteps, len(plan.messages), words, plan.output, shapes))
    return float(zlib.crc32(text.encode()))


def run(
    kernel: Any,
    data: dict[str, Any],
    *,
    gather: str = "all",
    comm: Any = None,
    _fail_on_rank: int | None = None,
    _fail_at_step: int = 0,
) -> DistributedResult:
    """Execute ``kernel`` with one MPI rank per processor; call it on every rank.

    Args:
        kernel: the compiled kernel (the same on every rank).
        data: input name -> array or block source, as validated by ``Kernel.run``; a rank
            reads only its own blocks.
        gather: ``"all"`` (every rank gets ``Result.value``), ``"root"`` (rank 0 only) or
            ``"none"`` (the output stays distributed: ``Result.blocks`` and the collective
            writers of :class:`~distal.data.DistributedResult`).
        comm: the communicator to run on (default ``MPI.COMM_WORLD``); its size must equal
            ``kernel.plan.nprocs``, and rank ``p`` plays processor ``p``.
        _fail_on_rank, _fail_at_step: testing only -- raise on that rank at that step.
    """
    t_start = time.perf_counter()
    if gather not in GATHER_MODES:
        raise InputError(f"gather={gather!r} is not one of {list(GATHER_MODES)}")
    comm = MPI.COMM_WORLD if comm is None else comm
    plan: Plan = kernel.plan
    size, rank = comm.Get_size(), comm.Get_rank()
    if size != plan.nprocs:
        raise MPISizeError(
            f"the machine has {plan.nprocs} processors but this MPI job has {size} ranks "
            f"(this is rank {rank}): launch with `mpiexec -n {plan.nprocs} python SCRIPT` "
            f"or `distal run -n {plan.nprocs} SCRIPT`"
        )
    if comm is MPI.COMM_WORLD or comm == MPI.COMM_WORLD:
        install_excepthook()
    chan = _channel(comm)
    me: _Rank | None = None
    try:
        prints = chan.allgather(np.array([_fingerprint(plan)]))
        if len(set(prints[:, 0].tolist())) != 1:
            raise DistalUserError(
                "the ranks compiled different plans (ranks with different plan fingerprints: "
                f"{prints[:, 0].tolist()}); every rank must build the same kernel"
            )
        me = _Rank(kernel, data, chan)
        steps = ops_by_step(plan, rank)
        fail_at = _fail_at_step if _fail_on_rank == rank else None
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
        row = [me.counts[f] for f in STAT_FIELDS]
        row += [exec_seconds, me.compute_seconds, gather_seconds, *me.level_words]
        table = chan.allgather(np.array(row, np.float64))
        trace = _gather_trace(chan, me.trace.events)
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
        raise RuntimeFailure(
            f"processor {rank} (MPI rank {rank}) failed: {text}", processor=rank
        ) from e
    me.free_types()
    nf = len(STAT_FIELDS)
    levels = [[int(x) for x in table[:, c]] for c in range(nf + 3, table.shape[1])]
    stats = Stats(*([int(x) for x in table[:, f]] for f in range(nf)), level_words_received=levels)
    pl = plan.placements[plan.output]
    own = me.owned.get(plan.output)
    boxes = [(idx, pl.block_box(idx), q) for idx, q in sorted(plan.primary.items())]
    return DistributedResult(
        value=value,  # type: ignore[arg-type]
        stats=stats,
        trace=trace,
        seconds=time.perf_counter() - t_start,
        extra={
            "execute_seconds": float(table[:, nf].max()),
            "compute_seconds": [float(x) for x in table[:, nf + 1]],
            "gather_seconds": float(table[:, nf + 2].max()),
        },
        rank=rank,
        nprocs=size,
        shape=pl.shape,
        dtype=kernel.dtypes[plan.output],
        blocks={} if own is None else {own[1]: own[0]},
        primary=tuple(b for _, b, q in boxes if q == rank and box_volume(b) > 0),
        all_boxes=tuple(b for _, b, _ in boxes if box_volume(b) > 0),
        chunks=chunks_for(pl.bounds, pl.shape),
        barrier=chan.barrier,
    )


_KINDS = (FETCH, COMPUTE, FLUSH, REDUCE, FINAL, WAIT)


def _gather_trace(chan: _Channel, events: list[Event]) -> list[Event]:
    """Every rank's trace events on every rank (times from each rank's own start, which the
    collective before execution lines up to within a message latency)."""
    n = int(chan.allgather(np.array([len(events)], np.float64)).max())
    rows = np.zeros((max(n, 1), 6), np.float64)
    for r, e in enumerate(events):
        rows[r] = (e.proc, _KINDS.index(e.kind), e.step, e.start, e.end, e.words)
    rows[len(events) :, 0] = -1
    table = chan.allgather(rows.ravel()).reshape(chan.size, -1, 6)
    out = [
        Event(int(p), _KINDS[int(k)], int(st), float(a), float(b), int(w))
        for per_rank in table
        for p, k, st, a, b, w in per_rank
        if p >= 0
    ]
    return sorted(out, key=lambda e: (e.start, e.proc))


def world() -> tuple[int, int]:
    """``(rank, size)`` of ``MPI.COMM_WORLD``, for scripts that must not import mpi4py."""
    return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


__all__: list[str] = ["MPISizeError", "PeerFailure", "install_excepthook", "run", "world"]
