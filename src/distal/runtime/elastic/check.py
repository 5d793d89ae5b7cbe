"""A randomized check of a unit's result that costs about its words, not its flops.

A unit adds, over its compute boxes, every term ``alpha * prod(factors)`` of the leaf
statement into its output buffer ``A``. Freivalds' check of a matrix product, ``A r == B (C
r)``, generalizes to any such contraction: draw one random vector ``r_d`` per output
dimension, project the claimed output onto all of them at once (``sum_e A[e] prod_d
r_d[e_d]``, a scalar per repetition) and compare with the same projection pushed into the
operands, ``sum_box sum_term alpha * contract(factors..., r_1, ..., r_D)``, evaluated along
opt_einsum's pairwise path. For GEMM that path is ``C r_j`` (a matrix-vector product), then
``B (C r_j)``, then a dot with ``r_i``; for TTV, TTM, MTTKRP and inner products too, every
pairwise step contracts a vector-like operand into a factor, so the cost is a small
multiple of the operands' and the result's words per repetition. Repetitions are batched:
``r_d`` is a ``reps x extent`` matrix, the projection a vector of ``reps`` values.

**Random entries.** Each entry of ``r_d`` is ``±(1 + j 2^-20)`` with a uniformly random sign
and ``j`` uniform in ``[0, 2^20)``: a set ``S`` of ``2^21`` distinct values, all of magnitude
in ``[1, 2)`` (so no entry is small and an error's projection is never scaled down).
For a wrong result ``A' = A + E`` with ``E != 0`` the difference of the two sides is, in
exact arithmetic, ``sum_e E[e] prod_d r_d[e_d]``: a nonzero polynomial of total degree
``D`` (the number of output dimensions) in the random entries. By the Schwartz-Zippel lemma
it vanishes with probability at most ``D / |S| = D 2^-21`` per repetition, independently
across repetitions. (With ``±1`` entries the same polynomial can vanish with probability
``1 - 2^-D``: ``E`` all ones on a ``2 x 2`` block passes ``3/4`` of the time; hence the
larger set.) ``default_repeats`` takes the fewest repetitions giving at most ``2^-20``.

**Tolerance.** Both sides are sums of the same products ``alpha * prod(factors) * prod_d
r_d``, computed in different orders. A sum of products in any order and association
differs from the exact sum by at most ``gamma_m * M`` (Higham, *Accuracy and Stability of
Numerical Algorithms*, sections 3.1-3.5), where ``gamma_m = m u / (1 - m u)``, ``u`` is the unit
roundoff, ``m`` bounds the roundings any one product goes through, and ``M`` is the sum of
the products' absolute values. Here:

- the claimed ``A`` (computed by the worker, in the output dtype): at most ``K + p + 1``
  roundings per product, ``K`` the number of products summed into one output element
  (the product of the summed variables' extents over the unit's boxes), ``p`` the factors;
- the left side (projecting ``A``, float64): the additions along its contraction path (the
  sum, over the path's pairwise steps, of the extents each step sums over) plus ``D``
  multiplications;
- the right side (float64): the same for each box's path, plus ``p + D + 1``
  multiplications and one addition per box and term accumulated.

``M`` is bounded without the claimed result (a liar cannot widen the tolerance) by
``2^D * sum |alpha| contract(|factors|..., 1, ..., 1)``, one more repetition's work, itself
rounded at most ``gamma`` of its own path. The check accepts when every repetition has
``|lhs - rhs| <= ((1 + g_A)(1 + g_lhs) - 1 + g_rhs) * M / (1 - g_M)``: a correct result is
never rejected, and a wrong one passes only if its error's projection is below that
rounding bound (or, with the probability above, vanishes).

**Leaves over stored entries** (a plan bound to a sparse pattern, :func:`project_entries`):
the same projection with the entries as the summation, one random vector per output
dimension (the rows the unit adds into, then each dense output letter); for SpMV
``sum_e v[e] r[o[e]] x[idx[e]]``. The degree is the number of output dimensions, the
tolerance the same ``gamma`` bound.

**A fixed matrix, checked in O(n)** (:func:`entry_checksum`, :func:`checksum_verdict`).
In a loop the sparse operand of an SpMV unit is the same every iteration while its vector
changes. The projection's right side is then ``sum_e v[e] r[o[e]] x[idx[e]] = c . x`` with
``c = r^T A`` (per repetition, ``c[j] = sum over the entries of column j of v[e] r[o[e]]``):
computed once per unit, pattern and values, every later check costs the rows and columns
of the unit (``r . y`` and ``c . x``), not its entries -- the checksum of algorithm-based
fault tolerance (Huang and Abraham), here with the projection's random ``r`` and rounding
bound (a product goes through ``c``'s column sum, then the dot's pairwise sum: at most the
column's entries plus ``log2`` of the columns additions). Its price is sensitivity: the
bound is the whole unit's, so an error in one element is seen only above about ``rows x
u`` of that row's magnitude (``u`` the unit roundoff; recomputing sees ``u`` itself).
The vectors ``r`` must be secret from the worker checked: the caller draws them from a
secret of the checking process, never sent anywhere (so they are fixed per unit for that
process's life, which is what lets ``c`` be kept). A wrong result passes with the
projection's probability per repetition; a liar that is caught is excluded, so it cannot
learn ``r`` by trying.

**Recomputing instead** (:func:`recompute_cheaper`, :func:`recompute_verdict`). Where the
unit does fewer products than the projection reads words (one product per entry: SpMV; a
reduction, one addition per summand), no order of evaluation makes a check cheaper than the
work itself, so the check computes the result again. So do units whose operands hold
``inf`` or ``nan``, which make the projection's bound meaningless. One rule accepts a
recomputed result, the projection's own: both evaluations are sums of the same products,
each within ``gamma_(K+p) M`` of the exact value elementwise (``K`` products summed into an
element, ``p`` factors each, ``M`` the same sum over the operands' absolute values, never
the claim), so ``|claimed - recomputed| <= 2 gamma_(K+p) M / (1 - gamma_(K+p))``; where
``M`` is not finite the bits must agree (``nan`` for ``nan``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import opt_einsum as oe

from distal.kernels.leaf import TermKernel

VALUE_BITS = 20
"""Entries are ``±(1 + j 2^-VALUE_BITS)``: ``2^(VALUE_BITS + 1)`` values in all."""

TARGET_BITS = 20
"""Default repetitions make the false-accept probability at most ``2^-TARGET_BITS``."""


def default_repeats(dims: int, target_bits: int = TARGET_BITS) -> int:
    """The fewest repetitions with ``(dims / 2^(VALUE_BITS+1))^reps <= 2^-target_bits``."""
    if dims <= 0:
        return 1  # nothing random: the projection of a scalar is the scalar itself
    per = VALUE_BITS + 1 - math.log2(dims)
    return max(1, math.ceil(target_bits / per))


def false_accept_bound(dims: int, reps: int) -> float:
    """Probability (exact arithmetic) that a wrong result passes ``reps`` repetitions."""
    if dims <= 0:
        return 0.0
    return (dims / 2.0 ** (VALUE_BITS + 1)) ** reps


def vectors(seed: int, extents: Sequence[int], reps: int) -> list[np.ndarray]:
    """One ``reps x extent`` float64 matrix of random entries per output dimension."""
    rng = np.random.default_rng(seed)
    out = []
    for n in extents:
        mag = 1.0 + rng.integers(0, 1 << VALUE_BITS, (reps, n)) * 2.0**-VALUE_BITS
        sign = rng.integers(0, 2, (reps, n)) * 2.0 - 1.0
        out.append(mag * sign)
    return out


def _gamma(m: float, u: float) -> float:
    mu = m * u
    return mu / (1.0 - mu) if mu < 1.0 else math.inf


def _unit_roundoff(dtype: np.dtype) -> float:
    if dtype.kind in "fc":
        return float(np.finfo(dtype).eps) / 2.0
    return 0.0  # integers and booleans are computed exactly


U64 = float(np.finfo(np.float64).eps) / 2.0


def _depth(path_info: Any, sizes: dict[str, int]) -> int:
    """Additions any one product goes through along a contraction path: per pairwise step,
    the number of terms that step sums (the product of the extents it removes)."""
    total = 0
    for step in path_info.contraction_list:
        removed = step[1]
        total += math.prod(sizes[c] for c in removed) if removed else 0
    return total


def _contract(expr: str, ops: Sequence[np.ndarray]) -> tuple[np.ndarray, int]:
    """``einsum(expr, *ops)`` along opt_einsum's path, and that path's addition depth."""
    if len(ops) == 1:
        ins, _ = expr.split("->")
        sizes = dict(zip(ins, ops[0].shape, strict=True))
        kept = expr.split("->")[1]
        return np.einsum(expr, ops[0]), math.prod(v for c, v in sizes.items() if c not in kept)
    _, info = oe.contract_path(expr, *ops, optimize="auto")
    work = list(ops)
    for step in info.contraction_list:
        idx, _, step_expr = step[0], step[1], step[2]
        args = [work.pop(i) for i in idx]  # the order the step's expression names them
        work.append(_pair(step_expr, args))
    return work[0], _depth(info, info.size_dict)


def _pair(expr: str, args: Sequence[np.ndarray]) -> np.ndarray:
    """One step of a contraction path as a (batched) matrix product.

    opt_einsum's own evaluation goes through ``tensordot``, which for a matrix times a
    thin ``reps x n`` matrix was 10-20x slower here than ``matmul`` on the same views.
    """
    ins, out = expr.split("->")
    names = ins.split(",")
    if len(args) != 2 or any(len(set(n)) != len(n) for n in names):
        return np.einsum(expr, *args)
    (sa, sb), (a, b) = names, args
    # letters only one side has and the output drops: sum them out first
    drop_a = tuple(n for n, c in enumerate(sa) if c not in sb and c not in out)
    drop_b = tuple(n for n, c in enumerate(sb) if c not in sa and c not in out)
    if drop_a:
        a, sa = a.sum(axis=drop_a), "".join(c for n, c in enumerate(sa) if n not in drop_a)
    if drop_b:
        b, sb = b.sum(axis=drop_b), "".join(c for n, c in enumerate(sb) if n not in drop_b)
    batch = [c for c in sa if c in sb and c in out]
    summed = [c for c in sa if c in sb and c not in out]
    a_only = [c for c in sa if c not in sb]
    b_only = [c for c in sb if c not in sa]
    size = dict(zip(sa, a.shape, strict=True)) | dict(zip(sb, b.shape, strict=True))
    nb = math.prod(size[c] for c in batch)
    nk = math.prod(size[c] for c in summed)
    na = math.prod(size[c] for c in a_only)
    nbo = math.prod(size[c] for c in b_only)
    at = a.transpose([sa.index(c) for c in (*batch, *a_only, *summed)]).reshape(nb, na, nk)
    bt = b.transpose([sb.index(c) for c in (*batch, *summed, *b_only)]).reshape(nb, nk, nbo)
    res = np.matmul(at, bt).reshape([size[c] for c in (*batch, *a_only, *b_only)])
    have = "".join((*batch, *a_only, *b_only))
    return res.transpose([have.index(c) for c in out])


Call = tuple[TermKernel, float, list[np.ndarray], tuple[tuple[int, int], ...]]
"""One term on one box: the kernel, its coefficient, its factors' views, and the box's
ranges over the output dimensions (relative to the unit's output buffer)."""


@dataclass(frozen=True)
class Verdict:
    """What one check found: ``ok``, the worst ``|lhs - rhs|`` and the tolerance."""

    ok: bool
    diff: float
    tol: float
    reps: int
    dims: int
    exact: bool = False  # checked by recomputing (non-finite operands)

    def describe(self) -> str:
        how = "recomputed" if self.exact else f"{self.reps} projection(s) over {self.dims} dim(s)"
        return f"|lhs - rhs| = {self.diff:.3g} vs tolerance {self.tol:.3g} ({how})"


_LOCAL = threading.local()


def _abs(o: np.ndarray, slot: int) -> np.ndarray:
    """``|o|`` in a buffer reused across checks on this thread: fresh memory costs a page
    fault per page on machines whose host backs guest memory lazily, which for large
    operands costs more than the arithmetic of the check."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = {}
    dtype = np.abs(np.zeros(0, o.dtype)).dtype
    buf = bufs.get(slot)
    if buf is None or buf.size < o.size or buf.dtype != dtype:
        buf = bufs[slot] = np.empty(o.size, dtype)
    out = buf[: o.size].reshape(o.shape)
    np.abs(o, out=out)
    return out


REP = "\u0100"  # the repetition index: a symbol no statement variable uses

CHUNK_BYTES = 1 << 19
"""Bytes of ``|operand|`` formed at a time by :func:`_abs_sum` (a cache-resident buffer)."""


def _abs_sum(o: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """``sum |o|`` over ``axes``, and the additions any one element goes through.

    The absolute values are formed a chunk of leading rows at a time in a small reused
    buffer and summed at once, so the operand is read once and nothing of its size is
    written (the separate ``|o|`` pass and its re-read were half of a check's time).
    """
    dtype = np.abs(np.zeros(0, o.dtype)).dtype
    keep = [n for n in range(o.ndim) if n not in axes]
    out = np.zeros(tuple(o.shape[n] for n in keep), dtype)
    adds = math.prod(o.shape[n] for n in axes)
    if o.size == 0:
        return out, adds
    row = max(1, o[:1].size if o.ndim else 1)
    step = max(1, CHUNK_BYTES // (row * o.itemsize))
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = {}
    buf = bufs.get("chunk")
    if buf is None or buf.size < step * row or buf.dtype != dtype:
        buf = bufs["chunk"] = np.empty(step * row, dtype)
    first_summed = 0 in axes
    for lo in range(0, o.shape[0], step):
        part = o[lo : lo + step]
        a = buf[: part.size].reshape(part.shape)
        np.abs(part, out=a)
        red = np.add.reduce(a, axis=axes) if axes else a
        if first_summed:
            out += red
        else:
            out[lo : lo + step] = red
    return out, adds


def _magnitude(
    parts: Sequence[str],
    ops: Sequence[np.ndarray],
    ranges: Sequence[tuple[int, int]],
    out_letters: Sequence[str],
) -> tuple[float, int]:
    """``contract(|factors|..., 1, ..., 1)`` of one term (the sum of its products' absolute
    values, before ``|alpha|`` and ``|r|^D``), and the additions any product goes through.

    Summing over all indices is the same whichever order: every letter that occurs once
    among the factors is summed out of its factor first (:func:`_abs_sum`, which never
    writes ``|factor|`` in full), the small results are contracted to a scalar along
    opt_einsum's path, and an output letter no factor carries contributes its extent.
    """
    if not ops:
        return float(math.prod(hi - lo for lo, hi in ranges)), 0
    count: dict[str, int] = {}
    for p in parts:
        for c in p:
            count[c] = count.get(c, 0) + 1
    reduced, letters, pre = [], [], 0
    for p, o in zip(parts, ops, strict=True):
        axes = tuple(n for n, c in enumerate(p) if count[c] == 1)
        if axes:
            r, adds = _abs_sum(o, axes)
            pre += adds
        else:
            r = _abs(o, len(reduced))
        reduced.append(r)
        letters.append("".join(c for n, c in enumerate(p) if n not in axes))
    broadcast = math.prod(
        hi - lo for c, (lo, hi) in zip(out_letters, ranges, strict=True) if c not in count
    )
    expr = ",".join(letters) + "->"
    m, dep = _contract(expr, reduced) if any(letters) else (np.prod([float(r) for r in reduced]), 0)
    return float(np.real(m)) * broadcast, pre + dep


def _letters(dims: int) -> list[str]:
    return [oe.get_symbol(300 + d) for d in range(dims)]


def _project_claimed(claimed: np.ndarray, R: Sequence[np.ndarray], reps: int) -> tuple[Any, int]:
    """The left side: ``claimed`` projected on every dimension, and the path's depth."""
    dims = len(R)
    if not dims:
        return np.full(reps, claimed[()], dtype=np.result_type(claimed, np.float64)), 0
    letters = _letters(dims)
    expr = ",".join(["".join(letters), *(REP + c for c in letters)]) + "->" + REP
    return _contract(expr, [np.asarray(claimed, np.result_type(claimed, 1.0)), *R])


def project(
    claimed: np.ndarray,
    calls: Iterable[Call],
    out_shape: tuple[int, ...],
    out_dtype: np.dtype,
    seed: int,
    reps: int | None = None,
) -> Verdict:
    """Check ``claimed`` (the unit's output buffer) against the terms ``calls`` add into it.

    ``calls`` are the leaf calls of the unit (see :func:`distal.runtime.elastic.tasks`'s
    ``_calls``): every term on every compute box, with its factors' views. The check
    projects every output dimension (module docstring).
    """
    dims = len(out_shape)
    reps = default_repeats(dims) if reps is None else int(reps)
    R = vectors(seed, out_shape, reps)
    out_letters = _letters(dims)
    claimed = np.asarray(claimed)
    if claimed.shape != tuple(out_shape):
        return Verdict(False, math.inf, 0.0, reps, dims)
    u_out = _unit_roundoff(np.dtype(out_dtype))
    cplx = 2 if np.dtype(out_dtype).kind == "c" else 1  # a complex product rounds twice

    lhs, depth_lhs = _project_claimed(claimed, R, reps)

    rhs = np.zeros(reps, dtype=lhs.dtype)
    mag = 0.0
    depth_rhs = depth_mag = n_calls = 0
    k_products: dict[tuple, int] = {}
    factors = 0
    finite = True
    for tk, alpha, ops, ranges in calls:
        n_calls += 1
        ins, _ = tk.spec.split("->")
        parts = ins.split(",") if ins else []
        spec_out = tk.spec.split("->")[1]
        # the term's output letters stand for the unit's output dimensions, in order
        sub = dict(zip(spec_out, out_letters, strict=True))
        parts = ["".join(sub.get(c, c) for c in p) for p in parts]
        rs = [R[d][:, lo:hi] for d, (lo, hi) in enumerate(ranges)]
        expr = ",".join([*parts, *(REP + c for c in out_letters)]) + "->" + REP
        val, dep = _contract(expr, [*ops, *rs]) if (ops or rs) else (np.ones(reps), 0)
        rhs = rhs + alpha * np.broadcast_to(val, (reps,))
        depth_rhs = max(depth_rhs, dep)
        # magnitude bound: |alpha| * contract(|factors|, ones), times max |r|^D below
        m0, depm = _magnitude(parts, ops, ranges, out_letters)
        m0 *= abs(alpha)
        # an inf or nan in an operand makes the sum of absolute values inf or nan
        finite = finite and math.isfinite(m0)
        mag += m0
        depth_mag = max(depth_mag, depm)
        # products summed into one output element by this call
        summed = _summed_count(parts, ops, sub)
        key = tuple(ranges)
        k_products[key] = k_products.get(key, 0) + summed
        factors = max(factors, len(ops))
    if not finite:
        return Verdict(False, math.nan, math.nan, reps, dims, exact=True)
    K = max(k_products.values(), default=0)
    p = cplx * (factors + 1)
    D = cplx * dims
    g_a = _gamma(K + p, u_out)
    g_l = _gamma(depth_lhs + D, U64)
    g_r = _gamma(depth_rhs + p + D + n_calls, U64)
    g_m = _gamma(depth_mag + factors + 1 + n_calls, U64)
    bound = mag * 2.0**dims / (1.0 - g_m) if g_m < 1 else math.inf
    tol = ((1 + g_a) * (1 + g_l) - 1 + g_r) * bound
    diff = float(np.max(np.abs(lhs - rhs))) if reps else 0.0
    ok = bool(diff <= tol)  # nan (a non-finite claimed result) is never ok
    return Verdict(ok, diff, tol, reps, dims)


def _summed_count(parts: Sequence[str], ops: Sequence[np.ndarray], sub: dict[str, str]) -> int:
    """How many products of the term land in one output element (summed extents)."""
    out = set(sub.values())
    sizes: dict[str, int] = {}
    for p, o in zip(parts, ops, strict=True):
        sizes.update(zip(p, o.shape, strict=True))
    return math.prod(v for c, v in sizes.items() if c not in out)


def recompute_cheaper(products: float, words: float) -> bool:
    """Whether computing a result again (``products`` multiplications or additions) costs no
    more than projecting it, which reads ``words`` operand and result elements twice (for
    the value and for the magnitude bound) per batch of repetitions."""
    return products <= 2 * words


def recompute_verdict(
    claimed: Any, want: np.ndarray, mag: np.ndarray, K: int, p: int, dtype: np.dtype
) -> Verdict:
    """Accept ``claimed`` against ``want`` computed again, within the rounding bound of two
    evaluations of the same sums (module docstring): ``mag`` is the same computation over
    the operands' absolute values, ``K`` the products summed into one element, ``p`` the
    factors of each. Bit-identical is a pass; where ``mag`` is not finite the bits must
    agree. Deterministic: a wrong result passes only if every element's error is below the
    bound (integers: exact)."""
    dims = want.ndim
    claimed = np.asarray(claimed)
    if claimed.shape != want.shape:
        return Verdict(False, math.inf, 0.0, 0, dims, exact=True)
    if np.array_equal(claimed, want, equal_nan=True):
        return Verdict(True, 0.0, 0.0, 0, dims, exact=True)
    cplx = 2 if np.dtype(dtype).kind == "c" else 1
    g = _gamma(K + cplx * (p + 1), _unit_roundoff(np.dtype(dtype)))
    with np.errstate(invalid="ignore", over="ignore"):
        tol = 2 * g * mag / (1 - g) if g < 1 else np.full(mag.shape, math.inf)
        tol = np.where(np.isfinite(mag), tol, 0.0)  # no bound from inf: the bits must agree
        diff = np.abs(claimed - want)
        same = (claimed == want) | (np.isnan(claimed) & np.isnan(want))
        excess = np.where(same, -np.inf, np.where(np.isnan(diff), np.inf, diff - tol))
    worst = int(np.argmax(excess))
    ok = bool(excess.reshape(-1)[worst] <= 0)
    d, t = float(diff.reshape(-1)[worst]), float(tol.reshape(-1)[worst])
    return Verdict(ok, d, t, 0, dims, exact=True)


def entry_costs(work: Any) -> tuple[int, int, int, int]:
    """A leaf over stored entries: (products it computes, words a projection reads, products
    summed into one output element, factors per product)."""
    ext = dict(work.extents)
    products = words = K = p = 0
    for t in work.terms:
        n = len(t.out)
        if n == 0:
            continue
        letters = {c for _, _, ls in t.dense for c in ls}
        products += n * math.prod(ext[c] for c in letters)
        words += n * (len(t.sparse) + len(t.dense) + 2)
        rows = int(np.bincount(t.out).max())
        K += rows * math.prod(ext[c] for c in letters - set(work.out_letters))
        p = max(p, len(t.sparse) + len(t.dense) + (t.coeff != 1))
    return products, words, K, p


_REP, _ENT, _ROW = "Q", "E", "R"  # letters the leaves never use (theirs are a, b, ...)


def _term_projection(
    work: Any, t: Any, xs: Any, R: list[np.ndarray], absolute: bool
) -> tuple[np.ndarray, int, int, int]:
    """One term of a leaf over stored entries projected on the vectors ``R`` (rows first,
    then the output's dense letters): ``sum_e coeff v[e] r_0[o[e]] contract(X_T[idx_T[e]],
    r_d)``.

    Each dense factor is contracted with the vectors of the output letters only it carries,
    and summed over the letters only it carries, *before* its rows are gathered to the
    entries (Freivalds: ``C r`` before ``B (C r)``), so the cost is about the operands' words.
    With ``absolute``, every operand is taken by absolute value (the magnitude bound).
    Returns the projection (one value per repetition), the additions any product goes
    through, the products summed into one output element, and the factors multiplied.
    """
    out_letters = work.out_letters
    ext = dict(work.extents)
    f = np.abs if absolute else (lambda a: a)
    v = None
    for name, idx in t.sparse:
        vals = f(xs[name] if idx is None else xs[name][idx])
        v = vals if v is None else v * vals
    n = len(t.out)
    if v is None:
        v = np.ones(n)
    coeff = t.coeff
    count: dict[str, int] = {}
    for _, _, letters in t.dense:
        for c in letters:
            count[c] = count.get(c, 0) + 1
    ops: list[np.ndarray] = [np.asarray(v, np.result_type(v, np.float64))[None, :] * R[0][:, t.out]]
    specs = [_REP + _ENT]
    pre = 0
    for name, idx, letters in t.dense:
        x = f(xs[name])
        mine_out = [c for c in letters if count[c] == 1 and c in out_letters]
        mine_sum = [c for c in letters if count[c] == 1 and c not in out_letters]
        shared = [c for c in letters if count[c] > 1]
        args: list[np.ndarray] = [x]
        subs = [_ROW + letters]
        for c in mine_out:
            args.append(R[1 + out_letters.index(c)])
            subs.append(_REP + c)
        keep = _ROW + (_REP if mine_out else "") + "".join(shared)
        if mine_out or mine_sum:
            x = np.einsum(",".join(subs) + "->" + keep, *args, optimize=True)
            pre = max(pre, math.prod(ext[c] for c in (*mine_out, *mine_sum)))
        ops.append(x[idx])
        specs.append(_ENT + keep[1:])
    shared_all = sorted(c for c, k in count.items() if k > 1)
    summands = n * math.prod(ext[c] for c in shared_all)
    val = np.einsum(",".join(specs) + "->" + _REP, *ops, optimize=True)
    # an output letter no factor carries gets the same contribution at each index
    for d, c in enumerate(out_letters):
        if c not in count:
            val = val * R[1 + d].sum(axis=1)
            summands *= ext[c]
    val = val * (abs(coeff) if absolute else coeff)
    rows = np.bincount(t.out).max() if n else 0
    per_elem = int(rows) * math.prod(ext[c] for c in count if c not in out_letters)
    factors = len(t.sparse) + len(t.dense) + (coeff != 1)
    return val, pre + summands, per_elem, factors


def project_entries(
    claimed: np.ndarray,
    calls: Iterable[tuple[Any, Any]],
    out_shape: tuple[int, ...],
    out_dtype: np.dtype,
    seed: int,
    reps: int | None = None,
) -> Verdict:
    """Check ``claimed`` (a unit's output buffer) against its leaves over stored entries:
    ``calls`` are ``(EntryWork, operands)``, the operands being the fetched values by tensor.

    :func:`project` with the entries as the summation (module docstring): the two sides
    differ, in exact arithmetic, by a nonzero polynomial of degree ``dims`` (1 for SpMV, 2
    for SpMM), so a wrong result passes a repetition with probability at most ``dims /
    2^21``. Cost: one pass over the entries and the dense operands per batch of
    repetitions, except where two dense factors share a summed letter (SDDMM's ``C[i, j]
    D[j, k]``): their per-entry contraction is the kernel's own work.
    """
    dims = len(out_shape)
    reps = default_repeats(dims) if reps is None else int(reps)
    claimed = np.asarray(claimed)
    if claimed.shape != tuple(out_shape):
        return Verdict(False, math.inf, 0.0, reps, dims)
    dtype = np.dtype(out_dtype)
    R = vectors(seed, out_shape, reps)
    ones = [np.ones((1, n)) for n in out_shape]
    rhs = None
    lhs = None
    mag = 0.0
    depth_rhs = depth_mag = n_terms = factors = per_elem = 0
    for work, xs in calls:
        if lhs is None:
            letters = _ROW + work.out_letters
            spec = ",".join([letters, *(_REP + c for c in letters)]) + "->" + _REP
            lhs = np.einsum(spec, np.asarray(claimed, np.result_type(claimed, 1.0)), *R,
                            optimize=True)  # fmt: skip
            rhs = np.zeros(reps, dtype=lhs.dtype)
        for t in work.terms:
            if len(t.out) == 0:
                continue
            n_terms += 1
            val, dep, k, nf = _term_projection(work, t, xs, R, False)
            rhs = rhs + val
            m, depm, _, _ = _term_projection(work, t, xs, ones, True)
            mag += float(np.real(m[0]))
            depth_rhs, depth_mag = max(depth_rhs, dep), max(depth_mag, depm)
            per_elem += k
            factors = max(factors, nf)
    if lhs is None or rhs is None:
        lhs = rhs = np.zeros(reps)
    if not math.isfinite(mag):
        return Verdict(False, math.nan, math.nan, reps, dims, exact=True)
    tol = _entries_tolerance(
        mag, dims, dtype, per_elem, factors, math.prod(out_shape), depth_rhs, depth_mag, n_terms
    )
    diff = float(np.max(np.abs(lhs - rhs))) if reps else 0.0
    return Verdict(bool(diff <= tol), diff, tol, reps, dims)


def _entries_tolerance(
    mag: float,
    dims: int,
    dtype: np.dtype,
    per_elem: int,
    factors: int,
    depth_lhs: int,
    depth_rhs: int,
    depth_mag: int,
    n_terms: int,
) -> float:
    """The rounding bound a projection over stored entries accepts within (module
    docstring): ``mag`` the projection of the absolute values on all-ones vectors, ``dims``
    the output dimensions, ``per_elem`` the products summed into one output element,
    ``factors`` per product, and the additions any product goes through on the left side,
    the right side and in ``mag``."""
    cplx = 2 if dtype.kind == "c" else 1
    p = cplx * (factors + 1)
    D = cplx * dims
    g_a = _gamma(per_elem + p, _unit_roundoff(dtype))
    g_l = _gamma(depth_lhs + D, U64)
    g_r = _gamma(depth_rhs + p + D + n_terms, U64)
    g_m = _gamma(depth_mag + factors + 1 + n_terms, U64)
    bound = mag * 2.0**dims / (1.0 - g_m) if g_m < 1 else math.inf
    return ((1 + g_a) * (1 + g_l) - 1 + g_r) * bound


@dataclass(frozen=True)
class EntryChecksum:
    """``c = r^T A`` of a unit's leaves over stored entries, for :func:`checksum_verdict`.

    ``R``: the rows' random vectors (``reps x rows``). ``parts``: per term, the step it
    runs in, its vector operand, ``c`` (``reps x`` the operand's rows) and ``|A|``'s column
    sums (the magnitude bound's ``1^T |A|``). ``depth``: the additions of ``c``'s column
    sums; ``per_elem`` and ``factors``: the claimed result's counts (as the projection's)."""

    R: np.ndarray
    parts: tuple[tuple[int, str, np.ndarray, np.ndarray], ...]
    depth: int
    per_elem: int
    factors: int

    @property
    def reps(self) -> int:
        return int(self.R.shape[0])


def _checksum_term(t: Any) -> bool:
    """An SpMV-shaped term: sparse factors times one vector, into output rows."""
    return len(t.dense) == 1 and t.dense[0][2] == "" and len(t.out) > 0


def entry_checksum(
    steps: Sequence[tuple[int, Any, Mapping[str, np.ndarray]]],
    rows: int,
    seed: int,
    reps: int | None = None,
) -> EntryChecksum | None:
    """``c = r^T A`` per term of a unit whose leaves over stored entries all add sparse
    values times one vector into its output rows (``steps``: ``(step, EntryWork,
    operands)``), or None when one does not (another shape, dense loops, views of held
    buffers): those are checked by :func:`project_entries` or by recomputing. ``rows``: the
    unit's output rows. Costs one pass over the entries; :func:`checksum_verdict` then
    costs the rows and the vector's rows."""
    reps = default_repeats(1) if reps is None else int(reps)
    R = vectors(seed, (rows,), reps)[0]
    parts = []
    depth = per_elem = factors = 0
    for step, work, xs in steps:
        if work.out_letters or work.views or work.out_view is not None:
            return None
        for t in work.terms:
            if not len(t.out):
                continue
            if not _checksum_term(t):
                return None
            name, idx, _ = t.dense[0]
            v = None
            for sname, sidx in t.sparse:
                vals = xs[sname] if sidx is None else xs[sname][sidx]
                v = vals if v is None else v * vals
            n = len(t.out)
            if v is None:
                v = np.ones(n)
            v = np.asarray(v)
            if v.dtype.kind not in "fiu" or np.asarray(xs[name]).dtype.kind == "c":
                return None  # complex: the general projection
            v = v.astype(np.float64) * float(t.coeff)
            width = int(np.asarray(xs[name]).shape[0])
            out = np.asarray(t.out)
            idx = np.asarray(idx)
            c = np.stack([np.bincount(idx, v * R[q, out], width) for q in range(reps)])
            cabs = np.bincount(idx, np.abs(v), width)
            parts.append((step, name, c, cabs))
            # c's additions: an entry's column sum (the blocked dot's are added per check)
            depth = max(depth, int(np.bincount(idx, minlength=width).max()))
            per_elem += int(np.bincount(out).max())
            factors = max(factors, len(t.sparse) + 1 + (t.coeff != 1))
    if not parts:
        return None
    return EntryChecksum(R, tuple(parts), depth, per_elem, factors)


def checksum_verdict(
    cs: EntryChecksum,
    claimed: np.ndarray,
    xs_by_step: Mapping[int, Mapping[str, np.ndarray]],
    out_dtype: np.dtype,
) -> Verdict | None:
    """Check ``claimed`` (the unit's output rows) against ``c . x`` for this run's vector
    operands: ``r . claimed == sum_terms c . x`` within the projection's rounding bound.
    None when the magnitude bound is not finite (an ``inf`` or ``nan`` operand): the caller
    recomputes, whose rule then asks for the same bits."""
    claimed = np.asarray(claimed)
    if claimed.shape != (cs.R.shape[1],) or claimed.dtype.kind == "c":
        return Verdict(False, math.inf, 0.0, cs.reps, 1)
    with np.errstate(invalid="ignore", over="ignore"):  # a nan claimed is a failed check
        lhs, depth_lhs = _blocked_sum(cs.R * claimed.astype(np.float64))
        rhs = np.zeros(cs.reps)
        mag = 0.0
        depth = 0
        for step, name, c, cabs in cs.parts:
            x = np.asarray(xs_by_step[step][name], np.float64).reshape(-1)
            got, d = _blocked_sum(c * x)
            m, _ = _blocked_sum(cabs * np.abs(x))
            rhs += got
            mag += float(m)
            depth = max(depth, cs.depth + d)
        if not math.isfinite(mag):
            return None
    n_terms = len(cs.parts)
    tol = _entries_tolerance(
        mag, 1, np.dtype(out_dtype), cs.per_elem, cs.factors, depth_lhs, depth, depth, n_terms
    )
    with np.errstate(invalid="ignore"):
        diff = float(np.max(np.abs(lhs - rhs)))
    return Verdict(bool(diff <= tol), diff, tol, cs.reps, 1)


def _blocked_sum(p: np.ndarray) -> tuple[np.ndarray, int]:
    """Sums over the last axis of ``p`` in blocks of 8, then by pairs, level by level (zeros
    pad a level: they add exactly), and the additions any summand goes through: 7 plus
    ``ceil(log2(n / 8))``, in whatever order numpy adds a block. One
    long dot product in whatever order BLAS or numpy take would need a rounding bound of
    ``n`` additions: for a unit of 2.5 * 10^5 rows that hides an error ~10^4 times larger."""
    depth = 0
    n = p.shape[-1]
    if n >= 64:  # first in contiguous blocks of 8 (7 additions each): one fast pass
        m = -(-n // 8)
        if m * 8 != n:
            p = np.concatenate([p, np.zeros((*p.shape[:-1], m * 8 - n))], axis=-1)
        p = p.reshape(*p.shape[:-1], m, 8).sum(axis=-1)
        depth = 7
    while p.shape[-1] > 1:
        if p.shape[-1] % 2:
            p = np.concatenate([p, np.zeros((*p.shape[:-1], 1))], axis=-1)
        p = p[..., 0::2] + p[..., 1::2]
        depth += 1
    return p[..., 0] if p.shape[-1] else np.zeros(p.shape[:-1]), depth


__all__ = [
    "TARGET_BITS",
    "VALUE_BITS",
    "EntryChecksum",
    "Verdict",
    "checksum_verdict",
    "default_repeats",
    "entry_checksum",
    "false_accept_bound",
    "project",
    "project_entries",
    "recompute_cheaper",
    "recompute_verdict",
    "vectors",
]
