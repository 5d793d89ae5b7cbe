"""Closed-form stats of an autoschedule candidate, without compiling it.

Exact for divisible extents with auto distributions (the tests compare it with compiled
plans); it ranks candidates cheaply before the shortlist is compiled.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Any

import numpy as np

from distal.cost.candidates import Candidate, _first_access
from distal.distribution.notation import RESTRICT, parse_distribution
from distal.distribution.partition import Placement, block_interval
from distal.lang.concrete import Statement
from distal.lang.nodes import IndexVar
from distal.plan.stats import Stats

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


@lru_cache(maxsize=256)
def _placement(shape: tuple[int, ...], dist: str, name: str, grid: tuple[int, ...]) -> Placement:
    """Candidates share most distributions; building a ``Placement`` once saves most of the
    search's time on large grids (its block tables have one entry per piece)."""
    return Placement(shape, parse_distribution(dist, name, len(shape), grid), grid)


def _owned_boxes(
    pl: Placement, gt: tuple[int, ...], view: tuple[int, ...], samples: list[tuple[int, ...]]
) -> list[tuple[tuple[int, int], ...] | None]:
    """``pl.owned_box`` of every sample processor in one vectorised query (``gt`` is the
    tensor's own grid; a sample's row-major rank names the processor on it)."""
    ranks = [sum(x * math.prod(view[a + 1 :]) for a, x in enumerate(c)) for c in samples]
    coords = np.array([_coord(r, gt) for r in ranks], np.int64).reshape(len(samples), len(gt))
    has, _, lo, hi = pl.own_arrays(coords)
    return [
        tuple((int(a), int(b)) for a, b in zip(lo[q], hi[q], strict=True)) if has[q] else None
        for q in range(len(samples))
    ]


def _messages(pl: Placement, box: tuple[tuple[int, int], ...], own: Any) -> int:
    """Owner pieces of ``box`` not inside ``own``: one message each (vectorised ``split``)."""
    lo = np.array([[a for a, _ in box]], np.int64).reshape(1, len(box))
    hi = np.array([[b for _, b in box]], np.int64).reshape(1, len(box))
    _, _, plo, phi = pl.cut(lo, hi)
    if own is None:
        return len(plo)
    olo = np.array([a for a, _ in own], np.int64)
    ohi = np.array([b for _, b in own], np.int64)
    inside = np.all((plo >= olo) & (phi <= ohi), axis=1)
    return int(len(plo) - np.count_nonzero(inside))


def _blocks_meeting(n: int, g: int, lo: int, hi: int) -> int:
    """How many of the ``g`` blocks of ``n`` (``block_interval``) meet ``[lo, hi)``."""
    if hi <= lo:
        return 0
    size = _ceil(n, g)
    last = min((hi - 1) // size, g - 1, (n - 1) // size)
    return max(0, last - lo // size + 1)


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
        elif isinstance(dist, str):
            placements[name] = (_placement(shape, dist, name, gt), gt)
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
    samples = _sample(view)
    owns = {name: _owned_boxes(pl, gt, view, samples) for name, (pl, gt) in placements.items()}
    for k, c in enumerate(samples):
        p = k
        w = m = 0
        owned = 0
        cur: dict[str, list[int]] = {}
        before = 0
        for name, idx in acc.items():
            pl, gt = placements[name]
            own = owns[name][k]
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
                    m += _messages(pl, box, own)
            else:
                box = tuple(var_range(v, c, None) for v in idx)
                if _contains(own, box):
                    sizes.append(0)
                else:
                    sizes.append(_vol(box))
                    w += _vol(box) - _meet(box, own)
                    m += _messages(pl, box, own)
            cur[name] = sizes
            recv_by[name] = recv_by.get(name, 0) + w - before
            before = w
        # Output: partial buffer, and the partial pieces this processor reduces.
        pl, gt = placements[out]
        own = owns[out][k]
        obox = tuple(var_range(v, c, None) for v in out_vars)
        contributors = 1
        for a, v in enumerate(cand.dvars):
            if v in out_vars and own is not None:
                lo, hi = own[out_vars.index(v)]
                contributors *= _blocks_meeting(ext[v], cand.grid[a], lo, hi)
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
    n = len(samples)
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
