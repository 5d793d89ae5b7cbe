"""SpMV row kernels that also return the product's dot product with a vector.

CG computes ``q = A p`` and then ``p . q``: a second pass over ``p`` and ``q`` (about a
tenth of an iteration on one rank) just after the product wrote ``q``. These kernels add
``w[s] * y[s]`` for each row ``s`` as they store its value ``y[s]``, in exactly the order of
:func:`distal.kernels.sums.dot` over the block (blocks of ``BLOCK`` rows, four partial sums
by ``s % 4`` inside each, over the first ``n - n % 4`` rows, the rest into the first; each
block's ``(s0 + s1) + (s2 + s3)`` added into a pairwise tree), so the dot product has the
bits the separate pass gives. Only for a product that writes every row
of its block (``store``); the caller checks that the compiled dot would have run (float64,
``MIN_SIZE`` elements or more). One kernel serves both leaves: a leaf reading one vector
passes it as the own block, with no mixed rows (each row's loop is then the rows kernel's).
"""

from __future__ import annotations

import numpy as np

from distal.kernels.sums import BLOCK

_u = np.uintp  # unsigned reads: see distal.kernels.sparse_leaf


def spmv_split_dot_kernel(
    ptr: np.ndarray,
    idx: np.ndarray,
    v: np.ndarray,
    xo: np.ndarray,
    xb: np.ndarray,
    nown: int,
    mixed: np.ndarray,
    out: np.ndarray,
    w: np.ndarray,
    zero: float,
) -> float:
    # own_rows' split kernel storing every row of ``out`` (see there), and sum(w * out); a
    # leaf over one vector calls it with that vector as ``xo`` and ``mixed`` empty
    one = _u(1)
    n = out.shape[0]
    m = n - n % 4
    s0 = s1 = s2 = s3 = 0.0
    # the pairwise tree of block totals (distal.kernels.sums.push and fold, written out:
    # the kernel is compiled and cached on its own)
    stack = np.empty(64)
    depth = 0
    count = 0
    k = 0  # the next mixed row's place in ``mixed``
    nm = mixed.shape[0]
    for s in range(n):
        a = zero
        if k < nm and _u(mixed[k]) == _u(s):
            for e in range(_u(ptr[s]), _u(ptr[s + one])):
                j = _u(idx[e])
                if j < nown:
                    a += v[e] * xo[j]
                else:
                    a += v[e] * xb[j - nown]
            k += 1
        else:
            for e in range(_u(ptr[s]), _u(ptr[s + one])):
                a += v[e] * xo[_u(idx[e])]
        y = zero + a
        out[s] = y
        t = w[s] * y
        q = s & 3
        if s >= m or q == 0:
            s0 += t
        elif q == 1:
            s1 += t
        elif q == 2:
            s2 += t
        else:
            s3 += t
        if (s + 1) % BLOCK == 0 or s + 1 == n:
            count += 1
            c = count
            bt = (s0 + s1) + (s2 + s3)
            while (c & 1) == 0:
                depth -= 1
                bt = stack[depth] + bt
                c >>= 1
            stack[depth] = bt
            depth += 1
            s0 = s1 = s2 = s3 = 0.0
    if depth == 0:
        return 0.0
    total = stack[depth - 1]
    for d in range(depth - 2, -1, -1):
        total = stack[d] + total
    return total
