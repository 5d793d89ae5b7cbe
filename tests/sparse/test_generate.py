"""The structured sparse generators: deterministic for a seed, well-formed in every format
(round trips through scipy and between formats), exact sizes where promised, and the
structure each one claims (heavy rows, sorted lengths, the band, empty and dense rows)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distal.errors import InputError, ShapeError
from distal.sparse import SparseArray
from distal.sparse import generate as gen

MATRIX_FORMATS = ["csr", "dcsr", "coo", "csc"]


def row_lengths(a: SparseArray) -> np.ndarray:
    return np.diff(a.with_format("csr").levels[1].pos)


def same(a: SparseArray, b: SparseArray) -> bool:
    """Equal shapes, patterns and values (compared as CSR)."""
    x, y = a.with_format("csr"), b.with_format("csr")
    return (
        x.shape == y.shape
        and np.array_equal(x.levels[1].pos, y.levels[1].pos)
        and np.array_equal(x.levels[1].crd, y.levels[1].crd)
        and np.array_equal(x.vals, y.vals)
    )


def check_matrix(a: SparseArray) -> None:
    """``a`` has distinct entries (scipy sums no duplicates), survives a scipy round trip
    and stores no zero."""
    m = a.to_scipy().tocsr()
    m.sum_duplicates()
    assert m.nnz == a.nnz
    back = SparseArray.from_scipy(m, "csr")
    assert same(back, a)
    assert np.all(a.vals > 0)


MATRICES = {
    "rmat": lambda fmt, seed=0: gen.rmat(10, edge_factor=8, seed=seed, format=fmt),
    "zipf_rows": lambda fmt, seed=0: gen.zipf_rows(500, 400, 20_000, seed=seed, format=fmt),
    "banded": lambda fmt, seed=0: gen.banded(300, 9, seed=seed, format=fmt),
    "uniform": lambda fmt, seed=0: gen.uniform(300, 200, 5_000, seed=seed, format=fmt),
    "skewed": lambda fmt, seed=0: gen.skewed(400, 3_000, 10_000, seed=seed, format=fmt),
    "road_network": lambda fmt, seed=0: gen.road_network(40, tile=8, seed=seed, format=fmt),
    "web_graph": lambda fmt, seed=0: gen.web_graph(3_000, seed=seed, format=fmt),
}


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_matrix_generators_are_deterministic_and_well_formed(name: str) -> None:
    make = MATRICES[name]
    a = make("csr")
    assert a.format.levels == "dc"
    assert same(a, make("csr"))
    other = make("csr", seed=1)
    assert not same(a, other)
    check_matrix(a)
    for fmt in MATRIX_FORMATS[1:]:
        b = make(fmt)
        assert b.nnz == a.nnz
        assert same(b, a), fmt


def test_rmat_shape_edges_and_heavy_low_rows() -> None:
    a = gen.rmat(12, edge_factor=16)
    assert a.shape == (4096, 4096)
    drawn = 16 * 4096
    assert 0.8 * drawn < a.nnz <= drawn  # duplicates summed
    assert a.vals.sum() <= drawn  # one value in (0, 1] per drawn edge
    lengths = row_lengths(a)
    assert lengths[0] == lengths.max()
    assert lengths[0] > 50 * max(np.median(lengths), 1)
    # unpermuted: the first 1/16 of the rows draw (a + b)**4 = 33% of the edges
    assert lengths[: 4096 // 16].sum() > 0.25 * a.nnz
    coo = a.to_scipy().tocoo()
    assert np.any(coo.row == coo.col)  # self-loops kept


def test_rmat_uniform_probabilities_spread_evenly() -> None:
    a = gen.rmat(10, edge_factor=16, a=0.25, b=0.25, c=0.25)
    lengths = row_lengths(a)
    assert lengths.max() < 4 * lengths.mean()


def test_rmat_rejects_bad_parameters() -> None:
    with pytest.raises(InputError):
        gen.rmat(5, a=0.6, b=0.3, c=0.3)
    with pytest.raises(InputError):
        gen.rmat(-1)
    with pytest.raises(InputError):
        gen.rmat(40)


def test_zipf_rows_exact_nnz_sorted_lengths_distinct_columns() -> None:
    a = gen.zipf_rows(1000, 20_000, 50_000, s=1.2)
    assert a.shape == (1000, 20_000)
    assert a.nnz == 50_000
    lengths = row_lengths(a)
    assert np.all(np.diff(lengths) <= 0)
    assert lengths[0] > 50_000 / 16  # heavier than a sixteenth of the matrix
    assert lengths[0] > 20 * np.median(lengths)
    # columns strictly increasing in each row is checked by the CSR constructor; they
    # span the whole row
    m = a.to_scipy()
    assert m.indices[m.indptr[5] : m.indptr[6]].max() > 10_000


def test_zipf_rows_caps_full_rows_and_unsorted_option() -> None:
    a = gen.zipf_rows(100, 50, 2_000, s=1.5)
    lengths = row_lengths(a)
    assert a.nnz == 2_000
    assert lengths[0] == 50  # capped at n_cols, the rest spread by the same law
    b = gen.zipf_rows(1000, 800, 50_000, sort_heaviest_first=False)
    lb = row_lengths(b)
    assert b.nnz == 50_000
    assert np.array_equal(np.sort(lb)[::-1], row_lengths(gen.zipf_rows(1000, 800, 50_000)))
    assert np.any(np.diff(lb) > 0)
    with pytest.raises(InputError):
        gen.zipf_rows(10, 10, 101)


def test_banded_only_in_band_and_whole_band() -> None:
    n, bw = 200, 7
    a = gen.banded(n, bw)
    half = bw // 2
    coo = a.to_scipy().tocoo()
    assert np.all(np.abs(coo.row - coo.col) <= half)
    i, j = np.indices((n, n))
    assert a.nnz == int(np.count_nonzero(np.abs(i - j) <= half))
    assert np.all(row_lengths(a)[half:-half] == 2 * half + 1)
    assert gen.banded(5, 0).nnz == 5  # the diagonal
    assert gen.banded(0, 3).nnz == 0


def test_uniform_exact_distinct_and_spread() -> None:
    a = gen.uniform(200, 300, 12_000)
    assert a.shape == (200, 300)
    assert a.nnz == 12_000
    lengths = row_lengths(a)
    assert lengths.max() < 2 * lengths.mean()
    assert gen.uniform(4, 5, 20).nnz == 20  # every position
    with pytest.raises(InputError):
        gen.uniform(4, 5, 21)


def test_skewed_empty_rows_and_dense_row() -> None:
    n_rows, nnz = 400, 10_000
    a = gen.skewed(n_rows, 3_000, nnz, dense_row_fraction=0.3, empty_fraction=0.25)
    assert a.nnz == nnz
    lengths = row_lengths(a)
    assert lengths[n_rows // 2] == 3_000
    assert lengths[n_rows // 2] > nnz / 4
    assert np.count_nonzero(lengths == 0) == 100
    light = np.delete(lengths, n_rows // 2)
    light = light[light > 0]
    assert light.max() - light.min() <= 1
    b = gen.skewed(400, 3_000, 10_000, dense_row=0)
    assert row_lengths(b)[0] == 3_000
    with pytest.raises(InputError):
        gen.skewed(10, 10, 100, dense_row_fraction=0.5)  # a row of 50 in 10 columns
    with pytest.raises(InputError):
        gen.skewed(10, 100, 100, dense_row=10)


def test_zipf_tensor_exact_nnz_heavy_slices_all_formats() -> None:
    shape = (60, 50, 40)
    a = gen.zipf_tensor(shape, 6_000, s=1.1)
    assert a.shape == shape
    assert a.nnz == 6_000
    assert a.format.levels == "dcc"
    coords = a.coordinates()
    assert len({tuple(c) for c in coords.T}) == a.nnz
    for mode, extent in enumerate(shape):
        per_slice = np.bincount(coords[mode], minlength=extent)
        assert per_slice[:5].mean() > 3 * per_slice[-10:].mean()
    dense = a.to_dense()
    assert np.all(dense[tuple(coords)] > 0)
    for fmt in ("csf", "dds", "coo"):
        b = gen.zipf_tensor(shape, 6_000, format=fmt)
        assert np.array_equal(b.to_dense(), dense), fmt
    assert np.array_equal(gen.zipf_tensor(shape, 6_000).to_dense(), dense)
    assert not np.array_equal(gen.zipf_tensor(shape, 6_000, seed=3).to_dense(), dense)


def test_zipf_tensor_limits() -> None:
    with pytest.raises(ShapeError):
        gen.zipf_tensor((4, 4), 3)
    with pytest.raises(InputError):
        gen.zipf_tensor((2, 2, 2), 9)
    assert gen.zipf_tensor((2, 2, 2), 8).nnz == 8
    assert gen.zipf_tensor((3, 3, 3), 0).nnz == 0


def test_generated_matrix_matches_scipy_arithmetic() -> None:
    """A format round trip is not enough: the CSR arrays must mean the same matrix to
    scipy (products agree with a dense reference)."""
    a = gen.zipf_rows(300, 200, 6_000)
    m = a.to_scipy()
    x = np.random.default_rng(0).random(200)
    np.testing.assert_allclose(m @ x, a.to_dense() @ x, rtol=1e-12)
    assert isinstance(m, sp.csr_array)


def test_fem_stiffness_pattern_symmetry_and_definiteness() -> None:
    """Every unknown of a node coupled with every unknown of the 3 x 3 x 3 nodes around
    it (27 * dofs inside, fewer on the boundary), symmetric, positive definite; scipy's
    CG converges on it; a round trip through every format keeps it."""
    n, dofs = 5, 3
    a = gen.fem_stiffness(n, dofs)
    assert a.shape == (n**3 * dofs,) * 2
    m = a.to_scipy().tocsr()
    node = lambda u: np.unravel_index(u // dofs, (n, n, n))  # noqa: E731
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    near = np.max(np.abs(np.array(node(rows)) - np.array(node(m.indices))), axis=0)
    assert near.max() == 1  # only the block around each node
    interior = (1 * n + 1) * n + 1  # node (1, 1, 1): all 27 neighbours inside
    assert np.diff(m.indptr)[interior * dofs] == 27 * dofs
    corner_len = np.diff(m.indptr)[0]
    assert corner_len == 8 * dofs
    assert abs(m - m.T).max() == 0
    dense = m.toarray()
    assert np.linalg.eigvalsh(dense).min() > 0
    assert np.all(np.diag(dense) > np.abs(dense).sum(axis=1) - np.abs(np.diag(dense)))
    b = np.random.default_rng(0).standard_normal(m.shape[0])
    x, info = sp.linalg.cg(m, b, rtol=1e-10, atol=0.0)
    assert info == 0
    np.testing.assert_allclose(m @ x, b, rtol=1e-8, atol=1e-8)
    for fmt in MATRIX_FORMATS[1:]:
        assert same(gen.fem_stiffness(n, dofs, format=fmt), a), fmt
    assert same(gen.fem_stiffness(n, dofs), a)
    assert not same(gen.fem_stiffness(n, dofs, seed=1), a)


def test_road_network_is_a_symmetric_grid_graph_numbered_by_tiles() -> None:
    """About ``4 * keep`` links a junction, symmetric, no self-loop, at most 4 a row, and
    every entry between junctions of neighbouring tiles (numbered tile by tile)."""
    side, tile = 64, 8
    a = gen.road_network(side, keep=0.7, tile=tile)
    m = a.to_scipy().tocsr()
    assert m.shape == (side * side,) * 2
    assert abs(m - m.T).max() == 0
    assert not m.diagonal().any()
    lengths = np.diff(m.indptr)
    assert lengths.max() <= 4
    assert 2.6 < lengths.mean() < 3.0
    rows = np.repeat(np.arange(m.shape[0]), lengths)
    per_tile = tile * tile  # junctions of one tile take consecutive numbers
    tiles_apart = np.abs(rows // per_tile - m.indices // per_tile)
    assert set(np.unique(tiles_apart)) <= {0, 1, side // tile}
    full = gen.road_network(side, keep=1.0, tile=tile).to_scipy()
    assert full.nnz == 2 * 2 * side * (side - 1)  # every street, both ways


def test_web_graph_sites_and_popular_pages() -> None:
    """Most links stay in their page's site (consecutive numbers); the links drawn are
    ``n * degree`` before duplicates; in-degrees are heavy-tailed (a popular page
    receives far more than the mean)."""
    n, degree = 20_000, 8
    a = gen.web_graph(n, degree=degree, local=0.75, site_pages=64)
    m = a.to_scipy().tocsr()
    assert m.shape == (n, n)
    assert 0.7 * n * degree < m.nnz <= n * degree
    assert abs(a.vals.sum() - n * degree / 2) < 0.05 * n * degree  # one (0, 1] per draw
    indeg = np.bincount(m.indices, minlength=n)
    assert indeg.max() > 20 * indeg.mean()
    only_local = gen.web_graph(n, degree=degree, local=1.0, site_pages=64).to_scipy().tocsr()
    rows = np.repeat(np.arange(n), np.diff(only_local.indptr))
    assert np.median(np.abs(rows - only_local.indices)) < 64 * 8


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: gen.fem_stiffness(0), "n must be"),
        (lambda: gen.fem_stiffness(3, dofs=0), "dofs must be"),
        (lambda: gen.road_network(10, keep=1.5), "keep must be"),
        (lambda: gen.road_network(10, tile=0), "tile must be"),
        (lambda: gen.web_graph(100, local=-0.1), "local must be"),
        (lambda: gen.web_graph(0), "n must be"),
        (lambda: gen.web_graph(100, degree=-1), "degree must be"),
    ],
)
def test_user_matrix_generators_refuse_bad_parameters(make: object, match: str) -> None:
    with pytest.raises(InputError, match=match):
        make()  # type: ignore[operator]
