"""A checkpoint that fails mid-loop: a full disk, a read-only filesystem, a directory that
cannot be written. The loop says which iteration it could not save and where, the newest
complete iteration stays readable, ``checkpoint_errors=`` chooses between stopping and
going on without saving, a loop whose last save fails still ends with its results, and a
rerun after a failed Dask run reports none of that run's old failures."""

from __future__ import annotations

import errno
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import distal as dl
from distal.runtime import checkpoint as ck
from distal.session.loops import read_manifest

ERRORS = {
    "full": OSError(errno.ENOSPC, "No space left on device"),
    "read-only": OSError(errno.EROFS, "Read-only file system"),
    "unwritable": PermissionError(errno.EACCES, "Permission denied"),
}


def failing_from(
    monkeypatch: pytest.MonkeyPatch, error: OSError, iteration: int, where: str = "entries"
) -> list[int]:
    """Make every write of iteration ``iteration`` and later fail with ``error`` (the
    entries', or only the manifest's); returns the list the failures are logged in."""
    seen: list[int] = []
    real_save, real_manifest = ck.CheckpointStore.save, ck.CheckpointStore.write_manifest

    def it_of(store: ck.CheckpointStore) -> int | None:
        last = store.run.rsplit("/", 1)[-1]
        return int(last) if store.run.startswith("sessions/") and last.isdigit() else None

    def save(self: ck.CheckpointStore, name: str, arr: np.ndarray) -> str:
        it = it_of(self)
        if where == "entries" and it is not None and it >= iteration:
            seen.append(it)
            raise error
        return real_save(self, name, arr)

    def manifest(self: ck.CheckpointStore, doc: Any) -> None:
        it = it_of(self)
        if it is not None and it >= iteration:
            seen.append(it)
            raise error
        real_manifest(self, doc)

    monkeypatch.setattr(ck.CheckpointStore, "save", save)
    monkeypatch.setattr(ck.CheckpointStore, "write_manifest", manifest)
    return seen


def jacobi(
    location: Path, n: int = 6, stop_at: int | None = None, **options: Any
) -> tuple[dl.Session, list[int]]:
    """A small checkpointed loop (``x = 0.5 x + 1``, kept ``x``); the iterations it ran."""
    sess = dl.Session("local", machine=2, checkpoint=location, **options)
    sess["x"] = np.zeros(10)
    ran = []
    for it in sess.iterations(n, keep=["x"], name="jacobi"):
        ran.append(it)
        sess["x"] = sess["x"] * 0.5 + 1.0
        if stop_at is not None and it == stop_at:
            break
    return sess, ran


def value_after(iterations: int) -> np.ndarray:
    x = np.zeros(10)
    for _ in range(iterations):
        x = x * 0.5 + 1.0
    return x


@pytest.mark.parametrize("kind", list(ERRORS))
def test_a_failed_save_names_the_iteration_and_keeps_the_last_good_one(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the raw ``OSError: [Errno 28] No space left on device`` (30, 13) from the
    loop, nothing saying which iteration or what is left."""
    failing_from(monkeypatch, ERRORS[kind], 3)
    with pytest.raises(dl.CheckpointFailed) as err:
        jacobi(tmp_path)
    e = err.value
    assert isinstance(e, dl.DistalError)
    assert isinstance(e, OSError)
    assert (e.loop, e.iteration, e.saved) == ("jacobi", 3, 2)
    text = str(e)
    assert "could not save iteration 3" in text
    assert str(tmp_path) in text
    assert os.strerror(ERRORS[kind].errno) in text
    assert "still holds iteration 2" in text
    assert "checkpoint_errors='continue'" in text
    monkeypatch.undo()  # the disk has room again
    assert read_manifest(tmp_path, "jacobi", 2) is not None  # the last good one is whole
    assert not (tmp_path / "sessions" / "jacobi" / "3").exists()  # what 3 wrote is gone
    sess, ran = jacobi(tmp_path)  # a rerun resumes after it
    assert sess.resumed_from == 2
    assert ran == [3, 4, 5]
    np.testing.assert_array_equal(sess.get("x"), value_after(6))


def test_continue_goes_on_without_saving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = failing_from(monkeypatch, ERRORS["read-only"], 2)
    with pytest.warns(dl.CheckpointWarning, match=r"could not save iteration 2.*going on"):
        sess, ran = jacobi(tmp_path, checkpoint_errors="continue")
    assert ran == list(range(6))
    np.testing.assert_array_equal(sess.get("x"), value_after(6))
    assert [it for _, it, _ in sess.save_failures] == [2, 3, 4, 5]
    assert sorted(set(seen)) == [2, 3, 4, 5]
    assert "iteration 4 could not be saved (OSError" in sess.summary()
    monkeypatch.undo()
    assert read_manifest(tmp_path, "jacobi", 1) is not None
    # per loop too: the loop's own option wins over the session's
    sess = dl.Session("local", machine=2, checkpoint=tmp_path / "b")
    with pytest.raises(dl.InputError, match="checkpoint_errors"):
        sess.iterations(3, keep=[], name="x", checkpoint_errors="ignore")


def test_a_loop_whose_last_save_fails_still_ends_with_its_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: every iteration was computed and the loop raised the final save's error."""
    failing_from(monkeypatch, ERRORS["full"], 5, where="manifest")
    with pytest.warns(dl.CheckpointWarning, match=r"iteration 5 .*every iteration of the loop"):
        sess, ran = jacobi(tmp_path)
    assert ran == list(range(6))
    np.testing.assert_array_equal(sess.get("x"), value_after(6))
    assert read_manifest(tmp_path, "jacobi", 4) is not None


def test_cg_returns_its_solution_when_its_last_save_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sps = pytest.importorskip("scipy.sparse")
    n = 40
    A = sps.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    b = np.ones(n)
    its = 8  # every one run (tol=0): the loop ends by saving its last iteration
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dl.ConvergenceWarning)
        want, _ = dl.apps.cg(A, b, machine=2, maxiter=its, tol=0.0)
        failing_from(monkeypatch, ERRORS["full"], its - 1)
        sess = dl.Session(machine=2, checkpoint=tmp_path)
        with pytest.warns(dl.CheckpointWarning, match=f"iteration {its - 1}"):
            x, got = dl.apps.cg(A, b, session=sess, maxiter=its, tol=0.0)
    assert got == its
    np.testing.assert_array_equal(x, want)


def test_cg_saves_every_iteration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the docs promise: every iteration of ``dl.apps.cg`` is durable before the next
    one starts. Before: ``save="latest"`` skipped the iterations finished while its writer
    rested (a killed driver lost 3-5 of them)."""
    sps = pytest.importorskip("scipy.sparse")
    saved: list[int] = []
    real = ck.CheckpointStore.write_manifest

    def manifest(self: ck.CheckpointStore, doc: Any) -> None:
        real(self, doc)
        saved.append(int(doc["iteration"]))

    monkeypatch.setattr(ck.CheckpointStore, "write_manifest", manifest)
    n = 2000
    A = sps.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dl.ConvergenceWarning)
        dl.apps.cg(A, np.ones(n), session=dl.Session(machine=2, checkpoint=tmp_path), maxiter=12)
    assert saved == list(range(12))


def test_a_real_full_and_read_only_tmpfs(tmp_path: Path) -> None:
    """On a 64 KiB tmpfs (mounted where this test may: as root), then remounted read-only."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:

        def loop(read_only_at: int = -1, **options: Any) -> tuple[dl.Session, list[int]]:
            sess = dl.Session("local", machine=2, checkpoint=mnt / "ck", **options)
            sess["x"] = np.zeros(3000)  # 24 KiB an iteration: the third does not fit
            ran = []
            for it in sess.iterations(6, keep=["x"], name="fill"):
                ran.append(it)
                sess["x"] = sess["x"] + 1.0
                if it == read_only_at:  # the filesystem turns read-only mid-loop
                    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
            return sess, ran

        with pytest.raises(dl.CheckpointFailed, match="No space left on device") as err:
            loop()
        assert err.value.saved is not None
        last = err.value.saved
        assert read_manifest(mnt / "ck", "fill", last) is not None
        for old in sorted((mnt / "ck" / "sessions" / "fill").iterdir())[:-1]:
            subprocess.run(["rm", "-rf", str(old)], check=True)  # room for one more
        with pytest.warns(dl.CheckpointWarning, match="Read-only file system"):
            sess, ran = loop(read_only_at=last + 1, checkpoint_errors="continue")
        assert sess.resumed_from == last
        assert ran == list(range(last + 1, 6))
        assert [it for _, it, _ in sess.save_failures] == list(range(last + 1, 6))
        assert read_manifest(mnt / "ck", "fill", last) is not None  # still the last good one
        np.testing.assert_array_equal(sess.get("x"), np.full(3000, 6.0))
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@pytest.mark.dask
def test_a_rerun_after_a_full_disk_reports_no_old_failure(
    dask_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Dask run whose writes fail (in-process workers: the failure is faked where they
    write) fails with ``WriteFailed``; once space is back, the rerun in the same run
    directory succeeds. Before: it often failed again with the first run's error, which a
    worker thread's writer still held (the run directory is the same)."""
    i, j, k = dl.index_vars("i j k")
    M = dl.Machine(2, 2)
    A, B, C = (dl.Tensor(x, (32, 32), dist="xy -> xy", machine=M) for x in "ABC")
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    kernel = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M))
    rng = np.random.default_rng(0)
    inputs = {"B": rng.random((32, 32)), "C": rng.random((32, 32))}
    real = ck.CheckpointStore.save

    def full(self: ck.CheckpointStore, name: str, arr: np.ndarray) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    for _ in range(3):  # (a stale failure was there two runs in three)
        where = tmp_path / f"ck{_}"
        monkeypatch.setattr(ck.CheckpointStore, "save", full)
        with pytest.raises(ck.WriteFailed, match="No space left"):
            kernel.run(inputs, runtime="dask", client=dask_client, checkpoint=where)
        monkeypatch.setattr(ck.CheckpointStore, "save", real)
        res = kernel.run(inputs, runtime="dask", client=dask_client, checkpoint=where)
        np.testing.assert_allclose(res.value, inputs["B"] @ inputs["C"])


def test_a_rerun_in_the_same_directory_is_not_given_an_earlier_attempts_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mechanism behind the Dask case, in one thread: a run's write fails behind it and
    the run ends before anything waits for it; a rerun (same kernel, inputs: the same run
    directory) writes on that thread next. Before: its first write raised the first run's
    ``No space left on device``."""
    real = ck.CheckpointStore.save

    def full(self: ck.CheckpointStore, name: str, arr: np.ndarray) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    first = ck.CheckpointStore(tmp_path, "run")
    monkeypatch.setattr(ck.CheckpointStore, "save", full)
    first.save_soon("a", np.ones(3), lambda d: None)  # fails behind; nobody waits
    monkeypatch.setattr(ck.CheckpointStore, "save", real)
    rerun = ck.CheckpointStore(tmp_path, "run")
    assert rerun.root == first.root
    done: list[str] = []
    rerun.save_soon("a", np.ones(3), done.append)
    ck.drain(getattr(rerun, "scope", rerun.root))
    assert len(done) == 1
    assert rerun.load("a")[1] == ck.OK
    monkeypatch.setattr(ck.CheckpointStore, "save", full)
    first.save_soon("b", np.ones(3), lambda d: None)
    with pytest.raises(ck.WriteFailed):  # the first attempt's own drain still reports it
        ck.drain(getattr(first, "scope", first.root))


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["stop", "continue"])
def test_mpi_ranks_agree_on_an_iteration_one_rank_could_not_save(tmp_path: Path, mode: str) -> None:
    """Rank 1 alone cannot write its block of iteration 3: both ranks stop together
    (``"stop"``), or both go on (``"continue"``); never one rank waiting for the other."""
    from mpi_jobs import run_job

    here = Path(__file__).resolve().parent
    job = run_job(2, str(tmp_path / "ck"), "1", mode, script=here / "_checkpoint_failure_job.py")
    assert job.rc == 0, job
    lines = sorted(job.lines(), key=lambda d: d["rank"])
    assert [d["rank"] for d in lines] == [0, 1], job
    for d in lines:
        assert d["failures"] == [3], job
        if mode == "stop":
            assert (d["error"], d["iteration"], d["saved"]) == ("CheckpointFailed", 3, 2)
            assert d["x0"] == value_after(4)[0]
        else:
            assert d["error"] is None
            assert d["x0"] == value_after(6)[0]
