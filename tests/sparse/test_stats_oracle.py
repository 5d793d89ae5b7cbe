"""Every stats field of distributed SpMV and SpMM against an independent oracle.

``sparse_oracle.oracle`` counts words, messages, iterations, peak memory and index words
from the pattern alone by the lowering's counting rules; here it is compared with the
bound plan's prediction (``kernel.stats(inputs)``) and with what a run on the local
runtime measures (``result.stats``), for row and non-zero splits, on uniform, banded,
R-MAT, Zipf-sorted and skewed (empty rows, one row denser than ``nnz/P``) patterns, for
processor counts that do not divide the extents.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from patterns import matrices, skewed, tensor3, uniform, zipf_rows
from sparse_oracle import (
    checkerboard_oracle,
    grid_spmm_oracle,
    oracle,
    row_lengths,
    spmm_kernel,
    spmv_kernel,
    stats_dict,
    ttv_oracle,
)

from distal.sparse.array import SparseArray

PROCS = [1, 2, 3, 4, 8]
KINDS = ["uniform", "banded", "rmat", "zipf", "skewed"]
SIZES = [37, 50, 101]

_CACHE: dict[int, dict[str, sp.csr_array]] = {}


def pattern(kind: str, n: int) -> sp.csr_array:
    """The ``n x n`` matrix of this kind (built once per module)."""
    if n not in _CACHE:
        _CACHE[n] = matrices(n, seed=n)
    return _CACHE[n][kind]


def values(B: sp.csr_array, seed: int) -> sp.csr_array:
    """The same pattern with other values (a run reads values, the stats must not)."""
    out = sp.csr_array(B, copy=True)
    out.data = np.random.default_rng(seed).standard_normal(B.nnz)
    return out


def check(kernel, inputs: dict, expected: dict[str, list[int]], ref: np.ndarray) -> None:
    """Predicted and measured stats both equal the oracle; the value equals the reference."""
    predicted = kernel.stats(inputs)
    assert stats_dict(predicted) == expected
    r = kernel.run(inputs)
    assert stats_dict(r.stats) == expected
    assert r.stats == predicted
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(r.value, ref, rtol=1e-12, atol=1e-12 * scale)


def test_patterns_have_the_structure_the_tests_rely_on():
    """The skewed pattern has empty rows and a row denser than nnz/P (P >= 4); the Zipf one
    is sorted heaviest first; R-MAT's low rows are heavy."""
    for n in SIZES:
        s = row_lengths(pattern("skewed", n))
        assert (s == 0).sum() >= n // 5
        assert s.max() > s.sum() / 4
        z = row_lengths(pattern("zipf", n))
        assert np.all(np.diff(z) <= 0)
        assert z[0] > 4 * z.mean()
        r = row_lengths(pattern("rmat", n))
        assert r[: n // 4].sum() > r[n // 2 :].sum()


@pytest.mark.parametrize("split", ["row", "nz"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", SIZES)
def test_spmv(n, kind, split):
    B = pattern(kind, n)
    x = np.random.default_rng(n).standard_normal(n)
    for P in PROCS:
        k = spmv_kernel(n, n, P, split)
        check(k, {"B": B, "c": x}, oracle(B, P, split), B @ x)


@pytest.mark.parametrize("split", ["row", "nz"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [37, 101])
def test_spmm(n, kind, split):
    B = pattern(kind, n)
    K = 5
    C = np.random.default_rng(n + 1).standard_normal((n, K))
    for P in PROCS:
        k = spmm_kernel(n, n, K, P, split)
        check(k, {"B": B, "C": C}, oracle(B, P, split, K=K), B @ C)


@pytest.mark.parametrize("split", ["row", "nz"])
def test_rectangular(split):
    """``n != m``: the operand's blocks are not the output's."""
    rng = np.random.default_rng(5)
    for B in (uniform(37, 50, 0.1, seed=1), zipf_rows(50, 37, 200, seed=2), skewed(41, 60, 90)):
        n, m = B.shape
        x = rng.standard_normal(m)
        C = rng.standard_normal((m, 8))
        for P in PROCS:
            check(spmv_kernel(n, m, P, split), {"B": B, "c": x}, oracle(B, P, split), B @ x)
            check(
                spmm_kernel(n, m, 8, P, split),
                {"B": B, "C": C},
                oracle(B, P, split, K=8),
                B @ C,
            )


@pytest.mark.parametrize("fmt", ["csr", "dcsr", "coo"])
@pytest.mark.parametrize(
    ("split", "b_dist"), [("row", "nz"), ("nz", "row"), ("row", "col"), ("nz", "col")]
)
def test_matrix_moves_when_its_distribution_is_not_the_cut(split, b_dist, fmt):
    """B laid out by positions under a row split, by rows under a non-zero split, or by
    column blocks: the visited entries B's owners hold elsewhere move, values and index
    words (per format)."""
    rng = np.random.default_rng(11)
    moved = 0
    for kind in KINDS:
        B = pattern(kind, 50)
        x = rng.standard_normal(50)
        for P in PROCS:
            exp = oracle(B, P, split, b_dist=b_dist, fmt=fmt)
            moved += sum(exp["index_words_received"])
            check(spmv_kernel(50, 50, P, split, b_dist, fmt), {"B": B, "c": x}, exp, B @ x)
            C = rng.standard_normal((50, 5))
            exp = oracle(B, P, split, K=5, b_dist=b_dist, fmt=fmt)
            check(spmm_kernel(50, 50, 5, P, split, b_dist, fmt), {"B": B, "C": C}, exp, B @ C)
    assert moved > 0  # the cases do move entries


@pytest.mark.parametrize("split", ["row", "nz"])
def test_canonical_schedules_move_no_index_words(split):
    for kind in KINDS:
        B = pattern(kind, 101)
        for P in PROCS:
            st = spmv_kernel(101, 101, P, split).stats({"B": B})
            assert st.index_words_received == [0] * P == st.index_words_sent


@pytest.mark.parametrize("split", ["row", "nz"])
def test_hull_gather(split):
    """``communicate(c, ..., exact=False)`` fetches the hull of the referenced columns:
    exactly the oracle's hull count, never less than the exact gather."""
    rng = np.random.default_rng(3)
    strict = 0
    for kind in KINDS:
        B = pattern(kind, 50)
        x = rng.standard_normal(50)
        C = rng.standard_normal((50, 5))
        for P in PROCS:
            exp = oracle(B, P, split, hull=True)
            check(spmv_kernel(50, 50, P, split, hull=True), {"B": B, "c": x}, exp, B @ x)
            exact = spmv_kernel(50, 50, P, split).stats({"B": B})
            assert all(
                h >= e for h, e in zip(exp["words_received"], exact.words_received, strict=True)
            )
            strict += sum(exp["words_received"]) > sum(exact.words_received)
            exp = oracle(B, P, split, K=5, hull=True)
            k = spmm_kernel(50, 50, 5, P, split, hull=True)
            check(k, {"B": B, "C": C}, exp, B @ C)
    assert strict > 0  # somewhere the hull is larger


def test_same_pattern_other_values_same_stats():
    """Stats read the pattern, never the values: for two value sets of one pattern, a kernel
    built afresh for each predicts the oracle's stats, and runs with those values measure them."""
    B = pattern("rmat", 50)
    x = np.random.default_rng(4).standard_normal(50)
    expected = oracle(B, 3, "nz")
    sets = [values(B, seed) for seed in (1, 2)]
    assert not np.array_equal(sets[0].data, sets[1].data)
    for Bv in sets:
        check(spmv_kernel(50, 50, 3, "nz"), {"B": Bv, "c": x}, expected, Bv @ x)


def test_level_words_are_the_words_received():
    """On a one-level machine the words received at level 0 are all words received (as for
    dense kernels), predicted and measured."""
    B = pattern("skewed", 50)
    x = np.ones(50)
    for split in ("row", "nz"):
        k = spmv_kernel(50, 50, 4, split)
        st = k.stats({"B": B})
        assert st.level_words_received == [st.words_received]
        assert sum(st.words_received) > 0
        r = k.run({"B": B, "c": x})
        assert r.stats.level_words_received == [r.stats.words_received]


@pytest.mark.parametrize("grid", [(2, 2), (3, 2), (2, 3)])
@pytest.mark.parametrize("kind", KINDS)
def test_spmm_on_a_grid(kind, grid):
    """Rows over machine dimension 0, the dense columns k over dimension 1."""
    import distal as dl

    gx, gy = grid
    n, K = 50, 7
    B = pattern(kind, n)
    M = dl.Machine(gx, gy)
    i, j, k, io, ii, ko, ki = dl.index_vars("i j k io ii ko ki")
    Bt = dl.Tensor("B", (n, n), format="csr", dist="xy -> x*", machine=M)
    Ct = dl.Tensor("C", (n, K), dist="jk -> jk", machine=M)
    At = dl.Tensor("A", (n, K), dist="ik -> ik", machine=M)
    At[i, k] = Bt[i, j] * Ct[j, k]
    s = dl.schedule(At).distribute([i, k], [io, ko], [ii, ki], M).communicate([At, Bt, Ct], ko)
    C = np.random.default_rng(2).standard_normal((n, K))
    check(dl.compile(s), {"B": B, "C": C}, grid_spmm_oracle(B, K, gx, gy), B @ C)


@pytest.mark.parametrize("b_dist", ["xy -> xy", "xy -> (xy)*", "xy -> *(xy)", "xy -> yx"])
@pytest.mark.parametrize("a_dist", ["x -> x0", "x -> xx"])
@pytest.mark.parametrize("grid", [(2, 2), (3, 2)])
@pytest.mark.parametrize("kind", ["uniform", "rmat", "skewed"])
def test_checkerboard_spmv(kind, grid, a_dist, b_dist):
    """B cut in both dimensions; the output has one copy, so the processors off column 0
    (``"x -> x0"``) or off each row's block (``"x -> xx"``) send partial sums. B laid out
    otherwise (by positions, replicated along one machine dimension; transposed) moves from
    the copy serving each processor."""
    import distal as dl

    gx, gy = grid
    n = 50
    B = pattern(kind, n)
    M = dl.Machine(gx, gy)
    i, j, io, ii, jo, ji = dl.index_vars("i j io ii jo ji")
    Bt = dl.Tensor("B", (n, n), format="csr", dist=b_dist, machine=M)
    c = dl.Tensor("c", (n,), dist="x -> *x", machine=M)
    a = dl.Tensor("a", (n,), dist=a_dist, machine=M)
    a[i] = Bt[i, j] * c[j]
    s = dl.schedule(a).distribute([i, j], [io, jo], [ii, ji], M).communicate([a, Bt, c], jo)
    x = np.random.default_rng(3).standard_normal(n)
    exp = checkerboard_oracle(B, gx, gy, a_dist, b_dist)
    check(dl.compile(s), {"B": B, "c": x}, exp, B @ x)


TEN_DIST = {"row": "xyz -> x", "fiber": "xyz -> (xy)", "nz": "xyz -> (xyz)"}


@pytest.mark.parametrize("fmt", ["dss", "csf"])
@pytest.mark.parametrize("split", ["row", "fiber", "nz"])
def test_spttv_with_moving_entries(split, fmt):
    """SpTTV with B laid out by each of the three cuts under each schedule: the 3-level
    pieces' index words, the fetched c and the partial sums of A."""
    import distal as dl

    shape = (23, 11, 13)
    rng = np.random.default_rng(4)
    moved = 0
    for skew in (0.0, 1.5):
        coords, vals = tensor3(shape, 300, seed=7, skew=skew)
        B = SparseArray.from_coo(coords, vals, shape, format=fmt)
        dense = B.to_dense()
        c = rng.standard_normal(shape[2])
        for b_dist in TEN_DIST:
            for P in PROCS:
                M = dl.Machine(P)
                i, j, k, io, ii, f, ff, fp, fo, fi = dl.index_vars("i j k io ii f ff fp fo fi")
                Bt = dl.Tensor("B", shape, format=fmt, dist=TEN_DIST[b_dist], machine=M)
                ct = dl.Tensor("c", (shape[2],), dist="x -> x", machine=M)
                A = dl.Tensor("A", shape[:2], dist="xy -> x", machine=M)
                A[i, j] = Bt[i, j, k] * ct[k]
                s = dl.schedule(A)
                if split == "row":
                    s, o = s.distribute([i], [io], [ii], M), io
                elif split == "fiber":
                    s, o = s.fuse(i, j, f).pos(f, fp, Bt).distribute([fp], [fo], [fi], M), fo
                else:
                    s = s.fuse(i, j, f).fuse(f, k, ff).pos(ff, fp, Bt)
                    s, o = s.distribute([fp], [fo], [fi], M), fo
                exp = ttv_oracle(coords, shape, P, split, b_dist, fmt)
                moved += sum(exp["index_words_received"])
                kern = dl.compile(s.communicate([A, Bt, ct], o))
                check(kern, {"B": B, "c": c}, exp, np.einsum("ijk,k->ij", dense, c))
    assert moved > 0
