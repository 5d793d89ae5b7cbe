"""Fused sets: the element-wise arrays a flush computes over one shape, and the full
reductions that read them, run as one map (one pass over each processor's blocks; the
reductions' partial sums added in processor order). Against numpy: the element-wise
members bit for bit (they are computed as numpy computes them), the reductions to
rounding; on MPI and Dask, the same values as on the local runtime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_arrays import laplacian, rand

import distal as dl
from distal.kernels import fused


def fused_set(sess: Any, n: int) -> list[float]:
    """:func:`fused_set_values`, which must run as one kernel."""
    return fused_set_values(sess, n, expect_kernels=1)


def fused_set_values(sess: Any, n: int, expect_kernels: int) -> list[float]:
    """One CG-like fused set over vectors of ``n``: ``x + alpha p``, ``r - alpha q`` and
    ``r . r`` of the new ``r``, with ``(x - r) @ (x - r)`` (a chain that adds under a
    reduction, computed first) and a sum; returns the three scalars and the two vectors'
    sums (what every runtime must agree on), after checking the kernel count."""
    x, p, r, q = (sess.asarray(rand(n, seed=s)) for s in (20, 21, 22, 23))
    alpha = (r @ r) / (p @ q)
    float(alpha)
    before = sess.kernels_run
    x2 = x + alpha * p
    r2 = r - alpha * q
    rs = r2 @ r2
    d = (x2 - r2) @ (x2 - r2)
    t = (x2 * 2.0).sum()
    got = [float(rs), float(d), float(t)]
    assert sess.kernels_run - before == expect_kernels, sess.kernels_run - before
    return [*got, float(x2.get().sum()), float(r2.get().sum())]


def spmv_epilogue(sess: Any, n: int, kernels: int = 1) -> list[float]:
    """``q = A @ p`` on a sparse ``A`` and the reductions of ``q`` after it (``p @ q``,
    ``q @ q`` and an einsum of ``q`` with ``p * 2``), which must run as one kernel; returns
    the three scalars and ``q``'s sum."""
    A = sess.asarray(laplacian(n))
    p = sess.asarray(rand(n * n, seed=24))
    float(p @ p)  # p placed, before the count
    before = sess.kernels_run
    q = A @ p
    pq, qq, e = p @ q, q @ q, dl.einsum("i,i->", q, p * 2.0)
    got = [float(pq), float(qq), float(e)]
    assert sess.kernels_run - before == kernels, sess.kernels_run - before
    return [*got, float(q.get().sum())]


def spmv_epilogue_apart(sess: Any, n: int) -> list[float]:
    """:func:`spmv_epilogue` in a session that does not fuse: four kernels (the einsum's
    ``p * 2`` is fused into its kernel)."""
    return spmv_epilogue(sess, n, kernels=4)


def _reference(n: int) -> list[float]:
    x, p, r, q = (rand(n, seed=s) for s in (20, 21, 22, 23))
    alpha = (r @ r) / (p @ q)
    x2, r2 = x + alpha * p, r - alpha * q
    return [r2 @ r2, (x2 - r2) @ (x2 - r2), (x2 * 2.0).sum(), x2.sum(), r2.sum()]


@pytest.mark.parametrize("procs", [1, 2, 3, 5])
@pytest.mark.parametrize("n", [1, 4, 37])
def test_a_fused_set_is_one_kernel_and_agrees_with_numpy(procs: int, n: int) -> None:
    sess = dl.Session("local", machine=procs)
    np.testing.assert_allclose(fused_set(sess, n), _reference(n), rtol=1e-12)


def test_element_wise_members_are_numpys_bit_for_bit() -> None:
    sess = dl.Session("local", machine=2)
    a, b = rand(50, seed=1), rand(50, seed=2)
    x, y = sess.asarray(a), sess.asarray(b)
    c = sess.asarray(np.float64(0.37))
    u = x + c * y
    v = (x - y) * (u + 1.0)  # a product of sums: a map's numpy order, fused with u
    w = u @ v
    float(w)
    assert sess.kernels_run == 1
    wu = a + np.float64(0.37) * b
    wv = (a - b) * (wu + 1.0)
    np.testing.assert_array_equal(u.get(), wu)
    np.testing.assert_array_equal(v.get(), wv)
    # the partial sums of the two processors' blocks (25 and 25), added in order
    assert float(w) == float(np.dot(wu[:25], wv[:25]) + np.dot(wu[25:], wv[25:]))


def test_dtypes_promote_as_numpys() -> None:
    sess = dl.Session("local", machine=2)
    a32 = rand(9, seed=3).astype(np.float32)
    z = rand(9, seed=4) + 1j * rand(9, seed=5)
    x, c = sess.asarray(a32), sess.asarray(z)
    y = x * 2.0
    s = y @ y
    m = c * x
    k = m @ m
    float(s)
    assert sess.kernels_run == 1
    assert (y.dtype, s.dtype) == (np.float32, np.float32)
    assert (m.dtype, k.dtype) == (np.complex128, np.complex128)
    np.testing.assert_array_equal(y.get(), a32 * 2.0)
    np.testing.assert_allclose(s.get(), (a32 * 2.0) @ (a32 * 2.0), rtol=1e-6)
    np.testing.assert_allclose(complex(k.get()), (z * a32) @ (z * a32), rtol=1e-12)


def test_what_cannot_join_a_set_runs_by_itself() -> None:
    """A node reading a reduction of the set (its sum is known only once every block is
    done), a node of another shape and a matrix product end the set."""
    sess = dl.Session("local", machine=2)
    a, M = rand(8, seed=6), rand(8, 8, seed=7)
    x, A = sess.asarray(a), sess.asarray(M)
    y = x * 3.0
    s = y @ y
    z = y * s  # reads s: not in s's set
    w = A @ z  # a matrix product: a kernel of its own
    np.testing.assert_allclose(w.get(), M @ ((a * 3.0) * ((a * 3.0) @ (a * 3.0))), rtol=1e-12)
    assert sess.kernels_run == 3  # {y, s}, z, w


def test_a_full_contraction_of_matrices_fuses() -> None:
    sess = dl.Session("local", machine=3)
    a, b = rand(7, 4, seed=8), rand(7, 4, seed=9)
    x, y = sess.asarray(a), sess.asarray(b)
    u = x - 2.0 * y
    e = dl.einsum("ij,ij->", u, x)
    total = u.sum()
    np.testing.assert_allclose(float(e), np.einsum("ij,ij->", a - 2.0 * b, a), rtol=1e-12)
    np.testing.assert_allclose(float(total), (a - 2.0 * b).sum(), rtol=1e-12)
    assert sess.kernels_run == 1


def test_a_fused_set_on_dask_matches_local(dask_client: Any) -> None:
    pytest.importorskip("distributed")
    sess: Any = dl.Session("dask", client=dask_client, machine=2)
    before = sess.driver_words
    got = fused_set(sess, 37)
    assert got == fused_set(dl.Session("local", machine=2), 37)
    # the fused set ran on the workers: only what the program read crossed (3 scalars, the
    # two vectors' blocks read by .get(), and alpha's operands read by float)
    assert sess.driver_words - before <= 3 + 2 * 37 + 4


def test_a_dask_session_that_verifies_fuses_and_checks_each_fused_block(
    dask_client: Any,
) -> None:
    """Under ``verify=`` a fused set still runs as one pass per block: each block is
    computed on one worker and again on another, and its partial sums come to the driver
    from the check (so the reduction's result is a checked one)."""
    pytest.importorskip("distributed")
    sess: Any = dl.Session("dask", client=dask_client, machine=2, verify="check")
    xv = rand(12, seed=10)
    x = sess.asarray(xv)
    y = x * 2.0
    s = y @ y
    np.testing.assert_allclose(float(s), (xv * 2.0) @ (xv * 2.0))
    np.testing.assert_allclose(y.get(), xv * 2.0)
    assert sess.kernels_run == 1  # the map and the dot as one fused set
    assert sess.maps_checked == 2  # its two processors' blocks, each computed twice


def test_a_large_fused_set_takes_one_loop_and_reuses_only_what_nothing_holds() -> None:
    """Float64 blocks of ``MIN_SIZE`` elements or more: one generated loop (the same values
    as numpy's, bit for bit) whose outputs are recycled once the session dropped them; an
    old value still held by a handle, or by a numpy view of it, is never written over."""
    pytest.importorskip("numba")

    n = fused.MIN_SIZE + 7
    xv, pv, rv, qv = (rand(n, seed=s) for s in (30, 31, 32, 33))
    sess = dl.Session("local", machine=2)
    x, p, r, q = (sess.asarray(v) for v in (xv, pv, rv, qv))
    alpha = sess.asarray(np.float64(0.25))
    held, view = [], None
    for it in range(6):
        x = x + alpha * p
        r = r - alpha * q
        rs = r @ r
        float(rs)
        xv, rv = xv + 0.25 * pv, rv - 0.25 * qv
        np.testing.assert_array_equal(x.get(), xv)
        np.testing.assert_array_equal(r.get(), rv)
        half = n // 2 + n % 2  # the first processor's block
        assert float(rs) == float(np.dot(rv[:half], rv[:half]) + np.dot(rv[half:], rv[half:]))
        if it == 1:
            held.append((x, xv.copy()))  # a handle on an old x
        if it == 2:
            view = (np.asarray(r), rv.copy())  # numpy's view of an old r
    for h, want in held:
        np.testing.assert_array_equal(h.get(), want)
    assert view is not None
    np.testing.assert_array_equal(view[0], view[1])
    assert sess.kernels_run == 6


@pytest.mark.parametrize("procs", [1, 2, 3])
def test_the_loop_adds_the_reductions_in_dots_order(procs: int) -> None:
    """Where every processor's block takes dot's compiled loop (``MIN_SIZE`` elements or
    more), the fused pass adds the two-operand reductions up as it computes the members:
    the same bits as :func:`distal.kernels.fused.dot` of each block, added in processor
    order, and the members numpy's bit for bit; a one-operand sum stays numpy's."""
    pytest.importorskip("numba")

    n = procs * fused.MIN_SIZE + 5
    xv, pv, rv, qv = (rand(n, seed=s) for s in (40, 41, 42, 43))
    sess = dl.Session("local", machine=procs)
    x, p, r, q = (sess.asarray(v) for v in (xv, pv, rv, qv))
    for _ in range(2):
        x = x + 0.5 * p
        r = r - 0.5 * q
        rs = r @ r  # a member with itself
        pr = p @ (r * 3.0)  # a slot with an expression of a member
        total = x.sum()  # one operand: numpy's sum
        float(rs)
        xv, rv = xv + 0.5 * pv, rv - 0.5 * qv
        np.testing.assert_array_equal(x.get(), xv)
        np.testing.assert_array_equal(r.get(), rv)
        size = -(-n // procs)
        cuts = [(k * size, min(n, (k + 1) * size)) for k in range(procs)]

        def by_blocks(a: np.ndarray, b: np.ndarray, cuts: list = cuts) -> float:
            out = fused.dot(a[: cuts[0][1]], b[: cuts[0][1]])
            for lo, hi in cuts[1:]:
                out = out + fused.dot(a[lo:hi], b[lo:hi])
            return float(out)

        assert float(rs) == by_blocks(rv, rv)
        assert float(pr) == by_blocks(pv, rv * 3.0)
        parts = [np.sum(xv[lo:hi]) for lo, hi in cuts]
        assert float(total) == float(sum(parts[1:], parts[0]))
    # (and the reductions were the loop's: a pass adding two was compiled)
    assert any(len(key[3]) == 2 and run is not None for key, run in fused._PASSES.items())


def test_a_large_array_alone_runs_as_a_fused_set_of_one() -> None:
    """A float64 element-wise array of ``MIN_SIZE`` elements or more that fuses with nothing
    still takes the fused path (one pass, recycled outputs), not a kernel; a lone reduction
    and a small array are index-notation kernels as before."""

    n = fused.MIN_SIZE
    a, b = rand(n, seed=40), rand(n, seed=41)
    sess = dl.Session("local", machine=2)
    x, y = sess.asarray(a), sess.asarray(b)
    maps = sess.maps_run
    z = x + 0.5 * y
    np.testing.assert_array_equal(z.get(), a + 0.5 * b)
    assert sess.maps_run - maps == 1
    d = x @ y
    np.testing.assert_allclose(float(d), a @ b, rtol=1e-12)
    small = sess.asarray(a[:100]) + 1.0
    np.testing.assert_allclose(small.get(), a[:100] + 1.0)
    assert sess.maps_run - maps == 1  # the lone reduction and the small one: kernels


def test_fuse_false_runs_every_group_by_itself() -> None:
    sess = dl.Session("local", machine=2, fuse=False)
    got = fused_set_values(sess, 37, expect_kernels=7)  # each group, and its chains, by itself
    assert got == pytest.approx(_reference(37), rel=1e-12)
    with pytest.raises(dl.InputError, match="fuse"):
        dl.Session("local", fuse="yes")


@pytest.mark.parametrize("fuse", [True, False])
def test_sums_of_booleans_and_narrow_integers_count_as_numpys(fuse: bool) -> None:
    """numpy sums booleans and narrower integers in the platform integer: a fused set, and
    an index-notation kernel (its operands widened to the output's dtype), count the same
    (once, ``.sum()`` of booleans said True and an int8 sum wrapped)."""
    sess = dl.Session("local", machine=2, fuse=fuse)
    for a in (
        np.array([True, False, True, True]),
        np.full(4, 100, dtype=np.int8),
        np.full(4, 200, dtype=np.uint8),
        np.ones((3, 4), dtype=np.int16) * 30000,
    ):
        x = sess.asarray(a)
        for axis in (None, 0):
            got = x.sum(axis=axis)
            want = a.sum(axis=axis)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.get(), want)


def test_empty_arrays_compute_as_numpys() -> None:
    """An empty array (a tensor has positive extents, so no kernel) is computed as numpy
    computes it: empty element-wise results, zeros for sums over an empty axis."""
    sess = dl.Session("local", machine=2)
    e, m = np.zeros(0), np.zeros((0, 3))
    x, y = sess.asarray(e), sess.asarray(m)
    np.testing.assert_array_equal((x * 2.0 + 1.0).get(), e * 2.0 + 1.0)
    assert float(x @ x) == 0.0
    assert float(x.sum()) == 0.0
    np.testing.assert_array_equal((y.T @ y).get(), m.T @ m)
    np.testing.assert_array_equal(y.sum(axis=0).get(), m.sum(axis=0))
    assert dl.exp(y).get().shape == (0, 3)
    sess["w"] = x + 1.0
    assert sess.get("w").shape == (0,)


@pytest.mark.parametrize("procs", [1, 2, 3])
@pytest.mark.parametrize("n", [2, 7])
def test_a_sparse_product_and_the_reductions_of_its_result_are_one_kernel(
    procs: int, n: int
) -> None:
    """``q = A @ p; p @ q`` as CG writes it: the reductions run over the product's result
    blocks where they lie, as its kernel's epilogue (the partial sums of each processor's
    rows added in processor order)."""
    sess = dl.Session("local", machine=procs)
    got = spmv_epilogue(sess, n)
    A, p = laplacian(n), rand(n * n, seed=24)
    q = A @ p
    np.testing.assert_allclose(got, [p @ q, q @ q, q @ (p * 2.0), q.sum()], rtol=1e-12)
    # the epilogue reads the blocks where they lie: what moves is what the product and
    # separate reduction kernels move
    apart = dl.Session("local", machine=procs, fuse=False)
    spmv_epilogue_apart(apart, n)
    assert sess.moved_words == apart.moved_words


@pytest.mark.parametrize("procs", [1, 2])
def test_a_power_iteration_is_two_kernels(procs: int) -> None:
    """PageRank's step, ``x_new = 0.85 * (PT @ x) + (0.85 * (d @ x) + 0.15) / n`` and
    ``abs(x_new - x).sum()``: the product first, with ``d @ x`` (values only) as its
    epilogue, then ``x_new`` and the sum as one fused set over its result (``abs`` spelled
    by the loop) — two kernels an iteration, where ``x_new`` was an index-notation kernel
    of its own; ``x_new`` is numpy's bit for bit from the same product and scalar."""
    pytest.importorskip("numba")
    sps = pytest.importorskip("scipy.sparse")

    n = 2 * fused.MIN_SIZE + 3
    rng = np.random.default_rng(50)
    PT = sps.random(n, n, density=4.0 / n, format="csr", random_state=rng)
    dv = (rng.random(n) < 0.1).astype(np.float64)
    sess = dl.Session("local", machine=procs)
    A, d = sess.asarray(PT), sess.asarray(dv)
    x, xv = d * 0.0 + 1.0 / n, np.full(n, 1.0 / n)
    for it in range(3):
        before = sess.kernels_run
        q = A @ x
        x_new = 0.85 * q + (0.85 * (d @ x) + 0.15) / n
        delta = dl.abs(x_new - x).sum()
        got = float(delta)
        if it:  # (the first iteration places the operands)
            assert sess.kernels_run - before == 2, sess.kernels_run - before
        qv, c = q.get(), (0.85 * float(np.dot(dv, xv)) + 0.15) / n
        np.testing.assert_allclose(qv, PT @ xv, rtol=1e-12, atol=1e-300)
        want = 0.85 * qv + c
        np.testing.assert_allclose(x_new.get(), want, rtol=1e-12)
        assert got == pytest.approx(float(np.abs(want - xv).sum()), rel=1e-12)
        x, xv = x_new, x_new.get()


def test_abs_and_sqrt_in_the_loop_are_numpys_bit_for_bit() -> None:
    """``abs`` and ``sqrt`` in a large fused set take the generated loop: numpy's values,
    negative zeros and infinities bit for bit, NaN where numpy has NaN."""
    pytest.importorskip("numba")

    n = fused.MIN_SIZE + 11
    v = rand(n, seed=60) - 0.5
    v[:6] = [-0.0, 0.0, -np.inf, np.inf, np.nan, -np.nan]
    w = rand(n, seed=61) + 0.25
    sess = dl.Session("local", machine=2)
    x, y = sess.asarray(v), sess.asarray(w)
    with np.errstate(invalid="ignore"):
        a = dl.abs(x) * 2.0 + x
        b = dl.sqrt(y) - x
        np.testing.assert_array_equal(a.get(), np.abs(v) * 2.0 + v)
        np.testing.assert_array_equal(b.get(), np.sqrt(w) - v)
        num = ~np.isnan(v)  # (a NaN's sign bit, which IEEE leaves open, is not compared)
        want_sign = np.signbit(np.abs(v) * 2.0 + v)[num]
        np.testing.assert_array_equal(np.signbit(a.get())[num], want_sign)
    assert any(run is not None and "abs" in repr(key[0]) for key, run in fused._PASSES.items())


def test_a_product_without_reductions_after_it_is_a_kernel_alone() -> None:
    sess = dl.Session("local", machine=2)
    A, a = laplacian(4), rand(16, seed=25)
    p = sess.asarray(a)
    q = sess.asarray(A) @ p
    z = q * 2.0  # element-wise over the product: a group of its own
    np.testing.assert_allclose(z.get(), (A @ a) * 2.0, rtol=1e-12)
    assert sess.kernels_run == 2


def test_a_sparse_product_epilogue_on_dask_matches_local(dask_client: Any) -> None:
    pytest.importorskip("distributed")
    sess: Any = dl.Session("dask", client=dask_client, machine=2)
    assert spmv_epilogue(sess, 6) == spmv_epilogue(dl.Session("local", machine=2), 6)


@pytest.mark.parametrize("procs", [1, 2, 3])
def test_a_dense_matrix_vector_product_takes_its_reductions_as_an_epilogue(procs: int) -> None:
    m, a = rand(9, 9, seed=26), rand(9, seed=27)
    counts = []
    for fuse in (True, False):
        sess = dl.Session("local", machine=procs, fuse=fuse)
        A, p = sess.asarray(m), sess.asarray(a)
        float(p @ p)  # placed, before the count
        before, moved = sess.kernels_run, sess.moved_words
        q = A @ p
        pq = p @ q
        np.testing.assert_allclose(float(pq), a @ (m @ a), rtol=1e-12)
        np.testing.assert_allclose(q.get(), m @ a, rtol=1e-12)
        counts.append((sess.kernels_run - before, sess.moved_words - moved))
    assert counts[0][0] == 1, counts  # q with p @ q as its epilogue
    assert counts[1][0] == 2, counts
    assert counts[0][1] == counts[1][1], counts  # the epilogue moved nothing more


@pytest.mark.parametrize("n", [fused.MIN_SIZE, fused.MIN_SIZE + 3, 5 * fused.MIN_SIZE + 1])
def test_a_reductions_dot_product_is_numpys_to_rounding(n: int) -> None:
    """The compiled dot of a fused set's partial sums (numpy's BLAS threads would spin
    into the next leaves) against numpy's, with the summation bound ``n u sum|a b|``;
    small float64 operands are numpy's own (a strided view as its contiguous copy)."""
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    got = fused.dot(a, b)
    bound = n * np.finfo(float).eps * float(np.abs(a) @ np.abs(b))
    assert abs(got - np.dot(a, b)) <= bound
    assert got == fused.dot(a.copy(), b.copy())  # one fixed order
    assert fused.dot(a[:100], b[:100]) == np.dot(a[:100], b[:100])
    # a strided view adds in the order of its values, as a contiguous copy does
    assert fused.dot(a[::2], b[::2]) == fused.dot(a[::2].copy(), b[::2].copy())
    # float32 terms are accumulated in float64 (distal.kernels.sums): within the products'
    # own rounding of the exact sum, whatever n
    f32 = a.astype(np.float32), b.astype(np.float32)
    got32 = fused.dot(*f32)
    assert got32.dtype == np.float32
    exact = np.dot(f32[0].astype(np.float64), f32[1].astype(np.float64))
    assert abs(float(got32) - exact) <= np.finfo(np.float32).eps * float(np.abs(a) @ np.abs(b))
