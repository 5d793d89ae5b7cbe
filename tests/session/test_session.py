"""Sessions on the local runtime: values kept across kernels, exact redistribution.

The oracle for the words a redistribution moves is computed here by hand from the block
rule of docs/api.md (block ``b`` of ``N`` over ``g`` pieces is
``[b*ceil(N/g), min((b+1)*ceil(N/g), N))``): every processor receives the elements of the
box the new layout gives it that lie outside the box it holds.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import distal as dl
from distal.session.layout import Layout

# -- the oracle -------------------------------------------------------------------------------


def block(n: int, g: int, b: int) -> tuple[int, int]:
    c = -(-n // g)
    return (min(b * c, n), min((b + 1) * c, n))


def boxes(shape: tuple[int, ...], rhs: str | None, grid: tuple[int, ...]) -> list:
    """Each processor's box for a distribution given by its right side over dims 'ij..'
    (one char per machine dimension: a dimension letter, '*', or a digit); None: on
    processor 0."""
    out = []
    for coord in itertools.product(*(range(g) for g in grid)):
        if rhs is None:
            out.append(tuple((0, n) for n in shape) if not any(coord) else None)
            continue
        box = [(0, n) for n in shape]
        held = True
        for m, ch in enumerate(rhs):
            if ch.isdigit():
                held &= coord[m] == int(ch)
            elif ch in "ijkl"[: len(shape)]:  # any other name replicates, as '*' does
                d = "ijkl".index(ch)
                box[d] = block(shape[d], grid[m], coord[m])
        out.append(tuple(box) if held else None)
    return out


def volume(box: tuple | None) -> int:
    return 0 if box is None else math.prod(max(hi - lo, 0) for lo, hi in box)


def overlap(a: tuple | None, b: tuple | None) -> int:
    if a is None or b is None:
        return 0
    return math.prod(
        max(min(x1, y1) - max(x0, y0), 0) for (x0, x1), (y0, y1) in zip(a, b, strict=True)
    )


def oracle(shape: tuple[int, ...], src: str | None, dst: str | None, grid: tuple[int, ...]) -> int:
    """Words a redistribution must move: per processor, what it needs and does not hold."""
    have, need = boxes(shape, src, grid), boxes(shape, dst, grid)
    return sum(volume(b) - overlap(a, b) for a, b in zip(have, need, strict=True))


def dist(rhs: str | None, order: int = 2) -> str | None:
    return None if rhs is None else f"{'ijkl'[:order]} -> {rhs}"


# -- kernels ----------------------------------------------------------------------------------


def elementwise(
    n: int, out: str, out_rhs: str | None, ins: dict[str, str | None], M: dl.Machine, scale=1.0
) -> dl.Kernel:
    """``out = scale * (sum of ins)``, owner computes over the machine's first dims."""
    i, j = dl.index_vars("i j")
    ts = {k: dl.Tensor(k, (n, n), dist=dist(r), machine=M) for k, r in ins.items()}
    o = dl.Tensor(out, (n, n), dist=dist(out_rhs), machine=M)
    expr = None
    for t in ts.values():
        expr = t[i, j] if expr is None else expr + t[i, j]
    o[i, j] = expr * scale
    s = dl.schedule(o)
    if M.ndim <= 2:  # owner computes where the machine has a dimension per loop
        outer, inner = dl.index_vars("io jo")[: M.ndim], dl.index_vars("ii ji")[: M.ndim]
        s = s.distribute([i, j][: M.ndim], list(outer), list(inner), M)
    return dl.compile(s)


def matmul(n: int, out: str, b: str, c: str, rhs: dict[str, str], M: dl.Machine) -> dl.Kernel:
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor(out, (n, n), dist=dist(rhs[out]), machine=M)
    B = dl.Tensor(b, (n, n), dist=dist(rhs[b]), machine=M)
    C = dl.Tensor(c, (n, n), dist=dist(rhs[c]), machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    return dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M))


M22 = dl.Machine(2, 2)


def test_chain_with_agreeing_layouts_moves_nothing() -> None:
    n = 16
    rng = np.random.default_rng(0)
    b, c = rng.random((n, n)), rng.random((n, n))
    lay = {"A": "ij", "B": "ij", "C": "ij", "D": "ij"}
    k1 = matmul(n, "A", "B", "C", lay, M22)
    k2 = matmul(n, "D", "A", "C", lay, M22)
    k3 = elementwise(n, "E", "ij", {"D": "ij", "A": "ij"}, M22, 0.5)
    sess = dl.Session()
    sess.put("B", b)
    sess.put("C", c)
    for k in (k1, k2, k3):
        res = sess.run(k)
        assert res.value is None
    assert sess.moved_words == 0
    a = b @ c
    assert np.allclose(sess.get("E"), 0.5 * (a @ c + a))
    # the same chain with gathers in between
    a2 = k1.run({"B": b, "C": c}).value
    d2 = k2.run({"A": a2, "C": c}).value
    assert np.allclose(sess.get("E"), k3.run({"D": d2, "A": a2}).value)


def test_issue_figure_xy_to_x_star_moves_n_squared() -> None:
    n = 16
    k1 = matmul(n, "A", "B", "C", {"A": "ij", "B": "ij", "C": "ij"}, M22)
    k2 = elementwise(n, "D", "ij", {"A": "i*"}, M22, 2.0)
    rng = np.random.default_rng(1)
    b, c = rng.random((n, n)), rng.random((n, n))
    sess = dl.Session()
    sess.put("B", b)
    sess.put("C", c)
    sess.run(k1)
    assert sess.moved_words == 0
    res = sess.run(k2, gather=True)
    # each of the 4 processors needs a row half (n*n/2) and holds a quarter of it (n*n/4)
    assert oracle((n, n), "ij", "i*", (2, 2)) == 4 * (n * n // 2 - n * n // 4) == n * n
    assert sess.moved_words == n * n
    assert res.stats.total_words == 0  # the kernel itself then reads only what it holds
    assert np.allclose(res.value, 2 * (b @ c))
    assert np.allclose(sess.get("D"), 2 * (b @ c))
    # the value now lives as "xy -> x*": reading it so again moves nothing
    sess.run(elementwise(n, "F", "ij", {"A": "i*"}, M22))
    assert sess.moved_words == n * n


PAIRS = [
    ((2, 2), "ij", "ji"),
    ((2, 2), "ij", "**"),
    ((2, 2), "i*", "ij"),
    ((2, 2), "**", "j*"),
    ((2, 2), None, "ij"),
    ((2, 2), "ij", None),
    ((2, 2), "ij", "00"),
    ((2, 2), "i0", "*j"),
    ((4,), "i", "j"),
    ((4,), "*", "i"),
    ((3,), "i", "j"),
    ((2, 2, 2), "ij0", "ij*"),
    ((2, 2, 2), "ijk", "*ji"),
    ((2, 3), "ij", "ji"),
]


@pytest.mark.parametrize(("grid", "src", "dst"), PAIRS)
@pytest.mark.parametrize("n", [6, 7])
def test_redistribution_words_equal_the_oracle(grid, src, dst, n) -> None:
    """``k``-th pair: a value made in layout ``src`` and read in layout ``dst``."""
    M = dl.Machine(*grid)
    rng = np.random.default_rng(n)
    b = rng.random((n, n))
    make = elementwise(n, "A", src, {"B": "*" * len(grid)}, M, 3.0)
    use = elementwise(n, "D", dst, {"A": dst}, M, 0.5)
    sess = dl.Session()
    sess.put("B", b)
    sess.run(make)
    before = sess.moved_words
    sess.run(use)
    assert sess.moved_words - before == oracle((n, n), src, dst, grid)
    assert np.allclose(sess.get("D"), 1.5 * b)
    assert np.allclose(sess.get("A"), 3.0 * b)


@pytest.mark.parametrize(("grid", "src", "dst"), PAIRS)
def test_copy_kernel_runs_exactly(grid, src, dst) -> None:
    """The copy kernel itself, executed: it reproduces the value in the new layout and
    moves what its stats predict (the figure moved_words adds)."""
    n = 7
    M = dl.Machine(*grid)
    a = np.arange(n * n, dtype=np.float64).reshape(n, n)
    L1 = Layout((n, n), dist(src), M)
    L2 = Layout((n, n), dist(dst), M)
    copy = dl.Session().copy_kernel((n, n), np.float64, L1, L2)
    res = copy.kernel.run({"src": a})
    assert res.stats == copy.kernel.stats()
    assert copy.words == res.stats.total_words == oracle((n, n), src, dst, grid)
    extra = res.value.reshape(n, n, -1)
    assert all(np.array_equal(extra[:, :, r], a) for r in range(extra.shape[2]))


def test_agreement_is_by_boxes_not_by_text() -> None:
    n = 8
    A1 = Layout((n, n), "xy -> xy", M22)
    A2 = Layout((n, n), "ab -> ab", M22)
    A3 = Layout((n, n), "ab -> ab", dl.Machine(4, 1))
    assert A1.agrees(A2)
    assert not A1.agrees(A3)
    assert Layout((n, n), "xy -> x*", dl.Machine(4, 1)).agrees(
        Layout((n, n), "xy -> x", dl.Machine(4))
    )


def test_put_is_placed_without_counting_and_copy_kernels_are_cached() -> None:
    n = 8
    sess = dl.Session()
    sess.put("B", np.ones((n, n)))
    sess.run(elementwise(n, "A", "ij", {"B": "*j"}, M22))
    assert sess.moved_words == 0  # placing what put gave is not traffic
    to_rows = elementwise(n, "C", "i*", {"A": "i*"}, M22)
    to_blocks = elementwise(n, "A", "ij", {"C": "ij"}, M22)
    for _ in range(3):
        sess.run(to_rows)  # A: "ij" -> "i*" each time (the output A comes back as "ij")
        sess.run(to_blocks)  # C: "i*" -> "ij": nothing moves (a superset is held)
    assert sess.moved_words == 3 * oracle((n, n), "ij", "i*", (2, 2))
    assert len(sess._copies) == 2
    assert np.array_equal(sess.get("A"), np.ones((n, n)))


def test_scalar_outputs_and_given_inputs() -> None:
    n = 9
    i, j = dl.index_vars("i j")
    X = dl.Tensor("X", (n, n), dist="ij -> ij", machine=M22)
    R = dl.Tensor("R", (), dist=None)
    R[()] = X[i, j] * X[i, j]
    norm = dl.compile(dl.schedule(R))
    sess = dl.Session()
    x = np.random.default_rng(3).random((n, n))
    res = sess.run(norm, inputs={"X": x})  # given, not held
    assert "X" not in sess
    r = sess.get("R")
    assert r.shape == ()
    assert np.isclose(r, (x * x).sum())
    assert res.value is None


def test_errors_name_the_value() -> None:
    n = 8
    sess = dl.Session()
    k = elementwise(n, "A", "ij", {"B": "ij"}, M22)
    with pytest.raises(dl.InputError, match="'B'"):
        sess.run(k)
    with pytest.raises(dl.InputError, match="'Q'"):
        sess.get("Q")
    sess.put("B", np.ones((n + 1, n)))
    with pytest.raises(dl.InputError, match="shape"):
        sess.run(k)
    with pytest.raises(dl.InputError, match="runtime"):
        dl.Session("nowhere")


def test_targets_the_copy_kernel_cannot_express_are_not_supported() -> None:
    n = 8
    M = dl.Machine(2, 2, 2)
    sess = dl.Session()
    sess.put("B", np.ones((n, n)))
    sess.run(elementwise(n, "A", "ij*", {"B": "ij*"}, M))
    joint = elementwise(n, "D", "iji", {"A": "iji"}, M)  # dimension i cut by two machine dims
    with pytest.raises(dl.NotSupportedYet, match="several machine dimensions"):
        sess.run(joint)
    face1 = elementwise(n, "D", "ij1", {"A": "ij1"}, M)
    with pytest.raises(dl.NotSupportedYet, match="coordinate 1"):
        sess.run(face1)


def test_dask_session_without_client_redistributes_on_its_pool() -> None:
    pytest.importorskip("distributed", reason="needs distributed (dask extra)")
    n = 8
    rng = np.random.default_rng(4)
    b, c = rng.random((n, n)), rng.random((n, n))
    sess = dl.Session("dask", n_workers=2, processes=False, progress=False)
    sess.put("B", b)
    sess.put("C", c)
    sess.run(matmul(n, "A", "B", "C", {"A": "ij", "B": "ij", "C": "ij"}, M22))
    sess.run(elementwise(n, "D", "ij", {"A": "i*"}, M22, 2.0))
    assert sess.moved_words == n * n
    assert np.allclose(sess.get("D"), 2 * (b @ c))


@pytest.mark.parametrize(("src", "dst"), [("i -> *", "i -> i"), ("i -> i", "i -> *")])
def test_vectors_redistribute_on_a_line(src: str, dst: str) -> None:
    """Order-1 values on a 1-D machine (one-entry distribution sides)."""
    n, M = 10, dl.Machine(4)
    x = np.arange(n, dtype=np.float64)
    copy = dl.Session().copy_kernel((n,), np.float64, Layout((n,), src, M), Layout((n,), dst, M))
    res = copy.kernel.run({"src": x})
    assert res.stats == copy.kernel.stats()
    extra = res.value.reshape(n, -1)
    assert all(np.array_equal(extra[:, r], x) for r in range(extra.shape[1]))
    # replicated -> cut: everyone holds its block already; cut -> replicated: each of the 4
    # processors needs all n and holds its own block (the blocks add up to n)
    assert copy.words == (0 if src == "i -> *" else 4 * n - n)
