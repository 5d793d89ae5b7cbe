"""The named algorithms are schedules: exact textbook traffic and correct results."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from reference import assert_stats_equal, assert_stats_sane, stats_fields

ALGORITHMS = ("summa", "cannon", "pumma")


def matmul_kernel(algorithm: str, n: int, g: int):
    """``dl.algorithms``' SUMMA, Cannon or PUMMA of ``n x n`` matrices on a ``g x g`` grid,
    ``k`` in ``g`` steps, compiled as ``dl.compile`` does by default."""
    alg = getattr(dl.algorithms, algorithm)(n, machine=dl.Machine(g, g), steps=g)
    return alg.compile(routing="auto")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(("n", "g"), [(6, 2), (12, 2), (6, 3), (12, 3)])
def test_textbook_words_received(algorithm: str, n: int, g: int) -> None:
    kernel = matmul_kernel(algorithm, n, g)
    st = kernel.stats()
    expected = 2 * (g - 1) * (n // g) ** 2
    assert list(st.words_received) == [expected] * (g * g)
    assert st.max_words_received == expected
    assert sum(st.words_sent) == sum(st.words_received)
    assert_stats_sane(st, n**3)
    # every processor runs the same share of the iteration space
    assert list(st.iterations) == [n**3 // (g * g)] * (g * g)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(("n", "g"), [(6, 2), (6, 3), (7, 2), (10, 3), (7, 3), (2, 3)])
def test_matmul_correct_and_measured_equals_predicted(algorithm: str, n: int, g: int) -> None:
    rng = np.random.default_rng(n * 10 + g)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    kernel = matmul_kernel(algorithm, n, g)
    st = kernel.stats()
    assert_stats_sane(st, n**3)
    res = kernel.run({"B": b, "C": c})
    assert np.allclose(res.value, b @ c, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)
    assert res.seconds >= 0


def test_kernel_call_shortcut(rng: np.random.Generator) -> None:
    b, c = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    kernel = matmul_kernel("cannon", 5, 2)
    assert np.allclose(kernel(B=b, C=c), b @ c, rtol=1e-10, atol=1e-10)


def test_explain_mentions_loops_and_tensors() -> None:
    text = matmul_kernel("cannon", 6, 2).explain()
    assert isinstance(text, str)
    for name in ("kos", "io", "jo", "A", "B", "C"):
        assert name in text


def test_summa_cannon_same_totals() -> None:
    s = stats_fields(matmul_kernel("summa", 12, 3).stats())
    c = stats_fields(matmul_kernel("cannon", 12, 3).stats())
    assert s["words_received"] == c["words_received"]
    assert s["iterations"] == c["iterations"]


def test_machine_basics() -> None:
    M = dl.Machine(2, 3)
    assert M.shape == (2, 3)
    assert M.ndim == 2
    assert M.size == 6
    assert [tuple(c) for c in M.coords()] == [(a, b) for a in range(2) for b in range(3)]
    (v,) = dl.index_vars("v")
    assert v.name == "v"
    assert isinstance(dl.index_vars("a b"), tuple)
    assert isinstance(dl.index_vars("a"), tuple)


# ---------------------------------------------------------------------------------------------
# Distributed summed variable (3-D, Johnson), partial sums sent to owners
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize(
    ("da", "db", "dc"),
    [
        ("ij -> ij0", "ik -> i0k", "kj -> 0jk"),
        ("xy -> xy0", "xy -> xy*", "xy -> xy*"),
        ("ij -> iji", "ik -> ikk", "kj -> kjk"),
        ("xy -> xy*", "xy -> x*y", "xy -> *yx"),
    ],
)
def test_johnson_3d_distributed_k(n: int, da: str, db: str, dc: str) -> None:
    M = dl.Machine(2, 2, 2)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist=da, machine=M)
    B = dl.Tensor("B", (n, n), dist=db, machine=M)
    C = dl.Tensor("C", (n, n), dist=dc, machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
    kernel = dl.compile(dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M))
    st = kernel.stats()
    assert_stats_sane(st, n**3)
    assert len(st.iterations) == 8
    rng = np.random.default_rng(n)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    res = kernel.run({"B": b, "C": c})
    assert np.allclose(res.value, b @ c, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)
    assert sum(res.stats.words_sent) == sum(res.stats.words_received)


def test_johnson_3d_exact_traffic() -> None:
    """A "ij -> ij0", B "ik -> i0k", C "kj -> 0jk" on a 2x2x2 cube, n = 4 (blocks of 4 words).

    Processor (io, jo, ko) needs B[io, ko] (owned by (io, 0, ko)) and C[ko, jo] (owned by
    (0, jo, ko)); the owner (io, jo, 0) of A[io, jo] receives one partial block from
    (io, jo, 1). Receives do not depend on routing."""
    n = 4
    M = dl.Machine(2, 2, 2)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> ij0", machine=M)
    B = dl.Tensor("B", (n, n), dist="ik -> i0k", machine=M)
    C = dl.Tensor("C", (n, n), dist="kj -> 0jk", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
    st = dl.compile(dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)).stats()
    expected = []
    for p, (x, y, z) in enumerate(M.coords()):
        assert p == x * 4 + y * 2 + z
        words = 4 * (y != 0) + 4 * (x != 0) + 4 * (z == 0)
        expected.append(words)
    assert list(st.words_received) == expected
    assert sum(st.words_sent) == sum(expected)


# ---------------------------------------------------------------------------------------------
# Order-0 output, replicated output, addition with a distributed summed variable
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("adist", [None, "-> 00", "-> **"])
@pytest.mark.parametrize("n", [4, 5])
def test_inner_product_order0_output(adist: str | None, n: int) -> None:
    M = dl.Machine(2, 2)
    i, j = dl.index_vars("i j")
    a = dl.Tensor("a", (), dist=adist, machine=M)
    B = dl.Tensor("B", (n, n), dist="xy -> xy", machine=M)
    C = dl.Tensor("C", (n, n), dist="xy -> xy", machine=M)
    a[()] = B[i, j] * C[i, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    kernel = dl.compile(dl.schedule(a).distribute([i, j], [io, jo], [ii, ji], M))
    st = kernel.stats()
    assert_stats_sane(st, n * n)
    rng = np.random.default_rng(7)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    res = kernel.run({"B": b, "C": c})
    value = np.asarray(res.value)
    assert value.shape == ()
    assert np.allclose(value, np.sum(b * c), rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)
    if adist != "-> **":
        # B and C are aligned with the iteration space: only the 3 partial sums move
        assert sum(st.words_received) == 3


@pytest.mark.parametrize("n", [4, 5, 1])
def test_replicated_output(n: int) -> None:
    M = dl.Machine(2, 2)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> i*", machine=M)
    B = dl.Tensor("B", (n, n), dist="xy -> xy", machine=M)
    C = dl.Tensor("C", (n, n), dist="xy -> xy", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    kernel = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M))
    st = kernel.stats()
    assert_stats_sane(st, n**3)
    rng = np.random.default_rng(11)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    res = kernel.run({"B": b, "C": c})
    assert np.allclose(res.value, b @ c, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)


@pytest.mark.parametrize(
    ("mshape", "dvars"),
    [((2,), "k"), ((3,), "k"), ((2, 2, 2), "ijk"), ((2, 2), "ik"), ((2, 2), "kj")],
)
@pytest.mark.parametrize("n", [4, 5])
def test_addition_with_distributed_k_adds_once(mshape: tuple, dvars: str, n: int) -> None:
    M = dl.Machine(*mshape)
    i, j, k = dl.index_vars("i j k")
    byname = {"i": i, "j": j, "k": k}
    dist2 = "xy -> " + "xy*"[: len(mshape)]
    A = dl.Tensor("A", (n, n), dist=dist2, machine=M)
    B = dl.Tensor("B", (n, n + 1), dist=dist2, machine=M)
    C = dl.Tensor("C", (n + 1, n), dist=dist2, machine=M)
    D = dl.Tensor("D", (n, n), dist=dist2, machine=M)
    A[i, j] = B[i, k] * C[k, j] + D[i, j]
    vs = [byname[v] for v in dvars]
    outs = list(dl.index_vars(" ".join(f"{v}o" for v in dvars)))
    ins = list(dl.index_vars(" ".join(f"{v}i" for v in dvars)))
    kernel = dl.compile(dl.schedule(A).distribute(vs, outs, ins, M))
    st = kernel.stats()
    assert_stats_sane(st, n * n * (n + 1))
    rng = np.random.default_rng(5)
    b, c = rng.standard_normal((n, n + 1)), rng.standard_normal((n + 1, n))
    d = rng.standard_normal((n, n))
    res = kernel.run({"B": b, "C": c, "D": d})
    assert np.allclose(res.value, b @ c + d, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)


def test_addition_default_schedule_adds_once() -> None:
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (3, 4))
    B = dl.Tensor("B", (3, 5))
    C = dl.Tensor("C", (5, 4))
    D = dl.Tensor("D", (3, 4))
    A[i, j] = B[i, k] * C[k, j] + D[i, j]
    rng = np.random.default_rng(2)
    b, c, d = rng.standard_normal((3, 5)), rng.standard_normal((5, 4)), rng.standard_normal((3, 4))
    kernel = dl.compile(dl.schedule(A))
    assert np.allclose(kernel.run({"B": b, "C": c, "D": d}).value, b @ c + d)
    # subtraction, unary minus and scalars
    A[i, j] = 2.0 * (B[i, k] * C[k, j]) - D[i, j] * 3 + (-D[i, j])
    kernel = dl.compile(dl.schedule(A))
    assert np.allclose(kernel.run({"B": b, "C": c, "D": d}).value, 2 * (b @ c) - 4 * d)


def test_output_is_overwritten_not_accumulated() -> None:
    M = dl.Machine(2)
    i, k = dl.index_vars("i k")
    y = dl.Tensor("y", (5,), dist="x -> x", machine=M)
    A = dl.Tensor("A", (5, 6), dist="xy -> y", machine=M)
    x = dl.Tensor("x", (6,), dist="x -> x", machine=M)
    y[i] = A[i, k] * x[k]
    ko, ki = dl.index_vars("ko ki")
    kernel = dl.compile(dl.schedule(y).distribute([k], [ko], [ki], M))
    rng = np.random.default_rng(4)
    a, xv = rng.standard_normal((5, 6)), rng.standard_normal(6)
    for _ in range(2):
        res = kernel.run({"A": a, "x": xv})
        assert np.allclose(res.value, a @ xv, rtol=1e-10, atol=1e-10)
        assert_stats_equal(res.stats, kernel.stats())


def test_grid_larger_than_extents() -> None:
    M = dl.Machine(4, 3)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (2, 1), dist="xy -> xy", machine=M)
    B = dl.Tensor("B", (2, 3), dist="xy -> xy", machine=M)
    C = dl.Tensor("C", (3, 1), dist="xy -> yx", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    kernel = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M))
    st = kernel.stats()
    assert_stats_sane(st, 6)
    assert len(st.iterations) == 12
    rng = np.random.default_rng(9)
    b, c = rng.standard_normal((2, 3)), rng.standard_normal((3, 1))
    res = kernel.run({"B": b, "C": c})
    assert np.allclose(res.value, b @ c, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)


@pytest.mark.parametrize("mshape", [None, (2,), (2, 2)])
def test_sum_with_broadcast_term(mshape: tuple | None) -> None:
    """A term that lacks a left-side variable is broadcast along it (TACO / numpy semantics):
    A[i, j] = B[i, j] + c[i] adds c[i] to every column."""
    M = None if mshape is None else dl.Machine(*mshape)
    dist = None if M is None else "xy -> " + "xy"[: M.ndim]
    i, j = dl.index_vars("i j")
    A = dl.Tensor("A", (3, 4), dist=dist, machine=M)
    B = dl.Tensor("B", (3, 4), dist=dist, machine=M)
    c = dl.Tensor("c", (3,), dist=None, machine=M)
    s = dl.Tensor("s", ())
    A[i, j] = B[i, j] + c[i] * 2.0 + s[()]
    rng = np.random.default_rng(8)
    b, cv, sv = rng.standard_normal((3, 4)), rng.standard_normal(3), rng.standard_normal(())
    sched = dl.schedule(A)
    if M is not None:
        outs = list(dl.index_vars("io jo")[: M.ndim])
        ins = list(dl.index_vars("ii ji")[: M.ndim])
        sched = sched.distribute([i, j][: M.ndim], outs, ins, M)
    kernel = dl.compile(sched)
    res = kernel.run({"B": b, "c": cv, "s": sv})
    assert np.allclose(res.value, b + 2.0 * cv[:, None] + sv, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, kernel.stats())


# ---------------------------------------------------------------------------------------------
# More exact traffic: owner-computes, 1-D and joint (2-D regime) distributions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_textbook_messages(algorithm: str) -> None:
    """Every remote block comes from one owner: 2*(g-1) messages per processor."""
    g, n = 3, 12
    st = matmul_kernel(algorithm, n, g).stats()
    assert list(st.messages_received) == [2 * (g - 1)] * (g * g)


def test_owner_computes_moves_nothing() -> None:
    M = dl.Machine(2, 3)
    i, j = dl.index_vars("i j")
    A = dl.Tensor("A", (5, 7), dist="xy -> xy", machine=M)
    B = dl.Tensor("B", (5, 7), dist="xy -> xy", machine=M)
    C = dl.Tensor("C", (5, 7), dist="ab -> ab", machine=M)
    D = dl.Tensor("D", (5,), dist="x -> x*", machine=M)
    A[i, j] = B[i, j] * C[i, j] + D[i]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    kernel = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M))
    st = kernel.stats()
    assert sum(st.words_received) == 0
    assert sum(st.messages_received) == 0
    rng = np.random.default_rng(1)
    b, c, d = rng.standard_normal((5, 7)), rng.standard_normal((5, 7)), rng.standard_normal(5)
    res = kernel.run({"B": b, "C": c, "D": d})
    assert np.allclose(res.value, b * c + d[:, None], rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)


@pytest.mark.parametrize("g", [2, 3, 4])
def test_one_dimensional_regime(g: int) -> None:
    """A "ij -> i", B "ik -> i", C "kj -> k": each processor fetches the C rows it lacks."""
    n = 12
    M = dl.Machine(g)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> i", machine=M)
    B = dl.Tensor("B", (n, n), dist="ik -> i", machine=M)
    C = dl.Tensor("C", (n, n), dist="kj -> k", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, ii = dl.index_vars("io ii")
    kernel = dl.compile(dl.schedule(A).distribute([i], [io], [ii], M))
    st = kernel.stats()
    assert list(st.words_received) == [(g - 1) * (n // g) * n] * g
    assert list(st.messages_received) == [g - 1] * g
    rng = np.random.default_rng(g)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    res = kernel.run({"B": b, "C": c})
    assert np.allclose(res.value, b @ c, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)


@pytest.mark.parametrize("g", [2, 3])
def test_joint_distribution_2d_regime(g: int) -> None:
    """B "ik -> ii" cuts i jointly over the whole grid (first position most significant):
    processor (x, y) owns rows [(x*g + y) * n/g^2, ...) of B, all columns."""
    n = 36
    M = dl.Machine(g, g)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> ij", machine=M)
    B = dl.Tensor("B", (n, n), dist="ik -> ii", machine=M)
    C = dl.Tensor("C", (n, n), dist="kj -> kj", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    kernel = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M))
    st = kernel.stats()
    b_words = (g - 1) * (n // (g * g)) * n  # the row block's other g-1 slices
    c_words = (g - 1) * (n // g) ** 2  # the column block's other g-1 blocks
    assert list(st.words_received) == [b_words + c_words] * (g * g)
    rng = np.random.default_rng(g)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    res = kernel.run({"B": b, "C": c})
    assert np.allclose(res.value, b @ c, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, st)


def test_communicate_at_processor_loop_equals_default() -> None:
    """A tensor communicated at a distributed loop, or never named, is fetched once."""
    M = dl.Machine(2, 2)
    n = 6
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="xy -> xy", machine=M)
    B = dl.Tensor("B", (n, n), dist="xy -> xy", machine=M)
    C = dl.Tensor("C", (n, n), dist="xy -> xy", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    base = dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M)
    s0 = stats_fields(dl.compile(base).stats())
    s1 = stats_fields(dl.compile(base.communicate([A, B, C], jo)).stats())
    s2 = stats_fields(dl.compile(base.communicate(B, io).communicate(C, jo)).stats())
    assert s0["words_received"] == s1["words_received"] == s2["words_received"]
    # once per processor: the row block of B and the column block of C, minus what it owns
    assert s0["words_received"] == [2 * (n // 2) * (n // 2)] * 4


# ---------------------------------------------------------------------------------------------
# Expression corner cases
# ---------------------------------------------------------------------------------------------


def test_same_tensor_used_twice() -> None:
    M = dl.Machine(2, 2)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (5, 5), dist="xy -> xy", machine=M)
    B = dl.Tensor("B", (5, 5), dist="xy -> xy", machine=M)
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    b = np.random.default_rng(0).standard_normal((5, 5))
    for rhs, expected in [
        (lambda: B[i, k] * B[k, j], b @ b),
        (lambda: B[j, i] * 0.5 - B[i, j], 0.5 * b.T - b),
        (lambda: B[i, j] + 1.0, b + 1.0),
    ]:
        A[i, j] = rhs()
        kernel = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M))
        res = kernel.run({"B": b})
        assert np.allclose(res.value, expected, rtol=1e-10, atol=1e-10)
        assert_stats_equal(res.stats, kernel.stats())


def test_redefining_a_tensor_replaces_its_computation() -> None:
    (i,) = dl.index_vars("i")
    y = dl.Tensor("y", (4,))
    x = dl.Tensor("x", (4,))
    y[i] = x[i] * 2.0
    old = dl.compile(dl.schedule(y))
    y[i] = x[i] * 3.0
    new = dl.compile(dl.schedule(y))
    xv = np.arange(4.0)
    assert np.allclose(new.run({"x": xv}).value, 3 * xv)
    # an already compiled kernel is unaffected
    assert np.allclose(old.run({"x": xv}).value, 2 * xv)
