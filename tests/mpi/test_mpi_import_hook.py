"""Under a plain ``mpiexec -n 4 python script.py``, ``import distal`` installs the MPI
runtime's failure hook (``distal.runtime.launched``): a rank that raises before its first
run ends the job within seconds, the others' first run naming it, instead of the others
waiting out the join deadline (60 s by default)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distal.runtime.launched import MARK, launched_rank
from mpi_jobs import run_job

HERE = Path(__file__).resolve().parent


@pytest.mark.mpi
def test_a_rank_that_raises_before_its_first_run_ends_the_job_in_seconds() -> None:
    job = run_job(4, "1", script=HERE / "_import_hook_script.py", timeout=120)
    assert job.rc != 0, job
    assert job.seconds < 10.0, job  # the join deadline (60 s) is not what ended it
    assert "ValueError: rank 1 fails before its first run" in job.err, job
    failed = [d for d in job.lines() if "error" in d]
    assert failed, job  # the ranks that came heard of rank 1 in their first run
    assert all(d["error"] == "PeerFailure" for d in failed), job
    assert all("rank 1" in d["text"] for d in failed), job
    assert not [d for d in job.lines() if d.get("ran")], job


def test_which_processes_are_ranks_of_a_launched_job() -> None:
    me = str(os.getpid())
    assert launched_rank({"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "4"})
    assert launched_rank({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"})
    assert launched_rank({"PMIX_RANK": "1"})
    assert not launched_rank({})
    assert not launched_rank({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"})  # srun, no MPI
    assert not launched_rank({"PMI_RANK": "0", "PMI_SIZE": "1"})  # one rank: no one waits
    assert not launched_rank({"PMI_RANK": "0", "PMI_SIZE": "4", "DISTAL_MPI_HOOK": "0"})
    # a process a hooked rank started inherits the variables but is no rank
    assert not launched_rank({"PMI_RANK": "0", "PMI_SIZE": "4", MARK: "1"})
    assert launched_rank({"PMI_RANK": "0", "PMI_SIZE": "4", MARK: me})
