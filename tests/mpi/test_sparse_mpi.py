"""Sparse kernels on the MPI runtime under a real ``mpiexec``, at 2 and 4 ranks.

Each test launches ``mpiexec -n P python sparse_job.py MODE ...``: the script asserts on
every rank that the MPI value equals the local runtime's bit for bit and scipy's to 1e-12,
and that the measured stats equal ``bound.stats()``; rank 0 prints a JSON line per passed
case. The failure tests check that a bad input, an injected failure or a wrong job size
fails every rank, together and within seconds, never a hang.

Without mpi4py or an ``mpiexec`` the tests are skipped with the reason -- except under CI
(``CI`` set), where their absence is a failure (see ``mpi_jobs.require_mpi``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mpi_jobs import Job
from mpi_jobs import run_job as _run_job

SCRIPT = Path(__file__).resolve().parent / "sparse_job.py"
FAIL_WITHIN = 20.0

pytestmark = pytest.mark.mpi

#: cases whose sparse input is laid out against the schedule's cut: pos/crd travel
MOVED = {
    "spmv row, B by non-zeros",
    "spmv nz, B by rows",
    "spmm nz, B by rows",
    "sddmm row, B by non-zeros",
    "spmv nz complex",
}
CASES = {
    *(f"{k} {s}" for k in ("spmv", "spmm") for s in ("row", "nz")),
    *(f"sddmm {s} D {d}" for s in ("row", "nz") for d in ("xy -> *", "xy -> x")),
    *MOVED,
    "spmv nz, a replicated",
    "spmm row, C streamed in 3 steps",
    "gather modes and options",
}


def run_job(nprocs: int, *args: str, **options: Any) -> Job:
    return _run_job(nprocs, *args, script=SCRIPT, **options)


def reports(job: Job, case: str = "") -> dict[int, dict[str, Any]]:
    """Each rank's caught error in ``case``, by rank."""
    return {d["rank"]: d for d in job.lines() if "kind" in d and d["case"] == case}


@pytest.mark.parametrize("nprocs", [2, 4])
def test_spmv_spmm_sddmm_match_local_and_scipy(nprocs: int) -> None:
    job = run_job(nprocs, "cases")
    assert job.rc == 0, job
    passed = {d["case"]: d for d in job.lines() if d.get("ok")}
    assert set(passed) == CASES, job
    assert {d["rank"] for d in job.lines() if d.get("done") == "cases"} == set(range(nprocs))
    for name in MOVED:
        assert passed[name]["index"] > 0, (name, job)
    for name in CASES - MOVED - {"gather modes and options"}:
        assert passed[name]["index"] == 0, (name, job)  # sparse inputs cut as the iteration
    assert passed["spmv nz"]["messages"] > 0, job


LIBRARY = {
    "spmv rows hull",
    "spmm rows 2-D",
    "spmm nonzeros 2-D",
    "sddmm nonzeros, A by non-zeros",
    "spttv fibers",
    "spadd3",
    "spinnerprod",
    *(f"spmttkrp {s}" for s in ("rows", "nonzeros", "fibers")),
    *(f"spmttkrp rows, {f} B by non-zeros" for f in ("csf", "dss")),
}


@pytest.mark.parametrize("nprocs", [2, 4])
def test_the_sparse_algorithm_library(nprocs: int) -> None:
    """2-D machines, hull gathers, outputs cut by non-zeros, union patterns, 3-tensors (their
    3-level pieces travel when laid out against the cut) and a scalar output."""
    job = run_job(nprocs, "library")
    assert job.rc == 0, job
    passed = {d["case"]: d for d in job.lines() if d.get("ok")}
    assert set(passed) == LIBRARY, job
    for fmt in ("csf", "dss"):
        assert passed[f"spmttkrp rows, {fmt} B by non-zeros"]["index"] > 0, job


def test_bad_inputs_on_one_rank_fail_every_rank_together() -> None:
    """Rank 2's inputs are wrong, the others' right: a short dense ``c`` (InputError there,
    PeerFailure naming rank 2 elsewhere, before anything moves); a short sparse ``B``, which
    ``bind`` rejects before there is a bound kernel (the same, through ``fail_together``);
    a ``B`` of another pattern (every rank: the ranks built different kernels). The job then
    runs the kernel again and ends normally: nothing was left pending."""
    job = run_job(4, "bad", "2", timeout=FAIL_WITHIN + 30)
    assert job.rc == 0, job
    assert job.seconds < FAIL_WITHIN, job
    errors = {
        "dense": "input 'c' has shape (59,); tensor expects (60,)",
        "sparse": "input 'B' cannot be read as a csr array: an array of shape (59, 60) was "
        "given for shape (60, 60)",
    }
    for case, error in errors.items():
        got = reports(job, case)
        assert set(got) == {0, 1, 2, 3}, (case, job)
        assert got[2]["kind"] == "InputError", (case, job)
        assert got[2]["error"] == error, (case, job)
        for r in (0, 1, 3):
            assert got[r]["kind"] == "PeerFailure", (case, job)
            want = f"processor 2 (MPI rank 2) failed before the run: InputError: {error}"
            assert got[r]["error"] == want, (case, job)
    got = reports(job, "pattern")
    assert set(got) == {0, 1, 2, 3}, job
    for d in got.values():
        assert d["kind"] == "DistalUserError", job
        assert "rank(s) [2] differ from rank 0" in d["error"], job
    assert {d["rank"] for d in job.lines() if d.get("rerun") == "ok"} == {0, 1, 2, 3}, job


def test_a_failure_mid_run_reaches_every_rank() -> None:
    """Rank 1 fails after posting its messages: RuntimeFailure there, PeerFailure naming it
    on the others (which wait for its pieces), no hang."""
    job = run_job(4, "fail", "1", timeout=FAIL_WITHIN + 30)
    assert job.rc == 0, job
    assert job.seconds < FAIL_WITHIN, job
    got = reports(job)
    assert set(got) == {0, 1, 2, 3}, job
    assert got[1]["kind"] == "RuntimeFailure", job
    for d in got.values():
        assert "processor 1 (MPI rank 1) failed: RuntimeError: injected failure" in d["error"]
        if d["rank"] != 1:
            assert d["kind"] == "PeerFailure", job


def test_wrong_job_size_raises_mpi_size_error_on_every_rank() -> None:
    job = run_job(2, "wrong-size", timeout=FAIL_WITHIN + 30)
    assert job.rc == 0, job
    got = reports(job)
    assert set(got) == {0, 1}, job
    for r, d in got.items():
        assert d["kind"] == "MPISizeError", job
        assert f"4 processors but this MPI job has 2 ranks (this is rank {r})" in d["error"]
