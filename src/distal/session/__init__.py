"""Sessions: tensor values that stay distributed across kernel runs.

``dl.Session(runtime, **options)`` holds named values. ``run(kernel)`` takes every input of
the kernel that is not given from the session (by tensor name), runs the kernel on the
session's runtime and keeps its output, distributed, without gathering it. A held value
whose layout differs from the one the next kernel's tensor gives it is redistributed by a
copy kernel (:mod:`distal.session.redistribute`) that moves exactly the elements each
processor needs and does not hold; ``moved_words`` adds them up.

A session is a store of names -> held values with their layouts; it knows no runtime. Its
runtime (``sess.rt``, a :class:`~distal.runtime.base.Runtime` looked up by name) holds the
values -- numpy arrays in this process (``"local"``), each rank's block (``"mpi"``),
futures on the workers (``"dask"``), ... -- and places, moves, gathers and computes them;
the session decides what moves where and counts it. The arrays front's operations are in
:mod:`distal.session.arrays`, checkpointed loops (``checkpoint=`` and
:meth:`Session.iterations`) in :mod:`distal.session.loops`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from distal.casting import check_cast
from distal.distribution.layout import Layout
from distal.errors import DistalError, InputError
from distal.runtime.base import runtime_class
from distal.runtime.result import Result
from distal.runtime.source import is_block_source, read_block
from distal.session.arrays import ArraysSession
from distal.session.held import (
    INTERNAL,
    Held,
    inputs_of,
    is_sparse,
    session_machine,
    trace_default,
)
from distal.session.layout import layout_of
from distal.session.redistribute import SRC, Copy, compile_copy


class Session(ArraysSession):
    """Tensor values kept distributed across kernel runs (see the module docstring).

    Args:
        runtime: a registered runtime (``dl.runtimes()``: ``"local"``, the default,
            ``"mpi"``, ``"dask"``, ...), as for ``kernel.run``.
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
        **runtime_options: the runtime's options (e.g. ``comm=`` for MPI, ``client=`` for
            Dask); a session's runs record no trace unless ``trace=True`` (or
            ``DISTAL_TRACE=1``).
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
        if "gather" in runtime_options:
            raise InputError(
                "a session keeps its results where they were computed: do not pass gather= "
                "to Session (use sess.get(name), or sess.run(kernel, gather=True))"
            )
        cls = runtime_class(runtime)
        options = dict(runtime_options)
        #: what a checkpointed loop does when an iteration cannot be saved (session.loops)
        self.checkpoint_errors = options.pop("checkpoint_errors", "stop")
        if "trace" in cls.options and "trace" not in options:
            options["trace"] = trace_default()
        #: the session's runtime (which holds its values)
        self.rt = cls(**options)
        #: the runtime's pool (started on first use) is closed with the session
        self._closer = weakref.finalize(self, self.rt.close)
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
        #: ``(loop name, iteration, reason)`` of every iteration a loop could not save
        self.save_failures: list[tuple[str, int, str]] = []
        self.values: dict[str, Held] = {}
        self._copies: dict[tuple, Copy] = {}
        #: distributed kernels this session has executed (its arrays' and ``run``'s)
        self.kernels_run = 0
        #: with ``check_stats=True``: runs whose measured stats were compared with their
        #: kernel's prediction, and the kernels of those that differed
        self.check_stats = bool(check_stats)
        self.stats_checked = 0
        self.stats_differ: list[str] = []
        self._start_arrays()
        #: the machine the session's arrays are spread over (a line of its processors)
        self.machine = session_machine(self, machine)

    # -- the runtime ----------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This process's number among those running the session (MPI's rank; else 0)."""
        return self.rt.rank

    @property
    def nranks(self) -> int:
        return self.rt.nranks

    @property
    def client(self) -> Any:
        """The runtime's client where it has one (Dask: the ``distributed.Client`` the
        session's values live behind, ``client=``'s or of the pool started on first use)."""
        return getattr(self.rt, "client", None)

    @property
    def driver_words(self) -> int:
        """Elements of values that crossed between this process and where the runtime holds
        them, after placement (``get``, ``float``, ``np.asarray``): 0 where values are held
        in this process."""
        return self.rt.driver_words

    @property
    def excluded_workers(self) -> set[str]:
        """The workers a check or a majority caught in any run of the session (later runs
        give them no task); empty on runtimes that do not verify."""
        return getattr(self.rt, "excluded", set())

    @property
    def trust(self) -> Any:
        """``verify="adaptive"``: the workers' streaks of verified results."""
        return getattr(self.rt, "trust", None)

    @property
    def maps_checked(self) -> int:
        """``verify=``: map and fused blocks computed twice on different workers and compared."""
        return getattr(self.rt, "maps_checked", 0)

    @property
    def cuts_checked(self) -> int:
        """``verify=``: cuts of held values computed twice and compared."""
        return getattr(self.rt, "cuts_checked", 0)

    @property
    def runs_redone(self) -> int:
        """Kernel runs made again because a block they read failed its check later."""
        return getattr(self.rt, "runs_redone", 0)

    def settle(self) -> bool:
        """Finish what the runtime left running (checks of held blocks); True when a block
        read since was replaced."""
        return self.rt.settle()

    def holders(self, name: str) -> dict[Any, list[str]]:
        """Who holds each block of value ``name`` now (Dask: the workers; empty for a value
        held in this process: not placed yet, or sparse)."""
        self.flush()
        return self.rt.holders(self._held(name).data)

    def close(self) -> None:
        """Drop every value and close what the runtime started (a Dask pool without
        ``client=``); a pool given as ``client=`` stays open."""
        self.values.clear()
        for p in self._programs.values():
            for name in list(p.named):
                p.forget(name)
        self._closer()

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

    # -- values ----------------------------------------------------------------------------

    def put(self, name: str, array: Any) -> None:
        """Give the session a value (a numpy array, a block source or a sparse array); it is
        placed per the distribution of the first kernel that reads it (not counted as moved
        words)."""
        if not isinstance(name, str) or not name:
            raise InputError(f"a session value needs a tensor name, got {name!r}")
        for p in self._programs.values():  # the name's handles read the old value on
            p.forget(name)
        if is_block_source(array):
            shape = tuple(int(n) for n in array.shape)
            self.values[name] = Held(
                shape, np.dtype(getattr(array, "dtype", np.float64)), None, array
            )
            return
        if is_sparse(array):  # held as given (read-only arrays): sparse kernels read it whole
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
        return isinstance(name, str) and self._bound_anywhere(name)

    def names(self) -> list[str]:
        """The names of the values held (not the arrays program's own: ``_a``, ``_c`` or
        ``_v`` and a number, the values behind unnamed DArrays), bound ones included."""
        bound = {n for p in self._programs.values() for n in p.dirty}
        return sorted(n for n in {*self.values, *bound} if not INTERNAL.fullmatch(n))

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

    def get(self, name: str) -> np.ndarray:
        """Value ``name`` gathered as a numpy array (a 0-d array for a scalar); under MPI a
        collective: every rank calls it and gets the whole value. Pending array operations
        are evaluated first."""
        self.flush()
        with self.rt.errors():
            return self.read(name)

    def read(self, name: str) -> Any:
        """Value ``name`` gathered, without evaluating pending array operations (the arrays
        front's read of a value it has computed)."""
        self.rt.settle()  # nothing leaves where it is held before its checks have passed
        held = self._held(name)
        if is_sparse(held.data):
            return held.data
        if held.layout is None and is_block_source(held.data):
            whole = tuple((0, n) for n in held.shape)
            return read_block(name, held.data, whole, held.dtype)
        return self.rt.gather(name, held.data, held.layout)

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
        return self.run_named(kernel, {}, inputs, gather=gather)

    def run_named(
        self,
        kernel: Any,
        names: Mapping[str, str],
        inputs: Mapping[str, Any] | None = None,
        *,
        gather: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        """:meth:`run` with the kernel's tensor ``t`` reading (or, for the output, writing)
        the session value ``names.get(t, t)``: the arrays program's kernels are compiled
        once with their own tensor names and run on whichever values the program gives
        them. ``dot_with`` (where the runtime's ``leaf_dot``): the input whose dot product
        with the result the arrays program reduces next, which the run's leaf may compute
        as it stores the result (the next fused set's ``leaf_dot``). With
        ``check_stats``, the run's measured stats are compared with the kernel's
        prediction."""
        res = self._execute(kernel, names, inputs, gather=gather, dot_with=dot_with)
        if self.check_stats:
            self._check_stats(kernel, res)
        return res

    def _check_stats(self, kernel: Any, res: Result) -> None:
        """Count a run whose measured stats differ from what its kernel predicted (a sparse
        kernel's prediction is that of the binding the run used; ``peak_words`` only where
        the runtime follows the memory model: ``models_memory``)."""
        bound = getattr(kernel, "_bound", None) if getattr(kernel, "sparse", None) else None
        predicted = (bound if bound is not None else kernel).stats().as_dict()
        measured = res.stats.as_dict()
        if not self.rt.models_memory:  # (its peak_words are measured, not the model's)
            predicted.pop("peak_words")
            measured.pop("peak_words")
        self.stats_checked += 1
        if measured != predicted:
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
        st = kernel.schedule.statement
        given = dict(inputs or {})
        data: dict[str, Any] = {}
        for t in inputs_of(kernel):
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
            # the input rule of kernel.run, here too (a held value is read as the runtime
            # holds it, a sparse one as it is held)
            check_cast(f"session value {vname!r}", self.values[vname].dtype, t)
            if not t.format.is_dense:
                data[name] = self.values[vname].data
                continue
            data[name] = self._input(vname, layout_of(kernel, name))
        if given:
            data.update(given)  # the run names the extra ones
        self.kernels_run += 1
        res = self.rt.run(self._executable(kernel, data), data, keep=True, dot_with=dot_with)
        if dot_with is not None:
            self._leaf_dot = res.extra.get("dot")
        t = st.output
        out = names.get(t.name, t.name)
        if t.format.is_dense:
            lay = layout_of(kernel, t.name)
            self.values[out] = Held(t.shape, np.dtype(t.dtype), lay, res.value)
            res.value = self.read(out) if gather else None
        else:  # a sparse result comes back whole: held as given
            self.values[out] = Held(t.shape, np.dtype(t.dtype), None, res.value)
            if not gather:
                res.value = None
        return res

    def _executable(self, kernel: Any, data: Mapping[str, Any]) -> Any:
        """The executable of the processors the runtime runs (a kernel with sparse inputs
        bound to their patterns first); a failure here fails every process of the run
        together (MPI), never leaving the others waiting."""
        try:
            if getattr(kernel, "sparse", None) is None:
                return kernel.executable(self.rt.processors(kernel.nprocs))
            bound = kernel.bind(data)
            return bound.executable(self.rt.processors(bound.nprocs))
        except DistalError as e:
            self.rt.abort(e)
            raise

    def _input(self, name: str, target: Layout) -> Any:
        """Value ``name`` as the kernel's input in layout ``target`` (placed, or moved)."""
        held = self.values[name]
        if held.shape != target.shape:
            raise InputError(
                f"value {name!r} has shape {held.shape}; the kernel's tensor {name!r} expects "
                f"{target.shape}"
            )
        if held.layout is None:  # as put: the kernel reads its blocks, which is not traffic
            held.data = self.rt.place(name, held.data, target)
            held.layout = target
            return held.data
        if held.layout.agrees(target):
            return held.data
        copy = self.copy_kernel(held.shape, held.dtype, held.layout, target)
        exe = copy.kernel.executable(self.rt.processors(copy.kernel.nprocs))
        held.data = self.rt.move(held.data, held.layout, target, exe)
        held.layout = target
        self.moved_words += copy.words
        return held.data

    def copy_kernel(
        self, shape: tuple[int, ...], dtype: Any, source: Layout, target: Layout
    ) -> Copy:
        """The (cached) copy kernel redistributing from ``source`` to ``target``."""
        key = (tuple(shape), np.dtype(dtype).str, source.key, target.key)
        if key not in self._copies:
            self._copies[key] = compile_copy(tuple(shape), np.dtype(dtype), source, target)
        return self._copies[key]

    # -- checkpointed loops ------------------------------------------------------------------

    def iterations(
        self,
        n: int,
        keep: Sequence[str] = (),
        name: str = "loop",
        *,
        save: str = "every",
        checkpoint_errors: str | None = None,
    ) -> Iterator[int]:
        """Iteration numbers ``0 .. n-1``, the ``keep`` values saved after each one.

        With ``checkpoint=`` a later session on the same location and loop ``name``
        restores the kept values of the last completed iteration (``resumed_from``) and
        yields from the next one. Restoring happens here, before the first iteration.
        ``save="latest"`` saves an iteration only when the previous save is done (the
        iterations finished meanwhile are skipped, the last one is always saved), so
        saving never holds up the computation. ``checkpoint_errors`` (default: the session's,
        ``"stop"``) says what an iteration that cannot be saved (a full disk, a read-only
        or unwritable directory) does: ``"stop"`` ends the loop with a ``CheckpointFailed``
        naming the iteration and the last one saved, ``"continue"`` goes on without saving
        it, with a ``CheckpointWarning`` (see :mod:`distal.session.loops`).
        """
        from distal.session.loops import Loop

        return Loop(self, n, keep, name, save, checkpoint_errors).start()

    def summary(self) -> str:
        """What the session did, in a few lines: its runtime and values, the words its
        redistributions moved, where its last loop resumed, and every saved iteration that
        was found damaged and not used (``discarded``)."""
        self.rt.settle()  # (checks still running may yet exclude a worker)
        lines = [
            f"session on runtime {self.runtime!r}: values {self.names()}",
            f"moved words (redistribution): {self.moved_words}",
        ]
        if not self.rt.in_process:
            lines.append(f"driver words (values through the driver): {self.driver_words}")
        if self.excluded_workers:
            lines.append(f"excluded workers: {', '.join(sorted(self.excluded_workers))}")
        if self.checkpoint is not None:
            resumed = "no" if self.resumed_from is None else f"after iteration {self.resumed_from}"
            lines.append(f"checkpoint {self.checkpoint!s}: last loop resumed: {resumed}")
        for loop, it, why in self.save_failures:
            lines.append(f"loop {loop!r}: iteration {it} could not be saved ({why})")
        for loop in dict.fromkeys(name for name, _ in self.discarded):
            its = [it for name, it in self.discarded if name == loop]
            lines.append(
                f"loop {loop!r}: damaged saved iteration(s) {its} not used (an entry missing "
                "or failing its checksum)"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Session({self.runtime!r}, values={self.names()}, moved_words={self.moved_words})"


__all__ = ["SRC", "Held", "Session", "session_machine"]
