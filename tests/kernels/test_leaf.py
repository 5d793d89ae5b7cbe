"""Every leaf routine against numpy.einsum (float64), through BLAS and through numpy."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import distal as dl
from distal import algorithms as al
from distal.kernels import blas, leaf

CASES = [
    # (spec, shapes, routine)
    ("ik,kj->ij", [(37, 29), (29, 23)], "gemm"),
    ("ki,kj->ji", [(29, 37), (29, 23)], "gemm"),
    ("ijk,k->ij", [(9, 8, 7), (7,)], "gemm"),
    ("ijk,kl->ijl", [(9, 8, 7), (7, 5)], "gemm"),
    ("acik,cbkj->abij", [(4, 3, 5, 6), (3, 2, 6, 4)], "gemm"),
    ("bik,bkj->bij", [(7, 5, 6), (7, 6, 4)], "batched"),
    ("bik,bkj->bij", [(6, 40, 30), (6, 30, 50)], "batched"),
    ("bik,bkj->bij", [(3, 200, 210), (3, 210, 190)], "batched"),
    ("ibk,jkb->bji", [(5, 9, 4), (6, 4, 9)], "batched"),
    ("abik,bakj->abij", [(2, 3, 5, 4), (3, 2, 4, 6)], "batched"),
    ("ib,jb->bij", [(5, 9), (6, 9)], "batched"),
    ("ij,ij->i", [(300, 40), (300, 40)], "batched"),
    ("ij,ji->i", [(30, 40), (40, 30)], "batched"),
    ("ij,ij->ij", [(30, 40), (30, 40)], "batched"),
    ("ijk,kji->", [(6, 5, 4), (4, 5, 6)], "dot"),
    ("ijk,jr,kr->ir", [(8, 6, 7), (6, 3), (7, 3)], "khatri-rao"),
    ("ij,jk,kl->il", [(5, 6), (6, 7), (7, 3)], "einsum"),
    ("ijk,ik,jk->ij", [(5, 6, 7), (5, 7), (6, 7)], "einsum"),
    ("ii->i", [(6, 6)], "einsum"),
    ("ij,j->ijk", [(4, 5), (5,)], "einsum"),
]


@pytest.mark.parametrize(("spec", "shapes", "kind"), CASES, ids=[c[0] for c in CASES])
def test_routine_matches_einsum(blas_mode: str, spec: str, shapes: list, kind: str) -> None:
    rng = np.random.default_rng(3)
    ops = [rng.standard_normal(s) for s in shapes]
    run = leaf.contraction(spec)
    assert leaf.plan_kind(spec) == kind
    ins, out = spec.split("->")
    want = np.einsum(f"{ins}->{''.join(c for c in out if c in ins)}", *ops)
    for n, c in enumerate(out):
        if c not in ins:  # an output letter no operand has: the term is broadcast along it
            want = np.repeat(np.expand_dims(want, n), 3, axis=n)
    dst = np.empty(want.shape)
    run(ops, dst, 2.0, True)
    np.testing.assert_allclose(dst, 2.0 * want, rtol=1e-12, atol=1e-12)
    run(ops, dst, -1.5, False)
    np.testing.assert_allclose(dst, 0.5 * want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("spec", "xs", "ys"),
    [("bik,bkj->bij", (8, 12, 10), (8, 10, 9)), ("ik,kj->ij", (30, 20), (20, 25))],
)
def test_strided_views_and_strided_output(blas_mode: str, spec: str, xs: tuple, ys: tuple) -> None:
    """Blocks of larger arrays (what the runtime passes) give the same result."""
    rng = np.random.default_rng(4)
    xb = rng.standard_normal(tuple(d + 3 for d in xs))
    yb = rng.standard_normal(tuple(d + 2 for d in ys))
    x = xb[tuple(slice(1, 1 + d) for d in xs)]
    y = yb[tuple(slice(2, 2 + d) for d in ys)]
    want = np.einsum(spec, x, y)
    big = np.zeros(tuple(d + 4 for d in want.shape))
    dst = big[tuple(slice(2, 2 + d) for d in want.shape)]
    run = leaf.contraction(spec)
    run([x, y], dst, 1.0, True)
    run([x, y], dst, 1.0, False)
    np.testing.assert_allclose(dst, 2.0 * want, rtol=1e-12)
    assert not big[:2].any()
    assert not big[-2:].any()


def test_float32(blas_mode: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 30)).astype(np.float32)
    y = rng.standard_normal((30, 20)).astype(np.float32)
    dst = np.zeros((40, 20), np.float32)
    leaf.contraction("ik,kj->ij")([x, y], dst, 1.0, False)
    np.testing.assert_allclose(dst, x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def test_accumulating_gemm_allocates_no_block_sized_temporary(blas_mode: str) -> None:
    """``dst += a @ b`` without a temporary the size of ``dst`` (BLAS beta=1, or the
    numpy fallback's row slices); numpy reports its allocations to tracemalloc."""
    rng = np.random.default_rng(6)
    n = 1024
    a, b = rng.standard_normal((n, 64)), rng.standard_normal((64, n))
    dst = np.zeros((n, n))
    run = leaf.contraction("ik,kj->ij")
    run([a, b], dst, 1.0, False)  # warm up: reused scratch buffers exist now
    tracemalloc.start()
    try:
        run([a, b], dst, 1.0, False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < dst.nbytes // 4, peak
    np.testing.assert_allclose(dst, 2 * (a @ b), rtol=1e-12)


def test_three_operand_terms_reuse_their_contraction_order() -> None:
    rng = np.random.default_rng(7)
    run = leaf.contraction("ij,jk,kl->il")
    ops = [rng.random((5, 6)), rng.random((6, 7)), rng.random((7, 3))]
    dst = np.zeros((5, 3))
    for _ in range(3):
        run(ops, dst, 1.0, False)
    assert len(run.expressions) == 1  # type: ignore[attr-defined]
    np.testing.assert_allclose(dst, 3 * np.einsum("ij,jk,kl->il", *ops), rtol=1e-12)
    run([rng.random((4, 6)), ops[1], ops[2]], np.zeros((4, 3)), 1.0, True)
    assert len(run.expressions) == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "make",
    [
        lambda m: al.summa(64, machine=m),
        lambda m: al.ttm((16, 12, 10), 6, machine=m),
        lambda m: al.mttkrp((12, 10, 8), 4, machine=dl.Machine(2, 2, 1)),
        lambda m: al.inner_product((12, 10, 8), machine=m),
        lambda m: al.contraction_4d(6, 5, 7, 4, 3, 5, machine=m),
    ],
    ids=["summa", "ttm", "mttkrp", "inner", "contract4d"],
)
def test_algorithms_match_reference(blas_mode: str, make: object) -> None:
    alg = make(dl.Machine(2, 2))  # type: ignore[operator]
    inputs = alg.inputs(0)
    res = alg.compile().run(inputs)
    np.testing.assert_allclose(res.value, alg.reference(inputs), rtol=1e-10)
    assert (blas.binding() is not None) == (blas_mode == "direct")


def _junk(shape: tuple[int, ...]) -> np.ndarray:
    """A block as a recycled one may hold it: NaN, infinities, negative numbers."""
    size = int(np.prod(shape))
    return np.resize(np.array([np.nan, -np.inf, -1.0, np.inf, 2.5]), size).reshape(shape)


#: paths CASES does not reach: GEMV both ways, a tall thin GEMM in row slices, TTV over rows
#: that do not merge (einsum in slabs), a transposed output packed back, a term without
#: operands
STORE_CASES = [
    *[(spec, shapes, None) for spec, shapes, _ in CASES],
    ("ij,j->i", [(50, 40), (40,)], None),
    ("j,ji->i", [(50,), (50, 40)], None),
    ("ik,kj->ij", [(20000, 64), (64, 8)], None),
    ("ijk,k->ij", [(9, 8, 7), (7,)], (1, 0, 2)),
    ("ik,kj->ji", [(37, 29), (29, 23)], None),
    ("->ij", [], None),
]


@pytest.mark.parametrize(
    ("spec", "shapes", "perm"), STORE_CASES, ids=[f"{c[0]}-{n}" for n, c in enumerate(STORE_CASES)]
)
def test_a_fresh_routine_writes_over_whatever_its_destination_held(
    blas_mode: str, spec: str, shapes: list, perm: tuple | None
) -> None:
    """``fresh`` lets a routine store every element without reading its destination
    (what :func:`leaf.stores_all` promises the runtimes, which then skip zeroing a
    recycled block): over NaN, infinities and negative numbers it gives the bits it gives
    over zeros."""
    rng = np.random.default_rng(6)
    ops = [rng.standard_normal(s) for s in shapes]
    if perm is not None:  # axes that do not merge into one matrix dimension
        ops[0] = np.ascontiguousarray(ops[0].transpose(perm)).transpose(perm)
    ins, out = spec.split("->")
    parts = ins.split(",") if ins else []
    sizes = {c: n for p, s in zip(parts, shapes, strict=True) for c, n in zip(p, s, strict=True)}
    shape = tuple(sizes.get(c, 3) for c in out)
    run = leaf.contraction(spec)
    for alpha in (1.0, -1.5):
        clean, dirty = np.zeros(shape), _junk(shape)
        run(ops, clean, alpha, True)
        run(ops, dirty, alpha, True)
        assert np.isfinite(dirty).all()
        assert clean.tobytes() == dirty.tobytes()


def test_a_leaf_stores_all_only_where_its_first_term_covers_the_block() -> None:
    """:func:`leaf.stores_all`: a default routine over the whole output block (True); a box
    whose output part is a piece of the block, or an IREE-compiled term (False)."""
    tk = leaf.TermKernel(1.0, "ik,kj->ij", (("B", (0, 2)), ("C", (2, 1))), (), (), (0, 1))
    box = ((0, 8), (0, 6), (0, 4))
    assert leaf.stores_all((tk,), box, ((0, 8), (0, 6)))
    assert not leaf.stores_all((tk,), ((0, 4), (0, 6), (0, 4)), ((0, 8), (0, 6)))
    iree = leaf.TermKernel(1.0, "ik,kj->ij", tk.factors, (), (), (0, 1), leaf="iree")
    assert not leaf.stores_all((iree,), box, ((0, 8), (0, 6)))
    # a term gated off this box (it runs only where k starts at 0) leaves the next to say
    gated = leaf.TermKernel(1.0, "i->ij", (("d", (0,)),), (2,), (), (0, 1))
    assert leaf.stores_all((gated, tk), ((0, 8), (0, 6), (4, 8)), ((0, 8), (0, 6)))
    assert not leaf.stores_all((), box, ((0, 8), (0, 6)))
