"""The matrix-multiply algorithms of distal.algorithms: correct, and moving their textbook words.

Closed forms are written out here again from the algorithms' definitions (not taken from the
library), and compared with ``kernel.stats()`` alone; results are compared with numpy.einsum on
the local runtime, whose measured stats must equal the prediction field by field.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import distal as dl
from distal import algorithms as al

RTOL = 1e-10


def check_run(alg: al.Algorithm, seed: int = 0) -> dl.Stats:
    """Run on the local runtime: result == numpy.einsum, measured stats == predicted."""
    kernel = alg.compile()
    st = kernel.stats()
    inputs = alg.inputs(seed)
    res = kernel.run(inputs)
    np.testing.assert_allclose(res.value, alg.reference(inputs), rtol=RTOL, atol=RTOL)
    assert res.stats.as_dict() == st.as_dict()
    assert sum(st.words_sent) == sum(st.words_received)
    return st


def lower_bound(m: int, n: int, k: int, P: int) -> float:
    """Al Daas et al. (SPAA 2022), tight bound on words received per processor."""
    d1, d2, d3 = sorted((m, n, k), reverse=True)
    if P <= d1 / d2:
        return d2 * d3 * (1 - 1 / P)
    if P <= d1 * d2 / d3**2:
        return 2 * math.sqrt(d1 * d2 * d3**2 / P) - (d1 * d3 + d2 * d3) / P
    return 3 * (d1 * d2 * d3 / P) ** (2 / 3) - (d1 * d2 + d1 * d3 + d2 * d3) / P


# ---------------------------------------------------------------------------------------------
# Correctness on divisible and ragged sizes, several grids; closed form == stats
# ---------------------------------------------------------------------------------------------

TWO_D = (al.summa, al.cannon, al.pumma)
GRIDS_2D = [(2, 2), (3, 3), (2, 3), (3, 2), (1, 4), (4, 1)]
SIZES = [(12, 12, 12), (7, 10, 11), (10, 7, 13)]  # divisible, then ragged (every block non-empty)


@pytest.mark.parametrize("fn", TWO_D, ids=lambda f: f.__name__)
@pytest.mark.parametrize("grid", GRIDS_2D)
@pytest.mark.parametrize(("m", "n", "k"), SIZES)
def test_two_d(fn, grid, m: int, n: int, k: int) -> None:
    alg = fn(m, n, k, machine=dl.Machine(*grid))
    st = check_run(alg, seed=m + 10 * grid[0])
    assert list(st.words_received) == list(alg.words)
    assert sum(st.iterations) == m * n * k


@pytest.mark.parametrize("fn", TWO_D, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("n", "g"), [(6, 2), (12, 2), (6, 3), (12, 3)])
def test_two_d_square_textbook(fn, n: int, g: int) -> None:
    """SUMMA / Cannon / PUMMA on g x g: every processor receives 2*(g-1)*(n/g)**2 words."""
    st = fn(n, machine=dl.Machine(g, g)).compile().stats()
    assert list(st.words_received) == [2 * (g - 1) * (n // g) ** 2] * (g * g)
    # one message per remote block: the k chunks line up with the owners' blocks
    assert list(st.messages_received) == [2 * (g - 1)] * (g * g)


@pytest.mark.parametrize("fn", TWO_D, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("gx", "gy"), [(2, 3), (3, 2), (2, 4), (1, 3)])
def test_two_d_rectangular_textbook(fn, gx: int, gy: int) -> None:
    """On gx x gy: m*k*(gy-1)/P (rest of the B row panel) + n*k*(gx-1)/P (C column panel)."""
    m, n, k = 12, 24, 36
    P = gx * gy
    st = fn(m, n, k, machine=dl.Machine(gx, gy)).compile().stats()
    expected = (m * k * (gy - 1) + n * k * (gx - 1)) // P
    assert list(st.words_received) == [expected] * P
    # lcm(gx, gy) chunks: every remote piece is one message
    L = math.lcm(gx, gy)
    assert list(st.messages_received) == [L - L // gy + L - L // gx] * P


def test_cannon_rotation_spreads_sources() -> None:
    """At each step, the processors of one grid row fetch B from different owners (no
    broadcast hot spot), unlike SUMMA where they all read the same chunk."""
    for fn, distinct in ((al.cannon, True), (al.summa, False)):
        plan = fn(6, machine=dl.Machine(3, 3)).compile().plan
        for step in range(plan.nsteps):
            srcs = [m.src for m in plan.messages if m.step == step and m.tensor == "B"]
            assert (len(set(srcs)) == len(srcs)) is distinct


@pytest.mark.parametrize("P", [2, 3, 4])
@pytest.mark.parametrize(("m", "n", "k"), [(12, 12, 12), (7, 5, 9)])
def test_row_1d(P: int, m: int, n: int, k: int) -> None:
    alg = al.row_1d(m, n, k, machine=dl.Machine(P))
    st = check_run(alg)
    assert list(st.words_received) == list(alg.words)
    if m % P == 0 and k % P == 0:
        assert list(st.words_received) == [n * k * (P - 1) // P] * P
        if m >= n and m >= k and P <= m / max(n, k):
            assert st.max_words_received == pytest.approx(lower_bound(m, n, k, P))


# ---------------------------------------------------------------------------------------------
# Johnson's 3-D
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(2, 2, 2), (2, 2, 3), (3, 2, 2), (1, 2, 2)])
@pytest.mark.parametrize(("m", "n", "k"), [(6, 6, 6), (7, 5, 9)])
def test_johnson_correct(grid, m: int, n: int, k: int) -> None:
    alg = al.johnson_3d(m, n, k, machine=dl.Machine(*grid))
    st = check_run(alg)
    assert list(st.words_received) == list(alg.words)


@pytest.mark.parametrize(("n", "g"), [(4, 2), (6, 2), (6, 3)])
def test_johnson_cube_textbook(n: int, g: int) -> None:
    """On a g^3 cube with (n/g)^2 blocks: B arrives unless y == 0 (on B's face), C unless
    x == 0; the face z == 0 receives g-1 partial blocks of A."""
    M = dl.Machine(g, g, g)
    st = al.johnson_3d(n, machine=M).compile().stats()
    b = (n // g) ** 2
    expected = [(y != 0) * b + (x != 0) * b + (z == 0) * (g - 1) * b for x, y, z in M.coords()]
    assert list(st.words_received) == expected
    # an interior processor (off every face) receives exactly its two operand blocks
    assert st.words_received[M.rank((g - 1, g - 1, g - 1))] == 2 * b
    assert st.max_words_received == (g + 1) * b


# ---------------------------------------------------------------------------------------------
# Solomonik's 2.5-D
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(2, 2, 2), (3, 3, 2), (4, 4, 2), (2, 2, 1)])
@pytest.mark.parametrize(("m", "n", "k"), [(8, 8, 8), (11, 7, 10)])
def test_25d_correct(grid, m: int, n: int, k: int) -> None:
    alg = al.solomonik_25d(m, n, k, machine=dl.Machine(*grid))
    st = check_run(alg)
    assert list(st.words_received) == list(alg.words)


@pytest.mark.parametrize(("n", "r", "c"), [(8, 4, 2), (8, 2, 2), (12, 4, 4), (8, 4, 1)])
def test_25d_textbook(n: int, r: int, c: int) -> None:
    """Layer z computes the k-slab z (n/c wide) of its (n/r)^2 tile of A: it fetches n/r x n/c
    of B and of C, minus the tiles it owns (on the bottom layer, those with index < r/c);
    the bottom layer also receives the c-1 partial tiles."""
    M = dl.Machine(r, r, c)
    st = al.solomonik_25d(n, machine=M).compile().stats()
    t = (n // r) ** 2
    expected = []
    for x, y, z in M.coords():
        w = 2 * n * n // (r * c)
        if z == 0:
            w -= t * (y < r // c) + t * (x < r // c)
            w += (c - 1) * t
        expected.append(w)
    assert list(st.words_received) == expected
    off_bottom = [w for (_, _, z), w in zip(M.coords(), st.words_received, strict=True) if z]
    assert all(w == 2 * n * n // (r * c) for w in off_bottom)


# ---------------------------------------------------------------------------------------------
# COSMA-style: grid search and the lower bound
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "n", "k", "P"), [(8, 8, 8, 8), (12, 6, 6, 4), (7, 9, 6, 8), (6, 6, 6, 6), (9, 9, 9, 3)]
)
def test_cosma_correct(m: int, n: int, k: int, P: int) -> None:
    alg = al.cosma(m, n, k, machine=P)
    st = check_run(alg)
    assert alg.machine.size == P
    assert list(st.words_received) == list(alg.words)


@pytest.mark.parametrize("grid", [(2, 2, 2), (2, 4, 2), (4, 2, 2), (1, 2, 4), (3, 1, 2)])
def test_cosma_any_grid(grid) -> None:
    alg = al.cosma(8, 12, 8, machine=math.prod(grid), grid=grid)
    st = check_run(alg)
    assert alg.machine.shape == grid
    assert list(st.words_received) == list(alg.words)


@pytest.mark.parametrize(
    ("m", "n", "k", "P"),
    [
        (8, 8, 8, 8),  # 3-D regime, cube grid
        (9, 9, 9, 27),  # 3-D regime, 3x3x3
        (16, 4, 4, 4),  # 1-D regime
        (8, 8, 2, 4),  # 2-D regime
        (4, 16, 4, 4),  # 1-D regime along n
    ],
)
def test_cosma_meets_lower_bound(m: int, n: int, k: int, P: int) -> None:
    """Where the grid can match the regime, every processor receives exactly the bound:
    (m*k*(gy-1) + n*k*(gx-1) + m*n*(gz-1)) / P."""
    alg = al.cosma(m, n, k, machine=P)
    st = alg.compile().stats()
    gx, gy, gz = alg.params["grid"]
    expected = (m * k * (gy - 1) + n * k * (gx - 1) + m * n * (gz - 1)) / P
    assert list(st.words_received) == [expected] * P
    assert st.max_words_received == pytest.approx(lower_bound(m, n, k, P))


def test_cosma_grid_choice() -> None:
    assert al.cosma_grid(8, 8, 8, 8)[0] == (2, 2, 2)
    assert al.cosma_grid(64, 4, 4, 4)[0] == (4, 1, 1)  # tall A: split rows only
    assert al.cosma_grid(4, 4, 64, 4)[0] == (1, 1, 4)  # long k: split the sum
    # never worse than the square SUMMA grid it could have picked
    for m, n, k, P in [(8, 8, 8, 4), (12, 6, 9, 6), (8, 8, 8, 8)]:
        (g, steps) = al.cosma_grid(m, n, k, P)
        assert max(al.cosma_words(m, n, k, g, steps)) <= min(
            max(al.cosma_words(m, n, k, (a, P // a, 1), P // a))
            for a in range(1, P + 1)
            if P % a == 0
        )


# ---------------------------------------------------------------------------------------------
# Processors without work receive nothing (they may still serve the data they own)
# ---------------------------------------------------------------------------------------------

EMPTY_BLOCKS = [
    pytest.param(lambda: al.summa(2, machine=dl.Machine(3, 3)), id="summa-2on3x3"),
    pytest.param(lambda: al.row_1d(2, 3, 3, machine=dl.Machine(3)), id="row_1d-2on3"),
    pytest.param(lambda: al.johnson_3d(4, 4, 1, machine=dl.Machine(2, 2, 2)), id="johnson-k1"),
    pytest.param(lambda: al.cosma(7, 9, 5, machine=8, grid=(2, 4, 1)), id="cosma-ragged"),
]


@pytest.mark.parametrize("make", EMPTY_BLOCKS)
def test_empty_blocks_correct(make) -> None:
    """Grids larger than the blocks: still correct, measured == predicted."""
    check_run(make())


@pytest.mark.parametrize("make", EMPTY_BLOCKS)
def test_empty_blocks_move_nothing(make) -> None:
    alg = make()
    st = alg.compile().stats()
    idle = [p for p, it in enumerate(st.iterations) if it == 0]
    assert idle
    assert [st.words_received[p] for p in idle] == [0] * len(idle)  # may still serve owned data
    assert list(st.words_received) == list(alg.words)


# ---------------------------------------------------------------------------------------------
# Parameters: ScheduleError naming the culprit; schedule uses public commands only
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "culprit"),
    [
        (lambda: al.summa(8, machine=dl.Machine(2, 2, 2)), "2-D machine"),
        (lambda: al.cannon(8, machine="2x2"), "'2x2'"),
        (lambda: al.summa(0, machine=dl.Machine(2, 2)), "m"),
        (lambda: al.summa(4, 4, -1, machine=dl.Machine(2, 2)), "k"),
        (lambda: al.pumma(4, machine=dl.Machine(2, 2), steps=0), "steps"),
        (lambda: al.johnson_3d(4, machine=dl.Machine(4)), "3-D machine"),
        (lambda: al.solomonik_25d(4, machine=dl.Machine(2, 3, 2)), "r x r x c"),
        (lambda: al.cosma(4, machine=8, grid=(2, 2, 3)), "grid"),
        (lambda: al.cosma(4, machine=0), "machine"),
        (lambda: al.row_1d(4, machine=dl.Machine(2, 2)), "1-D machine"),
    ],
)
def test_bad_parameters(call, culprit: str) -> None:
    with pytest.raises(dl.ScheduleError, match=culprit):
        call()


def test_schedule_is_public_code() -> None:
    """repr(schedule) is the public command sequence: nothing algorithm-specific."""
    text = repr(al.cannon(6, machine=dl.Machine(2, 3)).schedule)
    for cmd in ("distribute(", "divide(", "reorder(", "rotate(", "communicate("):
        assert cmd in text
    assert "cannon" not in text.lower()
    alg = al.cosma(8, machine=8)
    assert alg.schedule.distributions == {"A": "ij -> iji", "B": "ik -> ikk", "C": "kj -> kjk"}


def test_idle_processor_minimal_reproducers() -> None:
    """Minimal public-API reproducers of the idle-processor traffic (reported to the lead)."""
    # 1. 2x2 matrices on a 3x3 grid: row/column block 2 is empty, yet those processors fetch.
    M = dl.Machine(3, 3)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (2, 2), dist="ij -> ij", machine=M)
    B = dl.Tensor("B", (2, 2), dist="ik -> ik", machine=M)
    C = dl.Tensor("C", (2, 2), dist="kj -> kj", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    st = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M)).stats()
    assert list(st.iterations) == [2, 2, 0, 2, 2, 0, 0, 0, 0]
    assert list(st.words_received) == [2, 2, 0, 2, 2, 0, 0, 0, 0]
    # 2. a scalar reduction: processor 2 owns no row, yet sends a (zero) partial sum.
    M = dl.Machine(3)
    (r,) = dl.index_vars("r")
    a = dl.Tensor("a", (), dist="-> 0", machine=M)
    D = dl.Tensor("D", (2, 4), dist="ij -> i", machine=M)
    a[()] = D[r, j] * D[r, j]
    ro, ri = dl.index_vars("ro ri")
    st = dl.compile(dl.schedule(a).distribute([r], [ro], [ri], M)).stats()
    assert list(st.words_received) == [1, 0, 0]
    assert list(st.words_sent) == [0, 1, 0]
