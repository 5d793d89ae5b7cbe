"""Higher-order algorithms of distal.algorithms: TTV, TTM, MTTKRP, inner product, 4-D contraction.

Each is compared with numpy.einsum on the local runtime (measured stats == predicted), and its
words received per processor with a closed form written out here from the distributions.
"""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal import algorithms as al

RTOL = 1e-10


def check_run(alg: al.Algorithm, seed: int = 0) -> dl.Stats:
    kernel = alg.compile()
    st = kernel.stats()
    inputs = alg.inputs(seed)
    res = kernel.run(inputs)
    np.testing.assert_allclose(res.value, alg.reference(inputs), rtol=RTOL, atol=RTOL)
    assert res.stats.as_dict() == st.as_dict()
    assert list(st.words_received) == list(alg.words)
    return st


GRIDS = [(2, 2), (2, 3), (3,), (1, 2)]
SHAPES = [(6, 6, 5), (7, 5, 3)]  # every block non-empty on these grids


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_ttv_moves_nothing(grid, shape) -> None:
    """The vector is replicated and B, A are aligned: owner computes, zero words."""
    st = check_run(al.ttv(shape, machine=dl.Machine(*grid)))
    assert sum(st.words_received) == 0
    assert sum(st.messages_received) == 0


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", ["replicated", "distributed"])
def test_ttm(grid, shape, factor: str) -> None:
    alg = al.ttm(shape, 3, machine=dl.Machine(*grid), factor=factor)
    st = check_run(alg)
    if factor == "replicated":
        assert sum(st.words_received) == 0


@pytest.mark.parametrize("g", [(2, 2), (2, 3)])
def test_ttm_distributed_factor_textbook(g) -> None:
    """C in tiles: every processor fetches the rest of C once, K*L*(1 - 1/P)."""
    K, L = 6, 6
    P = g[0] * g[1]
    st = al.ttm((4, 6, K), L, machine=dl.Machine(*g), factor="distributed").compile().stats()
    assert list(st.words_received) == [K * L * (P - 1) // P] * P


@pytest.mark.parametrize("grid", [(2, 2, 2), (1, 2, 3), (3, 2, 1), (2, 2, 1)])
@pytest.mark.parametrize(("shape", "l"), [((6, 6, 6), 3), ((7, 5, 5), 2)])
def test_mttkrp_correct(grid, shape, l: int) -> None:  # noqa: E741
    check_run(al.mttkrp(shape, l, machine=dl.Machine(*grid)))


@pytest.mark.parametrize("g", [2, 3])
def test_mttkrp_textbook(g: int) -> None:
    """On a g^3 grid with n/g blocks: C arrives unless the processor is on C's edge
    (x == z == 0), D unless on D's edge (x == y == 0); the edge (x, 0, 0) of A receives
    the partial rows of the g*g - 1 other processors of its slab."""
    n, L = 6, 3
    M = dl.Machine(g, g, g)
    st = al.mttkrp((n, n, n), L, machine=M).compile().stats()
    b = (n // g) * L
    expected = [
        ((x, z) != (0, 0)) * b + ((x, y) != (0, 0)) * b + (y == z == 0) * (g * g - 1) * b
        for x, y, z in M.coords()
    ]
    assert list(st.words_received) == expected


@pytest.mark.parametrize("grid", [(2, 2), (3,), (2, 2, 2), (1, 3)])
@pytest.mark.parametrize("shape", [(6, 6, 4), (5, 7, 3)])
def test_inner_product(grid, shape) -> None:
    """A scalar on processor 0: it receives one partial word from each other processor."""
    M = dl.Machine(*grid)
    st = check_run(al.inner_product(shape, machine=M))
    assert list(st.words_received) == [M.size - 1] + [0] * (M.size - 1)
    res = al.inner_product(shape, machine=M).run()
    assert np.asarray(res.value).shape == ()


@pytest.mark.parametrize("grid", [(2, 2), (2, 3), (3, 1)])
@pytest.mark.parametrize("ext", [(6, 6, 6, 2, 2, 3), (5, 3, 5, 2, 3, 2)])
def test_contraction_4d(grid, ext) -> None:
    check_run(al.contraction_4d(*ext, machine=dl.Machine(*grid)))


@pytest.mark.parametrize("g", [2, 3])
def test_contraction_4d_textbook(g: int) -> None:
    """Cannon on (a, i) x (b, j) 'matrices' summed over (c, k): 2*(g-1)*(a/g)*(c/g)*i*k."""
    a, c, i, k = 6, 6, 2, 3
    st = al.contraction_4d(a, a, c, i, i, k, machine=dl.Machine(g, g)).compile().stats()
    assert list(st.words_received) == [2 * (g - 1) * (a // g) * (c // g) * i * k] * (g * g)
    assert list(st.messages_received) == [2 * (g - 1)] * (g * g)


EMPTY_BLOCKS = [
    pytest.param(lambda: al.inner_product((2, 4, 4), machine=dl.Machine(3)), id="inner"),
    pytest.param(lambda: al.mttkrp((4, 6, 6), 3, machine=dl.Machine(3, 2, 1)), id="mttkrp"),
    pytest.param(lambda: al.contraction_4d(4, 4, 4, 2, 2, 3, machine=dl.Machine(3, 1)), id="4d"),
]


@pytest.mark.parametrize("make", EMPTY_BLOCKS)
def test_empty_blocks_correct(make) -> None:
    alg = make()
    kernel = alg.compile()
    inputs = alg.inputs(0)
    res = kernel.run(inputs)
    np.testing.assert_allclose(res.value, alg.reference(inputs), rtol=RTOL, atol=RTOL)
    assert res.stats.as_dict() == kernel.stats().as_dict()


@pytest.mark.parametrize("make", EMPTY_BLOCKS)
def test_empty_blocks_move_nothing(make) -> None:
    alg = make()
    assert list(alg.compile().stats().words_received) == list(alg.words)


@pytest.mark.parametrize(
    ("call", "culprit"),
    [
        (lambda: al.ttv((4, 4), machine=dl.Machine(2)), "shape"),
        (lambda: al.ttv((4, 4, 4), machine=dl.Machine(2, 2, 2)), "rank 1 or 2"),
        (lambda: al.ttm((4, 4, 4), 0, machine=dl.Machine(2)), "l"),
        (lambda: al.ttm((4, 4, 4), 2, machine=dl.Machine(2), factor="tiles"), "factor"),
        (lambda: al.mttkrp((4, 4, 4), 2, machine=dl.Machine(2, 2)), "3-D machine"),
        (lambda: al.inner_product((4, 0, 4), machine=dl.Machine(2)), r"shape\[1\]"),
        (lambda: al.contraction_4d(2, 2, 2, 2, 2, 2, machine=dl.Machine(2)), "2-D machine"),
    ],
)
def test_bad_parameters(call, culprit: str) -> None:
    with pytest.raises(dl.ScheduleError, match=culprit):
        call()
