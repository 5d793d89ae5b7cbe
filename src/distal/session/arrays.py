"""The session's side of the arrays front: handles, maps, fused sets and 0-d operations.

:class:`ArraysSession` is the part of :class:`distal.Session` the arrays front
(:mod:`distal.arrays`) talks to, through public methods only: ``arrays_program``,
``map_blocks``, ``fused_blocks``, ``scalar_op``, ``run_named``, ``read``, ``transposed``,
``runtime_errors`` and ``values``. Each operation places or redistributes its operands to
the layouts it reads them in (what moves is counted in ``moved_words``, as for a kernel's
inputs) and hands the blocks to the session's runtime (:class:`~distal.runtime.base.Runtime`),
which computes where its values are held; the session never asks which runtime it has.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from distal.arrays.darray import DArray
from distal.arrays.graph import Value
from distal.arrays.lower import choose_split, held_dist, made_by_a_pass
from distal.arrays.program import Program
from distal.distribution.layout import Layout, layout_for
from distal.distribution.machine import Machine
from distal.errors import InputError
from distal.session.held import (
    INTERNAL,
    Held,
    as_held_sparse,
    is_sparse,
    session_machine,
    sparse_split,
)
from distal.typing import Box, box_intersect, box_is_empty, box_shape


class ArraysSession:
    """The arrays front's interface of a session (see the module docstring); the session
    gives ``rt``, ``values``, ``machine``, ``checkpoint``, ``put``, ``flush`` and ``_input``."""

    rt: Any
    values: dict[str, Held]
    machine: Machine
    checkpoint: Any
    moved_words: int

    def _start_arrays(self) -> None:
        self._programs: dict[int, Program] = {}  # the arrays programs, by processor count
        self._machines: dict[int, Machine] = {}  # lines of processors, by count
        self._hidden = itertools.count()
        #: of the kernels run, the maps (numpy over each process's blocks: no plan)
        self.maps_run = 0
        #: this process's part of a dot product the last run's leaf computed (``dot_with``)
        self._leaf_dot: float | None = None
        #: fused reductions taken from a product's leaf instead of a pass of their own
        self.leaf_dots = 0

    # -- programs and handles -----------------------------------------------------------------

    def arrays_program(self, machine: Any = None) -> Program:
        """The arrays program over ``machine`` (a line of its processors; default the
        session's), made on first use: arrays on other machines are ``asarray(...,
        machine=)``."""
        p = (self.machine if machine is None else session_machine(self, machine)).size
        if p not in self._programs:
            self._programs[p] = Program(self, p)
        return self._programs[p]

    @property
    def compiles(self) -> int:
        """Kernels the session's arrays programs have compiled (a loop's second iteration
        compiles nothing)."""
        return sum(p.compiles for p in self._programs.values())

    def flush(self) -> None:
        """Evaluate every pending array operation (see :mod:`distal.arrays.program`)."""
        with self.rt.errors():
            for program in list(self._programs.values()):
                program.flush()

    def runtime_errors(self) -> Any:
        """A context turning the runtime's connection failures into ``DistalError``s (a lost
        Dask scheduler: ``PoolLost``)."""
        return self.rt.errors()

    def __getitem__(self, name: str) -> Any:
        """A ``dl.DArray`` over value ``name``; it keeps reading that value even after
        ``name`` is bound to another one."""
        return self.array(name)

    def array(self, name: str, *, machine: Any = None) -> Any:
        """``sess[name]`` on ``machine`` (a ``dl.Machine`` or a count; default the
        session's): a ``dl.DArray`` over value ``name`` whose operations are spread over
        that machine's processors. It is the name's one handle while the binding holds (an
        in-place update through it updates the name); a name bound to a DArray not computed
        yet reads that DArray's recorded value (nothing runs)."""
        program = self.arrays_program(machine)
        h = program.handle_of(name)
        if h is None:
            if self._bound_anywhere(name):
                self.flush()  # bound through another machine's program: computed first
            node = self._hidden_value(self._held(name), None, program.nprocs)
            h = DArray(self, node, program)
            program.remember(name, h)
        return h

    def _bound_anywhere(self, name: str) -> bool:
        """Whether ``name``'s handle holds a binding or an update not computed yet."""
        return any(name in p.dirty for p in self._programs.values())

    def __setitem__(self, name: str, value: Any) -> None:
        """Bind ``name`` to a value: a ``DArray`` (recorded: computed at the next flush with
        whatever else is pending, fused with it, as a local variable would be), a numpy
        array, or a scipy / pydata sparse array or ``dl.SparseArray``."""
        if not isinstance(name, str) or not name:
            raise InputError(f"a session value needs a tensor name, got {name!r}")
        if isinstance(value, DArray):
            if value.session is not self:
                raise InputError(f"value {name!r}: a DArray of another session")
            for p in self._programs.values():
                if p is not value.program:
                    p.forget(name)
            value.program.bind(name, DArray(self, value.node, value.program))
            return
        self.flush()
        self.put(name, as_held_sparse(value))

    def asarray(self, value: Any, dist: str | None = None, *, machine: Any = None) -> Any:
        """An unnamed ``dl.DArray`` over ``value`` (an array, a sparse array, or a DArray of
        this session, returned as it is). ``dist``: a distribution string over the machine
        to place it by; otherwise the first kernel that reads it places it. For a sparse
        matrix ``dist`` says how ``A @ x`` cuts it: ``"xy -> x"`` by rows, ``"xy -> (xy)"``
        (the default) by stored entries. ``machine``: the machine the array (and what is
        computed from it) is spread over, when not the session's own."""
        program = self.arrays_program(machine)
        if isinstance(value, DArray):
            if value.session is not self:
                raise InputError("sess.asarray: a DArray of another session")
            if value.program is not program:
                raise InputError("sess.asarray: a DArray on another machine")
            return value
        name = f"_c{next(self._hidden)}"
        self.put(name, as_held_sparse(value))
        held = self.values.pop(name)
        split = None
        if is_sparse(held.data):
            split = sparse_split(dist)
        elif dist is not None and dist != "auto":
            self._place(name, held, dist, program.nprocs)
        return DArray(self, self._hidden_value(held, split, program.nprocs), program)

    def _hidden_value(self, held: Held, split: str | None = None, nprocs: int = 1) -> Any:
        """A program node reading ``held`` under a name of its own, dropped with the node
        (a sparse one cut as ``split`` says; without one, as the cost model chooses for
        ``nprocs`` processors: :func:`distal.arrays.lower.choose_split`, once per value)."""
        name = f"_v{next(self._hidden)}"
        self.values[name] = held
        sparse = None
        if is_sparse(held.data):
            sparse = f"csr/{split or self._chosen_split(held, nprocs)}"
        node = Value(tuple(held.shape), np.dtype(held.dtype), name, sparse)
        node.drop = self.values  # the value goes with the node
        return node

    def _chosen_split(self, held: Held, nprocs: int) -> str:
        """How ``A @ x`` cuts the sparse value ``held`` when no one said: the cost model's
        choice over the matrix's own pattern (stored entries for anything but a matrix)."""
        from distal.sparse.array import as_sparse

        got = held.splits.get(nprocs)
        if got is None:
            got = "nonzeros"
            if len(held.shape) == 2:
                got = choose_split(as_sparse(held.data, "csr", label="the sparse array"), nprocs)
            held.splits[nprocs] = got
        return got

    def transposed(self, node: Any) -> Any:
        """A program node over the transpose of the sparse value ``node`` reads (a CSR
        ``dl.SparseArray`` made once per held value, in this process: sparse values are
        held whole), cut as ``node`` is."""
        from distal.sparse.array import SparseArray, as_sparse

        held = self.values[node.name]
        t = held.transposed
        if t is None:
            a = as_sparse(held.data, "csr", label="the sparse array")
            t = SparseArray.from_scipy(a.to_scipy().T.tocsr(), "csr")
            t = held.transposed = Held(tuple(reversed(held.shape)), held.dtype, None, t)
        return self._hidden_value(t, node.sparse.split("/")[1])

    def _place(self, name: str, held: Held, dist: str, nprocs: int) -> None:
        """Give a value just put the layout ``dist`` over a line of ``nprocs`` processors
        (placing, not moving: not counted)."""
        target = layout_for(name, held.shape, dist, self._machine_of(nprocs))
        self.values[name] = held
        try:
            self._input(name, target)  # type: ignore[attr-defined]
        finally:
            self.values.pop(name)

    def _machine_of(self, nprocs: int) -> Machine:
        """A line of ``nprocs`` processors, made once per count (``Machine`` checks its
        arguments, a microsecond or two at every map otherwise)."""
        machine = self._machines.get(nprocs)
        if machine is None:
            machine = self._machines[nprocs] = Machine(nprocs)
        return machine

    # -- element-wise work --------------------------------------------------------------------

    def map_blocks(
        self,
        fn: Any,
        operands: Sequence[tuple[str, str]],
        out: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        dist: str,
        nprocs: int,
    ) -> None:
        """An element-wise map of the arrays program: ``fn`` (a
        :class:`~distal.kernels.passes.Pass`) over each processor's blocks of the operands
        ``(value name, distribution)``, kept as value ``out`` in ``dist``."""
        machine, ops = self._map_operands(operands, nprocs)
        target = layout_for(out, shape, dist, machine)
        self.values[out] = Held(shape, dtype, target, self.rt.map(fn, ops, target, dtype))
        self.kernels_run += 1  # type: ignore[attr-defined]
        self.maps_run += 1

    def _map_operands(
        self, operands: Sequence[tuple[str, str]], nprocs: int
    ) -> tuple[Machine, list[tuple[Any, Layout]]]:
        """A map's machine, and its operands ``(value name, distribution)`` placed or
        redistributed to their layouts, as ``(held data, layout)``."""
        machine = self._machine_of(nprocs)
        values = self.values
        out = []
        for v, d in operands:
            held = values[v]
            lay = layout_for(v, held.shape, d, machine)
            # an operand already in its layout (the common case in a loop) is read as it is
            out.append((held.data if held.layout is lay else self._input(v, lay), lay))  # type: ignore[attr-defined]
        return machine, out

    def fused_blocks(
        self,
        fn: Any,
        nslots: int,
        operands: Sequence[tuple[int, str, str]],
        outs: Sequence[tuple[str, tuple[int, ...], np.dtype]],
        shape: tuple[int, ...],
        nprocs: int,
        *,
        epilogue: bool = False,
        donate: Sequence[tuple[int, int]] = (),
        leaf_dot: bool = False,
    ) -> None:
        """A fused set of the arrays program (:meth:`~distal.arrays.program.Program._run_fused`):
        ``fn`` (a fused :class:`~distal.kernels.passes.Pass`) over each processor's blocks of
        the operands ``(slot, value name, distribution)`` computes the element-wise members,
        kept as values ``outs`` in blocks of their first axis, and each reduction's partial
        sums over the blocks, added in processor order into its 0-d value.

        ``epilogue``: the set reduces the result of the kernel run just before it, over that
        result's blocks where they lie, as part of that kernel's run (counted there).
        ``donate``: ``(member, slot)`` pairs, the program's word that nothing reads the
        slot's value after this set; where the session also finds nothing else holding its
        block (:meth:`_donatable`), the member may be written over that block in place.
        ``leaf_dot``: the set is the one reduction the epilogue's product was asked for
        (``dot_with``); where the product's leaf computed it, that is its partial sum.
        """
        machine, ops = self._map_operands([(v, d) for _, v, d in operands], nprocs)
        target = layout_for(outs[0][0], shape, held_dist(len(shape)), machine)
        elems = [(o, d) for o, s, d in outs if s]
        sums = [(o, d) for o, s, d in outs if not s]
        taken, self._leaf_dot = self._leaf_dot, None
        slots = [(k, x, lay) for (k, _, _), (x, lay) in zip(operands, ops, strict=True)]
        read = {k: (v, lay) for (k, v, _), (_, lay) in zip(operands, ops, strict=True)}
        given = [(j, k) for j, k in donate if k in read and self._donatable(*read[k])]
        members, totals, used = self.rt.fused(
            fn,
            nslots,
            slots,
            [d for _, d in elems],
            [d for _, d in sums],
            target,
            donate=given,
            dot=taken if leaf_dot else None,
        )
        self.leaf_dots += int(used)
        for (o, d), x in zip(elems, members, strict=True):
            self.values[o] = Held(shape, d, target, x)
        for (o, d), x in zip(sums, totals, strict=True):
            self.values[o] = Held((), d, None, x)
        if not epilogue:
            self.kernels_run += 1  # type: ignore[attr-defined]
            self.maps_run += 1

    def _donatable(self, name: str, layout: Layout) -> bool:
        """Whether value ``name``'s block here may be written over by a fused pass, given
        that the program reads it no more: a runtime holding values in this process, a
        session without a checkpoint (a writer thread may be saving any held block), a
        value the program named (no user name, not held under a second name), held in the
        layout the pass reads (its own block, not a redistributed copy), and a block a
        fused pass made (never a caller's array, a view of one, or a kernel's result)."""
        if not self.rt.in_process or self.checkpoint is not None:
            return False
        held = self.values.get(name)
        if held is None or held.layout is not layout or not INTERNAL.fullmatch(name):
            return False
        if sum(1 for h in self.values.values() if h is held) != 1:
            return False
        return made_by_a_pass(self.rt.own_block(held.data))

    def blockwise(
        self,
        fn: Any,
        slots: Sequence[str],
        needs: dict[int, list[Box | None]],
        work: Sequence[tuple[Box, int]],
        out: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        nprocs: int,
        combine: Any = None,
    ) -> None:
        """A block operation of the arrays program (:mod:`distal.arrays.blocks`): processor
        ``p``'s unit ``(box, p)`` of ``work`` computes ``fn`` (a ``"block"`` pass) of the boxes
        ``needs[p][k]`` of the held values ``slots`` (None: not read) and ``box``; the units'
        boxes of the result are held as value ``out`` in blocks of its first axis, or, with
        ``combine`` (a ``"combine"`` pass), the units' partials combined in processor order
        are held whole. What a processor reads and does not hold is counted in
        ``moved_words`` (from the boxes alone: the same on every process)."""
        machine = self._machine_of(nprocs)
        ops = []
        for name in slots:
            held = self.values[name]
            lay = held.layout
            if lay is None or lay.nprocs != machine.size:
                lay = layout_for(name, held.shape, held_dist(len(held.shape)), machine)
                ops.append((self._input(name, lay), lay))  # type: ignore[attr-defined]
            else:
                ops.append((held.data, lay))
        self.moved_words += _moved([lay for _, lay in ops], needs, work)
        dist = held_dist(len(shape)) if combine is None else _replicated(len(shape))
        target = layout_for(out, shape, dist, machine)
        value = self.rt.blocks(fn, ops, needs, work, target, dtype, combine)
        self.values[out] = Held(shape, np.dtype(dtype), target, value)
        self.kernels_run += 1  # type: ignore[attr-defined]
        self.maps_run += 1

    def scalar_op(
        self, fn: Any, args: Sequence[tuple[bool, Any]], out: str, dtype: np.dtype
    ) -> None:
        """Value ``out`` (0-d) = ``fn(*args)``; each arg ``(True, a held value's name)`` or
        ``(False, a constant)``: where the runtime holds the operands (a Dask worker), or
        here from the gathered operands."""
        got = self.rt.scalar(fn, [(r, self.values[a].data if r else a) for r, a in args], dtype)
        if got is not None:
            self.values[out] = Held((), np.dtype(dtype), None, got)
            return
        vals = [np.asarray(self.read(a)).reshape(()) if ref else a for ref, a in args]
        with np.errstate(all="ignore"):
            value = np.asarray(fn(*vals), dtype=dtype)
        self.put(out, value)  # type: ignore[attr-defined]

    def read(self, name: str) -> Any:  # pragma: no cover - Session defines it
        raise NotImplementedError


def _replicated(ndim: int) -> str:
    names = "abcdefghijklmnopqrstuvwxyz"[:ndim]
    return f"{names} -> *"


def _size(box: Box | None) -> int:
    if box is None:
        return 0
    return int(np.prod(box_shape(box), dtype=np.int64)) if box else 1


def _moved(
    layouts: list[Layout], needs: dict[int, list[Box | None]], work: Sequence[tuple[Box, int]]
) -> int:
    """Words the processors of ``work`` read (``needs``) and do not hold (``layouts``)."""
    words = 0
    for p in sorted({p for _, p in work}):
        for lay, need in zip(layouts, needs[p], strict=True):
            if need is None or (need and box_is_empty(need)):
                continue
            own = lay.boxes[p]
            have = 0 if own is None else _size(box_intersect(own, need) if need else ())
            words += _size(need) - have
    return words


__all__ = ["ArraysSession"]
