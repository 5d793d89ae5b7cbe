"""The arrays front on the MPI runtime (2 and 4 real ranks) and on Dask (a local
cluster): the same program as on the local runtime, the same results."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_arrays import cg, laplacian, rand
from test_arrays_fused import fused_set, spmv_epilogue

import distal as dl
from mpi_jobs import run_job

HERE = Path(__file__).resolve().parent


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_arrays_program_on_mpi_ranks(ranks: int) -> None:
    job = run_job(ranks, script=HERE / "_mpi_arrays.py", timeout=180)
    assert job.rc == 0, job
    lines = job.lines()
    assert sorted(d["rank"] for d in lines) == list(range(ranks)), job
    assert all(d["err"] < 1e-8 for d in lines), lines
    # every rank read the same scalar and ran the same kernels
    assert len({d["sum"] for d in lines}) == 1
    assert len({d["its"] for d in lines}) == 1
    assert len({(d["kernels"], d["compiles"]) for d in lines}) == 1
    local = dl.Session("local", machine=ranks)
    a = rand(9, 5, seed=1)
    assert lines[0]["sum"] == pytest.approx(float((local.asarray(a) + 1.0).sum()), rel=1e-12)
    # fused sets: each rank adds every rank's partial sums in rank order, as the local
    # runtime adds its processors' (the same blocks): the same values, bit for bit
    assert all(d["fused"] == lines[0]["fused"] for d in lines)
    want = [fused_set(dl.Session("local", machine=ranks), n) for n in (11, 3)]
    assert lines[0]["fused"] == want
    # a sparse product with its reductions as its epilogue: the same too
    assert all(d["spmv"] == lines[0]["spmv"] for d in lines)
    want = [spmv_epilogue(dl.Session("local", machine=ranks), n) for n in (5, 2)]
    assert lines[0]["spmv"] == want
    # a rebound vector's update written over its block on every rank (by the generated
    # loop: with numba), numpy's bits
    assert all(d["donated_err"] == 0.0 for d in lines), lines
    assert all(d["lazy_cg_err"] < 1e-10 for d in lines), lines  # (no block read later donated)
    if importlib.util.find_spec("numba") is not None:
        assert all(d["donated"] for d in lines), lines
    # p @ q, q = A @ p held: each rank's part of the dot product computed by the product's
    # leaf as it stored q (numba), with the local runtime's separate pass's bits
    from _mpi_arrays import leaf_dot

    assert all(d["leaf_dot"] == lines[0]["leaf_dot"] for d in lines), lines
    assert lines[0]["leaf_dot"] == leaf_dot(dl.Session("local", machine=ranks))[1]
    if importlib.util.find_spec("numba") is not None:
        assert all(d["leaf_dots"] == 1 for d in lines), lines


def test_arrays_program_on_dask(dask_client: Any) -> None:
    sess: Any = dl.Session("dask", client=dask_client, machine=2)
    A = laplacian(6)
    b = rand(A.shape[0], seed=4)
    x, its = cg(sess, A, b)
    local, its_local = cg(dl.Session("local", machine=2), A, b)
    assert its == its_local
    np.testing.assert_allclose(x.get(), local.get(), rtol=1e-12, atol=1e-14)
    a = rand(7, 3, seed=5)
    d = sess.asarray(a)
    np.testing.assert_allclose((d.T @ (d * 2.0)).get(), a.T @ (a * 2.0), rtol=1e-12)
    np.testing.assert_allclose(dl.exp(d / (d * d + 1.0)).get(), np.exp(a / (a * a + 1.0)))
