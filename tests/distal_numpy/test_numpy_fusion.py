"""Named values fuse as local variables do, and a transposed operand is read in another
index order, not moved."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

import distal as dl


def laplacian(n: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    return (sp.kron(sp.eye(n), t) + sp.kron(t, sp.eye(n))).tocsr()


def test_cg_through_session_names_runs_three_kernels_an_iteration() -> None:
    A = laplacian(8)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    sess = dl.Session("local", machine=2)
    sess["A"], sess["x"], sess["r"], sess["p"] = A, np.zeros_like(b), b, b
    sess["rs"] = sess["r"] @ sess["r"]

    def iteration() -> None:  # the contract's CG, every vector a session name
        q = sess["A"] @ sess["p"]
        alpha = sess["rs"] / (sess["p"] @ q)
        sess["x"] = sess["x"] + alpha * sess["p"]
        sess["r"] = sess["r"] - alpha * q
        rs_new = sess["r"] @ sess["r"]
        sess["p"] = sess["r"] + (rs_new / sess["rs"]) * sess["p"]
        sess["rs"] = rs_new

    for _ in range(3):
        iteration()
    sess.flush()
    runs, compiles = sess.kernels_run, sess.compiles
    for _ in range(10):
        iteration()
    sess.flush()
    assert sess.kernels_run - runs <= 30
    assert sess.compiles == compiles
    # the same loop over local variables: the same kernels
    local = dl.Session("local", machine=2)
    Ad, x, r = local.asarray(A), local.asarray(np.zeros_like(b)), local.asarray(b)
    p, rs = r, r @ r
    for it in range(13):
        q = Ad @ p
        alpha = rs / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
        if it == 2:
            local.flush()
            before = local.kernels_run
    local.flush()
    assert local.kernels_run - before == sess.kernels_run - runs
    np.testing.assert_allclose(sess.get("x"), x.get(), rtol=1e-12)


def test_a_bound_name_is_recorded_and_in_place_updates_through_its_handle() -> None:
    sess = dl.Session("local", machine=2)
    sess["u"] = np.arange(6.0)
    runs = sess.kernels_run
    sess["v"] = sess["u"] * 2.0  # recorded
    assert sess.kernels_run == runs
    assert "v" in sess
    assert "v" in sess.names()
    h = sess["v"]
    h += 1.0  # the name's handle: updates "v"
    np.testing.assert_array_equal(sess.get("v"), np.arange(6.0) * 2.0 + 1.0)
    old = sess["u"]
    sess["u"] = old + 10.0
    np.testing.assert_array_equal(old.get(), np.arange(6.0))  # the old handle keeps its value
    np.testing.assert_array_equal(sess.get("u"), np.arange(6.0) + 10.0)
    sess["u"] = np.ones(2)  # a value given replaces a pending binding
    np.testing.assert_array_equal(sess.get("u"), np.ones(2))


def test_logistic_regression_transpose_moves_nothing_but_the_weights() -> None:
    rng = np.random.default_rng(1)
    n, d = 400, 7
    Xn, yn = rng.standard_normal((n, d)), (rng.random(n) > 0.5).astype(float)
    sess = dl.Session("local", machine=2)
    X, y = sess.asarray(Xn), sess.asarray(yn)
    w = sess.asarray(np.zeros(d))
    wn = np.zeros(d)
    lr = 1e-2
    for _ in range(4):
        before = sess.moved_words
        p = 1.0 / (1.0 + dl.exp(-(X @ w)))
        w = w - lr * X.T @ (p - y)  # as numpy users write it
        w.get()
        assert sess.moved_words - before <= 2 * d  # the weights only, never X
        pn = 1.0 / (1.0 + np.exp(-(Xn @ wn)))
        wn = wn - lr * Xn.T @ (pn - yn)
    np.testing.assert_allclose(w.get(), wn, rtol=1e-10)


def test_black_scholes_is_one_fused_set_with_its_shared_nodes_computed_once() -> None:
    import distal.numpy as dnp
    from distal.arrays.lower import fused_signature

    n = 3000
    rng = np.random.default_rng(2)
    S, X, T = rng.random(n) * 90 + 10, rng.random(n) * 90 + 10, rng.random(n) * 2 + 0.1

    def bs(xp: object, s: object, x: object, t: object) -> tuple:
        d1 = (xp.log(s / x) + 0.065 * t) / (0.3 * xp.sqrt(t))
        d2 = d1 - 0.3 * xp.sqrt(t)
        return s * xp.exp(-d1 * d1) - x * xp.tanh(d2), x * xp.exp(-d2 * d2) - s * xp.tanh(d1)

    with dl.Session("local", machine=2) as sess:
        s, x, t = (dnp.asarray(v) for v in (S, X, T))
        call, put = bs(dnp, s, x, t)
        steps, _ = fused_signature([call.node, put.node], sess.arrays_program().is_value)
        assert [k for k, _, _ in steps].count("temp") >= 2  # d1 and d2, once each
        before = sess.kernels_run
        got = (np.asarray(call), np.asarray(put))
        assert sess.kernels_run == before + 1  # call and put: one fused set
    want = bs(np, S, X, T)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)  # numpy's values, bit for bit


def power_iteration(xp: Any, A: Any, iters: int) -> tuple[Any, Any]:
    v = xp.ones(A.shape[0])
    for _ in range(iters):
        w = A @ v
        v = w / xp.linalg.norm(w)
    return v, v @ (A @ v)


def test_a_long_lazy_loop_is_walked_in_linear_time(monkeypatch: Any) -> None:
    """Power iteration recorded for many iterations before one read: its graph shares every
    ``w`` (``w / norm(w)``), so a walk that does not remember what it saw doubles its work
    each iteration. The graph walks are counted (``is_value``, called once a node visited)."""
    import distal.numpy as dnp
    from distal.arrays.program import Program

    a = np.random.default_rng(3).random((100, 100))
    a = a.T @ a / 100 + np.eye(100)
    calls = [0]
    is_value = Program.is_value

    def counted(self: Program, node: Any) -> bool:
        calls[0] += 1
        assert calls[0] < 20_000, "the graph walks grow faster than the graph"
        return is_value(self, node)

    want = power_iteration(np, a, 40)
    with dl.Session("local", machine=2):
        A = dnp.asarray(a)
        A.get()
        monkeypatch.setattr(Program, "is_value", counted)
        v, rayleigh = power_iteration(dnp, A, 40)  # nothing read before both are recorded
        np.testing.assert_allclose(np.asarray(v), want[0], rtol=1e-12)
        np.testing.assert_allclose(float(rayleigh), want[1], rtol=1e-12)


def twice_read(y: Any, iters: int) -> Any:
    for _ in range(iters):
        y = y * 0.999 + y * 0.001  # reads the last y twice
    return y


def test_a_loop_reading_its_last_value_twice_does_not_double_its_expression(
    monkeypatch: Any,
) -> None:
    """A group's expression is a tree, so one over ``y = y * a + y * b`` recorded for 30
    iterations would hold 2^30 nodes: past a bound its inner nodes are made values first
    (on arrays and on a slice's region). The expressions' nodes are counted as they are
    written; the values are numpy's, bit for bit."""
    import distal.numpy as dnp
    from distal.arrays import lower, slicing
    from distal.arrays.program import Program

    written = [0]

    def counting(cls: Any, name: str) -> None:
        f = getattr(cls, name)

        def counted(*a: Any, **k: Any) -> Any:
            written[0] += 1
            assert written[0] < 100_000, "a group's expression doubles with the loop"
            return f(*a, **k)

        monkeypatch.setattr(cls, name, counted)

    counting(lower._Walk, "map_expr")
    counting(lower._Walk, "expr")
    counting(slicing._Walk, "expr")
    counting(Program, "is_value")  # (every graph walk asks it of each node it meets)
    a = np.linspace(0.0, 1.0, 1001)
    with dl.Session("local", machine=2):
        u = dnp.asarray(a)
        got = [twice_read(u * 0.5, 30), twice_read(u[1:-1] * 0.5, 30)]
        np.testing.assert_array_equal(np.asarray(got[0]), twice_read(a * 0.5, 30))
        np.testing.assert_array_equal(np.asarray(got[1]), twice_read(a[1:-1] * 0.5, 30))
