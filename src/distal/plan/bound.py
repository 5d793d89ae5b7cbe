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


def _is_whole_block(a: Analysis, region: Region, own: Region | None) -> bool:
    """Whether an output region is the owned block itself, element for element in the same
    layout (the leaf may then add straight into the owned block)."""
    if own is None:
        return False
    if isinstance(region, Entries):
        return isinstance(own, Entries) and bool(np.array_equal(region.positions, own.positions))
    assert isinstance(region, Rows)
    assert isinstance(own, tuple)
    if region.sdims != (0,) or region.ddims != tuple(range(1, len(own))):
        return False
    rows = region.rows
    lo, hi = own[0]
    return (
        len(rows) == hi - lo
        and len(rows) > 0
        and int(rows[0, 0]) == lo
        and int(rows[-1, 0]) == hi - 1
        and tuple(region.box) == tuple(own[1:])
    )


def _reduces_own(sp: SparsePlan, p: int) -> bool:
    """Whether ``p`` reduces its own output block (always, unless a replica of it does)."""
    if not sp.primary:
        return True
    a = sp.analysis
    pl = a.placements[a.output.name]
    idx = pl.block_index(Plan.coord_in(pl, p))
    return idx is None or sp.primary.get(idx, p) == p


def _work(a: Analysis, pp: ProcPlan) -> EntryWork:
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
    return EntryWork(tuple(terms), pp.out_letters, len(pp.out.rows), ext, len(pp.entries), width)


def emit(sp: SparsePlan) -> tuple[Plan, PlanSummary]:
    """The plan of a bound sparse kernel, and its exact stats."""
    a = sp.analysis
    out_name = a.output.name
    P = sp.nprocs
    programs: list[list[Op]] = []
    fetches: list[Message] = []
    partials: list[Message] = []
    for pp in sp.procs:
        p = pp.p
        ops: list[Op] = []
        for name, need in pp.needs.items():
            region, parts = _need_region(a, need)
            pieces = tuple((pc.peer, part) for pc, part in zip(need.pieces, parts, strict=True))
            own = _owned(sp, name, p)
            view = (
                len(pieces) == 1
                and pieces[0][0] == p
                and len(need.pieces[0].sel) == len(need.rows)
                and tuple(need.pieces[0].box) == tuple(need.box)
                and own is not None
                and _slices_only(locate(region, own).index)
            )
            ops.append(Fetch(0, name, region, pieces, bool(view)))
            for src, part in pieces:
                if src != p and (part.words or part.index_words):
                    fetches.append(Message(0, FETCH, name, src, p, part))
        ops_out: list[Op] = []
        out_region, out_parts = _need_region(a, pp.out)
        own_out = _owned(sp, out_name, p)
        if _is_whole_block(a, out_region, own_out) and _reduces_own(sp, p):
            assert own_out is not None
            ops_out.append(OpenOutput(0, own_out, True))
        else:
            ops_out.append(OpenOutput(0, out_region, False))
            sends, local = [], []
            for pc, part in zip(pp.out.pieces, out_parts, strict=True):
                if pc.peer == p:
                    local.append(part)
                elif part.words:
                    sends.append((pc.peer, part))
                    partials.append(Message(0, PARTIAL, out_name, p, pc.peer, part))
            ops_out.append(Flush(0, out_region, tuple(sends), tuple(local)))
        ops += [ops_out[0], Compute(0, (), _work(a, pp)), *ops_out[1:]]
        programs.append(ops)
    partials.sort(key=lambda m: (m.src, m.dst))
    for m in partials:
        programs[m.dst].append(Reduce(0, m.src, m.box))
    fetches.sort(key=lambda m: (m.src, m.dst))
    tensors = list(a.tensors)
    order = {n: k for k, n in enumerate(tensors)}
    messages = sorted(fetches, key=lambda m: (m.src, m.dst, order[m.tensor])) + partials
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
                finals.append(Message(1, FINAL, out_name, q, p, box))
    messages += sorted(finals, key=lambda m: (m.src, m.dst))
    patterns: dict[str, object] = dict(sp.arrays)
    if sp.out_pattern is not None:
        patterns[out_name] = sp.out_pattern
    plan = Plan(
        statement=a.statement,
        nprocs=P,
        nsteps=1,
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
