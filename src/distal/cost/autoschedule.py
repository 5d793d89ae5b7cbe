"""``dl.autoschedule``: pick a schedule and one-copy distributions by the cost model.

Search space (a *candidate*):

* **grid view**: every ordered factorisation of ``P`` into 1, 2 or 3 factors (the
  schedule's machine; tensors with a given distribution keep their own machine);
* **distributed variables**: an ordered choice of distinct statement variables, one
  per grid dimension (output variables: owner-computes; a summed variable: partial
  sums reduced at their owners -- 1-D over ``k``, 2.5-D and 3-D);
* **distributions** of ``dist="auto"`` tensors, derived (not searched): each grid
  dimension cuts the tensor dimension its variable indexes; a grid dimension whose
  variable the tensor lacks ("free") cuts another dimension further, so the
  processor's own block lies inside the box it needs and nothing is replicated
  (``B "ik -> ii"`` in 2-D, ``"ik -> iik"`` in 3-D). Joint cuts put the more
  significant machine dimension first, so a free dimension may only refine a
  variable on an earlier machine dimension, or an undistributed one; when no
  dimension qualifies the tensor is restricted to a face (``"0"``);
* **serial split of the summed variable** (one-copy 3-D, COSMA-style): the last
  distributed variable ``k`` is divided into ``s`` serial chunks before being
  distributed, and a free dimension of size ``s`` cuts ``k`` jointly
  (``B "ik -> ikk"``, ``C "kj -> kjk"``): every tensor is spread over the whole grid
  and still only owned data is skipped, which is what lets 3-D meet the bound;
* **serial steps** (SUMMA-style): an undistributed variable divided into ``s`` steps
  with the tensors it indexes communicated per step; same words, smaller buffers --
  this is how a memory limit is met. Step sizes: powers of two.

Replication (2.5-D's extra copies) is never given to ``dist="auto"`` tensors (the
API promises one copy); a 3-D grid ``a x a x c`` with ``c < a`` is the one-copy 2.5-D
analogue, whose extra memory shows up as fetch and partial-sum buffers, and the
memory limit bounds ``c`` through ``peak_words``. Tensors with a given distribution,
replicated or not, keep it.

Ranking: every candidate first gets a closed-form estimate of its traffic, messages,
flops and peak memory (:func:`estimate`; exact for divisible extents with auto
distributions, checked against plans by the tests). Traffic comes first: a candidate
whose busiest processor receives more than ``traffic_slack`` (default 1.1) times the
least any feasible candidate achieves ranks after every candidate within it; inside
each of the two tiers the modelled time decides. Why not the modelled time alone:
the plans are point-to-point, so a schedule that gathers a whole operand (the 1-D
grid of a product with one huge dimension, which meets the lower bound) pays one
latency per owner, and with cluster latencies that made much less traffic look
slower than 2.5x the bound on a 2-D grid. Real collectives aggregate those messages;
the volume cannot be aggregated away, so it is the quantity the scheduler must get
right. The best of the ranking form a shortlist that is compiled
(``dl.compile(s).stats()``) and ranked again the same way on the exact stats, as
long as the plans stay small (``plan_budget`` processor-steps; plan construction
costs ``P * steps``). Beyond it (e.g. ``P = 4096`` with 16 serial steps) the closed
form decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distal.cost.candidates import _FIELDS, Candidate, build, candidates
from distal.cost.estimate import estimate
from distal.cost.model import Cost, MachineParams, flops_per_iteration, load_params, stats_cost
from distal.distribution.machine import Machine
from distal.errors import ScheduleError
from distal.lang.concrete import Statement, concretize
from distal.lang.nodes import Tensor
from distal.plan.stats import Stats
from distal.progress import Progress
from distal.schedule.api import Schedule
from distal.schedule.api import schedule as default_nest

__all__ = ["Candidate", "Choice", "autoschedule", "build", "candidates", "estimate", "search"]

#: seconds a search runs before it shows progress (on a terminal; ``DISTAL_PROGRESS=0``
#: silences it): most searches take well under a second and should print nothing
PROGRESS_DELAY = 1.0

# -- the search -----------------------------------------------------------------------------


@dataclass
class Choice:
    """A ranked candidate: its schedule, modelled cost, and whether a plan measured it."""

    candidate: Candidate
    schedule: Schedule
    cost: Cost
    from_plan: bool
    estimate: Cost

    def __repr__(self) -> str:
        src = "plan" if self.from_plan else "closed form"
        return (
            f"Choice({self.candidate.describe()}: {self.cost.seconds:.3e} s modelled ({src}), "
            f"max words {self.cost.max_words}, peak {self.cost.peak_bytes} B)"
        )


def _itemsize(st: Statement) -> int:
    return max((t.dtype.itemsize for t in (st.output, *st.inputs())), default=8)


def search(
    T: Tensor,
    machine: Machine,
    memory_limit: int | None = None,
    params: MachineParams | None = None,
    evaluate: str = "auto",
    plan_budget: int = 60_000,
    shortlist: int = 6,
    traffic_slack: float = 1.1,
) -> list[Choice]:
    """All feasible choices, best first (the first is what :func:`autoschedule` returns).

    ``evaluate``: ``"plan"`` compiles the whole shortlist, ``"model"`` none (closed form
    only), ``"auto"`` compiles while the shortlist's plans total at most
    ``plan_budget`` units of ``P * steps + messages`` (about 0.1 ms each to build).
    ``traffic_slack`` (>= 1): candidates receiving at most this factor times the least
    traffic of any feasible candidate rank before all others (module docstring);
    ``math.inf`` ranks by modelled time alone.
    """
    if not isinstance(T, Tensor):
        raise ScheduleError(f"autoschedule() takes the output tensor, got {T!r}")
    if not isinstance(machine, Machine):
        raise ScheduleError(f"autoschedule: {machine!r} is not a dl.Machine")
    if evaluate not in ("auto", "plan", "model"):
        raise ScheduleError(f"autoschedule: evaluate must be auto, plan or model; got {evaluate!r}")
    if memory_limit is not None and (
        isinstance(memory_limit, bool)
        or not isinstance(memory_limit, int | float)
        or memory_limit <= 0
    ):
        raise ScheduleError(f"autoschedule: memory_limit must be bytes > 0, got {memory_limit!r}")
    if T.assignment is None:
        raise ScheduleError(f"tensor {T.name!r} has no computation to schedule")
    if (
        isinstance(traffic_slack, bool)
        or not isinstance(traffic_slack, int | float)
        or not traffic_slack >= 1
    ):
        raise ScheduleError(f"autoschedule: traffic_slack must be >= 1, got {traffic_slack!r}")
    params = params if params is not None else load_params()
    st = concretize(T.assignment)
    P = machine.size
    base = default_nest(T)
    layouts = base.layouts()
    auto = set()
    for name, (dist, m) in layouts.items():
        if dist == "auto":
            auto.add(name)
        elif m is not None and m.size != P:
            raise ScheduleError(
                f"autoschedule: tensor {name!r} is distributed over {m!r} ({m.size} processors) "
                f"but the machine has {P}"
            )
    cands = candidates(st, P, auto, steps=memory_limit is not None)
    with Progress(len(cands) + shortlist, label="autoschedule", delay=PROGRESS_DELAY) as bar:
        return _rank(T, st, P, cands, layouts, bar, memory_limit, params, evaluate,
                     plan_budget, shortlist, traffic_slack)  # fmt: skip


def _rank(
    T: Tensor,
    st: Statement,
    P: int,
    cands: list[Candidate],
    layouts: dict[str, tuple[Any, Any]],
    bar: Progress,
    memory_limit: int | None,
    params: MachineParams,
    evaluate: str,
    plan_budget: int,
    shortlist: int,
    traffic_slack: float,
) -> list[Choice]:
    """:func:`search` after its checks: estimate every candidate, compile the shortlist,
    rank; ``bar`` counts candidates estimated, then shortlisted plans built."""
    fpi = flops_per_iteration(st)
    isz = _itemsize(st)
    scored = []
    for n, c in enumerate(cands):
        e = estimate(st, c, layouts)  # uniform lists: cost one processor
        est = stats_cost(Stats(*([getattr(e, f)[0]] for f in _FIELDS)), fpi, params, isz)
        scored.append((est.seconds, c.steps, len(c.grid), est, c))
        bar.update(n + 1, note=f"estimating {len(cands)} candidates")
    fits = lambda cost: memory_limit is None or cost.peak_bytes <= memory_limit  # noqa: E731
    # Closed-form peaks are close but not exact; keep near misses for the plans to decide.
    pool = [x for x in scored if memory_limit is None or x[3].peak_bytes <= 1.25 * memory_limit]
    if not pool:
        least = min(scored, key=lambda x: x[3].peak_bytes) if scored else None
        raise _too_big(T, memory_limit, least[3].peak_bytes if least else None)
    least_words = min(x[3].max_words for x in pool)
    pool.sort(key=lambda x: (_tier(x[3].max_words, least_words, traffic_slack), *x[:3]))
    from distal.kernel import compile as compile_kernel

    chosen: list[Choice] = []
    spent = 0
    for _, nsteps, _, est, c in pool:
        if len(chosen) >= shortlist:
            break
        s = build(T, c)
        work = P * nsteps + P * est.max_messages  # plan construction cost, roughly
        if evaluate == "plan" or (evaluate == "auto" and spent + work <= plan_budget):
            spent += work
            # ranked as the closed forms count (direct); compiling with routing="auto" later
            # can only lower the busiest processor's load
            bar.update(len(cands) + len(chosen), note=f"planning {c.describe()}", force=True)
            direct = compile_kernel(s, routing="direct")
            cost = stats_cost(direct.stats(), fpi, params, isz)
            if fits(cost):
                chosen.append(Choice(c, s, cost, True, est))
        elif fits(est):
            chosen.append(Choice(c, s, est, False, est))
    if not chosen:
        least = min(pool, key=lambda x: x[3].peak_bytes)
        raise _too_big(T, memory_limit, least[3].peak_bytes)
    # The plans' exact words may differ from the closed forms (ragged blocks).
    least_words = min(least_words, *(ch.cost.max_words for ch in chosen))
    chosen.sort(
        key=lambda ch: (
            _tier(ch.cost.max_words, least_words, traffic_slack),
            ch.cost.seconds,
            ch.candidate.steps,
            len(ch.candidate.grid),
        )
    )
    return chosen


def _tier(words: int, least: int, slack: float) -> int:
    """0 for traffic within ``slack`` of the least achievable, else 1 (ranked after)."""
    return 0 if words <= slack * least else 1


def _too_big(T: Tensor, limit: float | None, least: float | None) -> ScheduleError:
    if limit is None:  # cannot happen (candidates() always proposes one); never blame a limit
        return ScheduleError(f"autoschedule: found no candidate schedule for tensor {T.name!r}")
    need = f"; the leanest candidate needs about {int(least)} bytes" if least else ""
    return ScheduleError(
        f"autoschedule: no schedule for tensor {T.name!r} fits memory_limit={limit} bytes "
        f"per processor{need}"
    )


def autoschedule(
    T: Tensor,
    machine: Machine,
    memory_limit: int | None = None,
    *,
    params: MachineParams | None = None,
    evaluate: str = "auto",
    plan_budget: int = 60_000,
    traffic_slack: float = 1.1,
) -> Schedule:
    """A complete schedule for ``T``'s computation on ``machine``, chosen by the cost model.

    Tensors declared with ``dist="auto"`` get one-copy distributions, attached with
    ``Schedule.place`` (so ``repr`` shows them); tensors with a distribution keep it.
    ``memory_limit`` is bytes per processor: the chosen plan's ``peak_words`` times
    the widest element size stays within it, or ``ScheduleError`` says nothing fits.
    ``params`` are the cost model's constants (default: the fixed ``hdr`` constants of
    :func:`load_params`, never a file, so the choice is the same on every computer).
    ``traffic_slack``: see :func:`search`.
    """
    return search(
        T, machine, memory_limit, params, evaluate, plan_budget, traffic_slack=traffic_slack
    )[0].schedule


def schedule_code(s: Schedule) -> str:
    """Pasteable code for a schedule, assigned to ``s`` (``repr`` declares its variables)."""
    return repr(s).replace("(dl.schedule(", "s = (dl.schedule(", 1)
