"""Every dl.apps solver says whether it converged: scipy's ``info`` and a
``ConvergenceWarning`` (or, with ``strict=True``, a ``ConvergenceError`` carrying the result),
on results that still unpack as the contract says."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from _problems import cp_tensor, graph, spd

import distal as dl


def laplacian(n: int) -> np.ndarray:
    return 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)


def quiet(fn, *args, **kwargs):
    """``fn(...)``, failing on any warning (a converged solve says nothing)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kwargs)


def test_cg_at_maxiter_says_so_as_scipy_does() -> None:
    scipy_cg = pytest.importorskip("scipy.sparse.linalg").cg
    A, b = laplacian(500), np.ones(500)
    with pytest.warns(dl.ConvergenceWarning, match=r"info=10\b.*maxiter=10"):
        res = dl.apps.cg(A, b, machine=2, maxiter=10)
    x, its = res  # the contract's (x, iterations)
    assert its == 10
    assert res.iterations == 10
    assert res.x is x
    _, info = scipy_cg(A, b, rtol=1e-10, atol=0.0, maxiter=10)
    assert res.info == info == 10
    assert not res.converged
    want = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
    assert res.residual == pytest.approx(want, rel=1e-12)
    assert res.residual > 1  # the residual the issue met: 15.2
    with pytest.raises(dl.ConvergenceError, match="did not converge") as err:
        dl.apps.cg(A, b, machine=2, maxiter=10, strict=True)
    assert isinstance(err.value, dl.DistalError)
    kept = err.value.result  # the work is not lost
    np.testing.assert_array_equal(kept.x, x)
    assert kept.info == 10


def test_cg_converged_is_quiet_and_reports_the_true_residual() -> None:
    A, b = spd(n=60, seed=4)
    res = quiet(dl.apps.cg, A, b, machine=3, tol=1e-10)
    assert res.converged
    assert res.info == 0
    x, its = res
    assert res.residual == pytest.approx(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    assert res.residual <= 1e-10
    back = pickle.loads(pickle.dumps(res))
    assert back.info == 0
    assert back.iterations == its
    assert np.array_equal(back[0], x)


def test_cg_on_a_nonsymmetric_matrix_does_not_pass_for_converged() -> None:
    """CG's recurrences assume a symmetric A; on another the returned x is not a solution
    and the result says so (here it runs out of iterations; the residual is x's own)."""
    rng = np.random.default_rng(1)
    A = rng.random((50, 50)) + 2.0 * np.eye(50)
    b = np.ones(50)
    with pytest.warns(dl.ConvergenceWarning):
        res = dl.apps.cg(A, b, machine=2)
    assert not res.converged
    assert res.info != 0
    assert res.residual == pytest.approx(np.linalg.norm(b - A @ res.x) / np.linalg.norm(b))
    assert res.residual > 1e-3


def test_cg_breakdown_on_an_indefinite_matrix_keeps_the_iterate() -> None:
    A, _ = spd(n=10)
    with pytest.warns(dl.ConvergenceWarning, match="positive definite"):
        res = dl.apps.cg(-A, np.ones(10), machine=2)
    assert res.info == -1
    assert not res.converged
    assert res.x.shape == (10,)
    assert np.all(np.isfinite(res.x))


def test_cg_recursive_residual_below_what_rounding_allows_is_not_converged() -> None:
    """A tolerance below rounding: the recursive residual meets it, the true one cannot;
    the true residual replaces the recursive one once, and the second time CG stops with
    ``info == -2`` instead of declaring success."""
    A = np.diag(np.logspace(0, 2, 20))
    b = np.random.default_rng(0).random(20)
    with pytest.warns(dl.ConvergenceWarning, match="twice"):
        res = dl.apps.cg(A, b, machine=1, tol=1e-17, maxiter=2000)
    assert res.info == -2
    assert res.iterations < 2000
    assert res.residual > 1e-17


def test_pagerank_says_whether_it_converged() -> None:
    a = graph()
    with pytest.warns(dl.ConvergenceWarning, match="pagerank did not converge"):
        v = dl.apps.pagerank(a, machine=2, maxiter=3)
    assert isinstance(v, np.ndarray)
    assert v.info == 3
    assert v.iterations == 3
    assert not v.converged
    assert v.error_bound > 1e-10
    assert abs(v.sum() - 1) < 1e-12
    assert type(v * 2) is np.ndarray  # arithmetic on it gives plain arrays
    with pytest.raises(dl.ConvergenceError):
        dl.apps.pagerank(a, machine=2, maxiter=3, strict=True)
    v = quiet(dl.apps.pagerank, a, machine=2)
    assert v.converged
    assert v.info == 0
    assert v.error_bound <= 1e-10
    assert v.iterations > 3


def test_cp_als_says_whether_it_converged() -> None:
    X = cp_tensor()
    with pytest.warns(dl.ConvergenceWarning, match="cp_als did not converge"):
        res = dl.apps.cp_als(X, 4, machine=2, iters=2, tol=1e-12)
    w, factors, fit = res  # the contract's (weights, factors, fit)
    assert res.info == 2
    assert res.iterations == 2
    assert not res.converged
    assert res.fit == fit
    assert res.weights is w
    assert len(factors) == 3
    with pytest.raises(dl.ConvergenceError):
        dl.apps.cp_als(X, 4, machine=2, iters=2, tol=1e-12, strict=True)
    res = quiet(dl.apps.cp_als, X, 4, machine=2, iters=200, tol=1e-6)
    assert res.converged
    assert res.info == 0
    assert res.change < 1e-6


def test_strict_must_be_a_bool() -> None:
    A, b = spd(n=10)
    with pytest.raises(dl.InputError, match="strict"):
        dl.apps.cg(A, b, strict="yes")
