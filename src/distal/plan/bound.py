"""A kernel bound to its sparse inputs' patterns, as an ordinary :class:`~distal.plan.ir.Plan`.

The sparse lowering (:mod:`distal.plan.sparse`) decides, from the patterns, what every
processor visits, needs and contributes; this module writes that down as the one plan IR
every runtime executes: per processor, a ``Fetch`` of each input's needed region (rows of a
dense tensor referenced through coordinates, or stored entries of a sparse one) with its
pieces and their sources, one ``Compute`` over its stored entries (:class:`EntryWork`), the
output's ``OpenOutput`` / ``Flush`` of partial sums to their owners, and a ``Reduce`` per
partial sum received, in increasing source order (fixed, so every runtime gives the same
bits). Its stats are counted from it by the sinks (:func:`~distal.plan.sinks.count_plan`),
as every plan's are.
"""

from __future__ import annotations

import numpy as np

from distal.lang.nodes import Access
from distal.plan.ir import (
    FETCH,
    FINAL,
    PARTIAL,
    Compute,
    EntryWork,
    Fetch,
    Flush,
    Message,
    Op,
    OpenOutput,
    Plan,
    RecvFinal,
    Reduce,
    SendFinal,
    TermWork,
)
from distal.plan.region import Entries, Region, Rows, locate, words
from distal.plan.sinks import PlanSummary, count_plan
from distal.plan.sparse import Analysis, Need, ProcPlan, SparsePlan, _is_run, _split_dims


def _dims(a: Analysis, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    acc = a.output_access() if name == a.output.name else a.access(name)
    sd, dd = _split_dims(a, acc)
    return tuple(sd), tuple(dd)


def _need_region(a: Analysis, need: Need) -> tuple[Region, list[Region]]:
    """The region a need holds and the region of each of its pieces."""
    if a.tensors[need.tensor].format.is_dense:
        sd, dd = _dims(a, need.tensor)
        region = Rows(sd, dd, need.rows, tuple(need.box))
        return region, [region.part(pc.sel, tuple(pc.box)) for pc in need.pieces]
    ent = Entries(need.rows)
    return ent, [ent.part(pc.sel, pc.index_words) for pc in need.pieces]


def _slices_only(loc_index: tuple) -> bool:
    return all(isinstance(x, slice) or x is Ellipsis for x in loc_index)


def _owned(sp: SparsePlan, name: str, p: int) -> Region | None:
    own = sp.owned[name][p]
    if own is None:
        return None
    if isinstance(own, tuple):
        return own
    return Entries(own)


def _direct_region(region: Region, own: Region | None) -> Region | None:
    """The part of the owned block an output region is, element for element in the same
    layout (the leaves may then add straight into the owned block), or None: the same
    stored entries, or the owned rows in order (one row dimension leading) times a box
    inside the owned one."""
    if own is None:
        return None
    if isinstance(region, Entries):
        same = isinstance(own, Entries) and bool(np.array_equal(region.positions, own.positions))
        return own if same else None
    assert isinstance(region, Rows)
    assert isinstance(own, tuple)
    if region.sdims != (0,) or region.ddims != tuple(range(1, len(own))):
        return None
    rows = region.rows
    lo, hi = own[0]
    if not (len(rows) == hi - lo and len(rows) > 0):
        return None
    if int(rows[0, 0]) != lo or int(rows[-1, 0]) != hi - 1:
        return None
    inside = all(
        olo <= blo and bhi <= ohi
        for (blo, bhi), (olo, ohi) in zip(region.box, own[1:], strict=True)
    )
    if not inside:
        return None
    return own if tuple(region.box) == tuple(own[1:]) else ((lo, hi), *region.box)


def _step_part(
    region: Region, box: dict, access: Access, ddims: tuple[int, ...]
) -> Region:
    """The part of a region held over every step that one step (its dense-loop ``box``)
    reads or writes: the step's interval along each dense-loop dimension."""
    if isinstance(region, Rows):
        sub = tuple(box[access.indices[d]] for d in region.ddims)
        return region.part(np.arange(len(region.rows)), sub)
    assert isinstance(region, tuple)
    return tuple(box[access.indices[d]] if d in ddims else iv for d, iv in enumerate(region))


def _reduces_own(sp: SparsePlan, p: int) -> bool:
    """Whether ``p`` reduces its own output block (always, unless a replica of it does)."""
    if not sp.primary:
        return True
    a = sp.analysis
    pl = a.placements[a.output.name]
    idx = pl.block_index(Plan.coord_in(pl, p))
    return idx is None or sp.primary.get(idx, p) == p


def _work(
    a: Analysis, pp: ProcPlan, views: tuple = (), out_view: Region | None = None
) -> EntryWork:
    terms = []
    for t in pp.terms:
        if not t.active:
            continue
        sparse = []
        for name, idx in t.sparse:
            n = len(pp.needs[name].rows)
            in_order = len(idx) == n and (n == 0 or (int(idx[-1]) == n - 1 and _is_run(idx)))
            sparse.append((name, None if in_order else idx))
        terms.append(TermWork(t.coeff * t.scale, tuple(sparse), tuple(t.dense), t.out, t.entries))
    ext = tuple((chr(ord("a") + k), pp.box[v][1] - pp.box[v][0]) for k, v in enumerate(a.dvars))
    width = 1
    for _, e in ext:
        width *= e
    return EntryWork(
        tuple(terms), pp.out_letters, len(pp.out.rows), ext, len(pp.entries), width, views,
        out_view,
    )  # fmt: skip


def emit(sp: SparsePlan) -> tuple[Plan, PlanSummary]:
    """The plan of a bound sparse kernel, and its exact stats."""
    a = sp.analysis
    out_name = a.output.name
    P = sp.nprocs
    programs: list[list[Op]] = []
    fetches: list[Message] = []
    partials: list[Message] = []
    steps = sp.steps or [sp.procs]
    S = len(steps)
    lhs = a.output_access()
    out_dd = _dims(a, out_name)[1]
    # streamed in steps: the output is flushed at every step, or held over all of them
    per_step_out = S == 1 or bool(a.depth[out_name])
    for p in range(P):
        ops: list[Op] = []
        held: dict[str, Region] = {}
        open_region: Region | None = None
        direct: Region | None = None
        out_region: Region | None = None
        out_parts: list[Region] = []
        for s, procs in enumerate(steps):
            pp = procs[p]
            for name, need in pp.needs.items():
                deep = a.tensors[name].format.is_dense and bool(a.depth[name])
                if s > 0 and not deep:
                    continue  # fetched once, held over every step
                region, parts = _need_region(a, need)
                pieces = tuple(
                    (pc.peer, part) for pc, part in zip(need.pieces, parts, strict=True)
                )
                own = _owned(sp, name, p)
                view = (
                    len(pieces) == 1
                    and pieces[0][0] == p
                    and len(need.pieces[0].sel) == len(need.rows)
                    and tuple(need.pieces[0].box) == tuple(need.box)
                    and own is not None
                    and _slices_only(locate(region, own).index)
                )
                ops.append(Fetch(s, name, region, pieces, bool(view)))
                held[name] = region
                for src, part in pieces:
                    if src != p and (part.words or part.index_words):
                        fetches.append(Message(s, FETCH, name, src, p, part))
            views: list[tuple[str, Region]] = []
            if S > 1:
                for name in pp.needs:
                    t = a.tensors[name]
                    if t.format.is_dense and not a.depth[name] and _dims(a, name)[1]:
                        views.append((name, _step_part(held[name], pp.box, a.access(name), ())))
            out_view: Region | None = None
            if per_step_out or s == 0:
                out_region, out_parts = _need_region(a, pp.out)
                own_out = _owned(sp, out_name, p)
                direct = _direct_region(out_region, own_out) if _reduces_own(sp, p) else None
                open_region = direct if direct is not None else out_region
                ops.append(OpenOutput(s, open_region, direct is not None))
            if not per_step_out:
                assert open_region is not None
                out_view = _step_part(open_region, pp.box, lhs, out_dd)
            ops.append(Compute(s, (), _work(a, pp, tuple(views), out_view)))
            if direct is None and (per_step_out or s == S - 1):
                assert out_region is not None
                sends, local = [], []
                for pc, part in zip(pp.out.pieces, out_parts, strict=True):
                    if pc.peer == p:
                        local.append(part)
                    elif part.words:
                        sends.append((pc.peer, part))
                        partials.append(Message(s, PARTIAL, out_name, p, pc.peer, part))
                ops.append(Flush(s, out_region, tuple(sends), tuple(local)))
        programs.append(ops)
    partials.sort(key=lambda m: (m.step, m.src, m.dst))
    for m in partials:
        programs[m.dst].append(Reduce(m.step, m.src, m.box))
    tensors = list(a.tensors)
    order = {n: k for k, n in enumerate(tensors)}
    fetches.sort(key=lambda m: (m.step, m.src, m.dst, order[m.tensor]))
    # canonical order (step, kind, source, destination): both ends of a pair agree on it
    messages = sorted([*fetches, *partials], key=lambda m: (m.step, m.kind != FETCH))
    owned = {
        n: tuple(_owned(sp, n, p) for p in range(P)) for n in a.tensors if n not in a.placements
    }
    primary: dict[tuple[int, ...], int] = dict(sp.primary)
    finals: list[Message] = []
    if out_name in a.placements:
        pl = a.placements[out_name]
        for p in range(P):
            idx = pl.block_index(Plan.coord_in(pl, p))
            if idx is None:
                continue
            if idx not in sp.primary:
                primary[idx] = p
            elif sp.primary[idx] != p and words(pl.block_box(idx)):
                # a replica: the finished block from its reducer, after the step
                box = pl.block_box(idx)
                q = sp.primary[idx]
                programs[q].append(SendFinal(p, box))
                programs[p].append(RecvFinal(q, box))
                finals.append(Message(S, FINAL, out_name, q, p, box))
    messages += sorted(finals, key=lambda m: (m.src, m.dst))
    patterns: dict[str, object] = dict(sp.arrays)
    if sp.out_pattern is not None:
        patterns[out_name] = sp.out_pattern
    plan = Plan(
        statement=a.statement,
        nprocs=P,
        nsteps=S,
        placements=dict(a.placements),
        inputs=tuple(t.name for t in a.statement.inputs()),
        output=out_name,
        programs=tuple(tuple(ops) for ops in programs),
        messages=tuple(messages),
        primary=primary,
        machine=a.machine,
        routing="direct",
        owned=owned,
        patterns=patterns,
    )
    return plan, count_plan(plan)
