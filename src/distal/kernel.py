"""``compile``: a schedule becomes a reusable :class:`Kernel` with its exact plan."""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np

from distal.errors import InputError, NotSupportedYet, ScheduleError
from distal.kernels.leaf import term_kernels
from distal.plan.engine import ROUTINGS, Engine, lower, placements_of, program, summarize
from distal.plan.ir import Plan
from distal.plan.printer import explain, program_text
from distal.plan.sinks import PlanSummary
from distal.plan.sparse import Analysis, is_sparse_schedule
from distal.plan.stats import Stats
from distal.runtime.inputs import dense_value
from distal.runtime.result import Result
from distal.runtime.source import check_source, is_block_source
from distal.schedule.api import Schedule
from distal.schedule.relations import Fuse, Pos

RUNTIMES = ("local", "mpi", "dask")
#: where each runtime runs a bound sparse kernel (``run(bound, inputs, **options)``)
_SPARSE_RUNTIMES = {
    "local": "distal.runtime.sparse_local",
    "mpi": "distal.runtime.mpi.sparse",
    "dask": "distal.runtime.elastic.sparse",
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


class Kernel:
    """A compiled computation: its plan, predicted stats and runtimes."""

    def __init__(self, schedule: Schedule, routing: str = "auto", params: Any = None) -> None:
        self.schedule = schedule
        self.sparse = None
        self._bound: BoundKernel | None = None
        if is_sparse_schedule(schedule):
            # the pattern enters at bind time; compile checks the schedule's rules only
            self.sparse = Analysis(schedule)
            self.dtypes = {n: t.dtype for n, t in schedule.tensors().items()}
            self.params = params
            self.routing = "direct"
            self._summaries = {}
            return
        if any(isinstance(r, Fuse | Pos) for r in schedule.relations):
            raise NotSupportedYet("fuse and pos on a dense computation are not in this version")
        placements_of(schedule)  # check every tensor's machine now, not at the first run
        self.kernels = term_kernels(schedule.statement, schedule)
        self.dtypes = {n: t.dtype for n, t in schedule.tensors().items()}
        if routing not in (*ROUTINGS, "auto"):
            raise ScheduleError(f"routing {routing!r} is not one of {[*ROUTINGS, 'auto']}")
        self._summaries: dict[str, PlanSummary] = {}
        self.params = params
        self.routing = routing if routing != "auto" else self._cheapest_routing()

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
        from distal.cost.model import DEFAULT_PARAMS, MachineParams, flops_per_iteration, stats_cost

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

    @cached_property
    def plan(self) -> Plan:
        """The exact per-processor plan (built on first use: runs need it, stats do not)."""
        return lower(self.schedule, self.routing)

    def program(self, p: int) -> Plan:
        """Processor ``p``'s own part of the plan: its instructions and every message it sends
        or receives (what a rank executes), built without the other processors' programs."""
        if not isinstance(p, int | np.integer) or isinstance(p, bool):
            raise InputError(f"program() takes a processor number, got {p!r}")
        if "plan" in self.__dict__:  # already built whole: take p's part of it
            return self.plan.restrict(int(p))
        return program(self.schedule, int(p), self.routing)

    @property
    def summary(self) -> PlanSummary:
        """Exact stats and per-tensor totals, computed without enumerating the plan."""
        return self._summary(self.routing)

    @property
    def _stats(self) -> Stats:
        return self.summary.stats

    def stats(self, inputs: Mapping[str, Any] | None = None) -> Stats:
        """Exact predicted traffic, work and memory per processor (a fresh copy).

        A kernel with sparse inputs needs their patterns: ``stats(inputs)`` reads only the
        patterns of the sparse inputs in ``inputs`` (never values); dense kernels ignore
        ``inputs``.
        """
        if self.sparse is not None:
            if inputs is None:
                raise InputError(
                    f"the stats of a sparse kernel depend on the patterns of its sparse "
                    f"input(s) {list(self.sparse.sparse_inputs)}: call stats(inputs) or "
                    "bind(inputs).stats()"
                )
            return self.bind(inputs).stats()
        return Stats(**self._stats.as_dict())  # a copy the caller may change

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

    def explain(self, processor: int | None = None) -> str:
        """The scheduled loop nest, where each tensor moves, and the per-processor table;
        with ``processor``, also that processor's program, instruction by instruction."""
        if self.sparse is not None:
            from distal.plan.sparse_text import explain_unbound

            return explain_unbound(self.sparse)
        text = explain(self.schedule, self.summary, self.routing, _bound_lines(self))
        if processor is None:
            return text
        return "\n".join([text, "", *program_text(self.program(processor), int(processor))])

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Validate run inputs; arrays are converted to the tensors' dtypes.

        An input is a numpy array (or anything ``np.asarray`` takes) or a *block
        source*: an object with a ``shape`` and ``read_block(box) -> array`` that
        produces any box of the tensor on demand, so data never has to sit whole
        on one host.
        """
        if not isinstance(inputs, Mapping):
            raise InputError(f"inputs must map tensor names to arrays, got {type(inputs).__name__}")
        tensors = self.schedule.tensors()
        st = self.schedule.statement
        need = tuple(t.name for t in st.inputs())
        for name in inputs:
            if name not in need:
                role = "the output" if name == st.output.name else "not a tensor of this kernel"
                raise InputError(f"input {name!r} is {role}; inputs are {list(need)}")
        out = {}
        for name in need:
            if name not in inputs:
                raise InputError(f"input {name!r} is missing; inputs are {list(need)}")
            t = tensors[name]
            if is_block_source(inputs[name]):
                out[name] = check_source(name, inputs[name], t.shape)
                continue
            out[name] = dense_value(name, inputs[name], t)
        return out

    def run(self, inputs: Mapping[str, Any], runtime: str = "local", **options: Any) -> Result:
        """Execute the plan on a runtime and return the output with measured stats."""
        if self.sparse is not None:
            from distal.plan.sparse import load_patterns

            if runtime != "mpi":
                # the sparse inputs are converted (and their patterns hashed) once: binding
                # and the run then see the same arrays
                arrays = load_patterns(self.sparse, inputs)
                return self.bind(arrays).run({**inputs, **arrays}, runtime, **options)
            try:  # one rank's bad pattern fails every rank together, never a hang
                arrays = load_patterns(self.sparse, inputs)
                bound = self.bind(arrays)
            except Exception as e:
                from distal.runtime.mpi.sparse import fail_together

                fail_together(e, options.get("comm"))
                raise
            return bound.run({**inputs, **arrays}, runtime, **options)
        # mpi: every rank checks its inputs inside the runtime, which agrees on the outcome
        # with the other ranks first, so one rank's bad input fails them all instead of a hang
        data = inputs if runtime == "mpi" else self.check_inputs(inputs)
        if runtime == "local":
            from distal.runtime.local import LocalRuntime

            _local_options(options)
            t0 = time.perf_counter()
            rt = LocalRuntime(self.plan, self.kernels, self.dtypes, **options)
            value, stats, _ = rt.run(data)
            return Result(value, stats, time.perf_counter() - t0, trace=rt.trace.events)
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
        """Processor x processor words matrix and per-processor bars (see ``distal.viz``)."""
        self._dense_only("plot_traffic")
        from distal.viz import plot_traffic

        return plot_traffic(self, path, **options)

    def simulate(self, network: Any = "local", **options: Any) -> Any:
        """Discrete-event simulation of the plan on a network model (see ``distal.sim``)."""
        self._dense_only("simulate")
        from distal.sim import simulate

        return simulate(self, network=network, **options)

    def _dense_only(self, what: str) -> None:
        if self.sparse is not None:
            raise NotSupportedYet(
                f"{what}() of a sparse kernel is not in this version (its plan depends on the "
                "pattern: see kernel.bind(inputs).stats() and .explain())"
            )

    def __call__(self, **inputs: Any) -> np.ndarray:
        """Shortcut: run on the local runtime and return the output."""
        return self.run(inputs).value

    def __repr__(self) -> str:
        return f"Kernel({self.schedule!r})"


class BoundKernel:
    """A kernel bound to the patterns of its sparse inputs (``Kernel.bind``).

    ``stats()`` and ``explain()`` are exact for those patterns; ``run(inputs)`` takes inputs
    with the same patterns (values may change freely) and raises ``InputError`` for a
    different pattern. Its plan and its leaves' index structure are built once.
    """

    def __init__(self, kernel: Kernel, plan: Any, fingerprints: dict[str, str]) -> None:
        self.kernel = kernel
        self.plan = plan
        self.fingerprints = fingerprints
        self._computes: list[Any] | None = None

    def stats(self) -> Stats:
        """Exact predicted stats for the bound patterns (a fresh copy)."""
        if self.plan is None:
            return self.kernel.stats()
        return Stats(**self.plan.stats.as_dict())

    def explain(self) -> str:
        """The loop nest, how the bound pattern is cut, what moves, the per-processor table."""
        if self.plan is None:
            return self.kernel.explain()
        from distal.plan.sparse_text import explain_bound

        return explain_bound(self.plan)

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Inputs as the runtimes take them: sparse ones as SparseArrays with the bound
        patterns, dense ones as arrays of the tensors' shapes and dtypes."""
        from distal.plan.sparse import load_patterns

        a = self.kernel.sparse
        if not isinstance(inputs, Mapping):
            raise InputError(f"inputs must map tensor names to arrays, got {type(inputs).__name__}")
        need = tuple(t.name for t in a.statement.inputs())
        for name in inputs:
            if name not in need:
                role = "the output" if name == a.output.name else "not a tensor of this kernel"
                raise InputError(f"input {name!r} is {role}; inputs are {list(need)}")
        arrays = load_patterns(a, inputs)
        out: dict[str, Any] = {}
        for name, arr in arrays.items():
            if arr is not self.plan.arrays[name]:
                if arr.pattern_fingerprint() != self.fingerprints[name]:
                    raise InputError(
                        f"input {name!r} has another pattern than the one this kernel was bound "
                        "to (values may change, the pattern may not): bind again"
                    )
            out[name] = arr
        dense = {n: v for n, v in inputs.items() if n not in arrays}
        for name in need:
            if name not in arrays and name not in dense:
                raise InputError(f"input {name!r} is missing; inputs are {list(need)}")
        for name, x in dense.items():
            t = a.tensors[name]
            if is_block_source(x):  # read one owned block at a time (MPI sessions' blocks)
                out[name] = check_source(name, x, t.shape)
                continue
            out[name] = dense_value(name, x, t)
        return out

    def computes(self) -> list[Any]:
        """Every processor's prepared leaves (built on first use, kept for later runs)."""
        if self._computes is None:
            from distal.runtime.sparse_exec import Compute

            self._computes = [Compute(self.plan, p) for p in range(self.plan.nprocs)]
        return self._computes

    def run(self, inputs: Mapping[str, Any], runtime: str = "local", **options: Any) -> Result:
        """Execute on a runtime; ``Result.stats`` equals :meth:`stats`."""
        if self.plan is None:
            return self.kernel.run(inputs, runtime, **options)
        if runtime == "local":
            _local_options(options)
            from distal.runtime import sparse_local

            return sparse_local.run(self.plan, self.computes(), self.check_inputs(inputs))
        if runtime in RUNTIMES:
            mod = _runtime_module(_SPARSE_RUNTIMES[runtime], runtime, "sparse kernels on ")
            return mod.run(self, inputs, **options)
        raise InputError(f"unknown runtime {runtime!r}; valid options are {list(RUNTIMES)}")

    def plot_distribution(self, tensor: Any, path: str | None = None, **options: Any) -> Any:
        """Picture of ``tensor`` over the bound pattern: a sparse tensor's stored entries as a
        spy plot coloured by owning processor, so row and non-zero cuts can be compared
        (see ``distal.viz.sparse``); dense tensors as in ``Kernel.plot_distribution``."""
        from distal.viz.sparse import plot_sparse_distribution

        return plot_sparse_distribution(self, tensor, path, **options)

    def __call__(self, **inputs: Any) -> Any:
        return self.run(inputs).value

    def __repr__(self) -> str:
        return f"BoundKernel({self.kernel.schedule!r})"


def _bound_lines(kernel: Kernel) -> list[str]:
    """Max words received against the communication lower bound, where one is known."""
    from distal.cost.bounds import statement_bound

    st = kernel.summary.stats
    b = statement_bound(kernel.schedule, st.nprocs)
    if b is None:
        return []
    w = st.max_words_received
    ratio = f"{w / b.words:.3f}" if b.words > 0 else ("1.000" if w == 0 else "inf")
    return [f"lower bound: {b.words:.1f} words per processor ({b.detail}); max / bound = {ratio}"]


def compile(schedule: Schedule, routing: str = "auto", params: Any = None) -> Kernel:
    """Compile a schedule into a :class:`Kernel`.

    ``routing`` says how messages travel: ``"direct"`` (each piece from its owner, each
    partial sum straight to its reducer), ``"broadcast"`` (binomial-tree broadcasts of
    shared pieces), ``"tree"`` (those and binomial-tree reductions of partial sums; see
    ``distal.plan.engine``) or ``"auto"``, the one the cost model predicts faster.

    ``params`` are the machine constants ``"auto"`` uses (a ``distal.cost.model.
    MachineParams``, e.g. from ``load_params(path)`` of a calibration file). Without them the
    model's fixed defaults are used, so every rank and every computer compiles the same plan:
    nothing is read from files or the environment.
    """
    return Kernel(schedule, routing, params)
