"""A rank that never comes to its first run, under a bare ``mpiexec -n 4``.

Before its first ``kernel.run(..., runtime="mpi")`` a rank has no error channel and no hook,
so when it raises (or sleeps) there, nothing can tell the others: they wait in MPI's
start-up (when distal starts MPI) or in distal's first collective on the communicator (when
the script started MPI itself). The join deadline (``DISTAL_MPI_JOIN``) ends such a job
with the reason on every waiting rank; a job whose ranks all come, even late, is not held
up by it. Without the deadline every failing job here hangs until ``run_job`` kills it.

These jobs run with ``DISTAL_MPI_HOOK=0``: by default ``import distal`` under a launcher
installs the failure hook at once (``distal.runtime.launched``, tested by
``test_mpi_import_hook.py``), so a rank that raises ends the job before any deadline; the
deadline is what is left for a rank that is stuck, or for scripts that turn the hook off.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpi_jobs import Job, run_job

SCRIPT = Path(__file__).resolve().parent / "_join_script.py"
JOIN, GRACE = 3, 3  # grace: a rank that reaches the deadline late still prints its reason
ENDS_WITHIN = 30.0  # JOIN + GRACE + start-up, with room for a loaded machine
FAST = {"DISTAL_MPI_JOIN": str(JOIN), "DISTAL_MPI_GRACE": str(GRACE), "DISTAL_MPI_HOOK": "0"}

pytestmark = pytest.mark.mpi


def join_job(mode: str, path: str = "dense", mpi4py: bool = False, **env: str) -> Job:
    args = [mode, "1", path] + (["--mpi4py"] if mpi4py else [])
    return run_job(4, *args, script=SCRIPT, env={**FAST, **env}, timeout=ENDS_WITHIN + 60)


def reason_on(job: Job, rank: int) -> list[str]:
    """Rank ``rank``'s one-line reports (``distal: MPI rank R: ...``) naming the deadline."""
    lines = re.findall(rf"distal: MPI rank {rank}: [^\n]*", job.err)
    return [line for line in lines if f"{JOIN} s (DISTAL_MPI_JOIN)" in line]


def ended_with_the_reason(job: Job, mode: str, mpi4py: bool) -> None:
    assert job.rc != 0, job
    assert job.seconds < ENDS_WITHIN, job
    assert job.seconds > JOIN, job  # the ranks that came did wait for rank 1
    for r in (0, 2, 3):
        assert reason_on(job, r), (r, job)
        assert not reason_on(job, 1), job
    if mpi4py:  # in distal's first collective: a JoinTimeout, then MPI_Abort
        assert "JoinTimeout: not every rank of the job (4 ranks)" in job.err, job
        # the job ends with MPI_Abort: a rank says so, unless the aborting rank heard of
        # every other rank's end first (rank 1's own hook may report its exception in
        # time), when MPI's launcher's own abort line is all there is
        assert "MPI_Abort" in job.err, job
    else:  # in MPI's start-up: the watchdog prints the reason and stops the rank
        assert "MPI's start-up (at this rank's first kernel.run)" in job.err, job
    if mode == "raise":
        assert "ValueError: rank 1 fails before its first run" in job.err, job
    assert not re.search(r'"mode": "(raise|sleep)"', job.out), job  # no rank ran


@pytest.mark.parametrize("mpi4py", [False, True], ids=["distal-starts-mpi", "script-starts-mpi"])
@pytest.mark.parametrize("mode", ["raise", "sleep"])
def test_a_rank_that_never_comes_ends_the_job_with_the_reason(mode: str, mpi4py: bool) -> None:
    """Rank 1 raises (or sleeps 120 s) before its first run: the job ends within seconds of
    the deadline, each other rank naming it, rank 1's traceback printed by itself."""
    ended_with_the_reason(join_job(mode, mpi4py=mpi4py), mode, mpi4py)


@pytest.mark.parametrize("path", ["sparse", "session"])
def test_the_join_deadline_covers_sparse_kernels_and_sessions(path: str) -> None:
    """The first collective of a sparse run and of a session's first kernel is the same
    join (with MPI started by the script, so the deadline is distal's, not the watchdog's)."""
    ended_with_the_reason(join_job("raise", path, mpi4py=True), "raise", True)


def test_a_caught_join_timeout_still_ends_the_job() -> None:
    """Ranks 0, 2, 3 catch their JoinTimeout; a second run raises it again at once (the
    communicator is never used again), and although their scripts end normally the job
    ends with MPI_Abort: rank 1 may never come, and MPI could not finalize without it."""
    job = join_job("catch", mpi4py=True)
    assert job.rc != 0, job
    assert job.seconds < ENDS_WITHIN, job
    reports = {(d["rank"], d["attempt"]): d for d in job.lines() if "attempt" in d}
    assert set(reports) == {(r, a) for r in (0, 2, 3) for a in (1, 2)}, job
    for r in (0, 2, 3):
        assert reports[r, 1]["seconds"] >= JOIN, job
        assert reports[r, 2]["seconds"] < 1.0, job
        assert "not every rank of the job (4 ranks)" in reports[r, 1]["error"], job
        assert "timed out waiting for its ranks" in reports[r, 2]["error"], job
    assert "ending the MPI job (MPI_Abort)" in job.err, job


@pytest.mark.parametrize("mpi4py", [False, True], ids=["distal-starts-mpi", "script-starts-mpi"])
def test_every_rank_coming_in_time_is_not_held_up(mpi4py: bool) -> None:
    """With every rank on time (the default deadline) the job runs normally; rank 1 two
    seconds late under a 6 s deadline is waited for, not treated as missing."""
    job = join_job("ok", mpi4py=mpi4py, DISTAL_MPI_JOIN="60")
    assert job.rc == 0, job
    assert {d["rank"] for d in job.lines() if d.get("mode") == "ok"} == {0, 1, 2, 3}, job
    assert "DISTAL_MPI_JOIN" not in job.err, job
    late = join_job("late", mpi4py=mpi4py, DISTAL_MPI_JOIN="6")
    assert late.rc == 0, late
    assert {d["rank"] for d in late.lines() if d.get("mode") == "late"} == {0, 1, 2, 3}, late
    assert "DISTAL_MPI_JOIN" not in late.err, late
