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
