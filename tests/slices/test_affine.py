"""Shifted accesses and restricted terms in index notation: checks, plans, leaves.

A stencil written in index notation (``u(i-1,j) + u(i+1,j) + ...`` on the interior,
``restrict``-ed, the boundary copied) computes numpy's slice expression bit for bit, and its
plan fetches exactly the halo rows the neighbours own: the words are counted here by hand
from the block sizes, not read back from the plan.
"""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal.errors import NotationError, NotSupportedYet, ShapeError
from distal.lang.concrete import concretize
from distal.lang.nodes import restrict


def _blocks(n: int, p: int) -> list[tuple[int, int]]:
    """The contract's blocks of an extent ``n`` over ``p`` pieces."""
    c = -(-n // p)
    return [(min(b * c, n), min((b + 1) * c, n)) for b in range(p)]


def _jacobi(n: int, m: int, machine: dl.Machine) -> dl.Kernel:
    """``o = u`` with its interior replaced by the 5-point average (one kernel)."""
    i, j, io, ii = dl.index_vars("i j io ii")
    u = dl.Tensor("u", (n, m), dist="xy -> x", machine=machine)
    o = dl.Tensor("o", (n, m), dist="xy -> x", machine=machine)
    inner = {i: (1, n - 1), j: (1, m - 1)}
    avg = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
    frame = (
        restrict(u[i, j], {i: (0, 1)})
        + restrict(u[i, j], {i: (n - 1, n)})
        + restrict(u[i, j], {i: (1, n - 1), j: (0, 1)})
        + restrict(u[i, j], {i: (1, n - 1), j: (m - 1, m)})
    )
    o[i, j] = restrict(avg, inner) + frame
    return dl.compile(dl.schedule(o).distribute([i], [io], [ii], machine))


def _numpy_jacobi(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out[1:-1, 1:-1] = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    return out


@pytest.mark.parametrize(("n", "p"), [(10, 1), (10, 2), (11, 3), (13, 4), (9, 4)])
def test_stencil_halo_words_by_hand(n: int, p: int, rng: np.random.Generator) -> None:
    m = 7
    kernel = _jacobi(n, m, dl.Machine(p))
    # processor q averages the interior rows of its block, [max(lo, 1), min(hi, n - 1)),
    # reading one row above and one below them; what of those rows lies outside its block
    # comes from the neighbours, as whole rows of m columns (the hull of the accesses)
    want = []
    for lo, hi in _blocks(n, p):
        a, b = max(lo, 1), min(hi, n - 1)
        want.append(0 if b <= a else m * ((a - 1 < lo) + (b + 1 > hi)))
    st = kernel.stats()
    assert st.words_received == want
    assert sum(st.words_sent) == sum(want)
    a = rng.standard_normal((n, m))
    res = kernel.run({"u": a})
    assert np.array_equal(res.value, _numpy_jacobi(a))  # numpy's order: the same bits
    assert res.stats == st


def test_compiled_leaf_gives_numpy_bits(rng: np.random.Generator) -> None:
    """A block of 2^16 points or more runs the generated loop: the same bits."""
    n = 300
    kernel = _jacobi(n, n, dl.Machine(1))
    a = rng.standard_normal((n, n))
    assert np.array_equal(kernel.run({"u": a}).value, _numpy_jacobi(a))


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_strided_reversed_and_contracted(p: int, rng: np.random.Generator) -> None:
    machine = dl.Machine(p)
    i, k, io, ii = dl.index_vars("i k io ii")
    w = dl.Tensor("w", (13,), dist="x -> x", machine=machine)
    z = dl.Tensor("z", (6,), dist="x -> x", machine=machine)
    z[i] = w[2 * i + 1] - 2.0 * w[-i + 12]
    kz = dl.compile(dl.schedule(z).distribute([i], [io], [ii], machine))
    wv = rng.standard_normal(13)
    res = kz.run({"w": wv})
    assert np.array_equal(res.value, wv[1::2][:6] - 2.0 * wv[::-1][:6])
    assert res.stats == kz.stats()
    # a shifted operand of a contraction (not point by point: its terms run as they are)
    a = dl.Tensor("a", (5, 8), dist="xy -> x", machine=machine)
    x = dl.Tensor("x", (10,), dist="x -> x", machine=machine)
    y = dl.Tensor("y", (5,), dist="x -> x", machine=machine)
    y[i] = a[i, k] * x[k + 2]
    ky = dl.compile(dl.schedule(y).distribute([i], [io], [ii], machine))
    av, xv = rng.standard_normal((5, 8)), rng.standard_normal(10)
    res = ky.run({"a": av, "x": xv})
    np.testing.assert_allclose(res.value, av @ xv[2:], rtol=1e-12)
    assert res.stats == ky.stats()


def test_restricted_terms_expand_with_their_domains() -> None:
    i, j = dl.index_vars("i j")
    u = dl.Tensor("u", (6, 5))
    o = dl.Tensor("o", (6, 5))
    o[i, j] = restrict(2.0 * (u[i - 1, j] + u[i, j + 0]), {i: (1, 9)}) + restrict(
        u[i, j], {j: (0, 5)}
    )
    terms = concretize(o.assignment).terms
    assert [t.domain for t in terms] == [((i, 1, 6),), ((i, 1, 6),), ()]  # cut to i's extent
    assert [t.coeff for t in terms] == [2.0, 2.0, 1]


def test_bad_shifted_accesses_are_refused() -> None:
    i, j = dl.index_vars("i j")
    u = dl.Tensor("u", (6, 5))
    o = dl.Tensor("o", (6, 5))
    with pytest.raises(ShapeError, match=r"u\(i\+1,j\) reads dimension 0"):
        o[i, j] = u[i + 1, j]
    with pytest.raises(NotationError, match="left side"):
        o[i + 1, j] = u[i, j]
    y5, y6 = dl.Tensor("y", (5,)), dl.Tensor("y", (6,))
    with pytest.raises(NotationError, match="only in shifted accesses"):
        y5[j] = u[i + 0, j]
    with pytest.raises(NotationError, match="not a left-side variable"):
        y6[i] = restrict(u[i, j], {j: (0, 2)})
    with pytest.raises(NotationError, match="scale must be non-zero"):
        u[0 * i, j]
    with pytest.raises(NotationError, match="integer"):
        u[i + 0.5, j]
    with pytest.raises(NotationError, match="empty"):
        restrict(u[i, j], {i: (3, 3)})
    # inside a restriction the access need only be in range there
    o[i, j] = restrict(u[i + 1, j], {i: (0, 5)})


def test_sparse_kernels_refuse_shifted_accesses() -> None:
    i, j = dl.index_vars("i j")
    a = dl.Tensor("a", (6, 6), format="csr")
    x = dl.Tensor("x", (7,))
    y = dl.Tensor("y", (6,))
    y[i] = a[i, j] * x[j + 1]
    with pytest.raises(NotSupportedYet, match="shifted accesses"):
        dl.compile(dl.schedule(y))


def test_term_calls_of_restricted_terms_cover_the_box(rng: np.random.Generator) -> None:
    """What the elastic runtime's check projects: every term over the whole leaf box (a
    restricted one zero outside its part), summing to what the leaf computed."""
    from distal.kernels.leaf import run_leaf, term_calls

    n, m = 7, 6
    i, j = dl.index_vars("i j")
    u = dl.Tensor("u", (n, m))
    v = dl.Tensor("v", (m,))
    o = dl.Tensor("o", (n, m))
    o[i, j] = (
        restrict(u[i - 1, j] - u[i + 1, j], {i: (1, n - 1)})
        + restrict(u[i, j], {i: (0, 1)})
        + restrict(v[j], {i: (n - 1, n)})  # a row broadcast onto the last row only
    )
    kernel = dl.compile(dl.schedule(o))
    box = ((0, n), (0, m))
    ops = {"u": (rng.standard_normal((n, m)), box), "v": (rng.standard_normal(m), ((0, m),))}
    got = np.zeros((n, m))
    run_leaf(kernel.kernels, box, ops, got, box, fresh=True)
    total = np.zeros((n, m))
    for tk, alpha, views in term_calls(kernel.kernels, box, ops):
        total += alpha * np.einsum(tk.spec, *views)
    np.testing.assert_allclose(total, got, rtol=0, atol=1e-15)
    a, w = ops["u"][0], ops["v"][0]
    want = a.copy()
    want[1:-1] = a[:-2] - a[2:]
    want[-1] = w
    np.testing.assert_array_equal(got, want)


def test_a_stencil_kernel_is_simulated() -> None:
    """The simulator times a leaf on operands as large as its shifted accesses reach."""
    result = _jacobi(40, 30, dl.Machine(4)).simulate()
    assert result.seconds > 0
