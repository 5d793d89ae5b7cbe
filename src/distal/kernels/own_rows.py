"""An SpMV leaf that reads the processor's own rows of the vector where they lie.

A row-split SpMV's processor fetches the vector rows its entries read into one buffer:
the other processors' rows arrive there, and its own rows were copied there too, a pass
over its whole block every run (on a 10^6-row Laplacian on 2 ranks, 0.3 ms of a 6 ms
CG iteration) and a second copy of the block in the cache the matrix streams through
(a CG iteration's leaf ran 1.7x its time repeated alone). PETSc splits its matrix into a
diagonal part, reading the own vector in place, and an off-diagonal part over the ghosts.

:class:`OwnSplit` does the same without changing the order of the sums: each entry's
column becomes its row of the own block (``< nown``) or ``nown`` plus its row of the
buffer, and the rows with both kinds of entries (``mixed``) are the only ones whose loop
tests each column; every row still adds its entries in their stored order, so the result
has the bits the buffer would have given. Where more than :data:`MIXED_MAX` of the rows
are mixed (an R-MAT graph cut by rows: almost every row reads both), the test costs more
than the copy saves, and the split is not made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_u = np.uintp  # unsigned reads: see distal.kernels.sparse_leaf

#: the largest share of a leaf's rows that may read both the own block and the buffer
MIXED_MAX = 0.25


def spmv_split_kernel(
    ptr: np.ndarray,
    idx: np.ndarray,
    v: np.ndarray,
    xo: np.ndarray,
    xb: np.ndarray,
    nown: int,
    mixed: np.ndarray,
    out: np.ndarray,
    zero: complex,
    store: bool,
) -> None:
    # the rows kernel of distal.kernels.sparse_leaf over two vectors: row s of ``out`` is
    # segment s; ``idx`` < nown reads ``xo``, the rest ``xb`` at ``idx - nown``; only the
    # (sorted) ``mixed`` rows test which (each has entries). ``store``: as the rows
    # kernel's; adding, a row without entries is left as it is
    # (every index unsigned: numba makes a float of an unsigned and a signed integer)
    one = _u(1)
    n = _u(out.shape[0])
    start = _u(0)
    for k in range(mixed.shape[0] + 1):
        stop = _u(mixed[k]) if k < mixed.shape[0] else n
        if store:
            for s in range(start, stop):
                a = zero
                for e in range(_u(ptr[s]), _u(ptr[s + one])):
                    a += v[e] * xo[_u(idx[e])]
                out[s] = zero + a
        else:
            for s in range(start, stop):
                e0, e1 = _u(ptr[s]), _u(ptr[s + one])
                if e1 > e0:  # (a row without entries keeps its -0.0)
                    a = zero
                    for e in range(e0, e1):
                        a += v[e] * xo[_u(idx[e])]
                    out[s] += a
        if k < mixed.shape[0]:
            a = zero
            for e in range(_u(ptr[stop]), _u(ptr[stop + one])):
                j = _u(idx[e])
                if j < nown:
                    a += v[e] * xo[j]
                else:
                    a += v[e] * xb[j - nown]
            out[stop] = (zero + a) if store else (out[stop] + a)
            start = stop + one


@dataclass(frozen=True, slots=True, eq=False)
class OwnSplit:
    """A leaf's columns recoded for one buffer layout: ``idx`` (see the module docstring),
    the own block's rows ``nown``, and the (sorted) rows of the leaf's row pointer that
    read both the own block and the buffer."""

    idx: np.ndarray
    nown: int
    mixed: np.ndarray

    @staticmethod
    def make(idx: np.ndarray, probe: np.ndarray, nown: int, ptr: np.ndarray) -> OwnSplit | None:
        """The split of a leaf reading buffer rows ``idx`` by row pointer ``ptr``, where
        buffer row ``k`` holds own row ``probe[k]`` (-1: another processor's row) of a
        block of ``nown`` rows; None where it does not pay (see the module docstring) or
        the codes do not fit the index type."""
        if nown <= 0 or nown + probe.shape[0] >= np.iinfo(idx.dtype).max:
            return None
        code = np.where(probe >= 0, probe, nown + np.arange(probe.shape[0], dtype=np.int64))
        new = code[idx].astype(idx.dtype)
        off = np.concatenate(([0], np.cumsum(new >= nown, dtype=np.int64)))
        p = ptr.astype(np.int64)
        mixed = np.flatnonzero(off[p[1:]] > off[p[:-1]]).astype(np.uint64)
        if mixed.shape[0] > MIXED_MAX * max(1, ptr.shape[0] - 1):
            return None
        return OwnSplit(new, nown, mixed)


def probe_rows(
    buf_rows: int, own_rows: int, put: Callable[[np.ndarray, np.ndarray], None]
) -> np.ndarray:
    """Which own row each buffer row would hold: ``put(dst, src)`` copies the own block's
    pieces into the buffer as a fetch does (the runtime's own rule), here applied to the
    own rows' numbers; rows it leaves alone hold -1."""
    probe = np.full(buf_rows, -1, np.int64)
    put(probe, np.arange(own_rows, dtype=np.int64))
    return probe
