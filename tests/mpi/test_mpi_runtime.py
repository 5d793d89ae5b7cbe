"""The MPI runtime under a real ``mpiexec``, at 1, 2, 4 and 8 ranks.

Each test launches ``mpiexec -n P python _script.py MODE ...`` (the script asserts on every
rank that values equal numpy and measured stats equal ``kernel.stats()``; rank 0 prints a
JSON line per passed case) and checks the job's exit code and output. The failure tests
check that a job whose rank fails ends within seconds, naming that rank.

Without mpi4py or an ``mpiexec`` the tests are skipped with the reason -- except under CI
(``CI`` set), where the ``mpi`` extra is installed and their absence is a failure.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mpi_jobs import Job
from mpi_jobs import run_job as _run_job

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "_script.py"
USER_SCRIPT = HERE / "_user_script.py"  # imports only distal and mpi4py
SIZES = (1, 2, 4, 8)
FAIL_WITHIN = 20.0

pytestmark = pytest.mark.mpi


def run_job(*args: Any, script: Path = SCRIPT, **options: Any) -> Job:
    """:func:`mpi_jobs.run_job` with this module's script by default."""
    return _run_job(*args, script=script, **options)


# --------------------------------------------------------------------------------------------
# Correctness: named algorithms, random schedules, distributed data
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("nprocs", "level"), [(4, "multiple"), (8, "multiple"), (4, "funneled")])
def test_library_with_tree_routing(nprocs: int, level: str) -> None:
    """Broadcast trees forward pieces from relays' buffers and reduction trees combine
    partial sums on the way: still exact, measured == predicted. Relays forward from a
    thread while computing under MPI_THREAD_MULTIPLE, inside their fetch waits without it."""
    from _mpi_cases import library_cases

    job = run_job(nprocs, "library-tree", env={"MPI4PY_RC_THREAD_LEVEL": level})
    assert job.rc == 0, job
    passed = {d["case"] for d in job.lines() if d.get("ok")}
    assert passed == {f"library {n}" for n in library_cases(nprocs)}, job
    relays = [d for d in job.lines() if "forwarder_threads" in d]
    assert relays, job
    assert relays[0]["threads_ok"] == (level == "multiple"), job
    assert (relays[0]["forwarder_threads"] > 0) == (level == "multiple"), job


@pytest.mark.parametrize("nprocs", SIZES)
def test_named_algorithms(nprocs: int) -> None:
    from _mpi_cases import named_cases

    job = run_job(nprocs, "named")
    assert job.rc == 0, job
    passed = {d["case"] for d in job.lines() if d.get("ok")}
    assert passed == set(named_cases(nprocs)), job
    assert {"done": "named"} in job.lines(), job


@pytest.mark.parametrize("nprocs", SIZES)
def test_algorithm_library(nprocs: int) -> None:
    from _mpi_cases import library_cases

    job = run_job(nprocs, "library")
    assert job.rc == 0, job
    passed = {d["case"] for d in job.lines() if d.get("ok")}
    assert passed == {f"library {name}" for name in library_cases(nprocs)}, job


@pytest.fixture(scope="module")
def random_case_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cases from the reference generator (random problems, distributions, schedules)."""
    from hypothesis import HealthCheck, given, settings

    import distal as dl
    from reference import apply_schedule, cases

    per_size: dict[int, list[Any]] = {p: [] for p in SIZES}

    @settings(
        max_examples=300,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(cases(with_schedule=True))
    def collect(case: Any) -> None:
        if all(len(b) >= 5 for b in per_size.values()):
            return
        built = case.build()
        kernel = dl.compile(apply_schedule(dl.schedule(built.output), case.ops, built))
        bucket = per_size.get(kernel.plan.nprocs)
        if bucket is not None and len(bucket) < 5 and case not in bucket:
            bucket.append(case)

    collect()
    path = tmp_path_factory.mktemp("mpi") / "cases.pickle"
    path.write_bytes(pickle.dumps(per_size))
    return path


@pytest.mark.parametrize("nprocs", SIZES)
def test_random_schedules(nprocs: int, random_case_file: Path) -> None:
    expect = len(pickle.loads(random_case_file.read_bytes())[nprocs])
    assert expect >= 3, "the generator gave too few cases of this size"
    job = run_job(nprocs, "random", str(random_case_file))
    assert job.rc == 0, job
    assert sum(1 for d in job.lines() if d.get("ok")) == expect, job


def test_distributed_inputs_and_outputs(tmp_path: Path) -> None:
    job = run_job(4, "dist", str(tmp_path))
    assert job.rc == 0, job
    passed = {d["case"]: d for d in job.lines() if d.get("ok")}
    assert set(passed) == {
        "from_function + gather none",
        "write_npy_dir / from_npy_dir",
        "npy-dir input, gather root",
        "zarr write / read",
    }, job
    assert (tmp_path / "A_npy" / "distal.json").is_file()
    if "skipped" in passed["zarr write / read"]:
        pytest.skip(f"zarr part skipped: {passed['zarr write / read']['skipped']}")


# --------------------------------------------------------------------------------------------
# Failures: wrong size, an exception on one rank, a failing block source
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nprocs", [2, 8])
def test_wrong_number_of_ranks_fails_on_every_rank(nprocs: int) -> None:
    job = run_job(nprocs, "wrong-size", timeout=FAIL_WITHIN + 30)
    assert job.rc != 0, job
    assert job.seconds < FAIL_WITHIN, job
    for r in range(nprocs):
        assert f"4 processors but this MPI job has {nprocs} ranks (this is rank {r})" in job.err, (
            job
        )
    assert "MPISizeError" in job.err


@pytest.mark.parametrize(
    ("nprocs", "rank", "step"),
    [(4, 2, 1), (8, 5, 0), (2, 1, -1), (4, 3, 2)],
    ids=["4@step1", "8@step0", "2@placement", "4@after-last-step"],
)
def test_injected_failure_reaches_every_rank(nprocs: int, rank: int, step: int) -> None:
    job = run_job(nprocs, "fail-catch", str(rank), str(step), timeout=FAIL_WITHIN + 30)
    assert job.seconds < FAIL_WITHIN, job
    assert job.rc == 0, job
    reports = {d["rank"]: d for d in job.lines() if "rank" in d}
    assert set(reports) == set(range(nprocs)), job
    for d in reports.values():
        assert d["processor"] == rank, job
        assert f"processor {rank} (MPI rank {rank}) failed" in d["error"], job
        assert "injected failure" in d["error"], job


@pytest.mark.parametrize(("rank", "step"), [(3, 1), (1, 0), (6, 2)])
def test_injected_failure_in_a_routed_plan_reaches_every_rank(rank: int, step: int) -> None:
    """Relays (forwarding from their threads) and ranks that finish early and wait in the
    result's gather all learn of the failure, and the job ends cleanly."""
    job = run_job(8, "fail-tree", str(rank), str(step), timeout=FAIL_WITHIN + 30)
    assert job.seconds < FAIL_WITHIN, job
    assert job.rc == 0, job
    reports = {d["rank"]: d for d in job.lines() if "rank" in d}
    assert set(reports) == set(range(8)), job
    assert all(d["processor"] == rank for d in reports.values()), job


def test_uncaught_failure_ends_the_job_via_distal_run() -> None:
    job = run_job(4, "fail-raise", "2", "1", via_cli=True, timeout=FAIL_WITHIN + 30)
    assert job.rc != 0, job
    assert job.seconds < FAIL_WITHIN, job
    assert "RuntimeFailure: processor 2 (MPI rank 2) failed" in job.err, job
    assert "injected failure at step 1" in job.err, job


def test_failing_block_source_names_its_rank() -> None:
    job = run_job(4, "fail-source", "3", timeout=FAIL_WITHIN + 30)
    assert job.rc != 0, job
    assert job.seconds < FAIL_WITHIN, job
    assert "processor 3 (MPI rank 3) failed: OSError: disk on fire" in job.err, job


def test_a_failing_collective_write_fails_every_rank_without_a_hang(tmp_path: Path) -> None:
    job = run_job(4, "fail-write", "2", str(tmp_path), timeout=FAIL_WITHIN + 30)
    assert job.rc == 0, job
    assert job.seconds < FAIL_WITHIN, job
    reports = {d["rank"]: d for d in job.lines() if "rank" in d}
    assert set(reports) == {0, 1, 2, 3}, job
    assert reports[2]["kind"] == "InputError", job
    assert "cannot write the result to" in reports[2]["error"], job
    assert "(rank 2): [Errno 28] No space left on device" in reports[2]["error"], job
    for r in (0, 1, 3):
        assert reports[r]["kind"] == "PeerFailure", job
        assert "processor 2 (MPI rank 2) failed" in reports[r]["error"], job


def named_on_every_rank(job: Job, nprocs: int, *needles: str) -> None:
    """Every rank printed the failure: the runtime's own line ``distal: MPI rank r: ...``
    (one write, so ranks' output cannot split it) holding all ``needles``."""
    for r in range(nprocs):
        lines = re.findall(rf"distal: MPI rank {r}: [^\n]*", job.err)
        assert any(all(n in line for n in needles) for line in lines), (r, needles, job)


BAD_B = "InputError: input 'B' has shape (31, 32); tensor expects (32, 32)"


@pytest.mark.parametrize("mode", ["raise", "catch-end", "catch-barrier", "catch-rerun"])
def test_a_wrong_shaped_input_on_one_rank_ends_the_job(mode: str) -> None:
    """Rank 2's ``B`` has the wrong shape, in a plain script under a bare ``mpiexec``:
    uncaught, or caught by rank 2 alone, which then ends its script, waits in an MPI
    barrier no other rank reaches, or runs again. Every rank names the InputError and the
    job ends with a non-zero status within seconds."""
    job = run_job(4, mode, "2", script=USER_SCRIPT, timeout=FAIL_WITHIN + 30)
    assert job.rc != 0, job
    assert job.seconds < FAIL_WITHIN, job
    named_on_every_rank(job, 4, "processor 2 (MPI rank 2) failed before the run", BAD_B)
    # the other ranks raised PeerFailure naming rank 2 and carrying its error (the hook
    # prints each traceback in one write)
    assert f"PeerFailure: processor 2 (MPI rank 2) failed before the run: {BAD_B}" in job.err
    if mode == "raise":
        assert f"distal.errors.{BAD_B}" in job.err, job
    if mode == "catch-end":
        assert {"rank": 2, "end": "catch-end"} in job.lines(), job
    if mode == "catch-barrier":
        assert "did not end within" in job.err, job


def test_a_wrong_shaped_input_caught_everywhere_leaves_the_job_usable() -> None:
    """All ranks raise together before anything runs (rank 2 its InputError, the others a
    PeerFailure naming it) and nothing is left pending: the next run works, the job ends
    normally."""
    job = run_job(4, "catch-all", "2", script=USER_SCRIPT, timeout=FAIL_WITHIN + 30)
    assert job.rc == 0, job
    assert job.seconds < FAIL_WITHIN, job
    reports = {d["rank"]: d for d in job.lines() if "kind" in d}
    assert set(reports) == {0, 1, 2, 3}, job
    assert reports[2]["kind"] == "InputError", job
    assert reports[2]["error"] == BAD_B.split(": ", 1)[1], job
    for r in (0, 1, 3):
        assert reports[r]["kind"] == "PeerFailure", job
        assert reports[r]["error"] == f"processor 2 (MPI rank 2) failed before the run: {BAD_B}"
    assert {d["rank"] for d in job.lines() if d.get("rerun") == "ok"} == {0, 1, 2, 3}, job


def test_uncaught_failure_mid_run_ends_the_job_under_plain_mpiexec() -> None:
    job = run_job(4, "fail-raise", "2", "1", timeout=FAIL_WITHIN + 30)
    assert job.rc != 0, job
    assert job.seconds < FAIL_WITHIN, job
    assert "RuntimeFailure: processor 2 (MPI rank 2) failed" in job.err, job
    named_on_every_rank(job, 4, "processor 2 (MPI rank 2) failed", "injected failure at step 1")


def test_failure_mid_run_caught_by_the_failing_rank_alone_ends_the_job() -> None:
    """Rank 2 catches its own failure and its script ends; the others do not catch theirs."""
    job = run_job(4, "fail-own", "2", "1", timeout=FAIL_WITHIN + 30)
    assert job.rc != 0, job
    assert job.seconds < FAIL_WITHIN, job
    assert "PeerFailure: processor 2 (MPI rank 2) failed" in job.err, job
    named_on_every_rank(job, 4, "processor 2 (MPI rank 2) failed", "injected failure at step 1")


def test_sys_exit_on_one_rank_ends_the_job_via_distal_run() -> None:
    """Rank 1 leaves with ``sys.exit(3)`` before the run the others are waiting in."""
    job = run_job(4, "exit", "1", script=USER_SCRIPT, via_cli=True, timeout=FAIL_WITHIN + 30)
    assert job.rc != 0, job
    assert job.seconds < FAIL_WITHIN, job
    for r in (0, 2, 3):  # rank 1 left on purpose and prints nothing
        lines = re.findall(rf"distal: MPI rank {r}: [^\n]*", job.err)
        assert any("(MPI rank 1) failed: SystemExit: 3" in line for line in lines), (r, job)


def test_ranks_that_compiled_different_kernels_fail_together() -> None:
    """Rank 0 compiles Cannon where the others compile SUMMA (then another routing of one
    schedule): every rank raises DistalUserError before any transfer, and the same kernel
    everywhere runs afterwards."""
    job = run_job(4, "different-kernels", timeout=FAIL_WITHIN + 30)
    assert job.rc == 0, job
    reports = [d for d in job.lines() if "kind" in d]
    for case in ("schedule", "routing"):
        got = {d["rank"]: d for d in reports if d["case"] == case}
        assert set(got) == {0, 1, 2, 3}, job
        for d in got.values():
            assert d["kind"] == "DistalUserError", job
            assert "the ranks compiled different kernels" in d["error"], job
    assert {"case": "same kernel after different ones", "ok": True} in job.lines(), job


def test_cli_run_without_launcher(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "distal",
            "run",
            "-n",
            "2",
            "--mpiexec",
            str(tmp_path / "nope"),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no mpiexec found" in proc.stderr
