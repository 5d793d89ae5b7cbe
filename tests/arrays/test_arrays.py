"""The arrays front (``dl.DArray``): results against numpy / scipy, errors at the line that
makes them, deferral, fusion and compile counts, and checkpointed loops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import distal as dl

RTOL = 1e-10


def rand(*shape: int, seed: int = 0, dtype: type = np.float64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.fixture
def sess() -> dl.Session:
    return dl.Session("local", machine=2)


def laplacian(n: int) -> sp.csr_matrix:
    """The 2-D 5-point Laplacian on an ``n x n`` grid."""
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    return (sp.kron(sp.eye(n), t) + sp.kron(t, sp.eye(n))).tocsr()


def lazy_cg(A: Any, b: Any, iters: int) -> Any:
    """``iters`` CG iterations with no value read between them: on distal arrays every
    iteration is recorded and the whole loop runs at the read of ``x``."""
    x, r, p, rs = b * 0.0, b, b, b @ b
    for _ in range(iters):
        q = A @ p
        alpha = rs / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


def cg(sess: dl.Session, A: object, b: np.ndarray, tol: float = 1e-10) -> tuple[object, int]:
    """Conjugate gradients, as a user writes it on arrays."""
    A, b = sess.asarray(A), sess.asarray(b)
    x, r = b * 0.0, b
    p, rs = r, r @ r
    bnorm = float(dl.sqrt(b @ b))
    for it in range(1, 10 * b.shape[0]):
        q = A @ p
        alpha = rs / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        rs_new = r @ r
        if float(dl.sqrt(rs_new)) <= tol * bnorm:
            return x, it
        p = r + (rs_new / rs) * p
        rs = rs_new
    raise AssertionError("cg did not converge")


# -- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes",
    [((6, 4), (6, 4)), ((6, 4), (4,)), ((6, 1), (1, 4)), ((5,), ()), ((3, 4, 2), (4, 1))],
)
def test_element_wise_chains_broadcast_as_numpy(sess: dl.Session, shapes: tuple) -> None:
    a, b = rand(*shapes[0], seed=1), rand(*shapes[1], seed=2)
    x, y = sess.asarray(a), sess.asarray(b)
    got = ((x + y) * 2.0 - y * x + 0.5 - (-x)) / 4.0
    want = ((a + b) * 2.0 - b * a + 0.5 - (-a)) / 4.0
    assert got.shape == want.shape
    np.testing.assert_allclose(got.get(), want, rtol=RTOL)
    np.testing.assert_allclose(np.asarray(3.0 - x * y), 3.0 - a * b, rtol=RTOL)


def test_dtypes_promote_as_numpy(sess: dl.Session) -> None:
    f32 = sess.asarray(rand(5, dtype=np.float32))
    i64 = sess.asarray(np.arange(5))
    assert (f32 * 2.0).dtype == np.float32
    assert (f32 + i64).dtype == np.result_type(np.float32, np.int64)
    assert (i64 / 2).dtype == np.float64
    assert (i64 * 3).get().dtype == np.int64
    np.testing.assert_array_equal((i64 * 3 + 1).get(), np.arange(5) * 3 + 1)
    np.testing.assert_allclose((i64 / 4).get(), np.arange(5) / 4, rtol=RTOL)
    assert (f32 * 2.0).get().dtype == np.float32


@pytest.mark.parametrize(
    ("sa", "sb"), [((6, 4), (4,)), ((6,), (6, 3)), ((5, 4), (4, 3)), ((7,), (7,))]
)
def test_matmul_forms(sess: dl.Session, sa: tuple, sb: tuple) -> None:
    a, b = rand(*sa, seed=3), rand(*sb, seed=4)
    got = sess.asarray(a) @ sess.asarray(b)
    assert got.shape == (a @ b).shape
    np.testing.assert_allclose(got.get(), a @ b, rtol=RTOL)


def test_transpose_sum_and_einsum(sess: dl.Session) -> None:
    a, v = rand(5, 4, seed=5), rand(5, seed=6)
    x, y = sess.asarray(a), sess.asarray(v)
    np.testing.assert_allclose((x.T @ y).get(), a.T @ v, rtol=RTOL)
    np.testing.assert_allclose((x + x.T.T).get(), 2 * a, rtol=RTOL)
    for axis in (None, 0, 1, -1, (0, 1)):
        np.testing.assert_allclose(x.sum(axis).get(), a.sum(axis), rtol=RTOL)
    # a sum over a chain with a term that does not use the summed index: numpy's meaning
    np.testing.assert_allclose(float((x + 1.0).sum()), (a + 1.0).sum(), rtol=RTOL)
    np.testing.assert_allclose(
        dl.einsum("ij,i->j", x * 2.0, y).get(), np.einsum("ij,i->j", a * 2, v), rtol=RTOL
    )
    np.testing.assert_allclose(float(dl.einsum("ij,ij->", x, x)), (a * a).sum(), rtol=RTOL)


def test_scalars_and_functions_on_scalars(sess: dl.Session) -> None:
    a = rand(8, seed=7)
    x = sess.asarray(a)
    s = x @ x
    assert s.shape == ()
    assert s.ndim == 0
    np.testing.assert_allclose(float(dl.sqrt(s)), np.sqrt(a @ a), rtol=RTOL)
    np.testing.assert_allclose(float(x.sum() / s), a.sum() / (a @ a), rtol=RTOL)
    np.testing.assert_allclose((x / s).get(), a / (a @ a), rtol=RTOL)
    m = dl.maximum(x.sum(), s)
    np.testing.assert_allclose(float(m), max(a.sum(), a @ a), rtol=RTOL)
    w = dl.where(x.sum() > 0, s, -s)
    np.testing.assert_allclose(float(w), (a @ a) if a.sum() > 0 else -(a @ a), rtol=RTOL)
    assert float(dl.abs(-s)) == pytest.approx(a @ a, rel=RTOL)
    assert float(dl.exp(s * 0.0)) == 1.0
    assert int(sess.asarray(np.arange(4)).sum()) == 6
    assert bool(s > 0) is True
    # numpy operands: numpy's own functions
    np.testing.assert_array_equal(dl.sqrt(np.array([4.0, 9.0])), [2.0, 3.0])


def test_functions_division_and_comparisons_on_arrays(sess: dl.Session) -> None:
    a, c = rand(6, 4, seed=20), np.abs(rand(4, seed=21)) + 0.5
    x, y = sess.asarray(a), sess.asarray(c)
    np.testing.assert_allclose(dl.sqrt(x * x + y).get(), np.sqrt(a * a + c), rtol=RTOL)
    np.testing.assert_allclose((x / y).get(), a / c, rtol=RTOL)
    np.testing.assert_allclose((y / (x * x + 1.0)).get(), c / (a * a + 1.0), rtol=RTOL)
    np.testing.assert_array_equal(dl.where(x > 0, x, 0.0).get(), np.where(a > 0, a, 0.0))
    assert (x <= y).get().dtype == np.bool_
    np.testing.assert_array_equal((x <= y).get(), a <= c)
    # == and != are element-wise, as numpy's (not identity: never a silent False)
    np.testing.assert_array_equal((x == x).get(), np.ones((6, 4), bool))
    np.testing.assert_array_equal((x != y).get(), a != c)
    np.testing.assert_allclose(dl.maximum(x, y).sum(0).get(), np.maximum(a, c).sum(0), rtol=RTOL)
    np.testing.assert_allclose(dl.minimum(x, -y).get(), np.minimum(a, -c), rtol=RTOL)
    np.testing.assert_allclose((dl.exp(x) @ y).get(), np.exp(a) @ c, rtol=RTOL)
    np.testing.assert_allclose((dl.abs(x.T) - x.T).get(), np.abs(a.T) - a.T, rtol=RTOL)
    np.testing.assert_allclose((dl.abs(x).T + 1.0).get(), np.abs(a).T + 1.0, rtol=RTOL)
    assert (sess.asarray(np.arange(4)) / sess.asarray(np.arange(1, 5))).dtype == np.float64
    pos = np.abs(a) + 1.0
    p = sess.asarray(pos)
    np.testing.assert_allclose((p**2).get(), pos**2, rtol=RTOL)
    np.testing.assert_allclose((p**0.5 + 2.0**p).get(), pos**0.5 + 2.0**pos, rtol=RTOL)
    np.testing.assert_array_equal((p // 0.7).get(), pos // 0.7)
    np.testing.assert_allclose((p % 0.7).get(), pos % 0.7, rtol=RTOL)
    i = sess.asarray(np.arange(6))
    assert (i**2).dtype == np.int64
    np.testing.assert_array_equal((i % 4 + i // 4).get(), np.arange(6) % 4 + np.arange(6) // 4)
    with pytest.raises(dl.InputError, match="negative integer powers"):
        i**-1
    np.testing.assert_array_equal(p[0].get(), pos[0])  # slices: tests/slices


def test_differences_are_not_expanded_where_they_would_cancel(sess: dl.Session) -> None:
    """numpy forms x - y first; a sum of products x*z - y*z, or sum(x) - sum(y), would
    lose every digit when x and y nearly agree."""
    rng = np.random.default_rng(30)
    a = 1.0 + 1e-9 * rng.standard_normal(50)
    b = np.ones(50)
    c = rng.standard_normal(50)
    m = rng.standard_normal((7, 50))
    x, y, z, mm = (sess.asarray(v) for v in (a, b, c, m))
    np.testing.assert_allclose(float(((x - y) * (x - y)).sum()), ((a - b) ** 2).sum(), rtol=1e-12)
    np.testing.assert_allclose(float((x - y) @ (x - y)), (a - b) @ (a - b), rtol=1e-12)
    np.testing.assert_allclose(((x - y) * z).get(), (a - b) * c, rtol=1e-12)
    np.testing.assert_allclose(((x - y) * 3.0).get(), (a - b) * 3.0, rtol=1e-12)
    np.testing.assert_allclose(float((x - y).sum()), (a - b).sum(), rtol=1e-9)
    np.testing.assert_allclose((mm @ (x - y)).get(), m @ (a - b), rtol=1e-9)


def test_a_map_over_aligned_arrays_moves_nothing(sess: dl.Session) -> None:
    a, b = rand(8, 3, seed=22), rand(8, 3, seed=23)
    x, y = sess.asarray(a), sess.asarray(b)
    z = dl.sqrt(x * x + y * y) / (dl.abs(x) + 1.0)
    np.testing.assert_allclose(z.get(), np.sqrt(a * a + b * b) / (np.abs(a) + 1.0), rtol=RTOL)
    assert sess.kernels_run == 1  # the whole chain: one map
    assert sess.moved_words == 0


def test_a_contraction_over_its_largest_operands_first_axis_leaves_it_in_place(
    sess: dl.Session,
) -> None:
    """A contraction whose largest operand has a summed index along its first axis is
    owner-computes by that index: the operand stays in its blocks and only the result's
    partial sums move (kernel traffic, not redistribution)."""
    x, a, c = rand(8, 6, 5, seed=50), rand(8, 3, seed=51), rand(5, 3, seed=52)
    X = sess.asarray(x, dist="abc -> a")  # blocks of the first axis, as a value is held
    A = sess.asarray(a, dist="al -> a")
    C = sess.asarray(c, dist="cl -> c")
    # an MTTKRP over the second mode: X and A are read in their blocks, C replicated
    got = dl.einsum("abc,al,cl->bl", X, A, C)
    np.testing.assert_allclose(got.get(), np.einsum("abc,al,cl->bl", x, a, c), rtol=RTOL)
    assert sess.moved_words == c.size  # C to both processors: one half each way
    F = sess.asarray(a, dist="al -> a")
    np.testing.assert_allclose((F.T @ F).get(), a.T @ a, rtol=RTOL)  # a Gram matrix
    v = sess.asarray(rand(8, seed=53), dist="a -> a")
    np.testing.assert_allclose((v @ F).get(), rand(8, seed=53) @ a, rtol=RTOL)
    assert sess.moved_words == c.size  # neither F nor v moved
    # a result larger than the operands keeps the rule by the result's first index
    w = sess.asarray(rand(3, 8, seed=54), dist="ka -> k")
    want = rand(3, 8, seed=54).T @ rand(3, 8, seed=54)
    np.testing.assert_allclose((w.T @ w).get(), want, rtol=RTOL)


def test_sparse_matrix_times_vector(sess: dl.Session) -> None:
    A = sp.random(40, 30, density=0.1, random_state=1, format="csr")
    v = rand(30, seed=8)
    sess["A"] = A
    got = sess["A"] @ (sess.asarray(v) * 2.0)
    np.testing.assert_allclose(got.get(), A @ (v * 2.0), rtol=RTOL)


def test_sparse_transpose_times_vector(sess: dl.Session) -> None:
    A = sp.random(40, 30, density=0.1, random_state=2, format="csr")
    v = rand(40, seed=31)
    At = sess.asarray(A).T
    assert At.shape == (30, 40)
    np.testing.assert_allclose((At @ sess.asarray(v)).get(), A.T @ v, rtol=RTOL)
    np.testing.assert_allclose((At.T @ sess.asarray(rand(30))).get(), A @ rand(30), rtol=RTOL)


def test_numpy_functions_and_operators_record_operations(sess: dl.Session) -> None:
    a, b = rand(5, seed=32), rand(5, seed=33)
    x = sess.asarray(a)
    assert isinstance(np.sqrt(np.abs(x)), dl.DArray)
    np.testing.assert_allclose(np.sqrt(np.abs(x)).get(), np.sqrt(np.abs(a)), rtol=RTOL)
    got = b + x  # numpy's operator defers to the DArray
    assert isinstance(got, dl.DArray)
    np.testing.assert_allclose(got.get(), b + a, rtol=RTOL)
    np.testing.assert_allclose(np.maximum(x, b).get(), np.maximum(a, b), rtol=RTOL)
    assert sess.kernels_run == 3
    np.testing.assert_allclose(float(np.sum(x)), a.sum(), rtol=RTOL)
    np.testing.assert_allclose(np.sin(x).get(), np.sin(a), rtol=RTOL)
    np.testing.assert_allclose(float(np.add.reduce(x)), np.add.reduce(a), rtol=RTOL)
    with pytest.raises(dl.NotSupportedYet, match=r"numpy\.frexp"):
        np.frexp(x)  # two outputs
    with pytest.raises(dl.NotSupportedYet, match=r"numpy\.add\.at"):
        np.add.at(x, [0], 1.0)


def test_cg_on_arrays_matches_scipy(sess: dl.Session) -> None:
    from scipy.sparse.linalg import spsolve

    A = laplacian(12)
    b = rand(A.shape[0], seed=9)
    x, its = cg(sess, A, b)
    np.testing.assert_allclose(x.get(), spsolve(A.tocsc(), b), rtol=1e-8, atol=1e-9)
    assert 10 < its < A.shape[0]


# -- deferred, fused, compiled once ------------------------------------------------------------


def _chain(v: np.ndarray) -> np.ndarray:
    return (v + 1.0) * v - v * 3.0 + 2.0 * v - v


def test_nothing_runs_until_a_value_is_read(sess: dl.Session) -> None:
    x = sess.asarray(rand(6, seed=10))
    y = (x + 1.0) * x - x * 3.0 + 2.0 * x - x
    s = y @ y
    assert sess.kernels_run == 0
    assert sess.compiles == 0
    assert "deferred" in repr(s)
    float(s)
    # the element-wise chain (dead: only y and s are held) fuses into y, and y with the
    # inner product that reads it into one fused set: one pass computes both
    assert sess.kernels_run == 1
    np.testing.assert_allclose(float(s), _chain(x.get()) @ _chain(x.get()), rtol=1e-12)
    del y
    z = x * 2.0 + 1.0
    t = z @ z  # z is live: computed once, and read back by the inner product in its set
    float(t)
    assert sess.kernels_run == 2
    w = x * 2.0
    got = float((w * w - 1.0).sum())  # w and the sum, the dead chain between inside it
    assert sess.kernels_run == 3
    v = x.get() * 2.0
    np.testing.assert_allclose(got, (v * v - 1.0).sum(), rtol=1e-12)


def test_every_kernel_moves_what_it_predicted() -> None:
    sess = dl.Session("local", machine=3, check_stats=True)
    A, b = laplacian(5), rand(25, seed=40)
    cg(sess, A, b)
    d = sess.asarray(rand(6, 4, seed=41))
    (d.T @ (d * 2.0 + 1.0)).get()  # a transposed read: redistribution and a kernel
    maps = sess.maps_run  # cg's fused sets are maps
    dl.sqrt(dl.abs(d) + 1.0).get()  # a map
    assert sess.maps_run == maps + 1
    assert sess.stats_checked == sess.kernels_run - sess.maps_run > 0
    assert sess.stats_differ == []


def test_a_loop_compiles_only_in_its_first_iteration(sess: dl.Session) -> None:
    A = laplacian(6)
    b = rand(36, seed=11)
    cg(sess, A, b)
    first = sess.compiles
    runs = sess.kernels_run
    _x, its = cg(sess, A, b)
    assert sess.compiles == first  # the second solve compiles nothing
    per_iteration = (sess.kernels_run - runs) / its
    # q with p.q as its epilogue, p, and x, r, r.r as one fused set (the 0-d ones are not
    # kernels): three
    assert per_iteration <= 3.2, per_iteration


def test_values_of_dropped_arrays_leave_the_session(sess: dl.Session) -> None:
    x = sess.asarray(rand(10, seed=12))
    for _ in range(20):
        x = x * 0.5 + 1.0
        float(x @ x)
    assert len([n for n in sess.values if n.startswith("_")]) <= 3
    np.testing.assert_allclose(x.get()[0], _fixed_point(rand(10, seed=12)[0], 20), rtol=RTOL)


def _fixed_point(v: float, n: int) -> float:
    for _ in range(n):
        v = v * 0.5 + 1.0
    return v


def test_named_values_and_snapshots(sess: dl.Session) -> None:
    a = rand(4, seed=13)
    sess["v"] = a
    old = sess["v"]
    sess["v"] = old * 2.0  # rebinding the name does not change what old reads
    np.testing.assert_allclose(old.get(), a, rtol=RTOL)
    np.testing.assert_allclose(sess.get("v"), 2.0 * a, rtol=RTOL)
    np.testing.assert_allclose(sess["v"].get(), 2.0 * a, rtol=RTOL)
    sess["w"] = sess["v"] + old
    np.testing.assert_allclose(sess.get("w"), 3.0 * a, rtol=RTOL)
    assert sess.names() == ["v", "w"]  # the values behind unnamed arrays are not listed


# -- errors at the line ---------------------------------------------------------------------------


def test_errors_are_raised_by_the_operation(sess: dl.Session) -> None:
    x, y = sess.asarray(rand(6, 4)), sess.asarray(rand(5))
    with pytest.raises(dl.ShapeError, match=r"\(6, 4\) \+ \(5,\)"):
        x + y
    with pytest.raises(dl.ShapeError, match="do not align"):
        x @ y
    with pytest.raises(dl.InputError, match="'nope'"):
        sess["nope"]
    with pytest.raises(dl.InputError, match="condition must be boolean"):
        dl.where(x, x, x)
    with pytest.raises(dl.InputError, match="axis 2"):
        x.sum(2)
    with pytest.raises(dl.InputError, match="another session"):
        x + dl.Session(machine=2).asarray(rand(6, 4))
    with pytest.raises(dl.InputError, match=r"not an array operand|non-numeric"):
        x + "a"
    sess["A"] = sp.random(6, 6, density=0.3, random_state=0, format="csr")
    with pytest.raises(dl.NotSupportedYet, match="sparse"):
        sess["A"] * 2.0
    with pytest.raises(dl.ShapeError, match="label 'j'"):
        dl.einsum("ij,j->i", x, y)
    assert sess.kernels_run == 0  # nothing ran for any of them
    with np.errstate(divide="ignore"):  # numpy's inf, as for an array of zeros
        assert np.all(np.isinf(np.asarray(x / 0)))


# -- checkpointed loops -------------------------------------------------------------------------


def test_arrays_in_a_checkpointed_loop_resume_exactly(tmp_path: object) -> None:
    a = rand(8, 8, seed=14) * 0.1
    b = rand(8, seed=15)

    def run(stop: int | None) -> tuple[np.ndarray, int | None]:
        sess = dl.Session("local", checkpoint=tmp_path, machine=2)
        sess["A"], sess["x"] = a, np.zeros(8)
        for it in sess.iterations(6, keep=["x"], name="jacobi"):
            x = sess["x"]
            sess["x"] = sess["A"] @ x + b
            if stop is not None and it == stop:
                break
        return sess.get("x"), sess.resumed_from

    run(stop=3)  # iterations 0..2 saved; 3 broke off unsaved
    x, resumed = run(stop=None)
    assert resumed == 2
    want = np.zeros(8)
    for _ in range(6):
        want = a @ want + b
    np.testing.assert_allclose(x, want, rtol=RTOL)
    fresh = dl.Session("local", machine=2)
    fresh["A"], fresh["x"] = a, np.zeros(8)
    for _ in range(6):
        fresh["x"] = fresh["A"] @ fresh["x"] + b
    assert np.array_equal(x, fresh.get("x"))  # bit-identical to an uninterrupted run
