"""SparseArray: layouts, conversions (scipy, pydata sparse, numpy), the fingerprint and the
pattern queries, each checked against the source's dense form or a plain-Python oracle."""

from __future__ import annotations

import math
import pickle
import re
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import distal as dl
import sparse
from distal.sparse import Level, SparseArray, as_sparse

FORMATS_2D = ["csr", "csc", "dcsr", "dcsc", "coo", "csf", "dense"]
CUSTOM_2D = [dl.Format("qs", order=(1, 0)), dl.Format("cd"), dl.Format("dq"),
             dl.Format("cd", order=(1, 0))]  # fmt: skip
FORMATS_3D = ["csf", "dss", "dds", "coo", "dense", dl.Format("cdc", order=(2, 0, 1)),
              dl.Format("qsc"), dl.Format("dqs", order=(1, 2, 0)), dl.Format("ccd")]  # fmt: skip


# -- plain-Python oracles -------------------------------------------------------------------------


def walk(a: SparseArray) -> list[tuple[list[int], list[int]]]:
    """Every last-level position in order, as (coordinates per level, position per level),
    by a recursive walk of the levels with Python loops."""
    out: list[tuple[list[int], list[int]]] = []

    def rec(k: int, parent: int, coords: list[int], positions: list[int]) -> None:
        if k == len(a.levels):
            out.append((coords, positions))
            return
        lv = a.levels[k]
        if lv.kind == "d":
            for c in range(lv.size):
                p = parent * lv.size + c
                rec(k + 1, p, [*coords, c], [*positions, p])
        elif lv.kind in "cq":
            for p in range(int(lv.pos[parent]), int(lv.pos[parent + 1])):
                rec(k + 1, p, [*coords, int(lv.crd[p])], [*positions, p])
        else:
            rec(k + 1, parent, [*coords, int(lv.crd[parent])], [*positions, parent])

    rec(0, 0, [], [])
    assert len(out) == a.nnz
    return out


def dense_of_walk(a: SparseArray, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """The dense array of positions ``[lo, hi)`` from the walk (storage coords permuted back)."""
    hi = a.nnz if hi is None else hi
    d = np.zeros(a.shape, dtype=a.dtype)
    for p, (coords, _) in enumerate(walk(a)):
        if lo <= p < hi:
            logical = [0] * a.ndim
            for k, c in enumerate(coords):
                logical[a.format.order[k]] = c
            d[tuple(logical)] = a.vals[p]
    return d


def top_slice(a: SparseArray, lo: int, hi: int) -> tuple[slice, ...]:
    """The index of rows ``[lo, hi)`` of the top storage dimension."""
    idx = [slice(None)] * a.ndim
    idx[a.format.order[0]] = slice(lo, hi)
    return tuple(idx)


def matrix_with_dense_row() -> sp.csr_array:
    d = np.zeros((6, 10))
    d[2, :] = np.arange(1, 11)
    d[0, 3] = 11.0
    d[5, 9] = 12.0
    d[4, 0] = 13.0
    return sp.csr_array(d)


def matrices() -> dict[str, sp.sparray]:
    rng = np.random.default_rng(7)
    empty_rows = np.zeros((7, 5))
    empty_rows[[1, 4], :] = rng.integers(1, 9, size=(2, 5))
    empty_rows[6, 2] = 3.0
    return {
        "random": sp.random_array((8, 9), density=0.3, rng=rng, format="csr"),
        "empty_rows": sp.csr_array(empty_rows),
        "dense_row": matrix_with_dense_row(),
        "empty": sp.csr_array((5, 4)),
        "one": sp.csr_array(([2.5], ([3], [1])), shape=(4, 3)),
        "full": sp.csr_array(np.arange(1.0, 13.0).reshape(3, 4)),
    }


MATRICES = matrices()


# -- layouts --------------------------------------------------------------------------------------


def test_csr_layout_of_a_small_matrix() -> None:
    """The picture in docs/sparse.md."""
    d = np.array([[5, 0, 0, 1], [0, 0, 0, 0], [0, 2, 3, 0]], dtype=float)
    a = SparseArray.from_dense(d, "csr")
    assert [lv.kind for lv in a.levels] == ["d", "c"]
    ref = sp.csr_array(d)  # scipy's own CSR arrays of the same matrix
    assert a.pos[1].tolist() == ref.indptr.tolist()
    assert a.crd[1].tolist() == ref.indices.tolist()
    assert a.vals.tolist() == ref.data.tolist()
    assert a.levels[0].size == 3
    assert a.pos[0] is None
    assert a.crd[0] is None
    assert a.pos[1].tolist() == [0, 2, 2, 4]
    assert a.crd[1].tolist() == [0, 3, 1, 2]
    assert a.vals.tolist() == [5, 1, 2, 3]
    assert a.pos[1].dtype == np.int64
    assert a.crd[1].dtype == np.int64
    c = SparseArray.from_dense(d, "csc")
    assert c.pos[1].tolist() == [0, 1, 2, 3, 4]
    assert c.crd[1].tolist() == [0, 2, 2, 0]
    assert c.vals.tolist() == [5, 2, 3, 1]
    dcsr = SparseArray.from_dense(d, "dcsr")
    assert dcsr.pos[0].tolist() == [0, 2]
    assert dcsr.crd[0].tolist() == [0, 2]
    assert dcsr.pos[1].tolist() == [0, 2, 4]
    assert dcsr.crd[1].tolist() == [0, 3, 1, 2]
    coo = SparseArray.from_dense(d, "coo")
    assert coo.pos[0].tolist() == [0, 4]
    assert coo.crd[0].tolist() == [0, 0, 2, 2]
    assert coo.pos[1] is None
    assert coo.crd[1].tolist() == [0, 3, 1, 2]
    dense = SparseArray.from_dense(d, "dense")
    assert dense.vals.tolist() == d.ravel().tolist()
    assert all(lv.pos is None and lv.crd is None for lv in dense.levels)


def test_dense_levels_below_sparse_ones_store_whole_fibers() -> None:
    d = np.zeros((3, 4))
    d[0, 1], d[2, 3] = 1.0, 2.0
    a = SparseArray.from_dense(d, dl.Format("cd"))
    assert a.crd[0].tolist() == [0, 2]
    assert a.nnz == 8
    assert a.vals.tolist() == [0, 1, 0, 0, 0, 0, 0, 2]
    assert np.array_equal(a.to_dense(), d)
    # converting to a compressed format drops the zeros the dense level stored
    assert a.with_format("csr").nnz == 2
    assert a.to_scipy().nnz == 2


def test_arrays_are_read_only_and_copied() -> None:
    pos, crd, vals = np.array([0, 1, 1]), np.array([2]), np.array([4.0])
    a = SparseArray((2, 3), "csr", [None, pos], [None, crd], vals)
    pos[1], crd[0], vals[0] = 0, 0, 0.0
    assert a.pos[1].tolist() == [0, 1, 1]
    assert a.crd[1].tolist() == [2]
    assert a.vals[0] == 4.0
    for arr in (a.pos[1], a.crd[1], a.vals):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1


@pytest.mark.parametrize(
    ("shape", "fmt", "pos", "crd", "vals", "culprit"),
    [
        ((2, 3), "csr", [None, [0, 1]], [None, [0]], [1.0], r"pos of level 1 has 2 entries"),
        ((2, 3), "csr", [None, [1, 1, 1]], [None, [0]], [1.0], r"start at 0"),
        ((2, 3), "csr", [None, [0, 2, 1]], [None, [0]], [1.0], r"never decrease"),
        ((2, 3), "csr", [None, [0, 1, 2]], [None, [0]], [1.0], r"end at len\(crd\)"),
        ((2, 3), "csr", [None, [0, 2, 2]], [None, [1, 1]], [1.0, 2.0], r"strictly increasing"),
        ((2, 3), "csr", [None, [0, 2, 2]], [None, [2, 1]], [1.0, 2.0], r"strictly increasing"),
        ((2, 3), "csr", [None, [0, 1, 1]], [None, [3]], [1.0], r"outside \[0, 3\)"),
        ((2, 3), "csr", [None, [0, 1, 1]], [None, [-1]], [1.0], r"outside"),
        ((2, 3), "csr", [None, [0, 1, 1]], [None, [0]], [1.0, 2.0], r"vals has 2 entries"),
        ((2, 3), "csr", [[0, 2], [0, 1, 1]], [None, [0]], [1.0], r"dense"),
        ((2, 3), "csr", [None, None], [None, [0]], [1.0], r"needs pos and crd"),
        ((2, 3), "csr", [None], [None], [1.0], r"one pos and one crd entry per level"),
        ((2, 3), "coo", [[0, 2], [0, 1]], [[0, 1], [0, 1]], [1.0, 2.0], r"singleton"),
        ((2, 3), "coo", [[0, 2], None], [[1, 0], [0, 1]], [1.0, 2.0], r"non-decreasing"),
        ((2, 3), "coo", [[0, 2], None], [[0, 1], [0]], [1.0, 2.0], r"singleton level 1 has 1"),
        ((2, 3), "csr", [None, [0.0, 1.0, 1.0]], [None, [0]], [1.0], r"integers"),
        ((2, 3), "csr", [None, [0, 1, 1]], [None, [0]], ["x"], r"numeric"),
    ],
)
def test_malformed_arrays(
    shape: tuple[int, ...], fmt: str, pos: list, crd: list, vals: list, culprit: str
) -> None:
    with pytest.raises(dl.InputError, match=culprit):
        SparseArray(shape, fmt, pos, crd, vals)


def test_well_formed_arrays_from_parts() -> None:
    # a duplicate coordinate in a q level under distinct singleton coordinates is fine
    a = SparseArray((2, 3), "coo", [[0, 3], None], [[0, 0, 1], [0, 2, 1]], [1.0, 2.0, 3.0])
    assert np.array_equal(a.to_dense(), [[1, 0, 2], [0, 3, 0]])
    v = SparseArray((5,), "csf", [[0, 2]], [[1, 4]], [7, 8])
    assert np.array_equal(v.to_dense(), [0, 7, 0, 0, 8])
    s = SparseArray((), dl.Format(""), [], [], [3.5])
    assert s.to_dense().shape == ()
    assert s.to_dense() == 3.5
    with pytest.raises(dl.ShapeError):
        SparseArray((2, -1), "csr", [None, [0, 0, 0]], [None, []], [])
    with pytest.raises(dl.NotationError, match="csx"):
        SparseArray((2, 3), "csx", [None, [0, 0, 0]], [None, []], [])


# -- scipy ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MATRICES))
@pytest.mark.parametrize("fmt", FORMATS_2D + CUSTOM_2D, ids=str)
def test_scipy_round_trip(name: str, fmt: object) -> None:
    m = MATRICES[name]
    d = m.toarray()
    for src in (m, sp.csc_array(m), sp.coo_array(m), sp.csr_matrix(m), sp.lil_matrix(m)):
        a = SparseArray.from_scipy(src, fmt)  # type: ignore[arg-type]
        assert a.shape == d.shape
        assert a.dtype == d.dtype
        assert np.array_equal(a.to_dense(), d)
        assert np.array_equal(dense_of_walk(a), d)
        back = a.to_scipy()
        assert sp.issparse(back)
        assert back.shape == d.shape
        assert np.array_equal(back.toarray(), d)
    if not a.format.levels.endswith("d") and not a.format.is_dense:
        assert a.nnz == m.nnz


def test_to_scipy_kinds() -> None:
    m = MATRICES["random"]
    assert SparseArray.from_scipy(m, "csr").to_scipy().format == "csr"
    assert SparseArray.from_scipy(m, "csc").to_scipy().format == "csc"
    assert SparseArray.from_scipy(m, "coo").to_scipy().format == "coo"
    with pytest.raises(dl.ShapeError, match="order 3"):
        SparseArray.from_dense(np.ones((2, 2, 2)), "csf").to_scipy()


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("fmt", FORMATS_2D, ids=str)
def test_scipy_coo_with_duplicates_unsorted(index_dtype: type, fmt: str) -> None:
    rows = np.array([3, 0, 3, 1, 0, 3, 2, 0], dtype=index_dtype)
    cols = np.array([1, 4, 1, 0, 4, 0, 2, 0], dtype=index_dtype)
    vals = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    m = sp.coo_matrix((vals, (rows, cols)), shape=(5, 6))
    expected = np.zeros((5, 6))
    np.add.at(expected, (rows, cols), vals)
    a = SparseArray.from_scipy(m, fmt)
    assert np.array_equal(a.to_dense(), expected)
    if fmt != "dense":
        assert a.nnz == 6  # (3,1) and (0,4) summed
    assert all(c is None or c.dtype == np.int64 for c in a.crd)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", ["csr", "csc"])
def test_scipy_non_canonical_compressed_input(index_dtype: type, kind: str) -> None:
    """Unsorted indices and duplicates inside a row (column) of a CSR (CSC) matrix."""
    indptr = np.array([0, 3, 3, 5], dtype=index_dtype)
    indices = np.array([2, 0, 2, 1, 0], dtype=index_dtype)
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    make = sp.csr_matrix if kind == "csr" else sp.csc_matrix
    m = make((data, indices, indptr), shape=(3, 3))
    expected = m.toarray()
    a = SparseArray.from_scipy(m, kind)
    assert a.nnz == 4
    assert np.array_equal(a.to_dense(), expected)
    assert a.pos[1].tolist() == [0, 2, 2, 4]
    assert a.crd[1].tolist() == [0, 2, 0, 1]
    assert m.indices.tolist() == [2, 0, 2, 1, 0]  # the input is left alone


def test_scipy_explicit_zeros_stay_stored() -> None:
    m = sp.csr_array((np.array([0.0, 2.0]), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    for fmt in ["csr", "coo", "dcsc"]:
        a = SparseArray.from_scipy(m, fmt)
        assert a.nnz == 2
        assert np.array_equal(a.to_dense(), [[0, 0], [0, 2]])


def test_scipy_empty_matrix() -> None:
    for fmt in FORMATS_2D:
        a = SparseArray.from_scipy(sp.csr_array((4, 3)), fmt)
        assert a.nnz == (12 if fmt == "dense" else 0)
        assert np.array_equal(a.to_dense(), np.zeros((4, 3)))
        assert a.to_scipy().nnz == 0
    z = SparseArray.from_scipy(sp.csr_array((0, 3)), "csr")
    assert z.shape == (0, 3)
    assert z.to_dense().shape == (0, 3)


def test_scipy_dtypes_are_kept() -> None:
    for dtype in (np.float32, np.int64, np.complex128):
        m = sp.csr_array(np.array([[0, 1], [2, 0]], dtype=dtype))
        assert SparseArray.from_scipy(m, "coo").dtype == dtype
        assert SparseArray.from_scipy(m, "csr").to_scipy().dtype == dtype


def test_from_scipy_rejects_other_objects() -> None:
    with pytest.raises(dl.InputError, match="scipy"):
        SparseArray.from_scipy(np.eye(3))
    with pytest.raises(dl.NotationError, match="dss"):
        SparseArray.from_scipy(sp.eye_array(3), "dss")


# -- pydata sparse -------------------------------------------------------------------------------


def pydata_tensors() -> dict[str, sparse.COO]:
    rng = np.random.default_rng(3)
    x = sparse.random((4, 5, 6), density=0.2, random_state=11)
    one_fiber = np.zeros((3, 4, 5))
    one_fiber[1, 2, :] = rng.integers(1, 5, size=5)
    dup = sparse.COO(
        np.array([[2, 0, 2, 1], [1, 3, 1, 0], [0, 4, 0, 2]]), np.array([1.0, 2.0, 3.0, 4.0]),
        shape=(3, 4, 5), has_duplicates=True, sorted=False,
    )  # fmt: skip
    return {
        "random": x,
        "one_fiber": sparse.COO.from_numpy(one_fiber),
        "duplicates": dup,
        "empty": sparse.zeros((2, 3, 4)),
    }


PYDATA = pydata_tensors()


@pytest.mark.parametrize("name", list(PYDATA))
@pytest.mark.parametrize("fmt", FORMATS_3D, ids=str)
def test_pydata_3_tensors(name: str, fmt: object) -> None:
    x = PYDATA[name]
    d = x.todense()
    for src in (x, sparse.GCXS(x), sparse.GCXS(x, compressed_axes=[2])):
        a = SparseArray.from_pydata(src, fmt)  # type: ignore[arg-type]
        assert np.array_equal(a.to_dense(), d)
        assert np.array_equal(dense_of_walk(a), d)
        back = a.to_pydata()
        assert isinstance(back, sparse.COO)
        assert np.array_equal(back.todense(), d)
        assert np.array_equal(as_sparse(src, fmt).to_dense(), d)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", FORMATS_2D, ids=str)
def test_pydata_matrices(fmt: str) -> None:
    m = MATRICES["empty_rows"]
    for src in (sparse.COO.from_scipy_sparse(m), sparse.GCXS.from_scipy_sparse(m)):
        a = SparseArray.from_pydata(src, fmt)
        assert np.array_equal(a.to_dense(), m.toarray())


def test_pydata_fill_value_must_be_zero() -> None:
    x = sparse.COO.from_numpy(np.array([[1.0, 2.0], [2.0, 2.0]]), fill_value=2.0)
    with pytest.raises(dl.InputError, match="fill value"):
        SparseArray.from_pydata(x)
    with pytest.raises(dl.InputError, match="pydata"):
        SparseArray.from_pydata(np.eye(2))


# -- from_coo ----------------------------------------------------------------------------------


def test_from_coo_inputs() -> None:
    coords = [np.array([2, 0, 2], dtype=np.int32), np.array([1, 1, 1], dtype=np.int32)]
    a = SparseArray.from_coo(coords, [1.0, 2.0, 3.0], (3, 2), "csr")
    assert np.array_equal(a.to_dense(), [[0, 2], [0, 0], [0, 4]])
    b = SparseArray.from_coo(np.array([[2, 0, 2], [1, 1, 1]]), [1.0, 2.0, 3.0], (3, 2))
    assert b.format == dl.Format("qs")
    assert b.pattern_fingerprint() == a.with_format("coo").pattern_fingerprint()
    v = SparseArray.from_coo([4, 1, 4], [1, 2, 3], 6, "csf")
    assert np.array_equal(v.to_dense(), [0, 2, 0, 0, 4, 0])
    e = SparseArray.from_coo(np.empty((2, 0), dtype=np.int64), [], (3, 4), "dcsr")
    assert e.nnz == 0
    assert np.array_equal(e.to_dense(), np.zeros((3, 4)))
    e2 = SparseArray.from_coo([[], []], [], (3, 4), "csr")
    assert e2.pos[1].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize(
    ("coords", "vals", "shape", "culprit"),
    [
        ([[0, 3]], [1.0, 2.0], (3,), r"dimension 0 fall outside \[0, 3\)"),
        ([[0, -1]], [1.0, 2.0], (3,), r"outside"),
        ([[0, 1]], [1.0], (3,), r"2 coordinates but 1 values"),
        ([[0.5, 1]], [1.0, 2.0], (3,), r"integers"),
        ([[0, 1], [0, 1], [0, 1]], [1.0, 2.0], (3, 3), r"\(2, nnz\)"),
        ([[0, 1]], ["a", "b"], (3,), r"numeric"),
    ],
)
def test_from_coo_bad_inputs(coords: list, vals: list, shape: tuple, culprit: str) -> None:
    with pytest.raises(dl.InputError, match=culprit):
        SparseArray.from_coo(coords, vals, shape, "csf")


def random_format(draw: st.DrawFn, n: int) -> dl.Format:
    letters = ""
    for k in range(n):
        options = "dcq" + ("s" if k and letters[-1] in "qs" else "")
        letters += draw(st.sampled_from(options))
    return dl.Format(letters, draw(st.permutations(range(n))))


@st.composite
def coo_inputs(draw: st.DrawFn) -> tuple:
    n = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=n, max_size=n)))
    nnz = draw(st.integers(0, 25))
    coords = np.array(
        [draw(st.lists(st.integers(0, s - 1), min_size=nnz, max_size=nnz)) for s in shape],
        dtype=draw(st.sampled_from([np.int32, np.int64])),
    ).reshape(n, nnz)
    vals = np.array(draw(st.lists(st.integers(-9, 9), min_size=nnz, max_size=nnz)), float)
    return coords, vals, shape, random_format(draw, n)


@given(coo_inputs())
def test_from_coo_matches_accumulated_dense(case: tuple) -> None:
    coords, vals, shape, fmt = case
    expected = np.zeros(shape)
    np.add.at(expected, tuple(coords), vals)
    a = SparseArray.from_coo(coords, vals, shape, fmt)
    assert a.format == fmt
    assert np.array_equal(a.to_dense(), expected)
    assert np.array_equal(dense_of_walk(a), expected)
    # the levels are well formed: the checking constructor accepts them
    again = SparseArray(a.shape, a.format, a.pos, a.crd, a.vals)
    assert again.pattern_fingerprint() == a.pattern_fingerprint()
    # every entry is stored once; only a dense last level stores more than the entries
    assert len({tuple(c) for c, _ in walk(a)}) == a.nnz
    distinct = len({tuple(c) for c in coords.T})
    if fmt.levels[-1] != "d":
        assert a.nnz == distinct
    else:
        assert a.nnz >= distinct
        assert a.nnz % shape[fmt.order[-1]] == 0


@given(coo_inputs())
def test_reformatting_keeps_the_entries(case: tuple) -> None:
    coords, vals, shape, fmt = case
    a = SparseArray.from_coo(coords, vals, shape, "csf")
    b = a.with_format(fmt)
    assert np.array_equal(b.to_dense(), a.to_dense())
    back = as_sparse(b, "csf")
    if fmt.levels[-1] != "d":  # every entry, explicit zeros too, carries over
        assert back.pattern_fingerprint() == a.pattern_fingerprint()
    else:  # a dense last level stores zeros everywhere; they are not carried back
        assert back.nnz == np.count_nonzero(a.vals)
    assert a.with_format("csf") is a


# -- as_sparse ------------------------------------------------------------------------------------


def test_as_sparse_inputs() -> None:
    d = MATRICES["empty_rows"].toarray()
    for src in (d, d.tolist(), MATRICES["empty_rows"], sparse.COO.from_numpy(d)):
        a = as_sparse(src, "csr", (7, 5))
        assert a.format == dl.Format("dc")
        assert np.array_equal(a.to_dense(), d)
    a = as_sparse(d, "csr")
    assert as_sparse(a, "csr") is a
    c = as_sparse(a, "csc")
    assert c.format.name == "csc"
    assert np.array_equal(c.to_dense(), d)
    assert as_sparse(d, "dense").nnz == d.size
    with pytest.raises(dl.ShapeError, match=r"\(7, 5\).*\(5, 7\)"):
        as_sparse(d, "csr", (5, 7))
    with pytest.raises(dl.ShapeError):
        as_sparse(a, "csr", (7, 6))
    with pytest.raises(dl.InputError, match="object"):
        as_sparse(np.array([[object()]]), "csr")
    with pytest.raises(dl.NotationError, match="dds"):
        as_sparse(d, "dds")


def test_without_pydata_sparse_only_its_objects_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    d = np.eye(3)
    monkeypatch.setitem(sys.modules, "sparse", None)  # import sparse now raises ImportError
    assert np.array_equal(as_sparse(d, "coo").to_dense(), d)
    assert np.array_equal(as_sparse(sp.eye_array(3), "csr").to_dense(), d)
    with pytest.raises(dl.InputError, match=r"pip install 'distal\[sparse\]'"):
        as_sparse(d, "coo").to_pydata()


def test_without_scipy_to_scipy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy.sparse", None)
    a = as_sparse(np.eye(3), "csr")
    with pytest.raises(dl.InputError, match=r"pip install 'distal\[sparse\]'"):
        a.to_scipy()


# -- fingerprint ----------------------------------------------------------------------------------


def test_pattern_fingerprint() -> None:
    m = MATRICES["random"]
    a = SparseArray.from_scipy(m, "csr")
    fp = a.pattern_fingerprint()
    assert fp == a.pattern_fingerprint()
    assert fp.split(":")[0] in ("xxh3", "blake2b")
    # values do not count; index dtypes do not count
    assert a.with_values(a.vals * 3).pattern_fingerprint() == fp
    m32 = sp.csr_array((m.data, m.indices.astype(np.int32), m.indptr.astype(np.int32)), m.shape)
    m64 = sp.csr_array((m.data, m.indices.astype(np.int64), m.indptr.astype(np.int64)), m.shape)
    assert SparseArray.from_scipy(m32).pattern_fingerprint() == fp
    assert SparseArray.from_scipy(m64).pattern_fingerprint() == fp
    # the pattern, the format and the shape do
    moved = m.tolil()
    moved[0, 0] = 0.0 if m[0, 0] else 1.0
    assert SparseArray.from_scipy(moved, "csr").pattern_fingerprint() != fp
    assert SparseArray.from_scipy(m, "dcsr").pattern_fingerprint() != fp
    assert SparseArray.from_scipy(m, "csc").pattern_fingerprint() != fp
    padded = sp.csr_array((m.data, m.indices, np.append(m.indptr, m.nnz)), (m.shape[0] + 1, 9))
    assert SparseArray.from_scipy(padded).pattern_fingerprint() != fp
    wider = sp.csr_array((m.data, m.indices, m.indptr), (m.shape[0], 10))
    assert SparseArray.from_scipy(wider).pattern_fingerprint() != fp


def test_fingerprint_without_xxhash_is_blake2b(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xxhash", None)
    a = SparseArray.from_scipy(MATRICES["random"], "csr")
    b = SparseArray.from_scipy(MATRICES["random"], "csr")
    assert a.pattern_fingerprint().startswith("blake2b:")
    assert a.pattern_fingerprint() == b.pattern_fingerprint()


def test_with_values() -> None:
    a = SparseArray.from_scipy(MATRICES["random"], "csr")
    b = a.with_values(np.arange(a.nnz, dtype=float))
    assert b.pos[1] is a.pos[1]
    assert b.vals.tolist() == list(range(a.nnz))
    with pytest.raises(dl.InputError, match="positions"):
        a.with_values([1.0])


# -- pattern queries --------------------------------------------------------------------------


def all_matrix_cases() -> list[tuple[str, object]]:
    return [(name, fmt) for name in MATRICES for fmt in FORMATS_2D + CUSTOM_2D]


@pytest.mark.parametrize(("name", "fmt"), all_matrix_cases(), ids=str)
def test_coordinates_and_row_of_position(name: str, fmt: object) -> None:
    a = SparseArray.from_scipy(MATRICES[name], fmt)  # type: ignore[arg-type]
    w = walk(a)
    rows = a.row_of_position()
    assert rows.dtype == np.int64
    assert rows.tolist() == [coords[0] for coords, _ in w]
    coords = a.coordinates()
    for p, (c, _) in enumerate(w):
        assert [coords[a.format.order[k], p] for k in range(a.ndim)] == c
    for levels in (1, 2):
        assert a.fiber_of_position(levels).tolist() == [pos[levels - 1] for _, pos in w]


def test_row_of_position_of_csr_by_hand() -> None:
    m = matrix_with_dense_row()
    a = SparseArray.from_scipy(m, "csr")
    expected = []
    for r in range(m.shape[0]):
        expected += [r] * int(m.indptr[r + 1] - m.indptr[r])
    assert a.row_of_position().tolist() == expected
    assert SparseArray.from_scipy(m, "csc").row_of_position().tolist() == sorted(
        m.tocoo().col.tolist()
    )


@pytest.mark.parametrize(("name", "fmt"), all_matrix_cases(), ids=str)
def test_positions_of_rows(name: str, fmt: object) -> None:
    a = SparseArray.from_scipy(MATRICES[name], fmt)  # type: ignore[arg-type]
    w = walk(a)
    n = a.levels[0].size
    for lo in range(n + 1):
        for hi in range(lo, n + 1):
            inside = [p for p, (c, _) in enumerate(w) if lo <= c[0] < hi]
            start, end = a.positions_of_rows(lo, hi)
            assert list(range(start, end)) == inside


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("name", list(MATRICES))
def test_split_positions(name: str, parts: int) -> None:
    a = SparseArray.from_scipy(MATRICES[name], "csr")
    b = a.split_positions(parts)
    assert b.dtype == np.int64
    assert len(b) == parts + 1
    chunk = math.ceil(a.nnz / parts)
    for p in range(parts):
        assert (b[p], b[p + 1]) == (min(p * chunk, a.nnz), min((p + 1) * chunk, a.nnz))


def test_split_positions_more_parts_than_entries() -> None:
    a = SparseArray.from_scipy(MATRICES["one"], "coo")
    assert a.split_positions(4).tolist() == [0, 1, 1, 1, 1]
    e = SparseArray.from_scipy(MATRICES["empty"], "csr")
    assert e.split_positions(3).tolist() == [0, 0, 0, 0]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(dl.InputError, match="positive"):
            a.split_positions(bad)  # type: ignore[arg-type]


PIECE_FORMATS = ["csr", "csc", "dcsr", "dcsc", "coo", dl.Format("qs", order=(1, 0)),
                 dl.Format("dq")]  # fmt: skip


def check_piece(a: SparseArray, lo: int, hi: int) -> SparseArray:
    piece = a.piece(lo, hi)
    w = walk(a)
    assert piece.nnz == hi - lo
    assert piece.format == a.format
    top = a.format.order[0]
    if lo < hi:
        r0, r1 = w[lo][0][0], w[hi - 1][0][0] + 1
        assert piece.offset[top] == r0
        assert piece.shape[top] == r1 - r0
        expected = dense_of_walk(a, lo, hi)[top_slice(a, r0, r1)]
        assert np.array_equal(piece.to_dense(), expected)
    else:
        assert piece.shape[top] == 0
    assert all(piece.shape[d] == a.shape[d] for d in range(a.ndim) if d != top)
    # self-contained: the checking constructor accepts its arrays
    SparseArray(piece.shape, piece.format, piece.pos, piece.crd, piece.vals)
    for lv in piece.levels:
        if lv.pos is not None:
            assert lv.pos[0] == 0
            assert lv.pos[-1] == len(lv.crd)
    return piece


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 8])
@pytest.mark.parametrize(("name", "fmt"), [(n, f) for n in MATRICES for f in PIECE_FORMATS],
                         ids=str)  # fmt: skip
def test_pieces_of_the_non_zero_cut(name: str, fmt: object, parts: int) -> None:
    a = SparseArray.from_scipy(MATRICES[name], fmt)  # type: ignore[arg-type]
    b = a.split_positions(parts)
    total = np.zeros(a.shape)
    for p in range(parts):
        piece = check_piece(a, int(b[p]), int(b[p + 1]))
        start = piece.offset[a.format.order[0]]
        total[top_slice(a, start, start + piece.shape[a.format.order[0]])] += piece.to_dense()
    assert np.array_equal(total, a.to_dense())


def test_every_position_range_of_a_piece() -> None:
    for fmt in PIECE_FORMATS:
        a = SparseArray.from_scipy(matrix_with_dense_row(), fmt)  # type: ignore[arg-type]
        for lo in range(a.nnz + 1):
            for hi in range(lo, a.nnz + 1):
                check_piece(a, lo, hi)


def test_a_dense_row_split_over_pieces() -> None:
    m = matrix_with_dense_row()  # 13 entries, row 2 holds 10 of them
    a = SparseArray.from_scipy(m, "csr")
    b = a.split_positions(4)  # chunks of 4
    pieces = [a.piece(int(b[p]), int(b[p + 1])) for p in range(4)]
    # positions: 0 row 0; 1..10 row 2; 11 row 4; 12 row 5
    assert [p.offset for p in pieces] == [(0, 0), (2, 0), (2, 0), (5, 0)]
    assert [p.shape for p in pieces] == [(3, 10), (1, 10), (3, 10), (1, 10)]
    row2 = np.zeros((1, 10))
    row2[0, 3:7] = [4.0, 5.0, 6.0, 7.0]
    assert np.array_equal(pieces[1].to_dense(), row2)
    assert pieces[2].pos[1].tolist() == [0, 3, 3, 4]
    # a piece of a piece has the offsets of both
    inner = pieces[2].piece(2, 4)
    assert inner.offset == (2, 0)
    assert inner.shape == (3, 10)
    assert inner.vals.tolist() == [10.0, 13.0]
    assert inner.to_dense()[0, 9] == 10.0
    assert inner.to_dense()[2, 0] == 13.0


def test_piece_of_a_dense_level_below_the_top_is_not_supported() -> None:
    d = np.arange(24.0).reshape(2, 3, 4)
    for fmt in ["dds", "dense", dl.Format("cdc")]:
        a = SparseArray.from_dense(d, fmt)
        with pytest.raises(dl.NotSupportedYet, match=re.escape(a.format.describe())):
            a.piece(0, 1)
    with pytest.raises(dl.InputError, match=r"0 <= lo <= hi <= 3"):
        SparseArray.from_dense(np.eye(3), "csr").piece(2, 4)
    with pytest.raises(dl.InputError):
        SparseArray.from_dense(np.eye(3), "csr").piece(2, 1)


@pytest.mark.parametrize(("name", "fmt"), all_matrix_cases(), ids=str)
def test_rows_piece(name: str, fmt: object) -> None:
    a = SparseArray.from_scipy(MATRICES[name], fmt)  # type: ignore[arg-type]
    d = a.to_dense()
    n = a.levels[0].size
    for lo in range(n + 1):
        for hi in range(lo, n + 1):
            r = a.rows_piece(lo, hi)
            assert np.array_equal(r.to_dense(), d[top_slice(a, lo, hi)])
            assert r.offset[a.format.order[0]] == lo
            start, end = a.positions_of_rows(lo, hi)
            assert r.nnz == end - start
            assert np.array_equal(r.vals, a.vals[start:end])
            SparseArray(r.shape, r.format, r.pos, r.crd, r.vals)
    with pytest.raises(dl.InputError, match="rows"):
        a.rows_piece(0, n + 1)


# -- 3-tensors: fibers of fused top levels, cuts ---------------------------------------------------


@pytest.mark.parametrize("name", list(PYDATA))
@pytest.mark.parametrize("fmt", FORMATS_3D, ids=str)
def test_queries_of_3_tensors(name: str, fmt: object) -> None:
    a = SparseArray.from_pydata(PYDATA[name], fmt)  # type: ignore[arg-type]
    w = walk(a)
    d = a.to_dense()
    for levels in (1, 2, 3):
        assert a.fiber_of_position(levels).tolist() == [pos[levels - 1] for _, pos in w]
    assert a.row_of_position().tolist() == [c[0] for c, _ in w]
    n0 = a.levels[0].size
    for lo in range(n0 + 1):
        for hi in range(lo, n0 + 1):
            assert np.array_equal(a.rows_piece(lo, hi).to_dense(), d[top_slice(a, lo, hi)])
    if "d" not in a.format.levels[1:]:
        for parts in (1, 2, 3, 4, 8):
            b = a.split_positions(parts)
            for p in range(parts):
                check_piece(a, int(b[p]), int(b[p + 1]))


def test_fused_fibers_of_dense_levels_are_linear_coordinates() -> None:
    x = PYDATA["random"]
    a = SparseArray.from_pydata(x, "dds")
    c = a.coordinates()
    assert np.array_equal(a.fiber_of_position(2), c[0] * x.shape[1] + c[1])
    f = SparseArray.from_pydata(x, "csf")
    fibers = f.fiber_of_position(2)
    # csf numbers the non-empty (i, j) fibers in order
    fc = f.coordinates()
    pairs = sorted({(int(i), int(j)) for i, j in zip(fc[0], fc[1], strict=True)})
    expected = [pairs.index((int(i), int(j))) for i, j in zip(fc[0], fc[1], strict=True)]
    assert fibers.tolist() == expected
    with pytest.raises(dl.InputError, match="levels"):
        f.fiber_of_position(4)
    with pytest.raises(dl.InputError, match="levels"):
        f.fiber_of_position(0)


def test_queries_of_an_order_0_array_are_not_supported() -> None:
    s = SparseArray((), dl.Format(""), [], [], [1.0])
    with pytest.raises(dl.NotSupportedYet, match="order-0"):
        s.row_of_position()
    assert s.split_positions(2).tolist() == [0, 1, 1]


def test_pickle_keeps_the_pattern_and_read_only_arrays() -> None:
    a = SparseArray.from_scipy(MATRICES["empty_rows"], "dcsr").rows_piece(1, 5)
    b = pickle.loads(pickle.dumps(a))
    assert b.pattern_fingerprint() == a.pattern_fingerprint()
    assert b.offset == (1, 0)
    assert np.array_equal(b.to_dense(), a.to_dense())
    assert not b.vals.flags.writeable
    assert not any(c.flags.writeable for c in b.crd if c is not None)


def test_level_objects() -> None:
    a = SparseArray.from_dense(np.eye(3), "dcsr")
    assert isinstance(a.levels[0], Level)
    assert [lv.kind for lv in a.levels] == ["c", "c"]
    assert "dcsr" in repr(a)
    assert "nnz=3" in repr(a)
