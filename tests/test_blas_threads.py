"""Leaf kernels that split work over threads leave the process's BLAS thread count alone."""

from __future__ import annotations

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
        assert ok in (True, False)
    assert blas.threads() == before


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
