"""An SpMV leaf that returns its result's dot product with a vector as it stores the result
(``kernels/spmv_dot.py``): the same product and the same dot product, bit for bit, as the
product followed by :func:`distal.kernels.fused.dot`, and no dot product where that would
not hold."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distal.kernels import fused
from distal.kernels.sparse_leaf import TermLeaf

pytest.importorskip("numba")


def random_rows(n: int, seed: int) -> sp.coo_matrix:
    """An ``n x n`` matrix of about four entries a row at random columns, a few rows empty."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), 4)
    keep = rows % 97 != 5  # (empty rows)
    rows = rows[keep]
    m = sp.coo_matrix((rng.standard_normal(rows.size), (rows, rng.integers(0, n, rows.size))))
    m.resize((n, n))
    return sp.csr_matrix(m).tocoo()


def leaf_of(m: sp.coo_matrix, rows: int, first_col: int = 0) -> TermLeaf:
    return TermLeaf(m.row, [m.col - first_col], [""], "", rows, {})


@pytest.mark.parametrize("extra", [0, 1, 2, 3])  # the rows past the last multiple of four
def test_the_rows_kernel_dot_has_the_separate_dots_bits(extra: int) -> None:
    n = fused.MIN_SIZE + extra
    rng = np.random.default_rng(extra)
    m = random_rows(n, extra)
    x, w = rng.standard_normal(n), rng.standard_normal(n)
    leaf = leaf_of(m, n)
    want = np.empty(n)
    leaf(want, m.data, [x], store=True)
    got = np.empty(n)
    d = leaf(got, m.data, [x], store=True, dot_with=w)
    assert np.array_equal(got, want)
    assert d is not None
    assert d == fused.dot(w, want)  # the separate pass's bits
    assert d == pytest.approx(float(w @ (sp.csr_matrix(m) @ x)), rel=1e-10)


def test_the_split_kernel_dot_has_the_separate_dots_bits() -> None:
    n, lo, hi = 3 * fused.MIN_SIZE, fused.MIN_SIZE, 2 * fused.MIN_SIZE + 3
    rng = np.random.default_rng(1)
    offsets = (-3, -1, 0, 1, 3)
    a = sp.diags([rng.standard_normal(n - abs(k)) for k in offsets], offsets).tocsr()
    m = a[lo:hi].tocoo()
    b0, b1 = lo - 3, hi + 3
    x = rng.standard_normal(n)
    leaf = leaf_of(m, hi - lo, b0)
    want = np.empty(hi - lo)
    leaf(want, m.data, [x[b0:b1]], store=True)
    probe = np.full(b1 - b0, -1, np.int64)
    probe[lo - b0 : hi - b0] = np.arange(hi - lo)
    assert leaf.split_own(probe, hi - lo)
    ghosts = x[b0:b1].copy()
    ghosts[lo - b0 : hi - b0] = np.nan
    got = np.empty(hi - lo)
    d = leaf(got, m.data, [ghosts], store=True, own_x=x[lo:hi], dot_with=x[lo:hi])
    assert np.array_equal(got, want)
    assert d == fused.dot(x[lo:hi], want)


def test_no_dot_where_the_product_adds_or_the_vector_does_not_fit() -> None:
    n = fused.MIN_SIZE
    m = random_rows(n, 3)
    x = np.random.default_rng(3).standard_normal(n)
    leaf = leaf_of(m, n)
    out = np.zeros(n)
    assert leaf(out, m.data, [x], dot_with=x) is None  # adding into out, not storing
    np.testing.assert_allclose(out, sp.csr_matrix(m) @ x, rtol=1e-12)
    assert leaf(np.empty(n), m.data, [x], store=True, dot_with=x[:-1]) is None  # too short
    w32 = x.astype(np.float32)
    assert leaf(np.empty(n), m.data, [x], store=True, dot_with=w32) is None  # not float64
    assert leaf(np.empty(n), m.data, [x], store=True) is None  # not asked
