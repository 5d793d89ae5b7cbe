"""The sparse algorithms of ``dl.algorithms``: results against scipy / numpy, and their
pattern-computed traffic (written from the block rules) against the compiler's stats."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal.sparse import generate as gen


def _dense(x):
    return x.to_dense() if hasattr(x, "to_dense") else (x.toarray() if hasattr(x, "toarray") else x)


def _check(alg, inputs):
    k = alg.compile()
    r = k.run(inputs)
    np.testing.assert_allclose(
        _dense(r.value), _dense(alg.reference(inputs)), rtol=1e-12, atol=1e-12
    )
    assert r.stats == k.stats(inputs)
    return k, r


@pytest.mark.parametrize("P", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("split", ["rows", "nonzeros"])
@pytest.mark.parametrize("exact", [True, False])
def test_spmv_and_spmm_words_match_the_pattern_formula(P, split, exact):
    rng = np.random.default_rng(P)
    B = gen.rmat(7, 8, seed=P)
    n = B.shape[0]
    M = dl.Machine(P)
    alg = dl.algorithms.spmv((n, n), M, split, exact=exact)
    inputs = {"B": B, "c": rng.standard_normal(n)}
    _, r = _check(alg, inputs)
    assert r.stats.words_received == alg.words(inputs)
    alg = dl.algorithms.spmm((n, n), 5, M, split, exact=exact)
    inputs = {"B": B, "C": rng.standard_normal((n, 5))}
    _, r = _check(alg, inputs)
    assert r.stats.words_received == alg.words(inputs)


def test_hull_fetch_moves_at_least_the_exact_gather():
    B = gen.banded(300, 9, seed=1)
    M = dl.Machine(4)
    ex = dl.algorithms.spmv((300, 300), M, "rows").compile().stats({"B": B})
    hull = dl.algorithms.spmv((300, 300), M, "rows", exact=False).compile().stats({"B": B})
    assert hull.total_words >= ex.total_words
    B = gen.rmat(8, 4, seed=2)
    n = B.shape[0]
    ex = dl.algorithms.spmv((n, n), M, "nonzeros").compile().stats({"B": B})
    hull = dl.algorithms.spmv((n, n), M, "nonzeros", exact=False).compile().stats({"B": B})
    assert hull.total_words > ex.total_words


@pytest.mark.parametrize("shape", [(2, 2), (2, 3), (3, 1)])
@pytest.mark.parametrize("split", ["rows", "nonzeros"])
def test_spmm_on_a_2d_machine(shape, split):
    B = gen.zipf_rows(60, 50, 400, seed=3)
    M = dl.Machine(*shape)
    alg = dl.algorithms.spmm((60, 50), 7, M, split)
    inputs = {"B": B, "C": np.random.default_rng(0).standard_normal((50, 7))}
    _, r = _check(alg, inputs)
    assert r.stats.words_received == alg.words(inputs)


@pytest.mark.parametrize("P", [1, 3, 4])
@pytest.mark.parametrize("split", ["rows", "nonzeros"])
def test_sddmm_keeps_the_pattern_and_its_words(P, split):
    rng = np.random.default_rng(1)
    B = gen.skewed(40, 300, 600, seed=P)
    alg = dl.algorithms.sddmm((40, 300), 4, dl.Machine(P), split)
    inputs = {"B": B, "C": rng.standard_normal((40, 4)), "D": rng.standard_normal((4, 300))}
    _, r = _check(alg, inputs)
    assert r.value.nnz == B.nnz
    assert r.stats.words_received == alg.words(inputs)


@pytest.mark.parametrize("P", [1, 3, 4])
def test_tensor_kernels(P):
    rng = np.random.default_rng(2)
    T = gen.zipf_tensor((20, 15, 10), 300, seed=P)
    M = dl.Machine(P)
    for split in ["rows", "nonzeros", "fibers"]:
        alg = dl.algorithms.spmttkrp((20, 15, 10), 4, M, split)
        _check(alg, {"B": T, "C": rng.standard_normal((15, 4)), "D": rng.standard_normal((10, 4))})
    for split in ["rows", "fibers"]:
        _check(dl.algorithms.spttv((20, 15, 10), M, split), {"B": T, "c": rng.standard_normal(10)})
    T2 = gen.zipf_tensor((20, 15, 10), 300, seed=P + 10)
    alg = dl.algorithms.spinnerprod((20, 15, 10), M)
    _, r = _check(alg, {"B": T, "C": T2})
    assert r.stats.words_received == alg.words({"B": T, "C": T2})
    alg = dl.algorithms.spadd3((64, 64), M)
    inputs = {x: gen.uniform(64, 64, 200, seed=s) for s, x in enumerate("BCD")}
    _, r = _check(alg, inputs)
    assert r.stats.total_words == 0


def test_bad_parameters_are_schedule_errors():
    with pytest.raises(dl.ScheduleError, match="split"):
        dl.algorithms.spmv((4, 4), dl.Machine(2), "columns")
    with pytest.raises(dl.ScheduleError, match="1-D machine"):
        dl.algorithms.spmv((4, 4), dl.Machine(2, 2))
