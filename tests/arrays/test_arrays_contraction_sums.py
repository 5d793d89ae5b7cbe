"""A contraction whose result is only summed is never formed: the sum of an einsum is one
einsum (its summed axes left out), and a leaf sums each operand over the letters only it
carries before it contracts the rest (``i,j->`` is ``sum(x) * sum(y)``). A session run
that would still not fit a processor's memory is refused before it allocates."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal.kernels import leaf

N = 10**5  # the outer product has 10^10 elements (74.5 GiB in float64)


def test_the_sum_of_an_outer_product_is_never_formed() -> None:
    """Before: the 10^10-element product was materialized (numpy's MemoryError)."""
    sess = dl.Session("local", machine=2)
    xs = np.random.default_rng(0).random(N)
    x = sess.asarray(xs)
    before = sess.kernels_run
    got = float(dl.einsum("i,j->ij", x, x).sum())
    assert got == pytest.approx(xs.sum() ** 2, rel=1e-12)
    assert sess.kernels_run - before == 1  # one kernel: the sum of the einsum
    assert all(int(np.prod(h.shape)) <= N for h in sess.values.values())
    # a partial sum is an einsum too: sum over i of x_i x_j = sum(x) * x_j
    row = np.asarray(dl.einsum("i,j->ij", x, x).sum(0))
    np.testing.assert_allclose(row, xs.sum() * xs, rtol=1e-12)


def test_a_leaf_sums_an_operands_own_letters_first() -> None:
    """``i,j->`` runs as ``sum(x) * sum(y)`` (n + n additions, not n * n points); an
    operand's own summed letters are summed away whatever the rest is."""
    assert leaf.plan_kind("a,b->") == "presummed"
    assert leaf.plan_kind("ab,c->a") == "presummed"
    assert leaf.plan_kind("ab,bc->ac") == "gemm"  # nothing of its own: unchanged
    rng = np.random.default_rng(1)
    x = rng.random(N)
    got = dl.einsum("i,j->", x, x, machine=dl.Machine(2))
    assert got == pytest.approx(np.sum(x) ** 2, rel=1e-12)
    a, c = rng.random((30, 40)), rng.random(50)
    out = np.zeros(30)
    leaf.contraction("ab,c->a")([a, c], out, 2.0, True)
    np.testing.assert_allclose(out, 2.0 * a.sum(1) * c.sum(), rtol=1e-12)
    np.testing.assert_allclose(
        dl.einsum("ab,c->a", a, c, machine=dl.Machine(2)), np.einsum("ab,c->a", a, c)
    )


def test_a_session_run_that_cannot_fit_is_refused() -> None:
    """``(outer * 2).sum()`` forms the product (a map of it is summed): 37 GiB per
    processor, refused by the memory check instead of numpy's MemoryError."""
    sess = dl.Session("local", machine=2)
    x = sess.asarray(np.ones(N))
    with pytest.raises(dl.ResourceError, match="refused before allocating"):
        float((dl.einsum("i,j->ij", x, x) * 2.0).sum())
    small = dl.Session("local", machine=2, memory_limit=1000)
    y = small.asarray(np.ones(1000))
    with pytest.raises(dl.ResourceError) as err:
        float((y * 2.0) @ y)
    assert err.value.available == 1000
    off = dl.Session("local", machine=2, memory_limit=False)
    z = off.asarray(np.ones(1000))
    assert float((z * 2.0) @ z) == 2000.0
