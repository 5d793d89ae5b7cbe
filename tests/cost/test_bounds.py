"""Lower-bound formulas: hand-computed values, the HBL cross-check, textbook traffic."""

from __future__ import annotations

import math

import numpy as np
import pytest

import distal as dl
from distal.cost import (
    BoundError,
    bound_ratio,
    contraction_bound,
    contraction_shape,
    matmul_bound,
    matmul_memory_bound,
    mttkrp_bound,
)
from distal.cost.bounds import hbl_bound, matmul_regime


@pytest.mark.parametrize(
    ("m", "n", "k", "P", "want"),
    [
        # worked numbers: 3-D regime 3*(mnk/P)**(2/3) - (mn+nk+mk)/P, then one and two large
        (8192, 8192, 8192, 8, 25_165_824),
        (8192, 8192, 8192, 64, 9_437_184),
        (8192, 8192, 8192, 512, 2_752_512),
        (4096, 4096, 4096, 4, 3 * 4096**2 / 4 ** (2 / 3) - 3 * 4096**2 / 4),
        (65536, 1024, 1024, 16, 983_040),
        (65536, 65536, 256, 64, 3_670_016),
        # case 1 by hand: d2*d3*(1-1/P) = 100*(3/4)
        (1000, 10, 10, 4, 75),
        # case 2 by hand: 2*sqrt(400*100*1/8) - (400+100)/8
        (400, 100, 1, 8, 2 * math.sqrt(5000) - 62.5),
    ],
)
def test_hand_values(m, n, k, P, want):
    assert matmul_bound(m, n, k, P) == pytest.approx(want, rel=1e-12)
    assert matmul_bound(k, m, n, P) == pytest.approx(want, rel=1e-12)  # order-free


def test_regimes_and_continuity():
    assert matmul_regime(1000, 10, 10, 4) == 1
    assert matmul_regime(400, 100, 1, 8) == 2
    assert matmul_regime(64, 64, 64, 8) == 3
    # continuous at the case boundaries P = d1/d2 and P = d1*d2/d3^2
    for d1, d2, d3 in [(4096, 256, 16), (1000, 100, 10)]:
        for P in (d1 / d2, d1 * d2 / d3**2):
            lo, hi = (
                matmul_bound(d1, d2, d3, P * (1 - 1e-9)),
                matmul_bound(d1, d2, d3, P * (1 + 1e-9)),
            )
            assert lo == pytest.approx(hi, rel=1e-6)


@pytest.mark.parametrize("seed", range(20))
def test_formula_equals_hbl_minimisation(seed):
    rng = np.random.default_rng(seed)
    m, n, k = (int(x) for x in rng.integers(1, 5000, 3))
    P = int(rng.integers(2, 5000))
    F = m * n * k / P
    h = hbl_bound(
        F, (0.5, F / n, m * k), [(F / m, k * n), (F / k, m * n)], 0.5, (m * k + k * n + m * n) / P
    )
    assert matmul_bound(m, n, k, P) == pytest.approx(h, rel=1e-6, abs=1e-6)


def test_memory_bound():
    assert matmul_memory_bound(1024, 1024, 1024, 16, 65536) == pytest.approx(
        2 * 1024**3 / (16 * 256) - 2 * 65536
    )
    # with memory the bound is the larger of the two
    ind = matmul_bound(1024, 1024, 1024, 16)
    assert matmul_bound(1024, 1024, 1024, 16, memory=65536) == max(
        ind, matmul_memory_bound(1024, 1024, 1024, 16, 65536)
    )
    assert matmul_memory_bound(1024, 1024, 1024, 16, 1e9) == 0.0


def test_contraction_grouping_and_batch():
    ext = dict(a=4, b=8, c=16, d=32, e=2)
    sh = contraction_shape("abc,cd->abd", ext)
    assert (sh.m, sh.n, sh.k, sh.batch) == (32, 32, 16, 1)
    assert contraction_bound("abc,cd->abd", ext, 8) == matmul_bound(32, 32, 16, 8)
    # batch e: P/e processors per product; no traffic needed when P <= batch
    assert contraction_bound("eab,ebc->eac", ext, 8) == matmul_bound(4, 16, 8, 4)
    assert contraction_bound("eab,ebc->eac", ext, 2) == 0.0
    with pytest.raises(BoundError, match="not a matrix product"):
        contraction_bound("ab,bc->a", ext, 4)
    with pytest.raises(BoundError, match="extent"):
        contraction_bound("ab,bc->ac", {"a": 2}, 4)


def test_contraction_bound_of_a_statement():
    i, j, k = dl.index_vars("i j k")
    A, B, C = (dl.Tensor(n, s) for n, s in (("A", (6, 7)), ("B", (6, 5)), ("C", (5, 7))))
    A[i, j] = B[i, k] * C[k, j]
    assert contraction_bound(A, P=4) == matmul_bound(6, 7, 5, 4)


def _cube_3d(n: int, g: int):
    """The one-copy 3-D schedule with a serial split of k: joint partitions spread each
    tensor over the whole cube, k is divided into g serial chunks and distributed inside
    each (public API only)."""
    M = dl.Machine(g, g, g)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> iji", machine=M)
    B = dl.Tensor("B", (n, n), dist="ik -> ikk", machine=M)
    C = dl.Tensor("C", (n, n), dist="kj -> kjk", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ko, ii, ji, ki, ks, kr = dl.index_vars("io jo ko ii ji ki ks kr")
    s = (
        dl.schedule(A)
        .divide(k, ks, kr, g)
        .distribute([i, j, kr], [io, jo, ko], [ii, ji, ki], M)
        .reorder([ks, ii, ji])
        .communicate([B, C], ks)
    )
    return dl.compile(s)


@pytest.mark.parametrize(("n", "g"), [(8, 2), (48, 2), (64, 4)])
def test_3d_attains_the_square_bound_exactly(n, g):
    kern = _cube_3d(n, g)
    st = kern.stats()
    assert st.max_words_received == pytest.approx(matmul_bound(n, n, n, g**3), rel=1e-12)
    assert bound_ratio(kern) == pytest.approx(1.0, rel=1e-12)
    rng = np.random.default_rng(0)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    np.testing.assert_allclose(kern(B=b, C=c), b @ c, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("g", [2, 4])
def test_summa_traffic_is_above_the_bound(g):
    n = 16 * g
    M = dl.Machine(g, g)
    i, j, k = dl.index_vars("i j k")
    A, B, C = (dl.Tensor(x, (n, n), dist="xy -> xy", machine=M) for x in "ABC")
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji, ko, ki = dl.index_vars("io jo ii ji ko ki")
    s = (
        dl.schedule(A)
        .distribute([i, j], [io, jo], [ii, ji], M)
        .divide(k, ko, ki, g)
        .reorder([ko, ii, ji])
        .communicate(A, jo)
        .communicate([B, C], ko)
    )
    st = dl.compile(s).stats()
    assert st.max_words_received == 2 * (g - 1) * (n // g) ** 2
    assert st.max_words_received >= matmul_bound(n, n, n, g * g)


def test_mttkrp_closed_form_and_attained():
    # the tensor-stationary regime: N*R*(I/P)^(1/N) - R*sum(I_n)/P
    dims, R, P = [64, 64, 64], 64, 64
    want = 3 * R * (64**3 / P) ** (1 / 3) - R * sum(dims) / P
    assert mttkrp_bound(dims, R, P) == pytest.approx(want, rel=1e-6)
    # attained by the stationary-tensor algorithm on a 4x4x4 grid, one copy of everything
    M = dl.Machine(4, 4, 4)
    i, j, k, r = dl.index_vars("i j k r")
    A = dl.Tensor("A", (64, R), dist="ir -> irr", machine=M)
    X = dl.Tensor("X", (64, 64, 64), dist="ijk -> ijk", machine=M)
    B = dl.Tensor("B", (64, R), dist="jr -> rjr", machine=M)
    C = dl.Tensor("C", (64, R), dist="kr -> rrk", machine=M)
    A[i, r] = X[i, j, k] * B[j, r] * C[k, r]
    io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
    kern = dl.compile(dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M))
    assert kern.stats().max_words_received == pytest.approx(want, rel=1e-9)
    assert bound_ratio(kern) == pytest.approx(1.0, rel=1e-6)
    # large rank: the tensor is worth moving; the bound drops below the stationary cost
    big = mttkrp_bound([16, 16, 16], 4096, 64)
    assert big < 3 * 4096 * (16**3 / 64) ** (1 / 3) - 4096 * 48 / 64
    assert big > 0


def test_bad_arguments():
    with pytest.raises(BoundError, match="P"):
        matmul_bound(4, 4, 4, 0)
    with pytest.raises(BoundError, match="order"):
        mttkrp_bound([4], 2, 4)
    assert matmul_bound(4, 4, 4, 1) == 0.0
    assert math.isfinite(mttkrp_bound([3, 5, 7, 2], 3, 5))
