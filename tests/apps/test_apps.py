"""dl.apps on the local runtime: CP-ALS, PageRank and CG against numpy in float64."""

from __future__ import annotations

import numpy as np
import pytest
from _problems import cp_tensor, graph, numpy_pagerank, reconstruct, spd

import distal as dl


def _session() -> dl.Session:
    return dl.Session(progress=False)


def test_cp_als_recovers_a_rank_4_tensor() -> None:
    x = cp_tensor()
    w, fs, fit = dl.apps.cp_als(x, 4, machine=4, iters=500, tol=1e-12, session=_session())
    assert fit >= 0.999
    assert [f.shape for f in fs] == [(20, 4), (18, 4), (16, 4)]
    assert w.shape == (4,)
    np.testing.assert_allclose(np.linalg.norm(fs[1], axis=0), 1.0, rtol=1e-12)
    true_fit = 1 - np.linalg.norm(x - reconstruct(w, fs)) / np.linalg.norm(x)
    assert true_fit >= 0.999
    assert abs(true_fit - fit) < 1e-6  # the fit from MTTKRP and Grams is the real one


def test_cp_als_order_4_and_seed() -> None:
    rng = np.random.default_rng(0)
    fs = [rng.random((s, 2)) for s in (5, 4, 6, 3)]
    x = np.einsum("ir,jr,kr,mr->ijkm", *fs)
    a = dl.apps.cp_als(x, 2, machine=3, iters=300, tol=1e-12, seed=1)
    b = dl.apps.cp_als(x, 2, machine=3, iters=300, tol=1e-12, seed=1)
    assert a[2] >= 0.999
    assert np.array_equal(a[0], b[0])
    assert all(np.array_equal(u, v) for u, v in zip(a[1], b[1], strict=True))
    assert np.linalg.norm(x - reconstruct(a[0], a[1])) / np.linalg.norm(x) <= 1e-3


def test_pagerank_matches_numpy_power_iteration() -> None:
    a = graph()
    assert (a.sum(axis=1) == 0).sum() >= 20  # dangling nodes present
    x = dl.apps.pagerank(a, machine=4, session=_session())
    ref = numpy_pagerank(a)
    assert abs(x.sum() - 1.0) < 1e-12
    assert np.max(np.abs(x - ref)) <= 1e-10
    assert np.abs(x - ref).sum() <= 1e-10  # the 1-norm bound the stopping rule promises


def test_pagerank_of_a_sparse_input_and_damping() -> None:
    sp = pytest.importorskip("scipy.sparse", reason="needs scipy (sparse extra)")
    a = graph(n=60, seed=4, dangling=5)
    x = dl.apps.pagerank(sp.csr_array(a), machine=2, damping=0.5)
    assert np.max(np.abs(x - numpy_pagerank(a, d=0.5))) <= 1e-10


def test_cg_matches_numpy_solve() -> None:
    A, b = spd()
    sess = _session()
    x, its = dl.apps.cg(A, b, machine=4, session=sess)
    assert np.max(np.abs(x - np.linalg.solve(A, b))) <= 1e-8
    assert 0 < its < 100
    # one redistribution of p per iteration (blocks to replicated: n * (P - 1) words); the
    # first p is b, placed in blocks by b . b before the loop; and one of x, for the true
    # residual b - A x of the returned x
    assert sess.moved_words == (its + 1) * 100 * 3


def test_cg_sparse_inputs() -> None:
    sp = pytest.importorskip("scipy.sparse", reason="needs scipy (sparse extra)")
    A, b = spd(n=30, seed=5)
    x, _ = dl.apps.cg(sp.csr_matrix(A), b, machine=3)
    assert np.max(np.abs(x - np.linalg.solve(A, b))) <= 1e-8
    x2, _ = dl.apps.cg(dl.SparseArray.from_dense(A, format="csr"), b, machine=3)
    assert np.array_equal(x, x2)
    # a sparse A far too large to make dense runs the sparse product
    n = 2**15
    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, n, 20 * n), rng.integers(0, n, 20 * n)
    big = sp.csr_matrix((rng.random(20 * n) * 0.01, (rows, cols)), shape=(n, n))
    big = (big + big.T + sp.identity(n, format="csr") * 4).tocsr()
    rhs = np.random.default_rng(1).standard_normal(n)
    xb, _ = dl.apps.cg(big, rhs, machine=2)
    # the recursive residual stops it; the true residual is as small
    assert np.linalg.norm(big @ xb - rhs) <= 1e-9 * np.linalg.norm(rhs)
    with pytest.raises(dl.InputError, match="square"):
        dl.apps.cg(sp.random(8, 4, density=0.5, format="csr"), np.ones(8))


def test_cg_zero_rhs_and_bad_inputs() -> None:
    A, _ = spd(n=10)
    x, its = dl.apps.cg(A, np.zeros(10), machine=2)
    assert its == 0
    assert np.array_equal(x, np.zeros(10))
    with pytest.raises(dl.InputError):
        dl.apps.cg(A, np.ones(9))
    with pytest.raises(dl.ConvergenceError, match="positive definite"):
        dl.apps.cg(-A, np.ones(10), machine=2, strict=True)
    with pytest.raises(dl.ScheduleError):
        dl.apps.cg(A, np.ones(10), schedule="nope")
    with pytest.raises(dl.InputError):
        dl.apps.pagerank(-np.ones((3, 3)))


def test_cg_callback_sees_every_iterate() -> None:
    """As scipy's ``cg``: called after each iteration with the iterate (here a DArray),
    whose values are the iterates a shorter solve returns."""
    A, b = spd(n=40, seed=3)
    seen: list[np.ndarray] = []
    x, its = dl.apps.cg(
        A, b, machine=2, maxiter=6, tol=0.0, callback=lambda xk: seen.append(xk.get())
    )
    assert its == 6
    assert len(seen) == 6
    assert np.array_equal(seen[-1], x)
    x3, _ = dl.apps.cg(A, b, machine=2, maxiter=3, tol=0.0)
    assert np.array_equal(seen[2], x3)
    with pytest.raises(dl.InputError, match="callback"):
        dl.apps.cg(A, b, callback=3)
