"""Placement chosen by the cost model: a contraction's owner index and a sparse matrix's cut.

Each choice must be the argmin of the modelled costs (:func:`owner_costs`,
:func:`split_costs`), the cases are built so the choice matters, and the results are
compared with numpy / scipy.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distal as dl
from distal.arrays import lower
from distal.arrays.lower import choose_split, owner_costs, signature, split_costs
from distal.sparse import generate
from distal.sparse.array import SparseArray


def _key(d: dl.DArray) -> tuple:
    return signature(d.node, d.program.is_value, d.program.nprocs)[0]


def test_a_contraction_is_computed_by_the_index_the_model_finds_cheapest() -> None:
    # A (4 x 40000) @ B (40000 x 4): by the result's first index every processor would fetch
    # the half of B it does not hold; by the summed index B stays where it is held and only
    # A's column blocks (half as many words) and a 4 x 4 partial sum move
    rng = np.random.default_rng(0)
    A, B = rng.random((4, 40000)), rng.random((40000, 4))
    sess = dl.Session("local", machine=2)
    c = sess.asarray(A) @ sess.asarray(B)
    key = _key(c)
    costs = owner_costs(key)
    (i, k), (j,) = key[0][1], key[0][2]
    assert set(costs) == {i, k, j}
    assert lower._owner_var(key) == min(costs, key=lambda v: costs[v].seconds) == j
    assert costs[j].max_words < costs[i].max_words / 1.9
    np.testing.assert_allclose(c.get(), A @ B, rtol=1e-12)
    assert c.dist == "ab -> a"  # the result is left where every held value lies


@pytest.mark.parametrize("shape", [((600, 50), (50,)), ((50, 600), (600,))])
def test_the_default_owner_stays_unless_another_is_strictly_cheaper(shape) -> None:
    rng = np.random.default_rng(1)
    A, x = rng.random(shape[0]), rng.random(shape[1])
    sess = dl.Session("local", machine=2)
    y = sess.asarray(A) @ sess.asarray(x)
    key = _key(y)
    costs = owner_costs(key)
    chosen = lower._owner_var(key)
    first = key[0][1][0]
    assert costs[chosen].seconds <= costs[first].seconds
    if chosen != first:
        assert costs[chosen].seconds < costs[first].seconds * (1 - 1e-9)
    np.testing.assert_allclose(y.get(), A @ x, rtol=1e-12)


def _block_diagonal(n: int, densities: tuple[float, float], seed: int = 0) -> sp.csr_matrix:
    """Two ``n x n`` diagonal blocks of the given densities (and the identity)."""
    rng = np.random.default_rng(seed)
    blocks = [sp.random(n, n, density=d, random_state=rng, format="csr") for d in densities]
    return (sp.block_diag(blocks, format="csr") + sp.eye(2 * n, format="csr")).tocsr()


def test_a_block_diagonal_matrix_is_cut_by_rows() -> None:
    # two diagonal blocks of unequal weight: cutting by stored entries would cut into the
    # first block's rows, so the second processor fetches x entries and sends partial sums;
    # by rows each processor reads only its own x block, for a little imbalance
    M = _block_diagonal(500, (0.22, 0.18))
    A = SparseArray.from_scipy(M, "csr")
    costs = split_costs(A, 2)
    assert costs["rows"].max_words == 0 < costs["nonzeros"].max_words
    assert choose_split(A, 2) == min(costs, key=lambda s: costs[s].seconds) == "rows"
    sess = dl.Session("local", machine=2)
    a = sess.asarray(M)
    assert a.dist == "xy -> x"
    x = np.random.default_rng(2).random(M.shape[1])
    np.testing.assert_allclose((a @ sess.asarray(x)).get(), M @ x, rtol=1e-12)


def test_a_matrix_with_a_few_heavy_rows_is_cut_by_stored_entries() -> None:
    A = generate.zipf_rows(4000, 4000, 400_000, seed=3)
    costs = split_costs(A, 2)
    assert costs["rows"].compute_seconds > 1.5 * costs["nonzeros"].compute_seconds
    assert choose_split(A, 2) == min(costs, key=lambda s: costs[s].seconds) == "nonzeros"
    sess = dl.Session("local", machine=2)
    a = sess.asarray(A)
    assert a.dist == "xy -> (xy)"
    x = np.random.default_rng(4).random(4000)
    np.testing.assert_allclose((a @ sess.asarray(x)).get(), A.to_scipy() @ x, rtol=1e-12)


def test_a_given_cut_is_kept_and_auto_is_the_models() -> None:
    M = _block_diagonal(500, (0.22, 0.18))
    sess = dl.Session("local", machine=2)
    assert sess.asarray(M, "xy -> (xy)").dist == "xy -> (xy)"
    assert sess.asarray(M, "auto").dist == "xy -> x"
    sess["A"] = M
    assert sess["A"].dist == "xy -> x"


def test_cg_with_auto_solves_on_the_models_cut() -> None:
    M = _block_diagonal(280, (0.05, 0.04), seed=5)
    M = (M @ M.T + 10 * sp.eye(M.shape[0])).tocsr()  # symmetric positive definite
    b = np.random.default_rng(6).random(M.shape[0])
    x, _ = dl.apps.cg(M, b, machine=2, tol=1e-10)
    np.testing.assert_allclose(M @ x, b, atol=1e-8)
