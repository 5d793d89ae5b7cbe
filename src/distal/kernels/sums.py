"""How distal adds up a reduction: one order, as accurate as numpy's pairwise sums.

A naive running sum of ``n`` terms has an error bound that grows with ``n`` (in float32,
10^7 times 0.1 came out 7.6 ppm low); numpy's ``sum`` adds pairwise (blocks of 128
elements, their totals in a binary tree), so its error grows with ``log n``. distal's
reductions follow one rule, whichever code computes them, so a value has the same bits
on every runtime (the local runtime's threads, an MPI rank, a Dask worker):

* **Sums of one operand** (``x.sum()``, a leaf reducing one block over some axes) are
  numpy's own ``sum`` over the block (pairwise along the contiguous axis), accumulated
  in float64 (complex128) for float16 / float32 (complex64) blocks and rounded once at
  the end (:func:`total`).
* **Inner products** over a contiguous range of ``n`` elements (a fused pass's ``r @ r``,
  a block's dot, an SpMV's ``p . A p``) add in **blocks** of :data:`BLOCK` consecutive
  elements, counted from the start of the range: inside a block, element ``i`` goes to
  partial sum ``i % 4`` (the ``n % 4`` elements past the last multiple of 4 of the range
  go to the first), and the block's total is ``(s0 + s1) + (s2 + s3)``. The block totals
  are added **pairwise**: block ``c`` (counting from 1) is added to the total of the
  ``2**t`` blocks before it for every trailing zero bit ``t`` of ``c`` (:func:`push`, a
  binary counter), and what is left, a list of perfect trees of decreasing size, is added
  from the right (:func:`fold`). Float32 / complex64 terms are accumulated in float64 /
  complex128. The order depends only on ``n``: :func:`dot`'s compiled loop, the fused
  element-wise pass that accumulates the same inner product while it computes its
  members (:mod:`distal.kernels.fused`) and the SpMV kernel that adds ``w[s] * y[s]`` as
  it stores each row (:mod:`distal.kernels.spmv_dot`) give the same bits.
* **Per-processor partials** are added in processor order by the plan (a reduction's
  partial sums) or by the fused set's caller: a fixed order too.

The error bound of the blocked order is that of numpy's pairwise sum: about
``(BLOCK / 4 + log2(n / BLOCK)) * eps`` relative to the sum of magnitudes.

Matrix products (GEMM, GEMV) are BLAS's, as numpy's ``@`` is; float64 inner products of
fewer than ``MIN_SIZE`` elements are numpy's ``dot`` (BLAS), whose small-``n`` error is
already at rounding level, since a compiled call would cost more than the product.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

#: consecutive elements an inner product adds before a block total joins the pairwise tree
#: (a multiple of 4; numpy's pairwise sum uses blocks of 128 as well)
BLOCK = 128
#: elements of a float64 inner product from which the compiled loop runs (below, numpy's
#: ``dot`` costs less than the loop's dispatch); the fused passes share it
MIN_SIZE = 1 << 16

_F64 = np.dtype(np.float64)
_LOCK = threading.Lock()

#: narrow dtypes and the dtype their sums accumulate in
_WIDE = {
    np.dtype(np.float16): _F64,
    np.dtype(np.float32): _F64,
    np.dtype(np.complex64): np.dtype(np.complex128),
}


def accumulator(dtype: Any) -> np.dtype:
    """The dtype a sum of ``dtype`` values accumulates in (float64 for float16/32,
    complex128 for complex64, the dtype itself otherwise)."""
    dt = np.dtype(dtype)
    return _WIDE.get(dt, dt)


def total(x: np.ndarray, axis: Any = None) -> Any:
    """``x.sum(axis)`` in ``x``'s own dtype, added by numpy (pairwise) in the
    :func:`accumulator` dtype and rounded once: a float32 sum of 10^7 values is as good as
    float64 arithmetic makes it."""
    acc = accumulator(x.dtype)
    if acc == x.dtype or x.dtype.kind not in "fc":
        return np.sum(x, axis=axis, dtype=x.dtype if x.dtype.kind not in "fc" else None)
    r = np.sum(x, axis=axis, dtype=acc)
    return r.astype(x.dtype) if isinstance(r, np.ndarray) else x.dtype.type(r)


# -- the blocked pairwise inner product ------------------------------------------------------


def push(stack: np.ndarray, depth: int, count: int, t: Any) -> tuple[int, int]:
    """Add block total ``t`` to the pairwise tree held in ``stack[:depth]`` (``count``
    blocks so far): merged with the trees before it once per trailing zero bit of its
    number. Returns the new depth and count (compiled by numba where used in a loop)."""
    count += 1
    c = count
    while (c & 1) == 0:
        depth -= 1
        t = stack[depth] + t
        c >>= 1
    stack[depth] = t
    return depth + 1, count


def fold(stack: np.ndarray, depth: int, zero: Any) -> Any:
    """The total of the trees in ``stack[:depth]``, added from the right (the smallest,
    newest tree first)."""
    if depth == 0:
        return zero
    t = stack[depth - 1]
    for k in range(depth - 2, -1, -1):
        t = stack[k] + t
    return t


# the names the loops call the helpers by (numba compiles them in: :func:`_relinked`)
_push, _fold = push, fold


def _dot_loop(a: np.ndarray, b: np.ndarray, zero: Any, stack: np.ndarray) -> Any:
    """``sum(a * b)`` in the blocked pairwise order (module docstring); ``zero`` is the
    accumulator type's zero, ``stack`` scratch space of 64 entries of it. Full blocks run
    an inner loop of constant length (it vectorizes as a running sum does), the last,
    partial block after them."""
    n = a.shape[0]
    m = n - n % 4
    full = n // BLOCK
    depth = 0
    count = 0
    for k in range(full):
        b0 = k * BLOCK
        s0 = s1 = s2 = s3 = zero
        for j in range(0, BLOCK, 4):
            i = b0 + j
            s0 += a[i] * b[i]
            s1 += a[i + 1] * b[i + 1]
            s2 += a[i + 2] * b[i + 2]
            s3 += a[i + 3] * b[i + 3]
        depth, count = _push(stack, depth, count, (s0 + s1) + (s2 + s3))
    b0 = full * BLOCK
    if b0 < n:
        s0 = s1 = s2 = s3 = zero
        for i in range(b0, m, 4):
            s0 += a[i] * b[i]
            s1 += a[i + 1] * b[i + 1]
            s2 += a[i + 2] * b[i + 2]
            s3 += a[i + 3] * b[i + 3]
        for i in range(max(m, b0), n):
            s0 += a[i] * b[i]
        depth, count = _push(stack, depth, count, (s0 + s1) + (s2 + s3))
    return _fold(stack, depth, zero)


_COMPILED: dict[str, Any] = {}


def compiled(name: str) -> Any:
    """The numba-compiled :func:`push`, :func:`fold` or dot loop (None without numba)."""
    got = _COMPILED.get(name, False)
    if got is not False:
        return got
    with _LOCK:
        if not _COMPILED:
            try:
                import numba
            except ImportError:
                _COMPILED.update(push=None, fold=None, dot=None)
            else:
                jit = numba.njit(nogil=True, error_model="numpy")
                _COMPILED["push"] = jit(push)
                _COMPILED["fold"] = jit(fold)
                # the loop calls the compiled helpers through its globals
                _COMPILED["dot"] = jit(_relinked(_dot_loop))
    return _COMPILED[name]


def _relinked(fn: Any) -> Any:
    """``fn`` with ``_push`` and ``_fold`` bound to the compiled helpers."""
    import types

    g = dict(fn.__globals__)
    g["_push"], g["_fold"] = _COMPILED["push"], _COMPILED["fold"]
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__)


def _zero(dtype: np.dtype) -> Any:
    return np.complex128(0) if dtype.kind == "c" else np.float64(0)


def compiled_dot(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether :func:`dot` takes its compiled loop for ``a`` and ``b`` (and so whether a
    product's leaf computing the same sum, :mod:`distal.kernels.spmv_dot`, gives its bits):
    C-contiguous 1-D float64 arrays of one shape, :data:`MIN_SIZE` elements or more."""
    return (
        a.size >= MIN_SIZE
        and a.dtype == _F64
        and b.dtype == _F64
        and a.ndim == 1
        and a.shape == b.shape
        and a.flags.c_contiguous
        and b.flags.c_contiguous
    )


def dot(a: np.ndarray, b: np.ndarray) -> Any:
    """``numpy.dot`` of two 1-D arrays of one shape, in the blocked pairwise order.

    Float64 (complex128) arrays of :data:`MIN_SIZE` elements or more run the compiled loop;
    smaller float64 ones numpy's ``dot``. Float16 / float32 / complex64 ones of any size
    are accumulated in float64 / complex128 (the loop, or numpy's ``dot`` of the widened
    arrays when small) and rounded once, as numpy's dtype of the result. Other dtypes
    (integers, booleans, mixed) are numpy's ``dot``."""
    dt = np.result_type(a.dtype, b.dtype)
    if dt.kind not in "fc" or a.ndim != 1 or a.shape != b.shape:
        return np.dot(a, b)
    acc = accumulator(dt)
    small = a.size < MIN_SIZE
    if acc == dt and small:  # (a strided view as its contiguous copy: BLAS's order is)
        return np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
    loop = None if small or dt == np.float16 else compiled("dot")
    if loop is None:
        if acc == dt:
            return np.dot(a, b) if small else _blocked_numpy(a, b, acc)
        return dt.type(np.dot(a.astype(acc), b.astype(acc)) if small else _blocked_numpy(a, b, acc))
    a_ = np.ascontiguousarray(a, dtype=None if a.dtype == dt else dt)
    b_ = np.ascontiguousarray(b, dtype=None if b.dtype == dt else dt)
    r = loop(a_, b_, _zero(acc), np.empty(64, acc))
    return dt.type(r)


def _blocked_numpy(a: np.ndarray, b: np.ndarray, acc: np.dtype) -> Any:
    """Without numba: block dots of :data:`BLOCK` elements (numpy's einsum, in ``acc``),
    then numpy's pairwise sum of the block totals. Not the compiled loop's bits, but as
    accurate."""
    n = a.shape[0]
    full = n - n % BLOCK
    x, y = a.astype(acc, copy=False), b.astype(acc, copy=False)
    parts = np.einsum("ij,ij->i", x[:full].reshape(-1, BLOCK), y[:full].reshape(-1, BLOCK))
    tail = np.dot(x[full:], y[full:]) if full < n else acc.type(0)
    return np.sum(parts) + tail
