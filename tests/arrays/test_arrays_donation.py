"""Donated blocks: a fused pass writes an element-wise member over the block of a value
nothing reads after it (CG's ``x = x + alpha * p`` once the old ``x`` is rebound), and over
no other. Results are numpy's bit for bit either way; what is checked here is that the
block is reused exactly where nothing can see the old value, and that every value anyone
can still read keeps its numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_arrays import lazy_cg, rand

import distal as dl
from distal.kernels import fused

pytest.importorskip("numba", reason="blocks are donated to the generated loop (numba)")

N = 2 * fused.MIN_SIZE + 3  # every processor's block takes the generated loop


def block(sess: Any, d: Any) -> np.ndarray:
    """The array holding ``d``'s value in a local session (no copy)."""
    sess.flush()
    return sess.values[d.program.name_of(d.node)].data


def start(sess: Any) -> tuple[Any, ...]:
    """``x``, ``p``, ``r``, ``q`` as the caller's arrays, and one update of ``x`` and ``r``
    (blocks a pass made, which later passes may take)."""
    xs, ps, rs, qs = (rand(N, seed=s) for s in (1, 2, 3, 4))
    x, p, r, q = (sess.asarray(a) for a in (xs, ps, rs, qs))
    x = x * 1.0 + 0.5 * p
    r = r - 0.25 * q
    float(r @ r)
    return (xs, ps, rs, qs), (x, p, r, q)


@pytest.mark.parametrize("procs", [1, 2])
def test_a_rebound_vector_is_updated_in_its_own_block(procs: int) -> None:
    sess = dl.Session("local", machine=procs)
    given, (x, p, r, q) = start(sess)
    copies = [a.copy() for a in given]
    xw, pw, rw, qw = copies
    xw = xw * 1.0 + 0.5 * pw
    rw = rw - 0.25 * qw
    for it in range(3):
        bx, br = block(sess, x), block(sess, r)
        x = x + 0.5 * p
        r = r - 0.25 * q
        s = float(r @ r)
        xw = xw + 0.5 * pw
        rw = rw - 0.25 * qw
        assert block(sess, x) is bx, it  # written in place
        assert block(sess, r) is br, it
        np.testing.assert_array_equal(x.get(), xw)  # numpy's bits
        np.testing.assert_array_equal(r.get(), rw)
        assert s == pytest.approx(float(rw @ rw), rel=1e-12)
    for a, c in zip(given, copies, strict=True):  # the caller's arrays: never written
        np.testing.assert_array_equal(a, c)


def test_a_lone_update_takes_the_block_it_replaces() -> None:
    """The refusals below are against this: the same update, alone in its set, with
    nothing holding the old value, is written over it."""
    sess = dl.Session("local", machine=2)
    _, (x, p, _, _) = start(sess)
    want = x.get() + 0.5 * p.get()
    bx = block(sess, x)
    x = x + 0.5 * p
    assert block(sess, x) is bx
    np.testing.assert_array_equal(x.get(), want)


def test_a_set_whose_sum_numpy_adds_donates_nothing() -> None:
    """A one-operand sum is added by numpy after the pass, reading the slots: with one in
    the set, no block is written over."""
    sess = dl.Session("local", machine=2)
    _, (x, p, _, _) = start(sess)
    bx = block(sess, x)
    x = x + 0.5 * p
    float(x.sum())
    assert block(sess, x) is not bx


def test_a_value_a_handle_still_holds_keeps_its_numbers() -> None:
    sess = dl.Session("local", machine=2)
    _, (x, p, _, _) = start(sess)
    old = x
    want = old.get()
    bx = block(sess, x)
    x = x + 0.5 * p
    assert block(sess, x) is not bx
    np.testing.assert_array_equal(old.get(), want)
    np.testing.assert_array_equal(x.get(), want + 0.5 * p.get())


def test_a_value_the_session_names_keeps_its_numbers() -> None:
    sess = dl.Session("local", machine=2)
    _, (x, p, _, _) = start(sess)
    sess["kept"] = x
    want = x.get()
    bx = block(sess, x)
    x = x + 0.5 * p
    assert block(sess, x) is not bx
    np.testing.assert_array_equal(sess.get("kept"), want)


def test_a_value_a_pending_array_reads_later_keeps_its_numbers() -> None:
    """``y`` reads the old ``x`` and is computed after the set that rebinds ``x``: the
    set may not write over it (here ``y`` is a contraction, which no set takes)."""
    sess = dl.Session("local", machine=2)
    m = fused.MIN_SIZE
    a, b = rand(m, 2, seed=5), rand(m, 2, seed=6)
    x, p = sess.asarray(a) * 1.0, sess.asarray(b)
    float(x.sum())
    bx = block(sess, x)
    x_new = x + 0.5 * p
    y = x.T @ x  # pending, after x_new
    del x
    sess.flush()
    np.testing.assert_allclose(y.get(), a.T @ a, rtol=1e-12)
    assert block(sess, x_new) is not bx
    np.testing.assert_array_equal(x_new.get(), a + 0.5 * b)


def test_a_checkpointed_session_never_donates(tmp_path: Any) -> None:
    """A writer thread may be saving any held block: nothing is written over."""
    sess = dl.Session("local", machine=2, checkpoint=str(tmp_path))
    _, (x, p, _, _) = start(sess)
    bx = block(sess, x)
    want = bx.copy()
    x = x + 0.5 * p
    assert block(sess, x) is not bx
    np.testing.assert_array_equal(bx, want)


def test_cg_updates_its_vectors_in_place_and_agrees_with_scipy() -> None:
    """``dl.apps.cg`` without a checkpoint names none of its vectors, so each update is
    written over the vector it replaces; the solution is the same as with a checkpoint
    (where every vector is kept and nothing is donated)."""
    from test_arrays import laplacian

    A = laplacian(300)  # 90 000 rows: blocks of the loop's size on 1 processor
    b = rand(A.shape[0], seed=7)
    made = []
    import distal.arrays.lower as lower

    take = lower._made

    def counting(recycler: Any, shape: tuple[int, ...]) -> np.ndarray:
        made.append(shape)
        return take(recycler, shape)

    lower._made = counting
    try:
        x, its = dl.apps.cg(A, b, machine=1, maxiter=12, tol=0.0)
    finally:
        lower._made = take
    fresh = len(made)
    assert its == 12
    # without donation every iteration takes three blocks (x, r, p) from the passes
    assert fresh <= 6, fresh
    from scipy.sparse.linalg import cg as scipy_cg

    want, _ = scipy_cg(A, b, rtol=1e-300, atol=0.0, maxiter=12)
    np.testing.assert_allclose(x, want, rtol=1e-9, atol=1e-12)


def test_a_member_reading_the_donated_value_after_it_reads_the_old_numbers() -> None:
    """``x2 = x + 0.5 p`` takes ``x``'s block and ``y = x * 2`` (after it in the same pass)
    still reads the old ``x``: the loop stores an element's members only after computing
    them all."""
    sess = dl.Session("local", machine=2)
    _, (x, p, _, _) = start(sess)
    xs, ps = x.get(), p.get()
    bx = block(sess, x)
    x, y = x + 0.5 * p, x * 2.0 - p
    assert block(sess, x) is bx
    np.testing.assert_array_equal(x.get(), xs + 0.5 * ps)
    np.testing.assert_array_equal(y.get(), xs * 2.0 - ps)


def test_a_donated_block_is_stored_through_its_own_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop for a donated member stores through the donated slot's array (one array
    read and written, which the compiler vectorizes), and gives the bits of the loop that
    writes a fresh array, reductions included; the in-place CG update takes that loop."""
    exprs = (("add", ("slot", 0), ("mul", ("slot", 1), ("slot", 2))),)  # p = r + beta p
    plain = fused.elementwise_pass(exprs, (None,), (False, True, False))
    aliased = fused.elementwise_pass(exprs, (None,), (False, True, False), (), (2,))
    assert plain is not None
    assert aliased is not None
    assert aliased is not plain
    r, p = rand(N, seed=5), rand(N, seed=6)
    fresh = np.empty(N)
    plain([fresh], [r, 0.75, p], 0, N)
    inplace = p.copy()
    aliased([np.empty(0)], [r, 0.75, inplace], 0, N)  # (its own output argument unused)
    np.testing.assert_array_equal(inplace, fresh)
    np.testing.assert_array_equal(fresh, r + 0.75 * p)
    # x = x + a p, r = r - a q with r . r in the same pass, x and r in place
    two = (
        ("add", ("slot", 0), ("mul", ("slot", 1), ("slot", 2))),
        ("sub", ("slot", 3), ("mul", ("slot", 1), ("slot", 4))),
    )
    dots = ((("slot", 5), ("slot", 5)),)
    scalars = (False, True, False, False, False, True)
    plain2 = fused.elementwise_pass(two, (None, 5), scalars, dots)
    aliased2 = fused.elementwise_pass(two, (None, 5), scalars, dots, (0, 3))
    assert plain2 is not None
    assert aliased2 is not None
    x, q, rr = rand(N, seed=7), rand(N, seed=8), rand(N, seed=9)
    o1, o2 = np.empty(N), np.empty(N)
    s_plain = plain2([o1, o2], [x, 0.5, p, rr, q, 0.0], 0, N)
    xi, ri = x.copy(), rr.copy()
    s_alias = aliased2([np.empty(0), np.empty(0)], [xi, 0.5, p, ri, q, 0.0], 0, N)
    np.testing.assert_array_equal(xi, o1)
    np.testing.assert_array_equal(ri, o2)
    assert s_alias == s_plain
    # a session's in-place update runs the aliased loop
    sess = dl.Session("local", machine=1)
    _, (xv, pv, _, _) = start(sess)
    asked: list[tuple] = []
    real = fused.elementwise_pass

    def spy(*args: Any) -> Any:
        asked.append(args[4] if len(args) > 4 else ())
        return real(*args)

    monkeypatch.setattr(fused, "elementwise_pass", spy)
    bx = block(sess, xv)
    xv = xv + 0.5 * pv
    assert block(sess, xv) is bx
    assert (0,) in asked, asked


@pytest.mark.parametrize("procs", [1, 2])
def test_lazily_recorded_cg_agrees_with_numpy(procs: int) -> None:
    """The epilogue ``p @ q`` of ``q = A @ p`` is worked out before ``A @ p`` runs, with
    the pending ``p = r + beta * p_old`` computed inside it from ``p_old``; making ``p``
    (the product's operand) first may not write it over ``p_old``'s block, which that
    epilogue still reads. (It did: x was off by 0.49 here.)"""
    import scipy.sparse as sp

    n = fused.MIN_SIZE  # the smallest vector the generated loop (and donation) takes
    A = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    b = rand(n, seed=11)
    want = lazy_cg(A, b, 3)
    sess = dl.Session("local", machine=procs)
    got = lazy_cg(sess.asarray(A), sess.asarray(b), 3).get()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
