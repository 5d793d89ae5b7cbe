"""An independent oracle for the plan engine: the lowering as a walk over each processor.

``distal.plan.engine`` evaluates the lowering's rules with arrays over all processors at
once. This module evaluates the same rules the slow, obvious way -- one processor at a time,
one step at a time, with Python boxes -- followed by the routing rewrite of a whole plan into
binomial trees. Tests compare the engine's plans (whole and per processor), its stats and
its messages with what this walk produces; :func:`plan_stats` counts any plan's stats from
its messages and instructions alone (replaying the memory model), apart from the engine.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict

from distal.distribution.machine import Machine
from distal.errors import ScheduleError
from distal.lang.nodes import IndexVar
from distal.plan.engine import placements_of
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
from distal.plan.stats import Stats, ops_by_step
from distal.schedule.api import Schedule
from distal.schedule.bounds import Bounds
from distal.typing import Box, box_contains, box_is_empty, box_volume

ROUTINGS = ("direct", "broadcast", "tree")

# Order of instructions inside one step.
_PHASE = {Fetch: 0, OpenOutput: 1, Compute: 2, Flush: 3, Reduce: 4, SendFinal: 5, RecvFinal: 6}


def _rank(grid: tuple[int, ...], coord: tuple[int, ...]) -> int:
    r = 0
    for c, g in zip(coord, grid, strict=True):
        r = r * g + c
    return r


def _hull_union(boxes: list[Box]) -> Box | None:
    boxes = [b for b in boxes if not box_is_empty(b)]
    if not boxes:
        return None
    return tuple(
        (min(b[d][0] for b in boxes), max(b[d][1] for b in boxes)) for d in range(len(boxes[0]))
    )


class _Lowering:
    """State of one lowering; :func:`lower` is the entry point."""

    def __init__(self, s: Schedule) -> None:
        self.s = s
        self.st = s.statement
        self.machine: Machine = s.machine
        self.nprocs = self.machine.size
        self.placements = placements_of(s)
        self.bounds = Bounds(s)
        self.out_name = self.st.output.name
        self.inputs = tuple(t.name for t in self.st.inputs())
        procs = s.processor_loops
        rest = [v for v in s.loops if v not in procs]
        self.depth: dict[str, int] = {}
        for name in self.placements:
            v = s.comm_var(name)
            self.depth[name] = 0 if v is None or v in procs else rest.index(v) + 1
        deepest = max(self.depth.values(), default=0)
        self.step_loops: list[IndexVar] = rest[:deepest]
        self.steps = list(itertools.product(*(range(s.extent[v]) for v in self.step_loops)))
        # Accesses of each input per term, with the statement variables the term must see at 0.
        own_vars = [set(self.st.lhs_vars) | set(t.summed) for t in self.st.terms]
        self.gates = [tuple(v for v in self.st.variables if v not in own) for own in own_vars]

    # -- per-processor queries -------------------------------------------------------------

    def proc_fixed(self, p: int) -> dict[IndexVar, int] | None:
        """Processor-loop values of processor ``p`` (None: it runs no iteration)."""
        if not self.s.levels:
            return {} if p == 0 else None
        coord = self.machine.coord(p)
        return dict(zip(self.s.processor_loops, coord, strict=True))

    def needed(self, name: str, hull: dict[IndexVar, tuple[int, int]]) -> Box | None:
        """Hull of the boxes of tensor ``name`` that the iterations in ``hull`` read.

        None when there is no iteration at all (some variable has an empty range):
        an idle processor fetches nothing.
        """
        if any(hi <= lo for lo, hi in hull.values()):
            return None
        boxes = []
        for term, gate in zip(self.st.terms, self.gates, strict=True):
            if any(not hull[v][0] <= 0 < hull[v][1] for v in gate):
                continue
            for f in term.factors:
                if f.tensor.name == name:
                    boxes.append(tuple(hull[v] for v in f.indices))
        return _hull_union(boxes)

    def coord_in(self, name: str, p: int) -> tuple[int, ...]:
        return Plan.coord_in(self.placements[name], p)

    # -- the three passes ------------------------------------------------------------------

    def run(self) -> Plan:
        nsteps = len(self.steps)
        ops: list[list[tuple[tuple[int, int, int], Op]]] = [[] for _ in range(self.nprocs)]
        messages: list[Message] = []
        out_pl = self.placements[self.out_name]
        out_boxes: dict[int, list[Box | None]] = {}
        contributors: dict[tuple[int, ...], set[int]] = defaultdict(set)

        def add(p: int, step: int, op: Op) -> None:
            ops[p].append(((step, _PHASE[type(op)], len(ops[p])), op))

        # Pass 1: inputs, leaf and the output boxes of every processor.
        for p in range(self.nprocs):
            base = self.proc_fixed(p)
            if base is None:
                continue
            obox = self._walk(p, base, add, messages)
            out_boxes[p] = obox
            for si, ob in enumerate(obox):
                if ob is not None and (si == nsteps - 1 or obox[si + 1] != ob):
                    for idx, _ in out_pl.split(ob):
                        contributors[idx].add(p)

        # Pass 2: the reducer of every output block.
        primary: dict[tuple[int, ...], int] = {}
        for idx in itertools.product(*(range(out_pl.pieces(d)) for d in range(len(out_pl.shape)))):
            reps = [_rank(out_pl.grid, c) for c in out_pl.replicas(idx)]
            mine = sorted(set(reps) & contributors.get(idx, set()))
            primary[idx] = mine[0] if mine else min(reps)

        # Pass 3: open, flush and reduce the output.
        for p, obox in out_boxes.items():
            own_idx = out_pl.block_index(self.coord_in(self.out_name, p))
            own = None if own_idx is None else out_pl.block_box(own_idx)
            for si, ob in enumerate(obox):
                if ob is None or (si > 0 and obox[si - 1] == ob):
                    continue
                direct = own is not None and box_contains(own, ob) and primary[own_idx] == p
                add(p, si, OpenOutput(si, ob, direct))
                last = si
                while last + 1 < nsteps and obox[last + 1] == ob:
                    last += 1
                if direct:
                    continue
                sends, local = [], []
                for idx, piece in out_pl.split(ob):
                    dst = primary[idx]
                    if dst == p:
                        local.append(piece)
                    else:
                        sends.append((dst, piece))
                        messages.append(Message(last, PARTIAL, self.out_name, p, dst, piece))
                        add(dst, last, Reduce(last, p, piece))
                add(p, last, Flush(last, ob, tuple(sends), tuple(local)))

        # After the last step: finished blocks to the other replicas.
        for idx, q in primary.items():
            box = out_pl.block_box(idx)
            if box_is_empty(box):
                continue
            for c in out_pl.replicas(idx):
                r = _rank(out_pl.grid, c)
                if r != q:
                    messages.append(Message(nsteps, FINAL, self.out_name, q, r, box))
                    add(q, nsteps, SendFinal(r, box))
                    add(r, nsteps, RecvFinal(q, box))

        programs = tuple(tuple(op for _, op in sorted(o, key=lambda x: x[0])) for o in ops)
        order = {FETCH: 0, PARTIAL: 1, FINAL: 2}
        messages.sort(key=lambda m: (m.step, order[m.kind], m.src, m.dst))
        return Plan(
            statement=self.st,
            nprocs=self.nprocs,
            nsteps=nsteps,
            placements=self.placements,
            inputs=self.inputs,
            output=self.out_name,
            programs=programs,
            messages=tuple(messages),
            primary=primary,
            machine=self.machine,
        )

    def _walk(self, p: int, base: dict[IndexVar, int], add, messages) -> list[Box | None]:
        """Fetches and leaf of processor ``p`` at every step; returns its output box per step."""
        held: dict[str, Box | None] = {}
        obox: list[Box | None] = []
        hulls: dict[tuple[int, ...], dict[IndexVar, tuple[int, int]]] = {}
        lhs = self.st.lhs_vars

        def hull_at(vals: tuple[int, ...]) -> dict[IndexVar, tuple[int, int]]:
            if vals not in hulls:
                pre = {**base, **dict(zip(self.step_loops, vals, strict=False))}
                hulls[vals] = self.bounds.hull_box(pre)
            return hulls[vals]

        for si, vals in enumerate(self.steps):
            for name in self.inputs:
                box = self.needed(name, hull_at(vals[: self.depth[name]]))
                if box != held.get(name, "unset"):
                    held[name] = box
                    self._fetch(p, si, name, box, add, messages)
            h = hull_at(vals[: self.depth[self.out_name]])
            ob: Box | None = tuple(h[v] for v in lhs)
            idle = any(hi <= lo for lo, hi in h.values())
            obox.append(None if idle or box_is_empty(ob) else ob)
            fixed = {**base, **dict(zip(self.step_loops, vals, strict=True))}
            boxes = self.bounds.exact_boxes(fixed)
            if boxes:
                add(p, si, Compute(si, tuple(boxes)))
        return obox

    def _fetch(self, p, si, name, box, add, messages) -> None:
        """Emit the fetch of ``box`` of tensor ``name`` by processor ``p`` at step ``si``."""
        if box is None:
            add(p, si, Fetch(si, name, None, (), True))
            return
        pl = self.placements[name]
        coord = self.coord_in(name, p)
        own = pl.owned_box(coord)
        view = own is not None and box_contains(own, box)
        pieces = []
        for idx, piece in pl.split(box):
            src = _rank(pl.grid, pl.source_for(idx, coord))
            pieces.append((src, piece))
            if src != p:
                messages.append(Message(si, FETCH, name, src, p, piece))
        add(p, si, Fetch(si, name, box, tuple(pieces), view))


_ROUTE_PHASE = {
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


def tree_parent(i: int) -> int:
    """Parent of node ``i > 0`` in a binomial tree rooted at node 0."""
    return i - (1 << (i.bit_length() - 1))


def route(plan: Plan, routing: str) -> Plan:
    """``plan`` with its messages routed by ``routing`` (one of :data:`ROUTINGS`)."""
    if routing not in ROUTINGS:
        raise ScheduleError(f"routing {routing!r} is not one of {[*ROUTINGS, 'auto']}")
    if routing == "direct":
        return plan
    messages: list[Message] = []
    fetch_src: dict[tuple, int] = {}  # (step, tensor, receiver, piece) -> who sends it
    extra: dict[int, list] = defaultdict(list)  # processor -> added Forward / Combine ops
    partial_dst: dict[tuple, int] = {}  # (step, sender, piece) -> who receives it
    reduce_keep: set[tuple] = set()  # (reducer, step, src, piece) still received directly

    groups: dict[tuple, list[Message]] = defaultdict(list)
    for m in plan.messages:
        if m.kind == FETCH:
            groups["f", m.step, m.tensor, m.src, m.box].append(m)
        elif m.kind == PARTIAL:
            groups["p", m.step, m.tensor, m.dst, m.box].append(m)
        else:
            messages.append(m)
    for (kind, step, tensor, root, box), ms in groups.items():
        if kind == "p" and routing == "broadcast":
            messages += ms
            for m in ms:
                partial_dst[step, m.src, box] = root
                reduce_keep.add((root, step, m.src, box))
            continue
        if kind == "f":
            nodes = [root, *sorted(m.dst for m in ms)]
            for i in range(1, len(nodes)):
                src = nodes[tree_parent(i)]
                relay = tree_parent(i) != 0
                messages.append(Message(step, FETCH, tensor, src, nodes[i], box, i, relay))
                fetch_src[step, tensor, nodes[i], box] = src
                if relay:
                    extra[src].append(Forward(step, tensor, box, nodes[i]))
        else:
            nodes = [root, *sorted(m.src for m in ms)]
            for i in range(1, len(nodes)):
                dst = nodes[tree_parent(i)]
                relay = tree_parent(i) != 0
                messages.append(Message(step, PARTIAL, tensor, nodes[i], dst, box, i, relay))
                partial_dst[step, nodes[i], box] = dst
                if relay:
                    extra[dst].append(Combine(step, nodes[i], box))
                else:
                    reduce_keep.add((dst, step, nodes[i], box))

    programs = []
    for p, prog in enumerate(plan.programs):
        ops: list = []
        for op in prog:
            if isinstance(op, Fetch) and op.pieces:
                pieces = tuple(
                    (fetch_src.get((op.step, op.tensor, p, piece), src), piece)
                    for src, piece in op.pieces
                )
                op = dataclasses.replace(op, pieces=pieces)
            elif isinstance(op, Flush) and op.sends:
                sends = tuple((partial_dst[op.step, p, box], box) for _, box in op.sends)
                op = dataclasses.replace(op, sends=sends)
            elif isinstance(op, Reduce) and (p, op.step, op.src, op.box) not in reduce_keep:
                continue
            ops.append(op)
        ops += extra.get(p, [])
        ops.sort(key=lambda op: (getattr(op, "step", plan.nsteps), _ROUTE_PHASE[type(op)]))
        programs.append(tuple(ops))
    order = {FETCH: 0, PARTIAL: 1}
    messages.sort(key=lambda m: (m.step, order.get(m.kind, 2), m.src, m.dst, m.hop))
    return dataclasses.replace(
        plan, programs=tuple(programs), messages=tuple(messages), routing=routing
    )


def lower(s: Schedule, routing: str = "direct") -> Plan:
    """The oracle's whole plan of ``s``, routed by ``routing``."""
    return route(_Lowering(s).run(), routing)


# ---- stats counted from a plan's instructions and messages ----


class MemoryTracker:
    """The memory model shared by the plan and the runtimes.

    Runtimes overlap communication with computation: while step ``s`` computes,
    the buffers of step ``s+1`` are already being filled. So at the end of step
    ``s`` a processor holds its owned blocks, one buffer per fetched tensor (none
    for a view of its own block), the buffers prefetched for step ``s+1``, its
    partial output buffer and the partial pieces received in step ``s``; then the
    prefetched buffers replace the old ones, and flushed buffers and received
    pieces are released.
    """

    def __init__(self, owned: int) -> None:
        self.owned = owned
        self.buffers: dict[str, int] = {}
        self.next: dict[str, int] = {}
        self.partial = 0
        self.flushed = False
        self.incoming = 0
        self.peak = owned

    @staticmethod
    def fetch_words(op: Fetch) -> int:
        """Words of the buffer a fetch allocates."""
        return 0 if op.view or op.box is None else box_volume(op.box)

    def prefetch(self, op: Fetch) -> None:
        """A fetch of the next step starts now (or, before step 0, completes now)."""
        self.next[op.tensor] = self.fetch_words(op)

    def swap(self) -> None:
        """Prefetched buffers replace the old ones."""
        self.buffers.update(self.next)
        self.next = {}

    def open(self, op: OpenOutput) -> None:
        self.partial = 0 if op.direct else box_volume(op.box)

    def end_step(self) -> None:
        now = self.owned + sum(self.buffers.values()) + sum(self.next.values())
        now += self.partial + self.incoming
        self.peak = max(self.peak, now)
        self.incoming = 0
        if self.flushed:
            self.partial, self.flushed = 0, False


def plan_stats(plan: Plan) -> Stats:
    """Exact predicted ``Stats`` of a plan."""
    nlevels = plan.machine.nlevels if plan.machine is not None else 1
    st = Stats.zeros(plan.nprocs, nlevels)
    for m in plan.messages:
        st.record(m.src, m.dst, m.words, plan.level_of(m.src, m.dst))
    for p in range(plan.nprocs):
        mem = MemoryTracker(plan.owned_words(p))
        steps = ops_by_step(plan, p)
        for op in steps[0]:
            if isinstance(op, Fetch):
                mem.prefetch(op)
        mem.swap()
        for s in range(plan.nsteps):
            for op in steps[s + 1] if s + 1 < plan.nsteps else ():
                if isinstance(op, Fetch):
                    mem.prefetch(op)
            for op in steps[s]:
                if isinstance(op, OpenOutput):
                    mem.open(op)
                elif isinstance(op, Compute):
                    st.iterations[p] += sum(box_volume(b) for b in op.boxes)
                elif isinstance(op, Flush):
                    mem.flushed = True
                elif isinstance(op, Reduce | Combine):
                    mem.incoming += box_volume(op.box)
            mem.end_step()
            mem.swap()
        st.peak_words[p] = mem.peak
    return st
