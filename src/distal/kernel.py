"""``compile``: a schedule becomes a reusable :class:`Kernel` with its exact plan."""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np

from distal.errors import InputError, NotSupportedYet, ResourceError, ScheduleError
from distal.kernels.leaf import LEAVES, term_kernels
from distal.plan.engine import ROUTINGS, Engine, lower, placements_of, program, summarize
from distal.plan.ir import Plan
from distal.plan.printer import explain, program_text
from distal.plan.sinks import PlanSummary
from distal.plan.sparse import Analysis, is_sparse_schedule
from distal.plan.stats import Stats
from distal.runtime.result import Result
from distal.runtime.source import check_source, is_block_source
from distal.schedule.api import Schedule
from distal.schedule.relations import Fuse, Pos
from distal.values import dense_value

RUNTIMES = ("local", "mpi", "dask")
#: where each runtime runs a bound sparse kernel (``run(bound, inputs, **options)``); every
#: runtime runs every plan with its one executor
_SPARSE_RUNTIMES = {
    "mpi": "distal.runtime.mpi",
    "dask": "distal.runtime.dask",
}


def _local_options(options: Mapping[str, Any]) -> None:
    unknown = set(options) - {"trace", "progress"}
    if unknown:
        raise InputError(
            f"unknown option(s) {sorted(unknown)} for the local runtime; "
            "valid options are ['progress', 'trace']"
        )


def _runtime_module(path: str, runtime: str, what: str) -> Any:
    """The module running kernels on ``runtime``; a missing one or a missing extra is a
    ``NotSupportedYet`` saying which."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("distal"):
            raise NotSupportedYet(f"{what}the {runtime!r} runtime is not in this version") from e
        raise NotSupportedYet(
            f"runtime {runtime!r} needs {e.name!r}: pip install 'distal[{runtime}]'"
        ) from e


class Planned:
    """What every kernel with a plan offers, dense or bound to its sparse inputs' patterns:
    the plan, one processor's program, the exact stats, the explanation, the simulation and
    the traffic picture, all read off one :class:`~distal.plan.ir.Plan` and its
    :class:`~distal.plan.sinks.PlanSummary`, so they agree with each other.

    Subclasses give ``schedule``, ``dtypes``, ``routing``, ``kernels`` (the dense leaves; none
    for a plan over stored entries) and the three hooks :meth:`_whole_plan`,
    :meth:`_program` and :attr:`summary`.
    """

    schedule: Schedule
    dtypes: dict[str, Any]
    routing: str
    kernels: tuple[Any, ...]

    @property
    def summary(self) -> PlanSummary:
        """Exact stats and per-tensor totals of the plan."""
        raise NotImplementedError

    def _whole_plan(self) -> Plan:
        raise NotImplementedError

    def _program(self, p: int) -> Plan:
        raise NotImplementedError

    def _text(self) -> str:
        raise NotImplementedError

    @property
    def nprocs(self) -> int:
        """Processors of the machine the plan runs on."""
        return self.summary.stats.nprocs

    @cached_property
    def plan(self) -> Plan:
        """The exact per-processor plan (built on first use: runs need it, stats do not)."""
        return self._whole_plan()

    def program(self, p: int) -> Plan:
        """Processor ``p``'s own part of the plan: its instructions and every message it sends
        or receives (what a rank executes), built without the other processors' programs
        where the lowering can.

        Raises:
            InputError: ``p`` is not a processor of the machine.
        """
        p = self._processor(p)
        # kept: a rank runs the same kernel again and again (an iterative solver's SpMV),
        # and building its program each time cost more than the run (50 ms of 90 for a
        # 5 M-entry SpMV on one rank)
        whole = "plan" in self.__dict__  # already built whole: p's part of it
        programs = self.__dict__.setdefault("_parts" if whole else "_programs", {})
        got = programs.get(p)
        if got is None:
            got = programs[p] = self.plan.restrict(p) if whole else self._program(p)
        return got

    def _processor(self, p: Any) -> int:
        """``p`` as a processor number, or the one error every inspection method raises."""
        n = self.nprocs
        if not isinstance(p, int | np.integer) or isinstance(p, bool) or not 0 <= p < n:
            raise InputError(
                f"processor {p!r} does not exist: the machine has {n} processor"
                f"{'s' if n != 1 else ''} (0..{n - 1})"
            )
        return int(p)

    def stats(self, inputs: Mapping[str, Any] | None = None) -> Stats:
        """Exact predicted traffic, work and memory per processor (a fresh copy)."""
        return Stats(**self.summary.stats.as_dict())

    def explain(self, processor: int | None = None) -> str:
        """The scheduled loop nest, where each tensor moves, and the per-processor table;
        with ``processor``, also that processor's program, instruction by instruction."""
        if processor is not None:
            processor = self._processor(processor)
        text = self._text()
        if processor is None:
            return text
        return "\n".join([text, "", *program_text(self.program(processor), processor)])

    def plot_traffic(self, path: str | None = None, **options: Any) -> Any:
        """Processor x processor words matrix and per-processor bars (see ``distal.viz``)."""
        self.summary  # noqa: B018 -- an unbound sparse kernel says what it needs first
        from distal.viz import plot_traffic

        return plot_traffic(self, path, **options)

    def simulate(self, network: Any = "local", **options: Any) -> Any:
        """Discrete-event simulation of the plan on a network model (see ``distal.sim``)."""
        self.summary  # noqa: B018 -- an unbound sparse kernel says what it needs first
        from distal.sim import simulate

        return simulate(self, network=network, **options)

    def to_mlir(
        self, processor: int = 0, *, distributed: bool = False, form: str = "spmd"
    ) -> str:
        """Processor ``processor``'s leaf computation as MLIR text: a ``func.func`` of
        ``linalg.generic`` ops on its blocks (see ``distal.mlir.export``); with
        ``distributed=True`` the whole distributed program as one module (``shard.grid``,
        each tensor's ``shard.sharding``, the schedule as SPMD code around the leaves;
        ``form="global"``: the statement on whole tensors with their shardings, see
        ``distal.mlir.distributed``).

        Raises:
            InputError: ``processor`` is not a processor of the machine, or an unknown form.
        """
        if distributed:
            from distal.mlir.distributed import to_mlir_distributed

            return to_mlir_distributed(self, form)
        p = self._processor(processor)
        from distal.mlir.export import to_mlir

        return to_mlir(self, p)

    def __call__(self, **inputs: Any) -> Any:
        """Shortcut: run on the local runtime and return the output."""
        return self.run(inputs).value  # type: ignore[attr-defined]


class Kernel(Planned):
    """A compiled computation: its plan, predicted stats and runtimes.

    A kernel with sparse inputs is compiled without their patterns (its schedule's rules are
    checked); its plan exists once it is bound to them (:meth:`bind`), and everything that
    reads the plan says so until then.
    """

    def __init__(
        self, schedule: Schedule, routing: str = "auto", params: Any = None, leaf: str = "default"
    ) -> None:
        if not isinstance(schedule, Schedule):
            raise ScheduleError(
                f"compile() takes a Schedule (from dl.schedule(tensor)), got {schedule!r}"
            )
        if leaf not in LEAVES:
            raise ScheduleError(f"leaf {leaf!r} is not one of {list(LEAVES)}")
        self.schedule = schedule
        self.leaf = leaf
        self.sparse: Analysis | None = None
        self._bound: BoundKernel | None = None
        self.dtypes = {n: t.dtype for n, t in schedule.tensors().items()}
        self.params = params
        self._summaries: dict[str, PlanSummary] = {}
        if routing not in (*ROUTINGS, "auto"):
            raise ScheduleError(f"routing {routing!r} is not one of {[*ROUTINGS, 'auto']}")
        if is_sparse_schedule(schedule):
            if leaf != "default":
                raise NotSupportedYet(
                    f"leaf={leaf!r} compiles dense leaves; a kernel with sparse inputs runs "
                    "its leaves over stored entries (leaf='default')"
                )
            # the pattern enters at bind time; compile checks the schedule's rules only
            self.sparse = Analysis(schedule)
            self.kernels = ()
            # "auto" is direct: the cost model's choice compares every routing's stats, which
            # a sparse kernel has only once bound (its plan written once per routing);
            # "broadcast" and "tree" route the fetches of dense inputs (plan/bound.py)
            self.routing = "direct" if routing == "auto" else routing
            return
        if any(isinstance(r, Fuse | Pos) for r in schedule.relations):
            raise NotSupportedYet("fuse and pos on a dense computation are not in this version")
        placements_of(schedule)  # check every tensor's machine now, not at the first run
        if leaf.startswith("iree"):
            from distal.kernels.iree import available
            from distal.mlir.types import element_type

            available(leaf)
            for name, dtype in self.dtypes.items():
                element_type(dtype, name)
        self.kernels = term_kernels(schedule.statement, schedule, leaf)
        self.routing = routing if routing != "auto" else self._cheapest_routing()

    def _unbound(self, what: str) -> None:
        """An unbound sparse kernel has no plan yet: say which patterns it needs."""
        if self.sparse is not None:
            raise InputError(
                f"{what} of a sparse kernel depends on the patterns of its sparse input(s) "
                f"{list(self.sparse.sparse_inputs)}: bind them first "
                f"(kernel.bind(inputs).{what.split('(')[0].split('.')[-1]}...)"
            )

    def _summary(self, routing: str) -> PlanSummary:
        if routing not in self._summaries:
            self._summaries[routing] = summarize(self.schedule, routing)
        return self._summaries[routing]

    def _all_summaries(self) -> dict[str, PlanSummary]:
        """Every routing's stats, from one walk of the engine (what ``auto`` compares)."""
        missing = [r for r in ROUTINGS if r not in self._summaries]
        if missing:
            self._summaries.update(Engine(self.schedule).summaries(tuple(missing)))
        return self._summaries

    def _cheapest_routing(self) -> str:
        """The routing the cost model predicts faster (direct on a tie: fewer hops).

        Communication costs at least what the busiest processor moves over the whole run
        (the model's per-processor totals) and, since steps run in lockstep, at least the
        sum over steps of each step's busiest processor (an owner serving a whole row in
        one step is a hot spot even when every processor serves as much over all steps);
        the larger of the two is used.
        """
        from distal.costmodel.seconds import (
            DEFAULT_PARAMS,
            MachineParams,
            flops_per_iteration,
            stats_cost,
        )

        params = DEFAULT_PARAMS if self.params is None else self.params
        if not isinstance(params, MachineParams):
            raise ScheduleError(
                f"params must be a distal.cost.model.MachineParams, got {params!r} "
                "(load a calibration with distal.cost.model.load_params(path))"
            )
        fpi = flops_per_iteration(self.schedule.statement)
        summaries = self._all_summaries()

        def seconds(routing: str) -> float:
            summary = summaries[routing]
            totals = stats_cost(summary.stats, fpi, params)
            steps = summary.step_comm_seconds(params.alpha, params.beta)
            # both are lower bounds on the time: the busiest step, and the busiest processor
            return max(steps or 0.0, totals.comm_seconds) + totals.compute_seconds

        best = "direct"
        for routing in ROUTINGS[1:]:  # fewer relays first: ties keep the simpler plan
            if seconds(routing) < seconds(best) * (1 - 1e-9):
                best = routing
        return best

    @property
    def summary(self) -> PlanSummary:
        """Exact stats and per-tensor totals, computed without enumerating the plan."""
        self._unbound("kernel.summary")
        return self._summary(self.routing)

    @property
    def nprocs(self) -> int:
        if self.sparse is not None:
            return self.sparse.nprocs
        return self.schedule.machine.size if self.schedule.machine is not None else 1

    def _whole_plan(self) -> Plan:
        self._unbound("kernel.plan")
        return lower(self.schedule, self.routing)

    def _program(self, p: int) -> Plan:
        return program(self.schedule, p, self.routing)

    def program(self, p: int) -> Plan:
        self._unbound("kernel.program(p)")
        return super().program(p)

    def _text(self) -> str:
        self._unbound("kernel.explain()")
        return explain(self.schedule, self.summary, self.routing, _bound_lines(self))

    def stats(self, inputs: Mapping[str, Any] | None = None) -> Stats:
        """Exact predicted traffic, work and memory per processor (a fresh copy).

        A kernel with sparse inputs needs their patterns: ``stats(inputs)`` reads only the
        patterns of the sparse inputs in ``inputs`` (never values); dense kernels ignore
        ``inputs``.
        """
        if self.sparse is not None and inputs is not None:
            return self.bind(inputs).stats()
        self._unbound("kernel.stats()")
        return super().stats()

    def bind(self, inputs: Mapping[str, Any]) -> BoundKernel:
        """The kernel bound to the patterns of its sparse inputs: the exact plan for them.

        Only the patterns are read. Binding again to inputs with the same patterns returns
        the same bound kernel, so iterative solvers bind once.
        """
        if self.sparse is None:
            return BoundKernel(self, None, {})
        from distal.plan.sparse import bind, load_patterns

        arrays = load_patterns(self.sparse, inputs)
        prints = {n: a.pattern_fingerprint() for n, a in arrays.items()}
        if self._bound is not None and self._bound.fingerprints == prints:
            return self._bound
        self._bound = BoundKernel(self, bind(self.sparse, arrays), prints)
        return self._bound

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Validate run inputs; arrays are converted to the tensors' dtypes.

        An input is a numpy array (or anything ``np.asarray`` takes) or a *block
        source*: an object with a ``shape`` and ``read_block(box) -> array`` that
        produces any box of the tensor on demand, so data never has to sit whole
        on one host.
        """
        return _check_inputs(self.schedule.statement, self.schedule.tensors(), inputs, {})

    def run(self, inputs: Mapping[str, Any], runtime: str = "local", **options: Any) -> Result:
        """Execute the plan on a runtime and return the output with measured stats."""
        if self.sparse is not None:
            from distal.plan.sparse import load_patterns

            if runtime != "mpi":
                # the sparse inputs are converted (and their patterns hashed) once: binding
                # and the run then see the same arrays (a scipy matrix's values in place:
                # a binding keeps only what the patterns decide)
                arrays = load_patterns(self.sparse, inputs, copy=False)
                return self.bind(arrays).run({**inputs, **arrays}, runtime, **options)
            try:  # one rank's bad pattern fails every rank together, never a hang
                arrays = load_patterns(self.sparse, inputs)
                bound = self.bind(arrays)
            except Exception as e:
                from distal.runtime.mpi.entry import fail_together

                fail_together(e, options.get("comm"))
                raise
            return bound.run({**inputs, **arrays}, runtime, **options)
        _check_memory(self, runtime, options)
        # mpi: every rank checks its inputs inside the runtime, which agrees on the outcome
        # with the other ranks first, so one rank's bad input fails them all instead of a hang
        data = inputs if runtime == "mpi" else self.check_inputs(inputs)
        if runtime == "local":
            _local_options(options)
            return _run_local(self.plan, self.kernels, self.dtypes, data, options)
        if runtime in RUNTIMES:
            mod = _runtime_module(f"distal.runtime.{runtime}", runtime, "")
            return mod.run(self, data, **options)
        raise InputError(f"unknown runtime {runtime!r}; valid options are {list(RUNTIMES)}")

    def plot_distribution(self, tensor: Any, path: str | None = None, **options: Any) -> Any:
        """Picture of ``tensor``'s blocks coloured by owner (see ``distal.viz``)."""
        if self.sparse is not None:
            raise InputError(
                "the distribution of a sparse kernel's tensors depends on the pattern: "
                "kernel.bind(inputs).plot_distribution(tensor)"
            )
        from distal.viz import plot_distribution

        return plot_distribution(self, tensor, path, **options)

    def plot_traffic(self, path: str | None = None, **options: Any) -> Any:
        self._unbound("kernel.plot_traffic()")
        return super().plot_traffic(path, **options)

    def to_mlir(
        self, processor: int = 0, *, distributed: bool = False, form: str = "spmd"
    ) -> str:
        self._unbound("kernel.to_mlir()")
        return super().to_mlir(processor, distributed=distributed, form=form)

    def simulate(self, network: Any = "local", **options: Any) -> Any:
        self._unbound("kernel.simulate()")
        return super().simulate(network, **options)

    def __repr__(self) -> str:
        return f"Kernel({self.schedule!r})"


class BoundKernel(Planned):
    """A kernel bound to the patterns of its sparse inputs (``Kernel.bind``).

    It has every method of :class:`Kernel`, read off the one plan the binding produced:
    ``stats()``, ``explain()``, ``plan``, ``program(p)``, ``simulate()`` and ``plot_traffic()``
    agree with each other and with what every runtime measures. ``run(inputs)`` takes
    inputs with the same patterns (values may change freely) and raises ``InputError`` for a
    different pattern. Its whole plan is written once, on first use (the local, Dask and
    simulated runtimes and ``stats()`` read it); ``program(p)`` before that writes only
    processor ``p``'s part, so an MPI rank never writes the other ranks' programs.

    ``binding`` is the lowering's per-processor view of the patterns (what each processor
    visits, needs and contributes), which the plan was written from.
    """

    def __init__(self, kernel: Kernel, binding: Any, fingerprints: dict[str, str]) -> None:
        self.kernel = kernel
        self.binding = binding
        self.fingerprints = fingerprints
        self.schedule = kernel.schedule
        self.dtypes = kernel.dtypes
        self.routing = kernel.routing
        self.kernels = kernel.kernels

    @cached_property
    def _bound_summary(self) -> PlanSummary:
        """The bound plan's exact stats, counted from the whole plan (built for them)."""
        from distal.plan.bound import summarize

        return summarize(self.plan)

    @property
    def summary(self) -> PlanSummary:
        if self.binding is None:
            return self.kernel.summary
        return self._bound_summary

    @property
    def nprocs(self) -> int:
        if self.binding is None:
            return self.kernel.nprocs
        return int(self.binding.nprocs)

    def _whole_plan(self) -> Plan:
        if self.binding is None:
            return self.kernel.plan
        from distal.plan.bound import emit

        return emit(self.binding, self.routing)

    def _program(self, p: int) -> Plan:
        if self.binding is None:
            return self.kernel.program(p)
        from distal.plan.bound import program

        return program(self.binding, p, self.routing)

    def _text(self) -> str:
        if self.binding is None:
            return self.kernel.explain()
        from distal.plan.sparse_text import explain_bound

        return explain_bound(self.binding, self._bound_summary)

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Inputs as the runtimes take them: sparse ones as SparseArrays with the bound
        patterns, dense ones as arrays of the tensors' shapes and dtypes."""
        if self.binding is None:
            return self.kernel.check_inputs(inputs)
        from distal.plan.sparse import load_patterns

        a = self.kernel.sparse
        assert a is not None
        if not isinstance(inputs, Mapping):
            raise InputError(f"inputs must map tensor names to arrays, got {type(inputs).__name__}")
        _check_names(a.statement, inputs)
        arrays = load_patterns(a, inputs, copy=False)  # read during this run only
        for name, arr in arrays.items():
            if arr is not self.binding.arrays[name]:
                if arr.pattern_fingerprint() != self.fingerprints[name]:
                    raise InputError(
                        f"input {name!r} has another pattern than the one this kernel was bound "
                        "to (values may change, the pattern may not): bind again"
                    )
        dense = {n: v for n, v in inputs.items() if n not in arrays}
        return _check_inputs(a.statement, a.tensors, dense, arrays)

    def run(self, inputs: Mapping[str, Any], runtime: str = "local", **options: Any) -> Result:
        """Execute on a runtime; ``Result.stats`` equals :meth:`stats`."""
        if self.binding is None:
            return self.kernel.run(inputs, runtime, **options)
        _check_memory(self, runtime, options)
        if runtime == "local":
            _local_options(options)
            return _run_local(self.plan, (), self.dtypes, self.check_inputs(inputs), options)
        if runtime in RUNTIMES:
            mod = _runtime_module(_SPARSE_RUNTIMES[runtime], runtime, "sparse kernels on ")
            # dask: the driver reads checked inputs; mpi: every rank checks its own
            data = self.check_inputs(inputs) if runtime == "dask" else inputs
            return mod.run(self, data, **options)
        raise InputError(f"unknown runtime {runtime!r}; valid options are {list(RUNTIMES)}")

    def plot_distribution(self, tensor: Any, path: str | None = None, **options: Any) -> Any:
        """Picture of ``tensor`` over the bound pattern: a sparse tensor's stored entries as a
        spy plot coloured by owning processor, so row and non-zero cuts can be compared
        (see ``distal.viz.sparse``); dense tensors as in ``Kernel.plot_distribution``."""
        if self.binding is None:
            return self.kernel.plot_distribution(tensor, path, **options)
        from distal.viz.sparse import plot_sparse_distribution

        return plot_sparse_distribution(self, tensor, path, **options)

    def __repr__(self) -> str:
        return f"BoundKernel({self.kernel.schedule!r})"


def _check_memory(kernel: Any, runtime: str, options: dict[str, Any]) -> None:
    """Refuse a run whose predicted peak exceeds a processor's memory
    (:func:`distal.runtime.limits.check_memory`), taking the ``memory_limit`` option out of
    ``options``. Under MPI a rank that refuses fails every rank together."""
    from distal.runtime.limits import check_memory

    limit = options.pop("memory_limit", None)
    if runtime == "mpi" and getattr(kernel, "binding", None) is not None:
        return  # a rank writes only its own part of a bound plan; stats() would write it all
    if runtime != "mpi":
        check_memory(kernel, runtime, limit, client=options.get("client"))
        return
    try:
        check_memory(kernel, runtime, limit)
    except ResourceError as e:
        from distal.runtime.mpi.entry import fail_together

        fail_together(e, options.get("comm"))
        raise


def _check_names(st: Any, inputs: Mapping[str, Any]) -> tuple[str, ...]:
    """The statement's input names; an unknown name or the output is an ``InputError``."""
    need = tuple(t.name for t in st.inputs())
    for name in inputs:
        if name not in need:
            role = "the output" if name == st.output.name else "not a tensor of this kernel"
            raise InputError(f"input {name!r} is {role}; inputs are {list(need)}")
    return need


def _check_inputs(
    st: Any, tensors: Mapping[str, Any], inputs: Mapping[str, Any], arrays: Mapping[str, Any]
) -> dict[str, Any]:
    """Every input of ``st`` checked: ``arrays`` (sparse inputs, already read) as they are,
    the others dense arrays in their tensors' shapes and dtypes, or block sources."""
    if not isinstance(inputs, Mapping):
        raise InputError(f"inputs must map tensor names to arrays, got {type(inputs).__name__}")
    need = _check_names(st, inputs)
    out: dict[str, Any] = dict(arrays)
    for name in need:
        if name in arrays:
            continue
        if name not in inputs:
            raise InputError(f"input {name!r} is missing; inputs are {list(need)}")
        t = tensors[name]
        x = inputs[name]
        if is_block_source(x):  # read one owned block at a time (sessions' blocks)
            out[name] = check_source(name, x, t.shape)
            continue
        out[name] = dense_value(name, x, t)
    return out


def _run_local(
    plan: Plan, kernels: Any, dtypes: dict[str, Any], data: dict[str, Any], options: dict
) -> Result:
    """Any plan on the local runtime."""
    from distal.runtime.local import LocalRuntime

    t0 = time.perf_counter()
    rt = LocalRuntime(plan, kernels, dtypes, **options)
    value, stats, _ = rt.run(data)
    return Result(value, stats, time.perf_counter() - t0, trace=rt.trace.events)


def _bound_lines(kernel: Kernel) -> list[str]:
    """Max words received against the communication lower bound, where one is known."""
    from distal.costmodel.bounds import statement_bound

    st = kernel.summary.stats
    b = statement_bound(kernel.schedule, st.nprocs)
    if b is None:
        return []
    w = st.max_words_received
    ratio = f"{w / b.words:.3f}" if b.words > 0 else ("1.000" if w == 0 else "inf")
    return [f"lower bound: {b.words:.1f} words per processor ({b.detail}); max / bound = {ratio}"]


def compile(
    schedule: Schedule, routing: str = "auto", params: Any = None, leaf: str = "default"
) -> Kernel:
    """Compile a schedule into a :class:`Kernel`.

    ``routing`` says how messages travel: ``"direct"`` (each piece from its owner, each
    partial sum straight to its reducer), ``"broadcast"`` (binomial-tree broadcasts of
    shared pieces), ``"tree"`` (those and binomial-tree reductions of partial sums; see
    ``distal.plan.engine``) or ``"auto"``, the one the cost model predicts faster.

    ``params`` are the machine constants ``"auto"`` uses (a ``distal.cost.model.
    MachineParams``, e.g. from ``load_params(path)`` of a calibration file). Without them the
    model's fixed defaults are used, so every rank and every computer compiles the same plan:
    nothing is read from files or the environment.

    ``leaf`` chooses the routines of the dense leaves: ``"default"`` (BLAS, opt_einsum) or
    ``"iree"`` (each leaf shape compiled by IREE for the CPU, see ``distal.kernels.iree``;
    ``pip install 'distal[mlir]'``) or ``"iree-cuda"`` (the same modules compiled for and
    run on a CUDA device; a ``NotSupportedYet`` where IREE sees none). The plan, stats and
    traffic do not depend on it.
    """
    return Kernel(schedule, routing, params, leaf)
