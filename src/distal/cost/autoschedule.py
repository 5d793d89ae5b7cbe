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
* **serial split of the summed variable** (DESIGN.md, 3-D / COSMA-style): the last
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
distributions, checked against plans by the tests). The best by modelled time form
a shortlist that is compiled (``dl.compile(s).stats()``) and ranked by the cost
model on the exact stats, as long as the plans stay small (``plan_budget``
processor-steps; plan construction costs ``P * steps``). Beyond it (e.g. ``P =
4096`` with 16 serial steps) the closed form decides.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from distal.cost.model import Cost, MachineParams, flops_per_iteration, load_params, stats_cost
from distal.distribution.machine import Machine
from distal.distribution.notation import RESTRICT, parse_distribution
from distal.distribution.partition import Placement, block_interval
from distal.errors import ScheduleError
from distal.lang.concrete import Statement, concretize
from distal.lang.nodes import IndexVar, Tensor
from distal.plan.stats import Stats
from distal.schedule.api import Schedule
from distal.schedule.api import schedule as default_nest

__all__ = ["Candidate", "Choice", "autoschedule", "candidates", "estimate", "search"]

_FIELDS = (
    "words_received",
    "words_sent",
    "messages_received",
    "messages_sent",
    "iterations",
    "peak_words",
)
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


# -- candidates -----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Candidate:
    """One point of the search space (see the module docstring)."""

    grid: tuple[int, ...]
    dvars: tuple[IndexVar, ...]
    chunk: tuple[IndexVar, int] | None = None
    step: tuple[IndexVar, int] | None = None
    dists: dict[str, str] = field(default_factory=dict)
    aligned: dict[str, bool] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """Serial steps of the plan."""
        if self.chunk:
            return self.chunk[1]
        return self.step[1] if self.step else 1

    @property
    def family(self) -> str:
        """A label: 1d, 2d, 3d, 2.5d, with +chunk (3-D serial split) or +steps (SUMMA)."""
        d = len([g for g in self.grid if g > 1]) or 1
        name = f"{d}d"
        if d == 3 and sorted(self.grid)[0] < sorted(self.grid)[1]:
            name = "2.5d" if self.grid[-1] < min(self.grid[:-1]) else "3d"
        if self.chunk:
            name += "+chunk"
        if self.step:
            name += "+steps"
        return name

    def describe(self) -> str:
        pairs = ", ".join(f"{v.name}:{g}" for v, g in zip(self.dvars, self.grid, strict=True))
        extra = ""
        if self.chunk:
            extra = f", {self.chunk[0].name} in {self.chunk[1]} serial chunks"
        if self.step:
            extra = f", {self.step[0].name} in {self.step[1]} steps"
        return f"{self.family} grid {self.grid} ({pairs}{extra})"


def factorizations(P: int, max_dims: int = 3) -> list[tuple[int, ...]]:
    """Ordered factorisations of ``P`` into 1..max_dims factors, each >= 2 (``(1,)`` for 1)."""
    if P == 1:
        return [(1,)]
    out: list[tuple[int, ...]] = []

    def rec(rest: int, acc: tuple[int, ...]) -> None:
        if rest == 1:
            out.append(acc)
            return
        if len(acc) == max_dims:
            return
        for f in range(2, rest + 1):
            if rest % f == 0:
                rec(rest // f, (*acc, f))

    rec(P, ())
    return out


def _first_access(st: Statement) -> dict[str, tuple[IndexVar, ...]]:
    acc: dict[str, tuple[IndexVar, ...]] = {st.output.name: tuple(st.lhs_vars)}
    for term in st.terms:
        for f in term.factors:
            acc.setdefault(f.tensor.name, tuple(f.indices))
    for t in st.inputs():
        acc.setdefault(t.name, ())
    return acc


def _dim_names(idx: tuple[IndexVar, ...]) -> list[str]:
    names = [v.name for v in idx]
    if all(len(n) == 1 and n.isalpha() for n in names) and len(set(names)) == len(names):
        return names
    return list(LETTERS[: len(idx)])


def derive_dist(
    idx: tuple[IndexVar, ...],
    grid: tuple[int, ...],
    dvars: tuple[IndexVar, ...],
    extent: dict[IndexVar, int],
    chunk: tuple[IndexVar, int] | None,
) -> tuple[str, bool]:
    """A one-copy distribution of a tensor indexed by ``idx`` (see module docstring).

    Returns the distribution string and whether the processor's own block lies
    inside the box it needs (False: restricted to a face or misaligned chunks).
    """
    names = _dim_names(idx)
    rhs: list[str] = []
    cuts: list[list[int]] = [[] for _ in idx]
    aligned = True
    dim_of = {v: a for a, v in enumerate(dvars)}
    for a, v in enumerate(dvars):
        if v in idx:
            t = idx.index(v)
            rhs.append(names[t])
            cuts[t].append(a)
            continue
        # A free machine dimension: refine some tensor dimension.
        choice = None
        if chunk is not None and chunk[0] in idx:
            t = idx.index(chunk[0])
            if dim_of[chunk[0]] > a and grid[a] == chunk[1] and not cuts[t]:
                choice = t
        if choice is None:
            best = -1.0
            for t, w in enumerate(idx):
                if chunk is not None and w is chunk[0]:
                    continue
                if w in dim_of and dim_of[w] >= a:
                    continue
                size = extent[w] / math.prod(grid[x] for x in cuts[t]) if cuts[t] else extent[w]
                # Undistributed dimensions first (no joint cut), then the biggest pieces.
                score = size * (2.0 if w not in dim_of else 1.0)
                if score > best:
                    best, choice = score, t
        if choice is None:
            rhs.append("0")
            aligned = False
        else:
            rhs.append(names[choice])
            cuts[choice].append(a)
    if chunk is not None and chunk[0] in idx:
        t = idx.index(chunk[0])
        if len(cuts[t]) != 2:
            aligned = False
    return f"{''.join(names)} -> {''.join(rhs)}", aligned


def candidates(
    st: Statement,
    P: int,
    auto: set[str],
    steps: bool = False,
    max_step: int = 64,
    tiny: bool = False,
) -> list[Candidate]:
    """Every candidate of the search space for statement ``st`` on ``P`` processors.

    Grids larger than a variable's extent (empty blocks) are left out unless ``tiny``
    (used when nothing else exists, e.g. extents smaller than ``P``).
    """
    acc = _first_access(st)
    variables = list(st.variables)
    out_vars = set(st.lhs_vars)
    result: list[Candidate] = []
    for grid in factorizations(P):
        d = len(grid)
        if d > len(variables):
            continue
        for dvars in itertools.permutations(variables, d):
            if not tiny and any(st.extent[v] < g for v, g in zip(dvars, grid, strict=True)):
                continue
            opts: list[tuple[tuple[IndexVar, int] | None, tuple[IndexVar, int] | None]] = [
                (None, None)
            ]
            last = dvars[-1]
            if d >= 2 and last not in out_vars:
                for s in sorted({grid[a] for a in range(d - 1)}):
                    if s > 1 and st.extent[last] >= s * grid[-1]:
                        opts.append(((last, s), None))
            if steps:
                for w in variables:
                    if w in dvars:
                        continue
                    s = 2
                    while s <= min(st.extent[w], max_step):
                        opts.append((None, (w, s)))
                        s *= 2
            for chunk, step in opts:
                dists, aligned = {}, {}
                for name, idx in acc.items():
                    if name in auto:
                        dists[name], aligned[name] = derive_dist(idx, grid, dvars, st.extent, chunk)
                if chunk and not all(aligned[n] for n in auto if chunk[0] in acc[n]):
                    continue
                result.append(Candidate(grid, dvars, chunk, step, dists, aligned))
    if not result and not tiny:
        return candidates(st, P, auto, steps, max_step, tiny=True)
    return result


# -- building the schedule ------------------------------------------------------------------


def _fresh(base: str, taken: set[str]) -> IndexVar:
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}{n}"
    taken.add(name)
    return IndexVar(name)


def build(T: Tensor, cand: Candidate) -> Schedule:
    """The schedule (with ``place`` for auto tensors) of a candidate."""
    s = default_nest(T)
    st = s.statement
    view = Machine(*cand.grid)
    for name, dist in cand.dists.items():
        s = s.place(name, dist, view)
    taken = {v.name for v in st.variables}
    dlist = list(cand.dvars)
    step_loop: IndexVar | None = None
    stepped: IndexVar | None = None
    if cand.chunk:
        c, parts = cand.chunk
        cs, cr = _fresh(f"{c.name}s", taken), _fresh(f"{c.name}r", taken)
        s = s.divide(c, cs, cr, parts)
        dlist[dlist.index(c)] = cr
        step_loop, stepped = cs, c
    outers = [_fresh(f"{v.name}o", taken) for v in cand.dvars]
    inners = [_fresh(f"{v.name}i", taken) for v in cand.dvars]
    s = s.distribute(dlist, outers, inners, view)
    if cand.step:
        w, parts = cand.step
        ws, wi = _fresh(f"{w.name}s", taken), _fresh(f"{w.name}i", taken)
        s = s.divide(w, ws, wi, parts)
        step_loop, stepped = ws, w
    if step_loop is not None:
        serial = [v for v in s.loops if v not in s.processor_loops]
        if serial[0] is not step_loop:
            s = s.reorder([step_loop, *(v for v in serial if v is not step_loop)])
        acc = _first_access(st)
        names = [n for n, idx in acc.items() if stepped in idx]
        if names:
            s = s.communicate(names, step_loop)
    return s


# -- closed-form estimate -------------------------------------------------------------------


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _coord(p: int, grid: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for g in reversed(grid):
        out.append(p % g)
        p //= g
    return tuple(reversed(out))


def _vol(box: tuple[tuple[int, int], ...] | None) -> int:
    return 0 if box is None else math.prod(max(0, b - a) for a, b in box)


def _meet(x: tuple[tuple[int, int], ...], y: tuple[tuple[int, int], ...] | None) -> int:
    if y is None:
        return 0
    return math.prod(max(0, min(b, d) - max(a, c)) for (a, b), (c, d) in zip(x, y, strict=True))


def _contains(
    outer: tuple[tuple[int, int], ...] | None, inner: tuple[tuple[int, int], ...]
) -> bool:
    return outer is not None and all(
        a <= c and d <= b for (a, b), (c, d) in zip(outer, inner, strict=True)
    )


def _sample(grid: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Processors whose traffic stands for all: every one on small grids, else the first,
    the last and the middle one along the diagonal (ragged blocks sit at the end)."""
    if math.prod(grid) <= 64:
        return list(itertools.product(*(range(g) for g in grid)))
    return sorted({tuple(0 for _ in grid), tuple(g // 2 for g in grid), tuple(g - 1 for g in grid)})


def estimate(st: Statement, cand: Candidate, layouts: dict[str, tuple[Any, Any]]) -> Stats:
    """Analytical per-processor ``Stats`` of a candidate, without building its plan.

    For each sample processor (all of them up to 64, else the grid's corners and
    middles) it evaluates the plan's rules in closed form: the box each tensor needs at
    every step (block intervals of the distributed variables, chunk and step slices),
    the owner blocks it meets (``Placement``), the output's contributors, and the
    memory tracker of ``plan/stats.py``. The busiest sample stands for every
    processor. Exact for the candidates' own one-copy distributions when extents
    divide evenly (the tests compare with compiled plans); an estimate otherwise.
    """
    P = math.prod(cand.grid)
    view = cand.grid
    dim_of = {v: a for a, v in enumerate(cand.dvars)}
    acc = _first_access(st)
    ext = st.extent
    chunk_v, s_chunk = cand.chunk if cand.chunk else (None, 1)
    step_v, s_step = cand.step if cand.step else (None, 1)
    nsteps = cand.steps
    out = st.output.name
    out_vars = tuple(st.lhs_vars)
    placements: dict[str, tuple[Placement, tuple[int, ...]]] = {}
    for name, idx in acc.items():
        dist, machine = layouts[name]
        if name in cand.dists:
            dist, gt = cand.dists[name], view
        elif dist is None or machine is None:
            dist, gt = None, view
        else:
            gt = machine.shape
        shape = tuple(ext[v] for v in idx) if name != out else st.output.shape
        if dist is None:
            from distal.distribution.notation import whole_on_processor0

            placements[name] = (Placement(shape, whole_on_processor0(len(shape), gt), gt), gt)
        else:
            placements[name] = (
                Placement(shape, parse_distribution(dist, name, len(idx), gt), gt),
                gt,
            )

    def var_range(v: IndexVar, c: tuple[int, ...], t: int | None) -> tuple[int, int]:
        n = ext[v]
        if v is chunk_v:
            per = _ceil(n, s_chunk)
            lo, hi = block_interval(per, cand.grid[dim_of[v]], c[dim_of[v]])
            if t is None:  # hull over all chunks
                return (min(lo, n), min((s_chunk - 1) * per + hi, n))
            return (min(t * per + lo, n), min(t * per + hi, n))
        if v in dim_of:
            return block_interval(n, cand.grid[dim_of[v]], c[dim_of[v]])
        if v is step_v and t is not None:
            per = _ceil(n, s_step)
            return (min(t * per, n), min((t + 1) * per, n))
        return (0, n)

    stepped = chunk_v or step_v
    recv_by: dict[str, int] = {}
    words = [0] * P
    msgs = [0] * P
    peaks = [0] * P

    def span(v: IndexVar, c: tuple[int, ...]) -> int:
        if v is chunk_v:
            return sum(b - a for a, b in (var_range(v, c, t) for t in range(s_chunk)))
        a, b = var_range(v, c, None)
        return b - a

    iters = math.prod(span(v, (0,) * len(view)) for v in st.variables)
    for k, c in enumerate(_sample(view)):
        p = k
        rank = 0
        for x, g in zip(c, view, strict=True):
            rank = rank * g + x
        w = m = 0
        owned = 0
        cur: dict[str, list[int]] = {}
        before = 0
        for name, idx in acc.items():
            pl, gt = placements[name]
            own = pl.owned_box(_coord(rank, gt)) if gt != view else pl.owned_box(c)
            owned += _vol(own)
            if name == out:
                continue
            sizes = []
            if stepped is not None and stepped in idx:
                for t in range(nsteps):
                    box = tuple(var_range(v, c, t) for v in idx)
                    if _contains(own, box):
                        sizes.append(0)
                        continue
                    sizes.append(_vol(box))
                    w += _vol(box) - _meet(box, own)
                    m += sum(1 for _, piece in pl.split(box) if not _contains(own, piece))
            else:
                box = tuple(var_range(v, c, None) for v in idx)
                if _contains(own, box):
                    sizes.append(0)
                else:
                    sizes.append(_vol(box))
                    w += _vol(box) - _meet(box, own)
                    m += sum(1 for _, piece in pl.split(box) if not _contains(own, piece))
            cur[name] = sizes
            recv_by[name] = recv_by.get(name, 0) + w - before
            before = w
        # Output: partial buffer, and the partial pieces this processor reduces.
        pl, gt = placements[out]
        own = pl.owned_box(_coord(rank, gt)) if gt != view else pl.owned_box(c)
        obox = tuple(var_range(v, c, None) for v in out_vars)
        contributors = 1
        for a, v in enumerate(cand.dvars):
            if v in out_vars and own is not None:
                lo, hi = own[out_vars.index(v)]
                contributors *= sum(
                    1
                    for x in range(cand.grid[a])
                    if hi > lo
                    and min(hi, block_interval(ext[v], cand.grid[a], x)[1])
                    > max(lo, block_interval(ext[v], cand.grid[a], x)[0])
                )
            elif v not in out_vars:
                contributors *= cand.grid[a]
        out_stepped = stepped is not None and stepped in out_vars
        direct = _contains(own, obox) and contributors <= 1
        others = max(0, contributors - (1 if _meet(obox, own) else 0))
        if out_stepped:
            oboxes = [tuple(var_range(v, c, t) for v in out_vars) for t in range(nsteps)]
            incoming = [others * _meet(b, own) for b in oboxes]
            partials = [0 if direct else _vol(b) for b in oboxes]
            m += sum(others for b in oboxes if _meet(b, own))
        else:
            incoming = [0] * (nsteps - 1) + [others * _vol(own) if own is not None else 0]
            partials = [0 if direct else _vol(obox)] * nsteps
            m += others
        w += sum(incoming)
        recv_by[out] = recv_by.get(out, 0) + sum(incoming)
        # The memory tracker: buffers of step t, prefetch of t+1, partials, incoming.
        peak = owned
        for t in range(nsteps):
            now = owned + partials[t] + incoming[t]
            for sizes in cur.values():
                if len(sizes) == 1:
                    now += sizes[0]
                else:
                    now += sizes[t] + (sizes[t + 1] if t + 1 < nsteps else 0)
            peak = max(peak, now)
        words[p], msgs[p], peaks[p] = w, m, peak
    n = len(_sample(view))
    worst = max(range(n), key=lambda q: (words[q], peaks[q]))
    top_w, top_m, top_p = words[worst], max(msgs[:n]), max(peaks[:n])
    # Sent: what all receivers get, shared by the processors that own the tensor (an owner
    # restricted to a face, or processor 0, serves many: a hot spot).
    sent = 0.0
    for name, total in recv_by.items():
        pl, gt = placements[name]
        holders = P
        for dist, _off, g in pl.layers:
            for a, rule in enumerate(dist.rules):
                if rule.kind == RESTRICT:
                    holders //= g[a]
        sent += total / n * P / max(holders, 1)
    top_s = int(max(sent, 0))
    return Stats([top_w] * P, [top_s] * P, [top_m] * P, [top_m] * P, [iters] * P, [top_p] * P)


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
) -> list[Choice]:
    """All feasible choices, best first (the first is what :func:`autoschedule` returns).

    ``evaluate``: ``"plan"`` compiles the whole shortlist, ``"model"`` none (closed form
    only), ``"auto"`` compiles while the shortlist's plans total at most
    ``plan_budget`` units of ``P * steps + messages`` (about 0.1 ms each to build).
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
    fpi = flops_per_iteration(st)
    isz = _itemsize(st)
    cands = candidates(st, P, auto, steps=memory_limit is not None)
    scored = []
    for c in cands:
        e = estimate(st, c, layouts)  # uniform lists: cost one processor
        est = stats_cost(Stats(*([getattr(e, f)[0]] for f in _FIELDS)), fpi, params, isz)
        scored.append((est.seconds, c.steps, len(c.grid), est, c))
    scored.sort(key=lambda x: x[:3])
    fits = lambda cost: memory_limit is None or cost.peak_bytes <= memory_limit  # noqa: E731
    # Closed-form peaks are close but not exact; keep near misses for the plans to decide.
    pool = [x for x in scored if memory_limit is None or x[3].peak_bytes <= 1.25 * memory_limit]
    if not pool:
        least = min(scored, key=lambda x: x[3].peak_bytes) if scored else None
        raise _too_big(T, memory_limit, least[3].peak_bytes if least else None)
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
            cost = stats_cost(compile_kernel(s).stats(), fpi, params, isz)
            if fits(cost):
                chosen.append(Choice(c, s, cost, True, est))
        elif fits(est):
            chosen.append(Choice(c, s, est, False, est))
    if not chosen:
        least = min(pool, key=lambda x: x[3].peak_bytes)
        raise _too_big(T, memory_limit, least[3].peak_bytes)
    chosen.sort(key=lambda ch: (ch.cost.seconds, ch.candidate.steps, len(ch.candidate.grid)))
    return chosen


def _too_big(T: Tensor, limit: float | None, least: float | None) -> ScheduleError:
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
) -> Schedule:
    """A complete schedule for ``T``'s computation on ``machine``, chosen by the cost model.

    Tensors declared with ``dist="auto"`` get one-copy distributions, attached with
    ``Schedule.place`` (so ``repr`` shows them); tensors with a distribution keep it.
    ``memory_limit`` is bytes per processor: the chosen plan's ``peak_words`` times
    the widest element size stays within it, or ``ScheduleError`` says nothing fits.
    ``params`` are the cost model's constants (default: :func:`load_params`).
    """
    return search(T, machine, memory_limit, params, evaluate, plan_budget)[0].schedule


def schedule_code(s: Schedule) -> str:
    """Pasteable code for a schedule, assigned to ``s`` (``repr`` declares its variables)."""
    return repr(s).replace("(dl.schedule(", "s = (dl.schedule(", 1)
