"""Leaf kernels for sparse iteration: one term of the statement on one processor.

The sparse lowering hands each processor its *entries* (the stored non-zeros of the
iteration pattern it owns) and, per term, flat index arrays. A term is evaluated as ::

    out[o[e], <out_subs>] += v[e] * prod_T X_T[idx_T[e], <subs_T>]      for every entry e,

summed over the letters that some operand has and the output does not; a letter of the
output that no operand has receives the same contribution at each of its indices.

An iterative solver runs the same pattern many times with new values, so a
:class:`TermLeaf` does everything that depends only on the pattern once, when it is
built: it sorts the entries by output row (a stable permutation, kept, when ``o`` is not
already nondecreasing), cuts them into segments of equal output row, checks the index
ranges, and picks an implementation from the shape of the term:

* ``direct``: no operands and every output row met once: ``out[o] += v`` (a numba loop
  where ``out`` is contiguous, a slice where ``o`` is a run).
* ``numba-segsum``: no operands, output rows repeated: a segment sum.
* ``csr-spmv`` / ``csr-spmm``: one operand with the output's letters (SpMV, SpMM, SpTTV):
  a CSR row loop in numba, one accumulator row per output row. Against scipy's
  ``csr @ dense`` (``benchmarks/sparse_leaf.py``: 1 M rows, 4 M entries, one thread) it
  is on par for SpMV and 1.6x faster for SpMM with 32 columns. Both release the GIL
  (scipy's sparsetools do too), so two processors of the local runtime (threads of one
  process) can use two cores either way; the loop wins on speed, and it adds into
  ``out`` in place where scipy returns a new output-sized array to be added, needs no
  operand row count when the leaf is built, and shares the prepared segments with the
  other kernels.
* ``numba-mttkrp``: two operands, both with the output's letters:
  ``out[o, l] += v * X[i, l] * Y[j, l]``.
* ``numba-sddmm``: two operands with the same letters, scalar output:
  ``out[o] += v * sum_j X[i, j] * Y[k, j]``.
* ``einsum``: anything else, in numpy: entries go in chunks (bounding the gathered rows'
  memory), each chunk's operand rows are gathered, ``np.einsum`` forms the per-entry
  contribution, and ``np.add.reduceat`` sums it per output row.

The numba kernels are compiled on first use (``nogil=True``: they release the GIL;
``cache=True``: the machine code is kept on disk across processes), once per dtype; numba
and scipy are never imported by ``import distal``. Every loop runs in a fixed order, so the
same inputs give bit-identical outputs on every call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from distal.errors import InputError
from distal.kernels.own_rows import OwnSplit, spmv_split_kernel
from distal.kernels.spmv_dot import spmv_split_dot_kernel

_EXTRA = "pip install 'distal[sparse]'"
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

#: an empty list of mixed rows (:mod:`distal.kernels.spmv_dot`)
_NO_ROWS = np.zeros(0, np.uint64)
#: the einsum path handles at most this many entries at a time
CHUNK_ENTRIES = 65536
#: ... and at most about this many gathered elements per operand and chunk
CHUNK_ELEMENTS = 1 << 22

_JIT_LOCK = threading.Lock()
_JITTED: dict[str, Any] = {}


# ---------------------------------------------------------------------------------------
# numba kernels. Plain functions here; compiled by _jit on first use. Entries are in
# output-row order: segment s holds entries seg_ptr[s] .. seg_ptr[s+1]-1, all of output
# row seg_row[s]. Each segment is summed in entry order into an accumulator, which is
# then added to the output row.
# ---------------------------------------------------------------------------------------

#: every index the kernels read from an array is cast to this before it indexes: numba
#: must otherwise assume a signed index may be negative and wrap it around (a test and two
#: conditional moves per access). The leaves' own index arrays are unsigned already; a
#: signed one (scipy's int32 ``indices``, read in place) cost up to 3.5x on a block whose
#: data sit in the cache (2.5 M Laplacian entries: 7.0 against 1.9 ms). The indices are
#: the bound plan's, checked in range when they were made, so none is negative.
_u = np.uintp


def _segsum_kernel(
    seg_ptr: np.ndarray, seg_row: np.ndarray, v: np.ndarray, out: np.ndarray, zero: complex
) -> None:
    w = out.shape[1]
    for s in range(seg_row.shape[0]):
        a = zero
        for e in range(_u(seg_ptr[s]), _u(seg_ptr[s + 1])):
            a += v[e]
        r = _u(seg_row[s])
        for k in range(w):
            out[r, k] += a


def _scatter_kernel(o: np.ndarray, v: np.ndarray, out: np.ndarray) -> None:
    # out[o[e], :] += v[e] with distinct rows o (each entry its own output row): numpy's
    # ``out[o] += v`` widens the indices and gathers, adds and scatters in three passes
    w = out.shape[1]
    for e in range(o.shape[0]):
        r = _u(o[e])
        a = v[e]
        for k in range(w):
            out[r, k] += a


def _spmv_kernel(
    seg_ptr: np.ndarray,
    seg_row: np.ndarray,
    idx: np.ndarray,
    v: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
    zero: complex,
) -> None:
    for s in range(seg_row.shape[0]):
        a = zero
        for e in range(_u(seg_ptr[s]), _u(seg_ptr[s + 1])):
            a += v[e] * x[_u(idx[e])]
        out[_u(seg_row[s])] += a


def _spmv_rows_kernel(
    seg_ptr: np.ndarray,
    idx: np.ndarray,
    v: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
    zero: complex,
    store: bool,
) -> None:
    # _spmv_kernel where segment s is output row s of ``out`` (consecutive rows, ``out``
    # the view from the first): CSR itself, without the per-row index read. ``store``:
    # ``out`` holds nothing yet (not even zeros) and every row is written as ``zero + a``,
    # the bits adding into zeros gives (-0.0 included), without the zeroing pass
    for s in range(out.shape[0]):
        a = zero
        for e in range(_u(seg_ptr[s]), _u(seg_ptr[s + 1])):
            a += v[e] * x[_u(idx[e])]
        out[s] = (zero if store else out[s]) + a


def _spmm_kernel(
    seg_ptr: np.ndarray,
    seg_row: np.ndarray,
    idx: np.ndarray,
    v: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
    acc: np.ndarray,
    store: bool,
) -> None:
    # ``store``: the segments are every row of ``out`` (rows without entries included) and
    # ``out`` holds nothing yet: each row is written as ``0 + acc``, the bits adding into
    # zeros gives, without the zeroing pass
    w = out.shape[1]
    for s in range(seg_row.shape[0]):
        for k in range(w):
            acc[k] = 0
        for e in range(_u(seg_ptr[s]), _u(seg_ptr[s + 1])):
            ve = v[e]
            i = _u(idx[e])
            for k in range(w):
                acc[k] += ve * x[i, k]
        r = _u(seg_row[s])
        if store:
            for k in range(w):
                out[r, k] = 0 + acc[k]
        else:
            for k in range(w):
                out[r, k] += acc[k]


def _mttkrp_kernel(
    seg_ptr: np.ndarray,
    seg_row: np.ndarray,
    i1: np.ndarray,
    i2: np.ndarray,
    v: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    out: np.ndarray,
    acc: np.ndarray,
) -> None:
    w = out.shape[1]
    for s in range(seg_row.shape[0]):
        for k in range(w):
            acc[k] = 0
        for e in range(_u(seg_ptr[s]), _u(seg_ptr[s + 1])):
            ve = v[e]
            a = _u(i1[e])
            b = _u(i2[e])
            for k in range(w):
                acc[k] += ve * x[a, k] * y[b, k]
        r = _u(seg_row[s])
        for k in range(w):
            out[r, k] += acc[k]


def _sddmm_kernel(
    seg_ptr: np.ndarray,
    seg_row: np.ndarray,
    i1: np.ndarray,
    i2: np.ndarray,
    v: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    out: np.ndarray,
    zero: complex,
) -> None:
    # compiled with fastmath={"reassoc"} (and only that flag): LLVM may then split the dot
    # product into vector lanes. The order is fixed in the compiled code, so every call
    # gives the same bits; the lanes make the kernel twice as fast (more row gathers in
    # flight), see benchmarks/sparse_leaf.py.
    w = x.shape[1]
    for s in range(seg_row.shape[0]):
        a = zero
        for e in range(_u(seg_ptr[s]), _u(seg_ptr[s + 1])):
            p = _u(i1[e])
            q = _u(i2[e])
            d = zero
            for k in range(w):
                d += x[p, k] * y[q, k]
            a += v[e] * d
        out[_u(seg_row[s])] += a


#: name -> (function, extra numba options)
_KERNELS: dict[str, tuple[Callable[..., None], dict[str, Any]]] = {
    "segsum": (_segsum_kernel, {}),
    "scatter": (_scatter_kernel, {}),
    "spmv": (_spmv_kernel, {}),
    "spmv_rows": (_spmv_rows_kernel, {}),
    "spmv_split": (spmv_split_kernel, {}),
    "spmv_split_dot": (spmv_split_dot_kernel, {}),
    "spmm": (_spmm_kernel, {}),
    "mttkrp": (_mttkrp_kernel, {}),
    "sddmm": (_sddmm_kernel, {"fastmath": {"reassoc"}}),
}


def _numba() -> Any:
    try:
        import numba
    except ImportError as e:  # pragma: no cover - numba is in the sparse extra
        raise InputError(f"the sparse leaf kernels need numba: {_EXTRA}") from e
    return numba


def _has_numba() -> bool:
    """Whether numba imports (paths that can do without it ask first)."""
    try:
        _numba()
    except InputError:
        return False
    return True


def _jit(name: str) -> Any:
    """The compiled kernel ``name`` (decorated on first use, so importing this module needs
    no numba; numba compiles once per argument types and caches the code on disk)."""
    f = _JITTED.get(name)
    if f is None:
        with _JIT_LOCK:
            f = _JITTED.get(name)
            if f is None:
                fn, options = _KERNELS[name]
                f = _JITTED[name] = _numba().njit(nogil=True, cache=True, **options)(fn)
    return f


# ---------------------------------------------------------------------------------------


def _index_array(a: Any, n: int | None, what: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise InputError(f"{what} must be a 1-D integer array, got shape {arr.shape} {arr.dtype}")
    if n is not None and arr.shape[0] != n:
        raise InputError(f"{what} has {arr.shape[0]} entries, o has {n}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _segments(o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seg_ptr, seg_row) of a nondecreasing ``o``: the runs of equal output row."""
    n = o.shape[0]
    if n == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(o[1:] != o[:-1]) + 1
    seg_ptr = np.empty(starts.shape[0] + 2, np.int64)
    seg_ptr[0] = 0
    seg_ptr[1:-1] = starts
    seg_ptr[-1] = n
    return seg_ptr, o[seg_ptr[:-1]]


class TermLeaf:
    """One term on one processor, with its index structure prepared once (bind time) and its
    values supplied at every run (iterative solvers run the same pattern many times).

    Args:
        o: the output row of each entry, in ``[0, out_rows)``; may repeat, need not be
            sorted.
        idx: per operand, the operand row each entry reads.
        subs: per operand, the letters of its dense dimensions after the row dimension.
        out_subs: the letters of the output's dimensions after the row dimension.
        out_rows: the output's number of rows.
        extents: the extent of every letter.

    Calling ``leaf(out, v, xs)`` adds the term to ``out`` in place: ``v`` holds the values
    of the entries (in the order of ``o``), ``xs[T]`` operand ``T`` with shape
    ``(rows_T, *[extents[c] for c in subs[T]])``, ``out`` the shape
    ``(out_rows, *[extents[c] for c in out_subs])``.
    """

    def __init__(
        self,
        o: np.ndarray,
        idx: Sequence[np.ndarray],
        subs: Sequence[str],
        out_subs: str,
        out_rows: int,
        extents: Mapping[str, int],
    ) -> None:
        o = _index_array(o, None, "o")
        n = self._n = int(o.shape[0])
        if len(idx) != len(subs):
            raise InputError(f"{len(idx)} index arrays for {len(subs)} operands")
        idx = [_index_array(a, n, f"idx[{t}]") for t, a in enumerate(idx)]
        subs = [str(s) for s in subs]
        out_subs = str(out_subs)
        if int(out_rows) != out_rows or out_rows < 0:
            raise InputError(f"out_rows must be a non-negative integer, got {out_rows!r}")
        self._out_rows = out_rows = int(out_rows)
        if len(set(out_subs)) != len(out_subs):
            raise InputError(f"out_subs {out_subs!r} repeats a letter")
        for c in set(out_subs).union(*subs):
            e = extents.get(c)
            if e is None:
                raise InputError(f"letter {c!r} has no extent")
            if int(e) != e or e < 0:
                raise InputError(f"extent of {c!r} must be a non-negative integer, got {e!r}")
        self._out_shape = (out_rows, *(int(extents[c]) for c in out_subs))
        self._x_dims = [tuple(int(extents[c]) for c in s) for s in subs]
        self._width = int(np.prod(self._out_shape[1:], dtype=np.int64))
        self._x_width = [int(np.prod(d, dtype=np.int64)) for d in self._x_dims]
        if n and (o.min() < 0 or o.max() >= out_rows):
            raise InputError(f"o has rows outside [0, {out_rows})")
        self._x_rows_needed = []
        for t, a in enumerate(idx):
            if n and a.min() < 0:
                raise InputError(f"idx[{t}] has negative rows")
            self._x_rows_needed.append(int(a.max()) + 1 if n else 0)

        # entries in output-row order
        self._perm: np.ndarray | None = None
        if n and not bool(np.all(o[1:] >= o[:-1])):
            perm = np.argsort(o, kind="stable")
            self._perm = perm
            o_sorted = o[perm]
            idx = [a[perm] for a in idx]
        else:
            o_sorted = o
        # Unsigned indices: numba then drops its negative-index wrap-around code from every
        # array access (a third faster SpMV). 32 bits for the per-entry rows when they fit:
        # the kernels stream them, so that halves their traffic; and for the segment bounds
        # when the entries fit (their widening is free; a road network's rows, 2.8 entries
        # each, ran 4 % faster on half the pointer bytes).
        self._itype = itype = (
            np.uint32 if max([out_rows, *self._x_rows_needed]) < 2**32 else np.uint64
        )
        self._o = o.astype(itype)
        self._idx = [a.astype(itype) for a in idx]
        seg_ptr, seg_row = _segments(o_sorted)
        ptype = np.uint32 if n < 2**32 else np.uint64
        self._seg_ptr, self._seg_row = seg_ptr.astype(ptype), seg_row.astype(itype)
        unique = self._seg_row.shape[0] == n
        #: the first output row when the segments are consecutive rows (a CSR row block:
        #: a row cut, or stored entries that split no row), else None
        self._row0: int | None = None
        #: (offset, whether a caller's 32-bit index array handed to a run at that offset
        #: equals ``_idx[0]``), None before the first (see ``__call__``)
        self._crd_ok: tuple[int, bool] | None = None
        #: the columns recoded to read the own block in place (:meth:`split_own`)
        self._split: OwnSplit | None = None
        if len(seg_row) and int(seg_row[-1]) - int(seg_row[0]) == len(seg_row) - 1:
            self._row0 = int(seg_row[0])

        distinct = all(len(set(s)) == len(s) for s in subs)
        if not subs:
            self._path = "direct" if unique else "numba-segsum"
        elif len(subs) == 1 and subs[0] == out_subs:
            self._path = "csr-spmv" if self._width == 1 else "csr-spmm"
        elif len(subs) == 2 and subs[0] == subs[1] == out_subs:
            self._path = "numba-mttkrp"
        elif len(subs) == 2 and subs[0] == subs[1] and out_subs == "" and distinct:
            self._path = "numba-sddmm"
        else:
            self._path = "einsum"
            self._prepare_einsum(subs, out_subs, o_sorted)
        #: for a store (:meth:`covers`): the rows kernel's pointer over every row of ``out``
        self._cover_ptr: np.ndarray | None = None
        if self._path in ("csr-spmv", "csr-spmm") and len(seg_row):
            if self._row0 == 0 and len(seg_row) == out_rows:
                self._cover_ptr = self._seg_ptr
            elif out_rows <= 2 * len(seg_row):
                # rows without entries (a road network's junctions with no street): written
                # as zeros too, so a block need not be zeroed first; at most twice the
                # segments' pointers (an add into a block keeps the segment loop, which
                # leaves such rows as they are: -0.0 stays -0.0)
                ptr = np.zeros(out_rows + 1, ptype)
                ptr[seg_row + 1] = np.diff(seg_ptr)
                np.cumsum(ptr, out=ptr)
                self._cover_ptr = ptr
        #: an SpMM's covering segments' rows: every row of ``out``
        self._cover_rows = (
            np.arange(out_rows, dtype=itype)
            if self._path == "csr-spmm" and self._cover_ptr is not None
            else None
        )

    def split_own(self, probe: np.ndarray | None, nown: int = 0) -> bool:
        """Read the processor's own vector rows in place from now on: its own block has
        ``nown`` rows, buffer row ``k`` holds own row ``probe[k]`` (-1: another's row),
        and each call passes the own block as ``own_x`` (:mod:`distal.kernels.own_rows`).
        False where this leaf cannot (not a row-ordered SpMV, or too many rows read
        both); ``probe`` None drops the split."""
        self._split = None
        if probe is None:
            return True
        if self._path != "csr-spmv" or self._perm is not None or self._x_dims[0] != ():
            return False
        if probe.shape[0] < self._x_rows_needed[0] or self._rows_ptr() is None:
            return False
        self._split = OwnSplit.make(self._idx[0], probe, nown, self._rows_ptr())
        return self._split is not None

    def _rows_ptr(self) -> np.ndarray | None:
        """The row pointer a split run uses: over every row of ``out`` where there is one,
        else over the consecutive segments from ``_row0``."""
        if self._cover_ptr is not None:
            return self._cover_ptr
        return self._seg_ptr if self._row0 is not None else None

    @property
    def path(self) -> str:
        """Which implementation runs the term (see the module docstring)."""
        return self._path

    @property
    def entries(self) -> int:
        """The number of entries."""
        return self._n

    def __repr__(self) -> str:
        return f"TermLeaf(path={self._path!r}, entries={self._n}, out={self._out_shape})"

    # -- the einsum path ------------------------------------------------------------------

    def _prepare_einsum(self, subs: list[str], out_subs: str, o_sorted: np.ndarray) -> None:
        letters: dict[str, str] = {}
        for c in "".join(subs) + out_subs:
            letters.setdefault(c, _LETTERS[len(letters) + 1])
        entry = _LETTERS[0]
        present = set("".join(subs))
        kept = "".join(letters[c] for c in out_subs if c in present)
        ins = ",".join([entry, *(entry + "".join(letters[c] for c in s) for s in subs)])
        self._spec = f"{ins}->{entry}{kept}"
        # the contribution's shape per entry, with 1 for the letters no operand has
        self._contrib_shape = tuple(
            self._out_shape[1 + k] if c in present else 1 for k, c in enumerate(out_subs)
        )
        self._optimize = len(subs) >= 2
        widest = max([*self._x_width, int(np.prod(self._contrib_shape, dtype=np.int64))])
        step = max(1, min(CHUNK_ENTRIES, CHUNK_ELEMENTS // max(1, widest)))
        # per chunk: (first, end, output rows, local segment starts or None when unique)
        self._chunks: list[tuple[int, int, np.ndarray, np.ndarray | None]] = []
        for a in range(0, self._n, step):
            b = min(self._n, a + step)
            ptr, rows = _segments(o_sorted[a:b])
            starts = None if rows.shape[0] == b - a else ptr[:-1]
            self._chunks.append((a, b, rows.astype(self._itype), starts))

    def _run_einsum(self, out: np.ndarray, v: np.ndarray, xs: Sequence[np.ndarray]) -> None:
        for a, b, rows, starts in self._chunks:
            ops = [np.take(x, i[a:b], axis=0) for x, i in zip(xs, self._idx, strict=True)]
            c = np.einsum(self._spec, v[a:b], *ops, optimize=self._optimize)
            c = c.reshape((b - a, *self._contrib_shape))
            if starts is not None:
                c = np.add.reduceat(c, starts, axis=0)
            out[rows] += c

    # -- running ----------------------------------------------------------------------------

    def _check(self, out: np.ndarray, v: np.ndarray, xs: Sequence[np.ndarray]) -> Any:
        """The dtype the kernels compute in (out's: the inputs are cast to it, which must not
        lose their kind, e.g. complex to real), after checking every shape."""
        if not isinstance(out, np.ndarray) or out.shape != self._out_shape:
            got = getattr(out, "shape", type(out).__name__)
            raise InputError(f"out must have shape {self._out_shape}, got {got}")
        dt = out.dtype
        if dt.kind not in "iufc":
            raise InputError(f"out must be a numeric array, got {dt}")
        if v.shape != (self._n,):
            raise InputError(f"v must have shape ({self._n},), got {v.shape}")
        if len(xs) != len(self._idx):
            raise InputError(f"{len(xs)} operands given, the term has {len(self._idx)}")
        for t, x in enumerate(xs):
            if x.ndim != 1 + len(self._x_dims[t]) or x.shape[1:] != self._x_dims[t]:
                raise InputError(
                    f"operand {t} must have shape (rows, *{self._x_dims[t]}), got {x.shape}"
                )
            if x.shape[0] < self._x_rows_needed[t]:
                raise InputError(
                    f"operand {t} has {x.shape[0]} rows; the entries read row "
                    f"{self._x_rows_needed[t] - 1}"
                )
        for name, a in [("v", v), *((f"operand {t}", x) for t, x in enumerate(xs))]:
            if a.dtype.kind not in "biufc" or not np.can_cast(a.dtype, dt, "same_kind"):
                raise InputError(f"{name} is {a.dtype}, which out ({dt}) cannot hold")
        return dt

    def __call__(
        self,
        out: np.ndarray,
        v: np.ndarray,
        xs: Sequence[np.ndarray],
        crd: tuple[np.ndarray, np.ndarray | None, int] | None = None,
        store: bool = False,
        own_x: np.ndarray | None = None,
        dot_with: np.ndarray | None = None,
    ) -> float | None:
        """Add the term, with values ``v`` and operands ``xs``, to ``out`` in place
        (``store``, where :meth:`covers` says so: write it, ``out`` not zeroed first).

        ``own_x``: after :meth:`split_own`, the processor's own block of the vector, whose
        rows the buffer ``xs[0]`` does not hold (the caller skipped copying them).

        ``dot_with``: a float64 vector as long as ``out`` has rows; where the product
        stores every row of a float64 ``out``, it also returns ``dot_with . out`` in
        :func:`distal.kernels.fused.dot`'s order (:mod:`distal.kernels.spmv_dot`), else
        None (and the caller computes it the usual way). Otherwise the call returns None.

        ``crd``: for an SpMV, ``(cols, whole, lo)``: ``cols`` the entries' global columns
        in an array of the caller's (a scipy matrix's 32-bit ``indices``, whose pattern
        the caller's run just found to be the bound one), ``whole`` the vector as the
        caller gave it whole and ``lo`` the first row of ``xs[0]`` in it (``whole`` None:
        ``xs[0]`` is read by global rows already). Where ``cols - lo`` are this leaf's
        own columns the loop streams ``cols`` over ``whole`` instead of its copy over the
        buffer (the same values in the same order: the same bits), which a run that has
        just hashed the caller's arrays would otherwise read cold. Checked on first use
        (then each run's pattern check vouches for it); ignored where not."""
        v = np.asarray(v)
        xs = [np.asarray(x) for x in xs]
        dt = self._check(out, v, xs)
        if store and not self.covers(out):  # (a caller's mistake: zero, then add)
            out.fill(0)
            store = False
        if self._n == 0 or out.size == 0:
            return None
        v = np.ascontiguousarray(v, dtype=dt)
        xs = [np.ascontiguousarray(x, dtype=dt) for x in xs]
        if self._path == "direct":
            o, shape = self._o, (self._n,) + (1,) * (out.ndim - 1)
            if self._perm is None and self._n and int(o[-1]) - int(o[0]) == self._n - 1:
                out[int(o[0]) : int(o[0]) + self._n] += v.reshape(shape)  # sorted, distinct: a run
            elif out.flags.c_contiguous and _has_numba():
                _jit("scatter")(o, v, out.reshape(self._out_rows, self._width))
            else:  # (numpy: three passes, but this path needs no numba)
                out[o] += v.reshape(shape)
            return None
        if self._perm is not None:
            v = v[self._perm]
        if self._path == "einsum":
            self._run_einsum(out, v, xs)
            return None
        idx = None
        if crd is not None:
            cols, whole, lo = crd
            # the whole vector only as it is (a cast or copy of it would cost a pass a run);
            # a buffer without the own rows only through the whole vector
            usable = (whole is None and own_x is None) or (
                whole is not None and whole.dtype == dt and whole.flags.c_contiguous
            )
            idx = self._own_crd(cols, lo) if usable else None
            if idx is not None and whole is not None:
                xs, own_x = [whole], None
        if own_x is not None:
            if self._split is None:
                raise InputError("own_x given to a leaf without split_own")
            own_x = np.ascontiguousarray(own_x, dtype=dt).reshape(-1)
            if own_x.shape[0] != self._split.nown:
                raise InputError(f"own_x has {own_x.shape[0]} rows, the split {self._split.nown}")
        if (
            dot_with is not None
            and store
            and idx is None
            and dt == np.float64
            and self._path == "csr-spmv"
            and self._cover_ptr is not None
            and isinstance(dot_with, np.ndarray)
            and dot_with.dtype == np.float64
            and dot_with.shape == (self._out_rows,)
            and dot_with.flags.c_contiguous
        ):  # (covers(out) held: store is still set)
            return self._run_dot(out.reshape(self._out_rows), v, xs[0], own_x, dot_with)
        if out.flags.c_contiguous:
            self._run_numba(out, v, xs, idx, store, own_x)
        else:  # the kernels write through a flat view: give them one, then add
            tmp = np.zeros(out.shape, dt)
            self._run_numba(tmp, v, xs, idx, False, own_x)
            out += tmp
        return None

    def _run_dot(
        self,
        flat: np.ndarray,
        v: np.ndarray,
        x: np.ndarray,
        own_x: np.ndarray | None,
        w: np.ndarray,
    ) -> float:
        """The covering SpMV storing every row of ``flat``, returning ``w . flat``."""
        x = x.reshape(x.shape[0])
        split = self._split if own_x is not None else None
        if split is not None:
            idx, xo, nown, mixed = split.idx, own_x, split.nown, split.mixed
        else:  # one vector: all of it "own", no row reading both
            idx, xo, nown, mixed = self._idx[0], x, x.shape[0], _NO_ROWS
        f = _jit("spmv_split_dot")
        zero = flat.dtype.type(0)
        return float(f(self._cover_ptr, idx, v, xo, x, np.uintp(nown), mixed, flat, w, zero))

    def covers(self, out: np.ndarray) -> bool:
        """Whether a call writes every element of ``out``: an SpMV's or SpMM's rows from
        ``out``'s first to its last (rows without entries written as zeros, where they are
        at most half of them), into a C-contiguous ``out``. Such a call may store rather
        than add, and ``out`` need not be zeroed."""
        return (
            self._path in ("csr-spmv", "csr-spmm")
            and self._cover_ptr is not None
            and self._out_rows * self._width == out.size
            and out.flags.c_contiguous
        )

    def _own_crd(self, crd: np.ndarray, lo: int = 0) -> np.ndarray | None:
        """``crd`` (global columns) as the kernels read columns (unsigned), where ``crd -
        lo`` are this leaf's own columns; None where it cannot stand for them."""
        if self._path != "csr-spmv" or self._perm is not None or self._itype != np.uint32:
            return None
        if crd.dtype != np.int32 or crd.shape != self._idx[0].shape:
            return None
        if not crd.flags.c_contiguous:
            return None
        if self._crd_ok is None or self._crd_ok[0] != lo:  # the mapping of entries is ours
            same = np.array_equal(crd, self._idx[0].astype(np.int64) + lo)
            self._crd_ok = (lo, bool(same))
        return crd.view(np.uint32) if self._crd_ok[1] else None

    def _run_numba(
        self,
        out: np.ndarray,
        v: np.ndarray,
        xs: list[np.ndarray],
        crd: np.ndarray | None = None,
        store: bool = False,
        own_x: np.ndarray | None = None,
    ) -> None:
        path, ptr, rows, w = self._path, self._seg_ptr, self._seg_row, self._width
        zero = out.dtype.type(0)
        if path == "numba-segsum":
            _jit("segsum")(ptr, rows, v, out.reshape(self._out_rows, w), zero)
        elif path == "csr-spmv":
            x = xs[0].reshape(xs[0].shape[0])
            flat = out.reshape(self._out_rows)
            idx = self._idx[0] if crd is None else crd
            split = self._split if own_x is not None else None
            if split is not None:  # own rows from own_x, the others from the buffer
                sptr, row0 = self._rows_ptr(), self._row0 or 0
                block = flat if sptr is self._cover_ptr else flat[row0 : row0 + len(rows)]
                _jit("spmv_split")(sptr, split.idx, v, own_x, x, np.uintp(split.nown),
                                   split.mixed, block, zero, store)  # fmt: skip
            elif store and self._cover_ptr is not None:
                _jit("spmv_rows")(self._cover_ptr, idx, v, x, flat, zero, True)
            elif self._row0 is not None:
                block = flat[self._row0 : self._row0 + len(rows)]
                _jit("spmv_rows")(ptr, idx, v, x, block, zero, False)
            else:
                _jit("spmv")(ptr, rows, idx, v, x, flat, zero)
        elif path == "csr-spmm":
            x = xs[0].reshape(xs[0].shape[0], w)
            acc = np.empty(w, out.dtype)
            out2 = out.reshape(self._out_rows, w)
            if store and self._cover_ptr is not None:  # every row of out, in order
                every = self._cover_rows
                _jit("spmm")(self._cover_ptr, every, self._idx[0], v, x, out2, acc, True)
            else:
                _jit("spmm")(ptr, rows, self._idx[0], v, x, out2, acc, False)
        elif path == "numba-mttkrp":
            x, y = (a.reshape(a.shape[0], w) for a in xs)
            acc = np.empty(w, out.dtype)
            i1, i2 = self._idx
            _jit("mttkrp")(ptr, rows, i1, i2, v, x, y, out.reshape(self._out_rows, w), acc)
        else:  # numba-sddmm
            wx = self._x_width[0]
            x, y = (a.reshape(a.shape[0], wx) for a in xs)
            i1, i2 = self._idx
            _jit("sddmm")(ptr, rows, i1, i2, v, x, y, out.reshape(self._out_rows), zero)


def _first_row(region: Any) -> int:
    """Where a buffer's rows start in its tensor: a box's first row, a run of gathered
    rows' first; 0 for scattered rows (which a leaf reads by global rows, if at all)."""
    if isinstance(region, tuple):
        return int(region[0][0]) if region else 0
    rows = getattr(region, "rows", None)
    if isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.shape[1] == 1 and len(rows):
        first, last = int(rows[0, 0]), int(rows[-1, 0])
        if last - first == len(rows) - 1 and getattr(region, "box", ()) == ():
            return first
    return 0


class EntryLeaves:
    """A processor's leaf over stored entries (a Compute's ``EntryWork``), with every term's
    index structure prepared once per plan; calling it with the processor's fetched values
    adds the terms into the output and returns the iteration points its leaves visited."""

    def __init__(self, work: Any, dtype: Any) -> None:
        self.work = work
        self.dtype = np.dtype(dtype)
        ext = dict(work.extents)
        self.leaves = [
            TermLeaf(
                t.out,
                [d[1] for d in t.dense],
                [d[2] for d in t.dense],
                work.out_letters,
                work.out_rows,
                ext,
            )
            for t in work.terms
        ]
        self._union: dict[tuple[bool, ...], int] = {}

    def __call__(
        self,
        out: np.ndarray,
        buffers: Mapping[str, Any],
        crd: Mapping[str, np.ndarray] = {},
        whole: Mapping[str, np.ndarray] = {},
        store: bool = False,
        own: Mapping[str, np.ndarray] = {},
        dot_with: np.ndarray | None = None,
        dots: list[float] | None = None,
    ) -> int:
        """``crd``: a sparse tensor's column indices of the entries, in an array of the
        caller's, for a term reading that tensor's values in order; ``whole``: dense
        inputs as the caller gave them whole (see :meth:`TermLeaf.__call__`). ``store``
        (only where :meth:`covers` said so): ``out`` holds nothing yet, and the one term
        writes every element of it. ``own``: the processor's own blocks of the tensors
        :meth:`read_own` accepted, whose rows their buffers do not hold. ``dot_with``
        (with ``store``): a vector as long as ``out``; where the one term's product can
        (:meth:`TermLeaf.__call__`), ``dot_with . out`` is appended to ``dots``."""
        ran = []
        for t, leaf in zip(self.work.terms, self.leaves, strict=True):
            if leaf.entries == 0:
                ran.append(False)
                continue
            caller: Any = None
            if crd and len(t.sparse) == 1 and t.sparse[0][1] is None and len(t.dense) == 1:
                got = crd.get(t.sparse[0][0])
                name = t.dense[0][0]
                if got is not None and name in whole:
                    caller = (got, whole[name], _first_row(buffers[name][1]))
            v = None
            for name, idx in t.sparse:
                vals = buffers[name][0]
                vals = vals if idx is None else vals[idx]
                v = vals if v is None else v * vals
            if t.coeff != 1:
                v = v * t.coeff
            mine = own.get(t.dense[0][0]) if own and len(t.dense) == 1 else None
            got = leaf(out, np.ascontiguousarray(v, dtype=self.dtype),
                       [np.ascontiguousarray(buffers[n][0]) for n, _, _ in t.dense], caller,
                       store, mine, dot_with if store else None)  # fmt: skip
            if got is not None and dots is not None:
                dots.append(got)
            ran.append(True)
        return self._visited(tuple(ran)) * self.work.width

    def read_own(self, name: str, probe: np.ndarray | None, nown: int = 0) -> bool:
        """Whether every term reading dense tensor ``name`` reads its own rows in place
        from now on (:meth:`TermLeaf.split_own`: buffer row ``k`` holds own row
        ``probe[k]``, the own block has ``nown`` rows); where one cannot, or none reads it,
        none does and the answer is False. ``probe`` None: every term reads the buffer
        again."""
        if probe is not None and (
            any(t == name for t, _ in self.work.views)
            or any(n == name for t in self.work.terms for n, _ in t.sparse)
        ):
            return False  # (a sparse tensor's values are read by position, not as a vector)
        readers = [
            leaf
            for t, leaf in zip(self.work.terms, self.leaves, strict=True)
            if any(d[0] == name for d in t.dense) and leaf.entries
        ]
        terms = [t for t in self.work.terms if any(d[0] == name for d in t.dense)]
        ok = probe is None or (bool(terms) and all(len(t.dense) == 1 for t in terms))
        ok = ok and all(leaf.split_own(probe, nown) for leaf in readers)
        if not ok:
            for leaf in readers:
                leaf.split_own(None)
        return ok

    def covers(self, out: np.ndarray) -> bool:
        """Whether one call writes every element of ``out`` (one term with entries, whose
        leaf :meth:`~TermLeaf.covers` it): the caller may then skip zeroing ``out``."""
        live = [leaf for leaf in self.leaves if leaf.entries]
        return len(live) == 1 and live[0].covers(out)

    def _visited(self, ran: tuple[bool, ...]) -> int:
        """Distinct entries the terms that ran cover."""
        got = self._union.get(ran)
        if got is None:
            sets = [t.entries for t, r in zip(self.work.terms, ran, strict=True) if r]
            if any(s is None for s in sets):
                got = self.work.entries
            elif not sets:
                got = 0
            else:
                got = len(np.unique(np.concatenate(sets))) if len(sets) > 1 else len(sets[0])
            self._union[ran] = got
        return got
