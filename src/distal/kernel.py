"""``compile``: a schedule becomes a reusable :class:`Kernel` with its exact plan."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Any

import numpy as np

from distal.errors import DistalError, InputError, NotSupportedYet, ScheduleError
from distal.kernels.leaf import LEAVES, term_kernels
from distal.plan.engine import ROUTINGS, Engine, lower, placements_of, program, summarize
from distal.plan.ir import Plan
from distal.plan.printer import explain, program_text
from distal.plan.sinks import PlanSummary
from distal.plan.sparse import Analysis, is_sparse_schedule
from distal.plan.stats import Stats
from distal.runtime.base import Runtime, get_runtime
from distal.runtime.executable import Executable, TensorSpec, check_values, restrict
from distal.runtime.result import Result
from distal.schedule.api import Schedule
from distal.schedule.relations import Fuse, Pos


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

    def executable(self, processors: Iterable[int] | None = None) -> Executable:
        """The kernel as an :class:`~distal.runtime.executable.Executable`: plain data, all
        a runtime needs to run it (made once, then kept).

        ``processors``: only those processors' programs and the messages they exchange
        (what one MPI rank or one volunteer executes), built without the other processors'
        programs where the lowering can.

        Raises:
            InputError: a processor that does not exist.
        """
        procs = None
        if processors is not None:
            procs = tuple(sorted({self._processor(p) for p in processors}))
            if procs == tuple(range(self.nprocs)):
                procs = None
        made = self.__dict__.setdefault("_executables", {})
        got = made.get(procs)
        if got is None:
            if procs is None:
                plan, stats = self.plan, self.summary.stats
            else:
                plan = self.program(procs[0]) if len(procs) == 1 else restrict(self.plan, procs)
                stats = self._part_stats()
            stats = None if stats is None else Stats(**stats.as_dict())
            code = repr(self.schedule)
            got = made[procs] = Executable(
                plan, tuple(self.kernels), self._specs(), stats, self._key(code), code
            )
        return got

    def _part_stats(self) -> Stats | None:
        """The stats a part of the plan carries: the whole kernel's, where they are known
        without writing the whole plan."""
        return self.summary.stats

    def _specs(self) -> tuple[TensorSpec, ...]:
        """Every tensor's spec, the output first, then the inputs in the statement's order."""
        s = self.schedule
        tensors, layouts = s.tensors(), s.layouts()
        prints = getattr(self, "fingerprints", {})
        out = []
        for name in tensors:
            dist, machine = layouts[name]
            if dist is None or machine is None:
                dist, machine = None, s.machine
            out.append(TensorSpec.of(tensors[name], dist, machine, prints.get(name)))
        return tuple(out)

    def _key(self, code: str) -> str:
        """What the plan and the leaves are a function of (compiling reads nothing else):
        machine size, schedule, routing, leaves, tensors and, for a kernel bound to sparse
        patterns, their fingerprints; equal on every process that compiled the same kernel."""
        s = self.schedule
        tensors = sorted((n, t.shape, str(t.dtype)) for n, t in s.tensors().items())
        dists = sorted((n, str(d)) for n, d in s.distributions.items())
        prints = sorted(getattr(self, "fingerprints", {}).items())
        leaf = getattr(self, "leaf", None) or getattr(getattr(self, "kernel", None), "leaf", "")
        text = repr((self.nprocs, code, self.routing, leaf, tensors, dists, prints))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _run_on(self, rt: Runtime, inputs: Mapping[str, Any]) -> Result:
        """Run on ``rt``: the executable of the processors it runs, then the run."""
        try:
            exe = self.executable(rt.processors(self.nprocs))
        except DistalError as e:  # (MPI: the other ranks fail with it, never wait)
            rt.abort(e)
            raise
        return rt.run(exe, inputs)

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

    def to_mlir(self, processor: int = 0, *, distributed: bool = False, form: str = "spmd") -> str:
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
        on one host. (The rule is :func:`distal.runtime.executable.check_values`, the one
        every executable applies.)
        """
        if self.sparse is not None:
            return self.bind(inputs).check_inputs(inputs)
        specs = self._specs()
        return check_values(specs[1:], specs[0].name, inputs)

    def executable(
        self, processors: Iterable[int] | None = None, *, inputs: Mapping[str, Any] | None = None
    ) -> Executable:
        """The kernel as an :class:`~distal.runtime.executable.Executable` (see
        :meth:`Planned.executable`). A kernel with sparse inputs needs their patterns:
        ``executable(inputs=...)`` binds it to them first (as ``stats(inputs)`` does).

        Raises:
            InputError: a sparse kernel without ``inputs``, naming its sparse inputs.
        """
        if self.sparse is not None and inputs is not None:
            return self.bind(inputs).executable(processors)
        self._unbound("kernel.executable()")
        return super().executable(processors)

    def run(self, inputs: Mapping[str, Any], runtime: str = "local", **options: Any) -> Result:
        """Execute the plan on a runtime (``dl.runtimes()``) and return the output with
        measured stats."""
        with get_runtime(runtime, **options) as rt:
            if self.sparse is None:
                return self._run_on(rt, inputs)
            from distal.plan.sparse import load_patterns

            try:  # (MPI: one rank's bad pattern fails every rank together, never a hang)
                # the sparse inputs are converted (and their patterns hashed) once: binding
                # and the run then see the same arrays (a scipy matrix's values in place: a
                # binding keeps only what the patterns decide)
                arrays = load_patterns(self.sparse, inputs, copy=False)
                bound = self.bind(arrays)
            except DistalError as e:
                rt.abort(e)
                raise
            return bound._run_on(rt, {**inputs, **arrays})

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

    def to_mlir(self, processor: int = 0, *, distributed: bool = False, form: str = "spmd") -> str:
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

    def _part_stats(self) -> Stats | None:
        # a bound plan's stats are counted from the whole plan, which a part never writes
        return self.kernel.summary.stats if self.binding is None else None

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Inputs as the runtimes take them: sparse ones as SparseArrays with the bound
        patterns, dense ones as arrays of the tensors' shapes and dtypes."""
        if self.binding is None:
            return self.kernel.check_inputs(inputs)
        specs = self._specs()
        return check_values(specs[1:], specs[0].name, inputs, self.binding.arrays)

    def run(self, inputs: Mapping[str, Any], runtime: str = "local", **options: Any) -> Result:
        """Execute on a runtime; ``Result.stats`` equals :meth:`stats`."""
        if self.binding is None:
            return self.kernel.run(inputs, runtime, **options)
        with get_runtime(runtime, **options) as rt:
            return self._run_on(rt, inputs)

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
