"""The ``"mpi"`` runtime: one MPI rank per processor, every rank running the same program.

Each rank runs its own program (``exe.program(rank)``), so ``kernel.run`` hands it an
executable of that program only (:meth:`MPIRuntime.processors`). Options: ``comm`` (the
communicator, default ``MPI.COMM_WORLD``), ``gather`` (``"all"``, ``"root"`` or ``"none"``),
``trace`` and ``fault`` (testing only: ``(rank, step)`` raises there).

A value a session holds is this rank's block of it (:class:`HeldBlock`); kernels read held
values as block sources over the rank's block, a redistribution runs the copy kernel, and
gathering one is a collective (every rank calls it and gets the whole value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from mpi4py import MPI

from distal.distribution.layout import Layout
from distal.errors import InputError, InternalError, RuntimeFailure
from distal.runtime.base import Runtime
from distal.runtime.checkpoint import WriteFailed
from distal.runtime.executable import Executable
from distal.runtime.local_runtime import added, content
from distal.runtime.mpi.entry import fail_together, run
from distal.runtime.mpi.session import allgather_floats, allgather_objects, alltoall_objects
from distal.runtime.result import Result
from distal.runtime.source import check_source, is_block_source, read_block
from distal.typing import Box, box_contains, box_index, box_intersect, box_is_empty, box_shape


@dataclass
class HeldBlock:
    """One rank's block of a held value, read as a block source by the next kernel.

    It serves exactly the boxes inside the block it holds: what a kernel whose layout
    agrees with the value's reads.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    box: Box | None
    array: np.ndarray | None

    def read_block(self, box: Box) -> np.ndarray:
        box = tuple((int(lo), int(hi)) for lo, hi in box)
        if self.box is None or self.array is None or not box_contains(self.box, box):
            raise InternalError(
                f"a held block {self.box} was asked for box {box}, which it does not hold"
            )
        return self.array[box_index(box, self.box)]


class MPIRuntime(Runtime):
    """Runs this rank's program of an executable (see the module docstring)."""

    name = "mpi"
    extra = "mpi"
    options: ClassVar[tuple[str, ...]] = ("comm", "gather", "trace", "fault")
    in_process = True
    leaf_dot = True
    collective = True

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        comm = self.opts.get("comm")
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.nranks = self.comm.Get_rank(), self.comm.Get_size()

    def machine_size(self, requested: int | None) -> int:
        if requested is not None and requested != self.nranks:
            raise InputError(
                f"the machine has {requested} processors but the MPI session runs on "
                f"{self.nranks} ranks"
            )
        return self.nranks

    def processors(self, nprocs: int) -> tuple[int, ...] | None:
        # a rank past the machine is refused by the run's size check, which every rank takes
        # part in (so none is left waiting); it is handed the last processor's program to
        # get there
        return (min(self.rank, nprocs - 1),)

    def abort(self, error: BaseException) -> None:
        if isinstance(error, Exception):
            fail_together(error, self.comm)  # (raises it, as every rank raises together)

    def execute(
        self,
        exe: Executable,
        inputs: Mapping[str, Any],
        *,
        keep: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        opts = {**self.opts, "comm": self.comm}
        kept = keep and exe.output.is_dense  # (a sparse output comes back whole on every rank)
        if kept:
            # the output stays in its blocks (a sparse kernel's dense result too: an SpMV's
            # vector is not gathered onto every rank, which cost more than its product)
            opts["gather"] = "none"
        res = run(exe, inputs, dot_with=dot_with, **opts)
        if kept:
            out = exe.output
            box = exe.layout(out.name).boxes[self.rank]
            arr = None if box is None else res.blocks.get(box)
            if box is not None and arr is None:
                raise InternalError(
                    f"rank {self.rank} holds the blocks {list(res.blocks)} of {out.name!r}, "
                    f"not its layout's {box}"
                )
            res.value = HeldBlock(out.shape, out.dtype, box, arr)
        return res

    # -- held values: this rank's block ------------------------------------------------------

    def place(self, name: str, value: Any, layout: Layout) -> Any:
        if is_block_source(value):
            check_source(name, value, layout.shape)
        dtype = np.dtype(getattr(value, "dtype", np.float64))
        box = layout.boxes[self.rank]
        arr = None if box is None else read_block(name, value, box, dtype)
        return HeldBlock(layout.shape, dtype, box, arr)

    def move(self, held: Any, source: Layout, target: Layout, copy: Executable) -> Any:
        opts = {**self.opts, "comm": self.comm, "gather": "none"}
        res = run(copy, {copy.inputs[0].name: held}, **opts)
        box = target.boxes[self.rank]
        arr = None
        if box is not None:
            blocks = list(res.blocks.values())
            # (the copy's output has a trailing extent-1 dimension per replicating machine
            # dimension: this rank's block is the target box reshaped)
            arr = (
                np.ascontiguousarray(blocks[0]).reshape(box_shape(box))
                if blocks
                else np.zeros(box_shape(box), copy.output.dtype)
            )
        return HeldBlock(target.shape, held.dtype, box, arr)

    def gather(self, name: str, held: Any, layout: Layout | None) -> np.ndarray:
        if layout is None or not isinstance(held, HeldBlock):
            shape = tuple(int(n) for n in held.shape)
            whole = tuple((0, n) for n in shape)
            return read_block(name, held, whole, np.dtype(getattr(held, "dtype", np.float64)))
        whole = tuple((0, n) for n in held.shape)
        if held.array is not None and all(b == whole for b in layout.boxes):
            # replicated (every rank decides the same from the layout): no exchange
            return np.array(held.array)
        mine = [(box, held.array) for box, p in layout.blocks if p == self.rank]
        out = np.zeros(held.shape, held.dtype)
        for part in allgather_objects(mine, self.comm):
            for box, arr in part:
                out[box_index(box, whole)] = arr
        return out

    def map(
        self, fn: Any, operands: Sequence[tuple[Any, Layout]], target: Layout, dtype: Any
    ) -> Any:
        box = target.boxes[self.rank]
        arr = None
        if box is not None:
            arr = np.asarray(fn([_array(x) for x, _ in operands]), dtype=dtype)
        return HeldBlock(target.shape, np.dtype(dtype), box, arr)

    def blocks(
        self,
        fn: Any,
        operands: Sequence[tuple[Any, Layout]],
        needs: Mapping[int, Sequence[Any]],
        work: Sequence[tuple[Box, int]],
        target: Layout,
        dtype: Any,
        combine: Any = None,
    ) -> Any:
        """Each rank its own unit: the pieces of the boxes it reads that other ranks hold come
        in one all-to-all (each block from the rank holding it, or from this rank where it
        holds that block too); partials are all-gathered and combined on every rank alike."""
        rank, size = self.rank, self.comm.Get_size()
        layouts = [lay for _, lay in operands]
        held = [x for x, _ in operands]
        sends: list[list[tuple[int, Box, np.ndarray]]] = [[] for _ in range(size)]
        for q in range(size):
            if q == rank or q not in needs:
                continue
            for k, (lay, need) in enumerate(zip(layouts, needs[q], strict=True)):
                if need is None:
                    continue
                for b, src in _sources(lay, q):
                    piece = box_intersect(b, need) if need else ()
                    if src != rank or (piece and box_is_empty(piece)):
                        continue
                    block = np.ascontiguousarray(held[k].read_block(piece))
                    sends[q].append((k, piece, block))
        got = alltoall_objects(sends, self.comm)
        mine = [u for u in work if u[1] == rank]
        result: Any = None
        if mine:
            box = mine[0][0]
            arrays: list[Any] = []
            for k, (lay, need) in enumerate(zip(layouts, needs[rank], strict=True)):
                if need is None:
                    arrays.append(None)
                    continue
                buf = np.empty(box_shape(need) if need else (), held[k].dtype)
                for b, src in _sources(lay, rank):
                    piece = box_intersect(b, need) if need else ()
                    if src == rank and not (piece and box_is_empty(piece)):
                        buf[box_index(piece, need)] = held[k].read_block(piece)
                for part in got:
                    for kk, piece, arr in part:
                        if kk == k:
                            buf[box_index(piece, need)] = arr
                arrays.append(buf)
            result = fn(arrays, box)
        shape = target.shape
        if combine is not None:
            parts = allgather_objects([] if result is None else [result], self.comm)
            value = np.asarray(combine([x for r in parts for x in r]), dtype=dtype)
            whole = tuple((0, n) for n in shape)
            return HeldBlock(shape, np.dtype(dtype), whole, value)
        box = target.boxes[rank]
        arr = None
        if box is not None:
            arr = np.asarray(result, dtype=dtype) if mine else np.empty(box_shape(box), dtype)
        return HeldBlock(shape, np.dtype(dtype), box, arr)

    def fused(
        self,
        fn: Any,
        nslots: int,
        operands: Sequence[tuple[int, Any, Layout]],
        elems: Sequence[np.dtype],
        sums: Sequence[np.dtype],
        target: Layout,
        *,
        donate: Sequence[tuple[int, int]] = (),
        dot: Any = None,
    ) -> tuple[list[Any], list[Any], bool]:
        shape = target.shape
        box = target.boxes[self.rank]
        slots: list[Any] = [None] * nslots
        for k, x, _ in operands:
            slots[k] = _array(x)
        used = False
        if box is None:
            got: list[Any] = [None] * len(elems)
            partials: list[list[Any]] = [[] for _ in sums]
        elif dot is not None and not elems and len(sums) == 1:
            got, partials, used = [], [[np.float64(dot)]], True
        else:
            got, partials = fn(slots, [(0, box[0][1] - box[0][0])], box_shape(box), None, donate)
        if sums:  # (no reduction: no collective, no wait)
            partials = _gather_partials(partials, sums, self.comm)
        members = [
            HeldBlock(shape, d, box, None if a is None else np.asarray(a, dtype=d))
            for a, d in zip(got, elems, strict=True)
        ]
        return members, [added(p, d) for p, d in zip(partials, sums, strict=True)], used

    def own_block(self, held: Any) -> np.ndarray | None:
        return held.array if isinstance(held, HeldBlock) else None

    # -- saving: each rank its own blocks, then one collective ------------------------------------

    def block_of(self, held: Any, layout: Layout | None, box: Box, p: int) -> Any:
        if layout is not None and p != self.rank:
            return None
        if isinstance(held, HeldBlock):
            return held.read_block(box)
        return read_block("kept value", held, box, np.dtype(getattr(held, "dtype", np.float64)))

    def save_blocks(
        self, store: Any, todo: Sequence[tuple[str, int, Any]], wanted: bool
    ) -> list[tuple[str, int, str, str | None]]:
        # a rank that cannot write its entries says so in the same collective, so every
        # rank raises together instead of the others waiting for it
        try:
            digests = store.save_many([(f"{v}.{k}", a) for v, k, a in todo])
            mine: Any = [
                (v, k, d, content(a, wanted)) for (v, k, a), d in zip(todo, digests, strict=True)
            ]
        except (OSError, RuntimeFailure) as e:
            mine = f"rank {self.rank}: {type(e).__name__}: {e}"
        parts = allgather_objects(mine, self.comm)
        failed = [p for p in parts if isinstance(p, str)]
        if failed:
            raise WriteFailed(f"checkpoint entries could not be written ({failed[0]})")
        return [x for part in parts for x in part]

    def agree(self, ok: bool) -> bool:
        return all(allgather_objects(bool(ok), self.comm))


def _array(x: Any) -> Any:
    """An operand's block here: a held block's array, or a 0-d value held whole."""
    return x.array if isinstance(x, HeldBlock) else x


def _gather_partials(
    partials: list[list[Any]], sums: Sequence[np.dtype], comm: Any
) -> list[list[Any]]:
    """Every rank's partial sums of a fused set's reductions (each rank has one block or
    none), in rank order: float64 sums in one row of floats per rank (exact: no rounding in
    a float64's trip), others pickled."""
    if all(d == np.float64 for d in sums) and all(len(p) <= 1 for p in partials):
        has = bool(partials and partials[0])
        row = np.zeros(1 + len(sums), np.float64)
        if has:
            row[0] = 1.0
            row[1:] = [p[0] for p in partials]
        table = allgather_floats(row, comm)
        return [
            [table[r, 1 + j] for r in range(table.shape[0]) if table[r, 0]]
            for j in range(len(sums))
        ]
    ranks = allgather_objects(partials, comm)
    return [[x for r in ranks for x in r[j]] for j in range(len(sums))]


__all__ = ["HeldBlock", "MPIRuntime"]


def _sources(lay: Layout, p: int) -> list[tuple[Box, int]]:
    """The distinct blocks of ``lay`` and the processor ``p`` reads each from: itself where
    it holds that block, else its lowest holder."""
    own = lay.boxes[p]
    return [(b, p if own == b else q) for b, q in lay.blocks]
