"""Leaf kernels: one term of the statement over one box, on local numpy blocks.

Each term compiles once (per einsum specification) to a routine that reaches BLAS with as
few copies as the blocks' memory layout allows. The choice is made at compile time from
the letters alone; at run time only cheap stride checks pick between a view and a copy.

* **A contraction of two operands without batch letters** is a matrix product: the letters
  split into rows ``M`` (first operand and output), columns ``N`` (second operand and
  output) and summed ``K`` (both operands). Each operand is viewed as a matrix without a
  copy when its strides allow (a block of a larger array is fine: the leading dimension
  carries the row stride), and one ``gemm`` (``gemv`` when ``M`` or ``N`` is empty) runs on
  the views, with ``beta=1`` when the destination already holds a partial sum, so
  accumulating costs no temporary. When the rows do not merge (a block cut along an inner
  dimension, e.g. TTM's ``(i, j)`` rows of a 2-D-cut tensor) the kernel loops over the
  outermost row letter: a batch of matrix products on views. Only when no view exists
  (the 4-D contraction's interleaved letters) is an operand packed into a buffer, which is
  reused from call to call. Packs of :data:`PACK_MIN` elements or more go in chunks — the
  second operand in up to :data:`PACK_COL_CHUNKS` slices of its outermost column letter,
  the first operand and the result in up to :data:`PACK_ROW_CHUNKS` slices of the outermost
  row letter — so on very large blocks the scratch memory (which the plan's memory model
  does not count) is under one block instead of three, while each GEMM keeps at least
  :data:`PACK_MIN_SIDE` rows and columns.
* **MTTKRP-shaped terms** (``T(..p..q..) * F(p, r) * G(q, r)``) form the Khatri-Rao
  product ``W(p, q, r)`` once per call in a reused buffer and run one GEMM against ``T``.
* **Inner products** (same letters in both operands, scalar out) stream both blocks once
  through numpy's einsum loop; GEMV-shaped terms whose rows don't merge (TTV on a block
  cut along ``j``) do the same in one slab per BLAS thread.
* Everything else goes through an ``opt_einsum`` path (``tensordot`` reaches BLAS for the
  pairwise steps).

BLAS is called directly (:mod:`distal.kernels.blas`) when numpy's OpenBLAS is found, else
through numpy with the same layouts (then accumulation costs a temporary).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import opt_einsum as oe

from distal.errors import NotSupportedYet
from distal.kernels import blas, pointwise, sums
from distal.kernels import cores as _cores
from distal.lang.concrete import Statement
from distal.typing import Box, box_volume

Contraction = Callable[[Sequence[np.ndarray], np.ndarray, complex | float, bool], None]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOCAL = threading.local()  # packing buffers: per thread (the Dask runtime runs leaves in threads)


def _buffer(role: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A scratch array reused across calls (one per role and thread; replaced on a new shape)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = {}
    b = bufs.get(role)
    if b is None or b.shape != shape or b.dtype != dtype:
        b = bufs[role] = np.empty(shape, dtype)
    return b


def release_buffers() -> None:
    """Drop this thread's scratch buffers (memory measurements call it between runs)."""
    _LOCAL.bufs = {}


def _matrix(x: np.ndarray, rows: Sequence[int], cols: Sequence[int]) -> np.ndarray | None:
    """``x`` with axes ``rows`` merged into one dimension and ``cols`` into another, as a
    view; None when that needs a copy."""
    if len(rows) == 1 and len(cols) == 1 and x.ndim == 2:  # a matrix already (or its .T)
        return x if rows[0] == 0 else x.T
    if x.ndim <= 1:  # a vector or a scalar: the reshape is always a view
        return x.reshape(x.size if rows else 1, x.size if cols else 1)
    return _group(x, (rows, cols))


def _real(alpha: complex | float) -> float | None:
    if isinstance(alpha, complex):
        return alpha.real if alpha.imag == 0 else None
    return float(alpha)


FALLBACK_CHUNKS = 8  # without the binding, accumulating goes in this many row slices ...
FALLBACK_MIN_ROWS = 256  # ... of at least this many rows (numpy's ``@`` cannot accumulate)


TALL_MAX_COLS = 128  # a GEMM with at most this many output columns (and more than one) ...
TALL_SLICE_BYTES = 2 << 20  # ... and at least 4 slices of this much of ``a`` goes in slices


def _tall_rows(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> int:
    """Rows per slice of a tall, thin GEMM (0: one call). OpenBLAS streams a tall ``a``
    against a thin ``b`` faster in slices of about 2 MiB of ``a`` (half this machine's L2
    per core) than in one call: TTM's 131072 x 512 x 32 leaf took 199 ms whole, 155-160 in
    slices; 8 to 64 columns gained 8-28 %, 128 columns 7 %. Every slice reads all of ``b``
    again, so ``b`` must stay in cache (at most half a slice). Each output row is computed
    as in one call (the same bits)."""
    m, n = c.shape
    rows = max(32, TALL_SLICE_BYTES // max(1, a.shape[1] * a.itemsize))
    thin = 1 < n <= TALL_MAX_COLS and b.size * b.itemsize <= TALL_SLICE_BYTES // 2
    return rows if thin and m >= 4 * rows else 0


def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: complex | float, beta: int) -> None:
    """``c = alpha*a@b + beta*c`` (beta 0 or 1): BLAS in place, numpy as the fallback; a
    tall, thin product in row slices (:func:`_tall_rows`).

    The fallback never allocates a block-sized temporary the memory model does not count:
    storing goes straight into ``c`` (``np.matmul(out=c)`` takes a strided view), and
    accumulating goes through a reused scratch buffer of at most 1/:data:`FALLBACK_CHUNKS`
    of ``c``'s rows (or :data:`FALLBACK_MIN_ROWS`, whichever is larger).
    """
    rows = _tall_rows(a, b, c)
    if rows:
        for lo in range(0, c.shape[0], rows):
            _gemm(a[lo : lo + rows], b, c[lo : lo + rows], alpha, beta)
        return
    ra = _real(alpha)
    if ra is not None:
        if b.shape[1] == 1 and blas.gemv(a, b[:, 0], c[:, 0], ra, beta):
            return
        # a single row: a vector-matrix product; with one summed element (a scalar times a
        # vector, as in x + alpha * p) the vector is taken as an untransposed column, since
        # BLAS's transposed gemv runs many times slower when the output's pages are fresh
        bt = b.reshape(b.shape[1], 1) if b.shape[0] == 1 else b.T
        if a.shape[0] == 1 and blas.gemv(bt, a[0], c[0], ra, beta):
            return
        if blas.gemm(a, b, c, ra, beta):
            return
    if beta == 0:
        np.matmul(a, b, out=c)
        if alpha != 1:
            c *= alpha
        return
    m = c.shape[0]
    rows = max(FALLBACK_MIN_ROWS, -(-m // FALLBACK_CHUNKS))
    dt = np.result_type(a, b)
    for lo in range(0, m, rows):
        hi = min(m, lo + rows)
        t = _buffer("gemm-fallback", (min(rows, m), c.shape[1]), dt)[: hi - lo]
        np.matmul(a[lo:hi], b, out=t)
        if alpha != 1:
            t *= alpha
        c[lo:hi] += t


PACK_MIN = 1 << 25  # elements (256 MiB of float64): smaller packs are made whole (chunks
# cost 5-10 % of the leaf's speed at 8 MiB blocks, more when cores are shared)
PACK_ROW_CHUNKS = 4  # a packed first operand (and result) goes in up to this many row slices
PACK_COL_CHUNKS = 2  # a packed second operand goes in up to this many column slices
PACK_MIN_SIDE = 256  # ... each with at least this many GEMM rows / columns (BLAS re-packs
# the other operand for every call: many thin GEMMs would cost more than the memory saved)


#: elements from which memory-bound work (an einsum pass, a pack, a Khatri-Rao product) goes
#: one slab per core: below it one thread streams the blocks faster than a hand-over
SLABS_MIN = 1 << 18


def _pack(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` (a transposed view packed into a buffer, or back): one slab of
    the first axis per core where large. A strided copy runs at what one core streams; the
    4-D contraction's leaves spent 29 ms of a 152 ms run in them."""
    if dst.size < SLABS_MIN or dst.ndim == 0 or dst.shape[0] < 2:
        np.copyto(dst, src, casting="unsafe")
        return
    _parallel(lambda lo, hi: np.copyto(dst[lo:hi], src[lo:hi], casting="unsafe"), dst.shape[0])


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    parts = max(1, min(parts, n))
    cuts = [n * t // parts for t in range(parts + 1)]
    return [(cuts[t], cuts[t + 1]) for t in range(parts)]


def _cut(x: np.ndarray, axis: int, lo: int, hi: int) -> np.ndarray:
    return x[(slice(None),) * axis + (slice(lo, hi),)]


class _MatMul:
    """A two-operand contraction without batch letters, as (batched) GEMM on views."""

    def __init__(self, xa: str, ya: str, out: str) -> None:
        m = [c for c in out if c in xa]
        n = [c for c in out if c in ya]
        k = [c for c in xa if c in ya]
        self.xm, self.xk = [xa.index(c) for c in m], [xa.index(c) for c in k]
        self.yk, self.yn = [ya.index(c) for c in k], [ya.index(c) for c in n]
        self.om, self.on = [out.index(c) for c in m], [out.index(c) for c in n]
        self.tag = f"{xa},{ya}->{out}"

    def __call__(self, ops: Sequence[np.ndarray], dst: np.ndarray, alpha: Any, fresh: bool) -> None:
        x, y = ops
        if not self.on and x.ndim >= 2 and _matrix(x, self.xm, self.xk) is None:
            # GEMV over rows that don't merge (TTV on a block cut along j): memory-bound, so
            # one einsum pass per thread over row slabs beats a GEMV per row
            _slabs(self.tag, x, y, dst, self.xm[0], self.om[0], alpha, fresh)
            return
        beta = 0 if fresh else 1
        y2 = _matrix(y, self.yk, self.yn)
        if y2 is not None:
            self._rows(x, self.xm, self.xk, y2, dst, self.om, self.on, alpha, beta)
            return
        # pack: the second operand is reused by every row batch; a large one in column
        # slices (the first operand is then packed once per slice: cheap next to the GEMMs)
        n_ax, o_ax = self.yn[0] if self.yn else 0, self.on[0] if self.on else 0
        cols = math.prod(y.shape[a] for a in self.yn)
        parts = min(PACK_COL_CHUNKS, cols // PACK_MIN_SIDE) if y.size >= PACK_MIN else 1
        parts = max(parts, 1) if self.yn else 1
        for lo, hi in _chunks(y.shape[n_ax] if self.yn else 1, parts):
            yc = _cut(y, n_ax, lo, hi) if parts > 1 else y
            dc = _cut(dst, o_ax, lo, hi) if parts > 1 else dst
            t = yc.transpose((*self.yk, *self.yn))
            yb = _buffer(self.tag + "/y", t.shape, y.dtype)
            _pack(yb, t)
            yb2 = yb.reshape(math.prod(t.shape[: len(self.yk)]), -1)
            self._rows(x, self.xm, self.xk, yb2, dc, self.om, self.on, alpha, beta)

    def _rows(
        self,
        x: np.ndarray,
        xm: list[int],
        xk: list[int],
        y2: np.ndarray,
        dst: np.ndarray,
        om: list[int],
        on: list[int],
        alpha: Any,
        beta: int,
        whole: bool = False,
    ) -> None:
        x2, o2 = _matrix(x, xm, xk), _matrix(dst, om, on)
        if x2 is not None and o2 is not None:
            _gemm(x2, y2, o2, alpha, beta)
            return
        if len(xm) >= 2 and x.shape[xm[0]] > 0:
            # a batch over the outermost row letter, if that makes views of both sides
            sxm = [a - (a > xm[0]) for a in xm[1:]]
            sxk = [a - (a > xm[0]) for a in xk]
            som = [a - (a > om[0]) for a in om[1:]]
            son = [a - (a > om[0]) for a in on]
            xs = x[(slice(None),) * xm[0] + (0,)]
            ds = dst[(slice(None),) * om[0] + (0,)]
            if _matrix(xs, sxm, sxk) is not None and _matrix(ds, som, son) is not None:

                def rows(lo: int, hi: int) -> None:
                    xi = [slice(None)] * x.ndim
                    di = [slice(None)] * dst.ndim
                    for r in range(lo, hi):
                        xi[xm[0]], di[om[0]] = r, r
                        xs, ds = x[tuple(xi)], dst[tuple(di)]
                        self._rows(xs, sxm, sxk, y2, ds, som, son, alpha, beta)

                # many small GEMMs: one slab of rows per thread, each BLAS call on one
                # thread (waking every BLAS thread for each small call costs more than it gains)
                _parallel(rows, x.shape[xm[0]], calls_blas=True)
                return
        big = (x2 is None and x.size >= PACK_MIN) or (o2 is None and dst.size >= PACK_MIN)
        parts = min(PACK_ROW_CHUNKS, math.prod(x.shape[a] for a in xm) // PACK_MIN_SIDE)
        if not whole and big and xm and parts > 1:
            # pack in row slices: scratch a fraction of the block, GEMMs still large
            for lo, hi in _chunks(x.shape[xm[0]], parts):
                xc, dc = _cut(x, xm[0], lo, hi), _cut(dst, om[0], lo, hi)
                self._rows(xc, xm, xk, y2, dc, om, on, alpha, beta, whole=True)
            return
        if x2 is None:
            t = x.transpose((*xm, *xk))
            buf = _buffer(self.tag + "/x", t.shape, x.dtype)
            _pack(buf, t)
            x2 = buf.reshape(math.prod(t.shape[: len(xm)]), -1)
        if o2 is not None:
            _gemm(x2, y2, o2, alpha, beta)
            return
        t = dst.transpose((*om, *on))
        tmp = _buffer(self.tag + "/o", t.shape, np.result_type(x2, y2))
        _gemm(x2, y2, tmp.reshape(x2.shape[0], y2.shape[1]), alpha, 0)
        if beta == 0:
            _pack(t, tmp)
        else:
            t += tmp


def _group(x: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray | None:
    """``x`` with each group of axes merged into one dimension, as a view (None: a copy)."""
    t = x.transpose([a for g in groups for a in g])
    shape = tuple(math.prod(x.shape[a] for a in g) for g in groups)
    try:
        return np.reshape(t, shape, copy=False)
    except ValueError:
        return None
    except TypeError:  # numpy < 2.1 has no ``copy=``: assigning a shape never copies
        v = t.view()
        try:
            v.shape = shape
        except AttributeError:
            return None
        return v


SMALL_BATCH_GEMM = 24**3  # flops/2 per matrix below which numpy's stacked matmul loop wins
PARALLEL_BATCH_GEMM = 192**3  # ... below which the batch goes one slab per thread


class _Batched:
    """A two-operand contraction with batch letters (in both operands and the output):
    ``bik,bkj->bij`` as one GEMM per batch index on 3-D views (no copies), ``ij,ij->i`` as
    a streamed einsum pass in slabs along the batch.

    Per batch index the matrices are small, so the choice follows their size: tiny ones
    go through numpy's stacked ``matmul`` (its C loop beats a Python loop of BLAS calls),
    medium ones one slab of batch indices per thread with single-threaded BLAS calls (as
    the row batches of :class:`_MatMul`), large ones one multithreaded BLAS call each.
    """

    def __init__(self, xa: str, ya: str, out: str) -> None:
        b = [c for c in out if c in xa and c in ya]
        m = [c for c in out if c in xa and c not in b]
        n = [c for c in out if c in ya and c not in b]
        k = [c for c in xa if c in ya and c not in out]
        self.x_groups = [[xa.index(c) for c in g] for g in (b, m, k)]
        self.y_groups = [[ya.index(c) for c in g] for g in (b, k, n)]
        self.o_groups = [[out.index(c) for c in g] for g in (b, m, n)]
        self.vector = not m and not n
        self.tag = f"{xa},{ya}->{out}"
        rest = "".join(c for c in xa if c not in b), "".join(c for c in ya if c not in b)
        self.inner = _MatMul(rest[0], rest[1], "".join(c for c in out if c not in b))
        self.batch_axes = ([xa.index(c) for c in b], [ya.index(c) for c in b],
                           [out.index(c) for c in b])  # fmt: skip

    def __call__(self, ops: Sequence[np.ndarray], dst: np.ndarray, alpha: Any, fresh: bool) -> None:
        x, y = ops
        if self.vector:
            # one multiply-add per element: memory-bound, streamed by einsum in slabs
            xa, oa = self.batch_axes[0][0], self.batch_axes[2][0]
            ya = self.batch_axes[1][0]
            _slabs(self.tag, x, y, dst, xa, oa, alpha, fresh, y_axis=ya)
            return
        x3, y3 = _group(x, self.x_groups), _group(y, self.y_groups)
        o3 = _group(dst, self.o_groups)
        if x3 is None or y3 is None or o3 is None:
            self._each(x, y, dst, alpha, fresh)
            return
        nb, mm, kk = x3.shape
        nn = y3.shape[2]
        beta = 0 if fresh else 1
        work = mm * nn * kk
        if work < SMALL_BATCH_GEMM or not blas.available():
            _stacked(x3, y3, o3, alpha, beta)
            return

        def slab(lo: int, hi: int) -> None:
            for t in range(lo, hi):
                _gemm(x3[t], y3[t], o3[t], alpha, beta)

        if work < PARALLEL_BATCH_GEMM:
            _parallel(slab, nb, calls_blas=True)
        else:
            slab(0, nb)

    def _each(self, x: np.ndarray, y: np.ndarray, dst: np.ndarray, alpha: Any, fresh: bool) -> None:
        """Batch indices one at a time through :class:`_MatMul` (packs what must be packed)."""
        xb, yb, ob = self.batch_axes
        for idx in np.ndindex(*(x.shape[a] for a in xb)):
            xi, yi, oi = [slice(None)] * x.ndim, [slice(None)] * y.ndim, [slice(None)] * dst.ndim
            for n, v in enumerate(idx):
                xi[xb[n]], yi[yb[n]], oi[ob[n]] = v, v, v
            self.inner([x[tuple(xi)], y[tuple(yi)]], dst[tuple(oi)], alpha, fresh)


def _stacked(x3: np.ndarray, y3: np.ndarray, o3: np.ndarray, alpha: Any, beta: int) -> None:
    """``o3 = alpha * x3 @ y3 + beta * o3`` by numpy's stacked matmul: into ``o3`` when
    storing, through a reused scratch of at most 1/:data:`FALLBACK_CHUNKS` of the batch
    (at least one matrix) when accumulating."""
    if beta == 0:
        np.matmul(x3, y3, out=o3)
        if alpha != 1:
            o3 *= alpha
        return
    nb = o3.shape[0]
    per = max(1, -(-nb // FALLBACK_CHUNKS))
    dt = np.result_type(x3, y3)
    for lo in range(0, nb, per):
        hi = min(nb, lo + per)
        t = _buffer("stacked", (min(per, nb), *o3.shape[1:]), dt)[: hi - lo]
        np.matmul(x3[lo:hi], y3[lo:hi], out=t)
        if alpha != 1:
            t *= alpha
        o3[lo:hi] += t


_POOL: list[Any] = []


def _pool(size: int) -> Any:
    """Slab threads (made once; their own BLAS calls single-threaded where possible)."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(
            ThreadPoolExecutor(
                max(2, size),
                thread_name_prefix="distal-leaf",
                initializer=blas.single_threaded_here,
            )
        )
    return _POOL[0]


def _parallel(fn: Callable[[int, int], None], n: int, calls_blas: bool = False) -> None:
    """``fn(lo, hi)`` over ``range(n)`` in one slab per BLAS thread (inline when one, when
    already on a slab thread, or when BLAS calls can't be made single-threaded per thread).
    Slabs that make no BLAS call (``calls_blas=False``) run the first on this thread."""
    parts = max(1, min(blas.threads(), n))
    nested = threading.current_thread().name.startswith("distal-leaf")
    if parts == 1 or nested:
        fn(0, n)
        return
    with blas.one_thread_each() if calls_blas else contextlib.nullcontext(True) as ok:
        if not ok:
            fn(0, n)
            return
        cuts = [n * t // parts for t in range(parts + 1)]
        if calls_blas:  # every slab on a thread whose BLAS calls are single-threaded
            futs = [_pool(parts).submit(fn, cuts[t], cuts[t + 1]) for t in range(parts)]
            for f in futs:
                f.result()
            return
        # no BLAS inside: the first slab here, one hand-over fewer (and one thread less
        # contending for the cores while the others run)
        futs = [_pool(parts).submit(fn, cuts[t], cuts[t + 1]) for t in range(1, parts)]
        try:
            fn(cuts[0], cuts[1])
        finally:  # every slab finished (or failed) before anything is raised or returned
            for f in futs:
                f.exception()
        for f in futs:
            f.result()


def _slabs(
    spec: str,
    x: np.ndarray,
    y: np.ndarray,
    dst: np.ndarray,
    xa: int,
    oa: int,
    alpha: Any,
    fresh: bool,
    y_axis: int | None = None,
) -> None:
    """``einsum(spec)`` split along x's axis ``xa`` / dst's axis ``oa`` (and y's ``y_axis``
    when y is cut too) over the BLAS threads."""
    n = x.shape[xa]

    def one(lo: int, hi: int) -> None:
        xs = x[(slice(None),) * xa + (slice(lo, hi),)]
        ds = dst[(slice(None),) * oa + (slice(lo, hi),)]
        ys = y if y_axis is None else y[(slice(None),) * y_axis + (slice(lo, hi),)]
        if fresh and alpha == 1:
            np.einsum(spec, xs, ys, out=ds)
        else:
            r = np.einsum(spec, xs, ys)
            if alpha != 1:
                r = r * alpha
            if fresh:
                ds[...] = r
            else:
                ds += r

    if x.size < SLABS_MIN:  # small: handing slabs to threads costs more than it saves
        one(0, n)
        return
    _parallel(one, n)


def _inner(xa: str, ya: str) -> Contraction:
    """A full contraction, added in distal's order (:mod:`distal.kernels.sums`): one inner
    product (:func:`~distal.kernels.sums.dot`, blocked and pairwise) of the two blocks
    flattened in row-major order of ``x``'s letters. A block that is not C-contiguous in
    that order (a strided view, ``y`` with its letters in another order) is copied first,
    so the bits depend on the shapes alone, never on how a runtime happens to hold a block
    (a view of another processor's array here, a received copy there)."""
    to_x = None if xa == ya else tuple(ya.index(c) for c in xa)

    def run(ops: Sequence[np.ndarray], dst: np.ndarray, alpha: Any, fresh: bool) -> None:
        x, y = ops
        if to_x is not None:
            y = y.transpose(to_x)
        r = sums.dot(np.ascontiguousarray(x).reshape(-1), np.ascontiguousarray(y).reshape(-1))
        r = r * alpha
        if fresh:
            dst[...] = r
        else:
            dst += r

    return run


def _khatri_rao(parts: list[str], out: str) -> Contraction | None:
    """``T(..p..q..) * F(p, r) * G(q, r) -> O(.., r)`` as ``W = F (.) G`` then one GEMM."""
    for b in range(3):
        big = parts[b]
        fi, gi = (t for t in range(3) if t != b)
        f, g = parts[fi], parts[gi]
        if len(f) != 2 or len(g) != 2 or len(set(f) & set(g)) != 1:
            continue
        (r,) = set(f) & set(g)
        p, q = f.replace(r, ""), g.replace(r, "")
        if (
            p == q
            or p == r
            or q == r
            or r not in out
            or r in big
            or p not in big
            or q not in big
            or p in out
            or q in out
            or len(set(big)) != len(big)
            or not set(big) - {p, q} <= set(out)
            or not set(out) <= set(big) | {r}
        ):
            continue
        gemm = _MatMul(big, p + q + r, out)
        tf, tg = f != p + r, g != q + r

        def run(
            ops: Sequence[np.ndarray],
            dst: np.ndarray,
            alpha: Any,
            fresh: bool,
            b: int = b,
            fi: int = fi,
            gi: int = gi,
            tf: bool = tf,
            tg: bool = tg,
            gemm: _MatMul = gemm,
        ) -> None:
            fa = ops[fi].T if tf else ops[fi]
            ga = ops[gi].T if tg else ops[gi]
            w = _buffer(gemm.tag + "/kr", (fa.shape[0], ga.shape[0], fa.shape[1]),
                        np.result_type(fa, ga))  # fmt: skip

            def rows(lo: int, hi: int) -> None:
                np.multiply(fa[lo:hi, None, :], ga[None, :, :], out=w[lo:hi])

            if w.size >= SLABS_MIN:  # memory-bound: one slab per core
                _parallel(rows, w.shape[0])
            else:
                rows(0, w.shape[0])
            gemm([ops[b], w], dst, alpha, fresh)

        return run
    return None


EXPRESSIONS_PER_TERM = 16  # cached contraction expressions (one per block shape) per term


def _einsum(ins: str, out: str) -> Contraction:
    """The general path: opt_einsum (tensordot for pairwise steps), broadcast as needed.

    The contraction order is found once per block shape (``contract_expression``) and
    reused: finding it costs more than a small leaf's arithmetic.
    """
    kept = "".join(c for c in out if c in ins)
    missing = tuple(n for n, c in enumerate(out) if c not in ins)
    inner = f"{ins}->{kept}"
    # one operand, every letter once and kept: einsum returns a view, its axes permuted
    perm = None
    if "," not in ins and len(set(ins)) == len(ins) == len(kept):
        perm = tuple(ins.index(c) for c in kept)
    identity = tuple(range(len(kept)))
    # one operand, every letter once, some summed: the summed axes, and how the kept ones
    # are ordered after the sum (None: as they are)
    reduce: tuple[int, ...] | None = None
    rest: tuple[int, ...] | None = None
    if "," not in ins and len(set(ins)) == len(ins) and len(kept) < len(ins):
        reduce = tuple(n for n, c in enumerate(ins) if c not in kept)
        left = [c for c in ins if c in kept]
        order = tuple(left.index(c) for c in kept)
        rest = None if order == tuple(range(len(order))) else order
    exprs: dict[tuple[tuple[int, ...], ...], Any] = {}
    lock = threading.Lock()

    def expression(ops: Sequence[np.ndarray]) -> Any:
        key = tuple(o.shape for o in ops)
        e = exprs.get(key)
        if e is None:
            e = oe.contract_expression(inner, *key)
            with lock:
                if len(exprs) >= EXPRESSIONS_PER_TERM:
                    exprs.pop(next(iter(exprs)))
                exprs[key] = e
        return e

    def run(ops: Sequence[np.ndarray], dst: np.ndarray, alpha: Any, fresh: bool) -> None:
        if not ops:
            if fresh:
                dst[...] = alpha
            else:
                dst += alpha
            return
        if len(ops) > 1:
            r = expression(ops)(*ops)
        elif perm is not None:
            r = ops[0] if perm == identity else ops[0].transpose(perm)
        elif reduce is not None:  # a sum over axes: numpy's pairwise sum (distal.kernels.sums)
            r = sums.total(ops[0], reduce)
            if rest is not None:
                r = r.transpose(rest)
        else:
            r = np.einsum(inner, ops[0])
        if alpha != 1:
            r = r * alpha
        if missing:
            r = np.expand_dims(r, missing)
        if fresh:
            dst[...] = r
        else:
            dst += r

    run.expressions = exprs  # type: ignore[attr-defined]
    return run


def plan_kind(spec: str) -> str:
    """Which routine ``contraction(spec)`` uses: gemm, batched, khatri-rao, dot or einsum."""
    return getattr(contraction(spec), "kind", "einsum")


@lru_cache(maxsize=4096)
def contraction(spec: str) -> Contraction:
    """The routine computing ``dst += alpha * einsum(spec, *ops)``.

    With ``fresh`` the destination is known to be zero, so the routine stores instead of
    adding, and writes every element of ``dst`` without reading it (:func:`stores_all`
    lets a caller skip zeroing a block on that: BLAS with ``beta = 0``, checked at load
    by :mod:`distal.kernels.blas`; einsum and matmul with ``out=``; assignments). Output
    letters that no operand carries (a term that does not depend on an output variable)
    are broadcast.
    """
    ins, out = spec.split("->")
    parts = ins.split(",") if ins else []
    distinct = all(len(set(p)) == len(p) for p in parts) and len(set(out)) == len(out)
    run: Any = None
    kind = "einsum"
    private = _private_letters(parts, out) if distinct and len(parts) >= 2 else []
    if any(private):
        run, kind = _presummed(parts, private, out), "presummed"
    elif distinct and len(parts) == 2 and set(out) <= set(ins):
        x, y = parts
        both = set(x) & set(y)
        alone = (set(x) ^ set(y)) - set(out)
        if not out and set(x) == set(y):
            run, kind = _inner(x, y), "dot"
        elif not both & set(out) and not alone:
            run, kind = _MatMul(x, y, out), "gemm"
        elif not alone:
            run, kind = _Batched(x, y, out), "batched"
    elif distinct and len(parts) == 3:
        run = _khatri_rao(parts, out)
        kind = "khatri-rao" if run is not None else kind
    if run is None:
        run = _einsum(ins, out)
    try:
        run.kind = kind
    except AttributeError:  # bound methods / instances without a __dict__ slot
        pass
    return run


def _private_letters(parts: list[str], out: str) -> list[str]:
    """Per operand, its summed letters that no other operand carries."""
    return [
        "".join(
            c for c in p if c not in out and not any(c in q for k, q in enumerate(parts) if k != n)
        )
        for n, p in enumerate(parts)
    ]


def _presummed(parts: list[str], private: list[str], out: str) -> Contraction:
    """A contraction whose operands carry summed letters of their own: each operand is
    summed over those first (:func:`distal.kernels.sums.total`), then the rest contracted.
    ``sum_ij x_i y_j`` is ``(sum_i x_i)(sum_j y_j)``: ``n + n`` additions where the product
    space has ``n * n`` points (``i,j->`` of 10^5 elements: microseconds, not seconds), and
    no operand's outer product with another is ever formed."""
    kept = ["".join(c for c in p if c not in own) for p, own in zip(parts, private, strict=True)]
    axes = [
        tuple(k for k, c in enumerate(p) if c in own) for p, own in zip(parts, private, strict=True)
    ]
    rest = contraction(",".join(kept) + "->" + out)

    def run(ops: Sequence[np.ndarray], dst: np.ndarray, alpha: Any, fresh: bool) -> None:
        reduced = [
            np.asarray(sums.total(o, ax)) if ax else o for o, ax in zip(ops, axes, strict=True)
        ]
        rest(reduced, dst, alpha, fresh)

    return run


@dataclass(frozen=True, slots=True)
class TermKernel:
    """One term, ready to run on boxes of the iteration space."""

    coeff: complex | float | int
    spec: str
    factors: tuple[tuple[str, tuple[int, ...]], ...]  # (tensor, statement-variable positions)
    gates: tuple[int, ...]  # variables the term only sees at 0
    multipliers: tuple[int, ...]  # summed variables no factor uses
    out: tuple[int, ...]  # output variable positions
    parallel: tuple[int, ...] = ()  # output variables whose range the leaf cuts over threads
    leaf: str = "default"  # which routines run it: one of LEAVES
    #: the dtype the operands are cast to first ("": none), where the output's dtype is wider
    #: than the factors' own result: a sum of booleans or of int8 values into an int64
    #: output counts in int64 (einsum would or the booleans, wrap the int8s)
    widen: str = ""
    #: shifted factors (``u[i - 1, j]``): per factor, the offset and the scale of each of
    #: its indices (empty: every factor plain); dimension ``d`` of factor ``n`` is read at
    #: ``scales[n][d] * i + offsets[n][d]``
    offsets: tuple[tuple[int, ...], ...] = ()
    scales: tuple[tuple[int, ...], ...] = ()
    #: the box the term is restricted to: ``(position, lo, hi)`` per restricted variable
    domain: tuple[tuple[int, int, int], ...] = ()
    #: on the first term of a statement computed point by point (:mod:`distal.kernels.
    #: pointwise`: a stencil, a slice read or assignment), the whole right side in the
    #: order it is written; :func:`run_leaf` runs it instead of the terms one by one
    tree: tuple = ()


#: the leaf routines a dense kernel can be compiled with (``dl.compile(s, leaf=...)``):
#: ``default`` (BLAS / opt_einsum, above) or ``iree`` (:mod:`distal.kernels.iree`, whose
#: ``contraction(spec)`` returns a routine with the same contract, compiled by IREE)
LEAVES = ("default", "iree", "iree-cuda")


def routine(tk: TermKernel) -> Contraction:
    """The routine running term ``tk``: ``dst += alpha * einsum(tk.spec, *ops)``."""
    if tk.leaf.startswith("iree"):  # imported on first use: IREE is an optional extra
        from distal.kernels.iree import contraction as iree_contraction

        return iree_contraction(tk.spec, tk.leaf)
    run = contraction(tk.spec)
    return _widened(run, np.dtype(tk.widen)) if tk.widen else run


def _widened(run: Contraction, dtype: np.dtype) -> Contraction:
    """``run`` on its operands cast to ``dtype`` first (see ``TermKernel.widen``)."""

    def widened(ops: Sequence[np.ndarray], dst: np.ndarray, alpha: Any, fresh: bool) -> None:
        run([np.asarray(o, dtype=dtype) for o in ops], dst, alpha, fresh)

    return widened


def widen_to(factors: Sequence[np.dtype], out: np.dtype) -> str:
    """``TermKernel.widen`` of a term whose factors have these dtypes, into ``out``."""
    if not factors:
        return ""
    own = np.result_type(*factors)
    return out.str if own != out and np.can_cast(own, out, "safe") else ""


def parallel_positions(st: Statement, schedule: Any | None) -> tuple[int, ...]:
    """Statement-variable positions the leaf threads over, from ``schedule.parallel``.

    A parallelized loop that is a derived variable (``split`` / ``divide`` / ``rotate``)
    stands for the statement variable it came from: inside one leaf box the threads cut
    that variable's range. Only output variables are cut (each thread then writes its
    own slice of the output, so results and traffic are those of the serial leaf); a
    summed variable would need one private output copy per thread, memory the plan's
    model does not count, so its loop runs on one thread.
    """
    if schedule is None or not getattr(schedule, "parallel", None):
        return ()
    parent: dict[Any, Any] = {}
    for r in getattr(schedule, "relations", ()):
        if hasattr(r, "parent"):
            parent[r.outer], parent[r.inner] = r.parent, r.parent
        else:
            parent[r.result] = r.target
    pos = {v: n for n, v in enumerate(st.variables)}
    lhs = set(st.lhs_vars)
    found: list[int] = []
    for v in sorted(schedule.parallel, key=lambda v: v.name):
        seen = 0
        while v not in pos and v in parent and seen < 64:
            v, seen = parent[v], seen + 1
        if v in pos and v in lhs and pos[v] not in found:
            found.append(pos[v])
    order = {pos[v]: n for n, v in enumerate(st.lhs_vars)}
    return tuple(sorted(found, key=order.__getitem__))


def term_specs(st: Statement) -> list[str]:
    """Each term's einsum over the statement's variables (letters in variable order)."""
    letter = {v: _LETTERS[n] for n, v in enumerate(st.variables)}
    out = "".join(letter[v] for v in st.lhs_vars)
    return [
        ",".join("".join(letter[v] for v in f.indices) for f in t.factors) + "->" + out
        for t in st.terms
    ]


def flops_per_point(spec: str) -> int:
    """Flops the default leaf spends on term ``spec`` per point of its iteration space:
    one per factor (``f - 1`` multiplications and the addition into the sum; a constant
    term 1), but 2 for a term it runs as a Khatri-Rao product (``W = F (.) G`` over the
    smaller space of F's and G's letters, then one GEMM: a multiply-add per point).
    The cost model, the auto-scheduler and the simulator all price a leaf with this."""
    ins = spec.split("->")[0]
    f = len(ins.split(",")) if ins else 0
    if f == 3 and plan_kind(spec) == "khatri-rao":
        return 2
    return max(1, f)


def term_kernels(
    st: Statement, schedule: Any | None = None, leaf: str = "default"
) -> tuple[TermKernel, ...]:
    """Compile every term of a statement (and its leaf routine, so runs find it cached).

    ``schedule`` (the statement's :class:`~distal.schedule.api.Schedule`) carries the
    loops marked with ``parallelize``; without it every leaf runs on the calling thread.
    ``leaf`` names the routines (:data:`LEAVES`).
    """
    par = parallel_positions(st, schedule)
    pos = {v: n for n, v in enumerate(st.variables)}
    lhs = set(st.lhs_vars)
    tree = pointwise.tree_of(st) if leaf == "default" else ()
    out = []
    for t, spec in zip(st.terms, term_specs(st), strict=True):
        used = t.used()
        contraction(spec)
        shifted = any(f.shifted for f in t.factors)
        if leaf != "default" and (shifted or t.domain):
            raise NotSupportedYet(
                f"the {leaf!r} leaf of {st.assignment!r}: shifted accesses and restricted "
                "terms run on the default leaf"
            )
        out.append(
            TermKernel(
                coeff=wrapped(t.coeff, st.output.dtype),
                spec=spec,
                factors=tuple((f.tensor.name, tuple(pos[v] for v in f.indices)) for f in t.factors),
                gates=tuple(pos[v] for v in st.variables if v not in lhs and v not in t.summed),
                multipliers=tuple(pos[v] for v in t.summed if v not in used),
                out=tuple(pos[v] for v in st.lhs_vars),
                parallel=par,
                leaf=leaf,
                widen=widen_to([f.tensor.dtype for f in t.factors], st.output.dtype),
                offsets=tuple(f.offsets or (0,) * len(f.indices) for f in t.factors)
                if shifted
                else (),
                scales=tuple(f.scales or (1,) * len(f.indices) for f in t.factors)
                if shifted
                else (),
                domain=tuple((pos[v], lo, hi) for v, lo, hi in t.domain),
                tree=tree if not out else (),
            )
        )
    return tuple(out)


def wrapped(coeff: Any, dtype: np.dtype) -> Any:
    """A term's integer coefficient as ``dtype``'s arithmetic takes it: modulo ``2**bits``,
    in the dtype's range. Integer arithmetic in numpy is modular, so the expanded statement's
    coefficients may be taken modulo too: ``u - 2`` of a uint64 ``u`` is the term
    ``u + (-2)``, and ``-2`` is ``2**64 - 2`` there (numpy refuses the Python integer ``-2``
    for a uint64 operand, while its own ``u - 2`` wraps)."""
    if np.dtype(dtype).kind not in "iu" or not isinstance(coeff, int | np.integer):
        return coeff
    info = np.iinfo(dtype)
    c = int(coeff)
    if info.min <= c <= info.max:
        return coeff
    return (c - info.min) % (1 << info.bits) + info.min


PARALLEL_MIN_POINTS = 1 << 15  # iterations below which a parallelized leaf stays on one thread
_PAR_POOL: list[Any] = []


def cores() -> int:
    """Cores this process may run on (shared out among a node's MPI ranks:
    :func:`distal.kernels.cores.cores`)."""
    return _cores.cores()


def _par_pool() -> Any:
    if not _PAR_POOL:
        from concurrent.futures import ThreadPoolExecutor

        # named like the slab threads: a leaf running on one does not split again
        _PAR_POOL.append(ThreadPoolExecutor(cores(), thread_name_prefix="distal-leaf-par"))
    return _PAR_POOL[0]


def run_leaf(
    kernels: Sequence[TermKernel],
    box: Box,
    operands: dict[str, tuple[np.ndarray, Box]],
    out: np.ndarray,
    out_origin: Box,
    fresh: bool = False,
) -> None:
    """Add every term's contribution over iteration ``box`` into ``out`` (holding ``out_origin``).

    ``operands`` maps tensor names to ``(array, box it holds)``. ``fresh`` says the
    output region is still all zeros, so the first contributing term may store.

    With a parallelized output variable (``Schedule.parallelize``) the box is cut along it
    into one chunk per core, run on a thread pool: the chunks write disjoint slices of
    the output and read the same operands, so the result is the serial one, and the
    BLAS threads are shared out (``blas threads // chunks`` per chunk, at least one) so
    chunks x BLAS threads never exceeds the cores.
    """
    if kernels and kernels[0].tree:
        tk = kernels[0]
        pointwise.run(tk.tree, tk.out, box, operands, out, out_origin, fresh, _parallel)
        return
    par = kernels[0].parallel if kernels else ()
    if par and not threading.current_thread().name.startswith("distal-leaf"):
        for p in par:
            lo, hi = box[p]
            n = min(cores(), hi - lo)
            if n >= 2 and box_volume(box) >= PARALLEL_MIN_POINTS:
                _run_chunks(kernels, box, p, n, operands, out, out_origin, fresh)
                return
    _run_leaf(kernels, box, operands, out, out_origin, fresh)


def _run_chunks(
    kernels: Sequence[TermKernel],
    box: Box,
    p: int,
    n: int,
    operands: dict[str, tuple[np.ndarray, Box]],
    out: np.ndarray,
    out_origin: Box,
    fresh: bool,
) -> None:
    lo, hi = box[p]
    cuts = [lo + (hi - lo) * t // n for t in range(n + 1)]
    per = max(1, blas.threads() // n)
    boxes = [(*box[:p], (cuts[t], cuts[t + 1]), *box[p + 1 :]) for t in range(n)]

    def one(b: Box) -> None:
        with blas.limit_here(per):
            _run_leaf(kernels, b, operands, out, out_origin, fresh)

    # without a per-thread BLAS setter, the process-wide count drops while chunks run
    region = blas.one_thread_each() if per == 1 and not blas.has_local_threads() else None
    with region if region is not None else contextlib.nullcontext():
        futs = [_par_pool().submit(one, b) for b in boxes]
        for f in futs:
            f.result()


LEAF_PLANS = 64  # kernel tuples whose per-box leaf calls are kept ...
LEAF_BOXES = 4096  # ... each with up to this many (box, origins) entries


class _LeafPlan:
    """What running ``kernels`` on one box derives from the box and the blocks' origins
    alone, kept per (box, operand origins, output origin): the terms that run, their
    routines, coefficients and the slices of every operand and of the output. A repeated
    run on the same boxes then only slices the arrays it is given."""

    __slots__ = ("calls", "kernels", "names")

    def __init__(self, kernels: tuple[TermKernel, ...]) -> None:
        self.kernels = kernels
        self.names = tuple(dict.fromkeys(n for tk in kernels for n, _ in tk.factors))
        self.calls: dict[tuple, tuple] = {}

    def get(
        self, box: Box, operands: dict[str, tuple[np.ndarray, Box]], out_origin: Box | None
    ) -> tuple:
        try:
            key = (box, out_origin, *[operands[n][1] for n in self.names])
        except KeyError:  # a tensor only gated-off terms read is not held here
            key = (
                box,
                out_origin,
                *[operands[n][1] if n in operands else None for n in self.names],
            )
        c = self.calls.get(key)
        if c is None:
            c = tuple(self._derive(box, operands, out_origin))
            if len(self.calls) >= LEAF_BOXES:
                self.calls.clear()
            self.calls[key] = c
        return c

    def _derive(
        self, box: Box, operands: dict[str, tuple[np.ndarray, Box]], out_origin: Box | None
    ) -> Iterator[tuple]:
        for tk in self.kernels:
            if not _runs_on(tk, box):
                continue
            b = _within(box, tk.domain)
            if b is None:
                continue
            alpha = tk.coeff
            if tk.multipliers:
                alpha = alpha * math.prod(b[m][1] - b[m][0] for m in tk.multipliers)
            if tk.offsets:
                ops = tuple(
                    (name, _shifted(b, idx, tk.scales[n], tk.offsets[n], operands[name][1]))
                    for n, (name, idx) in enumerate(tk.factors)
                )
            else:
                ops = tuple(
                    (name, _slices(tuple(b[i] for i in idx), operands[name][1]))
                    for name, idx in tk.factors
                )
            dst = None if out_origin is None else _slices(tuple(b[i] for i in tk.out), out_origin)
            yield tk, routine(tk), alpha, ops, dst


def _within(box: Box, domain: tuple[tuple[int, int, int], ...]) -> Box | None:
    """``box`` cut to a term's domain (None where they do not meet)."""
    if not domain:
        return box
    b = list(box)
    for p, lo, hi in domain:
        x, y = max(b[p][0], lo), min(b[p][1], hi)
        if y <= x:
            return None
        b[p] = (x, y)
    return tuple(b)


def _shifted(
    box: Box, idx: tuple[int, ...], scales: tuple[int, ...], offsets: tuple[int, ...], origin: Box
) -> tuple[slice, ...] | None:
    """The index of a shifted factor's elements over ``box`` in an array holding
    ``origin``: dimension ``d`` from ``scales[d] * lo + offsets[d]`` in steps of the scale."""
    if not idx:
        return None
    out = []
    for i, a, c, (o, _) in zip(idx, scales, offsets, origin, strict=True):
        lo, hi = box[i]
        start, last = a * lo + c - o, a * (hi - 1) + c - o
        stop = last + (1 if a > 0 else -1)
        out.append(slice(start, None if stop < 0 else stop, a))
    return tuple(out)


def _runs_on(tk: TermKernel, box: Box) -> bool:
    """Whether term ``tk`` runs on ``box``: a term that does not use a statement variable
    (``gates``) runs only where that variable takes its first value."""
    return not tk.gates or all(box[g][0] <= 0 < box[g][1] for g in tk.gates)


def stores_all(kernels: Sequence[TermKernel], box: Box, out_origin: Box) -> bool:
    """Whether the leaf, run ``fresh`` on ``box``, writes every element of the output block
    holding ``out_origin`` whatever it held: its first running term is computed by a
    default routine (each stores into its destination when ``fresh``, never reading it:
    :func:`contraction`) over the whole block. A recycled block need not be zeroed first
    then (TTM's four 2.3 ms fills of 128 MiB blocks before GEMMs that write every element)."""
    if kernels and kernels[0].tree:  # computed point by point: zeros where no term is
        return tuple(box[i] for i in kernels[0].out) == tuple(out_origin)
    for tk in kernels:
        if _runs_on(tk, box):
            b = _within(box, tk.domain)
            if b is None:
                continue
            return tk.leaf == "default" and tuple(b[i] for i in tk.out) == tuple(out_origin)
    return False


_LEAF_PLANS: dict[int, _LeafPlan] = {}


def _leaf_plan(kernels: Sequence[TermKernel]) -> _LeafPlan:
    lp = _LEAF_PLANS.get(id(kernels))
    if lp is not None and lp.kernels is kernels:
        return lp
    lp = _LeafPlan(tuple(kernels))
    if isinstance(kernels, tuple):  # a tuple lives as long as its kernel: kept by id
        if len(_LEAF_PLANS) >= LEAF_PLANS:
            _LEAF_PLANS.clear()
        _LEAF_PLANS[id(kernels)] = lp
    return lp


def _slices(box: Box, origin: Box) -> tuple[slice, ...] | None:
    """The index of ``box`` in an array holding ``origin`` (None: the whole 0-d array)."""
    if not box:
        return None
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin, strict=True))


def _run_leaf(
    kernels: Sequence[TermKernel],
    box: Box,
    operands: dict[str, tuple[np.ndarray, Box]],
    out: np.ndarray,
    out_origin: Box,
    fresh: bool,
) -> None:
    for _, run, alpha, ops, dsl in _leaf_plan(kernels).get(box, operands, out_origin):
        views = [operands[n][0] if sl is None else operands[n][0][sl] for n, sl in ops]
        run(views, out if dsl is None else out[dsl], alpha, fresh)
        fresh = False


def term_calls(
    kernels: Sequence[TermKernel], box: Box, operands: dict[str, tuple[np.ndarray, Box]]
) -> list[tuple[TermKernel, float, list[np.ndarray]]]:
    """The terms a leaf runs on ``box``: ``(term, coefficient, operand views)`` for each term
    that reads here (one that does not use a statement variable runs only at its first
    value), its coefficient times the extents of the variables it sums without using.
    Running a leaf and checking one (the elastic runtime's verification) both start here.

    Every term's operands cover the whole box: a restricted term's (which reads only on its
    part of the box) are copies that are zero outside that part, so the term's product is
    zero there, as the statement says."""
    out = []
    for tk, _, alpha, ops, _ in _leaf_plan(kernels).get(box, operands, None):
        views = [operands[n][0] if sl is None else operands[n][0][sl] for n, sl in ops]
        b = _within(box, tk.domain)
        if b is not None and b != box:
            tk, views = _padded(tk, views, b, box)
        out.append((tk, alpha, views))
    return out


def _padded(
    tk: TermKernel, views: list[np.ndarray], part: Box, box: Box
) -> tuple[TermKernel, list[np.ndarray]]:
    """A restricted term over ``box`` instead of its ``part`` of it: its operand views as
    arrays over ``box``, zero outside ``part``, and, for each restricted variable no factor
    reads (a value broadcast along it), one more factor: 1 inside the part, 0 outside."""
    out = []
    for v, (_, idx) in zip(views, tk.factors, strict=True):
        full = np.zeros(tuple(box[i][1] - box[i][0] for i in idx), v.dtype)
        full[tuple(slice(part[i][0] - box[i][0], part[i][1] - box[i][0]) for i in idx)] = v
        out.append(full)
    read = {i for _, idx in tk.factors for i in idx}
    ins, spec_out = tk.spec.split("->")
    extra = []
    for p, _, _ in tk.domain:
        if p in read:
            continue
        ind = np.zeros(box[p][1] - box[p][0], np.result_type(*views) if views else np.float64)
        ind[part[p][0] - box[p][0] : part[p][1] - box[p][0]] = 1
        out.append(ind)
        extra.append(_LETTERS[p])
    if extra:
        spec = ",".join([*(ins.split(",") if ins else []), *extra]) + "->" + spec_out
        tk = dataclasses.replace(tk, spec=spec)
    return tk, out
