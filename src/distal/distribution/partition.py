"""Which processor owns which box of a tensor: pure functions of shapes.

Block ``b`` of an extent ``N`` cut into ``G`` pieces is
``[b*ceil(N/G), min((b+1)*ceil(N/G), N))``, possibly empty. A tensor dimension
cut by several machine dimensions ``m1, m2, ...`` of one level has
``G = g1*g2*...`` pieces and piece number ``b = ((c1*g2) + c2)*g3 + ...`` (first
position most significant). On a hierarchical machine each level cuts the piece
the previous level gave (DISTAL's nesting); the *leaf block number* along a
dimension combines the levels' piece numbers, outer level most significant, so
leaf blocks are numbered in order along the dimension.

Lowering, the cost model and the test oracles all call these functions;
runtimes never recompute ownership themselves.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from distal.distribution.notation import PART, REPL, RESTRICT, Distribution
from distal.typing import Box, Coord, Interval


def block_size(extent: int, pieces: int) -> int:
    """The one block rule: ``extent`` cut into ``pieces`` blocks of ``ceil(extent/pieces)``
    (at least 1, so that an empty extent still divides coordinates), the last ones shorter
    or empty. Dense placements, sparse coordinate cuts and non-zero cuts all use it."""
    return max(1, -(-extent // pieces))


def block_interval(extent: int, pieces: int, b: int) -> Interval:
    """Half-open interval of block ``b`` of ``extent`` cut into ``pieces`` blocks."""
    c = block_size(extent, pieces)
    return (min(b * c, extent), min((b + 1) * c, extent))


@dataclass(frozen=True)
class Placement:
    """A tensor of ``shape`` laid out on a grid of ``grid`` shape.

    ``dist`` is one :class:`Distribution` over the whole grid, or a tuple of
    them, one per machine level (their right sides split ``grid`` in order).
    """

    shape: tuple[int, ...]
    dist: Distribution | tuple[Distribution, ...]
    grid: tuple[int, ...]
    layers: tuple[tuple[Distribution, int, tuple[int, ...]], ...] = field(init=False, repr=False)
    radix: tuple[tuple[int, ...], ...] = field(init=False, repr=False)
    bounds: tuple[tuple[Interval, ...], ...] = field(init=False, repr=False)
    #: :meth:`owned_box` by coordinates, as asked (a run asks for its processor's box of
    #: every tensor, 0.1 ms each by the array path)
    _boxes: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        dists = self.dist if isinstance(self.dist, tuple) else (self.dist,)
        for dist in dists:
            if dist.groups:
                from distal.errors import NotSupportedYet

                raise NotSupportedYet(
                    f"distribution {dist.text!r} cuts by position (a '(...)' group): that is a "
                    "non-zero cut, for sparse tensors only in this version"
                )
        layers, offset = [], 0
        for dist in dists:
            n = len(dist.rules)
            layers.append((dist, offset, self.grid[offset : offset + n]))
            offset += n
        order = len(self.shape)
        radix = tuple(
            tuple(math.prod(g[m] for m in dist.cuts(order)[d]) for dist, _, g in layers)
            for d in range(order)
        )
        bounds = []
        for d, n in enumerate(self.shape):
            # each level cuts every piece of the previous one (block_interval, on arrays)
            lo, hi = np.zeros(1, np.int64), np.full(1, n, np.int64)
            for g in radix[d]:
                size = hi - lo
                c = -(-size // g)
                x = np.arange(g, dtype=np.int64)
                a = np.minimum(x[None, :] * c[:, None], size[:, None])
                b = np.minimum((x[None, :] + 1) * c[:, None], size[:, None])
                lo, hi = (lo[:, None] + a).ravel(), (lo[:, None] + b).ravel()
            bounds.append(tuple(zip(lo.tolist(), hi.tolist(), strict=True)))
        object.__setattr__(self, "layers", tuple(layers))
        object.__setattr__(self, "radix", radix)
        object.__setattr__(self, "bounds", tuple(bounds))

    def __hash__(self) -> int:
        return hash((self.shape, self.dist, self.grid))

    def pieces(self, d: int) -> int:
        """Number of (leaf) blocks along tensor dimension ``d``."""
        return len(self.bounds[d])

    # -- vectorised ownership (the one implementation; the scalar queries below wrap it) ------

    @cached_property
    def _arrays(self) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], tuple]:
        """Per dimension: numbers, starts and ends of the non-empty blocks; all starts/ends."""
        bid, bl, bh = [], [], []
        for d in range(len(self.shape)):
            ivs = [(b, lo, hi) for b, (lo, hi) in enumerate(self.bounds[d]) if hi > lo]
            bid.append(np.array([b for b, _, _ in ivs], np.int64))
            bl.append(np.array([lo for _, lo, _ in ivs], np.int64))
            bh.append(np.array([hi for _, _, hi in ivs], np.int64))
        lo_of = [np.array([lo for lo, _ in b], np.int64) for b in self.bounds]
        hi_of = [np.array([hi for _, hi in b], np.int64) for b in self.bounds]
        return bid, bl, bh, (lo_of, hi_of)

    def coords_of(self, ranks: np.ndarray) -> np.ndarray:
        """Grid coordinates of processor numbers, shape ``(n, grid ndim)``."""
        ranks = np.asarray(ranks, np.int64)
        if not self.grid:
            return np.zeros((len(ranks), 0), np.int64)
        return np.stack(np.unravel_index(ranks, self.grid), axis=1).astype(np.int64)

    def ranks_of(self, coords: np.ndarray) -> np.ndarray:
        """Row-major processor numbers of grid coordinates."""
        if coords.shape[1] == 0:
            return np.zeros(len(coords), np.int64)
        return np.ravel_multi_index(tuple(coords.T), self.grid).astype(np.int64)

    def own_arrays(self, coords: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(has, block numbers, lo, hi)`` of the block each processor at ``coords`` holds.

        ``has`` is False where a restricted machine coordinate does not match (the processor
        holds nothing of the tensor); block numbers combine the levels' piece numbers, outer
        level most significant, the first cutting machine dimension most significant.
        """
        n, order = len(coords), len(self.shape)
        has = np.ones(n, bool)
        idx = np.zeros((n, order), np.int64)
        for dist, off, g in self.layers:
            for m, r in enumerate(dist.rules):
                if r.kind == RESTRICT:
                    has &= coords[:, off + m] == r.coord
            for d, ms in enumerate(dist.cuts(order)):
                piece = np.zeros(n, np.int64)
                for m in ms:
                    piece = piece * g[m] + coords[:, off + m]
                idx[:, d] = idx[:, d] * math.prod(g[m] for m in ms) + piece
        lo_of, hi_of = self._arrays[3]
        lo = np.zeros((n, order), np.int64)
        hi = np.zeros((n, order), np.int64)
        for d in range(order):
            lo[:, d], hi[:, d] = lo_of[d][idx[:, d]], hi_of[d][idx[:, d]]
        return has, idx, lo, hi

    def source_arrays(self, blocks: np.ndarray, receivers: np.ndarray) -> np.ndarray:
        """Coordinates of the replica of each block that serves each receiver.

        Deterministic: the receiver itself when it holds the block, otherwise the replica
        agreeing with the receiver on every replicated machine dimension.
        """
        fixed = receivers.copy()
        rest = blocks.copy()
        order = len(self.shape)
        for li in reversed(range(len(self.layers))):
            dist, off, g = self.layers[li]
            for m, r in enumerate(dist.rules):
                if r.kind == RESTRICT:
                    fixed[:, off + m] = r.coord
            for d, ms in enumerate(dist.cuts(order)):
                radix = self.radix[d][li]
                piece = rest[:, d] % radix
                rest[:, d] //= radix
                for m in reversed(ms):
                    fixed[:, off + m] = piece % g[m]
                    piece //= g[m]
        return fixed

    @cached_property
    def _strides(self) -> np.ndarray:
        """Row-major strides of the grid: a processor's number is ``coords @ strides``."""
        out = np.ones(len(self.grid), np.int64)
        for m in range(len(self.grid) - 2, -1, -1):
            out[m] = out[m + 1] * self.grid[m + 1]
        return out

    def base_ranks(self, blocks: np.ndarray) -> np.ndarray:
        """With :meth:`replica_offsets`: the serving replica's number without its coordinates.

        A processor's number is linear in its coordinates, and :meth:`source_arrays` takes
        the fixed dimensions from the block and the replicated ones from the receiver, so
        ``ranks_of(source_arrays(b, r)) == base_ranks(b) + replica_offsets(r)``.
        """
        zeros = np.zeros((len(blocks), len(self.grid)), np.int64)
        return self.ranks_of(self.source_arrays(blocks, zeros))

    def replica_offsets(self, receivers: np.ndarray) -> np.ndarray:
        """The replicated dimensions' part of the serving replica's number (see above)."""
        rep = np.array([not f for f in self.fixed_dims()], bool)
        return (
            (receivers * np.where(rep, self._strides, 0)).sum(axis=1)
            if len(rep)
            else (np.zeros(len(receivers), np.int64))
        )

    def _met(self, d: int, lo: Any, hi: Any) -> tuple[Any, Any]:
        """The blocks of dimension ``d`` that ``[lo, hi)`` meets, ``first`` to ``last``
        (exclusive; ``last <= first``: none), for one interval or arrays of them: the one
        rule :meth:`cut` and :meth:`cut_rows` both cut by."""
        _, bl, bh, _ = self._arrays
        return (
            np.searchsorted(bh[d], lo, side="right"),
            np.searchsorted(bl[d], hi, side="left"),
        )

    def cut(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
        """Cut boxes ``[lo, hi)`` along block boundaries.

        Returns ``(row, block numbers, piece lo, piece hi)``, one entry per non-empty piece,
        rows ascending and, within a row, blocks in row-major order.
        """
        bid, bl, bh, _ = self._arrays
        n, order = len(lo), len(self.shape)
        firsts, cnts = [], []
        total = np.ones(n, np.int64)
        for d in range(order):
            first, last = self._met(d, lo[:, d], hi[:, d])
            cnt = np.maximum(last - first, 0)
            firsts.append(first)
            cnts.append(cnt)
            total *= cnt
        if np.all(total == 1):  # every box inside one block (the common case): no expansion
            blk = np.zeros((n, order), np.int64)
            plo = np.zeros((n, order), np.int64)
            phi = np.zeros((n, order), np.int64)
            for d in range(order):
                b = firsts[d]
                blk[:, d] = bid[d][b]
                plo[:, d] = np.maximum(lo[:, d], bl[d][b])
                phi[:, d] = np.minimum(hi[:, d], bh[d][b])
            return np.arange(n), blk, plo, phi
        rows = np.repeat(np.arange(n), total)
        k = np.arange(len(rows)) - np.repeat(np.cumsum(total) - total, total)
        blk = np.zeros((len(rows), order), np.int64)
        plo = np.zeros((len(rows), order), np.int64)
        phi = np.zeros((len(rows), order), np.int64)
        for d in reversed(range(order)):
            c = np.maximum(cnts[d][rows], 1)
            b = firsts[d][rows] + k % c
            k = k // c
            blk[:, d] = bid[d][b]
            plo[:, d] = np.maximum(lo[rows, d], bl[d][b])
            phi[:, d] = np.minimum(hi[rows, d], bh[d][b])
        return rows, blk, plo, phi

    def cut_rows(
        self,
        sd: list[int],
        dd: list[int],
        rows: np.ndarray,
        box: Box,
        receiver: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Cut ``rows x box`` along block boundaries: ``rows`` (``(n, len(sd))``
        coordinates of dimensions ``sd``) times ``box`` (an interval per dimension of
        ``dd``), each part served by the replica serving the processor at ``receiver``.

        The rows are grouped by the block of their coordinates (in block order), times each
        block of the ``dd`` dimensions the box meets, all as arrays (a gather of a vector's
        rows may touch every block). Returns ``(source ranks, row order, start, stop,
        boxes, words)``: part ``k`` is rows ``order[start[k]:stop[k]]`` (order None: the
        rows as given) times ``boxes[k]`` (``(len(dd), 2)``), ``words[k]`` values.
        """
        bid, bl, bh, _ = self._arrays
        n = len(rows)
        if n == 0 or any(h <= lo for lo, h in box):
            z = np.zeros(0, np.int64)
            return z, z, z, z, np.zeros((0, len(dd), 2), np.int64), z
        order_r: np.ndarray | None = None
        if sd:
            blk_s = np.stack(
                [
                    bid[d][np.searchsorted(bl[d], rows[:, j], side="right") - 1]
                    for j, d in enumerate(sd)
                ]
            )
            gkey = np.ravel_multi_index(tuple(blk_s), tuple(self.pieces(d) for d in sd))
            if n > 1 and np.any(np.diff(gkey) < 0):
                order_r = np.argsort(gkey, kind="stable")
                sk = gkey[order_r]
            else:
                sk = gkey
            gstart = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
            gstop = np.r_[gstart[1:], n]
            first_rows = gstart if order_r is None else order_r[gstart]
            gblk = blk_s[:, first_rows].T  # (groups, len(sd))
        else:
            gstart, gstop = np.zeros(1, np.int64), np.full(1, n, np.int64)
            gblk = np.zeros((1, 0), np.int64)
        # the blocks of each dd dimension the box meets (few): every combination of them
        combo = np.zeros((1, 0, 3), np.int64)  # (C, len(dd), 3): block number, lo, hi
        for j, d in enumerate(dd):
            lo, hi = box[j]
            b = np.arange(*self._met(d, lo, hi))
            part = np.stack([bid[d][b], np.maximum(lo, bl[d][b]), np.minimum(hi, bh[d][b])], 1)
            combo = np.concatenate(
                [np.repeat(combo, len(part), axis=0), np.tile(part, (len(combo), 1))[:, None]],
                axis=1,
            )
        G, C = len(gstart), len(combo)
        blks = np.zeros((G * C, len(self.shape)), np.int64)
        if sd:
            blks[:, sd] = np.repeat(gblk, C, axis=0)
        if dd:
            blks[:, dd] = np.tile(combo[:, :, 0], (G, 1))
        # every part's serving replica in one call
        recv = np.broadcast_to(receiver[None], (len(blks), len(receiver)))
        srcs = self.ranks_of(self.source_arrays(blks, np.ascontiguousarray(recv)))
        boxes = np.tile(combo[:, :, 1:], (G, 1, 1))
        start = np.repeat(gstart, C).astype(np.int64)
        stop = np.repeat(gstop, C).astype(np.int64)
        vol = np.prod(boxes[:, :, 1] - boxes[:, :, 0], axis=1) if dd else np.ones(G * C, np.int64)
        return srcs.astype(np.int64), order_r, start, stop, boxes, (stop - start) * vol

    def fixed_dims(self) -> tuple[bool, ...]:
        """For each machine dimension: True unless it replicates the tensor."""
        out = [True] * len(self.grid)
        for dist, off, _ in self.layers:
            for m, r in enumerate(dist.rules):
                out[off + m] = r.kind != REPL
        return tuple(out)

    # -- scalar queries ---------------------------------------------------------------------

    def block_index(self, coord: Coord) -> tuple[int, ...] | None:
        """Leaf block numbers held by the processor at ``coord`` (None if it holds nothing)."""
        has, idx, _, _ = self.own_arrays(np.array([coord], np.int64).reshape(1, len(self.grid)))
        return tuple(int(x) for x in idx[0]) if has[0] else None

    def block_box(self, index: tuple[int, ...]) -> Box:
        """The box of the leaf block with these numbers."""
        return tuple(self.bounds[d][b] for d, b in enumerate(index))

    def owned_box(self, coord: Coord) -> Box | None:
        """The box the processor at ``coord`` holds, or None when it holds nothing."""
        key = tuple(int(c) for c in coord)
        try:
            return self._boxes[key]
        except KeyError:
            pass
        idx = self.block_index(key)
        box = None if idx is None else self.block_box(idx)
        self._boxes[key] = box
        return box

    def replicas(self, index: tuple[int, ...]) -> list[Coord]:
        """All processor coordinates holding block ``index``, in row-major order."""
        base = self.source_for(index, (0,) * len(self.grid))
        fixed = self.fixed_dims()
        choices = [(c,) if f else range(g) for c, f, g in zip(base, fixed, self.grid, strict=True)]
        return [tuple(c) for c in itertools.product(*choices)]

    def source_for(self, index: tuple[int, ...], receiver: Coord) -> Coord:
        """The replica of block ``index`` that serves ``receiver`` (see :meth:`source_arrays`)."""
        blk = np.array([index], np.int64).reshape(1, len(self.shape))
        recv = np.array([receiver], np.int64).reshape(1, len(self.grid))
        return tuple(int(x) for x in self.source_arrays(blk, recv)[0])

    def split(self, box: Box) -> list[tuple[tuple[int, ...], Box]]:
        """Cut ``box`` along block boundaries: ``(block index, piece)`` pairs, non-empty."""
        order = len(self.shape)
        lo = np.array([[a for a, _ in box]], np.int64).reshape(1, order)
        hi = np.array([[b for _, b in box]], np.int64).reshape(1, order)
        _, blk, plo, phi = self.cut(lo, hi)
        return [
            (
                tuple(int(x) for x in blk[r]),
                tuple((int(a), int(b)) for a, b in zip(plo[r], phi[r], strict=True)),
            )
            for r in range(len(blk))
        ]


__all__ = ["PART", "REPL", "RESTRICT", "Placement", "block_interval"]
