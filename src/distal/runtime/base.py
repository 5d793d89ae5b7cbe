"""Runtimes: one class per way of running, registered by name.

A runtime carries out :class:`~distal.runtime.executable.Executable`\\ s and holds values
between runs. ``kernel.run``, ``exe.run`` and ``dl.Session`` look it up by name
(:func:`get_runtime`) and talk to it through :class:`Runtime`'s methods only, so none of
them knows which runtime it has: a new runtime is a new class and one
:func:`register_runtime` call, as an opt_einsum backend is a row in its dispatch table.

Each runtime owns the type of the values it holds (*held values*: numpy arrays in this
process, one block per MPI rank, futures on Dask workers, ...) and their verification, and
says what it can do through class attributes (capabilities), never through its name.

The built-in runtimes are registered by module path and imported on first use, so
``import distal`` imports neither ``mpi4py`` nor ``distributed``; a runtime whose extra is
not installed is a :class:`~distal.errors.NotSupportedYet` naming the extra.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from distal.distribution.layout import Layout
from distal.errors import DistalError, InputError, NotSupportedYet
from distal.runtime.executable import Executable
from distal.runtime.result import Result


class Runtime:
    """The interface every runtime implements (the defaults say what a runtime without the
    ability does). A runtime object is made per run (``kernel.run``) or per session, from
    the run's or the session's options, and closed with it.

    Capabilities (class attributes) the callers ask instead of a runtime's name:

    * ``in_process``: held values are arrays in this process (each process's own blocks),
      so an element-wise pass may write over a block nothing else reads;
    * ``leaf_dot``: :meth:`run` with ``dot_with=`` can return, from the product's leaf, the
      dot product of an input with the output (``Result.extra["dot"]``);
    * ``models_memory``: the measured ``peak_words`` follow the plan's memory model.
    """

    #: the name it is registered under (``"local"``, ``"mpi"``, ``"dask"``, ...)
    name: ClassVar[str] = ""
    #: the extra that installs its dependencies (``pip install 'distal[EXTRA]'``), or None
    extra: ClassVar[str | None] = None
    #: the options :meth:`__init__` accepts, for error messages and ``dl.Session``
    options: ClassVar[tuple[str, ...]] = ()
    in_process: ClassVar[bool] = False
    leaf_dot: ClassVar[bool] = False
    #: its processors hold what the plan's memory model says (owned blocks, a step's fetch
    #: and partial buffers), so the measured ``peak_words`` equal the prediction; a runtime
    #: whose tasks hold other buffers (Dask's units) measures its own
    models_memory: ClassVar[bool] = True

    def __init__(self, **options: Any) -> None:
        """Check the options (an unknown name or a bad value is an ``InputError`` naming
        it and the valid ones) and keep them. Nothing is started yet. Every runtime takes
        ``memory_limit`` (see :meth:`run`) besides its own ``options``."""
        #: the memory check of every run: None (what a processor has), bytes per processor,
        #: or False (no check); see :func:`distal.runtime.limits.check_memory`
        self.memory_limit = options.pop("memory_limit", None)
        unknown = sorted(k for k in options if k not in self.options)
        if unknown:
            raise InputError(
                f"unknown option(s) {unknown} for the {self.name} runtime; valid options are "
                f"{sorted(['memory_limit', *self.options])}"
            )
        self.opts = dict(options)

    # -- the processes taking part -----------------------------------------------------------

    #: this process's number among the processes running the same program (MPI's rank)
    rank: int = 0
    #: how many processes run the same program (MPI's ranks; 1 elsewhere)
    nranks: int = 1
    #: elements of held values that crossed between this process and where they are held,
    #: after placing (``get``, ``float``): 0 where values are held in this process
    driver_words: int = 0

    def machine_size(self, requested: int | None) -> int:
        """The processors a session's arrays spread over: ``requested`` when the runtime can
        run that many, by default one per core (at most 8).

        Raises:
            InputError: the runtime cannot run ``requested`` processors.
        """
        if requested is not None:
            return requested
        import os

        return max(1, min(os.cpu_count() or 1, 8))

    def processors(self, nprocs: int) -> tuple[int, ...] | None:
        """The processors of a machine of ``nprocs`` whose programs this process executes
        (``None``: all of them): ``kernel.run`` hands the runtime an executable of those
        programs only."""
        return None

    def abort(self, error: BaseException) -> None:
        """The caller failed before the run (a sparse input's pattern did not bind): let the
        other processes of the run know, so that they fail together (MPI) instead of
        waiting. Returns; the caller raises ``error``."""

    # -- running ---------------------------------------------------------------------------

    def run(
        self,
        exe: Executable,
        inputs: Mapping[str, Any],
        *,
        keep: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        """Run ``exe``: the inputs are checked (:meth:`Executable.check_inputs`) or are
        values this runtime holds (:meth:`place`, or an earlier run's ``keep``).

        ``keep``: leave the output where it was computed; ``Result.value`` is then a held
        value (a sparse output comes back whole). ``dot_with`` (where ``leaf_dot``): also
        the dot product of that input with the output, ``Result.extra["dot"]``.

        Every run of every runtime passes here: a run whose predicted peak exceeds the memory
        a processor has is refused first, before anything is allocated
        (:func:`distal.runtime.limits.check_memory`; a ``ResourceError`` naming both figures;
        ``memory_limit=`` overrides it), on every process of the run together (MPI). Then
        :meth:`execute` runs it.

        Raises:
            ResourceError: the run cannot fit.
        """
        self.check_memory(exe)
        return self.execute(exe, inputs, keep=keep, dot_with=dot_with)

    def check_memory(self, exe: Executable) -> None:
        """Refuse ``exe`` where its predicted peak exceeds a processor's memory (every
        process failing together: :meth:`abort`)."""
        from distal.runtime.limits import check_memory

        if self.memory_limit is False:
            return
        try:
            client = getattr(self, "client", None)  # (a pool's workers say what they have)
            check_memory(exe, self.name, self.memory_limit, rank=self.rank, client=client)
        except DistalError as e:
            self.abort(e)
            raise

    def execute(
        self,
        exe: Executable,
        inputs: Mapping[str, Any],
        *,
        keep: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        """The runtime's own run (see :meth:`run`, which calls it)."""
        raise NotImplementedError

    # -- held values (a session's) -------------------------------------------------------------
    #
    # A held value is whatever the runtime keeps for a value laid out as a ``Layout`` (the
    # session keeps the layout beside it). A value not placed yet is the caller's own (an
    # array or a block source, whole on every process). Methods that read blocks finish
    # what earlier operations left running first (:meth:`settle`).

    #: its processes call the same operations together and saving is one collective (MPI):
    #: never on a writer thread of one process
    collective: ClassVar[bool] = False

    def place(self, name: str, value: Any, layout: Layout) -> Any:
        """Value ``name`` (an array or a block source of ``layout.shape``, or a 0-d value
        this runtime holds) held in ``layout``: each process keeps, or sends out, the blocks
        it holds. Placing is not traffic."""
        raise NotImplementedError

    def move(self, held: Any, source: Layout, target: Layout, copy: Executable) -> Any:
        """A value held in ``source`` held in ``target`` instead, as the copy kernel
        ``copy`` (input ``src``, output ``dst``: every processor's target box, each
        replica once) moves it."""
        raise NotImplementedError

    def gather(self, name: str, held: Any, layout: Layout | None) -> np.ndarray:
        """The whole value, as a numpy array, on every process (``layout`` None: a value
        not placed, or a 0-d value held whole)."""
        raise NotImplementedError

    def map(
        self, fn: Any, operands: Sequence[tuple[Any, Layout]], target: Layout, dtype: Any
    ) -> Any:
        """An element-wise pass: ``fn`` (a :class:`~distal.kernels.passes.Pass`: data) over
        the blocks of ``target``, each from the operands' ``(held, layout)`` blocks of the
        processor holding it; a held value in ``target``."""
        raise NotImplementedError

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
        """A fused set of the arrays front: ``fn`` (a fused :class:`~distal.kernels.passes.Pass`)
        over each block of ``target`` (blocks of the first axis), from the operands ``(slot,
        held, layout)``, computes the element-wise members (held values in ``target``, of
        dtypes ``elems``) and each reduction's partial sums, added in processor order into
        a 0-d value of dtype ``sums[j]`` (held whole, or where the runtime keeps it).

        ``donate``: ``(member, slot)`` pairs whose slot's block nothing reads after the set
        (where ``in_process``: the member may be written over it). ``dot``: the one
        reduction's value the last run's leaf computed (``Result.extra["dot"]``), to use
        instead of a pass. Returns the members, the sums, and whether ``dot`` was used."""
        raise NotImplementedError

    def blocks(
        self,
        fn: Any,
        operands: Sequence[tuple[Any, Layout]],
        needs: Mapping[int, Sequence[Any]],
        work: Sequence[tuple[Any, int]],
        target: Layout,
        dtype: Any,
        combine: Any = None,
    ) -> Any:
        """A block operation of the arrays front (``distal.numpy``'s reductions over axes,
        creation, reshapes, ...): processor ``p``'s unit ``(box, p)`` of ``work`` computes
        ``fn(arrays, box)`` (a ``"block"`` pass) from the boxes ``needs[p][k]`` of the held
        operands ``(held, layout)`` (None: not read). Without ``combine`` the units' results
        are the blocks of a held value in ``target`` (blocks of the first axis); with it
        (a ``"combine"`` pass), ``combine(partials in processor order)`` is the whole value,
        held by every processor (``target`` replicated)."""
        from distal.errors import NotSupportedYet

        raise NotSupportedYet(
            f"block operations of distal.numpy on the {self.name!r} runtime (reductions over "
            "axes, creation, reshapes): run them on local, mpi or dask"
        )

    def scalar(self, fn: Any, args: Sequence[tuple[bool, Any]], dtype: Any) -> Any | None:
        """``fn`` of 0-d operands (``(True, held)`` or ``(False, constant)``) as a 0-d value
        held where its operands are; None to have the caller compute it here (from the
        gathered operands)."""
        return None

    def own_block(self, held: Any) -> np.ndarray | None:
        """This process's block of a held value, where it is an array here (``in_process``);
        None otherwise."""
        return None

    def settle(self) -> bool:
        """Finish what earlier operations left running (checks of held values' blocks); True
        when a block read since was replaced (whatever read it is to be made again)."""
        return False

    def holders(self, held: Any) -> dict[Any, list[str]]:
        """Who holds each block of a held value (workers' addresses), where it is not this
        process; empty otherwise."""
        return {}

    def errors(self) -> Any:
        """A context in which the runtime's own connection failures become ``DistalError``s
        (a lost Dask scheduler: ``PoolLost``)."""
        return contextlib.nullcontext()

    # -- saving held values (checkpointed loops) ---------------------------------------------

    def block_of(self, held: Any, layout: Layout | None, box: Any, p: int) -> Any:
        """What this process writes of block ``box`` (held by processor ``p``) of a held
        value: an array, a handle the runtime saves where the block is, or None (another
        process writes it)."""
        raise NotImplementedError

    def save_blocks(
        self, store: Any, todo: Sequence[tuple[str, int, Any]], content: bool
    ) -> list[tuple[str, int, str, str | None]]:
        """Write ``todo``'s blocks ``(value, k, block_of(...))`` as entries ``value.k`` of a
        checkpoint store; every process's ``(value, k, checksum, content digest or None)``."""
        raise NotImplementedError

    def agree(self, ok: bool) -> bool:
        """Whether every process of the run says ``ok`` (one collective under MPI)."""
        return ok

    def close(self) -> None:
        """Release what the runtime started (a pool it started, its held values)."""

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the registry -----------------------------------------------------------------------------

#: name -> the class, or ``"module:Class"`` imported on first use, and its extra
_REGISTRY: dict[str, tuple[type[Runtime] | str, str | None]] = {
    "local": ("distal.runtime.local_runtime:Local", None),
    "mpi": ("distal.runtime.mpi.runtime:MPIRuntime", "mpi"),
    "dask": ("distal.runtime.dask:DaskRuntime", "dask"),
    "pool": ("distal.runtime.pool.runtime:PoolRuntime", "pool"),
}


def register_runtime(
    name: str, cls: type[Runtime] | str, *, extra: str | None = None, replace: bool = False
) -> None:
    """Register a runtime class under ``name`` (or ``"module:Class"``, imported when first
    used; ``extra`` names the pip extra its imports need).

    Raises:
        InputError: ``name`` is registered already (unless ``replace``), or not a name.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise InputError(f"a runtime is registered under a name, got {name!r}")
    if name in _REGISTRY and not replace:
        raise InputError(f"a runtime {name!r} is registered already")
    if not isinstance(cls, str) and not (isinstance(cls, type) and issubclass(cls, Runtime)):
        raise InputError(f"runtime {name!r} must be a Runtime subclass, got {cls!r}")
    _REGISTRY[name] = (cls, extra)


def runtimes() -> tuple[str, ...]:
    """The registered runtime names."""
    return tuple(_REGISTRY)


def runtime_class(name: str) -> type[Runtime]:
    """The class registered under ``name``, imported on first use.

    Raises:
        InputError: no runtime of that name.
        NotSupportedYet: its extra is not installed (naming it).
    """
    try:
        cls, extra = _REGISTRY[name]
    except (KeyError, TypeError):
        raise InputError(
            f"unknown runtime {name!r}; valid options are {list(runtimes())}"
        ) from None
    if isinstance(cls, str):
        module, _, attr = cls.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as e:
            if e.name and (e.name == "distal" or e.name.startswith("distal.")):
                raise NotSupportedYet(f"the {name!r} runtime is not in this version") from e
            fix = f"pip install 'distal[{extra}]'" if extra else f"install {e.name!r}"
            raise NotSupportedYet(f"runtime {name!r} needs {e.name!r}: {fix}") from e
        _REGISTRY[name] = (cls, extra)
    assert isinstance(cls, type)
    return cls


def get_runtime(name: str, **options: Any) -> Runtime:
    """A runtime object of the class registered under ``name``, with ``options``.

    Raises:
        InputError: an unknown runtime or option (naming it).
        NotSupportedYet: the runtime's extra is not installed (naming it).
    """
    return runtime_class(name)(**options)


__all__ = ["Runtime", "get_runtime", "register_runtime", "runtime_class", "runtimes"]
