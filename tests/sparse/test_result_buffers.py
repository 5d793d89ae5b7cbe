"""A sparse result of the local runtime holds the run's value buffer without a copy; a
later run of the same kernel must never write into a result still held."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distal as dl
from distal import algorithms as al


def _uniform(ext: int, nnz: int, seed: int) -> dl.SparseArray:
    """A 3-tensor of about ``nnz`` entries at uniform coordinates (about as many fibers)."""
    rng = np.random.default_rng(seed)
    coords = rng.integers(0, ext, size=(3, nnz))
    return dl.SparseArray.from_coo(coords, rng.standard_normal(nnz), (ext,) * 3, "dss")


def _ttv(B: dl.SparseArray, c: np.ndarray) -> np.ndarray:
    """``A(i,j) = B(i,j,k) c(k)`` by scipy, dense."""
    i, j, k = B.coordinates()
    n = B.shape
    return sp.coo_matrix((B.vals * c[k], (i, j)), shape=n[:2]).toarray()


def test_a_held_sparse_result_survives_later_runs() -> None:
    ext = 1024
    B = _uniform(ext, 800_000, 0)
    bound = al.spttv((ext, ext, ext), dl.Machine(2), "fibers").compile()
    rng = np.random.default_rng(1)
    kept = []
    for _ in range(4):  # each run's buffer is large enough to be recycled
        c = rng.standard_normal(ext)
        res = bound.run({"B": B, "c": c}).value
        kept.append((res, _ttv(B, c)))
    for res, want in kept:
        np.testing.assert_allclose(res.to_dense(), want, rtol=1e-12, atol=1e-9)
    with pytest.raises(ValueError, match="read-only"):
        kept[0][0].vals[0] = 1.0


def test_a_dropped_result_buffer_is_reused() -> None:
    """Once nothing holds a result, the next run's values go into the same buffer."""
    ext = 1024
    B = _uniform(ext, 800_000, 2)
    bound = al.spttv((ext, ext, ext), dl.Machine(2), "fibers").compile()
    c = np.ones(ext)
    first = bound.run({"B": B, "c": c}).value
    assert first.vals.nbytes > (1 << 22)  # recycled results are the large ones
    address = first.vals.__array_interface__["data"][0]  # (a reference would hold it)
    n = first.nnz
    del first
    blocker = np.ones(n)  # takes memory the first result freed, were it a copy
    second = bound.run({"B": B, "c": c}).value
    assert blocker.sum() == n
    assert second.vals.__array_interface__["data"][0] == address
    np.testing.assert_allclose(second.to_dense(), _ttv(B, c), rtol=1e-12)
