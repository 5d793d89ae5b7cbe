"""dl.apps on the MPI runtime under a real ``mpiexec -n 4`` (skipped without MPI, except
under CI, as in tests/mpi and tests/session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpi_jobs import run_job

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.mpi
ENV = {"DISTAL_PROGRESS": "0"}


def test_apps_on_four_ranks() -> None:
    job = run_job(4, script=HERE / "_mpi_apps.py", timeout=300, env=ENV)
    assert job.rc == 0, job
    res = {d["app"]: d for d in job.lines()}
    assert res["cp_als"]["fit"] >= 0.999
    assert res["cp_als"]["true_fit"] >= 0.999
    assert res["pagerank"]["err"] <= 1e-10
    assert abs(res["pagerank"]["sum"] - 1.0) < 1e-12
    assert res["cg"]["err"] <= 1e-8
    assert res["cp_als_sparse"]["fit"] >= 0.999
    assert res["cp_als_sparse"]["true_fit"] >= 0.999
    assert res["pagerank_sparse"]["err"] <= 1e-10
    assert abs(res["pagerank_sparse"]["sum"] - 1.0) < 1e-12
    assert res["cg_sparse"]["err"] <= 1e-8
