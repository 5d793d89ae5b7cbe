"""Leaf kernels that split work over threads leave the process's BLAS thread count alone."""

from __future__ import annotations

from typing import Any

import numpy as np

import distal as dl
from distal import algorithms as al
from distal.kernels import blas


def test_slab_parallel_leaves_keep_blas_threads() -> None:
    before = blas.threads()
    alg = al.ttm((32, 32, 32), 16, machine=dl.Machine(2, 2))
    inputs = alg.inputs(0)
    np.testing.assert_allclose(alg.compile().run(inputs).value, alg.reference(inputs), rtol=1e-10)
    assert blas.threads() == before
    with blas.one_thread_each() as ok:
        if blas.available() and (blas.has_local_threads() or blas._LIB.set_global is not None):
            assert ok  # the binding can always arrange single-threaded slab calls
        if ok and not blas.has_local_threads():
            assert blas.threads() == 1  # the process-wide count is lowered inside ...
        with blas.one_thread_each() as inner:  # ... nested regions leave it lowered ...
            assert inner == ok
        if ok and not blas.has_local_threads():
            assert blas.threads() == 1
    assert blas.threads() == before  # ... and the last one out restores it


def test_large_inner_products_split_over_threads_exactly() -> None:
    from distal.kernels import leaf

    rng = np.random.default_rng(5)
    x = rng.random((80, 70, 60))[5:75, :, 3:57]  # strided, above the slab threshold
    y = rng.random((60, 70, 80))[3:57, :, 5:75]
    assert x.size >= leaf._INNER_SLABS
    run = leaf.contraction("ijk,kji->")
    assert run.kind == "dot"
    dst = np.zeros(())
    run([x, y], dst, 2.0, True)
    run([x, y], dst, 1.0, False)  # accumulates
    np.testing.assert_allclose(dst, 3.0 * np.einsum("ijk,kji->", x, y), rtol=1e-12)
    before = blas.threads()
    alg = al.inner_product((96, 96, 96), machine=dl.Machine(2, 2))
    inputs = alg.inputs(0)
    np.testing.assert_allclose(alg.compile().run(inputs).value, alg.reference(inputs), rtol=1e-12)
    assert blas.threads() == before


def test_packed_operands_go_in_chunks_exactly(monkeypatch: Any) -> None:
    """The 4-D contraction's operands can't be viewed as matrices; large packs go in row
    and column slices (forced here on small blocks) with the same results."""
    from distal.kernels import leaf

    monkeypatch.setattr(leaf, "PACK_MIN", 1)
    monkeypatch.setattr(leaf, "PACK_MIN_SIDE", 1)
    rng = np.random.default_rng(7)
    cases = [
        ("acik,cbkj->abij", (7, 5, 9, 6), (5, 11, 6, 4)),
        ("acik,cbkj->abij", (1, 3, 2, 2), (3, 1, 2, 5)),
        ("ikj,jkl->il", (9, 4, 5), (5, 4, 3)),
        ("abk,kc->acb", (6, 5, 7), (7, 3)),
    ]
    for spec, xs, ys in cases:
        x, y = rng.random(xs), rng.random(ys)
        run = leaf.contraction(spec)
        want = np.einsum(spec, x, y)
        dst = np.empty(want.shape)
        run([x, y], dst, 2.0, True)
        np.testing.assert_allclose(dst, 2.0 * want, rtol=1e-12)
        run([x, y], dst, -1.0, False)
        np.testing.assert_allclose(dst, want, rtol=1e-12)
    alg = al.contraction_4d(6, 5, 7, 4, 3, 5, machine=dl.Machine(2, 2))
    inputs = alg.inputs(0)
    np.testing.assert_allclose(alg.compile().run(inputs).value, alg.reference(inputs), rtol=1e-10)
