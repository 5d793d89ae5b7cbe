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


def _count_messages(
    pl: Placement,
    boxes: list[tuple[tuple[int, int], ...]],
    owns: list[tuple[tuple[int, int], ...] | None],
) -> np.ndarray:
    """For each ``boxes[r]``: owner pieces not inside ``owns[r]``, one message each.

    One vectorised ``Placement.cut`` for all of a candidate's queries on one tensor: a
    call per box cost about 50 us of numpy overhead, 60% of a whole search's time.
    """
    d = len(pl.shape)
    lo = np.array([[a for a, _ in b] for b in boxes], np.int64).reshape(len(boxes), d)
    hi = np.array([[b for _, b in bx] for bx in boxes], np.int64).reshape(len(boxes), d)
    big = np.iinfo(np.int64).max
    # no own box: nothing is inside it (an empty interval [big, -big) contains no piece)
    olo = np.array([[a for a, _ in o] if o else [big] * d for o in owns], np.int64)
    ohi = np.array([[b for _, b in o] if o else [-big] * d for o in owns], np.int64)
    rows, _, plo, phi = pl.cut(lo, hi)
    olo, ohi = olo.reshape(len(owns), d), ohi.reshape(len(owns), d)
    inside = np.all((plo >= olo[rows]) & (phi <= ohi[rows]), axis=1)
    return np.bincount(rows[~inside], minlength=len(boxes))


def _blocks_meeting(n: int, g: int, lo: int, hi: int) -> int:
    """How many of the ``g`` blocks of ``n`` (``block_interval``) meet ``[lo, hi)``."""
    if hi <= lo:
        return 0
    size = _ceil(n, g)
    last = min((hi - 1) // size, g - 1, (n - 1) // size)
    return max(0, last - lo // size + 1)


def _sample(grid: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Processors whose traffic stands for all: the grid's corners (first or last along each
    dimension) and its middle, at most ``2**len(grid) + 1`` whatever ``P`` is.

    With divisible extents a processor's stats depend only on whether each coordinate is
    the first (faces of restricted tensors sit there) or not, so the corners are exact;
    ragged blocks sit at the end, which the last corners hold. Sampling every processor of
    a small grid made ``P = 64`` (64 samples) 30x slower than ``P = 128`` (3 samples).
    """
    corners = itertools.product(*({0, g - 1} for g in grid))
    return sorted({*corners, tuple(g // 2 for g in grid)})


def estimate(st: Statement, cand: Candidate, layouts: dict[str, tuple[Any, Any]]) -> Stats:
    """Analytical per-processor ``Stats`` of a candidate, without building its plan.

    For each sample processor (the grid's corners and middle, :func:`_sample`) it
    evaluates the plan's rules in closed form: the box each tensor needs at every step
    (block intervals of the distributed variables, chunk and step slices), the owner
    blocks it meets (``Placement``), the output's contributors, and the
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
    lhs = set(out_vars)
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
    # (sample, box, own box) of every fetch, counted in messages per tensor after the loop
    queries: dict[str, list[tuple[int, tuple[tuple[int, int], ...], Any]]] = {}
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
                    queries.setdefault(name, []).append((k, box, own))
            else:
                box = tuple(var_range(v, c, None) for v in idx)
                if _contains(own, box):
                    sizes.append(0)
                else:
                    sizes.append(_vol(box))
                    w += _vol(box) - _meet(box, own)
                    queries.setdefault(name, []).append((k, box, own))
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
        # Words arriving: every contributor sends the part of its output box inside this
        # processor's own block. The output variables' blocks partition their ranges, so
        # those parts add up to the own block (within the step's slab) once per value of
        # the summed grid dimensions; this processor's own part is not a message. (Each
        # contributor sending all of ``own`` overcounts where ragged joint cuts make an
        # own block straddle two contributors' boxes.)
        # (a serial candidate distributes nothing: one contributor, nothing summed)
        dims = zip(cand.dvars, cand.grid[: len(cand.dvars)], strict=True)
        summed = math.prod(g for v, g in dims if v not in lhs)
        if out_stepped:
            oboxes = [tuple(var_range(v, c, t) for v in out_vars) for t in range(nsteps)]
            slabs = [
                tuple(var_range(v, c, t) if v is stepped else (0, ext[v]) for v in out_vars)
                for t in range(nsteps)
            ]
            incoming = [
                summed * _meet(sl, own) - _meet(b, own) for sl, b in zip(slabs, oboxes, strict=True)
            ]
            partials = [0 if direct else _vol(b) for b in oboxes]
            m += sum(others for b in oboxes if _meet(b, own))
        else:
            mine = _meet(obox, own)
            last = summed * _vol(own) - mine if own is not None else 0
            incoming = [0] * (nsteps - 1) + [last]
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
    for name, qs in queries.items():
        counts = _count_messages(placements[name][0], [b for _, b, _ in qs], [o for *_, o in qs])
        for (k, _, _), c in zip(qs, counts.tolist(), strict=True):
            msgs[k] += c
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
