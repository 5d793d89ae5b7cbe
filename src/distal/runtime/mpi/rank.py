"""One rank's execution: its store, its tagged transfers and its steps.

It mirrors :mod:`distal.runtime.local` step for step, with real transfers (see the package
docstring for the protocol), for every plan: a region that is a box of an array moves in
place (a subarray datatype); rows and stored entries, which lie scattered in their holders,
are gathered into a contiguous message and scattered on arrival, and a piece of stored
entries carries its ``pos``/``crd`` index arrays with its values (one message of bytes).
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Any

import numpy as np
from mpi4py.util.dtlib import from_numpy_dtype

from distal.kernels.recycle import Recycler
from distal.kernels.sparse_leaf import EntryLeaves
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
from distal.plan.region import Entries, Region, as_slice, content, index_words, shape
from distal.plan.region import words as region_words
from distal.plan.stats import COUNTED, Stats
from distal.plan.visit import Interpreter, impl
from distal.runtime.executable import Executable
from distal.runtime.mpi.channel import Channel, bury
from distal.runtime.mpi.relay import Forwarder, Send, threads_ok
from distal.runtime.source import read_block
from distal.runtime.store import Store, box_index, copy_piece, read, reads_own_in_place, where
from distal.runtime.weakcache import WeakCache
from distal.trace import COMPUTE, FLUSH, REDUCE, WAIT, Recorder
from distal.typing import Box, box_shape, box_volume

STAT_FIELDS = COUNTED  # the counts a rank gathers, in their order


#: plans whose leaves and arrays are kept (the most recently used), as the local runtime
#: keeps its prepared plans: a rank reruns the same program (the kernel keeps it), and
#: preparing the leaves of a 5 M-entry SpMV (segments, index arrays) cost 40 ms a run
LEAVES_KEPT = 16
#: arrays a plan's runs hand out again per rank (its output blocks and fetch buffers): a
#: session loop's runs drop the blocks of the run before last
ARRAYS_KEPT = 4
#: fetch buffers larger than this are not kept between runs (as the local runtime's
#: ``SPARE_BYTES``): a large kernel run once would otherwise hold them after it
SPARE_BUFFER_BYTES = 1 << 23
#: by plan, each dropped with its plan: ``(output dtype, leaves, recycler)``
_LEAVES = WeakCache(LEAVES_KEPT)


def _prepared(
    plan: Plan, p: int, dtype: Any
) -> tuple[dict[int, EntryLeaves], Recycler, dict[int, bool]]:
    """The leaves over stored entries of ``plan``'s Computes on rank ``p``, by the Compute's
    identity, the plan's recycler of arrays (made once per plan and output dtype), and
    by Fetch, whether its leaves read the rank's own rows in place (filled as it runs).

    The recycler hands out an array only when nothing else holds it (a result block a
    session still holds, a buffer a pending request or a failed run's graveyard refers to,
    is never written again): a fresh output block of a large SpMV costs a page fault per
    page inside its leaf, about 1 ms a run on 10^6 rows."""
    got = _LEAVES.get(plan)
    if got is not None and got[0] == dtype:
        return got[1], got[2], got[3]
    leaves = {
        id(op): EntryLeaves(op.work, dtype)
        for op in plan.ops(p)
        if isinstance(op, Compute) and op.work is not None
    }
    recycler = Recycler(ARRAYS_KEPT)
    reads: dict[int, bool] = {}
    _LEAVES.put(plan, (dtype, leaves, recycler, reads))
    return leaves, recycler, reads


class _At:
    """Where a rank is: step ``s``, instruction ``op``, as text only when an error reports
    it (an instruction's text costs more to make than a small run's leaf)."""

    def __init__(self, s: int, op: Any) -> None:
        self.s, self.op = s, op

    def __str__(self) -> str:
        return f"step {self.s}: {self.op}"

    __repr__ = __str__


class Rank(Store, Interpreter):
    """One rank's store (see ``runtime/store.py``), requests and counters: a handler per
    instruction type, in four phases of a step (``fetch``: the next step's fetches, posted
    before this step computes; ``post``: the receives of this step's partial sums; ``work``:
    the output buffer, the leaves and the flush; ``final``: finished blocks to replicas)."""

    #: a relay's forwards follow the plan's relayed messages (:meth:`_index_messages`)
    ignores = (Forward,)

    def __init__(self, exe: Executable, data: dict[str, Any], chan: Channel) -> None:
        plan: Plan = exe.program(chan.rank)  # this rank's program and messages only
        super().__init__(chan.rank, plan.output, exe.dtypes[plan.output])
        self.term_kernels = exe.leaves
        self.plan = plan
        self.dtypes: dict[str, Any] = exe.dtypes
        self.chan = chan
        self.data = data
        self.next_reqs: list[Any] = []
        self.forwarder: Forwarder | None = None  # routing: relays forward while computing
        self.threaded = threads_ok()
        # each posted fetch receive: ((step, tensor, the piece's content), piece, the array it
        # lands in when that is not the fetch buffer's box itself: what a relay passes on)
        self.next_keys: list[tuple] = []
        self._landing: np.ndarray | None = None
        self.combine_reqs: list[Any] = []
        self.step_reqs: list[Any] = []
        self.step_recvs: list[Any] = []  # the receives among step_reqs (partial sums)
        self.fetch_sends: list[Any] = []
        machine = getattr(self.plan, "machine", None)
        # the counter: this rank counts its own column (its ends of every message)
        self.stats = Stats.zeros(plan.nprocs, machine.nlevels if machine is not None else 1)
        self.types: dict[tuple, Any] = {}
        self.mpitypes: dict[str, Any] = {}
        self.compute_seconds = 0.0
        self.where: str | _At = "setup"
        self.trace = Recorder()
        # the leaves over stored entries, per Compute, and the arrays earlier runs let go of
        self.leaves, self.spare, self.reads_own = _prepared(plan, self.p, self.out_dtype)
        self.keep: list[Any] = []  # gathered messages, alive until their sends complete
        self._region_tensor: dict[int, str] = {}
        self._piece_cache: dict = {}
        self.arrivals: list[tuple[np.ndarray, Any, Any, int]] = []  # (buffer, index, msg, words)
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
            self._region_tensor[id(m.box)] = m.tensor
            pair = (m.src, m.dst)
            tag = self.chan.tag(seq[pair])
            seq[pair] += 1
            if m.src == self.p:
                if m.kind == FETCH and m.relay:
                    # a relay's own copy is another region object holding the same elements
                    self.forwards[(m.step, m.tensor, content(m.box))].append((m.dst, tag))
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

    def _send(self, arr: np.ndarray, box: Region, origin: Region, dst: int, tag: int) -> Any:
        if isinstance(box, tuple) and isinstance(origin, tuple):
            self.stats.sent(self.p, region_words(box))
            return self.chan.data.Isend(self._spec(arr, box, origin), dest=dst, tag=tag)
        msg = np.ascontiguousarray(read(arr, where(box, origin)))
        index = 0
        if index_words(box):  # stored entries travel with their pos/crd
            msg, index = self._with_index(msg, box)
        self.stats.sent(self.p, region_words(box), index)
        self.keep.append(msg)
        return self.chan.data.Isend(self._flat(msg), dest=dst, tag=tag)

    def _with_index(self, values: np.ndarray, box: Entries) -> tuple[np.ndarray, int]:
        """The bytes of a piece of stored entries: its values, then its index arrays; and
        the index words they carry."""
        from distal.sparse.pieces import piece_arrays

        pattern = self.plan.patterns[self._tensor_of(box)]
        index = piece_arrays(pattern, box.positions, self._piece_cache)
        parts = [values.view(np.uint8).ravel()]
        parts += [np.ascontiguousarray(x, np.int64).view(np.uint8).ravel() for x in index]
        return np.concatenate(parts), sum(x.size for x in index)

    def _tensor_of(self, box: Region) -> str:
        return self._region_tensor[id(box)]

    def _flat(self, msg: np.ndarray) -> list[Any]:
        key = msg.dtype.str
        if key not in self.mpitypes:
            self.mpitypes[key] = from_numpy_dtype(msg.dtype)
        return [msg, self.mpitypes[key]]

    def _recv(self, arr: np.ndarray, box: Region, origin: Region, src: int, tag: int) -> Any:
        """Post the receive of ``box`` into ``arr`` (which holds ``origin``); the array the
        message lands in, when not ``arr``'s box itself, is left in ``_landing``."""
        self._landing = None
        n = region_words(box)
        level = self.plan.level_of(src, self.p)
        if isinstance(box, tuple) and isinstance(origin, tuple):
            self.stats.received(self.p, n, level)
            return self.chan.data.Irecv(self._spec(arr, box, origin), source=src, tag=tag)
        ix = where(box, origin)
        iw = index_words(box)
        self.stats.received(self.p, n, level, iw)
        if not iw and isinstance(ix, tuple) and all(isinstance(x, slice) for x in ix):
            view = arr[ix]
            if view.flags.c_contiguous:  # lies in one piece of the holder: in place
                self._landing = view
                return self.chan.data.Irecv(self._flat(view), source=src, tag=tag)
        if iw:
            msg = np.empty(n * arr.dtype.itemsize + iw * 8, np.uint8)
        else:
            msg = np.empty(shape(box), arr.dtype)
        self.arrivals.append((arr, ix, msg, n))
        self._landing = msg
        return self.chan.data.Irecv(self._flat(msg), source=src, tag=tag)

    def _land(self) -> None:
        """Scatter the messages received into temporaries to where they belong."""
        for arr, ix, msg, n in self.arrivals:
            if msg.dtype == np.uint8 and arr.dtype != np.uint8:  # values, then index arrays
                msg = msg[: n * arr.dtype.itemsize].view(arr.dtype)
            value = msg.reshape(-1) if msg.ndim == 1 else msg
            if type(ix) is tuple:
                arr[ix] = value
            else:
                ix.put(arr, value)
        self.arrivals.clear()

    def _peak(self) -> None:
        self.stats.held(self.p, self.held_words())

    # -- phases ----------------------------------------------------------------------------

    def place(self) -> None:
        """Read the owned blocks of the inputs. The output's owned block is taken as it
        is and zeroed where it is first written, or never where a leaf writes all of it
        (an SpMV's block of rows): the zeroing pass costs as much as a fifth of an SpMV."""
        plan = self.plan
        for name, regions in plan.owned.items():  # what a pattern decides: stored entries
            own = regions[self.p]
            if own is None:
                continue
            if name == plan.output:  # zeroed where first written (Store.own_output)
                self.owned[name] = (self.spare.take(shape(own), self.dtypes[name]), own)
                self.own_dirty = True
                continue
            vals = np.asarray(self.data[name].vals, dtype=self.dtypes[name])
            # a run of positions is a view (an input is never written); others a gather
            self.owned[name] = (np.ascontiguousarray(vals[as_slice(own.positions)]), own)
        for name, pl in plan.placements.items():
            box = pl.owned_box(plan.coord_in(pl, self.p))
            if box is None:
                continue
            self.where = f"reading the owned block {box} of {name!r}"
            if name == plan.output:
                self.owned[name] = (self.spare.take(box_shape(box), self.dtypes[name]), box)
                self.own_dirty = True
            else:
                # a block already of its dtype is read where it lies (read-only: no run
                # writes into an input's owned block; a write would raise, not corrupt)
                block = read_block(name, self.data[name], box, self.dtypes[name], view=True)
                self.owned[name] = (block, box)
        self._peak()

    def execute(self, steps: list[list[Any]], fail_at: int | None) -> None:
        """All steps in order, then the final phase."""
        plan = self.plan
        steps = [self.split(ops) for ops in steps]  # each step's instructions by phase
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
            for op in steps[s]["post"]:
                self.visit(op)
            for op in steps[s]["work"]:
                self.where = _At(s, op)  # (its text made only if it is read)
                self.visit(op)
            self.where = f"step {s}: waiting for partial sums"
            t = self.trace.now()
            self.chan.wait(self.step_reqs, cancel=self.step_recvs)
            self._land()
            if self.step_reqs:
                self.trace.add(self.p, WAIT, s, t)
            self.step_reqs, self.step_recvs = [], []
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
        if self.own_dirty:
            self.own_output()  # (a block nothing wrote into is zero all the same)
        self.where = "final phase"
        t = self.trace.now()
        finals = steps[plan.nsteps]["final"]
        self._finals(finals)
        if finals:
            self.trace.add(self.p, FINAL, plan.nsteps, t)
        self.where = "final phase: waiting for fetch sends"
        self.chan.wait(self.fetch_sends)
        self.fetch_sends = []

    def _start_fetches(self, steps: list[dict[str, list[Any]]], s: int) -> None:
        """Issue this rank's sends of step ``s`` fetches and post its own step-``s`` fetches."""
        for m, tag in self.fetch_out[s]:
            own, origin = self.owned[m.tensor]
            self.fetch_sends.append(self._send(own, m.box, origin, m.dst, tag))
        for op in steps[s]["fetch"]:
            self.visit(op)
        if self.forwards:
            self._start_forwarder()

    def _start_forwarder(self) -> None:
        """Routing: pass each relayed piece of these fetches on once this rank's own copy is
        complete — from a thread while the rank computes where MPI allows it, else in the
        wait for the fetches (see :mod:`.relay`); the MPI specs are made here, on the main
        thread."""
        todo = []
        for req, (key, piece, landing) in zip(self.next_reqs, self.next_keys, strict=True):
            if key not in self.forwards:
                continue
            tensor = key[1]
            buf, box = self.next[tensor]  # type: ignore[misc]
            if landing is None:  # a box of a box buffer: sent from the buffer in place
                spec = self._spec(buf, piece, box)
            else:  # rows: sent from where the receive put them, exactly the piece's values
                self.keep.append(landing)
                spec = self._flat(landing)
            sends: list[Send] = []
            for dst, tag in self.forwards.pop(key):
                self.stats.sent(self.p, region_words(piece), index_words(piece))
                sends.append((spec, dst, tag))
            todo.append((req, sends))
        if todo:
            self.forwarder = Forwarder(self.chan.data, todo)
            if self.threaded:
                self.forwarder.start()

    def _new_buffer(self, box_shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        if int(np.prod(box_shape, dtype=np.int64)) * np.dtype(dtype).itemsize > SPARE_BUFFER_BYTES:
            return np.empty(box_shape, dtype)
        return self.spare.take(box_shape, dtype)

    @impl(Fetch, phase="fetch")
    def _fetch(self, op: Fetch) -> None:
        buf = self.fetch_buffer(op, self.dtypes[op.tensor])
        if buf is None:
            return
        in_place = self.reads_own.get(id(op))
        if in_place is None and any(src == self.p for src, _ in op.pieces):
            ops = self.plan.ops(self.p)
            own = self.owned[op.tensor]
            in_place = reads_own_in_place(op, self.p, ops, self.leaves, own)
            self.reads_own[id(op)] = in_place
        if in_place:
            self.own_reads[op.tensor] = self.owned[op.tensor][0]
        for src, piece in op.pieces:
            if src == self.p:
                if in_place:
                    continue  # the leaves read these rows from the owned block
                own, origin = self.owned[op.tensor]
                copy_piece(buf, where(piece, op.box), own, where(piece, origin))
            else:
                tag = self._recv_tag(op.step, FETCH, op.tensor, src, piece)
                self.next_reqs.append(self._recv(buf, piece, op.box, src, tag))
                key = (op.step, op.tensor, content(piece) if self.forwards else piece)
                self.next_keys.append((key, piece, self._landing))

    def _finish_fetches(self, step: int = 0) -> None:
        """The prefetched buffers are complete: they replace the old ones."""
        t = self.trace.now()
        pending = len(self.next_reqs)
        if self.forwarder is not None:
            self.fetch_sends += self.forwarder.finish(self.chan.check)
            self.forwarder = None
        self.chan.wait(self.next_reqs, cancel=self.next_reqs)
        self._land()
        if pending:
            self.trace.add(self.p, FETCH, step, t)
        self.next_reqs, self.next_keys = [], []
        self.swap()

    @impl(Combine, phase="post")
    def _post_combine(self, op: Combine) -> None:
        """Routing: post the receive of a child's partial sum, added in before the Flush."""
        plan = self.plan
        arr = np.empty(shape(op.box), self.dtypes[plan.output])
        tag = self._recv_tag(op.step, PARTIAL, plan.output, op.src, op.box)
        self.combine_reqs.append(self._recv(arr, op.box, op.box, op.src, tag))
        self.combined.append((arr, op.box))

    @impl(Reduce, phase="post")
    def _post_reduce(self, op: Reduce) -> None:
        """Post the receive of a partial sum, added into the own block at the step's end."""
        plan = self.plan
        arr = np.empty(shape(op.box), self.dtypes[plan.output])
        tag = self._recv_tag(op.step, PARTIAL, plan.output, op.src, op.box)
        self.step_recvs.append(self._recv(arr, op.box, op.box, op.src, tag))
        self.step_reqs.append(self.step_recvs[-1])
        self.inbox.append((arr, op.box))

    @impl(OpenOutput, phase="work")
    def _open_output(self, op: OpenOutput) -> None:
        self.open_output(op)

    @impl(Compute, phase="work")
    def _compute(self, op: Compute) -> None:
        t = self.trace.now()
        t0 = time.perf_counter()
        self.stats.computed(self.p, self.compute(op, self.term_kernels, self.leaves.get(id(op))))
        self.compute_seconds += time.perf_counter() - t0
        self.trace.add(self.p, COMPUTE, op.step, t, 0)

    @impl(Flush, phase="work")
    def _flush(self, op: Flush) -> None:
        t = self.trace.now()
        if self.combine_reqs:  # routing: children's partial sums ride along
            keep = tuple(a for a, _ in self.combined)
            self.chan.wait(self.combine_reqs, keep=keep, cancel=self.combine_reqs)
            self.combine_reqs = []
            self.combine()
        arr, origin = self.flush_local(op)
        for dst, box in op.sends:
            tag = self.send_tags[(op.step, PARTIAL, dst, box)].popleft()
            self.step_reqs.append(self._send(arr, box, origin, dst, tag))
        sent = sum(region_words(b) for _, b in op.sends)
        self.trace.add(self.p, FLUSH, op.step, t, sent)

    def _finals(self, ops: list[Any]) -> None:
        """Finished blocks go from their reducers to the other replicas."""
        reqs: list[Any] = []
        recvs: list[Any] = []
        for op in ops:
            self.visit(op, reqs, recvs)
        self.chan.wait(reqs, cancel=recvs)

    @impl(RecvFinal, phase="final")
    def _recv_final(self, op: RecvFinal, reqs: list[Any], recvs: list[Any]) -> None:
        plan = self.plan
        own, origin = self.owned[plan.output]
        tag = self._recv_tag(plan.nsteps, FINAL, plan.output, op.src, op.box)
        recvs.append(self._recv(own, op.box, origin, op.src, tag))
        reqs.append(recvs[-1])

    @impl(SendFinal, phase="final")
    def _send_final(self, op: SendFinal, reqs: list[Any], recvs: list[Any]) -> None:
        plan = self.plan
        own, origin = self.owned[plan.output]
        tag = self.send_tags[(plan.nsteps, FINAL, op.dst, op.box)].popleft()
        reqs.append(self._send(own, op.box, origin, op.dst, tag))

    def gather(self, mode: str) -> Any:
        """The whole output on the ranks ``mode`` names (not counted as traffic)."""
        plan = self.plan
        if plan.output in plan.owned:
            return self._gather_entries(mode)
        pl = plan.placements[plan.output]
        targets = list(range(self.chan.size)) if mode == "all" else [0] if mode == "root" else []
        value = np.zeros(pl.shape, self.dtypes[plan.output]) if self.p in targets else None
        zero = tuple((0, n) for n in pl.shape)
        reqs, recvs = [], []
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
                recvs.append(self.chan.data.Irecv(spec, source=q, tag=tag))
        self.chan.wait(reqs + recvs, keep=(value,), cancel=recvs)
        return value

    def _gather_entries(self, mode: str) -> Any:
        """A sparse output: every owner's values of its stored entries, on the ranks ``mode``
        names, as the output pattern with those values."""
        plan = self.plan
        pattern = plan.patterns[plan.output]
        targets = list(range(self.chan.size)) if mode == "all" else [0] if mode == "root" else []
        vals = np.zeros(pattern.nnz, self.dtypes[plan.output]) if self.p in targets else None
        regions = plan.owned[plan.output]
        reqs, recvs, keep = [], [], []
        for q, own in enumerate(regions):
            if own is None or not len(own.positions):
                continue
            tag = self.chan.gather_tag(q)
            if q == self.p:
                mine = np.ascontiguousarray(self.owned[plan.output][0])
                keep.append(mine)
                for t in targets:
                    if t == self.p:
                        vals[own.positions] = mine  # type: ignore[index]
                    else:
                        reqs.append(self.chan.data.Isend(self._flat(mine), dest=t, tag=tag))
            elif vals is not None:
                part = np.empty(len(own.positions), vals.dtype)
                keep.append(part)
                recvs.append((self.chan.data.Irecv(self._flat(part), source=q, tag=tag), own, part))
        self.chan.wait(reqs + [r for r, _, _ in recvs], keep=(vals, *keep),
                       cancel=[r for r, _, _ in recvs])  # fmt: skip
        if vals is None:
            return None
        for _, own, part in recvs:
            vals[own.positions] = part
        return pattern.with_values(vals)

    def abandon(self) -> None:
        """After a failure: withdraw posted receives, and keep every buffer alive for good.

        A peer may still be sending into (or reading from) our buffers, so nothing that a
        pending request refers to may be freed: the whole store goes to a graveyard.
        """
        if self.forwarder is not None:
            self.forwarder.stop()
            self.fetch_sends += self.forwarder.sends
        pending = [r for r in self.next_reqs + self.step_reqs + self.fetch_sends if r]
        pending += self.combine_reqs
        bury(self, self.next_reqs + self.step_recvs + self.combine_reqs, pending)

    def free_types(self) -> None:
        for t in self.types.values():
            t.Free()
        self.types.clear()


__all__ = ["STAT_FIELDS", "Rank"]
