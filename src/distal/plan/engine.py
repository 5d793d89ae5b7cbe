"""The lowering: a scheduled statement and the tensors' distributions -> exact plan tables.

This is the one place where distribution and schedule meet, and the only formulation of the
lowering's rules; ``Stats``, ``explain``, routing, the simulator and every runtime's program
derive from the tables built here. No algorithm is a special case.

The rules, evaluated step by step with numpy arrays over processors:

1. **Placement.** Each tensor's distribution becomes a :class:`Placement` on its machine
   grid (processor ``p`` is the row-major index on every grid). A tensor without a
   distribution lives whole on processor 0.
2. **Processors and steps** (:func:`loop_roles`). The outer variables of ``distribute`` are
   processor coordinates. The serial loops down to the deepest ``communicate`` are *steps*
   (every processor runs the same number, in lockstep); the loops below are the *leaf*.
   Without ``distribute`` everything runs on processor 0.
3. **Data needed.** For a tensor communicated at loop ``v`` (or once per processor), each
   time the loops down to ``v`` change, bounds inference (:meth:`Bounds.hull_arrays`) gives
   the hull of every variable over the iterations nested inside; the tensor's needed box is
   the hull of its accesses (a term that does not use a statement variable reads only at
   that variable's first value; a term's domain cuts its variables' ranges first, and a
   shifted access ``u[i - 1, j]`` reads their image, :func:`access_hulls`: a stencil's
   block needs its neighbours' halo rows). An unchanged box is kept; a box inside the
   processor's own block is a view; any other box is cut along owner blocks and each piece
   comes from the processor itself or from the replica agreeing with it on replicated
   machine dimensions (:meth:`Placement.source_arrays`).
4. **Leaf.** At every step the exact iteration boxes (:meth:`Bounds.exact_boxes`) become one
   ``Compute``; ``iterations`` counts the same points (:meth:`Bounds.count`).
5. **Outputs.** A processor accumulates each output box in a buffer (or straight into its own
   block when it is that block's reducer). When the box changes or the steps end, the
   buffer's pieces go to each block's *reducer*: the lowest-numbered replica whose own
   accumulation touches the block, else the lowest replica. After the last step reducers
   send finished blocks to the other replicas.
6. **Routing** (``direct``, ``broadcast``, ``tree``): pieces that several processors fetch
   from one owner in one step (and, for ``tree``, partial sums of one box sent to one
   reducer) travel along binomial trees over the processors involved (:func:`tree_links`).
7. **Memory.** At the end of step ``s`` a processor holds its owned blocks, one buffer per
   fetched tensor (none for a view), the buffers prefetched for step ``s+1``, its partial
   output buffer and the partial pieces received in step ``s``.

An engine built with ``focus=p`` evaluates the cheap per-processor quantities (needed boxes,
output boxes, reducers) for everyone but cuts pieces, chooses sources and builds routing
trees only for the processors whose boxes meet ``p``'s: enough for ``p``'s own program and
every message it sends or receives, never the whole machine's plan.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import numpy as np

from distal.distribution.notation import parse_layout, whole_on_processor0
from distal.distribution.partition import Placement
from distal.errors import ScheduleError
from distal.lang.nodes import IndexVar
from distal.plan.arrays import every, group_ids, meets, same, tree_links, volumes, within
from distal.plan.ir import (
    FETCH,
    FINAL,
    PARTIAL,
    Combine,
    Compute,
    Fetch,
    Flush,
    Forward,
    Message,
    Op,
    OpenOutput,
    Plan,
    RecvFinal,
    Reduce,
    SendFinal,
)
from distal.plan.sinks import KINDS, MessageRows, PlanSummary, Tally
from distal.plan.stats import Stats
from distal.schedule.api import Schedule
from distal.schedule.bounds import Bounds, access_hulls

Arr = np.ndarray

#: Routing strategies a kernel can be compiled with ("auto": the cost model's choice):
#: "broadcast" routes shared fetches through trees and partial sums directly, "tree" both.
ROUTINGS = ("direct", "broadcast", "tree")
# Order of a processor's instructions inside one step.
_PHASE = {
    Fetch: 0,
    Forward: 1,
    OpenOutput: 2,
    Compute: 3,
    Combine: 4,
    Flush: 5,
    Reduce: 6,
    SendFinal: 7,
    RecvFinal: 8,
}


def placements_of(s: Schedule) -> dict[str, Placement]:
    """Where each tensor of the schedule lives, checked against the schedule's machine."""
    machine = s.machine
    tensors = s.tensors()
    out = {}
    for name, (dist, m) in s.layouts().items():
        t = tensors[name]
        if dist == "auto":
            raise ScheduleError(
                f"tensor {name!r} has dist='auto'; schedule it with dl.autoschedule"
            )
        if dist is None or m is None:
            out[name] = Placement(
                t.shape, whole_on_processor0(t.ndim, machine.shape), machine.shape
            )
            continue
        if m.size != machine.size:
            raise ScheduleError(
                f"tensor {name!r} is distributed over {m!r} with {m.size} "
                f"processors but the computation runs on {machine!r} with {machine.size}"
            )
        out[name] = Placement(t.shape, parse_layout(dist, name, t.ndim, m), m.shape)
    return out


def loop_roles(s: Schedule) -> tuple[dict[str, int], tuple[IndexVar, ...]]:
    """``(depth of each tensor's communication, step loops)``.

    A tensor communicated at a serial loop ``v`` has depth ``1 + v``'s position among the
    serial loops; one communicated at a processor loop, or never named, has depth 0 (fetched
    once per processor). The step loops are the serial loops down to the deepest one.
    """
    procs = s.processor_loops
    rest = [v for v in s.loops if v not in procs]
    depth: dict[str, int] = {}
    for name in s.tensors():
        v = s.comm_var(name)
        depth[name] = 0 if v is None or v in procs else rest.index(v) + 1
    return depth, tuple(rest[: max(depth.values(), default=0)])


class Engine:
    """One evaluation of the lowering rules for a schedule and a routing.

    ``focus=None`` evaluates everything (stats, the whole plan); ``focus=p`` only what
    processor ``p``'s program and messages need. An engine is used once: either
    :meth:`summaries` or :meth:`plan`.
    """

    def __init__(self, s: Schedule, routing: str = "direct", focus: int | None = None) -> None:
        if routing not in ROUTINGS:
            raise ScheduleError(f"routing {routing!r} is not one of {[*ROUTINGS, 'auto']}")
        self.s = s
        self.routing = routing
        st = self.st = s.statement
        self.machine = s.machine
        self.P = self.machine.size
        if focus is not None and not 0 <= focus < self.P:
            raise ScheduleError(
                f"processor {focus} does not exist: the machine has {self.P} processors"
            )
        self.focus = focus
        self.placements = placements_of(s)
        self.names = list(self.placements)
        self.tid = {n: i for i, n in enumerate(self.names)}
        self.out = st.output.name
        self.inputs = tuple(t.name for t in st.inputs())
        self.bounds = Bounds(s)
        self.depth, self.step_loops = loop_roles(s)
        self.steps = list(itertools.product(*(range(s.extent[v]) for v in self.step_loops)))
        self.S = len(self.steps)
        self.active = np.arange(self.P) if s.levels else np.zeros(1, np.int64)
        self.A = len(self.active)
        procs = s.processor_loops
        mcoords = np.stack(np.unravel_index(self.active, self.machine.shape), axis=1)
        self.proc_vals = {v: mcoords[:, k] for k, v in enumerate(procs)} if s.levels else {}
        lhs = set(st.lhs_vars)
        # statement variables a term does not use: it reads only at their first value
        self.gates = [
            tuple(v for v in st.variables if v not in lhs and v not in t.summed) for t in st.terms
        ]
        # the focus processor's row among the active ones (None: it runs no iteration)
        self.frow: int | None = None
        if focus is not None:
            hit = np.nonzero(self.active == focus)[0]
            self.frow = int(hit[0]) if len(hit) else None
        self._coords: dict[str, Arr] = {}
        self._cls: dict[frozenset, tuple] = {}
        self._under: dict[str, set[IndexVar]] = {}
        self._roff: dict[str, Arr] = {}
        self._rgrp: dict[str, Arr] = {}
        self._own: dict[str, tuple[Arr, ...]] = {}
        # where messages go: the plan's table, or one tally per routing counted (summaries)
        self.sinks: dict[str, MessageRows | Tally] = {routing: MessageRows()}
        self.summarizing = False
        self.build_ops = False  # whether instructions are being built (plan())
        # what the programs are built from (only for the processors they are built for)
        self.fetch_ops: list[tuple] = []  # (step, tensor, recv, box | None, view)
        self.fetch_pieces: dict[tuple[int, str, int], list] = defaultdict(list)
        self.out_recs: list[tuple] = []  # (proc, open step, flush step, box, direct)
        self.flush_pieces: dict[tuple[int, int], list] = defaultdict(list)  # (p, step) -> [...]
        self.primary = np.zeros(0, np.int64)
        # memory beyond owned blocks (summaries only): what is held at every step, the partial
        # buffers opening (+) and closing (-) at each step, and those alive now
        self.held = np.zeros(self.P, np.int64)
        self.part_events: dict[int, list[tuple[Arr, Arr]]] = defaultdict(list)
        self.part_now = np.zeros(self.P, np.int64)
        self._noted_fetch: Arr | None = None  # the fetch memory _memory_at noted last

    def _narrow(self) -> None:
        """For counting stats, keep as active only the processors with an iteration at some
        step (all loop hulls non-empty with no step fixed): the others fetch, compute and
        reduce nothing at any step, since fixing a step only narrows a hull (plans keep
        them: their programs hold empty fetches). Every pass costs active processors x
        steps, so a tiny problem on a huge machine (``n = 8`` on ``Machine(1000, 1000)``:
        64 of 10**6 processors own a block) spent minutes on processors doing nothing."""
        if not self.s.levels or self.focus is not None or self._coords or self._cls:
            return  # nothing to narrow, or row tables already made for all processors
        ok = self.alive(*self.fixed(()))
        self._cls.clear()  # its rows are all processors
        if ok.all() or not ok.any():
            return
        self.active = self.active[ok]
        self.A = len(self.active)
        self.proc_vals = {v: x[ok] for v, x in self.proc_vals.items()}

    # -- per-tensor ownership of the active processors -----------------------------------

    def coords(self, name: str) -> Arr:
        if name not in self._coords:
            self._coords[name] = self.placements[name].coords_of(self.active)
        return self._coords[name]

    def own(self, name: str) -> tuple[Arr, ...]:
        if name not in self._own:
            self._own[name] = self.placements[name].own_arrays(self.coords(name))
        return self._own[name]

    def _focus_own(self, name: str) -> tuple[Arr, Arr] | None:
        """The focus processor's own block of ``name`` as ``(lo, hi)`` rows, if it has one."""
        pl = self.placements[name]
        has, _, lo, hi = pl.own_arrays(pl.coords_of(np.array([self.focus])))
        return (lo, hi) if has[0] else None

    def wanted(self, sel: Arr) -> Arr:
        """Whether programs are built for the processor numbers in ``sel`` (vectorised)."""
        return np.ones(len(sel), bool) if self.focus is None else sel == self.focus

    # -- bounds ----------------------------------------------------------------------------

    def fixed(self, vals: tuple[int, ...]) -> tuple[dict, dict]:
        fixed: dict[IndexVar, Arr | int] = dict(self.proc_vals)
        fixed.update(zip(self.step_loops, vals, strict=False))
        return fixed, {}

    def _distinct(self, under: set[IndexVar]) -> tuple[list[IndexVar], Arr, Arr]:
        """The processor loops among ``under``, their distinct values, and each processor's
        row among them (a quantity that depends only on those loops is computed once per
        distinct value -- a row of processors for ``i``, a column for ``j`` -- and spread to
        the processors by index)."""
        key = frozenset(under)
        if key not in self._cls:
            procs = [x for x in self.proc_vals if x in under]
            if procs:
                # distinct rows by one number per row (row-major, so the same sorted order):
                # np.unique(axis=0) sorts the rows as records, 2.7 s at 10**6 processors
                m = np.stack([self.proc_vals[x] for x in procs], axis=1)
                dims = tuple(int(c) + 1 for c in m.max(axis=0)) if len(m) else (1,) * len(procs)
                keys, inv = np.unique(np.ravel_multi_index(tuple(m.T), dims), return_inverse=True)
                uniq = np.stack(np.unravel_index(keys, dims), axis=1).astype(np.int64)
            else:
                uniq, inv = np.zeros((1, 0), np.int64), np.zeros(self.A, np.int64)
            self._cls[key] = (procs, uniq, inv.reshape(-1))
        return self._cls[key]

    def _class_hull(self, v: IndexVar, fixed: dict) -> tuple[Arr, Arr, Arr]:
        """``v``'s interval per class of the processor loops it depends on, and each row's
        class."""
        names, uniq, inv = self._distinct(self.bounds.loops_under(v))
        f = {x: fixed[x] for x in self.step_loops if x in fixed}
        f.update((x, uniq[:, c]) for c, x in enumerate(names))
        lo, hi = self.bounds.hull_arrays(v, f, len(uniq), {})
        return lo, hi, inv

    def hull(self, v: IndexVar, fixed: dict, memo: dict) -> tuple[Arr, Arr]:
        """:meth:`Bounds.hull_arrays` of ``v`` for every active processor."""
        if v not in memo:
            lo, hi, inv = self._class_hull(v, fixed)
            memo[v] = (lo[inv], hi[inv])
        return memo[v]

    def alive(self, fixed: dict, memo: dict) -> Arr:
        """Processors with at least one iteration below the fixed loops."""
        ok = np.ones(self.A, bool)
        for v in self.st.variables:
            if v in memo:
                lo, hi = memo[v]
                ok &= hi > lo
            else:  # per class, then spread: one gather
                lo, hi, inv = self._class_hull(v, fixed)
                ok &= (hi > lo)[inv]
        return ok

    def _tensor_classes(self, name: str) -> tuple[list[IndexVar], Arr, Arr]:
        """:meth:`_distinct` for the box of input ``name``: the processor loops its accesses
        (and the gates of the terms holding them) depend on."""
        if name not in self._under:
            under: set[IndexVar] = set()
            for term, gate in zip(self.st.terms, self.gates, strict=True):
                fs = [f for f in term.factors if f.tensor.name == name]
                for v in [v for f in fs for v in f.indices] + (list(gate) if fs else []):
                    under |= self.bounds.loops_under(v)
            self._under[name] = under
        return self._distinct(self._under[name])

    def needed(self, name: str, vals: tuple[int, ...]) -> tuple[Arr, Arr, Arr]:
        """``(has, lo, hi)`` of the box of input ``name`` per class of processors (see
        :meth:`_tensor_classes`), the step loops fixed to ``vals``: the hull of the tensor's
        accesses in the terms whose unused statement variables can be at their first value.
        Whether a processor runs any iteration at all (:meth:`alive`) is applied per row."""
        names, uniq, _ = self._tensor_classes(name)
        C = len(uniq)
        f: dict[IndexVar, Arr | int] = dict(zip(self.step_loops, vals, strict=False))
        f.update((x, uniq[:, c]) for c, x in enumerate(names))
        memo: dict = {}

        def hull(v: IndexVar) -> tuple[Arr, Arr]:
            return self.bounds.hull_arrays(v, f, C, memo)

        order = len(self.placements[name].shape)
        has = np.zeros(C, bool)
        lo = np.full((C, order), np.iinfo(np.int64).max, np.int64)
        hi = np.full((C, order), np.iinfo(np.int64).min, np.int64)
        for term, gate in zip(self.st.terms, self.gates, strict=True):
            ok = np.ones(C, bool)
            for v in gate:
                glo, ghi = hull(v)
                ok &= (glo <= 0) & (0 < ghi)
            for fac in term.factors:
                if fac.tensor.name != name:
                    continue
                m = ok.copy()
                ivs = access_hulls(fac, term.domain, hull)
                for vlo, vhi in ivs:
                    m &= vhi > vlo
                for d, (vlo, vhi) in enumerate(ivs):
                    lo[:, d] = np.where(m, np.minimum(lo[:, d], vlo), lo[:, d])
                    hi[:, d] = np.where(m, np.maximum(hi[:, d], vhi), hi[:, d])
                has |= m
        lo = np.where(has[:, None], lo, 0)
        hi = np.where(has[:, None], hi, 0)
        return has, lo, hi

    # -- the walk --------------------------------------------------------------------------

    def inputs_pass(self) -> None:
        """Fetches of every input, their pieces, routing and buffer memory."""
        A, S = self.A, self.S
        cur: dict[str, tuple] = {}  # name -> (class has, lo, hi, row has, row words)
        prev_total = None
        routed = self.routing in ("broadcast", "tree")  # (for the focus's trees)
        fown = {n: self._focus_own(n) for n in self.inputs} if self.focus is not None else {}
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
            fetched = np.zeros(A, np.int64)
            alive: dict[int, Arr] = {}
            for name in self.inputs:
                d = self.depth[name]
                if si > 0 and changed_at >= d:
                    continue
                if d not in alive:
                    alive[d] = self.alive(*self.fixed(vals[:d]))
                chas, clo, chi = self.needed(name, vals[:d])
                inv = self._tensor_classes(name)[2]
                has = chas[inv] & alive[d]
                if si == 0:
                    changed = np.ones(A, bool)
                else:
                    pchas, pclo, pchi, phas, _ = cur[name]
                    moved = ~(same(clo, chi, pclo, pchi) & (chas == pchas))
                    changed = (has != phas) | (has & moved[inv])
                lo, hi = clo[inv], chi[inv]
                own_has, _, own_lo, own_hi = self.own(name)
                inside = own_has & within(lo, hi, own_lo, own_hi)
                words = np.where(has & ~inside, volumes(clo, chi)[inv], 0)
                old_words = cur[name][4] if si > 0 else np.zeros(A, np.int64)
                fetched += np.where(changed, words, 0)
                cur[name] = (chas, clo, chi, has, np.where(changed, words, old_words))
                self._fetch_ops(si, name, changed, has, lo, hi, inside)
                go = changed & has & ~inside
                if self.focus is not None:
                    go &= self._fetch_interest(name, has, lo, hi, fown[name], routed)
                if go.any():
                    self._fetch_pieces(si, name, go, inv, clo, chi, routed)
            if self.summarizing:
                total = sum(v[4] for v in cur.values()) if cur else np.zeros(A, np.int64)
                if prev_total is not None:
                    self._memory_at(si - 1, prev_total + fetched)
                prev_total = total
        if self.summarizing and prev_total is not None and S:
            self._memory_at(S - 1, prev_total)

    def _fetch_interest(self, name, has, lo, hi, fown, routed) -> Arr:
        """Receivers that can exchange pieces of ``name`` with the focus processor."""
        ok = np.zeros(self.A, bool)
        if fown is not None:  # it may serve them from its own block
            ok |= has & meets(lo, hi, fown[0], fown[1])
        if self.frow is not None and has[self.frow]:
            ok[self.frow] = True
            if routed:  # the trees of the pieces it receives: everyone receiving them
                f = self.frow
                ok |= has & meets(lo, hi, lo[f : f + 1], hi[f : f + 1])
        return ok

    def _fetch_ops(self, si, name, changed, has, lo, hi, inside) -> None:
        if not self.build_ops:
            return
        if self.focus is None:
            sel = np.nonzero(changed)[0]
        elif self.frow is not None and changed[self.frow]:
            sel = np.array([self.frow])
        else:
            return
        recv = self.active[sel]
        for r, p in zip(sel.tolist(), recv.tolist(), strict=True):
            box = tuple(zip(lo[r].tolist(), hi[r].tolist(), strict=True)) if has[r] else None
            self.fetch_ops.append((si, name, p, box, bool(inside[r]) or box is None))
            if box is not None and inside[r]:
                self.fetch_pieces[si, name, p].append((p, box))

    def _fetch_pieces(self, si, name, go, inv, clo, chi, routed) -> None:
        """The pieces the ``go`` rows fetch: cut once per class of boxes, then spread."""
        pl = self.placements[name]
        rows = np.nonzero(go)[0]
        cls = inv[rows]
        mark = np.zeros(len(clo), bool)
        mark[cls] = True
        cg = np.nonzero(mark)[0]
        crow, blk, plo, phi = pl.cut(clo[cg], chi[cg])
        cnt = np.zeros(len(clo), np.int64)
        cnt[cg] = np.bincount(crow, minlength=len(cg))
        start = np.cumsum(cnt) - cnt
        n = cnt[cls]
        if np.all(n == 1):
            piece = start[cls]
        else:
            piece = np.repeat(start[cls], n)
            piece += np.arange(len(piece)) - np.repeat(np.cumsum(n) - n, n)
            rows = np.repeat(rows, n)
        recv = self.active[rows]
        src = pl.base_ranks(blk)[piece] + self.replica_offsets(name)[rows]
        remote = src != recv
        r = np.nonzero(remote)[0]
        plain = (src[r], recv[r], None, None)
        treed = None
        if any(x in ("broadcast", "tree") for x in self.sinks):
            # the sender of a remote piece becomes its parent in the piece's tree
            # a group: one piece from one replica; pieces of equal boxes are one piece, and a
            # piece's replica is fixed by the receiver's coordinates on replicated dimensions
            same = group_ids(plo, phi)
            reps = self.replica_groups(name)
            group = same[piece[r]] * (int(reps.max()) + 1) + reps[rows[r]]
            parent, hop, relay = tree_links(src[r], recv[r], group, links=self.build_ops)
            treed = (parent, recv[r], hop, relay)
            if routed:
                src = src.copy()
                src[r] = parent
        if self.build_ops:
            for x in np.nonzero(self.wanted(recv))[0].tolist():
                k = piece[x]
                box = tuple(zip(plo[k].tolist(), phi[k].tolist(), strict=True))
                self.fetch_pieces[si, name, int(recv[x])].append((int(src[x]), box))
        k = piece[r]
        lo, hi = (plo[k], phi[k]) if self.build_ops else (None, None)  # counts need only words
        self._emit(si, 0, self.tid[name], lo, hi, volumes(plo, phi)[k], plain, treed)

    def _emit(self, step, kind, tensor, lo, hi, words, plain, treed) -> None:
        """Hand messages to every sink: ``plain`` (direct) or ``treed`` (routed) senders and
        receivers, as each sink's routing says (``broadcast`` routes fetches only)."""
        deltas: dict[int, tuple] = {}  # a batch sent the same way is counted once
        for routing, sink in self.sinks.items():
            routed = routing == "tree" or (routing == "broadcast" and kind == 0)
            way = treed if routed and treed is not None else plain
            src, dst, hop, relay = way
            if not isinstance(sink, Tally):
                sink.add(step, kind, tensor, src, dst, lo, hi, hop, relay, words)
                continue
            if len(src) == 0:
                continue
            if id(way) not in deltas:
                deltas[id(way)] = sink.delta(step, kind, tensor, src, dst, words)
            sink.apply(deltas[id(way)])
            if kind == 1:
                sink.incoming.append((step, dst, words))

    def replica_groups(self, name: str) -> Arr:
        """Per active processor: the number of its coordinates on the dimensions replicating
        ``name`` (processors with equal numbers are served by the same replicas)."""
        if name not in self._rgrp:
            pl = self.placements[name]
            rep = [m for m, f in enumerate(pl.fixed_dims()) if not f]
            c = self.coords(name)
            g = np.zeros(self.A, np.int64)
            for m in rep:
                g = g * pl.grid[m] + c[:, m]
            self._rgrp[name] = g
        return self._rgrp[name]

    def replica_offsets(self, name: str) -> Arr:
        """Per active processor: its part of the number of the replica that serves it."""
        if name not in self._roff:
            self._roff[name] = self.placements[name].replica_offsets(self.coords(name))
        return self._roff[name]

    def output_pass(self) -> None:
        """Output boxes, reducers, partial sums, final copies and partial-buffer memory."""
        name = self.out
        pl = self.placements[name]
        order = len(pl.shape)
        lhs = self.st.lhs_vars
        A, S = self.A, self.S
        d = self.depth[name]
        boxes: list[tuple[Arr, Arr, Arr]] = []
        for si in range(S):
            if si > 0 and self.steps[si][:d] == self.steps[si - 1][:d]:
                boxes.append(boxes[-1])
                continue
            fixed, memo = self.fixed(self.steps[si][:d])
            lo = np.zeros((A, order), np.int64)
            hi = np.zeros((A, order), np.int64)
            for k, v in enumerate(lhs):
                lo[:, k], hi[:, k] = self.hull(v, fixed, memo)
            has = every(A, order, lambda k, lo=lo, hi=hi: hi[:, k] > lo[:, k])
            has &= self.alive(fixed, memo)
            lo, hi = np.where(has[:, None], lo, 0), np.where(has[:, None], hi, 0)
            boxes.append((has, lo, hi))
        # one record per accumulation: (row, open step, flush step, lo, hi)
        rec = defaultdict(list)
        open_at = np.zeros(A, np.int64)
        for si in range(S):
            has, lo, hi = boxes[si]
            if si > 0:
                ph, plo_, phi_ = boxes[si - 1]
                new = (has != ph) | (has & ~same(lo, hi, plo_, phi_))
                open_at = np.where(new, si, open_at)
            if si == S - 1:
                flush = has
            else:
                nh, nl, nu = boxes[si + 1]
                flush = has & ((nh != has) | ~same(lo, hi, nl, nu))
            rows = np.nonzero(flush)[0]
            rec["rows"].append(rows)
            rec["open"].append(open_at[rows])
            rec["flush"].append(np.full(len(rows), si, np.int64))
            rec["lo"].append(lo[rows])
            rec["hi"].append(hi[rows])
        rows = np.concatenate(rec["rows"]) if S else np.zeros(0, np.int64)
        opened = np.concatenate(rec["open"]) if S else np.zeros(0, np.int64)
        flushed = np.concatenate(rec["flush"]) if S else np.zeros(0, np.int64)
        lo = np.concatenate(rec["lo"]) if S else np.zeros((0, order), np.int64)
        hi = np.concatenate(rec["hi"]) if S else np.zeros((0, order), np.int64)
        ranks = self.active[rows]
        nblocks = tuple(pl.pieces(k) for k in range(order))
        nb = max(math.prod(nblocks), 1)

        def lin(idx: Arr) -> Arr:
            return (
                np.ravel_multi_index(tuple(idx.T), nblocks)
                if order
                else np.zeros(len(idx), np.int64)
            )

        # reducers: the lowest replica whose own accumulation touches the block, else the lowest
        own_has, own_idx, own_lo, own_hi = self.own(name)
        own_lin = lin(own_idx)
        contrib = own_has[rows] & meets(lo, hi, own_lo[rows], own_hi[rows])
        big = np.iinfo(np.int64).max
        primary = np.full(nb, big, np.int64)
        np.minimum.at(primary, own_lin[rows][contrib], ranks[contrib])
        all_idx = np.array(list(itertools.product(*(range(n) for n in nblocks))), np.int64)
        all_idx = all_idx.reshape(nb, order)
        lowest = pl.ranks_of(pl.source_arrays(all_idx, np.zeros((nb, len(pl.grid)), np.int64)))
        primary = np.where(primary == big, lowest, primary)
        self.primary, self.all_idx = primary, all_idx
        # direct accumulation: the box inside the own block, whose reducer is this processor
        inside = own_has[rows] & within(lo, hi, own_lo[rows], own_hi[rows])
        direct = inside & (primary[own_lin[rows]] == ranks)
        if self.summarizing:  # partial buffers: alive from their opening to their flush
            vol = np.where(direct, 0, volumes(lo, hi))
            whole = (opened == 0) & (flushed == S - 1)  # held throughout: a constant
            np.add.at(self.held, ranks[whole], vol[whole])
            some = np.nonzero(~whole & (vol > 0))[0]
            for at, sign in ((opened[some], 1), (flushed[some] + 1, -1)):
                for s_ in np.unique(at).tolist():
                    sel = some[at == s_]
                    self.part_events[s_].append((ranks[sel], sign * vol[sel]))
        if self.build_ops:
            for r in np.nonzero(self.wanted(ranks))[0].tolist():
                box = tuple(zip(lo[r].tolist(), hi[r].tolist(), strict=True))
                self.out_recs.append(
                    (int(ranks[r]), int(opened[r]), int(flushed[r]), box, bool(direct[r]))
                )
        # partial sums of the records that are not accumulated directly
        keep = ~direct
        if self.focus is not None:
            keep &= self._partial_interest(ranks, lo, hi, flushed)
        sel = np.nonzero(keep)[0]
        prow, pblk, plo, phi = pl.cut(lo[sel], hi[sel])
        prow = sel[prow]
        senders, at = ranks[prow], flushed[prow]
        dst = primary[lin(pblk)]
        remote = dst != senders
        root = dst[remote]
        sent = senders[remote]
        treed = None
        if "tree" in self.sinks:
            group = group_ids(at[remote], root, plo[remote], phi[remote])
            parent, hop, relay = tree_links(root, sent, group, links=self.build_ops)
            treed = (sent, parent, hop, relay)
        parent = treed[1] if self.routing == "tree" else root
        if self.build_ops:
            to = dst.copy()
            to[np.nonzero(remote)[0]] = parent
            for r in np.nonzero(self.wanted(senders))[0].tolist():
                piece = tuple(zip(plo[r].tolist(), phi[r].tolist(), strict=True))
                self.flush_pieces[int(senders[r]), int(at[r])].append(
                    (int(to[r]), piece, bool(remote[r]))
                )
        words = volumes(plo[remote], phi[remote])
        plain = (sent, root, None, None)
        self._emit(at[remote], 1, self.tid[name], plo[remote], phi[remote], words, plain, treed)
        self._finals(pl, nb)

    def _partial_interest(self, ranks, lo, hi, flushed) -> Arr:
        """Accumulations whose partial sums can meet the focus processor."""
        ok = ranks == self.focus
        fown = self._focus_own(self.out)
        if fown is not None:  # it reduces (some of) its own block
            ok |= meets(lo, hi, fown[0], fown[1])
        if self.routing == "tree" and ok.any():  # the trees its own sums travel along
            mine = np.nonzero(ranks == self.focus)[0]
            for r in mine.tolist():
                ok |= (flushed == flushed[r]) & meets(lo, hi, lo[r : r + 1], hi[r : r + 1])
        return ok

    def _finals(self, pl: Placement, nb: int) -> None:
        """Finished blocks from their reducers to the other replicas."""
        bvol = np.ones(nb, np.int64)
        lo_of, hi_of = pl._arrays[3]
        for k in range(len(pl.shape)):
            bvol *= hi_of[k][self.all_idx[:, k]] - lo_of[k][self.all_idx[:, k]]
        free = [m for m, f in enumerate(pl.fixed_dims()) if not f]
        if not free:
            return
        reps = np.array(list(itertools.product(*(range(pl.grid[m]) for m in free))), np.int64)
        bi = np.repeat(np.arange(nb), len(reps))
        recv = np.zeros((len(bi), len(pl.grid)), np.int64)
        recv[:, free] = np.tile(reps, (nb, 1))
        r = pl.ranks_of(pl.source_arrays(self.all_idx[bi], recv))
        prim = self.primary[bi]
        keep = (bvol[bi] > 0) & (r != prim)
        if self.focus is not None:
            keep &= (r == self.focus) | (prim == self.focus)
        bi, r, prim = bi[keep], r[keep], prim[keep]
        blo = np.zeros((len(bi), len(pl.shape)), np.int64)
        bhi = np.zeros((len(bi), len(pl.shape)), np.int64)
        for k in range(len(pl.shape)):
            blo[:, k] = lo_of[k][self.all_idx[bi, k]]
            bhi[:, k] = hi_of[k][self.all_idx[bi, k]]
        plain = (prim, r, None, None)
        self._emit(self.S, 2, self.tid[self.out], blo, bhi, volumes(blo, bhi), plain, None)

    # -- iterations --------------------------------------------------------------------------

    def iterations(self) -> Arr:
        """Points of the iteration space each processor executes: the ``Compute`` boxes' sum.

        A variable's count depends only on the loops it is derived from, so it is evaluated
        once per distinct value of those loops (processor coordinates and step counters).
        """
        out = np.zeros(self.P, np.int64)
        procs = list(self.s.processor_loops)
        mcoords = np.stack(np.unravel_index(self.active, self.machine.shape), axis=1)
        per_var = []
        for v in self.st.variables:
            under = self.bounds.loops_under(v)
            pcols = [k for k, p in enumerate(procs) if p in under]
            scols = [k for k, x in enumerate(self.step_loops) if x in under]
            if pcols:
                uniq, inv = np.unique(mcoords[:, pcols], axis=0, return_inverse=True)
            else:
                uniq, inv = np.zeros((1, 0), np.int64), np.zeros(self.A, np.int64)
            svals = sorted({tuple(vals[k] for k in scols) for vals in self.steps}) or [()]
            sidx = {sv: n for n, sv in enumerate(svals)}
            table = np.zeros((len(uniq), len(svals)), np.int64)
            for u, row in enumerate(uniq.tolist()):
                for sv, n in sidx.items():
                    fixed = dict.fromkeys(procs, 0)
                    fixed.update(zip([procs[k] for k in pcols], row, strict=True))
                    fixed.update(zip([self.step_loops[k] for k in scols], sv, strict=True))
                    table[u, n] = self.bounds.count(v, fixed)
            step_of = np.array(
                [sidx[tuple(vals[k] for k in scols)] for vals in self.steps] or [0], np.int64
            )
            per_var.append((inv.reshape(-1), table, step_of))
        total = np.zeros(self.A, np.int64)
        for si in range(max(self.S, 1)):
            prod = np.ones(self.A, np.int64)
            for inv, table, step_of in per_var:
                prod *= table[inv, step_of[si]]
            total += prod
        out[self.active] = total
        return out

    # -- results -----------------------------------------------------------------------------

    def table(self) -> dict[str, Arr]:
        """Every message kept by the plan's sink, as arrays (boxes as tuples), unsorted."""
        rows = self.sinks[self.routing]
        a = rows.arrays()
        boxes = rows.boxes
        lo_rows: list = []
        hi_rows: list = []
        for _, lo, hi in boxes:
            lo_rows += [tuple(x) for x in lo.tolist()]
            hi_rows += [tuple(x) for x in hi.tolist()]
        a["lo"], a["hi"] = lo_rows, hi_rows
        return a

    def _memory_at(self, step: int, fetch: Arr) -> None:
        """The end of ``step``: fetch buffers (``fetch``, per active processor) + partial
        buffers alive + the partial sums each routing delivers in that step; each routing's
        tally keeps the largest such total per processor (nothing per step is stored).

        A step that changes neither the partial buffers nor the fetch buffers and delivers
        no partial sums cannot raise a peak: it is skipped (each note costs a pass over all
        processors: a second for a thousand steps of a million-processor machine)."""
        events = self.part_events.pop(step, ())
        for who, words in events:
            np.add.at(self.part_now, who, words)
        last = self._noted_fetch
        unchanged = not events and last is not None and np.array_equal(fetch, last)
        self._noted_fetch = fetch
        tallies = [t for t in self.sinks.values() if isinstance(t, Tally)]
        if unchanged:
            tallies = [t for t in tallies if step in t.arriving]
            if not tallies:
                return
        base = self.part_now.copy()
        base[self.active] += fetch
        for tally in tallies:
            tally.note_peak(step, base)

    def summaries(self, routings: tuple[str, ...]) -> dict[str, PlanSummary]:
        """Exact stats of the whole plan under each routing, counted in one walk (the boxes,
        pieces and reducers are the routings' common part) without building any plan."""
        for r in routings:
            if r not in ROUTINGS:
                raise ScheduleError(f"routing {r!r} is not one of {[*ROUTINGS, 'auto']}")
        self.sinks = {
            r: Tally(self.P, self.S, self.names, self.machine.nlevels, self._levels)
            for r in routings
        }
        self.summarizing = True
        self._narrow()
        self.output_pass()  # first: the partial buffers and sums each step's memory counts
        for tally in self.sinks.values():
            assert isinstance(tally, Tally)
            tally.group_incoming()
        self.inputs_pass()
        P = self.P
        owned = np.zeros(P, np.int64)
        ranks = np.arange(P)
        for pl in self.placements.values():
            has, _, lo, hi = pl.own_arrays(pl.coords_of(ranks))
            owned += np.where(has, volumes(lo, hi), 0)
        iterations = self.iterations().tolist()
        out = {}
        for routing, tally in self.sinks.items():
            assert isinstance(tally, Tally)
            peak = owned + tally.peak + self.held
            wr, ws, mr, ms = (tally.ints(x) for x in tally.totals)
            st = Stats(
                words_received=wr,
                words_sent=ws,
                messages_received=mr,
                messages_sent=ms,
                iterations=list(iterations),
                peak_words=np.maximum(peak, owned).tolist(),
                level_words_received=tally.level_words(),
            )
            ps = None if tally.per_step is None else np.rint(tally.per_step).astype(np.int64)
            out[routing] = PlanSummary(st, dict(tally.moved), self.S, ps)
        return out

    def _levels(self, src: Arr, dst: Arr) -> Arr:
        m = self.machine
        if m.nlevels == 1:
            return np.zeros(len(src), np.int64)
        cs = np.stack(np.unravel_index(src, m.shape), axis=1)
        cd = np.stack(np.unravel_index(dst, m.shape), axis=1)
        level = np.zeros(len(src), np.int64)
        found = np.zeros(len(src), bool)
        for k in range(m.nlevels):
            dims = list(m.level_dims(k))
            diff = np.any(cs[:, dims] != cd[:, dims], axis=1) & ~found
            level[diff] = k
            found |= diff
        return level

    def plan(self) -> Plan:
        """The programs of the processors in focus (all, or one) and their messages."""
        self.build_ops = True
        self.inputs_pass()
        self.output_pass()
        messages = self._messages()
        procs = range(self.P) if self.focus is None else [self.focus]
        ops: dict[int, list[tuple[tuple[int, int, int], Op]]] = {p: [] for p in procs}

        def add(p: int, step: int, op: Op) -> None:
            ops[p].append(((step, _PHASE[type(op)], len(ops[p])), op))

        for si, name, p, box, view in self.fetch_ops:
            pieces = tuple((src, piece) for src, piece in self.fetch_pieces.get((si, name, p), ()))
            add(p, si, Fetch(si, name, box, pieces if box is not None else (), view))
        for p in procs:
            for si, vals in enumerate(self.steps) if self._runs(p) else ():
                fixed = (
                    dict(zip(self.s.processor_loops, self.machine.coord(p), strict=True))
                    if self.s.levels
                    else {}
                )
                fixed.update(zip(self.step_loops, vals, strict=True))
                boxes = self.bounds.exact_boxes(fixed)
                if boxes:
                    add(p, si, Compute(si, tuple(boxes)))
        for p, opened, flushed, box, direct in self.out_recs:
            add(p, opened, OpenOutput(opened, box, direct))
            if direct:
                continue
            pieces = self.flush_pieces.get((p, flushed), [])
            sends = tuple((to, piece) for to, piece, remote in pieces if remote)
            local = tuple(piece for _, piece, remote in pieces if not remote)
            add(p, flushed, Flush(flushed, box, sends, local))
        for m in messages:
            if m.kind == FETCH and m.relay and m.src in ops:
                add(m.src, m.step, Forward(m.step, m.tensor, m.box, m.dst))
            elif m.kind == PARTIAL and m.dst in ops:
                add(m.dst, m.step, (Combine if m.relay else Reduce)(m.step, m.src, m.box))
            elif m.kind == FINAL:
                if m.src in ops:
                    add(m.src, m.step, SendFinal(m.dst, m.box))
                if m.dst in ops:
                    add(m.dst, m.step, RecvFinal(m.src, m.box))
        programs = {p: tuple(op for _, op in sorted(o, key=lambda x: x[0])) for p, o in ops.items()}
        primary = {
            tuple(int(x) for x in idx): int(q)
            for idx, q in zip(self.all_idx.tolist(), self.primary.tolist(), strict=True)
        }
        return Plan(
            statement=self.st,
            nprocs=self.P,
            nsteps=self.S,
            placements=self.placements,
            inputs=self.inputs,
            output=self.out,
            programs=programs if self.focus is not None else tuple(programs[p] for p in procs),
            messages=tuple(messages),
            primary=primary,
            machine=self.machine,
            routing=self.routing,
            procs=tuple(procs),
        )

    def _runs(self, p: int) -> bool:
        """Whether processor ``p`` runs iterations at all (without distribute: only 0)."""
        return bool(self.s.levels) or p == 0

    def _messages(self) -> list[Message]:
        """The messages the built programs send or receive, in canonical order.

        The order (step, kind, source, destination, tree position, tensor, box) is total, so
        both ends of every pair see their messages in the same order (MPI tags rely on it).
        """
        a = self.table()
        n = len(a["src"])
        keep = np.ones(n, bool)
        if self.focus is not None:
            keep = (a["src"] == self.focus) | (a["dst"] == self.focus)
        out = []
        for r in np.nonzero(keep)[0].tolist():
            box = tuple(zip(a["lo"][r], a["hi"][r], strict=True))
            out.append(
                Message(
                    int(a["step"][r]),
                    KINDS[a["kind"][r]],
                    self.names[a["tensor"][r]],
                    int(a["src"][r]),
                    int(a["dst"][r]),
                    box,
                    int(a["hop"][r]),
                    bool(a["relay"][r]),
                )
            )
        out.sort(
            key=lambda m: (
                m.step,
                KINDS.index(m.kind),
                m.src,
                m.dst,
                m.hop,
                self.tid[m.tensor],
                m.box,
            )
        )
        return out


def summarize(s: Schedule, routing: str = "direct") -> PlanSummary:
    """Exact stats of ``s``'s plan (routed by ``routing``), computed without building it."""
    return Engine(s, routing).summaries((routing,))[routing]


def lower(s: Schedule, routing: str = "direct") -> Plan:
    """The whole machine's plan (every processor's program and every message)."""
    if not isinstance(s, Schedule):
        raise ScheduleError(f"compile() takes a Schedule (from dl.schedule), got {s!r}")
    return Engine(s, routing).plan()


def program(s: Schedule, p: int, routing: str = "direct") -> Plan:
    """Processor ``p``'s program and messages, without building the other processors'."""
    return Engine(s, routing, focus=p).plan()
