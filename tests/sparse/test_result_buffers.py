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


@pytest.mark.parametrize("kernel", ["spmv", "spmm"])
def test_a_row_block_with_empty_rows_is_written_in_place(
    kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row split whose rows have gaps (a road network's junctions without a street)
    writes its owned output block directly (no partial buffer, no flush); its SpMV or SpMM
    leaf writes the empty rows too, so a dropped result refilled with NaN needs no zeroing.
    Exact against scipy; the measured stats are the predicted ones."""
    from distal.kernels import sparse_leaf
    from distal.plan.ir import Flush, OpenOutput
    from distal.sparse import generate as gen

    stores: list[bool] = []
    orig = sparse_leaf.EntryLeaves.__call__

    def spy(self: object, out: object, *args: object, **kw: object) -> object:
        stores.append(bool(args[3] if len(args) > 3 else kw.get("store", False)))
        return orig(self, out, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sparse_leaf.EntryLeaves, "__call__", spy)
    # junctions (about 1 % without a street): the SpMV's result over 4 MiB, recycled
    a = gen.road_network(750 if kernel == "spmv" else 300)
    m = a.to_scipy().tocsr()
    assert (np.diff(m.indptr) == 0).any()
    n = a.shape[0]
    rng = np.random.default_rng(4)
    if kernel == "spmv":
        alg, name = al.spmv(a.shape, dl.Machine(2), "rows"), "c"
        draw = lambda: rng.standard_normal(n)  # noqa: E731
    else:
        alg, name = al.spmm(a.shape, 8, dl.Machine(2), "rows"), "C"
        draw = lambda: rng.standard_normal((n, 8))  # noqa: E731
    bound = alg.compile().bind({"B": a, name: draw()})
    ops = [op for p in range(2) for op in bound.plan.programs[p]]
    opens = [op for op in ops if isinstance(op, OpenOutput)]
    assert opens
    assert all(op.direct for op in opens)
    assert not any(isinstance(op, Flush) for op in ops)
    for _ in range(3):
        x = draw()
        res = bound.run({"B": a, name: x})
        np.testing.assert_allclose(res.value, m @ x, rtol=1e-13, atol=1e-13)
        assert res.stats.as_dict() == bound.stats().as_dict()
        if res.value.nbytes > (1 << 22):  # recycled once dropped: poison it
            res.value[...] = np.nan
        del res
    # the leaves write their blocks, empty rows included: never zeroed first
    assert stores == [True] * 6
