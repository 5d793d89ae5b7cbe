"""One processor's data while it executes its program, shared by the runtimes.

The local and the MPI runtime differ only in how pieces travel; what a processor holds and
how its output accumulates is the plan's memory model (``plan/stats.py``), written once here:
owned blocks, the fetch buffers of the current step and those prefetched for the next one,
the partial output buffer (or the owned block itself when the processor is its reducer),
partial sums received this step (``inbox``) and children's sums combined on a routing tree.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from distal.kernels.fused import compiled_dot
from distal.kernels.leaf import TermKernel, run_leaf, stores_all
from distal.kernels.own_rows import probe_rows
from distal.kernels.sparse_leaf import EntryLeaves
from distal.plan.ir import Combine, Compute, Fetch, Flush, OpenOutput, RecvFinal, Reduce
from distal.plan.region import Location, Region, locate, shape
from distal.runtime.weakcache import WeakCache
from distal.typing import Box, box_volume
from distal.typing import box_index as _box_index

Held = tuple[np.ndarray, Region]  # an array and the region of the tensor it holds

INDEXES = 1 << 14  # (box, origin) pairs whose index is kept: a plan's boxes recur every run
_INDEX: dict[tuple[Box, Box], tuple[Any, ...]] = {}


def box_index(box: Box, origin: Box) -> tuple[Any, ...]:
    """:func:`distal.typing.box_index`, kept per ``(box, origin)``."""
    key = (box, origin)
    try:
        ix = _INDEX.get(key)
    except TypeError:  # a box given as a list
        return _box_index(box, origin)
    if ix is None:
        ix = _box_index(box, origin)
        if len(_INDEX) >= INDEXES:
            _INDEX.clear()
        _INDEX[key] = ix
    return ix


#: by region ``sub``, dropped with it: ``{holder (a box) or its id: (None or a weak
#: reference to the holder region, index)}``
_WHERE = WeakCache(INDEXES)


def where(sub: Region, holder: Region) -> Any:
    """Where region ``sub`` lies in an array holding ``holder``: an index (boxes, and parts
    in the region they were cut from) or a :class:`~distal.plan.region.Location` (rows
    gathered from an owned block), kept per pair: a plan's regions recur every run."""
    if isinstance(sub, tuple) and isinstance(holder, tuple):
        return box_index(sub, holder) if sub else (Ellipsis,)
    # a box holder is keyed by its value: a rank's owned box is a new tuple every run
    boxed = isinstance(holder, tuple)
    key = holder if boxed else id(holder)
    per = _WHERE.get(sub)
    if per is not None:
        got = per.get(key)
        if got is not None and (boxed or got[0]() is holder):
            return got[1]
    loc = locate(sub, holder)
    ix = loc.index if loc.perm is None and not loc.rowless else loc
    try:
        ref = None if boxed else weakref.ref(holder)
    except TypeError:  # (not kept)
        return ix
    if per is None:
        per = {}
        _WHERE.put(sub, per)
    per[key] = (ref, ix)
    return ix


def read(arr: np.ndarray, ix: Any) -> np.ndarray:
    """``arr`` at ``ix`` (from :func:`where`)."""
    return ix.view(arr) if type(ix) is Location else arr[ix]


def copy_into(dst: np.ndarray, arr: np.ndarray, ix: Any) -> None:
    """``dst[...] = arr`` at ``ix``: a gather of whole rows lands in ``dst`` directly
    (``np.take(..., out=dst)``), not through a temporary array first."""
    index = ix.index if type(ix) is Location and ix.perm is None and not ix.rowless else ix
    if type(index) is tuple and index and dst.flags.c_contiguous:
        rows, *rest = index
        if (
            isinstance(rows, np.ndarray)
            and rows.dtype.kind in "iu"
            and dst.dtype == arr.dtype
            and all(
                isinstance(r, slice)
                and r.step is None
                and (r.start or 0) == 0
                and r.stop == arr.shape[d + 1]
                for d, r in enumerate(rest)
            )
            and len(rest) == arr.ndim - 1
        ):
            # (mode "clip": with the default "raise" numpy buffers ``out``, a second copy;
            # the rows are the plan's, each in range)
            np.take(arr, rows, axis=0, out=dst, mode="clip")
            return
    np.copyto(dst, read(arr, ix))


def copy_piece(dst: np.ndarray, dix: Any, src: np.ndarray, six: Any) -> None:
    """``dst`` at ``dix`` = ``src`` at ``six`` (both from :func:`where`): where ``dix`` is
    a view of ``dst`` the rows are gathered straight into it (:func:`copy_into`: an exact
    fetch's own rows, 0.7 M of them, in one pass instead of a gather and a copy);
    scattered rows of ``dst`` are assigned through their index."""
    if type(dix) is tuple and all(isinstance(x, slice) or x is Ellipsis for x in dix):
        copy_into(dst[dix], src, six)
    else:
        dst[dix] = read(src, six)


def reads_own_in_place(
    op: Fetch, p: int, ops: Sequence[Any], leaves: Mapping[int, EntryLeaves], own: Held
) -> bool:
    """Whether processor ``p``'s fetch ``op`` may leave its own rows out of the buffer,
    every leaf of its program reading them from its owned block ``own`` instead
    (:meth:`EntryLeaves.read_own`, told here where each buffer row's own row lies, by
    :func:`copy_piece` itself, the rule that would have copied it). Only a vector's one
    fetch in a program whose every Compute is a leaf over stored entries; decided once per
    plan, a "yes" leaves the leaves reading in place for every later run of it."""
    if op.box is None or op.view:
        return False
    pieces = [piece for src, piece in op.pieces if src == p]
    arr, origin = own
    if not pieces or arr.ndim != 1 or len(shape(op.box)) != 1:
        return False
    if sum(1 for o in ops if isinstance(o, Fetch) and o.tensor == op.tensor) != 1:
        return False
    computes = [o for o in ops if isinstance(o, Compute)]
    if not computes or any(c.work is None or id(c) not in leaves for c in computes):
        return False

    def put(dst: np.ndarray, ids: np.ndarray) -> None:
        for piece in pieces:
            copy_piece(dst, where(piece, op.box), ids, where(piece, origin))

    probe = probe_rows(shape(op.box)[0], arr.shape[0], put)
    done: list[EntryLeaves] = []
    for c in computes:
        if not leaves[id(c)].read_own(op.tensor, probe, arr.shape[0]):
            for lv in done:
                lv.read_own(op.tensor, None)
            return False
        done.append(leaves[id(c)])
    return True


def stores_once(ops: Sequence[Any]) -> bool:
    """Whether a processor's program leaves its owned output block as its one Compute, a
    leaf over stored entries, wrote it: nothing is added into it afterwards (no partial
    sums flushed, received or combined, no finished block received). A dot product with
    the block taken as the leaf stores it (:attr:`Store.dot_with`) is then the block's."""
    computes = [o for o in ops if isinstance(o, Compute)]
    return (
        len(computes) == 1
        and computes[0].work is not None
        and not any(isinstance(o, Flush | Reduce | Combine | RecvFinal) for o in ops)
    )


def add_at(arr: np.ndarray, ix: Any, value: np.ndarray) -> None:
    """``arr`` at ``ix`` (from :func:`where`) ``+= value``."""
    if type(ix) is Location:
        ix.add(arr, value)
    else:
        arr[ix] += value


class Store:
    """What processor ``p`` holds, and its output accumulation."""

    def __init__(self, p: int, output: str, out_dtype: Any) -> None:
        self.p = p
        self.output = output
        self.out_dtype = out_dtype
        self.owned: dict[str, Held] = {}
        self.buffers: dict[str, Held] = {}
        self.next: dict[str, Held | None] = {}
        self.partial: Held | None = None
        self.direct = False  # the partial "buffer" is the owned output block
        self.open_box: Region | None = None  # direct: the part of the owned block opened
        self.flushed = False
        self.fresh = False  # the partial buffer is still all zeros (leaf kernels may store)
        self.own_fresh = True  # the owned output block is still all zeros
        #: the owned output block is a view of a result not zeroed yet: zeroed at first use
        #: (:meth:`own_output`), in the thread of the processor that owns it
        self.own_dirty = False
        #: a sparse input's column indices of this processor's entries, in the caller's own
        #: array, by tensor: a leaf over stored entries may stream them instead of its copy
        self.crd: dict[str, np.ndarray] = {}
        #: dense inputs the caller gave whole (C-contiguous, of their dtype), by tensor
        self.whole: dict[str, np.ndarray] = {}
        #: owned blocks of vectors whose fetch buffers leave out this processor's rows,
        #: which its leaves read here instead (:func:`reads_own_in_place`), by tensor
        self.own_reads: dict[str, np.ndarray] = {}
        #: a dense input whose owned block has the output's rows (CG's ``p`` in ``A @ p``),
        #: set by a runtime where :func:`stores_once` holds: the leaf that stores the
        #: owned output block also returns its dot product with that block
        #: (``dot_partial``), which the caller would otherwise compute in a pass of its own
        self.dot_with: str | None = None
        self.dot_partial: float | None = None
        self.inbox: list[Held] = []  # partial sums received this step, for the owned block
        self.combined: list[Held] = []  # children's partial sums this step (routing)

    def swap(self) -> None:
        """Buffers prefetched for the next step replace the current ones."""
        for name, b in self.next.items():
            if b is None:
                self.buffers.pop(name, None)
            else:
                self.buffers[name] = b
        self.next = {}

    def fetch_buffer(self, op: Fetch, dtype: Any) -> np.ndarray | None:
        """Start fetch ``op``: nothing to hold, or a view of an owned block (both done here,
        ``None`` returned), or a new buffer for the pieces, which the runtime fills its way
        (and which is already the next step's buffer for ``op.tensor``)."""
        if op.box is None:
            self.next[op.tensor] = None
            return None
        if op.view:
            own, origin = self.owned[op.tensor]
            self.next[op.tensor] = (read(own, where(op.box, origin)), op.box)
            return None
        buf = self._new_buffer(shape(op.box), dtype)
        self.next[op.tensor] = (buf, op.box)
        return buf

    def _new_buffer(self, box_shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialized fetch buffer (a runtime may hand out one an earlier run let go)."""
        return np.empty(box_shape, dtype)

    def held_words(self) -> int:
        """Elements held now, by the plan's memory model (views of own blocks are free)."""
        total = sum(a.size for a, _ in self.owned.values())
        total += sum(a.size for a, _ in self.buffers.values() if a.base is None)
        total += sum(b[0].size for b in self.next.values() if b is not None and b[0].base is None)
        if self.partial is not None and not self.direct:
            total += self.partial[0].size
        return total + sum(a.size for a, _ in self.inbox) + sum(a.size for a, _ in self.combined)

    def own_output(self) -> Held:
        """The owned output block, zeroed first where it is still dirty."""
        held = self.owned[self.output]
        if self.own_dirty:
            held[0].fill(0)
            self.own_dirty = False
        return held

    def clean_partial(self) -> Held:
        """The partial buffer, zeroed first where it is the owned block still dirty."""
        if self.direct:
            self.own_output()
        return self.partial  # type: ignore[return-value]

    def open_output(self, op: OpenOutput) -> None:
        """Start accumulating ``op.box``: into the owned block, or a zeroed buffer."""
        self.open_box = op.box if op.direct else None
        if op.direct:
            # a dirty owned block is zeroed by the first thing that writes into it, or not
            # at all where that is a leaf writing every element of it (:meth:`compute`)
            held = self.owned[self.output]
            self.partial, self.direct, self.fresh = held, True, self.own_fresh
        else:
            arr = np.zeros(shape(op.box), self.out_dtype)
            self.partial, self.direct, self.fresh = (arr, op.box), False, True

    def compute(
        self, op: Compute, kernels: tuple[TermKernel, ...], leaves: EntryLeaves | None = None
    ) -> int:
        """Run the leaf over every box of ``op`` (or, for a leaf over stored entries, the
        prepared ``leaves``); returns the iterations executed."""
        out, origin = self.partial  # type: ignore[misc]
        if op.work is not None:
            assert leaves is not None
            w = op.work
            # the part of the output buffer (or, direct, of the owned block) the step adds
            # into, and the parts of buffers held over every step that it reads
            target = w.out_view if w.out_view is not None else self.open_box
            if target is not None and target is not origin:
                out = read(out, where(target, origin))
            bufs = self.buffers
            if w.views:
                bufs = dict(bufs)
                for name, v in w.views:
                    arr, region = bufs[name]
                    bufs[name] = (read(arr, where(v, region)), v)
            store = False
            if self.direct and self.own_dirty:
                store = out.size == self.partial[0].size and leaves.covers(out)
                if store:
                    self.own_dirty = False
                else:
                    self.own_output()
            w = self._dot_vector(out) if store else None
            dots: list[float] = []
            done = leaves(
                out, bufs, self.crd, self.whole, store, own=self.own_reads, dot_with=w, dots=dots
            )
            if w is not None and dots:
                self.dot_partial = dots[0]
            self.fresh = False
            self.own_fresh = self.own_fresh and not self.direct
            return done
        if self.direct:
            one = len(op.boxes) == 1
            if self.own_dirty and self.fresh and one and stores_all(kernels, op.boxes[0], origin):
                self.own_dirty = False  # the leaf writes every element: no zeroing pass
            else:
                self.own_output()  # zeroed if still dirty
        done = 0
        for box in op.boxes:
            run_leaf(kernels, box, self.buffers, out, origin, self.fresh)
            self.fresh = False
            self.own_fresh = self.own_fresh and not self.direct
            done += box_volume(box)
        return done

    def _dot_vector(self, out: np.ndarray) -> np.ndarray | None:
        """The owned block of :attr:`dot_with` where ``out`` is this processor's whole owned
        output block and that block holds the same rows, flat; else None."""
        if self.dot_with is None or not self.direct:
            return None
        held, mine = self.owned.get(self.dot_with), self.owned.get(self.output)
        if held is None or mine is None or held[1] != mine[1] or out.size != mine[0].size:
            return None
        w = held[0]
        if w.ndim != 1 or not compiled_dot(w, mine[0].reshape(-1)):
            return None  # (numpy's dot adds in another order: the set's pass computes it)
        return w

    def combine(self) -> None:
        """Add the children's partial sums (received for this step) into the buffer."""
        arr, origin = self.clean_partial()
        for part, box in self.combined:
            add_at(arr, where(box, origin), part)

    def flush_local(self, op: Flush) -> Held:
        """Add ``op.local`` pieces into the owned block; returns the buffer to send from."""
        arr, origin = self.clean_partial()
        for box in op.local:
            own, oorigin = self.own_output()
            add_at(own, where(box, oorigin), read(arr, where(box, origin)))
            self.own_fresh = False
        self.flushed = True
        return arr, origin

    def reduce_inbox(self) -> int:
        """Add the partial sums received this step into the owned block; returns words."""
        if not self.inbox:
            return 0
        own, origin = self.own_output()
        for arr, box in self.inbox:
            add_at(own, where(box, origin), arr)
        self.own_fresh = False
        words = sum(a.size for a, _ in self.inbox)
        self.inbox.clear()
        return words

    def end_step(self) -> None:
        """Release what the step used: combined pieces and a flushed buffer."""
        self.combined.clear()
        if self.flushed:
            self.partial, self.flushed = None, False
