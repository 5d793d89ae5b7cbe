"""The local runtime's processors share one memory: a fetched block of an input is read
where it lies (counted as the message it stands for), never copied, and never written."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import distal as dl
from distal.runtime import local


def _summa(n: int, grid: tuple[int, int]) -> Any:
    return dl.compile(dl.algorithms.summa(n, machine=dl.Machine(*grid)).schedule)


@pytest.mark.parametrize("grid", [(2, 1), (2, 2), (1, 3)])
def test_fetched_input_blocks_are_read_in_place(grid: tuple[int, int], monkeypatch: Any) -> None:
    copies: list[Any] = []
    real_copy_into, real_copy = local.copy_into, local._copy
    monkeypatch.setattr(local, "copy_into", lambda *a: copies.append(a) or real_copy_into(*a))
    monkeypatch.setattr(local, "_copy", lambda job: copies.append(job) or real_copy(job))
    n = 96
    kernel = _summa(n, grid)
    rng = np.random.default_rng(0)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    keep_b, keep_c = b.copy(), c.copy()
    res = kernel.run({"B": b, "C": c})
    np.testing.assert_allclose(res.value, keep_b @ keep_c, rtol=1e-12, atol=1e-12)
    assert copies == []  # every fetch was one whole block of an input
    st = kernel.stats()
    assert res.stats.words_received == st.words_received  # still counted as messages
    assert res.stats.peak_words == st.peak_words  # and as the buffers they stand for
    assert np.array_equal(b, keep_b)
    assert np.array_equal(c, keep_c)


def _counting(monkeypatch: Any) -> list[Any]:
    copies: list[Any] = []
    real_copy_into, real_copy = local.copy_into, local._copy
    monkeypatch.setattr(local, "copy_into", lambda *a: copies.append(a) or real_copy_into(*a))
    monkeypatch.setattr(local, "_copy", lambda job: copies.append(job) or real_copy(job))
    return copies


def test_a_box_made_of_several_owners_pieces_is_read_in_the_callers_array(
    monkeypatch: Any,
) -> None:
    copies = _counting(monkeypatch)
    m = dl.Machine(2)
    i, j = dl.index_vars("i j")
    a = dl.Tensor("A", (8, 8), dist="xy -> y", machine=m)
    b = dl.Tensor("B", (8, 8), dist="xy -> x", machine=m)
    a[i, j] = b[i, j]
    jo, ji = dl.index_vars("jo ji")
    kernel = dl.compile(dl.schedule(a).distribute([j], [jo], [ji], m))
    x = np.arange(64.0).reshape(8, 8)
    res = kernel.run({"B": x})
    np.testing.assert_array_equal(res.value, x)
    assert copies == []
    st = kernel.stats()
    assert res.stats.words_received == st.words_received == [16, 16]
    assert res.stats.peak_words == st.peak_words


def test_scattered_rows_are_read_by_global_rows_or_gathered_by_copying(monkeypatch: Any) -> None:
    """The rows an SpMV needs of a vector in blocks, scattered over it, are no box of the
    caller's array: given the vector whole (C-contiguous, its dtype), the leaves read them
    there by global rows and nothing is copied; given a strided view, they are copied into
    the buffer. Both are counted as the same messages and buffers."""
    sp = pytest.importorskip("scipy.sparse")
    copies = _counting(monkeypatch)
    mat = sp.random(64, 64, density=0.08, format="csr", random_state=3)
    vec = np.random.default_rng(3).standard_normal(64)
    kernel = dl.compile(dl.algorithms.spmv((64, 64), machine=dl.Machine(2)).schedule)
    bound = kernel.bind({"B": mat, "c": vec})
    res = bound.run({"B": mat, "c": vec})
    np.testing.assert_allclose(res.value, mat @ vec, rtol=1e-12)
    assert copies == []  # read where the caller's array holds them
    assert res.stats == bound.stats()
    strided = np.repeat(vec, 2)[::2]
    res2 = bound.run({"B": mat, "c": strided})
    assert copies, "scattered rows of a strided view are copied into one buffer"
    np.testing.assert_array_equal(res2.value, res.value)
    assert res2.stats == bound.stats()


def test_side_by_side_finishes_every_item_before_it_raises() -> None:
    """The processors of a step run side by side (the first on the calling thread): when
    one fails, the others have finished before the error is raised, so nothing of the
    failed run still writes into its stores afterwards."""
    import threading
    import time

    from distal.runtime.local import side_by_side

    done: list[int] = []
    lock = threading.Lock()

    def f(x: int) -> int:
        if x == 0:
            raise ValueError("first fails")
        time.sleep(0.05)
        with lock:
            done.append(x)
        return x

    with pytest.raises(ValueError, match="first fails"):
        side_by_side(f, [0, 1, 2])
    assert sorted(done) == [1, 2]
    assert side_by_side(lambda x: x * 2, [1, 2, 3]) == [2, 4, 6]


def test_a_large_result_is_reused_only_once_nothing_holds_it() -> None:
    """A rerun kernel's large result (over ``TOUCH_MAX`` bytes) may be an earlier run's
    result, zeroed again, once nothing holds that one: a result still held, or a numpy view
    of it, keeps its values."""
    n = 1024  # 8 MiB of float64: over TOUCH_MAX
    kernel = _summa(n, (2, 1))
    rng = np.random.default_rng(1)
    runs = [(rng.standard_normal((n, n)), rng.standard_normal((n, n))) for _ in range(4)]
    first = kernel.run({"B": runs[0][0], "C": runs[0][1]}).value
    view = kernel.run({"B": runs[1][0], "C": runs[1][1]}).value[::2]
    kernel.run({"B": runs[2][0], "C": runs[2][1]})  # dropped at once: free for the next
    kept = {id(x) for x in local._PREPARED.get(kernel.plan).results.kept}  # alive: ids distinct
    last = kernel.run({"B": runs[3][0], "C": runs[3][1]}).value
    assert id(last) in kept  # the dropped result, reused
    np.testing.assert_allclose(first, runs[0][0] @ runs[0][1], rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(view, (runs[1][0] @ runs[1][1])[::2], rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(last, runs[3][0] @ runs[3][1], rtol=1e-12, atol=1e-10)
    assert last.nbytes > local.TOUCH_MAX


@pytest.mark.parametrize("empty_row", [False, True], ids=["every row", "an empty row"])
def test_an_spmv_rerun_writes_over_the_result_it_dropped(
    empty_row: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun SpMV gets the result an earlier run dropped (large results are recycled,
    not zeroed; a first run's is not zeroed either). Each processor's leaf stores every
    row of its block, which is never zeroed: a row without entries is written as a zero.
    Each run is exact against scipy, with other vectors, over the old result's values."""
    sp = pytest.importorskip("scipy.sparse")
    from distal.kernels import sparse_leaf

    stores: list[bool] = []
    orig = sparse_leaf.EntryLeaves.__call__

    def spy(
        self: Any, out: Any, buffers: Any, crd: Any, whole: Any, store: bool = False, **kw: Any
    ) -> Any:
        stores.append(store)
        return orig(self, out, buffers, crd, whole, store, **kw)

    monkeypatch.setattr(sparse_leaf.EntryLeaves, "__call__", spy)
    n = (local.TOUCH_MAX // 8) + 1000  # a result over TOUCH_MAX: recycled when dropped
    a = sp.diags([1.0, -2.0, 0.5], [-1, 0, 1], shape=(n, n), format="lil")
    if empty_row:
        a[n - 5, :] = 0  # in the last processor's rows
    a = sp.csr_matrix(a)
    a.eliminate_zeros()
    kernel = dl.compile(dl.algorithms.spmv((n, n), machine=dl.Machine(2)).schedule)
    rng = np.random.default_rng(3)
    bound = kernel.bind({"B": a, "c": np.ones(n)})
    for _ in range(3):
        x = rng.standard_normal(n)
        got = bound.run({"B": a, "c": x}).value
        np.testing.assert_allclose(got, a @ x, rtol=1e-13, atol=1e-13)
        del got
    # two processors, three runs (the second processor's rows hold the empty one)
    assert stores == [True, True] * 3


def test_what_runs_prepared_goes_with_the_plan() -> None:
    """What the local runtime prepares for a plan (leaves, index arrays, recycled results)
    and where its regions lie in buffers are kept while the plan lives, and dropped with it:
    a kernel nobody holds takes them along (it held gigabytes once, for plans long gone)."""
    import gc
    import weakref

    sp = pytest.importorskip("scipy.sparse")
    from distal.runtime import store

    n = 2000
    a = sp.random(n, n, density=0.01, format="csr", random_state=4)
    kernel = dl.compile(dl.algorithms.spmv((n, n), machine=dl.Machine(2)).schedule)
    x = np.ones(n)
    bound = kernel.bind({"B": a, "c": x})
    np.testing.assert_allclose(bound.run({"B": a, "c": x}).value, a @ x, rtol=1e-12)
    prepared = local._PREPARED.get(bound.plan)
    assert prepared is not None
    assert local._PREPARED.get(bound.plan) is prepared  # kept for the next run
    before = len(local._PREPARED)
    where_before = len(store._WHERE)
    plan = weakref.ref(bound.plan)
    del bound, kernel, prepared
    gc.collect()
    assert plan() is None
    assert len(local._PREPARED) == before - 1
    assert where_before > 0  # the SpMV's regions were located in its buffers
    assert len(store._WHERE) < where_before


@pytest.mark.parametrize(
    ("spec", "shapes", "grid"),
    [
        ("ik,kj->ij", [(1024, 96), (96, 1100)], (2, 1)),  # one GEMM per processor
        ("ijk,kl->ijl", [(128, 128, 48), (48, 40)], (2, 2)),  # TTM
        ("ijk,k->ij", [(1100, 1024, 3), (3,)], (2, 1)),  # TTV
        ("ijk,jr,kr->ir", [(6000, 12, 10), (12, 96), (10, 96)], (2, 1)),  # MTTKRP
    ],
    ids=["gemm", "ttm", "ttv", "mttkrp"],
)
def test_a_dense_rerun_writes_over_a_poisoned_result_without_zeroing_it(
    spec: str, shapes: list, grid: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rerun dense kernel whose leaves store every element of their blocks
    (:func:`distal.kernels.leaf.stores_all`) gets the dropped result back and writes over
    it without a zeroing pass: exact against numpy over a result filled with NaN."""
    from distal.runtime import store

    zeroed: list[int] = []
    orig = store.Store.own_output

    def spy(self: Any) -> Any:
        if self.own_dirty:
            zeroed.append(self.p)
        return orig(self)

    monkeypatch.setattr(store.Store, "own_output", spy)
    rng = np.random.default_rng(9)
    machine = dl.Machine(*grid)
    first = dl.einsum(spec, *[rng.standard_normal(s) for s in shapes], machine=machine)
    assert first.nbytes > local.TOUCH_MAX  # large: recycled once dropped
    assert first.base is None
    first[...] = np.nan
    del first
    zeroed.clear()
    ops = [rng.standard_normal(s) for s in shapes]
    got = dl.einsum(spec, *ops, machine=machine)
    np.testing.assert_allclose(got, np.einsum(spec, *ops), rtol=1e-12, atol=1e-10)
    assert zeroed == []
