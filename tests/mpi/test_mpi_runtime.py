"""The MPI runtime under a real ``mpiexec``, at 1, 2, 4 and 8 ranks, dense and sparse.

Each test launches ``mpiexec -n P python _script.py MODE ...`` (the script asserts on every
rank that dense values equal numpy's, sparse ones the local runtime's bit for bit and
scipy's to 1e-12, and that measured stats equal the predicted ones; rank 0 prints a JSON
line per passed case) and checks the job's exit code and output. Dense and sparse kernels
are cases of the same tests. The failure tests check that a job whose rank fails (a bad
input, an injected failure, a wrong job size) fails every rank together within seconds,
naming that rank, never a hang.

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


def errors(job: Job, case: str = "") -> dict[int, dict[str, Any]]:
    """Each rank's caught error in ``case``, by rank (the failure modes print one line per
    rank and case: ``rank``, ``kind``, ``error``)."""
    return {d["rank"]: d for d in job.lines() if "kind" in d and d.get("case", "") == case}


def done_ranks(job: Job, mode: str) -> set[int]:
    """The ranks that got to the end of the script (each prints it last)."""
    return {d["rank"] for d in job.lines() if d.get("done") == mode}


#: sparse cases whose input is laid out against the schedule's cut: their pos/crd travel
MOVED = {
    "spmv row, B by non-zeros",
    "spmv nz, B by rows",
    "spmm nz, B by rows",
    "sddmm row, B by non-zeros",
    "spmv nz complex",
}
#: ``_mpi_cases.sparse_cases`` (written out: the test does not take the script's word for
#: which cases there are), then the check of the other gather modes
SPARSE_CASES = {
    *(f"{k} {s}" for k in ("spmv", "spmm") for s in ("row", "nz")),
    *(f"sddmm {s} D {d}" for s in ("row", "nz") for d in ("xy -> *", "xy -> x")),
    *MOVED,
    "spmv nz, a replicated",
    "spmm row, C streamed in 3 steps",
    "spmv row banded",
    "spmv row banded complex",
    "gather modes and options",
}
#: sparse library cases with B laid out by non-zeros, cut by rows: 3-level pieces travel
MOVED_LIBRARY = {f"spmttkrp rows, {f} B by non-zeros" for f in ("csf", "dss")}
SPARSE_LIBRARY = {
    "spmv rows hull",
    "spmm rows 2-D",
    "spmm nonzeros 2-D",
    "sddmm nonzeros, A by non-zeros",
    "spttv fibers",
    "spadd3",
    "spinnerprod",
    *(f"spmttkrp {s}" for s in ("rows", "nonzeros", "fibers")),
    *MOVED_LIBRARY,
}


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


@pytest.mark.parametrize(
    ("mode", "nprocs"), [*(("named", p) for p in SIZES), ("sparse", 2), ("sparse", 4)]
)
def test_named_algorithms(mode: str, nprocs: int) -> None:
    """The dense algorithms of ``_mpi_cases`` (SpMV, SpMM, SDDMM for ``sparse``): every one
    passes on every rank. Index words show which sparse inputs travelled: those laid out
    against the cut, no others, and never a dense kernel's."""
    from _mpi_cases import named_cases

    job = run_job(nprocs, mode)
    assert job.rc == 0, job
    passed = {d["case"]: d for d in job.lines() if d.get("ok")}
    want = set(named_cases(nprocs)) if mode == "named" else SPARSE_CASES
    assert set(passed) == want, job
    assert done_ranks(job, mode) == set(range(nprocs)), job
    for name in want - {"gather modes and options"}:
        assert (passed[name]["index"] > 0) == (name in MOVED), (name, job)
    if mode == "sparse":
        assert passed["spmv nz"]["messages"] > 0, job


@pytest.mark.parametrize(
    ("mode", "nprocs"),
    [*(("library", p) for p in SIZES), ("sparse-library", 2), ("sparse-library", 4)],
)
def test_algorithm_library(mode: str, nprocs: int) -> None:
    """Every algorithm of ``distal.algorithms``; the sparse ones cover 2-D machines, hull
    gathers, outputs cut by non-zeros, union patterns, 3-tensors (their 3-level pieces
    travel when laid out against the cut) and a scalar output."""
    from _mpi_cases import library_cases

    job = run_job(nprocs, mode)
    assert job.rc == 0, job
    passed = {d["case"]: d for d in job.lines() if d.get("ok")}
    if mode == "library":
        assert set(passed) == {f"library {name}" for name in library_cases(nprocs)}, job
        assert all(d["index"] == 0 for d in passed.values()), job  # no coordinates move
    else:
        assert set(passed) == SPARSE_LIBRARY, job
        for name in MOVED_LIBRARY:
            assert passed[name]["index"] > 0, (name, job)
    assert done_ranks(job, mode) == set(range(nprocs)), job


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


@pytest.mark.parametrize(
    ("kind", "how", "nprocs"),
    [
        ("dense", "raise", 2),
        ("dense", "raise", 8),
        ("dense", "catch", 2),
        ("sparse", "raise", 2),
        ("sparse", "catch", 2),
    ],
)
def test_wrong_number_of_ranks_fails_on_every_rank(kind: str, how: str, nprocs: int) -> None:
    """A kernel for 4 processors in a job of another size: every rank raises MPISizeError
    naming itself, within seconds. Uncaught it ends the job; caught, the job ends normally."""
    job = run_job(nprocs, "wrong-size", kind, how, timeout=FAIL_WITHIN + 30)
    assert job.seconds < FAIL_WITHIN, job

    def message(r: int) -> str:
        return f"4 processors but this MPI job has {nprocs} ranks (this is rank {r})"

    if how == "raise":
        assert job.rc != 0, job
        for r in range(nprocs):
            assert message(r) in job.err, job
        assert "MPISizeError" in job.err
    else:
        assert job.rc == 0, job
        got = errors(job)
        assert set(got) == set(range(nprocs)), job
        for r, d in got.items():
            assert d["kind"] == "MPISizeError", job
            assert message(r) in d["error"], job


@pytest.mark.parametrize(
    ("mode", "nprocs", "rank", "step"),
    [
        ("fail-catch", 4, 2, 1),
        ("fail-catch", 8, 5, 0),
        ("fail-catch", 2, 1, -1),
        ("fail-catch", 4, 3, 2),
        ("fail-sparse", 4, 1, 0),
    ],
    ids=["4@step1", "8@step0", "2@placement", "4@after-last-step", "sparse-4@step0"],
)
def test_injected_failure_reaches_every_rank(mode: str, nprocs: int, rank: int, step: int) -> None:
    """RuntimeFailure on the failing rank, PeerFailure naming it on the others (in the
    sparse SpMM after it posted its messages, the others waiting for its pieces), no hang."""
    job = run_job(nprocs, mode, str(rank), str(step), timeout=FAIL_WITHIN + 30)
    assert job.seconds < FAIL_WITHIN, job
    assert job.rc == 0, job
    got = errors(job)
    assert set(got) == set(range(nprocs)), job
    for r, d in got.items():
        assert d["processor"] == rank, job
        assert d["kind"] == ("RuntimeFailure" if r == rank else "PeerFailure"), job
        want = f"processor {rank} (MPI rank {rank}) failed: RuntimeError: injected failure"
        assert want in d["error"], job


@pytest.mark.parametrize(("rank", "step"), [(3, 1), (1, 0), (6, 2)])
def test_injected_failure_in_a_routed_plan_reaches_every_rank(rank: int, step: int) -> None:
    """Relays (forwarding from their threads) and ranks that finish early and wait in the
    result's gather all learn of the failure, and the job ends cleanly."""
    job = run_job(8, "fail-tree", str(rank), str(step), timeout=FAIL_WITHIN + 30)
    assert job.seconds < FAIL_WITHIN, job
    assert job.rc == 0, job
    got = errors(job)
    assert set(got) == set(range(8)), job
    assert all(d["processor"] == rank for d in got.values()), job


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
    reports = errors(job)
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


#: the jobs in which every rank catches its error: (script, mode, rank 2's error by case)
CAUGHT_EVERYWHERE = {
    "dense": (USER_SCRIPT, "catch-all", {"": BAD_B}),
    "sparse": (
        SCRIPT,
        "sparse-bad",
        {
            "dense": "InputError: input 'c' has shape (59,); tensor expects (60,)",
            "sparse": "InputError: input 'B' cannot be read as a csr array: an array of "
            "shape (59, 60) was given for shape (60, 60)",
        },
    ),
}


@pytest.mark.parametrize("kind", sorted(CAUGHT_EVERYWHERE))
def test_a_wrong_shaped_input_caught_everywhere_leaves_the_job_usable(kind: str) -> None:
    """All ranks raise together before anything runs (rank 2 its InputError, the others a
    PeerFailure naming it) and nothing is left pending: the next run works, the job ends
    normally. The sparse job's short dense ``c``, then its short sparse ``B``, which
    ``bind`` rejects before there is a bound kernel (rank 2 joins through ``fail_together``)."""
    script, mode, bad = CAUGHT_EVERYWHERE[kind]
    job = run_job(4, mode, "2", script=script, timeout=FAIL_WITHIN + 30)
    assert job.rc == 0, job
    assert job.seconds < FAIL_WITHIN, job
    for case, error in bad.items():
        got = errors(job, case)
        assert set(got) == {0, 1, 2, 3}, (case, job)
        assert got[2]["kind"] == "InputError", (case, job)
        assert got[2]["error"] == error.split(": ", 1)[1], (case, job)
        for r in (0, 1, 3):
            assert got[r]["kind"] == "PeerFailure", (case, job)
            want = f"processor 2 (MPI rank 2) failed before the run: {error}"
            assert got[r]["error"] == want, (case, job)
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
    schedule), then rank 2 binds a sparse kernel to a ``B`` of another pattern: every rank
    raises DistalUserError naming the ranks that differ, before any transfer, and the same
    kernel everywhere runs afterwards."""
    job = run_job(4, "different-kernels", timeout=FAIL_WITHIN + 30)
    assert job.rc == 0, job
    assert job.seconds < FAIL_WITHIN, job
    for case, differ in {"schedule": [1, 2, 3], "routing": [1, 2, 3], "pattern": [2]}.items():
        got = errors(job, case)
        assert set(got) == {0, 1, 2, 3}, (case, job)
        for d in got.values():
            assert d["kind"] == "DistalUserError", (case, job)
            assert "the ranks compiled different kernels" in d["error"], (case, job)
            assert f"rank(s) {differ} differ from rank 0" in d["error"], (case, job)
    assert {"case": "same kernel after different ones", "ok": True} in job.lines(), job
    assert {"case": "same pattern after different ones", "ok": True} in job.lines(), job


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
