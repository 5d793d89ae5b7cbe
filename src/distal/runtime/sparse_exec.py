"""Executing a bound sparse plan: what a processor owns, sends, computes and reduces.

The four phases every runtime runs (the local runtime on threads, MPI on ranks, Dask as
tasks); each reads its processor's part of :class:`~distal.plan.sparse.SparsePlan` and never
recomputes ownership:

1. :func:`owned_data` -- the caller's inputs cut to what processor ``p`` owns (placing
   inputs is not counted as traffic);
2. :func:`payload` -- what a source sends for one piece of a receiver's need: dense values at
   the listed rows x box, or a sparse piece's values with its ``pos``/``crd`` arrays;
3. :class:`Compute` -- assemble the processor's operands from owned data and payloads, run
   the leaves (:class:`~distal.kernels.sparse_leaf.TermLeaf`), and cut the partial sums for
   other owners;
4. :func:`reduce_output` -- the owner adds its own contribution, then the partial sums
   received, in increasing source order (fixed, so every runtime gives the same bits).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.plan.sparse import Need, Piece, ProcPlan, SparsePlan, piece_arrays
from distal.plan.stats import Stats
from distal.runtime.source import is_block_source, read_block


@dataclass(frozen=True, slots=True, eq=False)
class Owned:
    """Processor ``p``'s own data: per input a dense block (with its box) or the values of
    its stored entries (with their positions)."""

    p: int
    dense: dict[str, tuple[np.ndarray, tuple[tuple[int, int], ...]]]
    sparse: dict[str, tuple[np.ndarray, np.ndarray]]


def owned_data(plan: SparsePlan, p: int, inputs: Mapping[str, Any]) -> Owned:
    """Cut the inputs to what ``p`` owns (dense: its block; sparse: its stored values)."""
    a = plan.analysis
    dense, sparse = {}, {}
    for name, t in a.tensors.items():
        if name == a.output.name:
            continue
        own = plan.owned[name][p]
        if t.format.is_dense:
            if own is None:
                continue
            arr = inputs[name]
            if is_block_source(arr):  # e.g. a session's held block: read only what p owns
                block = read_block(name, arr, own, np.dtype(t.dtype))
            else:
                block = np.asarray(arr[tuple(slice(lo, hi) for lo, hi in own)], dtype=t.dtype)
            dense[name] = (np.ascontiguousarray(block), own)
        else:
            vals = np.asarray(inputs[name].vals, dtype=t.dtype)
            n = len(own)
            run = n == 0 or (int(own[-1]) - int(own[0]) == n - 1)  # ascending, so a run
            sparse[name] = (vals[int(own[0]) : int(own[0]) + n] if run and n else vals[own], own)
    return Owned(p, dense, sparse)


def _block_rows(
    plan: SparsePlan, need: Need, sel: np.ndarray, sub: tuple, block: np.ndarray, own: tuple
) -> np.ndarray:
    """``rows[sel] x sub`` of a dense tensor read from an owned ``block`` at box ``own``."""
    a = plan.analysis
    acc = a.access(need.tensor)
    sd = [d for d, v in enumerate(acc.indices) if v in a.svars]
    dd = [d for d, v in enumerate(acc.indices) if v in a.dvars]
    view = np.transpose(block, sd + dd)
    dense_part = tuple(
        slice(lo - own[d][0], hi - own[d][0]) for (lo, hi), d in zip(sub, dd, strict=True)
    )
    if len(sd) == 1 and len(sel):
        r = need.rows[sel, 0]
        if int(r[-1]) - int(r[0]) == len(r) - 1:
            # a need's rows are distinct and ascending, so these are consecutive (a block's
            # own rows, a band): a view, not a gather
            lo = int(r[0]) - own[sd[0]][0]
            return view[(slice(lo, lo + len(r)), *dense_part)]
    index = tuple(need.rows[sel, j] - own[d][0] for j, d in enumerate(sd)) + dense_part
    if not sd:  # no pattern dimension: one row
        return view[index][None, ...]
    return view[index]


def payload(plan: SparsePlan, owned: Owned, need: Need, piece: Piece) -> list[np.ndarray]:
    """What ``owned.p`` sends for ``piece`` of a receiver's ``need``: ``[values]`` for a dense
    tensor, ``[values, *index arrays]`` for a sparse one."""
    name = need.tensor
    if name in owned.dense:
        block, own = owned.dense[name]
        return [np.ascontiguousarray(_block_rows(plan, need, piece.sel, piece.box, block, own))]
    vals, positions = owned.sparse[name]
    want = need.rows[piece.sel]
    local = np.searchsorted(positions, want)
    out = [np.ascontiguousarray(vals[local])]
    out += piece_arrays(plan.arrays[name], want, plan.cache)
    return out


def words_of(arrays: list[np.ndarray]) -> tuple[int, int]:
    """(values, index words) of a payload, as sent (the runtimes' measured counts)."""
    return (int(arrays[0].size), int(sum(x.size for x in arrays[1:]))) if arrays else (0, 0)


class Compute:
    """Processor ``p``'s leaves, with their index structure prepared once per bound plan."""

    def __init__(self, plan: SparsePlan, p: int) -> None:
        from distal.kernels.sparse_leaf import TermLeaf

        self.plan = plan
        self.pp: ProcPlan = plan.procs[p]
        a = plan.analysis
        self.dtype = a.output.dtype
        ext = {chr(ord("a") + k): v for k, v in enumerate(a.dvars)}
        box = self.pp.box
        self.extents = {c: box[v][1] - box[v][0] for c, v in ext.items()}
        out = self.pp.out
        self.out_shape = (len(out.rows), *(hi - lo for lo, hi in out.box))
        self.leaves = []
        for t in self.pp.terms:
            if not t.active:
                self.leaves.append(None)
                continue
            self.leaves.append(
                TermLeaf(
                    t.out,
                    [d[1] for d in t.dense],
                    [d[2] for d in t.dense],
                    self.pp.out_letters,
                    len(out.rows),
                    self.extents,
                )
            )
        # a sparse factor read in storage order straight from the owned values: no gather
        self.direct = {}
        for t in self.pp.terms:
            for name, idx in t.sparse:
                need = self.pp.needs[name]
                whole = len(need.pieces) == 1 and need.pieces[0].peer == p
                self.direct[(id(t), name)] = whole and bool(
                    len(idx) == len(need.rows)
                    and (len(idx) == 0 or idx[-1] == len(idx) - 1)
                    and np.all(np.diff(idx) == 1)
                )

    def operands(self, owned: Owned, received: Mapping[tuple[str, int], list[np.ndarray]]):
        """Every input as the processor's local array: dense ``rows x box``, sparse values of
        the needed stored entries (owned parts read locally, the rest from payloads)."""
        out: dict[str, np.ndarray] = {}
        for name, need in self.pp.needs.items():
            t = self.plan.analysis.tensors[name]
            if t.format.is_dense:
                shape = (len(need.rows), *(hi - lo for lo, hi in need.box))
                if len(need.pieces) == 1 and need.pieces[0].peer == self.pp.p and self._whole(need):
                    block, own = owned.dense[name]
                    out[name] = _block_rows(
                        self.plan, need, need.pieces[0].sel, need.box, block, own
                    )
                    continue
                x = np.empty(shape, dtype=t.dtype)  # the pieces cover every row x box
                for pc in need.pieces:
                    if pc.peer == self.pp.p:
                        block, own = owned.dense[name]
                        part = _block_rows(self.plan, need, pc.sel, pc.box, block, own)
                    else:
                        part = received[(name, pc.peer)].pop(0)[0]
                    x[
                        (
                            pc.sel,
                            *(
                                slice(lo - b0, hi - b0)
                                for (lo, hi), (b0, _) in zip(pc.box, need.box, strict=True)
                            ),
                        )
                    ] = part
                out[name] = x
            else:
                in_place = self._in_place(need, owned)
                if in_place is not None:  # a run of the owned values: read in place
                    out[name] = in_place
                    continue
                vals = np.zeros(len(need.rows), dtype=t.dtype)
                for pc in need.pieces:
                    if pc.peer == self.pp.p:
                        ov, positions = owned.sparse[name]
                        vals[pc.sel] = ov[np.searchsorted(positions, need.rows[pc.sel])]
                    else:
                        vals[pc.sel] = received[(name, pc.peer)].pop(0)[0]
                out[name] = vals
        return out

    def _in_place(self, need: Need, owned: Owned) -> np.ndarray | None:
        """A sparse operand's values as a view of the owned ones, when the processor owns
        every entry it needs and they are consecutive there (the plan's rule for a view)."""
        pcs = need.pieces
        if len(pcs) != 1 or pcs[0].peer != self.pp.p or len(pcs[0].sel) != len(need.rows):
            return None
        ov, positions = owned.sparse[need.tensor]
        n = len(need.rows)
        if n == 0:
            return ov[:0]
        at = np.searchsorted(positions, need.rows)
        if int(at[-1]) - int(at[0]) != n - 1 or int(at[-1]) >= len(positions):
            return None
        return ov[int(at[0]) : int(at[0]) + n]

    def held_words(self, xs: Mapping[str, np.ndarray], owned: Owned) -> int:
        """Words of the operand buffers ``xs`` (from :meth:`operands`) that are not views of
        the owned data: what the processor holds beyond what it owns while it computes."""
        n = 0
        for name, x in xs.items():
            own = owned.dense.get(name, owned.sparse.get(name))
            if own is None or not np.may_share_memory(x, own[0]):
                n += x.size
        return n

    @staticmethod
    def _whole(need: Need) -> bool:
        return len(need.pieces[0].sel) == len(need.rows) and need.pieces[0].box == need.box

    def run(self, owned: Owned, received: Mapping[tuple[str, int], list[np.ndarray]]) -> np.ndarray:
        """The processor's contributions: one row per output row it touches."""
        xs = self.operands(owned, {k: list(v) for k, v in received.items()})
        # the memory model of every plan: operand buffers, and the partial output buffer
        # unless the leaves add straight into the owned block
        self.held = self.held_words(xs, owned)
        if not _is_whole_block(self.plan, self.pp.p):
            self.held += math.prod(self.out_shape)
        y = np.zeros(self.out_shape, dtype=self.dtype)
        for t, leaf in zip(self.pp.terms, self.leaves, strict=True):
            if leaf is None or len(t.out) == 0:
                continue
            v = None
            for name, idx in t.sparse:
                vals = xs[name] if self.direct[(id(t), name)] else xs[name][idx]
                v = vals if v is None else v * vals
            coeff = t.coeff * t.scale
            if coeff != 1:
                v = v * coeff
            leaf(
                y,
                np.ascontiguousarray(v, dtype=self.dtype),
                [np.ascontiguousarray(xs[n]) for n, _, _ in t.dense],
            )
        return y


def partial(pp: ProcPlan, y: np.ndarray, piece: Piece) -> np.ndarray:
    """The part of ``y`` (a processor's contributions) that goes to ``piece.peer``."""
    index = (
        _as_slice(piece.sel),
        *(slice(lo - b0, hi - b0) for (lo, hi), (b0, _) in zip(piece.box, pp.out.box, strict=True)),
    )
    return np.ascontiguousarray(y[index])


def _as_slice(idx: np.ndarray) -> np.ndarray | slice:
    """Ascending distinct indices that are consecutive as a slice (a view, not a gather);
    plans' selections and owned positions are ascending and distinct."""
    n = len(idx)
    if n and int(idx[-1]) - int(idx[0]) == n - 1:
        return slice(int(idx[0]), int(idx[0]) + n)
    return idx


def empty_output(plan: SparsePlan, p: int) -> np.ndarray | None:
    """Processor ``p``'s owned part of the output, zero (None when it owns nothing)."""
    own = plan.owned[plan.analysis.output.name][p]
    o = plan.analysis.output
    if own is None:
        return None
    if o.format.is_dense:
        return np.zeros(tuple(hi - lo for lo, hi in own), dtype=o.dtype)
    return np.zeros(len(own), dtype=o.dtype)


def _into_index(plan: SparsePlan, q: int, src: int, piece: Piece) -> tuple:
    """Where ``piece`` (of ``src``'s contributions) lands in ``q``'s owned output: the index
    into its block, worked out once per bound plan (iterative runs reuse it)."""
    key = ("into", q, src, id(piece))
    got = plan.cache.get(key)
    if got is not None:
        return got
    a = plan.analysis
    o = a.output
    own = plan.owned[o.name][q]
    rows = plan.procs[src].out.rows[piece.sel]
    if not o.format.is_dense:
        index: tuple = (_as_slice(np.searchsorted(own, rows)),)
    else:
        lhs = a.output_access()
        sd = [d for d, v in enumerate(lhs.indices) if v in a.svars]
        dd = [d for d, v in enumerate(lhs.indices) if v in a.dvars]
        index = (
            tuple(sd + dd),
            tuple(rows[:, j] - own[d][0] for j, d in enumerate(sd))
            + tuple(
                slice(lo - own[d][0], hi - own[d][0])
                for (lo, hi), d in zip(piece.box, dd, strict=True)
            ),
            bool(sd),
        )
    plan.cache[key] = index
    return index


def add_into(
    plan: SparsePlan, q: int, block: np.ndarray, src: int, piece: Piece, part: np.ndarray
) -> None:
    """``block`` (``q``'s owned output) += ``part``, ``src``'s contribution for ``piece``."""
    index = _into_index(plan, q, src, piece)
    if len(index) == 1:  # a sparse output: positions in q's owned entries
        block[index[0]] += part
        return
    order, idx, has_rows = index
    view = np.transpose(block, order)
    if not has_rows:  # no pattern dimension: one row
        view[idx] += part[0]
        return
    view[idx] += part


def _is_whole_block(plan: SparsePlan, p: int) -> bool:
    """Whether ``p``'s contributions ``y`` are exactly its owned output block: a sparse
    output's same entries, or a dense one's same rows in order with the same dense box (one
    row dimension leading)."""
    key = ("whole", p)
    got = plan.cache.get(key)
    if got is None:
        a = plan.analysis
        o = a.output
        own = plan.owned[o.name][p]
        out = plan.procs[p].out
        got = False
        if not o.format.is_dense and own is not None:  # the same entries, in order
            got = bool(np.array_equal(out.rows, own))  # once per bound plan
        elif o.format.is_dense and own is not None:
            lhs = a.output_access()
            sd = [d for d, v in enumerate(lhs.indices) if v in a.svars]
            dd = [d for d, v in enumerate(lhs.indices) if v in a.dvars]
            rows = out.rows
            if sd == [0] and dd == list(range(1, len(lhs.indices))) and len(rows):
                lo, hi = own[0]
                got = (
                    int(rows[0, 0]) == lo
                    and int(rows[-1, 0]) == hi - 1
                    and len(rows) == hi - lo
                    and tuple(out.box) == tuple(own[1:])
                )
        plan.cache[key] = got
    return got


def reduce_output(
    plan: SparsePlan, p: int, y: np.ndarray, received: Mapping[int, np.ndarray]
) -> np.ndarray | None:
    """``p``'s final output part: its own contributions, then the partial sums received in
    increasing source order."""
    pp = plan.procs[p]
    if _is_whole_block(plan, p):  # its contributions are its block, row for row
        # y itself when nothing is added (y may be read again, e.g. by a verifier)
        block = y.copy() if any(len(v) for v in received.values()) else y
    else:
        block = empty_output(plan, p)
        for pc in pp.out.pieces:
            if pc.peer == p:
                add_into(plan, p, block, p, pc, partial(pp, y, pc))
    for src in sorted(received):
        spp = plan.procs[src]
        for pc, part in zip([x for x in spp.out.pieces if x.peer == p], received[src], strict=True):
            add_into(plan, p, block, src, pc, part)
    return block


def assemble(plan: SparsePlan, blocks: Mapping[int, np.ndarray | None]) -> Any:
    """The whole output from its owners' parts: a numpy array or a SparseArray."""
    o = plan.analysis.output
    if o.format.is_dense:
        out = np.zeros(o.shape, dtype=o.dtype)
        for p, b in blocks.items():
            own = plan.owned[o.name][p]
            if b is not None and own is not None:
                out[tuple(slice(lo, hi) for lo, hi in own)] = b
        return out
    vals = np.zeros(plan.out_pattern.nnz, dtype=o.dtype)
    for p, b in blocks.items():
        own = plan.owned[o.name][p]
        if b is not None and own is not None:
            vals[_as_slice(own)] = b
    return plan.out_pattern.with_values(vals)


def owned_words(plan: SparsePlan, owned: Owned) -> int:
    """Elements ``owned.p`` holds of its own: input blocks and values, its output part."""
    n = sum(b.size for b, _ in owned.dense.values()) + sum(v.size for v, _ in owned.sparse.values())
    own = plan.owned[plan.analysis.output.name][owned.p]
    if own is not None:
        o = plan.analysis.output
        n += math.prod(hi - lo for lo, hi in own) if o.format.is_dense else len(own)
    return n


def new_stats(n: int) -> Stats:
    """Zero stats for the runtimes to fill in from what they move."""
    return Stats.zeros(n)
