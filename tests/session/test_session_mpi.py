"""Sessions on the MPI runtime under a real ``mpiexec -n 4`` (skipped without MPI, except
under CI, as in tests/mpi)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_loops import ENV, killed_and_resumed

from mpi_jobs import require_mpi, run_job

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.mpi


def test_chain_and_redistribution_on_four_ranks() -> None:
    job = run_job(4, script=HERE / "_mpi_chain.py", timeout=240, env=ENV)
    assert job.rc == 0, job
    cases = {d["case"] for d in job.lines()}
    assert {"agreeing chain", "xy -> x*", "ij -> ji n=7", "None -> ij n=6"} <= cases
    assert len(cases) == 2 + 2 * 8, cases


def test_killed_loop_resumes_exactly_mpi(tmp_path: Path) -> None:
    killed_and_resumed([require_mpi(), "-n", "4", sys.executable], tmp_path, "mpi")
