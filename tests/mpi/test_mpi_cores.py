"""Ranks that a launcher starts on one node without binding them share its cores: importing
the MPI runtime lowers each rank's BLAS threads to its share (unless the environment sets a
count), so a rank's ``np.dot`` or GEMM does not start a thread per core in every rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpi_jobs import run_job

SCRIPT = Path(__file__).resolve().parent / "_cores_script.py"
#: run_job sets these to 1 for every other test; empty here is "not set" for distal and BLAS
UNSET = {"OMP_NUM_THREADS": "", "OPENBLAS_NUM_THREADS": "", "MKL_NUM_THREADS": ""}

pytestmark = pytest.mark.mpi


def _ranks(nprocs: int, env: dict[str, str]) -> list[dict]:
    job = run_job(nprocs, script=SCRIPT, env=env)
    assert job.rc == 0, job
    got = sorted(job.lines(), key=lambda d: d["rank"])
    assert [d["rank"] for d in got] == list(range(nprocs)), job
    return got


def test_unbound_ranks_on_one_node_take_their_share_of_the_cores() -> None:
    for d in _ranks(2, UNSET):
        assert d["local"] == 2  # the launcher said so (MPI_LOCALNRANKS, ...)
        if d["affinity"] >= d["machine"]:  # unbound: the node's cores are divided
            assert d["cores"] == max(1, d["affinity"] // 2)
        else:  # bound by the launcher: its own mask
            assert d["cores"] == d["affinity"]
        if d["bound"]:
            assert d["threads"] <= d["cores"], d
            assert d["note"].startswith("BLAS threads"), d


def test_a_thread_count_the_environment_sets_is_left_alone() -> None:
    for d in _ranks(2, {**UNSET, "OPENBLAS_NUM_THREADS": "2"}):
        assert d["note"] == "BLAS threads left as OPENBLAS_NUM_THREADS=2 sets them", d
        if d["bound"]:
            assert d["threads"] == 2, d


def test_one_rank_keeps_every_core() -> None:
    (d,) = _ranks(1, UNSET)
    assert d["local"] == 1
    assert d["cores"] == d["affinity"]
