"""Sparse distribution pictures: spy plots coloured by processor, with per-processor bars."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="needs matplotlib (viz extra)")

import distal as dl
from distal.sparse.generate import rmat, zipf_tensor
from distal.viz import sparse as viz_sparse

P = 4


def spmv(dist: str, B: dl.SparseArray, nprocs: int = P) -> dl.BoundKernel:
    """SpMV ``a = B c`` bound to ``B``: a row split ("xy -> x") or a non-zero split."""
    n, m = B.shape
    M = dl.Machine(nprocs)
    i, j, io, ii, f, fp, fo, fi = dl.index_vars("i j io ii f fp fo fi")
    Bt = dl.Tensor("B", (n, m), format="csr", dist=dist, machine=M)
    c = dl.Tensor("c", (m,), dist="x -> x", machine=M)
    a = dl.Tensor("a", (n,), dist="x -> x", machine=M)
    a[i] = Bt[i, j] * c[j]
    if dist == "xy -> x":
        s = dl.schedule(a).distribute([i], [io], [ii], M).communicate([a, Bt, c], io)
    else:
        s = (
            dl.schedule(a)
            .fuse(i, j, f)
            .pos(f, fp, Bt)
            .distribute([fp], [fo], [fi], M)
            .communicate([a, Bt, c], fo)
        )
    return dl.compile(s).bind({"B": B})


@pytest.fixture(scope="module")
def matrix() -> dl.SparseArray:
    return rmat(7, edge_factor=8, seed=1)  # 128 x 128, low rows heavy


def bar_heights(fig) -> list[int]:
    return [round(r.get_height()) for r in fig.axes[1].patches]


def owners(bound, name: str = "B") -> np.ndarray:
    plan = bound.binding
    arr = plan.arrays[name]
    return plan.analysis.ownership[name].base(arr, arr.coordinates(), plan.cache)


@pytest.mark.parametrize("dist", ["xy -> x", "xy -> (xy)"])
def test_bars_count_each_processors_entries(matrix, dist):
    bound = spmv(dist, matrix)
    fig = bound.plot_distribution("B")
    counts = np.bincount(owners(bound), minlength=P)
    assert bar_heights(fig) == counts.tolist()
    assert counts.tolist() == [len(x) for x in bound.binding.owned["B"]]
    assert counts.sum() == matrix.nnz
    assert len(fig.axes[0].collections[0].get_offsets()) == matrix.nnz  # every entry drawn


def test_row_split_of_rmat_is_unbalanced_nonzero_split_is_not(matrix):
    rows = bar_heights(spmv("xy -> x", matrix).plot_distribution("B"))
    nonzeros = bar_heights(spmv("xy -> (xy)", matrix).plot_distribution("B"))
    assert max(rows) > 1.5 * matrix.nnz / P
    assert max(nonzeros) - min(nonzeros) <= 1


def test_spy_colours_are_the_owners(matrix):
    bound = spmv("xy -> x", matrix)
    fig = bound.plot_distribution("B")
    from distal.viz._mpl import colours

    drawn = fig.axes[0].collections[0].get_facecolors()
    want = np.array(colours(P))[owners(bound)]
    np.testing.assert_allclose(drawn, want)
    xy = fig.axes[0].collections[0].get_offsets()
    rows, cols = matrix.coordinates()
    np.testing.assert_array_equal(np.asarray(xy), np.stack([cols, rows], axis=1))
    lo, hi = fig.axes[0].get_ylim()
    assert lo > hi  # row 0 at the top


def test_visits_follow_the_procs_entries(matrix):
    bound = spmv("xy -> (xy)", matrix)
    fig = bound.plot_distribution("B", what="visits")
    assert bar_heights(fig) == [len(pr.entries) for pr in bound.binding.procs]
    assert "visiting" in fig.get_suptitle()


def test_saves_png(tmp_path, matrix):
    import matplotlib.image as mpimg

    path = tmp_path / "pics" / "rows.png"
    fig = spmv("xy -> x", matrix).plot_distribution("B", path, title="row split")
    assert fig.get_suptitle().startswith("row split")
    img = mpimg.imread(path)
    assert img.shape[0] > 100
    assert img.shape[1] > 100
    assert float(np.var(img[..., :3])) > 1e-4  # not blank


def test_dense_vector_is_a_strip_of_owned_blocks(matrix):
    bound = spmv("xy -> (xy)", matrix)
    fig = bound.plot_distribution("c")
    n = matrix.shape[1]
    assert bar_heights(fig) == [n // P] * P
    blocks = sorted(
        (round(r.get_x()), round(r.get_x() + r.get_width())) for r in fig.axes[0].patches
    )
    assert blocks == [(p * n // P, (p + 1) * n // P) for p in range(P)]


def test_order3_is_projected_and_output_sparse_visits():
    T = zipf_tensor((12, 10, 8), 150, seed=2)
    M = dl.Machine(2, 2)
    i, j, k, io, jo, ii, ji = dl.index_vars("i j k io jo ii ji")
    B = dl.Tensor("B", T.shape, format="dss", dist="xyz -> xy", machine=M)
    c = dl.Tensor("c", (8,), dist="z -> **", machine=M)
    A = dl.Tensor("A", (12, 10), dist="xy -> xy", machine=M)
    A[i, j] = B[i, j, k] * c[k]
    s = dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M).communicate([A, B, c], jo)
    bound = dl.compile(s).bind({"B": T})
    fig = bound.plot_distribution(B)
    assert "projected onto (i, j)" in fig.get_suptitle()
    assert sum(bar_heights(fig)) == T.nnz
    fig = bound.plot_distribution("c")  # replicated everywhere: every processor holds 8
    assert bar_heights(fig) == [8] * 4
    assert "replicated" in fig.get_suptitle()
    assert sum(bar_heights(bound.plot_distribution("A"))) == 120


def test_sparse_output(matrix):
    M = dl.Machine(3)
    i, j, io, ii = dl.index_vars("i j io ii")
    X = dl.Tensor("X", matrix.shape, format="csr", dist="xy -> x", machine=M)
    Y = dl.Tensor("Y", matrix.shape, format="csr", dist="xy -> x", machine=M)
    d = dl.Tensor("d", (matrix.shape[1],), dist="y -> *", machine=M)
    Y[i, j] = X[i, j] * d[j]
    s = dl.schedule(Y).distribute([i], [io], [ii], M).communicate([X, Y, d], io)
    bound = dl.compile(s).bind({"X": matrix})
    for what in ("owner", "visits"):
        fig = bound.plot_distribution("Y", what=what)
        assert sum(bar_heights(fig)) == matrix.nnz


def test_large_patterns_are_sampled_for_drawing_only(monkeypatch, matrix):
    monkeypatch.setattr(viz_sparse, "MAX_POINTS", 500)
    bound = spmv("xy -> x", matrix)
    fig = bound.plot_distribution("B")
    assert len(fig.axes[0].collections[0].get_offsets()) == 500
    assert "sample of 500" in fig.get_suptitle()
    assert sum(bar_heights(fig)) == matrix.nnz
    again = bound.plot_distribution("B").axes[0].collections[0].get_offsets()
    np.testing.assert_array_equal(again, fig.axes[0].collections[0].get_offsets())


def test_many_processors_get_a_colour_bar(matrix):
    fig = spmv("xy -> (xy)", matrix, nprocs=20).plot_distribution("B")
    assert fig.axes[0].get_legend() is None
    assert len(fig.axes) == 3  # spy, bars, colour bar
    assert sum(bar_heights(fig)) == matrix.nnz


def test_errors_name_the_culprit(matrix, tmp_path):
    bound = spmv("xy -> x", matrix)
    with pytest.raises(dl.InputError, match=r"'Z'.*\['B', 'a', 'c'\]"):
        bound.plot_distribution("Z")
    with pytest.raises(dl.InputError, match="'owner', 'visits'"):
        bound.plot_distribution("B", what="colour")
    with pytest.raises(dl.InputError, match="'c' is dense"):
        bound.plot_distribution("c", what="visits")
    with pytest.raises(dl.DistalUserError, match=r"bad\.txt"):
        bound.plot_distribution("B", tmp_path / "bad.txt")


def test_missing_matplotlib_names_the_extra(monkeypatch, matrix):
    bound = spmv("xy -> x", matrix)
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, mod, None)  # importing it now raises ImportError
    for tensor in ("B", "c"):
        with pytest.raises(dl.NotSupportedYet, match=r"pip install 'distal\[viz\]'"):
            bound.plot_distribution(tensor)


def test_dense_kernel_bound_falls_back_to_its_placement():
    M = dl.Machine(2)
    i, io, ii = dl.index_vars("i io ii")
    x = dl.Tensor("x", (8,), dist="x -> x", machine=M)
    y = dl.Tensor("y", (8,), dist="x -> x", machine=M)
    y[i] = x[i]
    bound = dl.compile(dl.schedule(y).distribute([i], [io], [ii], M)).bind({})
    assert bound.plot_distribution("x") is not None
