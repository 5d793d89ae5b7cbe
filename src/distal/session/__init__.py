"""Sessions: tensor values that stay distributed across kernel runs.

``dl.Session(runtime, **options)`` holds named values. ``run(kernel)`` takes every input of
the kernel that is not given from the session (by tensor name), runs the kernel on the
session's runtime and keeps its output, distributed, without gathering it. A held value
whose layout differs from the one the next kernel's tensor gives it is redistributed by a
copy kernel (:mod:`distal.session.redistribute`) that moves exactly the elements each
processor needs and does not hold; ``moved_words`` adds them up.

Where values live, by runtime:

* ``"local"``: every processor is in this process and a held value is one numpy array, of
  which each processor's block is a view (the local runtime assembles results in one
  array). Redistributing moves nothing in memory; its words are counted from the copy
  kernel's exact stats.
* ``"mpi"``: each rank holds only its own block of every value; kernels run with
  ``gather="none"`` and read held values as block sources over the rank's blocks; a
  redistribution runs the copy kernel on MPI.
* ``"dask"``: a dense value is held on the workers, as one Dask future per block of its
  layout (:class:`~distal.runtime.elastic.held.WorkerValue`): a value ``put`` is sent out
  block by block when first placed, a kernel's inputs are those futures (cut on the workers
  when the kernel reads other boxes), its output blocks stay where they were computed, and
  a redistribution cuts the blocks anew on the workers. A sparse value is held here and its
  stored values are sent once per distinct block the kernels read (kept in ``placed``).
  ``driver_words`` counts every element that comes back through the driver (``get``,
  ``float``); a chain of kernels that reads no value adds 0, and a checkpointed loop's
  blocks are written by the workers holding them. A session
  without ``client=`` starts its pool once and keeps it until :meth:`Session.close`.

Checkpointed loops (``checkpoint=`` and :meth:`Session.iterations`) are in
:mod:`distal.session.loops`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.arrays.darray import DArray
from distal.arrays.graph import Value
from distal.arrays.lower import choose_split, held_dist, made_by_a_pass
from distal.arrays.program import Program
from distal.casting import check_cast
from distal.distribution.machine import Machine
from distal.errors import InputError, InternalError, NotSupportedYet
from distal.runtime.result import Result
from distal.runtime.source import check_source, is_block_source, read_block
from distal.session.layout import Layout, layout_for, layout_of
from distal.session.redistribute import SRC, Copy, compile_copy
from distal.typing import Box, box_contains, box_index, box_shape

RUNTIMES = ("local", "mpi", "dask")


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


@dataclass(frozen=True)
class Inline:
    """A 0-d value held in this process, handed to a map's or fused set's tasks inside
    their arguments (a word) rather than placed on a worker first (a task of its own):
    ``part`` is the value, whatever the box."""

    array: np.ndarray

    def part(self, box: Box) -> np.ndarray:
        return self.array


@dataclass
class Held:
    """A value in the session: its layout (``None``: as ``put`` gave it, not placed yet)
    and its data (local / dask: the whole array; mpi: the put array or source, or this
    rank's :class:`HeldBlock`)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    layout: Layout | None
    data: Any
    #: a sparse value's transpose, made on first use by the arrays front (``A.T``)
    transposed: Any = None
    #: dask: the input blocks made from this value on the workers, kept for the next kernels
    placed: dict = field(default_factory=dict)
    #: a sparse value: how ``A @ x`` cuts it when no one said, by processor count
    splits: dict = field(default_factory=dict)


#: the options a session passes to every run, by runtime, beyond those the runtime itself
#: checks (see :func:`check_options`); names starting with ``_`` are the runtimes' test hooks
MPI_OPTIONS = ("comm", "trace")


def check_options(runtime: str, options: Mapping[str, Any]) -> None:
    """Refuse, when the session is made, runtime options its runs would refuse (an unknown
    name, or a bad value where the runtime checks values up front), and ``gather=``: a
    session decides what comes back itself (``sess.get``, ``sess.run(..., gather=True)``).

    Raises:
        InputError: naming the option and the valid ones.
    """
    if "gather" in options:
        raise InputError(
            "a session keeps its results where they were computed: do not pass gather= to "
            "Session (use sess.get(name), or sess.run(kernel, gather=True))"
        )
    if runtime == "local":
        from distal.kernel import _local_options

        _local_options(options)
    elif runtime == "mpi":
        unknown = sorted(k for k in options if k not in MPI_OPTIONS and not k.startswith("_"))
        if unknown:
            raise InputError(
                f"unknown option(s) {unknown} for the mpi runtime; valid options are "
                f"{list(MPI_OPTIONS)}"
            )
    else:
        from distal.runtime.elastic.options import Options

        Options.parse(options)


class Session:
    """Tensor values kept distributed across kernel runs (see the module docstring).

    Args:
        runtime: ``"local"`` (default), ``"mpi"`` or ``"dask"``, as for ``kernel.run``.
        checkpoint: a directory or fsspec URL for :meth:`iterations` (optional).
        machine: the machine the session's arrays are spread over (a ``dl.Machine``, used
            as a line of its processors, or a count; see :func:`session_machine`).
        check_stats: compare every kernel run's measured stats with the kernel's
            prediction (``stats_checked``, ``stats_differ``): what distal says it will move
            is what it moved.
        checkpoint_key: bytes, a secret (optional, needs ``checkpoint``): every saved
            iteration's manifest and entries are authenticated with it (a keyed MAC made
            in this process), and an iteration that fails authentication is passed over
            like a damaged one. The key stays in this process: it is not passed to the
            runs (the session's kernel runs write no checkpoint).
        fuse: run the arrays a flush computes over one shape, and the reductions reading
            them, as fused sets (the default); ``False`` runs every array's group by itself
            (to compare, or to have every element-wise group an index-notation kernel).
        **runtime_options: passed to every ``kernel.run`` (e.g. ``comm=`` for MPI,
            ``client=`` for Dask).
    """

    def __init__(
        self,
        runtime: str = "local",
        *,
        checkpoint: Any = None,
        checkpoint_key: bytes | None = None,
        machine: Any = None,
        check_stats: bool = False,
        fuse: bool = True,
        **runtime_options: Any,
    ) -> None:
        if runtime not in RUNTIMES:
            raise InputError(f"unknown runtime {runtime!r}; valid options are {list(RUNTIMES)}")
        check_options(runtime, runtime_options)
        if checkpoint is not None:
            from distal.runtime.checkpoint import check_location

            check_location(checkpoint)
        from distal.runtime.checkpoint_auth import Sealer, check_key

        key = check_key(checkpoint_key)
        if key is not None and checkpoint is None:
            raise InputError(
                "checkpoint_key authenticates saved iterations, and this session has no "
                "checkpoint=: pass checkpoint= a directory or URL too, or drop checkpoint_key"
            )
        #: the key's sealer (``checkpoint_key=``), or None; never sent to a run
        self.sealer: Sealer | None = Sealer(key) if key is not None else None
        if not isinstance(fuse, bool):
            raise InputError(f"fuse must be True or False, got {fuse!r}")
        self.fuse = fuse
        self.runtime = runtime
        self.options = dict(runtime_options)
        self.checkpoint = checkpoint
        self.moved_words = 0
        self.resumed_from: int | None = None
        #: ``(loop name, iteration)`` of every complete saved iteration a loop found damaged
        #: (an entry failing its checksum) and did not restore; see :meth:`summary`
        self.discarded: list[tuple[str, int]] = []
        self._writing: Any = None  # the iteration being written behind (session.loops)
        self._write_free_at = 0.0  # when the writer takes the next iteration
        self._unsaved: Any = None  # (loop, snapshot) of an iteration left while writing
        self.values: dict[str, Held] = {}
        self._copies: dict[tuple, Copy] = {}
        self.rank, self.nranks = 0, 1
        if runtime == "mpi":
            from distal.runtime.mpi.session import rank_size

            self.rank, self.nranks = rank_size(self.options.get("comm"))
        #: the machine the session's arrays are spread over (a line of its processors)
        self.machine = session_machine(self, machine)
        #: distributed kernels this session has executed (its arrays' and ``run``'s)
        self.kernels_run = 0
        #: of those, the maps (numpy over each process's blocks: no plan, no prediction)
        self.maps_run = 0
        #: dask with ``verify=``: map blocks, and cuts of held values (a kernel reading other
        #: boxes than a value is held in), computed twice on different workers and compared
        self.maps_checked = 0
        self.cuts_checked = 0
        #: with ``check_stats=True``: runs whose measured stats were compared with their
        #: kernel's prediction, and the kernels of those that differed
        self.check_stats = bool(check_stats)
        self.stats_checked = 0
        self.stats_differ: list[str] = []
        self._programs: dict[int, Any] = {}  # the arrays programs, by processor count
        self._machines: dict[int, Machine] = {}  # lines of processors, by count
        self._hidden = itertools.count()
        #: dask: elements of values that crossed between the driver and the workers after
        #: placement (``get``, ``float``, ``np.asarray``, a gathered result)
        self.driver_words = 0
        self._pool: Any = None  # dask: (client, what this session started and closes)
        self._closer: Any = None
        #: dask, ``verify="adaptive"``: the workers' streaks of verified results, kept for
        #: every run of the session (:mod:`distal.runtime.elastic.trust`)
        self.trust: Any = None
        #: dask: the workers a check or a majority caught in any run of the session; later
        #: runs give them no task
        self.excluded_workers: set[str] = set()
        #: dask with ``verify=``: the checks of element-wise blocks whose verdicts are read
        #: at the session's next operation (:meth:`_settle`), not before this one returns
        self._unsettled: list[Unsettled] = []
        #: this rank's part of a dot product the last MPI run's leaf computed (``dot_with``)
        self._leaf_dot: float | None = None
        #: fused reductions taken from a product's leaf instead of a pass of their own
        self.leaf_dots = 0
        self._pool_seen: tuple[float, set[str]] | None = None  # (when, workers): _pool_now
        #: dask with ``verify=``: kernel runs made again because a block they read failed
        #: its check after they started (the check was read once they had finished)
        self.runs_redone = 0
        if runtime == "dask" and self.options.get("verify") == "adaptive":
            from distal.runtime.elastic.trust import Trust

            self.trust = Trust()

    # -- the pool (dask) ----------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """``runtime="dask"``: the ``distributed.Client`` the session's values live behind
        (``client=``'s, or of the pool the session started on first use); None otherwise."""
        if self.runtime != "dask":
            return None
        if self._pool is None:
            from distal.runtime.dask import start_pool

            client, owned = start_pool(self.options)
            self._pool = client
            self.options["client"] = client
            self._closer = weakref.finalize(self, _close_all, owned)
        return self._pool

    def close(self) -> None:
        """Drop every value and close what the session started (a Dask pool without
        ``client=``); a pool given as ``client=`` stays open."""
        self.values.clear()
        for p in self._programs.values():
            for name in list(p.named):
                p.forget(name)
        self._unsettled = []
        if self._closer is not None:
            self._closer()
        self._pool = None

    def __enter__(self) -> Session:
        """The current session of ``distal.numpy`` inside the block (see
        :mod:`distal.arrays.current`)."""
        from distal.arrays.current import push

        push(self)
        return self

    def __exit__(self, *exc: object) -> None:
        from distal.arrays.current import pop

        pop(self)
        self.close()

    def _count_driver(self, n: int) -> None:
        self.driver_words += int(n)

    def holders(self, name: str) -> dict[Box, list[str]]:
        """``runtime="dask"``: the workers holding each block of value ``name`` now (empty
        for a value held in this process: not placed yet, or sparse)."""
        from distal.runtime.elastic.held import WorkerValue

        self.flush()
        self._settle()
        data = self._held(name).data
        return data.holders() if isinstance(data, WorkerValue) else {}

    # -- values ----------------------------------------------------------------------------

    def put(self, name: str, array: Any) -> None:
        """Give the session a value (a numpy array or a block source); it is placed per the
        distribution of the first kernel that reads it (not counted as moved words)."""
        if not isinstance(name, str) or not name:
            raise InputError(f"a session value needs a tensor name, got {name!r}")
        for p in self._programs.values():  # the name's handles read the old value on
            p.forget(name)
        if is_block_source(array):
            shape = tuple(int(n) for n in array.shape)
            dtype = np.dtype(getattr(array, "dtype", np.float64))
            if self.runtime != "mpi":  # one process holds it whole anyway
                whole = tuple((0, n) for n in shape)
                array = read_block(name, array, whole, dtype)
            self.values[name] = Held(shape, dtype, None, array)
            return
        if _is_sparse(array):  # held as given (read-only arrays): sparse kernels read it whole
            self.values[name] = Held(tuple(array.shape), np.dtype(array.dtype), None, array)
            return
        try:
            arr = np.array(array)  # a copy: the session's value never changes under the caller
        except Exception as e:
            raise InputError(f"value {name!r} cannot be read as an array: {e}") from e
        if arr.dtype.kind not in "biufc":
            raise InputError(f"value {name!r} has non-numeric dtype {arr.dtype}")
        self.values[name] = Held(arr.shape, arr.dtype, None, arr)

    def __contains__(self, name: object) -> bool:
        if name in self.values:
            return True
        return isinstance(name, str) and any(name in p.dirty for p in self._programs.values())

    def names(self) -> list[str]:
        """The names of the values held (not the arrays program's own: ``_a``, ``_c`` or
        ``_v`` and a number, the values behind unnamed DArrays)."""
        bound = {n for p in self._programs.values() for n in p.dirty}
        return sorted(n for n in {*self.values, *bound} if not _INTERNAL.fullmatch(n))

    def layout(self, name: str) -> Layout | None:
        """Where value ``name`` lives now (``None``: not placed yet)."""
        return self._held(name).layout

    def _held(self, name: str) -> Held:
        if self._programs and self._bound_anywhere(name):
            self.flush()  # the name's DArray is computed first
        try:
            return self.values[name]
        except KeyError:
            raise InputError(
                f"value {name!r} is not in the session; it holds {self.names()}"
            ) from None

    # -- arrays -----------------------------------------------------------------------------

    @property
    def _arrays(self) -> Any:
        """The arrays program (:mod:`distal.arrays.program`) over the session's machine."""
        return self._program_for(self.machine)

    def _program_for(self, machine: Any) -> Any:
        """The arrays program over ``machine`` (a line of its processors), made on first
        use: arrays on other machines than the session's are ``asarray(..., machine=)``."""
        p = session_machine(self, machine).size
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
        if self.runtime != "dask" or self._pool is None:  # no pool to lose: no context
            for program in list(self._programs.values()):
                program.flush()
            return
        with self._pool_errors():
            for program in list(self._programs.values()):
                program.flush()

    def _pool_errors(self) -> Any:
        """On Dask, a broken connection to the scheduler raised as ``PoolLost`` (see
        :func:`distal.runtime.dask.pool_errors`); elsewhere nothing."""
        if self.runtime != "dask" or self._pool is None:
            return contextlib.nullcontext()
        from distal.runtime.dask import pool_errors

        return pool_errors(self._pool)

    def __getitem__(self, name: str) -> Any:
        """A ``dl.DArray`` over value ``name``; it keeps reading that value even after
        ``name`` is bound to another one."""
        return self.array(name)

    def array(self, name: str, *, machine: Any = None) -> Any:
        """``sess[name]`` on ``machine`` (a ``dl.Machine`` or a count; default the
        session's): a ``dl.DArray`` over value ``name`` whose operations are spread over
        that machine's processors. A name bound to a DArray not computed yet reads that
        DArray's recorded value (nothing runs)."""
        program = self._program_for(self.machine if machine is None else machine)
        h = program.handle_of(name)
        if h is None:
            if any(name in p.dirty for p in self._programs.values()):
                self.flush()  # bound through another machine's program: computed first
            node = self._hidden_value(self._held(name), None, program.nprocs)
            h = DArray(self, node, program)
            program.remember(name, h)
        return h

    def _bound_anywhere(self, name: str) -> bool:
        """Whether ``name``'s handle holds an update not computed yet."""
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
        self.put(name, _as_held_sparse(value))

    def asarray(self, value: Any, dist: str | None = None, *, machine: Any = None) -> Any:
        """An unnamed ``dl.DArray`` over ``value`` (an array, a sparse array, or a DArray of
        this session, returned as it is). ``dist``: a distribution string over the machine
        to place it by; otherwise the first kernel that reads it places it. For a sparse
        matrix ``dist`` says how ``A @ x`` cuts it: ``"xy -> x"`` by rows, ``"xy -> (xy)"``
        (the default) by stored entries. ``machine``: the machine the array (and what is
        computed from it) is spread over, when not the session's own."""
        program = self._program_for(self.machine if machine is None else machine)
        if isinstance(value, DArray):
            if value.session is not self:
                raise InputError("sess.asarray: a DArray of another session")
            if value.program is not program:
                raise InputError("sess.asarray: a DArray on another machine")
            return value
        name = f"_c{next(self._hidden)}"
        self.put(name, _as_held_sparse(value))
        held = self.values.pop(name)
        split = None
        if _is_sparse(held.data):
            split = _sparse_split(dist)
        elif dist is not None and dist != "auto":
            self._place(name, held, dist, program.nprocs)
        return DArray(self, self._hidden_value(held, split, program.nprocs), program)

    def _map_blocks(
        self,
        fn: Any,
        operands: Sequence[tuple[str, str]],
        out: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        dist: str,
        nprocs: int,
    ) -> None:
        """An element-wise map of the arrays program: ``fn`` over each process's blocks of
        the operands ``(value name, distribution)``, kept as value ``out`` in ``dist``.

        Operands are first placed or redistributed to their distributions (what moves is
        counted in ``moved_words``, exactly as for a kernel's inputs); then on ``"mpi"``
        every rank maps the blocks it holds, and on ``"local"`` and ``"dask"`` (values held
        whole in this process) the whole arrays are mapped at once.
        """
        self._settle()  # (a map reads its operands' blocks: they must have passed)
        machine, layouts, data = self._map_operands(operands, nprocs)
        target = layout_for(out, shape, dist, machine)
        if self.runtime == "dask":
            self._map_on_workers(fn, layouts, data, out, shape, dtype, target)
        elif self.runtime == "mpi":
            box = target.boxes[self.rank]
            arrays = [b.array for b in data]
            arr = None if box is None else np.asarray(fn(arrays), dtype=dtype)
            self.values[out] = Held(shape, dtype, target, HeldBlock(shape, dtype, box, arr))
        else:
            value = np.asarray(fn(data), dtype=dtype)
            self.values[out] = Held(
                shape,
                dtype,
                target,
                np.broadcast_to(value, shape).copy() if value.shape != shape else value,
            )
        self.kernels_run += 1
        self.maps_run += 1

    def _map_operands(
        self, operands: Sequence[tuple[str, str]], nprocs: int
    ) -> tuple[Machine, list[Layout], list[Any]]:
        """A map's machine, and its operands ``(value name, distribution)`` placed or
        redistributed to their layouts (what moves is counted in ``moved_words``)."""
        machine = self._machines.get(nprocs)
        if machine is None:
            machine = self._machine_of(nprocs)
        values = self.values
        fast = self.runtime != "dask"  # (there a held array may still have to be placed)
        layouts = []
        data = []
        for v, d in operands:
            held = values[v]
            lay = layout_for(v, held.shape, d, machine)
            layouts.append(lay)
            if not fast and type(held.data) is np.ndarray and not held.shape:
                # a 0-d value here (a verified session's alpha): in the tasks' arguments
                data.append(Inline(held.data))
                continue
            # an operand already in its layout (the common case in a loop) is read as it is
            data.append(held.data if fast and held.layout is lay else self._input(v, lay))
        return machine, layouts, data

    def _fused_blocks(
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
        ``fn`` over each process's blocks of the operands ``(slot, value name, distribution)``
        computes the element-wise members, kept as values ``outs`` in blocks of their first
        axis, and each reduction's partial sums over the blocks, added in processor order into
        its 0-d value (replicated: on MPI every rank adds every rank's partial sums, the same
        on every rank; on Dask a task adds them on the workers).

        One map: operands are placed or redistributed first as for :meth:`_map_blocks`
        (aligned ones move nothing); the partial sums are the only words exchanged.
        ``epilogue``: the set reduces the result of the kernel run just before it, over that
        result's blocks where they lie, as part of that kernel's run (counted there).

        ``donate``: ``(member, slot)`` pairs, the program's word that nothing reads the
        slot's value after this set (no handle, no pending array); where the session also
        finds nothing else holding its block (:meth:`_donatable`), the member is written
        over that block in place instead of into another array.

        ``leaf_dot``: the set is the one reduction the epilogue's product was asked for
        (``dot_with``); where the product's leaf computed this rank's part of it, that is
        its partial sum, with the bits the set's pass gives, and the pass is not run.
        """
        self._settle()
        machine, layouts, data = self._map_operands([(v, d) for _, v, d in operands], nprocs)
        target = layout_for(outs[0][0], shape, held_dist(len(shape)), machine)
        elems = [(o, d) for o, s, d in outs if s]
        sums = [(o, d) for o, s, d in outs if not s]
        if self.runtime == "dask":
            self._fused_on_workers(fn, nslots, operands, layouts, data, elems, sums, shape, target)
        else:
            slots: list[Any] = [None] * nslots
            if self.runtime == "mpi":
                box = target.boxes[self.rank]
                arrays = [b.array for b in data]
                cuts = [] if box is None else [(0, box[0][1] - box[0][0])]
                bshape = shape if box is None else tuple(hi - lo for lo, hi in box)
            else:
                box, arrays = None, data
                cuts = [(b[0][0], b[0][1]) for b, _ in target.blocks]
                bshape = shape
            for (k, _, _), a in zip(operands, arrays, strict=True):
                slots[k] = a
            taken, self._leaf_dot = self._leaf_dot, None
            if self.runtime == "mpi" and box is None:
                got: list[Any] = [None] * len(elems)
                partials: list[list[Any]] = [[] for _ in sums]
            elif leaf_dot and taken is not None and not elems and len(sums) == 1:
                got, partials = [], [[np.float64(taken)]]
                self.leaf_dots += 1
            else:
                each = None
                if self.runtime == "local":
                    from distal.runtime.local import side_by_side as each
                read = {k: (v, lay) for (k, v, _), lay in zip(operands, layouts, strict=True)}
                given = [(j, k) for j, k in donate if k in read and self._donatable(*read[k])]
                got, partials = fn(slots, cuts, bshape, each, given)
            if self.runtime == "mpi" and sums:  # (no reduction: no collective, no wait)
                partials = _gather_partials(partials, sums, self.options.get("comm"))
            for (o, d), arr in zip(elems, got, strict=True):
                if self.runtime == "mpi":
                    a = None if arr is None else np.asarray(arr, dtype=d)
                    self.values[o] = Held(shape, d, target, HeldBlock(shape, d, box, a))
                else:
                    self.values[o] = Held(shape, d, target, np.asarray(arr, dtype=d))
            for (o, d), parts in zip(sums, partials, strict=True):
                total = parts[0]
                for x in parts[1:]:
                    total = total + x
                self.values[o] = Held((), d, None, np.asarray(total, dtype=d))
        if not epilogue:
            self.kernels_run += 1
            self.maps_run += 1

    def _donatable(self, name: str, layout: Layout) -> bool:
        """Whether value ``name``'s block here may be written over by a fused pass, given
        that the program reads it no more: a local or MPI session without a checkpoint (a
        writer thread may be saving any held block), a value the program named (no user
        name, not held under a second name), held in the layout the pass reads (its own
        block, not a redistributed copy), and a block a fused pass made (never a caller's
        array, a view of one, or a kernel's result)."""
        if self.runtime not in ("local", "mpi") or self.checkpoint is not None:
            return False
        held = self.values.get(name)
        if held is None or held.layout is not layout or not _INTERNAL.fullmatch(name):
            return False
        if sum(1 for h in self.values.values() if h is held) != 1:
            return False
        block = held.data.array if isinstance(held.data, HeldBlock) else held.data
        return made_by_a_pass(block)

    def _fused_on_workers(
        self,
        fn: Any,
        nslots: int,
        operands: Sequence[tuple[int, str, str]],
        layouts: Sequence[Layout],
        data: list[Any],
        elems: list[tuple[str, np.dtype]],
        sums: list[tuple[str, np.dtype]],
        shape: tuple[int, ...],
        target: Layout,
    ) -> None:
        """:meth:`_fused_blocks` on Dask: a task per distinct block of ``target`` over the
        operands' blocks of the processor holding it; each member's block picked from it,
        and a task per reduction adding the blocks' partial sums, all on the workers."""
        from distal.runtime.elastic.held import (
            WorkerValue,
            fused_block,
            fused_elem,
            fused_partials,
            fused_sum,
        )

        client = self.client
        where = [k for k, _, _ in operands]
        dtypes = [d for _, d in elems]
        results: dict[Box, Any] = {}
        jobs = []
        for box, p in target.blocks:
            parts = [x.part(lay.boxes[p]) for x, lay in zip(data, layouts, strict=True)]
            jobs.append((box, (fn, nslots, where, parts, box_shape(box), dtypes)))
        checked: list[list[Any]] | None = None
        if self.options.get("verify", 1) != 1:
            # each block computed on one trusted worker and again on another (under
            # "adaptive", as the trust draw says); the partial sums come here, checked
            # where the block was, and are added here as a verified 0-d operation is. A
            # set without sums is not waited for: its verdicts are read at the next
            # operation (see _settle)
            futures, checked = self._twice(
                [(fused_block, a) for _, a in jobs], partials=True, defer=not sums
            )
            results = {box: f for (box, _), f in zip(jobs, futures, strict=True)}
        else:
            for box, args in jobs:
                results[box] = client.submit(fused_block, *args, pure=False)
        values = []
        for j, (o, d) in enumerate(elems):
            blocks = {b: client.submit(fused_elem, r, j, pure=False) for b, r in results.items()}
            value = WorkerValue(shape, d, blocks, client, self._count_driver)
            values.append(value)
            self.values[o] = Held(shape, d, target, value)
        if checked is None and self._unsettled and self._unsettled[-1].repair is None:
            boxes = list(results)

            def repair(n: int, good: Any) -> None:
                for j, value in enumerate(values):
                    value.blocks[boxes[n]] = client.submit(fused_elem, good, j, pure=False)
                    value._cuts.clear()

            self._unsettled[-1].repair = repair
            return
        if checked is not None:
            for j, (o, d) in enumerate(sums):
                total = checked[0][j]
                for part in checked[1:]:
                    total = total + part[j]
                self._count_driver(len(checked))
                self.values[o] = Held((), d, None, np.asarray(total, dtype=d))
            return
        ordered = (
            [client.submit(fused_partials, r, pure=False) for r in results.values()] if sums else []
        )
        for j, (o, d) in enumerate(sums):
            f = client.submit(fused_sum, ordered, j, d, pure=False)
            value = WorkerValue((), d, {(): f}, client, self._count_driver)
            self.values[o] = Held((), d, None, value)

    def _blockwise(self, *args: Any, **kwargs: Any) -> None:
        """A block operation of the arrays front (:func:`distal.session.blocks.run_block`)."""
        from distal.session.blocks import run_block

        run_block(self, *args, **kwargs)

    def _machine_of(self, nprocs: int) -> Machine:
        """A line of ``nprocs`` processors, made once per count (``Machine`` checks its
        arguments, a microsecond or two at every map otherwise)."""
        machine = self._machines.get(nprocs)
        if machine is None:
            machine = self._machines[nprocs] = Machine(nprocs)
        return machine

    def _map_on_workers(
        self,
        fn: Any,
        layouts: Sequence[Layout],
        data: list[Any],
        out: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        target: Layout,
    ) -> None:
        """:meth:`_map_blocks` on Dask: one task per distinct block of ``target``, over the
        operands' blocks (``data`` in ``layouts``) of the processor that holds it, on the
        workers."""
        from distal.runtime.elastic.held import WorkerValue, map_block

        blocks: dict[Box, Any] = {}
        client = self.client
        if self.options.get("verify", 1) != 1:
            blocks = self._verified_map(fn, layouts, data, dtype, target)
        for box, p in () if blocks else target.blocks:  # each distinct block, its first processor
            parts = [x.part(lay.boxes[p]) for x, lay in zip(data, layouts, strict=True)]
            blocks[box] = client.submit(map_block, fn, parts, box_shape(box), dtype, pure=False)
        value = WorkerValue(shape, dtype, blocks, client, self._count_driver, self._cut_checker())
        self.values[out] = Held(shape, dtype, target, value)
        if self._unsettled and self._unsettled[-1].repair is None:  # (_verified_map's)
            boxes = list(blocks)

            def repair(n: int, good: Any) -> None:
                value.blocks[boxes[n]] = good
                value._cuts.clear()

            self._unsettled[-1].repair = repair

    def _verified_map(
        self,
        fn: Any,
        layouts: Sequence[Layout],
        data: list[Any],
        dtype: np.dtype,
        target: Layout,
    ) -> dict[Box, Any]:
        """:meth:`_map_on_workers` under ``verify=``: every block by :meth:`_twice`."""
        from distal.runtime.elastic.held import map_block

        jobs, boxes = [], []
        for box, p in target.blocks:
            parts = [x.part(lay.boxes[p]) for x, lay in zip(data, layouts, strict=True)]
            jobs.append((map_block, (fn, parts, box_shape(box), dtype)))
            boxes.append(box)
        return dict(zip(boxes, self._twice(jobs, defer=True), strict=True))

    def _cut_checker(self) -> Any:
        """``WorkerValue.checked`` for this session's held values: :meth:`_checked_cut`
        under ``verify=``, else None (cuts are plain tasks)."""
        return self._checked_cut if self.options.get("verify", 1) != 1 else None

    def _checked_cut(self, func: Any, args: tuple) -> Any:
        """How a held value's cut is made under ``verify=`` (``WorkerValue.checked``)."""
        return self._twice([(func, args)], cuts=True)[0]

    def _twice(
        self,
        jobs: Sequence[tuple[Any, tuple]],
        partials: bool = False,
        cuts: bool = False,
        defer: bool = False,
    ) -> Any:
        """Each job ``func(*args)`` (a map block, a cut of held blocks, a fused set's block)
        computed on one trusted worker and computed again and compared on another
        (:func:`~distal.runtime.elastic.held.recompute_agrees`: these do one operation per
        word they read, so nothing checks them for less); where the two disagree a third
        computes it and decides, the worker it contradicts is excluded from the session's
        later work (``excluded_workers``), and the result is the agreeing one. Only the
        verdicts (one boolean per job) come to the driver; the results stay on the
        workers, as futures. ``partials``: the jobs are fused sets' blocks, and each one's
        checked partial sums come to the driver too (``(futures, partials)``). Under
        ``verify="adaptive"`` a job goes to its second worker as the session's
        :class:`~distal.runtime.elastic.trust.Trust` draws for the computing worker, and
        each check lengthens or resets that worker's streak; the checked jobs are counted
        in ``maps_checked`` (``cuts_checked`` with ``cuts``).

        ``defer`` (jobs with no partial sums): the verdicts are not waited for here. The
        checks are left running (:class:`Unsettled`, whose ``repair`` the caller sets) and
        read by :meth:`_settle` at the session's next operation, before anything reads the
        results -- or, for a kernel run reading them where they lie, as soon as it has
        finished, which is then made again if one failed. A map's check thus runs beside
        the work that follows it instead of holding it up."""
        from distal.runtime.elastic.held import (
            check_many,
            fused_partials,
            partials_many,
            recompute_agrees,
            recompute_partials,
            same_result,
        )
        from distal.runtime.elastic.tasks import VerificationFailed

        client = self.client
        pool = sorted(self._pool_now() - self.excluded_workers)
        if len(pool) < 2:
            raise VerificationFailed(
                f"verify={self.options['verify']!r}: element-wise maps and cuts of held "
                f"values are checked on a second worker, and {len(pool)} trusted worker(s) "
                "are left"
            )
        runs: list[tuple] = []
        check = recompute_partials if partials else recompute_agrees
        trust = self.trust  # verify="adaptive": a trusted worker's block is checked sometimes
        pairs: dict[tuple[str, str], list[int]] = {}  # the checked jobs, by (a, b)
        for n, (func, args) in enumerate(jobs):
            a, b = pool[n % len(pool)], pool[(n + 1) % len(pool)]
            fa = client.submit(func, *args, **_on(a))
            if trust is None or trust.should_check(a):
                pairs.setdefault((a, b), []).append(n)
            runs.append((func, args, a, b, fa, None))
        # the checks worker b makes of worker a's blocks: one task (per-task costs in the
        # scheduler and workers were most of what checking cost); job n's verdict is
        # item i of its pair's list
        for (_, b), ns in pairs.items():
            items = [(runs[n][0], runs[n][1], runs[n][4]) for n in ns]
            fb = client.submit(check_many, check, items, **_on(b))
            for i, n in enumerate(ns):
                runs[n] = (*runs[n][:5], (fb, i))
        done = sum(len(ns) for ns in pairs.values())
        if cuts:
            self.cuts_checked += done
        else:
            self.maps_checked += done
        if defer:
            if done:
                self._unsettled.append(Unsettled(runs, pool, partials))
            futures = [r[4] for r in runs]
            return (futures, None) if partials else futures
        out: list[Any] = []
        sums: list[Any] = []
        # with partials, each block's partial sums from both workers: the checker's are
        # used only where they are the computing worker's too (a lying checker could
        # otherwise vouch for a correct block and hand in wrong sums of its own); a block
        # left unchecked (adaptive) has only the computing worker's. One task per worker
        # holding blocks, as for the checks.
        held_by: dict[str, list[int]] = {}
        for n, r in enumerate(runs):
            held_by.setdefault(r[2], []).append(n)
        claimed = (
            [client.submit(partials_many, [runs[n][4] for n in ns], **_on(a))
             for a, ns in held_by.items()]
            if partials else []
        )  # fmt: skip
        verdicts = _verdict_futures(runs)
        got_all = client.gather(verdicts + claimed)
        got_verdicts = dict(zip((f.key for f in verdicts), got_all[: len(verdicts)], strict=True))
        theirs: list[Any] = [None] * len(runs)
        if partials:
            for ns, part in zip(held_by.values(), got_all[len(verdicts) :], strict=True):
                for n, sums_n in zip(ns, part, strict=True):
                    theirs[n] = sums_n
        for n, run in enumerate(runs):
            a, fa, fb = run[2], run[4], run[5]
            if fb is None:
                out.append(fa)
                if partials:
                    sums.append(list(theirs[n]))
                continue
            got = got_verdicts[fb[0].key][fb[1]]
            good = got
            if partials:
                good = got[0] and same_result(([], list(theirs[n])), ([], got[1]))
            if good:
                if trust is not None:
                    trust.passed(a)
                out.append(fa)
                if partials:
                    sums.append(got[1])
                continue
            kept, fc, c = self._decide(run, pool)
            out.append(kept)
            if partials:  # the judge's own partials (it agreed with the result kept)
                sums.append(list(client.submit(fused_partials, fc, **_on(c)).result()))
        return (out, sums) if partials else out

    def _pool_now(self) -> set[str]:
        """The pool's workers as the scheduler listed them at most ``POOL_FRESH`` seconds
        ago (asked of it directly: the client's cached copy may list none while it is being
        refreshed)."""
        from distal.runtime.elastic.driver import POOL_FRESH, workers

        now = time.monotonic()
        if self._pool_seen is None or now - self._pool_seen[0] > POOL_FRESH:
            self._pool_seen = (now, set(workers(self.client)))
        return self._pool_seen[1]

    def _decide(self, run: tuple, pool: Sequence[str]) -> tuple[Any, Any, str]:
        """Workers ``a`` and ``b`` of ``run`` disagree: a third trusted one computes the job
        and sides with one of them; the other is excluded. Returns the future of the result
        kept (``a``'s, or the judge's), the judge's own, and the judge."""
        from distal.runtime.elastic.held import same_result
        from distal.runtime.elastic.tasks import VerificationFailed

        func, args, a, b, fa, _ = run
        client = self.client
        judges = [w for w in pool if w not in (a, b) and w not in self.excluded_workers]
        if not judges:
            raise VerificationFailed(
                f"workers {a} and {b} disagree on a block ({getattr(func, '__name__', func)}) "
                "and no third trusted worker is left to decide"
            )
        c = judges[0]
        fc = client.submit(func, *args, **_on(c))
        if client.submit(same_result, fa, fc, **_on(c)).result():
            liar, kept = b, fa  # its check contradicted a correct result
        else:
            liar, kept = a, fc
        self.excluded_workers.add(liar)
        if self.trust is not None:
            self.trust.failed(liar)
        return kept, fc, c

    def _settle(self) -> bool:
        """Read the verdicts of the checks :meth:`_twice` left running (``defer``). Where
        one failed a third worker decides (:meth:`_decide`), and a wrong block is replaced
        in the values made of it (``Unsettled.repair``). Returns whether a block was
        replaced: whatever read it since read a wrong block."""
        if not self._unsettled:
            return False
        pending = self._unsettled
        asked = [f for u in pending for f in _verdict_futures(u.runs)]
        # (if reading or deciding fails, they stay unsettled: the next operation tries
        # again, and nothing made of their blocks leaves the workers meanwhile)
        got = dict(zip((f.key for f in asked), self.client.gather(asked), strict=True))
        replaced = False
        for u in pending:
            for n, run in enumerate(u.runs):
                if run[5] is None:
                    continue
                verdict = got[run[5][0].key][run[5][1]]
                if u.partials:
                    verdict = verdict[0]
                if verdict:
                    if self.trust is not None:
                        self.trust.passed(run[2])
                    continue
                kept, _, _ = self._decide(run, u.pool)
                if kept is not run[4]:
                    assert u.repair is not None
                    u.repair(n, kept)
                    replaced = True
        self._unsettled = []
        return replaced

    def _host_op(
        self, fn: Any, args: Sequence[tuple[bool, Any]], out: str, dtype: np.dtype
    ) -> None:
        """Value ``out`` (0-d) = ``fn(*args)``; each arg ``(True, a held value's name)`` or
        ``(False, a constant)``: on Dask on a worker, from the operands' futures; elsewhere,
        and on a Dask session with ``verify=`` (a worker's 0-d result would go unchecked:
        ``alpha = rs / pq`` steers every later iterate), here."""
        from distal.runtime.elastic.held import WorkerValue, host_op

        vals = [self.values[a].data if ref else a for ref, a in args]
        verified = self.options.get("verify", 1) != 1
        if (
            self.runtime == "dask"
            and not verified
            and any(isinstance(v, WorkerValue) for v in vals)
        ):
            parts = [v.part(()) if isinstance(v, WorkerValue) else v for v in vals]
            f = self.client.submit(host_op, fn, parts, dtype, pure=False)
            value = WorkerValue((), np.dtype(dtype), {(): f}, self.client, self._count_driver)
            self.values[out] = Held((), np.dtype(dtype), None, value)
            return
        vals = [np.asarray(self._get_value(a)).reshape(()) if ref else a for ref, a in args]
        self.put(out, host_op(fn, vals, dtype))

    def _sparse_transpose(self, node: Any) -> Any:
        """A program node over the transpose of the sparse value ``node`` reads (a CSR
        ``dl.SparseArray`` made once per held value, in this process: sparse values are
        held whole), cut as ``node`` is."""
        from distal.sparse.array import SparseArray, as_sparse

        held = self.values[node.name]
        t = getattr(held, "transposed", None)
        if t is None:
            a = as_sparse(held.data, "csr", label="the sparse array")
            t = SparseArray.from_scipy(a.to_scipy().T.tocsr(), "csr")
            t = held.transposed = Held(tuple(reversed(held.shape)), held.dtype, None, t)
        return self._hidden_value(t, node.sparse.split("/")[1])

    def _hidden_value(self, held: Held, split: str | None = None, nprocs: int = 1) -> Any:
        """A program node reading ``held`` under a name of its own, dropped with the node
        (a sparse one cut as ``split`` says; without one, as the cost model chooses for
        ``nprocs`` processors: :func:`distal.arrays.lower.choose_split`, once per value)."""
        name = f"_v{next(self._hidden)}"
        self.values[name] = held
        sparse = None
        if _is_sparse(held.data):
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

    def _place(self, name: str, held: Held, dist: str, nprocs: int) -> None:
        """Give a value just put the layout ``dist`` over a line of ``nprocs`` processors
        (placing, not moving: not counted)."""
        target = layout_for(name, held.shape, dist, self._machine_of(nprocs))
        self.values[name] = held
        try:
            self._input(name, target)
        finally:
            self.values.pop(name)

    def get(self, name: str) -> np.ndarray:
        """Value ``name`` gathered as a numpy array (a 0-d array for a scalar); under MPI a
        collective: every rank calls it and gets the whole value. Pending array operations
        are evaluated first."""
        self.flush()
        with self._pool_errors():
            return self._get_value(name)

    def _get_value(self, name: str) -> Any:
        from distal.runtime.elastic.held import WorkerValue

        self._settle()  # nothing leaves the workers before its check has passed
        held = self._held(name)
        if _is_sparse(held.data):
            return held.data
        if isinstance(held.data, WorkerValue):
            return held.data.gather()  # counted in driver_words
        if self.runtime != "mpi":
            return np.array(held.data)
        if held.layout is None:
            data = held.data
            whole = tuple((0, n) for n in held.shape)
            return read_block(name, data, whole, held.dtype)
        return self._gather(held)

    def _gather(self, held: Held) -> np.ndarray:
        from distal.runtime.mpi.session import allgather_objects

        assert held.layout is not None
        block: HeldBlock = held.data
        whole = tuple((0, n) for n in held.shape)
        if block.array is not None and all(b == whole for b in held.layout.boxes):
            # replicated (every rank decides the same from the layout): no exchange
            return np.array(block.array)
        mine = [(box, block.array) for box, p in held.layout.blocks if p == self.rank]
        out = np.zeros(held.shape, held.dtype)
        whole = tuple((0, n) for n in held.shape)
        for part in allgather_objects(mine, self.options.get("comm")):
            for box, arr in part:
                out[box_index(box, whole)] = arr
        return out

    # -- runs ------------------------------------------------------------------------------

    def run(
        self, kernel: Any, inputs: Mapping[str, Any] | None = None, *, gather: bool = False
    ) -> Result:
        """Run ``kernel`` on the session's runtime and keep its output under its name.

        Every input not in ``inputs`` comes from the session; a held value is redistributed
        first when its layout differs from the kernel's (``moved_words`` grows by the exact
        words). ``Result.value`` is None unless ``gather=True``. Pending array operations
        are evaluated first (the kernel may read what they make).
        """
        self.flush()
        return self._run_as(kernel, {}, inputs, gather=gather)

    def _run_as(
        self,
        kernel: Any,
        names: Mapping[str, str],
        inputs: Mapping[str, Any] | None = None,
        *,
        gather: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        """:meth:`_execute`, and with ``check_stats`` the run's measured stats compared
        with the kernel's prediction."""
        res = self._execute(kernel, names, inputs, gather=gather, dot_with=dot_with)
        if self.check_stats:
            self._check_stats(kernel, res)
        return res

    def _check_stats(self, kernel: Any, res: Result) -> None:
        """Count a run whose measured stats differ from what its kernel predicted (a sparse
        kernel's prediction is that of the binding the run used)."""
        bound = getattr(kernel, "_bound", None) if getattr(kernel, "sparse", None) else None
        predicted = (bound if bound is not None else kernel).stats()
        self.stats_checked += 1
        if res.stats.as_dict() != predicted.as_dict():
            self.stats_differ.append(repr(kernel))

    def _execute(
        self,
        kernel: Any,
        names: Mapping[str, str],
        inputs: Mapping[str, Any] | None = None,
        *,
        gather: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        """:meth:`run`, the kernel's tensor ``t`` reading (or, for the output, writing) the
        session value ``names.get(t, t)``: the arrays program's kernels are compiled once
        with their own tensor names and run on whichever values the program gives them.

        ``dot_with`` (MPI): the kernel's input whose dot product with the result the arrays
        program reduces next (CG's ``p @ q`` after ``q = A @ p``): the run's leaf may
        compute this rank's part of it as it stores the result (:meth:`take_leaf_dot`)."""
        st = kernel.schedule.statement
        # checks left running (_twice's defer) are read once the run has finished where it
        # reads their values' blocks where they lie (a repaired block changes in place, and
        # the run is made again); before it otherwise (a cut or move would copy them)
        later = bool(self._unsettled) and self._reads_held_blocks(kernel, names, inputs or {})
        if not later:
            self._settle()
        given = dict(inputs or {})
        data: dict[str, Any] = {}
        for t in _inputs_of(kernel):
            name = t.name
            if name in given:
                data[name] = given.pop(name)
                continue
            vname = names.get(name, name)
            if vname not in self.values:
                raise InputError(
                    f"input {name!r} of the kernel is neither given nor in the session "
                    f"(the session holds {self.names()})"
                )
            # the input rule of kernel.run, here too: under MPI a held value is read block by
            # block as a source, and a sparse one goes to the runtime as it is held
            check_cast(f"session value {vname!r}", self.values[vname].dtype, t)
            if not t.format.is_dense:
                data[name] = self.values[vname].data  # a sparse value is read as it is held
                continue
            data[name] = self._input(vname, layout_of(kernel, name))
        if given:
            data.update(given)  # kernel.run names the extra ones
        self.kernels_run += 1
        out = names.get(st.output.name, st.output.name)
        if getattr(kernel, "sparse", None) is not None and not st.output.format.is_dense:
            # a sparse result comes back whole on every rank: held as given
            res = kernel.run(data, runtime=self.runtime, **self._run_options(kernel, names))
            value = res.value
            t = st.output
            if self.runtime == "dask":
                self.driver_words += int(np.asarray(getattr(value, "vals", ())).size)
            self.values[out] = Held(t.shape, np.dtype(t.dtype), None, value)
            if not gather:
                res.value = None
            return res
        if self.runtime == "mpi":
            # the output stays in its blocks (a sparse kernel's dense result too: an SpMV's
            # vector is not gathered onto every rank, which cost more than its product)
            opts = self._run_options()
            if dot_with is not None:
                opts["_dot_with"] = dot_with
            res = kernel.run(data, runtime="mpi", gather="none", **opts)
            self._leaf_dot = res.extra.get("dot") if dot_with is not None else None
            lay = layout_of(kernel, st.output.name)
            box = lay.boxes[self.rank]
            arr = None if box is None else res.blocks.get(box)
            if box is not None and arr is None:
                raise InternalError(
                    f"rank {self.rank} holds the blocks {list(res.blocks)} of {out!r}, not "
                    f"its layout's {box}"
                )
            t = st.output
            self.values[out] = Held(
                t.shape, np.dtype(t.dtype), lay, HeldBlock(t.shape, np.dtype(t.dtype), box, arr)
            )
            if gather:
                res.value = self.get(out)
            return res
        res = None
        if self.runtime == "local" and not inputs and getattr(kernel, "sparse", None) is None:
            res = self._run_local(kernel, data)
        if self.runtime == "dask":
            opts = self._run_options(kernel, names)
            res = kernel.run(data, runtime="dask", _hold=True, **opts)
            self.excluded_workers.update(res.extra["summary"].excluded_workers)
            if later and self._settle():  # it read a block that failed its check: again
                self.runs_redone += 1
                self.kernels_run -= 1
                return self._execute(kernel, names, inputs, gather=gather)
            held_value = res.value
            held_value.meter = self._count_driver
            held_value.checked = self._cut_checker()
            t = st.output
            lay = layout_of(kernel, st.output.name)
            self.values[out] = Held(t.shape, np.dtype(t.dtype), lay, held_value)
            res.value = held_value.gather() if gather else None
            return res
        if res is None:
            res = kernel.run(data, runtime=self.runtime, **self._run_options())
        value = np.asarray(res.value)
        self.values[out] = Held(value.shape, value.dtype, layout_of(kernel, st.output.name), value)
        if not gather:
            res.value = None
        else:
            res.value = np.array(value)
        return res

    def _reads_held_blocks(
        self, kernel: Any, names: Mapping[str, str], given: Mapping[str, Any]
    ) -> bool:
        """Whether a Dask run of ``kernel`` reads every session value it reads as the blocks
        the value is held in (no placing, no move) and keeps a dense result."""
        from distal.runtime.elastic.held import WorkerValue

        st = kernel.schedule.statement
        if self.runtime != "dask" or not st.output.format.is_dense:
            return False
        for t in _inputs_of(kernel):
            if t.name in given or not t.format.is_dense:
                continue
            held = self.values.get(names.get(t.name, t.name))
            if held is None or not isinstance(held.data, WorkerValue) or held.layout is None:
                return False
            if not held.layout.agrees(layout_of(kernel, t.name)):
                return False
        return True

    def _run_options(self, kernel: Any = None, names: Mapping[str, str] = {}) -> dict[str, Any]:
        """The options of every ``kernel.run``: the session's, and on the local and MPI
        runtimes no trace unless asked for (``trace=True``, or ``DISTAL_TRACE=1``); on Dask the
        session's pool and, for ``kernel``'s inputs held in this process, the caches of the
        blocks placed from them (``Held.placed``)."""
        if self.runtime in ("local", "mpi") and "trace" not in self.options:
            return {**self.options, "trace": os.environ.get("DISTAL_TRACE", "0") == "1"}
        if self.runtime == "dask":
            _ = self.client  # the pool, started once
            placed = {}
            if kernel is not None:
                for t in _inputs_of(kernel):
                    held = self.values.get(names.get(t.name, t.name))
                    if held is not None and _is_sparse(held.data):
                        placed[t.name] = held.placed
            opts = {**self.options, "_placed": placed} if placed else self.options
            if self.options.get("verify") == "adaptive":  # trust earned carries to every run
                opts = {**opts, "_trust": self.trust}
            if self.excluded_workers:  # a worker caught lying gets no task of later runs
                opts = {**opts, "_excluded": frozenset(self.excluded_workers)}
            return opts
        return self.options

    def _run_local(self, kernel: Any, data: dict[str, Any]) -> Result | None:
        """``kernel.run`` on the local runtime for inputs that all come from the session:
        held arrays of the kernel's shapes (checked when placed) and dtypes need no checking
        or conversion, so they go to the runtime as they are. None when one does not qualify
        (or an option is not the local runtime's): ``kernel.run`` then checks everything."""
        from distal.runtime.local import LocalRuntime

        if not self.options.keys() <= {"trace", "progress"}:
            return None
        dtypes = kernel.dtypes
        for name, arr in data.items():
            if type(arr) is not np.ndarray or arr.dtype != dtypes[name]:
                return None
        t0 = time.perf_counter()
        rt = LocalRuntime(kernel.plan, kernel.kernels, dtypes, **self._run_options())
        value, stats, _ = rt.run(data)
        return Result(value, stats, time.perf_counter() - t0, trace=rt.trace.events)

    def _input(self, name: str, target: Layout) -> Any:
        """Value ``name`` as the kernel's input in layout ``target`` (placed, or moved)."""
        held = self.values[name]
        if held.shape != target.shape:
            raise InputError(
                f"value {name!r} has shape {held.shape}; the kernel's tensor {name!r} expects "
                f"{target.shape}"
            )
        if self.runtime == "dask" and isinstance(held.data, np.ndarray):
            # sent to the workers once, in the blocks of the layout it is placed in (or was
            # restored in): placing, not counted
            from distal.runtime.elastic.held import WorkerValue

            boxes = (held.layout or target).boxes
            held.data = WorkerValue.place(self.client, held.data, boxes, self._count_driver)
            held.data.checked = self._cut_checker()
        if held.layout is None:  # as put: the kernel reads its blocks, which is not traffic
            if self.runtime == "mpi":
                data = held.data
                if is_block_source(data):
                    check_source(name, data, target.shape)
                box = target.boxes[self.rank]
                arr = None if box is None else read_block(name, data, box, held.dtype)
                held.data = HeldBlock(held.shape, held.dtype, box, arr)
            held.layout = target
            return held.data
        if held.layout.agrees(target):
            return held.data
        self._move(name, held, target)
        return held.data

    def copy_kernel(
        self, shape: tuple[int, ...], dtype: Any, source: Layout, target: Layout
    ) -> Copy:
        """The (cached) copy kernel redistributing from ``source`` to ``target``."""
        key = (tuple(shape), np.dtype(dtype).str, source.key, target.key)
        if key not in self._copies:
            self._copies[key] = compile_copy(tuple(shape), np.dtype(dtype), source, target)
        return self._copies[key]

    def _move(self, name: str, held: Held, target: Layout) -> None:
        assert held.layout is not None
        copy = self.copy_kernel(held.shape, held.dtype, held.layout, target)
        if self.runtime == "mpi":
            res = copy.kernel.run(
                {SRC: held.data}, runtime="mpi", gather="none", **self._run_options()
            )
            box = target.boxes[self.rank]
            held.data = HeldBlock(held.shape, held.dtype, box, copy.block(res.blocks, box))
        elif self.runtime == "dask" and not isinstance(held.data, np.ndarray):
            held.data = held.data.recut(target.boxes)  # cut anew on the workers
        # local: the one array already holds every block of the new layout
        held.layout = target
        self.moved_words += copy.words

    # -- checkpointed loops ------------------------------------------------------------------

    def iterations(
        self, n: int, keep: Sequence[str] = (), name: str = "loop", *, save: str = "every"
    ) -> Iterator[int]:
        """Iteration numbers ``0 .. n-1``, the ``keep`` values saved after each one.

        With ``checkpoint=`` a later session on the same location and loop ``name``
        restores the kept values of the last completed iteration (``resumed_from``) and
        yields from the next one. Restoring happens here, before the first iteration.
        ``save="latest"`` saves an iteration only when the previous save is done (the
        iterations finished meanwhile are skipped, the last one is always saved), so
        saving never holds up the computation.
        """
        from distal.session.loops import Loop

        return Loop(self, n, keep, name, save).start()

    def summary(self) -> str:
        """What the session did, in a few lines: its runtime and values, the words its
        redistributions moved, where its last loop resumed, and every saved iteration that
        was found damaged and not used (``discarded``)."""
        self._settle()  # (checks still running may yet exclude a worker)
        lines = [
            f"session on runtime {self.runtime!r}: values {self.names()}",
            f"moved words (redistribution): {self.moved_words}",
        ]
        if self.runtime == "dask":
            lines.append(f"driver words (values through the driver): {self.driver_words}")
            if self.excluded_workers:
                lines.append(f"excluded workers: {', '.join(sorted(self.excluded_workers))}")
        if self.checkpoint is not None:
            resumed = "no" if self.resumed_from is None else f"after iteration {self.resumed_from}"
            lines.append(f"checkpoint {self.checkpoint!s}: last loop resumed: {resumed}")
        for loop in dict.fromkeys(name for name, _ in self.discarded):
            its = [it for name, it in self.discarded if name == loop]
            lines.append(
                f"loop {loop!r}: damaged saved iteration(s) {its} not used (an entry missing "
                "or failing its checksum)"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Session({self.runtime!r}, values={self.names()}, moved_words={self.moved_words})"


#: the names the arrays program gives the values behind unnamed DArrays
_INTERNAL = re.compile(r"_[acv]\d+")

_KERNEL_INPUTS: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()


def _on(worker: str) -> dict[str, Any]:
    """Submit keywords pinning a task to ``worker``."""
    return {"workers": [worker], "allow_other_workers": False, "pure": False}


def _verdict_futures(runs: Sequence[tuple]) -> list[Any]:
    """The distinct check tasks of :meth:`Session._twice`'s ``runs``, in order."""
    seen: dict[str, Any] = {}
    for r in runs:
        if r[5] is not None:
            seen.setdefault(r[5][0].key, r[5][0])
    return list(seen.values())


@dataclass
class Unsettled:
    """Checks :meth:`Session._twice` left running (``defer``): ``runs`` are its jobs
    ``(func, args, computing worker, checking worker, result future, (check task, item))``
    (the item of the check task's list that is this job's verdict; None: not checked),
    ``pool`` the trusted workers then, ``partials`` whether a verdict comes with partial
    sums; ``repair(n, future)`` puts the result kept for job ``n`` where the wrong one was
    (set by the operation that made values of the results)."""

    runs: list[tuple]
    pool: list[str]
    partials: bool
    repair: Any = None


def _gather_partials(
    partials: list[list[Any]], sums: Sequence[tuple[str, np.dtype]], comm: Any
) -> list[list[Any]]:
    """Every rank's partial sums of a fused set's reductions (each rank has one block or
    none), in rank order: float64 sums in one row of floats per rank (exact: no rounding in
    a float64's trip), others pickled."""
    from distal.runtime.mpi.session import allgather_floats, allgather_objects

    if all(d == np.float64 for _, d in sums) and all(len(p) <= 1 for p in partials):
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


def _inputs_of(kernel: Any) -> tuple:
    """The input tensors of ``kernel``'s statement (worked out once per kernel: a loop runs
    the same kernels again and again)."""
    try:
        got = _KERNEL_INPUTS.get(kernel)
    except TypeError:  # not weakly referenceable
        return kernel.schedule.statement.inputs()
    if got is None:
        got = _KERNEL_INPUTS[kernel] = kernel.schedule.statement.inputs()
    return got


def session_machine(sess: Session, machine: Any) -> Machine:
    """The line of processors a session's arrays (and ``dl.apps``) spread over:
    ``machine`` (a ``dl.Machine`` of any shape is used as a line of its ``size``
    processors, an int is a count); by default one processor per MPI rank, or one per core
    (at most 8) on the other runtimes.

    Raises:
        InputError: not a machine or a positive count, or (MPI) not one processor per rank.
    """
    if machine is None:
        p = sess.nranks if sess.runtime == "mpi" else max(1, min(os.cpu_count() or 1, 8))
    elif isinstance(machine, Machine):
        p = machine.size
    elif isinstance(machine, int | np.integer) and not isinstance(machine, bool) and machine > 0:
        p = int(machine)
    else:
        raise InputError(f"machine must be a dl.Machine or a processor count, got {machine!r}")
    if sess.runtime == "mpi" and p != sess.nranks:
        raise InputError(
            f"the machine has {p} processors but the MPI session runs on {sess.nranks} ranks"
        )
    return Machine(p)


def _sparse_split(dist: str | None) -> str | None:
    """How ``A @ x`` cuts a sparse matrix, from its distribution string (None: not said)."""
    if dist is None or dist == "auto":
        return None  # the cost model chooses, at the first use
    key = "".join(str(dist).split())
    if key in ("xy->x", "ij->i"):
        return "rows"
    if key in ("xy->(xy)", "ij->(ij)"):
        return "nonzeros"
    raise NotSupportedYet(
        f"a sparse array distributed as {dist!r}: the arrays front cuts a sparse matrix by "
        "rows ('xy -> x') or by stored entries ('xy -> (xy)')"
    )


def _close_all(things: Sequence[Any]) -> None:
    for thing in things:
        try:
            thing.close()
        except Exception:  # pragma: no cover - best effort shutdown
            pass


def _as_held_sparse(x: Any) -> Any:
    """A scipy / pydata sparse array as the ``dl.SparseArray`` (CSR) the arrays' kernels
    read, converted once when bound rather than on every run; anything else as it is."""
    from distal.sparse.array import SparseArray, as_sparse

    if _is_sparse(x) and not isinstance(x, SparseArray):
        return as_sparse(x, "csr", label="the sparse array")
    return x


def _is_sparse(x: Any) -> bool:
    """A sparse value (a ``dl.SparseArray``, scipy.sparse or pydata sparse array)."""
    from distal.sparse.array import SparseArray, is_pydata_sparse, is_scipy_sparse

    return isinstance(x, SparseArray) or is_scipy_sparse(x) or is_pydata_sparse(x)


__all__ = ["Held", "HeldBlock", "Session"]
