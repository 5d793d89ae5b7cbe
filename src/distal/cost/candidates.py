"""The autoscheduler's search space: grid views, distributed variables, derived one-copy
distributions, serial splits (see :mod:`distal.cost.autoschedule` for the whole story),
and how a candidate becomes an ordinary :class:`Schedule`."""

from __future__ import annotations

import itertools
import keyword
import math
from dataclasses import dataclass, field

from distal.distribution.machine import Machine
from distal.lang.concrete import Statement
from distal.lang.nodes import IndexVar, Tensor
from distal.schedule.api import Schedule
from distal.schedule.api import schedule as default_nest

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
        """A label: 1d, 2d, 3d, 2.5d, with +chunk (3-D serial split) or +steps (SUMMA);
        ``serial`` when nothing is distributed (a statement without index variables)."""
        if not self.dvars:
            return "serial"
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
        if not self.dvars:
            return f"serial on processor 0 of grid {self.grid}"
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
    if not result:
        # No variable to distribute (only order-0 tensors, e.g. ``",,->"``): one processor
        # computes, every auto tensor restricted to it.
        dists = {name: f"{''.join(_dim_names(acc[name]))} -> 0" for name in acc if name in auto}
        result.append(Candidate((P,), (), None, None, dists, dict.fromkeys(dists, True)))
    return result


# -- building the schedule ------------------------------------------------------------------


def _fresh(base: str, taken: set[str]) -> IndexVar:
    """A variable named ``base`` (or ``base2``, ...): not taken, and not a Python keyword
    (``i`` + ``s`` is ``is``), so the schedule prints as code that runs."""
    name, n = base, 1
    while name in taken or keyword.iskeyword(name):
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
    if cand.dvars:
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
