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

The plan is written one processor at a time (:class:`_Writer`): :func:`emit` writes every
processor's part, :func:`program` one processor's part alone (what an MPI rank runs), with
the messages the others exchange with it read off their needs, never their programs.

Routing (``broadcast`` and ``tree``): the pieces of a dense input that several processors
fetch in one step from one source, holding the same region (the same rows times the same
box, :func:`~distal.plan.region.content`), travel along the binomial tree of the dense
engine (:func:`~distal.plan.arrays.tree_links`) over the processors fetching them: each
receives its copy from its parent in the tree, and a parent that fetches it too passes it on
(``Forward``, the message marked ``relay``). Everything else -- stored entries of sparse
inputs, pieces only one processor fetches, partial sums -- goes directly.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from distal.lang.nodes import Access
from distal.plan.arrays import tree_links
from distal.plan.ir import (
    FETCH,
    FINAL,
    PARTIAL,
    Compute,
    EntryWork,
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
    TermWork,
)
from distal.plan.region import Entries, Region, Rows, content, locate, words
from distal.plan.sinks import PlanSummary, count_plan
from distal.plan.sparse import (
    Analysis,
    Need,
    Pieces,
    ProcPlan,
    SparsePlan,
    _is_run,
    _split_dims,
)


def _dims(a: Analysis, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    acc = a.output_access() if name == a.output.name else a.access(name)
    sd, dd = _split_dims(a, acc)
    return tuple(sd), tuple(dd)


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
    """The part of the owned block the leaves write an output region into directly, or
    None (a buffer, flushed into the block): the same stored entries, or owned rows in
    increasing order (one row dimension leading; rows without entries may be missing, the
    leaves then write the others at their places in the block: :func:`_out_rows`) times a
    box inside the owned one. A row split's processor whose rows have gaps (a road
    network's empty rows) wrote a buffer of its rows and added it into its block: for an
    SpMM of 1.4 M rows, a 184 MiB fill and a scattered add each run."""
    if own is None:
        return None
    if isinstance(region, Entries):
        same = isinstance(own, Entries) and bool(np.array_equal(region.positions, own.positions))
        return own if same else None
    assert isinstance(region, Rows)
    assert isinstance(own, tuple)
    if region.sdims != (0,) or region.ddims != tuple(range(1, len(own))):
        return None
    rows = region.rows[:, 0]
    lo, hi = own[0]
    if not len(rows) or int(rows[0]) < lo or int(rows[-1]) >= hi:
        return None
    if len(rows) > 1 and not bool(np.all(rows[1:] > rows[:-1])):
        return None
    inside = all(
        olo <= blo and bhi <= ohi
        for (blo, bhi), (olo, ohi) in zip(region.box, own[1:], strict=True)
    )
    if not inside:
        return None
    return own if tuple(region.box) == tuple(own[1:]) else ((lo, hi), *region.box)


def _out_rows(region: Region, direct: Region | None) -> tuple[np.ndarray, int] | None:
    """Where each row of output ``region`` lies in the owned block the leaves write into
    directly (``direct``), and the block's rows, when that is not row for row (rows
    without entries missing); None where it is, or where the leaves write a buffer."""
    if not isinstance(region, Rows) or not isinstance(direct, tuple):
        return None
    rows = region.rows[:, 0]
    lo, hi = direct[0]
    if len(rows) == hi - lo:
        return None
    return (rows - lo).astype(np.int64), hi - lo


def _step_part(region: Region, box: dict, access: Access, ddims: tuple[int, ...]) -> Region:
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
    a: Analysis,
    pp: ProcPlan,
    views: tuple = (),
    out_view: Region | None = None,
    placed: tuple[np.ndarray, int] | None = None,
) -> EntryWork:
    """A processor's leaf work at one step; ``placed`` (:func:`_out_rows`): where the output
    region's rows lie in the owned block the leaves write directly, and its rows."""
    terms = []
    for t in pp.terms:
        if not t.active:
            continue
        sparse = []
        for name, idx in t.sparse:
            n = len(pp.needs[name].rows)
            in_order = len(idx) == n and (n == 0 or (int(idx[-1]) == n - 1 and _is_run(idx)))
            sparse.append((name, None if in_order else idx))
        out = t.out if placed is None else placed[0][t.out]
        terms.append(TermWork(t.coeff * t.scale, tuple(sparse), tuple(t.dense), out, t.entries))
    ext = tuple((chr(ord("a") + k), pp.box[v][1] - pp.box[v][0]) for k, v in enumerate(a.dvars))
    width = 1
    for _, e in ext:
        width *= e
    rows = len(pp.out.rows) if placed is None else placed[1]
    return EntryWork(
        tuple(terms), pp.out_letters, rows, ext, len(pp.entries), width, views, out_view,
    )  # fmt: skip


class _Writer:
    """Writes a binding as plan parts, one processor at a time.

    The whole plan is every processor's part. One processor's program is its own part plus
    the messages the other processors' parts exchange with it, read off their needs'
    regions (never their instructions), so an MPI rank writes ``O(P)`` messages instead of
    the machine's ``O(P**2)``. Both are made by the same methods, in the same order, so
    ``program(sp, p)`` equals ``emit(sp).restrict(p)`` region for region.
    """

    def __init__(self, sp: SparsePlan, routing: str = "direct") -> None:
        a = sp.analysis
        self.sp = sp
        self.a = a
        self.routing = routing
        # (step, tensor) -> the routed pieces: (receiver, piece) -> (sender, hop, relay)
        self._trees: dict[tuple[int, str], dict[tuple[int, int], tuple[int, int, bool]]] = {}
        self._relayed: dict[tuple[int, str], dict[int, list[tuple[int, int]]]] = {}
        self._focus: int | None = None  # program(p): trees only of the groups p is in
        self.out_name = a.output.name
        self.steps = sp.steps or [sp.procs]
        self.S = len(self.steps)
        self.lhs = a.output_access()
        self.out_dd = _dims(a, self.out_name)[1]
        # streamed in steps: the output is flushed at every step, or held over all of them
        self.per_step_out = self.S == 1 or bool(a.depth[self.out_name])
        self.tensor_order = {n: k for k, n in enumerate(a.tensors)}

    # -- what a processor holds, fetches and flushes ----------------------------------------

    def fetched(self, s: int, name: str) -> bool:
        """Whether input ``name`` is fetched at step ``s``: a dense tensor communicated at the
        step loop at every step, everything else once and held over every step."""
        return s == 0 or (self.a.tensors[name].format.is_dense and bool(self.a.depth[name]))

    def region(self, need: Need) -> Region:
        """The region a need holds: rows x box of a dense tensor, or stored entries."""
        a = self.a
        if a.tensors[need.tensor].format.is_dense:
            sd, dd = _dims(a, need.tensor)
            return Rows(sd, dd, need.rows, tuple(need.box))
        return Entries(need.rows)

    def parts(self, need: Need, region: Region, ks: np.ndarray | None = None) -> list[Region]:
        """The regions of pieces ``ks`` of ``need`` (all of them by default), parts of
        ``region``."""
        pcs = need.pieces
        idx = np.arange(len(pcs)) if ks is None else ks
        start, stop, order = pcs.start[idx].tolist(), pcs.stop[idx].tolist(), pcs.order
        if isinstance(region, Rows):
            boxes = [tuple(map(tuple, b)) for b in pcs.boxes[idx].tolist()]
            return [
                region.part(order[a:b], bx) for a, b, bx in zip(start, stop, boxes, strict=True)
            ]
        assert isinstance(region, Entries)
        iws = pcs.index_words[idx].tolist()
        return [region.part(order[a:b], w) for a, b, w in zip(start, stop, iws, strict=True)]

    @staticmethod
    def carried(pcs: Pieces, kind: str) -> np.ndarray:
        """The pieces that are a message when their peer is another processor (one rule for
        both ends): a fetched piece carrying values or index words, a partial sum carrying
        values."""
        if kind == FETCH:
            return (pcs.words > 0) | (pcs.index_words > 0)
        return pcs.words > 0

    def routed(self, name: str) -> bool:
        """Whether fetches of ``name`` travel along trees: a dense input (its pieces are rows
        times a box) under ``broadcast`` or ``tree`` routing."""
        return self.routing in ("broadcast", "tree") and self.a.tensors[name].format.is_dense

    def trees(self, s: int, name: str) -> dict[tuple[int, int], tuple[int, int, bool]]:
        """The routed pieces of ``name``'s fetches at step ``s``: ``(receiver, piece number)
        -> (sender, hop, relay)``, for every piece another processor sends (its source, or
        its parent in the tree of the pieces of one region from one source: the dense
        engine's rule, :func:`tree_links`; ``hop`` is the receiver's position in it, and
        ``relay`` says the sender fetches the piece too and passes it on).

        Writing one processor's program (``_focus``), only the groups it can be in are made:
        the pieces whose source is the processor, or that have the source and size of one
        of its own pieces (every member of such a group is then among them)."""
        key = (s, name)
        got = self._trees.get(key)
        if got is not None:
            return got
        procs = self.steps[s]
        # writing one program: the (source, words) of the pieces the focus fetches; a piece
        # from elsewhere with another source or size cannot share a region with them
        mine: np.ndarray | None = None
        if self._focus is not None:
            mine = np.zeros(0, np.int64)
            need = procs[self._focus].needs.get(name)
            if need is not None:
                mine = (need.pieces.peer << 32) | need.pieces.words
        member: list[int] = []
        piece: list[int] = []
        root: list[int] = []
        group: list[int] = []
        ids: dict[tuple, int] = {}
        for q in range(len(procs)):
            need = procs[q].needs.get(name)
            if need is None:
                continue
            pcs = need.pieces
            go = self.carried(pcs, FETCH) & (pcs.peer != q)
            if mine is not None:
                go &= (pcs.peer == self._focus) | np.isin((pcs.peer << 32) | pcs.words, mine)
            ks = np.flatnonzero(go)
            if not len(ks):
                continue
            parts = self.parts(need, self.region(need), ks)
            for k, src, part in zip(ks.tolist(), pcs.peer[ks].tolist(), parts, strict=True):
                member.append(q)
                piece.append(k)
                root.append(src)
                group.append(ids.setdefault((src, content(part)), len(ids)))
        out: dict[tuple[int, int], tuple[int, int, bool]] = {}
        relayed: dict[int, list[tuple[int, int]]] = {}
        if member:
            parent, hop, relay = tree_links(
                np.array(root, np.int64), np.array(member, np.int64), np.array(group, np.int64)
            )
            assert hop is not None
            assert relay is not None
            for q, k, u, h, r in zip(
                member, piece, parent.tolist(), hop.tolist(), relay.tolist(), strict=True
            ):
                out[q, k] = (u, h, r)
                if r:
                    relayed.setdefault(u, []).append((q, k))
        self._trees[key] = out
        self._relayed[key] = relayed
        return out

    def senders(self, s: int, name: str, q: int, need: Need) -> list[int]:
        """Where each piece of ``q``'s need comes from: its source, or its tree parent."""
        peers = need.pieces.peer.tolist()
        if not self.routed(name):
            return peers
        tree = self.trees(s, name)
        return [tree[q, k][0] if (q, k) in tree else src for k, src in enumerate(peers)]

    def forwards(self, s: int, name: str, p: int) -> list[tuple[int, int]]:
        """The ``(receiver, piece number)`` pairs ``p`` passes on at step ``s`` (a relay of
        their trees), by receiver then piece."""
        if not self.routed(name):
            return []
        self.trees(s, name)
        return sorted(self._relayed[s, name].get(p, ()))

    def out_state(self, p: int, s: int) -> tuple[Region, Region | None]:
        """Processor ``p``'s output region opened at step ``s``, and the part of its owned
        block that region is when the leaves add straight into it (None: a buffer)."""
        sp = self.sp
        region = self.region(self.steps[s][p].out)
        own_out = _owned(sp, self.out_name, p)
        direct = _direct_region(region, own_out) if _reduces_own(sp, p) else None
        return region, direct

    def flushes(self, s: int) -> bool:
        """Whether the output buffer ends (and is flushed) at step ``s``."""
        return self.per_step_out or s == self.S - 1

    # -- one processor's part --------------------------------------------------------------

    def own(self, p: int) -> tuple[list[Op], list[Message], list[Message]]:
        """Processor ``p``'s instructions before its reductions, the fetch messages it
        receives and the partial sums it sends, in the order the plan lists them."""
        a, sp = self.a, self.sp
        ops: list[Op] = []
        fetches: list[Message] = []
        partials: list[Message] = []
        held: dict[str, Region] = {}
        open_region: Region | None = None
        direct: Region | None = None
        out_region: Region | None = None
        out_parts: list[Region] = []
        for s, procs in enumerate(self.steps):
            pp = procs[p]
            for name, need in pp.needs.items():
                if not self.fetched(s, name):
                    continue
                region = self.region(need)
                pcs = need.pieces
                senders = self.senders(s, name, p, need)
                pieces = tuple(zip(senders, self.parts(need, region), strict=True))
                own = _owned(sp, name, p)
                view = (
                    len(pieces) == 1
                    and pcs.peer[0] == p
                    and len(pcs.sel(0)) == len(need.rows)
                    and pcs.box(0) == tuple(need.box)
                    and own is not None
                    and _slices_only(locate(region, own).index)
                )
                ops.append(Fetch(s, name, region, pieces, bool(view)))
                held[name] = region
                tree = self.trees(s, name) if self.routed(name) else {}
                for k in np.flatnonzero(self.carried(pcs, FETCH) & (pcs.peer != p)).tolist():
                    src, part = pieces[k]
                    _, hop, relay = tree.get((p, k), (src, 0, False))
                    fetches.append(Message(s, FETCH, name, src, p, part, hop, relay))
            for name in pp.needs:  # routing: the pieces p passes on, once its copy is here
                if not self.fetched(s, name):
                    continue
                for q, k in self.forwards(s, name, p):
                    need = procs[q].needs[name]
                    part = self.parts(need, self.region(need), np.array([k]))[0]
                    ops.append(Forward(s, name, part, q))  # type: ignore[arg-type]
            views: list[tuple[str, Region]] = []
            if self.S > 1:
                for name in pp.needs:
                    t = a.tensors[name]
                    if t.format.is_dense and not a.depth[name] and _dims(a, name)[1]:
                        views.append((name, _step_part(held[name], pp.box, a.access(name), ())))
            out_view: Region | None = None
            if self.per_step_out or s == 0:
                out_region, direct = self.out_state(p, s)
                out_parts = self.parts(pp.out, out_region)
                open_region = direct if direct is not None else out_region
                ops.append(OpenOutput(s, open_region, direct is not None))
            if not self.per_step_out:
                assert open_region is not None
                out_view = _step_part(open_region, pp.box, self.lhs, self.out_dd)
            assert out_region is not None
            placed = _out_rows(out_region, direct)
            ops.append(Compute(s, (), _work(a, pp, tuple(views), out_view, placed)))
            if direct is None and self.flushes(s):
                assert out_region is not None
                sends, local = [], []
                out_pcs = pp.out.pieces
                carried = self.carried(out_pcs, PARTIAL).tolist()
                for dst, part, c in zip(out_pcs.peer.tolist(), out_parts, carried, strict=True):
                    if dst == p:
                        local.append(part)
                    elif c:
                        sends.append((dst, part))
                        partials.append(Message(s, PARTIAL, self.out_name, p, dst, part))
                ops.append(Flush(s, out_region, tuple(sends), tuple(local)))
        return ops, fetches, partials

    # -- what the others exchange with one processor ---------------------------------------

    def served(self, p: int) -> list[Message]:
        """The fetch messages ``p`` sends: the pieces of the others' needs it is the source
        (or, routed, the tree parent) of, in the order their own parts list them."""
        out: list[Message] = []
        for q in range(self.sp.nprocs):
            if q == p:
                continue
            for s, procs in enumerate(self.steps):
                for name, need in procs[q].needs.items():
                    if not self.fetched(s, name):
                        continue
                    pcs = need.pieces
                    carried = self.carried(pcs, FETCH) & (pcs.peer != q)
                    if self.routed(name):
                        tree = self.trees(s, name)
                        peer = pcs.peer.tolist()
                        ks = np.array(
                            [
                                k
                                for k in np.flatnonzero(carried).tolist()
                                if tree.get((q, k), (peer[k],))[0] == p
                            ],
                            np.int64,
                        )
                    else:
                        tree = {}
                        ks = np.flatnonzero(carried & (pcs.peer == p))
                    if not len(ks):
                        continue
                    parts = self.parts(need, self.region(need), ks)
                    for k, part in zip(ks.tolist(), parts, strict=True):
                        _, hop, relay = tree.get((q, k), (p, 0, False))
                        out.append(Message(s, FETCH, name, p, q, part, hop, relay))
        return out

    def partials_to(self, p: int) -> list[Message]:
        """The partial sums the others send ``p``, in the order their parts list them."""
        out: list[Message] = []
        for q in range(self.sp.nprocs):
            if q == p:
                continue
            region: Region | None = None
            direct: Region | None = None
            opened = 0
            for s, procs in enumerate(self.steps):
                if self.per_step_out or s == 0:
                    region = direct = None  # opened at this step: read on first use
                    opened = s
                if not self.flushes(s):
                    continue
                need = procs[q].out
                pcs = need.pieces
                ks = np.flatnonzero(self.carried(pcs, PARTIAL) & (pcs.peer == p))
                if not len(ks):
                    continue
                if region is None:
                    region, direct = self.out_state(q, opened)
                if direct is not None:
                    continue
                parts = self.parts(need, region, ks)
                out += [Message(s, PARTIAL, self.out_name, q, p, part) for part in parts]
        return out

    def finals(self, programs: dict[int, list[Op]]) -> list[Message]:
        """A replicated output: each replica's finished block from its reducer, after the
        last step (``SendFinal``/``RecvFinal`` appended to the programs held in
        ``programs``)."""
        a, sp = self.a, self.sp
        finals: list[Message] = []
        if self.out_name not in a.placements:
            return finals
        pl = a.placements[self.out_name]
        for p in range(sp.nprocs):
            idx = pl.block_index(Plan.coord_in(pl, p))
            if idx is None or idx not in sp.primary:
                continue
            q = sp.primary[idx]
            if q != p and words(pl.block_box(idx)):
                box = pl.block_box(idx)
                if q in programs:
                    programs[q].append(SendFinal(p, box))
                if p in programs:
                    programs[p].append(RecvFinal(q, box))
                finals.append(Message(self.S, FINAL, self.out_name, q, p, box))
        return sorted(finals, key=lambda m: (m.src, m.dst))

    def primary(self) -> dict[tuple[int, ...], int]:
        """Output block -> its reducer: the binding's choice for a replicated output, each
        owner its own block otherwise."""
        a, sp = self.a, self.sp
        primary: dict[tuple[int, ...], int] = dict(sp.primary)
        if self.out_name in a.placements:
            pl = a.placements[self.out_name]
            for p in range(sp.nprocs):
                idx = pl.block_index(Plan.coord_in(pl, p))
                if idx is not None and idx not in sp.primary:
                    primary[idx] = p
        return primary

    def plan(
        self, programs: dict[int, list[Op]], fetches: list[Message], partials: list[Message],
        procs: tuple[int, ...],
    ) -> Plan:  # fmt: skip
        """The plan holding ``programs``: reductions appended in increasing (step, source)
        order, messages in the canonical order (step, kind, source, destination)."""
        a, sp = self.a, self.sp
        partials = sorted(partials, key=lambda m: (m.step, m.src, m.dst))
        for m in partials:
            if m.dst in programs:
                programs[m.dst].append(Reduce(m.step, m.src, m.box))
        order = self.tensor_order
        fetches = sorted(fetches, key=lambda m: (m.step, m.src, m.dst, order[m.tensor]))
        # canonical order (step, kind, source, destination): both ends of a pair agree on it
        messages = sorted([*fetches, *partials], key=lambda m: (m.step, m.kind != FETCH))
        messages += [m for m in self.finals(programs) if not procs or {m.src, m.dst} & set(procs)]
        P = sp.nprocs
        owned = {
            n: tuple(_owned(sp, n, p) for p in range(P)) for n in a.tensors if n not in a.placements
        }
        patterns: dict[str, object] = dict(sp.arrays)
        if sp.out_pattern is not None:
            patterns[self.out_name] = sp.out_pattern
        return Plan(
            statement=a.statement,
            nprocs=P,
            nsteps=self.S,
            placements=dict(a.placements),
            inputs=tuple(t.name for t in a.statement.inputs()),
            output=self.out_name,
            programs=(
                tuple(tuple(programs[p]) for p in range(P))
                if not procs
                else {p: tuple(programs[p]) for p in procs}
            ),
            messages=tuple(messages),
            primary=self.primary(),
            machine=a.machine,
            routing=self.routing,
            procs=procs,
            owned=owned,
            patterns=patterns,
        )


@contextmanager
def _no_collections() -> Iterator[None]:
    """Pause the cyclic garbage collector while a plan's objects are made: a plan at
    ``P = 1024`` holds about a million regions and messages, none of them in a cycle
    (a part points to its parent, never back), and the collections their allocation
    triggers, each walking every live object, cost almost as much as making them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def emit(sp: SparsePlan, routing: str = "direct") -> Plan:
    """The whole plan of a bound sparse kernel: every processor's part."""
    w = _Writer(sp, routing)
    programs: dict[int, list[Op]] = {}
    fetches: list[Message] = []
    partials: list[Message] = []
    with _no_collections():
        for p in range(sp.nprocs):
            programs[p], f, q = w.own(p)
            fetches += f
            partials += q
        return w.plan(programs, fetches, partials, ())


def program(sp: SparsePlan, p: int, routing: str = "direct") -> Plan:
    """Processor ``p``'s part of the plan of a bound sparse kernel, written without the
    other processors' programs: its instructions and every message it sends or receives
    (equal to ``emit(sp, routing).restrict(p)``)."""
    w = _Writer(sp, routing)
    w._focus = p
    with _no_collections():
        ops, fetches, partials = w.own(p)
        return w.plan({p: ops}, [*fetches, *w.served(p)], [*partials, *w.partials_to(p)], (p,))


def summarize(plan: Plan) -> PlanSummary:
    """The exact stats of a bound plan: counted from it as every plan's are."""
    return count_plan(plan)
