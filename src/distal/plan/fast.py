"""Exact plan statistics without enumerating the plan: vectorised over processors.

``kernel.stats()`` must be cheap at thousands of processors, where a plan has
millions of messages. This module computes the same numbers as
``plan_stats(lower(schedule))`` — words, messages, iterations, peak words, per
level and per tensor — step by step with numpy arrays over all processors:

* bounds inference runs on arrays (one interval per processor, the same
  interval arithmetic as :meth:`Bounds.hull`);
* a needed box is cut along owner blocks with ``searchsorted``; the pieces of all
  processors are enumerated as flat arrays only to attribute words to senders;
* iterations per processor are the product over statement variables of the size
  of each variable's set with only the processor loops fixed (the loops of a
  processor visit each of its points exactly once, and rotations only permute).

The enumerated plan stays the runtimes' input; tests check both agree.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from distal.distribution.notation import RESTRICT
from distal.distribution.partition import Placement
from distal.lang.nodes import IndexVar
from distal.plan.ir import FETCH, FINAL, PARTIAL
from distal.plan.lower import placements_of
from distal.plan.stats import Stats
from distal.schedule.api import Schedule
from distal.schedule.bounds import Bounds
from distal.schedule.relations import Divide, Rotate

Arr = np.ndarray


@dataclass
class Summary:
    """What ``explain`` and ``stats`` need: exact stats and totals per tensor and kind."""

    stats: Stats
    moved: dict[tuple[str, str], list[int]]  # (tensor, kind) -> [words, messages]
    nsteps: int
    # per step (the final phase last) and processor: words in, words out, messages in, out;
    # None when steps x processors is too large to keep
    per_step: np.ndarray | None = None

    def step_comm_seconds(self, alpha: float, beta: float) -> float | None:
        """Communication time if every step waits for its busiest processor (BSP):
        ``sum over steps of max over processors of alpha * messages + beta * words``."""
        if self.per_step is None:
            return None
        wi, wo, mi, mo = self.per_step
        per = alpha * np.maximum(mi, mo) + beta * np.maximum(wi, wo)
        return float(per.max(axis=1).sum()) if per.size else 0.0


class _Blocks:
    """Vectorised ownership queries for one placement."""

    def __init__(self, pl: Placement) -> None:
        self.pl = pl
        self.order = len(pl.shape)
        self.bl, self.bh, self.bid = [], [], []
        for d in range(self.order):
            ivs = [(b, lo, hi) for b, (lo, hi) in enumerate(pl.bounds[d]) if hi > lo]
            self.bid.append(np.array([b for b, _, _ in ivs], dtype=np.int64))
            self.bl.append(np.array([lo for _, lo, _ in ivs], dtype=np.int64))
            self.bh.append(np.array([hi for _, _, hi in ivs], dtype=np.int64))
        self.lo_of = [np.array([lo for lo, _ in pl.bounds[d]], np.int64) for d in range(self.order)]
        self.hi_of = [np.array([hi for _, hi in pl.bounds[d]], np.int64) for d in range(self.order)]
        self.nblocks = tuple(pl.pieces(d) for d in range(self.order))

    def coords(self, ranks: Arr) -> Arr:
        """Coordinates of processors on this placement's grid, shape ``(n, grid ndim)``."""
        return np.stack(np.unravel_index(ranks, self.pl.grid), axis=1).astype(np.int64)

    def own(self, coords: Arr) -> tuple[Arr, Arr, Arr, Arr]:
        """``(has, block numbers, lo, hi)`` of the blocks processors at ``coords`` own."""
        n = len(coords)
        has = np.ones(n, bool)
        idx = np.zeros((n, self.order), np.int64)
        for dist, off, g in self.pl.layers:
            for m, r in enumerate(dist.rules):
                if r.kind == RESTRICT:
                    has &= coords[:, off + m] == r.coord
            for d, ms in enumerate(dist.cuts(self.order)):
                piece = np.zeros(n, np.int64)
                for m in ms:
                    piece = piece * g[m] + coords[:, off + m]
                idx[:, d] = idx[:, d] * math.prod(g[m] for m in ms) + piece
        lo = np.zeros((n, self.order), np.int64)
        hi = np.zeros((n, self.order), np.int64)
        for d in range(self.order):
            lo[:, d], hi[:, d] = self.lo_of[d][idx[:, d]], self.hi_of[d][idx[:, d]]
        return has, idx, lo, hi

    def source(self, blk: Arr, recv: Arr) -> Arr:
        """Coordinates of the replica of each block serving each receiver (``source_for``)."""
        fixed = recv.copy()
        rest = blk.copy()
        for li in reversed(range(len(self.pl.layers))):
            dist, off, g = self.pl.layers[li]
            for m, r in enumerate(dist.rules):
                if r.kind == RESTRICT:
                    fixed[:, off + m] = r.coord
            for d, ms in enumerate(dist.cuts(self.order)):
                radix = self.pl.radix[d][li]
                piece = rest[:, d] % radix
                rest[:, d] //= radix
                for m in reversed(ms):
                    fixed[:, off + m] = piece % g[m]
                    piece //= g[m]
        return fixed

    def rank(self, coords: Arr) -> Arr:
        """Row-major processor numbers of grid coordinates."""
        if coords.shape[1] == 0:
            return np.zeros(len(coords), np.int64)
        return np.ravel_multi_index(tuple(coords.T), self.pl.grid).astype(np.int64)

    def pieces(self, lo: Arr, hi: Arr) -> tuple[Arr, Arr, Arr, Arr]:
        """Cut boxes ``[lo, hi)`` along blocks: ``(row, block numbers, lo, hi)`` per piece."""
        n = len(lo)
        firsts, cnts = [], []
        total = np.ones(n, np.int64)
        for d in range(self.order):
            first = np.searchsorted(self.bh[d], lo[:, d], side="right")
            last = np.searchsorted(self.bl[d], hi[:, d], side="left")
            cnt = np.maximum(last - first, 0)
            firsts.append(first)
            cnts.append(cnt)
            total *= cnt
        rows = np.repeat(np.arange(n), total)
        k = np.arange(len(rows)) - np.repeat(np.cumsum(total) - total, total)
        blk = np.zeros((len(rows), self.order), np.int64)
        plo = np.zeros((len(rows), self.order), np.int64)
        phi = np.zeros((len(rows), self.order), np.int64)
        for d in reversed(range(self.order)):
            c = cnts[d][rows]
            b = firsts[d][rows] + k % np.maximum(c, 1)
            k = k // np.maximum(c, 1)
            blk[:, d] = self.bid[d][b]
            plo[:, d] = np.maximum(lo[rows, d], self.bl[d][b])
            phi[:, d] = np.minimum(hi[rows, d], self.bh[d][b])
        return rows, blk, plo, phi


def _tree_parents(root: Arr, member: Arr, key: Arr) -> Arr:
    """Parent of each member in the binomial tree of its group (see ``passes.routing``).

    Rows with equal ``key`` form a group rooted at ``root``; members are ordered by
    processor number, node ``i`` (1-based) hangs under node ``i - 2**floor(log2(i))``.
    """
    n = len(member)
    if n == 0:
        return root.copy()
    order = np.lexsort((member, *key.T[::-1]))
    ks = key[order]
    first = np.ones(n, bool)
    first[1:] = np.any(ks[1:] != ks[:-1], axis=1)
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    i = np.arange(n) - start + 1
    parent = i - (1 << (np.floor(np.log2(i)).astype(np.int64)))
    ms = member[order]
    sorted_parent = np.where(parent == 0, root[order], ms[np.maximum(start + parent - 1, 0)])
    out = np.empty(n, np.int64)
    out[order] = sorted_parent
    return out


def _vol(lo: Arr, hi: Arr) -> Arr:
    return np.prod(np.maximum(hi - lo, 0), axis=1) if lo.shape[1] else np.ones(len(lo), np.int64)


class _VecHull:
    """:meth:`Bounds.hull` on arrays of loop values (one entry per processor)."""

    def __init__(self, b: Bounds, n: int) -> None:
        self.b, self.n = b, n

    def __call__(
        self, v: IndexVar, fixed: dict[IndexVar, Arr | int], memo: dict
    ) -> tuple[Arr, Arr]:
        if v in memo:
            return memo[v]
        b, n = self.b, self.b.extent[v]
        if v in b.loops:
            if v in fixed:
                x = np.asarray(fixed[v], np.int64)
                ok = (x >= 0) & (x < n)
                out = (np.where(ok, x, 0), np.where(ok, x + 1, 0))
            else:
                out = (np.int64(0), np.int64(n))
        else:
            r = b.defined_by[v]
            if isinstance(r, Rotate):
                lo, hi = self(r.result, fixed, memo)
                length = hi - lo
                a = (lo + sum(np.asarray(fixed[x], np.int64) for x in r.by)) % max(n, 1)
                whole = (length >= n) | (a + length > n)
                empty = length <= 0
                out = (
                    np.where(empty | whole, 0, a),
                    np.where(empty, 0, np.where(whole, n, a + length)),
                )
            else:
                stride = b.extent[r.inner] if isinstance(r, Divide) else r.size
                olo, ohi = self(r.outer, fixed, memo)
                ilo, ihi = self(r.inner, fixed, memo)
                lo = np.maximum(olo * stride + ilo, 0)
                hi = np.minimum((ohi - 1) * stride + ihi, n)
                empty = (ohi <= olo) | (ihi <= ilo) | (hi <= lo)
                out = (np.where(empty, 0, lo), np.where(empty, 0, hi))
        out = (np.broadcast_to(out[0], (self.n,)), np.broadcast_to(out[1], (self.n,)))
        memo[v] = out
        return out


class _Summarizer:
    def __init__(self, s: Schedule, routing: str = "direct") -> None:
        self.s = s
        self.routing = routing
        st = self.st = s.statement
        self.machine = s.machine
        self.P = self.machine.size
        self.placements = placements_of(s)
        self.blocks = {name: _Blocks(pl) for name, pl in self.placements.items()}
        self.bounds = Bounds(s)
        procs = s.processor_loops
        rest = [v for v in s.loops if v not in procs]
        self.depth = {}
        for name in self.placements:
            v = s.comm_var(name)
            self.depth[name] = 0 if v is None or v in procs else rest.index(v) + 1
        self.step_loops = rest[: max(self.depth.values(), default=0)]
        self.steps = list(itertools.product(*(range(s.extent[v]) for v in self.step_loops)))
        self.S = len(self.steps)
        self.active = np.arange(self.P) if s.levels else np.zeros(1, np.int64)
        self.A = len(self.active)
        mcoords = np.stack(np.unravel_index(self.active, self.machine.shape), axis=1)
        self.proc_vals = {v: mcoords[:, k] for k, v in enumerate(procs)} if s.levels else {}
        lhs = set(st.lhs_vars)
        self.gates = [
            tuple(v for v in st.variables if v not in lhs and v not in t.summed) for t in st.terms
        ]
        self.hull = _VecHull(self.bounds, self.A)
        nlev = self.machine.nlevels
        self.stats = Stats.zeros(self.P, nlev)
        self.arr = {
            "wr": np.zeros(self.P, np.int64),
            "ws": np.zeros(self.P, np.int64),
            "mr": np.zeros(self.P, np.int64),
            "ms": np.zeros(self.P, np.int64),
            "lv": np.zeros((nlev, self.P), np.int64),
        }
        self.moved: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.load = np.zeros((self.S, self.P), np.int64)  # memory beyond owned blocks, per step
        small = (self.S + 1) * self.P <= 2_000_000
        self.per_step = np.zeros((4, self.S + 1, self.P), np.int64) if small else None

    # -- helpers --------------------------------------------------------------------------

    def record(
        self, name: str, kind: str, src: Arr, dst: Arr, words: Arr, step: Arr | int = 0
    ) -> None:
        """Count messages (arrays of equal length) sent at ``step``."""
        if self.per_step is not None:
            ps = self.per_step
            np.add.at(ps[0], (step, dst), words)
            np.add.at(ps[1], (step, src), words)
            np.add.at(ps[2], (step, dst), 1)
            np.add.at(ps[3], (step, src), 1)
        a = self.arr
        np.add.at(a["wr"], dst, words)
        np.add.at(a["ws"], src, words)
        np.add.at(a["mr"], dst, 1)
        np.add.at(a["ms"], src, 1)
        np.add.at(a["lv"], (self.levels_of(src, dst), dst), words)
        self.moved[name, kind][0] += int(words.sum())
        self.moved[name, kind][1] += len(words)

    def levels_of(self, src: Arr, dst: Arr) -> Arr:
        m = self.machine
        if m.nlevels == 1:
            return np.zeros(len(src), np.int64)
        cs = np.stack(np.unravel_index(src, m.shape), axis=1)
        cd = np.stack(np.unravel_index(dst, m.shape), axis=1)
        level = np.full(len(src), 0, np.int64)
        found = np.zeros(len(src), bool)
        for k in range(m.nlevels):
            dims = list(m.level_dims(k))
            diff = np.any(cs[:, dims] != cd[:, dims], axis=1) & ~found
            level[diff] = k
            found |= diff
        return level

    def hulls(self, vals: tuple[int, ...]) -> tuple[dict, dict]:
        fixed: dict[IndexVar, Arr | int] = dict(self.proc_vals)
        fixed.update(zip(self.step_loops, vals, strict=False))
        return fixed, {}

    def alive(self, fixed: dict, memo: dict) -> Arr:
        """Processors with at least one iteration below the fixed loops."""
        ok = np.ones(self.A, bool)
        for v in self.st.variables:
            lo, hi = self.hull(v, fixed, memo)
            ok &= hi > lo
        return ok

    def needed(self, name: str, fixed: dict, memo: dict) -> tuple[Arr, Arr, Arr]:
        """``(has, lo, hi)`` of the box of input ``name`` every active processor needs."""
        order = self.blocks[name].order
        has = np.zeros(self.A, bool)
        alive = self.alive(fixed, memo)
        lo = np.full((self.A, order), np.iinfo(np.int64).max, np.int64)
        hi = np.full((self.A, order), np.iinfo(np.int64).min, np.int64)
        for term, gate in zip(self.st.terms, self.gates, strict=True):
            ok = alive.copy()
            for v in gate:
                glo, ghi = self.hull(v, fixed, memo)
                ok &= (glo <= 0) & (0 < ghi)
            for f in term.factors:
                if f.tensor.name != name:
                    continue
                m = ok.copy()
                ivs = [self.hull(v, fixed, memo) for v in f.indices]
                for vlo, vhi in ivs:
                    m &= vhi > vlo
                for d, (vlo, vhi) in enumerate(ivs):
                    lo[:, d] = np.where(m, np.minimum(lo[:, d], vlo), lo[:, d])
                    hi[:, d] = np.where(m, np.maximum(hi[:, d], vhi), hi[:, d])
                has |= m
        lo = np.where(has[:, None], lo, 0)
        hi = np.where(has[:, None], hi, 0)
        return has, lo, hi

    # -- passes ---------------------------------------------------------------------------

    def inputs(self) -> None:
        """Fetch traffic and buffer memory of every input."""
        A, S = self.A, self.S
        cur = {}
        prev_sum = None
        for si, vals in enumerate(self.steps):
            changed_at = (
                0
                if si == 0
                else next(
                    d
                    for d, (a, b) in enumerate(zip(self.steps[si - 1], vals, strict=True))
                    if a != b
                )
            )
            fixed, memo = self.hulls(vals)
            fetched = np.zeros(A, np.int64)
            for name in self.st_inputs():
                d = self.depth[name]
                if si > 0 and changed_at >= d:
                    continue
                fx, mm = (fixed, memo) if d == len(self.step_loops) else self.hulls(vals[:d])
                has, lo, hi = self.needed(name, fx, mm)
                if si == 0:
                    changed = np.ones(A, bool)
                else:
                    phas, plo, phi = cur[name][:3]
                    same = (has == phas) & (~has | np.all((lo == plo) & (hi == phi), axis=1))
                    changed = ~same
                blk = self.blocks[name]
                own_has, _, own_lo, own_hi = self.own_cache(name)
                inside = own_has & np.all((own_lo <= lo) & (hi <= own_hi), axis=1)
                words = np.where(has & ~inside, _vol(lo, hi), 0)
                old_words = cur[name][3] if si > 0 else np.zeros(A, np.int64)
                new_words = np.where(changed, words, old_words)
                fetched += np.where(changed, words, 0)
                cur[name] = (has, lo, hi, new_words)
                go = changed & has & ~inside
                if go.any():
                    rows, bk, plo, phi = blk.pieces(lo[go], hi[go])
                    recv = self.active[go][rows]
                    src = blk.rank(blk.source(bk, self.recv_coords(name)[go][rows]))
                    remote = src != recv
                    src, recv, plo, phi = src[remote], recv[remote], plo[remote], phi[remote]
                    if self.routing in ("broadcast", "tree"):
                        src = _tree_parents(src, recv, np.column_stack([src, plo, phi]))
                    self.record(name, FETCH, src, recv, _vol(plo, phi), si)
            total = sum(v[3] for v in cur.values()) if cur else np.zeros(A, np.int64)
            if prev_sum is not None:
                self.load[si - 1, self.active] += prev_sum + fetched
            prev_sum = total
        if prev_sum is not None and S:
            self.load[S - 1, self.active] += prev_sum

    def st_inputs(self) -> list[str]:
        return [t.name for t in self.st.inputs()]

    def own_cache(self, name: str) -> tuple[Arr, Arr, Arr, Arr]:
        key = ("own", name)
        if key not in self.__dict__:
            blk = self.blocks[name]
            self.__dict__[key] = blk.own(self.recv_coords(name))
        return self.__dict__[key]

    def recv_coords(self, name: str) -> Arr:
        key = ("coords", name)
        if key not in self.__dict__:
            self.__dict__[key] = self.blocks[name].coords(self.active)
        return self.__dict__[key]

    def output(self) -> None:
        """Partial sums to reducers, final blocks to replicas, partial-buffer memory."""
        name = self.st.output.name
        blk = self.blocks[name]
        lhs = self.st.lhs_vars
        A, S = self.A, self.S
        d = self.depth[name]
        boxes: list[tuple[Arr, Arr, Arr]] = []
        for si in range(S):
            if si > 0 and self.steps[si][:d] == self.steps[si - 1][:d]:
                boxes.append(boxes[-1])
                continue
            fixed, memo = self.hulls(self.steps[si][:d])
            lo = np.zeros((A, blk.order), np.int64)
            hi = np.zeros((A, blk.order), np.int64)
            for k, v in enumerate(lhs):
                lo[:, k], hi[:, k] = self.hull(v, fixed, memo)
            has = np.all(hi > lo, axis=1) if blk.order else np.ones(A, bool)
            has &= self.alive(fixed, memo)
            lo, hi = np.where(has[:, None], lo, 0), np.where(has[:, None], hi, 0)
            boxes.append((has, lo, hi))
        # flush records: (row, open step, flush step, lo, hi)
        rec_rows, rec_open, rec_flush, rec_lo, rec_hi = [], [], [], [], []
        open_at = np.zeros(A, np.int64)
        for si in range(S):
            has, lo, hi = boxes[si]
            if si > 0:
                ph, pl, pu = boxes[si - 1]
                new = (has != ph) | (has & ~np.all((lo == pl) & (hi == pu), axis=1))
                open_at = np.where(new, si, open_at)
            if si == S - 1:
                flush = has
            else:
                nh, nl, nu = boxes[si + 1]
                flush = has & ((nh != has) | ~np.all((nl == lo) & (nu == hi), axis=1))
            rows = np.nonzero(flush)[0]
            rec_rows.append(rows)
            rec_open.append(open_at[rows])
            rec_flush.append(np.full(len(rows), si, np.int64))
            rec_lo.append(lo[rows])
            rec_hi.append(hi[rows])
        rows = np.concatenate(rec_rows) if rec_rows else np.zeros(0, np.int64)
        opened = np.concatenate(rec_open) if rec_open else np.zeros(0, np.int64)
        flushed = np.concatenate(rec_flush) if rec_flush else np.zeros(0, np.int64)
        lo = np.concatenate(rec_lo) if rec_lo else np.zeros((0, blk.order), np.int64)
        hi = np.concatenate(rec_hi) if rec_hi else np.zeros((0, blk.order), np.int64)
        ranks = self.active[rows]
        prow, pblk, plo, phi = blk.pieces(lo, hi)
        nb = max(math.prod(blk.nblocks), 1)
        lin = (
            np.ravel_multi_index(tuple(pblk.T), blk.nblocks)
            if blk.order
            else np.zeros(len(prow), np.int64)
        )
        # reducers: lowest contributing replica, else lowest replica
        own_has, own_idx, own_lo, own_hi = self.own_cache(name)
        own_lin = (
            np.ravel_multi_index(tuple(own_idx.T), blk.nblocks)
            if blk.order
            else np.zeros(A, np.int64)
        )
        big = np.iinfo(np.int64).max
        primary = np.full(nb, big, np.int64)
        contrib = own_has[rows[prow]] & (own_lin[rows[prow]] == lin)
        np.minimum.at(primary, lin[contrib], ranks[prow][contrib])
        all_idx = np.array(list(itertools.product(*(range(n) for n in blk.nblocks))), np.int64)
        all_idx = all_idx.reshape(nb, blk.order)
        lowest = blk.rank(blk.source(all_idx, np.zeros((nb, len(blk.pl.grid)), np.int64)))
        primary = np.where(primary == big, lowest, primary)
        # direct accumulation: the box inside the own block, whose reducer is this processor
        inside = own_has[rows] & np.all((own_lo[rows] <= lo) & (hi <= own_hi[rows]), axis=1)
        direct = inside & (primary[own_lin[rows]] == ranks)
        vol = _vol(lo, hi)
        part = np.zeros((S + 1, self.P), np.int64)
        nd = ~direct
        np.add.at(part, (opened[nd], ranks[nd]), vol[nd])
        np.add.at(part, (flushed[nd] + 1, ranks[nd]), -vol[nd])
        self.load += np.cumsum(part, axis=0)[:S]
        send = nd[prow]
        dst = primary[lin]
        remote = send & (dst != ranks[prow])
        pw = _vol(plo, phi)[remote]
        senders, dst, at = ranks[prow][remote], dst[remote], flushed[prow][remote]
        if self.routing == "tree":
            key = np.column_stack([at, dst, plo[remote], phi[remote]])
            dst = _tree_parents(dst, senders, key)
        self.record(name, PARTIAL, senders, dst, pw, at)
        np.add.at(self.load, (at, dst), pw)
        # finished blocks to the other replicas
        bvol = np.ones(nb, np.int64)
        for k in range(blk.order):
            bvol *= blk.hi_of[k][all_idx[:, k]] - blk.lo_of[k][all_idx[:, k]]
        free = [m for m in range(len(blk.pl.grid)) if not self.fixed_dim(blk.pl, m)]
        if free:
            reps = np.array(list(itertools.product(*(range(blk.pl.grid[m]) for m in free))))
            bi = np.repeat(np.arange(nb), len(reps))
            recv = np.zeros((len(bi), len(blk.pl.grid)), np.int64)
            recv[:, free] = np.tile(reps, (nb, 1))
            r = blk.rank(blk.source(all_idx[bi], recv))
            keep = (bvol[bi] > 0) & (r != primary[bi])
            self.record(name, FINAL, primary[bi][keep], r[keep], bvol[bi][keep], self.S)

    @staticmethod
    def fixed_dim(pl: Placement, m: int) -> bool:
        """True unless machine dimension ``m`` replicates the tensor."""
        for dist, off, _ in pl.layers:
            if off <= m < off + len(dist.rules):
                return dist.rules[m - off].kind != "repl"
        return True

    def iterations(self) -> Arr:
        """Points of the iteration space each processor executes."""
        out = np.zeros(self.P, np.int64)
        if not self.s.levels:
            out[0] = math.prod(self.st.extent[v] for v in self.st.variables)
            return out
        procs = list(self.s.processor_loops)
        total = np.ones(self.P, np.int64)
        for v in self.st.variables:
            rel = [p for p in procs if p in self._descendants(v)]
            cols = [procs.index(p) for p in rel]
            mcoords = np.stack(np.unravel_index(self.active, self.machine.shape), axis=1)
            if cols:
                uniq, inv = np.unique(mcoords[:, cols], axis=0, return_inverse=True)
            else:
                uniq, inv = np.zeros((1, 0), np.int64), np.zeros(self.P, np.int64)
            counts = np.zeros(len(uniq), np.int64)
            for u, row in enumerate(uniq):
                fixed = dict.fromkeys(procs, 0)
                fixed.update(zip(rel, (int(x) for x in row), strict=True))
                counts[u] = sum(hi - lo for lo, hi in self.bounds.values(v, fixed))
            total *= counts[inv.reshape(-1)]
        return total

    def _descendants(self, v: IndexVar) -> set[IndexVar]:
        r = self.bounds.defined_by.get(v)
        if r is None:
            return {v}
        kids = [r.result] if isinstance(r, Rotate) else [r.outer, r.inner]
        return {v}.union(*(self._descendants(k) for k in kids))

    def run(self) -> Summary:
        self.inputs()
        self.output()
        owned = np.zeros(self.P, np.int64)
        ranks = np.arange(self.P)
        for blk in self.blocks.values():
            has, _, lo, hi = blk.own(blk.coords(ranks))
            owned += np.where(has, _vol(lo, hi), 0)
        peak = owned + (self.load.max(axis=0) if self.S else 0)
        a = self.arr
        st = Stats(
            words_received=a["wr"].tolist(),
            words_sent=a["ws"].tolist(),
            messages_received=a["mr"].tolist(),
            messages_sent=a["ms"].tolist(),
            iterations=self.iterations().tolist(),
            peak_words=np.maximum(peak, owned).tolist(),
            level_words_received=a["lv"].tolist(),
        )
        return Summary(st, dict(self.moved), self.S, self.per_step)


def summarize(s: Schedule, routing: str = "direct") -> Summary:
    """Exact stats of ``s``'s plan (routed by ``routing``), computed without building it."""
    return _Summarizer(s, routing).run()
