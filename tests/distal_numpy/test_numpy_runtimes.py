"""A ``distal.numpy`` program with reductions over axes and block operations on every
runtime: local, MPI (2 and 3 ranks: ragged blocks) and Dask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from numpy_program import program

import distal as dl
import distal.numpy as dnp
from mpi_jobs import run_job

HERE = Path(__file__).resolve().parent


def test_program_on_the_local_runtime() -> None:
    with dl.Session("local", machine=3):
        err, _ = program(dnp)
    assert err < 1e-9


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_program_on_mpi_ranks(ranks: int) -> None:
    job = run_job(ranks, script=HERE / "_mpi_numpy.py", timeout=180)
    assert job.rc == 0, job
    lines = job.lines()
    assert sorted(d["rank"] for d in lines) == list(range(ranks)), job
    assert all(d["err"] < 1e-9 for d in lines), lines
    assert len({d["value"] for d in lines}) == 1  # every rank read the same value
    with dl.Session("local", machine=ranks):
        _, local = program(dnp)
    assert lines[0]["value"] == pytest.approx(local, rel=1e-12)


def test_program_on_dask(dask_client: Any) -> None:
    with dl.Session("dask", client=dask_client, machine=3):
        err, _ = program(dnp)
    assert err < 1e-9
