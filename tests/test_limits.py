"""Limits known before a run (``distal.runtime.limits``): a run whose predicted peak on a
processor exceeds the memory that processor has is refused with a ``ResourceError``
giving both numbers, before anything is allocated; ``memory_limit=`` overrides the check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import distal as dl
from _limits_job import gemm, sources
from distal.runtime import limits
from mpi_jobs import run_job

HERE = Path(__file__).resolve().parent


def test_a_gemm_of_2e12_words_is_refused_before_allocating() -> None:
    """Before: numpy's raw ``MemoryError: Unable to allocate 7.28 TiB``."""
    kernel = gemm(10**6, dl.Machine(2))
    peak = kernel.stats().peak_words
    assert max(peak) >= 10**12
    made: list[int] = []
    with pytest.raises(dl.ResourceError, match=r"needs 1\d\.\d TiB on processor \d") as err:
        kernel.run(sources(10**6, made))
    e = err.value
    assert isinstance(e, dl.DistalError)
    assert isinstance(e, MemoryError)
    assert e.needed == max(peak) * 8
    assert 0 < e.available < e.needed
    assert f"{max(peak):,} elements of 8 bytes" in str(e)
    assert "memory_limit=False" in str(e)
    assert made == []  # not one block was made


def test_memory_limit_overrides_the_check() -> None:
    kernel = gemm(16, dl.Machine(2))
    b = np.arange(256.0).reshape(16, 16)
    inputs = {"B": b, "C": b}
    need = max(kernel.stats().peak_words) * 8
    with pytest.raises(dl.ResourceError) as err:
        kernel.run(inputs, memory_limit=need - 1)
    assert err.value.available == need - 1
    assert err.value.needed == need
    np.testing.assert_allclose(kernel.run(inputs, memory_limit=need).value, b @ b)
    np.testing.assert_allclose(kernel.run(inputs, memory_limit=False).value, b @ b)
    np.testing.assert_allclose(kernel.run(inputs).value, b @ b)  # it fits this host
    for bad in ("1GB", -5, 0, True):
        with pytest.raises(dl.InputError, match="memory_limit"):
            kernel.run(inputs, memory_limit=bad)


def test_sparse_kernels_are_checked_once_bound() -> None:
    sp = pytest.importorskip("scipy.sparse")
    M = dl.Machine(2)
    (i, j) = dl.index_vars("i j")
    A = dl.Tensor("A", (50, 50), format="csr", dist="xy -> x", machine=M)
    x = dl.Tensor("x", (50,), dist="x -> *", machine=M)
    y = dl.Tensor("y", (50,), dist="x -> x", machine=M)
    y[i] = A[i, j] * x[j]
    io, ii = dl.index_vars("io ii")
    kernel = dl.compile(dl.schedule(y).distribute([i], [io], [ii], M))
    inputs = {"A": sp.random(50, 50, density=0.1, random_state=0, format="csr"), "x": np.ones(50)}
    with pytest.raises(dl.ResourceError):
        kernel.run(inputs, memory_limit=8)
    np.testing.assert_allclose(kernel.run(inputs).value, inputs["A"] @ np.ones(50))


def test_what_a_processor_has() -> None:
    host = limits.host_memory()
    assert host is not None
    assert host > 2**26
    assert limits.local_ranks({"MPI_LOCALNRANKS": "4"}) == 4
    assert limits.local_ranks({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}) == 3
    assert limits.local_ranks({"SLURM_NTASKS_PER_NODE": "8(x2)"}) == 8
    assert limits.local_ranks({}) == 1

    class Client:
        def scheduler_info(self) -> dict[str, Any]:
            return {"workers": {"a": {"memory_limit": 2**30}, "b": {"memory_limit": 2**31}}}

    assert limits._dask_worker_memory(Client()) == 2**31


@pytest.mark.dask
def test_a_dask_run_is_checked_against_its_workers(dask_client: Any) -> None:
    kernel = gemm(10**6, dl.Machine(2))
    made: list[int] = []
    with pytest.raises(dl.ResourceError):
        kernel.run(sources(10**6, made), runtime="dask", client=dask_client)
    assert made == []


@pytest.mark.mpi
def test_every_mpi_rank_ends_with_the_refusal_before_allocating() -> None:
    job = run_job(2, script=HERE / "_limits_job.py", timeout=120)
    assert job.rc == 0, job
    lines = sorted(job.lines(), key=lambda d: d["rank"])
    assert [d["rank"] for d in lines] == [0, 1], job
    for d in lines:
        assert d["error"] in ("ResourceError", "PeerFailure"), job
        assert d["made"] == 0
    assert any(d["error"] == "ResourceError" for d in lines)


def test_check_memory_takes_a_runtime_object() -> None:
    """The runtime entry passes its runtime object: its name, rank and pool are read."""

    class Rt:
        name, rank, client = "mpi", 1, None

    kernel = gemm(16, dl.Machine(2))
    need = max(kernel.stats().peak_words) * 8
    limits.check_memory(kernel, Rt(), need)
    with pytest.raises(dl.ResourceError, match="processor 1"):
        limits.check_memory(kernel, Rt(), need - 1)
