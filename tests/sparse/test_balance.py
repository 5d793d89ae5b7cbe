"""Load balance of the two SpMV splits on skewed patterns, from the bound plans' stats.

An unpermuted R-MAT graph and a matrix with Zipf row lengths sorted heaviest first put most
entries in the first rows: a cut by row blocks gives the first processor most of the work,
a cut by stored positions gives every processor ``ceil(nnz/P)`` entries (the last one the
rest). ``iterations[p]`` is the number of entries processor ``p`` visits, so
``max / mean`` of it is the imbalance; only ``kernel.stats(inputs)`` is needed.
"""

from __future__ import annotations

import numpy as np
import pytest
from sparse_oracle import block_size, spmv_kernel

from distal.sparse import generate


def imbalance(B, P: int, split: str) -> float:
    n, m = B.shape
    it = np.array(spmv_kernel(n, m, P, split).stats({"B": B}).iterations)
    assert it.sum() == B.nnz  # every entry is visited once
    return float(it.max() / it.mean())


@pytest.fixture(scope="module")
def rmat16():
    """R-MAT, scale 16 (65536 vertices), edge factor 16, unpermuted."""
    return generate.rmat(16, 16, seed=0)


@pytest.fixture(scope="module")
def zipf16():
    return generate.zipf_rows(1 << 14, 1 << 14, 16 << 14, s=1.2, seed=0)


def test_rmat_row_split_is_imbalanced_nonzero_split_is_not(rmat16):
    P = 4
    assert rmat16.shape == (1 << 16, 1 << 16)
    assert rmat16.nnz > 0.9 * 16 * (1 << 16)
    nz = imbalance(rmat16, P, "nz")
    assert nz <= 1.05
    assert imbalance(rmat16, P, "row") >= 2
    # the non-zero split's exact counts: ceil(nnz/P) each, the rest on the last
    n, _ = rmat16.shape
    it = spmv_kernel(n, n, P, "nz").stats({"B": rmat16}).iterations
    b = block_size(rmat16.nnz, P)
    assert it == [b] * (P - 1) + [rmat16.nnz - (P - 1) * b]


def test_zipf_sorted_rows_at_16(zipf16):
    P = 16
    lengths = np.diff(zipf16.levels[1].pos)
    assert np.all(np.diff(lengths) <= 0)  # heaviest first
    assert imbalance(zipf16, P, "nz") <= 1.05
    assert imbalance(zipf16, P, "row") >= 8
