"""Values entering a computation keep their meaning: nothing is cut without a word.

A leaf computes in its output's dtype, and inputs are converted to their tensors' dtypes by
numpy's ``same_kind`` rule (:func:`distal.casting.check_cast`): a complex scalar or
tensor in a real statement, a complex or float input for a real or integer tensor, negative
integers for an unsigned one, are refused (the statement with a ``NotationError``, a value
with an ``InputError`` naming it), where they used to come back as the real part, truncated
or wrapped. What the rule allows (float64 data into float32, ints into floats) still runs
and matches numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distal as dl
from distal.casting import check_cast
from distal.values import dense_value, sparse_value

N = 5


def _copy(dtype: object, out_dtype: object | None = None) -> dl.Kernel:
    (i,) = dl.index_vars("i")
    B = dl.Tensor("B", (3,), dtype=dtype)
    A = dl.Tensor("A", (3,), dtype=dtype if out_dtype is None else out_dtype)
    A[i] = B[i]
    return dl.compile(dl.schedule(A))


def _spmv(dtype: object = np.float64) -> dl.Kernel:
    i, j = dl.index_vars("i j")
    A = dl.Tensor("A", (N, N), format="csr", dtype=dtype)
    x = dl.Tensor("x", (N,), dtype=dtype)
    y = dl.Tensor("y", (N,), dtype=dtype)
    y[i] = A[i, j] * x[j]
    return dl.compile(dl.schedule(y))


def _matrix(seed: int = 0) -> sp.csr_matrix:
    return sp.random(N, N, density=0.5, random_state=seed, format="csr")


# -- complex values in real statements ---------------------------------------------------------


def test_a_complex_scalar_in_a_real_statement_is_refused() -> None:
    (i,) = dl.index_vars("i")
    A, B = dl.Tensor("A", (4,)), dl.Tensor("B", (4,))
    with pytest.raises(dl.NotationError, match=r"\(1\+2j\).*complex.*'A' is float64"):
        A[i] = B[i] * (1 + 2j)
    with pytest.raises(dl.NotationError, match="complex"):
        A[i] = B[i] * np.complex128(3j)
    with pytest.raises(dl.NotationError, match="complex"):
        A[i] = B[i] / (1 - 1j)  # the coefficient 1 / (1 - 1j) is complex too
    assert A.assignment is None  # nothing was assigned


def test_a_complex_scalar_computes_in_complex_where_the_output_is_complex() -> None:
    (i,) = dl.index_vars("i")
    A, B = dl.Tensor("A", (4,), dtype=np.complex128), dl.Tensor("B", (4,))
    A[i] = B[i] * (1 + 2j)
    b = np.random.default_rng(1).random(4)
    np.testing.assert_allclose(dl.compile(dl.schedule(A)).run({"B": b}).value, b * (1 + 2j))


def test_a_complex_tensor_in_a_real_statement_is_refused() -> None:
    (i,) = dl.index_vars("i")
    A, B = dl.Tensor("A", (4,)), dl.Tensor("B", (4,), dtype=np.complex64)
    with pytest.raises(dl.NotationError, match=r"tensor 'B' is complex64.*'A' is float64"):
        A[i] = B[i]


def test_a_float_scalar_in_an_integer_statement_is_refused() -> None:
    (i,) = dl.index_vars("i")
    A, B = dl.Tensor("A", (3,), dtype=np.int64), dl.Tensor("B", (3,), dtype=np.int64)
    with pytest.raises(dl.NotationError, match=r"0\.5.*'A' is int64"):
        A[i] = B[i] * 0.5
    with pytest.raises(dl.NotationError, match=r"0\.5"):
        A[i] = B[i] / 2  # true division, as in numpy, is not an integer operation
    A[i] = B[i] * 3 + 1  # integer scalars stay integers
    b = np.array([4, -7, 2])
    np.testing.assert_array_equal(dl.compile(dl.schedule(A)).run({"B": b}).value, b * 3 + 1)


def test_a_complex_sparse_matrix_for_a_real_tensor_is_refused() -> None:
    m = _matrix() * (1 + 1j)
    with pytest.raises(dl.InputError, match=r"input 'A' is complex128.*tensor 'A' is float64"):
        sparse_value("A", m, _spmv().sparse.tensors["A"])
    with pytest.raises(dl.InputError, match=r"complex128.*float64"):
        dl.sparse.as_sparse(m, "csr", dtype=np.float64)


def test_spmv_with_a_complex_scipy_matrix_for_a_real_tensor_is_refused() -> None:
    with pytest.raises(dl.InputError, match="input 'A' is complex128"):
        _spmv().run({"A": _matrix() * (1 + 1j), "x": np.ones(N)})


def test_spmv_in_complex_matches_scipy() -> None:
    m = _matrix(2) * (1 - 2j)
    x = np.arange(N) + 0.5j
    got = _spmv(np.complex128).run({"A": m, "x": x}).value
    np.testing.assert_allclose(got, m @ x)


# -- numpy's same_kind rule for inputs ----------------------------------------------------------


def test_floats_for_an_integer_tensor_are_refused() -> None:
    k = _copy(np.int64)
    with pytest.raises(dl.InputError, match=r"input 'B' is float64.*'B' is int64.*truncated"):
        k.run({"B": [0.7, 1.9, -2.5]})
    with pytest.raises(dl.InputError, match="input 'B' is float64"):
        k.run({"B": np.array([np.nan, 1.0, 2.0])})


def test_negative_integers_for_an_unsigned_tensor_are_refused() -> None:
    k = _copy(np.uint8)
    with pytest.raises(dl.InputError, match=r"input 'B' is int64.*'B' is uint8.*wrap"):
        k.run({"B": np.array([1, -2, 3])})
    b = np.array([1, 200, 3], dtype=np.uint16)  # unsigned into unsigned: same kind
    np.testing.assert_array_equal(k.run({"B": b}).value, b.astype(np.uint8))


def test_a_complex_array_for_a_real_tensor_is_refused() -> None:
    with pytest.raises(dl.InputError, match=r"input 'B' is complex128.*imaginary"):
        _copy(np.float64).run({"B": np.array([1, 2, 3]) * 1j})


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (np.float64, np.float32),  # rounds, but stays a float: same kind
        (np.int64, np.float64),
        (np.int32, np.int64),
        (np.int64, np.int32),
        (np.bool_, np.float64),
        (np.float64, np.complex128),
        (np.complex128, np.complex64),
    ],
)
def test_what_same_kind_allows_is_converted(src: type, dst: type) -> None:
    b = np.array([1, 0, 3]).astype(src)
    got = _copy(dst).run({"B": b}).value
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got, b.astype(dst))


@pytest.mark.parametrize(
    "src", [np.float16, np.float32, np.float64, np.complex64, np.complex128, np.int8, np.int64]
)
@pytest.mark.parametrize("dst", [np.uint8, np.int32, np.int64, np.float32, np.float64])
def test_the_rule_is_numpys_same_kind(src: type, dst: type) -> None:
    t = dl.Tensor("T", (2,), dtype=dst)
    ok = np.can_cast(src, dst, "same_kind")
    if ok:
        assert dense_value("T", np.ones(2, src), t).dtype == np.dtype(dst)
        check_cast("value 'T'", src, t)
    else:
        with pytest.raises(dl.InputError, match="'T'"):
            dense_value("T", np.ones(2, src), t)


def test_floats_for_an_integer_sparse_tensor_are_refused() -> None:
    t = _spmv(np.int64).sparse.tensors["A"]
    with pytest.raises(dl.InputError, match=r"input 'A' is float64.*'A' is int64"):
        sparse_value("A", _matrix(), t)
    ints = sp.csr_matrix(np.array([[0, 3, 0, 0, 1], [2, 0, 0, 0, 0]] + [[0] * N] * 3))
    arr = sparse_value("A", ints.astype(np.int32), t)
    assert arr.dtype == np.int64
    np.testing.assert_array_equal(arr.to_dense(), ints.toarray())


def test_as_sparse_keeps_an_array_that_already_fits() -> None:
    a = dl.sparse.as_sparse(_matrix(), "csr")
    assert dl.sparse.as_sparse(a, "csr", dtype=np.float64) is a
    b = dl.sparse.as_sparse(a, "csr", dtype=np.float32)
    assert b.dtype == np.float32
    assert b.pattern_fingerprint() == a.pattern_fingerprint()


# -- sessions and apps ---------------------------------------------------------------------------


def test_a_float_session_value_for_an_integer_tensor_is_refused() -> None:
    sess = dl.Session(progress=False)
    sess.put("B", np.array([0.7, 1.9, -2.5]))
    with pytest.raises(dl.InputError, match=r"session value 'B' is float64.*'B' is int64"):
        sess.run(_copy(np.int64))


def test_a_complex_session_value_for_a_real_sparse_tensor_is_refused() -> None:
    sess = dl.Session(progress=False)
    sess.put("A", _matrix() * 1j)
    sess.put("x", np.ones(N))
    with pytest.raises(dl.InputError, match="session value 'A' is complex128"):
        sess.run(_spmv())


def test_an_integer_session_value_for_a_float_tensor_runs() -> None:
    sess = dl.Session(progress=False)
    b = np.array([3, -1, 4])
    sess.put("B", b)
    np.testing.assert_array_equal(sess.run(_copy(np.float64), gather=True).value, b.astype(float))


def test_cg_with_a_complex_matrix_is_refused() -> None:
    rng = np.random.default_rng(3)
    q = rng.random((N, N))
    a = (q @ q.T + N * np.eye(N)).astype(complex)
    a[0, 1] += 0.5j
    a[1, 0] -= 0.5j
    b = rng.random(N)
    with pytest.raises(dl.InputError, match=r"input 'A' is complex128.*imaginary"):
        dl.apps.cg(a, b, machine=2)
    with pytest.raises(dl.InputError, match="input 'A' is complex128"):
        dl.apps.cg(sp.csr_matrix(a), b, machine=2)
    with pytest.raises(dl.InputError, match="input 'b' is complex128"):
        dl.apps.cg(a.real, b * 1j, machine=2)


def test_cg_with_an_integer_matrix_still_solves() -> None:
    a = np.array([[4, 1, 0], [1, 3, 1], [0, 1, 2]])
    b = np.array([1, 2, 3])
    x, _ = dl.apps.cg(a, b, machine=2)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-8)


def test_a_block_source_of_floats_for_an_integer_tensor_is_refused() -> None:
    k = _copy(np.int64)
    with pytest.raises(dl.InputError, match=r"block source 'B' is float64.*int64.*truncated"):
        k.run({"B": dl.from_function((3,), lambda i: i + 0.7)})
    ints = dl.from_function((3,), lambda i: 2 * i - 1, dtype=np.int32)
    np.testing.assert_array_equal(k.run({"B": ints}).value, [-1, 1, 3])


def test_pagerank_and_cp_als_with_complex_inputs_are_refused() -> None:
    links = (_matrix(4) * (1 + 1j)).tocsr()
    with pytest.raises(dl.InputError, match="input 'A' is complex128"):
        dl.apps.pagerank(links, machine=2)
    with pytest.raises(dl.InputError, match="input 'A' is complex128"):
        dl.apps.pagerank(links.toarray(), machine=2)
    x = np.random.default_rng(5).random((3, 4, 2)) * 1j
    with pytest.raises(dl.InputError, match="input 'X' is complex128"):
        dl.apps.cp_als(x, 2, machine=2, iters=1)
