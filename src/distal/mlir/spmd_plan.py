"""What every step of a plan does, in the terms of SPMD code: the analysis behind
``kernel.to_mlir(distributed=True)`` (:mod:`distal.mlir.distributed` prints it).

A plan lists, for each processor, the pieces it fetches, the leaf calls it makes and the
partial sums it sends. SPMD code is one program that every processor runs; a step's data
movement of one tensor is written as one collective when every processor's part in it
fits that collective's pattern (all of them, or the step is written point to point):

* ``keep``: nothing fetched this step (the buffer of the previous step is read again);
* ``local``: every processor reads its own block;
* ``broadcast``: processor ``p`` reads the whole block of the processor that agrees with
  ``p`` everywhere but on grid axes ``A``, where it sits at ``root`` (the same for all):
  ``shard.broadcast`` over ``A`` (SUMMA);
* ``shift``: ``p`` reads the whole block held by ``p + o`` along one axis (cyclically), of
  its own blocks or of the blocks in the buffers of the step before: ``shard.shift`` (the
  offset of numpy's ``roll``, ``-o``) (Cannon after its first step);
* ``all_gather``: ``p`` reads the union of the blocks of its group along the axes cutting
  one tensor dimension: ``shard.all_gather``;
* ``p2p``: anything else (Cannon's initial skew, sparse row gathers): each processor's
  exact sends and receives (``shard.send`` / ``shard.recv`` in a case of its own).

Output partial sums at the end of a step: ``reduce`` when each group along some axes sends
its whole partial blocks to one root (``shard.reduce``; followed by the final copies to the
same group: ``shard.all_reduce``), else point to point. Final copies to replicas after the
last step: ``broadcast`` or point to point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.errors import NotSupportedYet
from distal.plan.ir import Compute, Fetch, Flush, OpenOutput, Plan, RecvFinal, Reduce, SendFinal
from distal.plan.region import Entries, Rows

Box = tuple[tuple[int, int], ...]


def box_of(region: Any) -> Box | None:
    """A dense box covering ``region`` (Rows: their hull times the box); None for entries."""
    if isinstance(region, Entries):
        return None
    if isinstance(region, Rows):
        nd = len(region.sdims) + len(region.ddims)
        out: list[tuple[int, int]] = [(0, 0)] * nd
        for k, d in enumerate(region.sdims):
            col = region.rows[:, k]
            out[d] = (int(col.min()), int(col.max()) + 1) if len(col) else (0, 0)
        for k, d in enumerate(region.ddims):
            out[d] = tuple(region.box[k])  # type: ignore[assignment]
        return tuple(out)
    return tuple((int(lo), int(hi)) for lo, hi in region)


def boxes_of(region: Any) -> list[Box]:
    """``region`` as dense boxes, in its own order: a box is itself; Rows are runs of
    consecutive rows (one sparse dimension) or single rows, each times the box."""
    if isinstance(region, Entries):
        raise NotSupportedYet(
            "a piece of stored entries moves between processors: the distributed MLIR export "
            "writes sparse operands where they are owned"
        )
    if not isinstance(region, Rows):
        return [box_of(region)]  # type: ignore[list-item]
    nd = len(region.sdims) + len(region.ddims)
    rows = np.asarray(region.rows)
    runs: list[tuple[np.ndarray, int]] = []
    for r in rows:
        if runs and len(region.sdims) == 1 and int(r[0]) == int(runs[-1][0][0]) + runs[-1][1]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((r, 1))
    out = []
    for r, n in runs:
        b: list[tuple[int, int]] = [(0, 0)] * nd
        for k, d in enumerate(region.sdims):
            b[d] = (int(r[k]), int(r[k]) + (n if k == len(region.sdims) - 1 else 1))
        for k, d in enumerate(region.ddims):
            b[d] = tuple(region.box[k])  # type: ignore[assignment]
        out.append(tuple(b))
    return out


def inside(sub: Box, holder: Box) -> bool:
    return all(h0 <= s0 and s1 <= h1 for (s0, s1), (h0, h1) in zip(sub, holder, strict=True))


def extents(b: Box) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in b)


@dataclass(frozen=True, slots=True)
class Exchange:
    """One input tensor's data movement at one step (see the module docstring)."""

    tensor: str
    kind: str
    buffers: tuple[Box | None, ...]  # per processor: the box its buffer holds afterwards
    axes: tuple[int, ...] = ()
    root: tuple[int, ...] = ()
    offset: int = 0
    base: str = "own"  # shift of the own blocks or of the previous buffers
    dim: int = -1
    #: point to point, per processor: (source, piece) received, (destination, piece) sent
    recv: tuple[tuple[tuple[int, Box], ...], ...] = ()
    send: tuple[tuple[tuple[int, Box], ...], ...] = ()
    #: per processor: the owner whose whole block the buffer holds (collectives)
    holder: tuple[int | None, ...] = ()

    def signature(self) -> tuple:
        """What must agree between the steps of one ``scf.for``: the collective and its
        constant parameters (a broadcast's root may change: it is read from a table)."""
        if self.kind == "shift":
            return (self.kind, self.axes, self.offset, self.base)
        return (self.kind, self.axes, self.dim)


@dataclass(frozen=True, slots=True)
class LeafCall:
    """One leaf call: the global box of every input operand (None: a sparse operand, read
    whole) and of the output."""

    inputs: tuple[Box | None, ...]
    output: Box | None


@dataclass(frozen=True, slots=True)
class OutputStep:
    """The output at one step: each processor's accumulation buffer and whether it is the
    owned block, then the partial sums that leave at the step's end."""

    acc: tuple[Box | None, ...]  # None: no OpenOutput this step (the previous buffer)
    direct: tuple[bool, ...]
    kind: str = "none"  # "none" | "reduce" | "reduce_scatter" | "p2p"
    axes: tuple[int, ...] = ()
    root: tuple[int, ...] = ()
    dim: int = -1
    send: tuple[tuple[tuple[int, Box], ...], ...] = ()
    local: tuple[tuple[Box, ...], ...] = ()
    recv: tuple[tuple[tuple[int, Box], ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Finals:
    """The finished output's copies to its replicas after the last step."""

    kind: str = "none"  # "none" | "broadcast" | "p2p"
    axes: tuple[int, ...] = ()
    root: tuple[int, ...] = ()
    send: tuple[tuple[tuple[int, Box], ...], ...] = ()
    recv: tuple[tuple[tuple[int, Box], ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Step:
    exchanges: tuple[Exchange, ...]
    calls: tuple[tuple[LeafCall, ...], ...]  # per processor
    output: OutputStep


@dataclass
class Analysis:
    grid: tuple[int, ...]
    own: dict[str, tuple[Box | None, ...]]  # tensor -> per processor owned box
    steps: list[Step] = field(default_factory=list)
    finals: Finals = field(default_factory=Finals)


def coords(p: int, grid: Sequence[int]) -> tuple[int, ...]:
    out = []
    for s in reversed(grid):
        out.append(p % s)
        p //= s
    return tuple(reversed(out))


def rank(c: Sequence[int], grid: Sequence[int]) -> int:
    r = 0
    for x, s in zip(c, grid, strict=True):
        r = r * s + x
    return r


def analyze(
    plan: Plan,
    own: dict[str, tuple[Box | None, ...]],
    operands: Sequence[str],
    call_boxes: Any,
    sparse: set[str],
) -> Analysis:
    """The steps of ``plan`` as SPMD collectives.

    ``own``: every dense tensor's owned box per processor; ``operands``: the leaf's input
    tensors in order; ``call_boxes(p, compute)``: the leaf calls of one ``Compute``;
    ``sparse``: the inputs read where they are owned (stored entries).
    """
    if plan.routing != "direct":
        raise NotSupportedYet(
            f"routing={plan.routing!r}: the distributed MLIR export writes plans whose pieces "
            "go straight from owner to reader (routing='direct')"
        )
    grid = plan.machine.shape if plan.machine is not None else (plan.nprocs,)
    P = plan.nprocs
    out = Analysis(grid, own)
    ops = [plan.ops(p) for p in range(P)]
    prev: dict[str, Exchange] = {}
    acc_prev: list[Box | None] = [None] * P
    for s in range(plan.nsteps):
        exchanges = []
        for t in operands:
            if t in sparse:
                continue
            fetches = [
                next(
                    (o for o in ops[p] if isinstance(o, Fetch) and o.step == s and o.tensor == t),
                    None,
                )
                for p in range(P)
            ]
            ex = _exchange(t, fetches, own[t], grid, prev.get(t))
            prev[t] = ex
            exchanges.append(ex)
        calls = tuple(
            tuple(
                c
                for o in ops[p]
                if isinstance(o, Compute) and o.step == s
                for c in call_boxes(p, o)
            )
            for p in range(P)
        )
        opens = [
            next((o for o in ops[p] if isinstance(o, OpenOutput) and o.step == s), None)
            for p in range(P)
        ]
        # a direct output accumulates into the owned block itself (its box a part of it)
        own_out = own[plan.output]
        acc = tuple(
            None if o is None else (own_out[p] if o.direct else box_of(o.box))
            for p, o in enumerate(opens)
        )
        direct = tuple(bool(o.direct) if o is not None else True for o in opens)
        for p in range(P):
            if opens[p] is not None:
                acc_prev[p] = acc[p]
        flushes = [
            next((o for o in ops[p] if isinstance(o, Flush) and o.step == s), None)
            for p in range(P)
        ]
        reduces = [[o for o in ops[p] if isinstance(o, Reduce) and o.step == s] for p in range(P)]
        output = _output_step(acc, direct, flushes, reduces, own[plan.output], grid, list(acc_prev))
        out.steps.append(Step(tuple(exchanges), calls, output))
    sends = [[o for o in ops[p] if isinstance(o, SendFinal)] for p in range(P)]
    recvs = [[o for o in ops[p] if isinstance(o, RecvFinal)] for p in range(P)]
    out.finals = _finals(sends, recvs, own[plan.output], grid)
    return out


def _differing(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    return tuple(m for m, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)


def _exchange(
    t: str,
    fetches: list[Fetch | None],
    own: tuple[Box | None, ...],
    grid: tuple[int, ...],
    prev: Exchange | None,
) -> Exchange:
    P = len(fetches)
    if all(f is None for f in fetches):
        return Exchange(
            t, "keep", prev.buffers if prev is not None else own, holder=prev.holder if prev else ()
        )
    if any(f is None or f.box is None for f in fetches):
        return _p2p(t, fetches, own, prev)
    if all(f.view for f in fetches):  # type: ignore[union-attr]
        return Exchange(t, "local", own, holder=tuple(range(P)))
    # one whole owned block per processor: which processor's?
    holder: list[int] = []
    for p, f in enumerate(fetches):
        assert f is not None
        if f.view:
            holder.append(p)
            continue
        if len(f.pieces) != 1:
            return _gather(t, fetches, own, grid) or _p2p(t, fetches, own, prev)
        q, piece = f.pieces[0]
        b = box_of(piece)
        if b is None or b != own[q] or box_of(f.box) != b:
            return _p2p(t, fetches, own, prev)
        holder.append(q)
    whole = tuple(holder)
    cs = [coords(p, grid) for p in range(P)]
    hs = [coords(q, grid) for q in holder]
    axes = sorted({m for p in range(P) for m in _differing(cs[p], hs[p])})
    buffers = tuple(own[q] for q in holder)
    if axes:
        roots = {tuple(hs[p][m] for m in axes) for p in range(P)}
        if len(roots) == 1:
            return Exchange(t, "broadcast", buffers, tuple(axes), roots.pop(), holder=tuple(holder))
    if len(axes) == 1:
        (a,) = axes
        offs = {(hs[p][a] - cs[p][a]) % grid[a] for p in range(P)}
        if len(offs) == 1:
            return Exchange(t, "shift", buffers, (a,), offset=offs.pop(), holder=tuple(holder))
    if prev is not None and prev.holder and all(h is not None for h in prev.holder):
        shifted = _shift_of_previous(holder, prev.holder, grid)  # type: ignore[arg-type]
        if shifted is not None:
            a, o = shifted
            return Exchange(
                t, "shift", buffers, (a,), offset=o, base="buffer", holder=tuple(holder)
            )
    return _p2p(t, fetches, own, prev, whole)


def _shift_of_previous(
    holder: list[int], prev: Sequence[int], grid: tuple[int, ...]
) -> tuple[int, int] | None:
    """``(axis, o)`` with ``holder[p] == prev[p + o along axis]`` for every ``p``."""
    P = len(holder)
    for a in range(len(grid)):
        for o in range(1, grid[a]):
            ok = True
            for p in range(P):
                c = list(coords(p, grid))
                c[a] = (c[a] + o) % grid[a]
                if prev[rank(c, grid)] != holder[p]:
                    ok = False
                    break
            if ok:
                return a, o
    return None


def _gather(
    t: str, fetches: list[Fetch | None], own: tuple[Box | None, ...], grid: tuple[int, ...]
) -> Exchange | None:
    """An all-gather: each processor reads the blocks of every member of its group along
    some axes, which tile its buffer along one tensor dimension."""
    P = len(fetches)
    cs = [coords(p, grid) for p in range(P)]
    axes_seen: set[tuple[int, ...]] = set()
    dims: set[int] = set()
    buffers = []
    for p, f in enumerate(fetches):
        assert f is not None
        assert f.box is not None
        srcs = [q for q, _ in f.pieces]
        bs = [box_of(piece) for _, piece in f.pieces]
        if any(b is None or b != own[q] for q, b in zip(srcs, bs, strict=True)):
            return None
        ax = tuple(sorted({m for q in srcs for m in _differing(cs[p], cs[q])}))
        group = {
            q
            for q in range(P)
            if all(cs[q][m] == cs[p][m] for m in range(len(grid)) if m not in ax)
        }
        if set(srcs) != group or len(srcs) != len(group):
            return None
        diff = {d for b in bs for d, iv in enumerate(b) if iv != bs[0][d]}  # type: ignore[index]
        if len(diff) != 1:
            return None
        d = diff.pop()
        order = sorted(bs, key=lambda b: b[d][0])  # type: ignore[index]
        if any(order[k][d][1] != order[k + 1][d][0] for k in range(len(order) - 1)):  # type: ignore[index]
            return None
        hull = tuple(
            (order[0][e][0], order[-1][e][1]) if e == d else order[0][e]  # type: ignore[index]
            for e in range(len(order[0]))  # type: ignore[arg-type]
        )
        # the gathered blocks are concatenated in the group's order (row-major over axes)
        ranks = [_group_index(cs[q], ax, grid) for q in srcs]
        by_rank = [b for _, b in sorted(zip(ranks, bs, strict=True))]
        if box_of(f.box) != hull or by_rank != order:
            return None
        axes_seen.add(ax)
        dims.add(d)
        buffers.append(hull)
    if len(axes_seen) != 1 or len(dims) != 1:
        return None
    return Exchange(t, "all_gather", tuple(buffers), axes_seen.pop(), dim=dims.pop())


def _group_index(c: Sequence[int], axes: Sequence[int], grid: Sequence[int]) -> int:
    k = 0
    for m in axes:
        k = k * grid[m] + c[m]
    return k


def _p2p(
    t: str,
    fetches: list[Fetch | None],
    own: tuple[Box | None, ...],
    prev: Exchange | None,
    holder: tuple[int, ...] = (),
) -> Exchange:
    """Point to point: each processor's buffer is its fetch box, made of the pieces it
    receives (its own pieces copied from its block); a view reads the own block."""
    P = len(fetches)
    buffers: list[Box | None] = []
    recv: list[list[tuple[int, Box]]] = [[] for _ in range(P)]
    send: list[list[tuple[int, Box]]] = [[] for _ in range(P)]
    for p, f in enumerate(fetches):
        if f is None:
            buffers.append(prev.buffers[p] if prev is not None else own[p])
            continue
        if f.box is None:
            buffers.append(None)
            continue
        if f.view:
            buffers.append(own[p])
            continue
        buffers.append(box_of(f.box))
        for q, piece in f.pieces:
            for b in boxes_of(piece):
                recv[p].append((q, b))
                if q != p:
                    send[q].append((p, b))
    return Exchange(
        t,
        "p2p",
        tuple(buffers),
        recv=tuple(tuple(r) for r in recv),
        send=tuple(tuple(x) for x in send),
        holder=holder,
    )


def _output_step(
    acc: tuple[Box | None, ...],
    direct: tuple[bool, ...],
    flushes: list[Flush | None],
    reduces: list[list[Reduce]],
    own: tuple[Box | None, ...],
    grid: tuple[int, ...],
    held: list[Box | None],
) -> OutputStep:
    P = len(acc)
    if all(f is None for f in flushes) and not any(reduces):
        return OutputStep(acc, direct)
    # a reduce: every flushing processor sends its whole partial to one processor of its
    # group, which adds it into its own block; every processor flushes or is such a root
    cs = [coords(p, grid) for p in range(P)]
    dests: dict[int, int] = {}
    ok = True
    for p, f in enumerate(flushes):
        if f is None:
            continue
        q = f.sends[0][0] if len(f.sends) == 1 else -1
        if f.local or q < 0 or box_of(f.sends[0][1]) != held[p] or held[p] != own[q]:
            ok = False
            break
        dests[p] = f.sends[0][0]
    roots = set(dests.values())
    if ok and dests and all(p in dests or p in roots for p in range(P)) and not roots & set(dests):
        axes = tuple(sorted({m for p, q in dests.items() for m in _differing(cs[p], cs[q])}))
        rootc = {tuple(cs[q][m] for m in axes) for q in roots}
        grouped = all(
            all(cs[p][m] == cs[q][m] for m in range(len(grid)) if m not in axes)
            for p, q in dests.items()
        )
        sizes = {sum(1 for q in dests.values() if q == r) for r in roots}
        group = 1
        for m in axes:
            group *= grid[m]
        if (
            len(rootc) == 1
            and grouped
            and sizes == {group - 1}
            and all(held[r] == own[r] for r in roots)
        ):
            return OutputStep(acc, direct, "reduce", axes, rootc.pop())
    rs = _reduce_scatter(flushes, reduces, own, grid, held)
    if rs is not None:
        return OutputStep(acc, direct, "reduce_scatter", rs[0], dim=rs[1])
    send = tuple(
        tuple((q, b) for q, piece in (f.sends if f else ()) for b in boxes_of(piece))
        for f in flushes
    )
    local = tuple(
        tuple(b for piece in (f.local if f else ()) for b in boxes_of(piece)) for f in flushes
    )
    recv = tuple(tuple((r.src, b) for r in rs for b in boxes_of(r.box)) for rs in reduces)
    return OutputStep(acc, direct, "p2p", send=send, local=local, recv=recv)


def _reduce_scatter(
    flushes: list[Flush | None],
    reduces: list[list[Reduce]],
    own: tuple[Box | None, ...],
    grid: tuple[int, ...],
    held: list[Box | None],
) -> tuple[tuple[int, ...], int] | None:
    """``(axes, dim)`` when every processor's partial block is cut along tensor dimension
    ``dim`` into the own blocks of its group along ``axes`` (in the group's order), each
    piece going to its owner and the processor's own piece staying: a reduce-scatter."""
    P = len(flushes)
    cs = [coords(p, grid) for p in range(P)]
    axes_seen, dims = set(), set()
    for p, f in enumerate(flushes):
        if f is None or held[p] is None or own[p] is None or len(f.local) != 1:
            return None
        pieces = [(p, box_of(f.local[0]))] + [(q, box_of(b)) for q, b in f.sends]
        if any(b is None or b != own[q] for q, b in pieces):
            return None
        ax = tuple(sorted({m for q, _ in pieces for m in _differing(cs[p], cs[q])}))
        group = [
            q
            for q in range(P)
            if all(cs[q][m] == cs[p][m] for m in range(len(grid)) if m not in ax)
        ]
        if sorted(q for q, _ in pieces) != group or not ax:
            return None
        if any(held[q] != held[p] for q in group):
            return None
        srcs = sorted(r.src for r in reduces[p])
        if srcs != [q for q in group if q != p] or any(box_of(r.box) != own[p] for r in reduces[p]):
            return None
        order = [b for _, b in sorted((_group_index(cs[q], ax, grid), b) for q, b in pieces)]
        diff = {d for b in order for d, iv in enumerate(b) if iv != order[0][d]}  # type: ignore[index]
        if len(diff) != 1:
            return None
        d = diff.pop()
        if order[0][d][0] != held[p][d][0] or order[-1][d][1] != held[p][d][1]:  # type: ignore[index]
            return None
        if any(order[k][d][1] != order[k + 1][d][0] for k in range(len(order) - 1)):  # type: ignore[index]
            return None
        axes_seen.add(ax)
        dims.add(d)
    if len(axes_seen) != 1 or len(dims) != 1:
        return None
    return axes_seen.pop(), dims.pop()


def _finals(
    sends: list[list[SendFinal]],
    recvs: list[list[RecvFinal]],
    own: tuple[Box | None, ...],
    grid: tuple[int, ...],
) -> Finals:
    P = len(sends)
    if not any(sends) and not any(recvs):
        return Finals()
    cs = [coords(p, grid) for p in range(P)]
    src: dict[int, int] = {}
    ok = True
    for p, rs in enumerate(recvs):
        if len(rs) > 1 or (rs and tuple(rs[0].box) != own[p]):
            ok = False
        if rs:
            src[p] = rs[0].src
    roots = set(src.values())
    if ok and all(p in src or p in roots for p in range(P)):
        axes = tuple(sorted({m for p, q in src.items() for m in _differing(cs[p], cs[q])}))
        rootc = {tuple(cs[q][m] for m in axes) for q in roots}
        if len(rootc) == 1 and all(own[q] == own[p] for p, q in src.items()):
            return Finals("broadcast", axes, rootc.pop())
    return Finals(
        "p2p",
        send=tuple(tuple((s.dst, tuple(s.box)) for s in ss) for ss in sends),
        recv=tuple(tuple((r.src, tuple(r.box)) for r in rs) for rs in recvs),
    )
