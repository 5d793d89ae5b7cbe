"""A checkpointed application killed with SIGKILL mid-run and started again resumes from
its last saved iteration and ends exactly equal to a run that was never killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from distal.session.loops import iteration_dirs, read_manifest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "_resume_script.py"
ENV = dict(
    os.environ,
    OMP_NUM_THREADS="1",
    OPENBLAS_NUM_THREADS="1",
    MKL_NUM_THREADS="1",
    PYTHONUNBUFFERED="1",
    DISTAL_PROGRESS="0",
)


def _run(args: list[str], timeout: float = 240) -> str:
    proc = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _saved(location: Path, loop: str) -> int:
    done = [it for it in iteration_dirs(location, loop) if read_manifest(location, loop, it)]
    return max(done, default=-1)


def killed_and_resumed(
    launch: list[str], tmp: Path, app: str, loop: str, kill_at: int, runtime: str | None = None
) -> None:
    ck = tmp / "ck"
    cmd = [*launch, str(SCRIPT), app]
    runtime = runtime or ("mpi" if "-n" in launch else "local")
    proc = subprocess.Popen(
        [*cmd, runtime, str(ck), str(tmp / "killed.npz"), "0.02"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    t0 = time.monotonic()
    while _saved(ck, loop) < kill_at and proc.poll() is None and time.monotonic() - t0 < 200:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert not (tmp / "killed.npz").exists()
    killed_at = _saved(ck, loop)
    assert killed_at >= kill_at
    out = _run([*cmd, runtime, str(ck), str(tmp / "resumed.npz"), "0"])
    resumed_from = json.loads(out.strip().splitlines()[-1])["resumed_from"]
    assert resumed_from == killed_at
    _run([*cmd, runtime, "-", str(tmp / "whole.npz"), "0"])
    resumed, whole = np.load(tmp / "resumed.npz"), np.load(tmp / "whole.npz")
    assert sorted(resumed.files) == sorted(whole.files)
    for name in whole.files:
        assert np.array_equal(resumed[name], whole[name]), name


def test_cp_als_killed_and_resumed(tmp_path: Path) -> None:
    killed_and_resumed([sys.executable], tmp_path, "cp_als", "cp_als", kill_at=5)


def test_cg_killed_and_resumed(tmp_path: Path) -> None:
    killed_and_resumed([sys.executable], tmp_path, "cg", "cg", kill_at=5)


@pytest.mark.mpi
def test_cg_killed_and_resumed_mpi(tmp_path: Path) -> None:
    from mpi_jobs import require_mpi

    killed_and_resumed([require_mpi(), "-n", "4", sys.executable], tmp_path, "cg", "cg", kill_at=5)


def test_cg_killed_and_resumed_dask(tmp_path: Path) -> None:
    """The driver, the Dask scheduler and every worker SIGKILLed together mid-loop (values
    live on the workers, the kept blocks were written by them); a new session on a fresh
    pool resumes from the last saved iteration and ends bit-identical."""
    pytest.importorskip("distributed", reason="needs distributed (dask extra)")
    killed_and_resumed([sys.executable], tmp_path, "cg", "cg", kill_at=5, runtime="dask")


@contextmanager
def _pool(tmp: Path, workers: int = 2) -> Iterator[tuple[str, subprocess.Popen, list]]:
    """A Dask scheduler and ``workers`` single-threaded workers, each its own process (so a
    test can kill the scheduler alone); yields the address and the processes, all killed
    on the way out."""
    sf = tmp / f"scheduler-{time.monotonic_ns()}.json"
    quiet = {"env": ENV, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    py = [sys.executable, "-m"]
    scheduler = ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0"]
    worker = ["distributed.cli.dask_worker", "--nthreads", "1", "--no-nanny"]
    files = ["--scheduler-file", str(sf), "--dashboard-address", ":0"]
    procs = [subprocess.Popen([*py, *scheduler, *files], **quiet)]
    try:
        t0 = time.monotonic()
        while not sf.exists() and time.monotonic() - t0 < 60:
            time.sleep(0.05)
        time.sleep(0.2)  # written whole: the file is dumped in one call after it is made
        address = json.loads(sf.read_text())["address"]
        procs += [subprocess.Popen([*py, *worker, *files], **quiet) for _ in range(workers)]
        from distributed import Client

        with Client(address, timeout=60) as c:
            c.wait_for_workers(workers, timeout=60)
        yield address, procs[0], procs[1:]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_cg_resumes_after_the_scheduler_alone_is_killed_dask(tmp_path: Path) -> None:
    """SIGKILL the Dask scheduler alone (driver and workers alive) mid-loop: the driver ends
    within seconds with ``PoolLost`` naming the scheduler (never a hang, never a traceback
    from inside distributed's comms), and a new session on a fresh pool resumes from the
    last iteration saved and ends bit-identical to a run never interrupted."""
    pytest.importorskip("distributed", reason="needs distributed (dask extra)")
    ck = tmp_path / "ck"
    with _pool(tmp_path) as (address, scheduler, _):
        cmd = [sys.executable, str(SCRIPT), "cg", f"dask@{address}", str(ck)]
        proc = subprocess.Popen(
            [*cmd, str(tmp_path / "killed.npz"), "0.02"],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        t0 = time.monotonic()
        while _saved(ck, "cg") < 5 and proc.poll() is None and time.monotonic() - t0 < 200:
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before the scheduler could be killed"
        scheduler.kill()
        killed = time.monotonic()
        _, err = proc.communicate(timeout=120)
        ended_after = time.monotonic() - killed
    assert proc.returncode != 0
    assert ended_after < 90, ended_after
    assert "PoolLost: lost the connection to the Dask scheduler at " + address in err, err[-3000:]
    assert not (tmp_path / "killed.npz").exists()
    killed_at = _saved(ck, "cg")
    assert killed_at >= 5
    with _pool(tmp_path) as (address, _, _):
        resume = [sys.executable, str(SCRIPT), "cg", f"dask@{address}", str(ck)]
        out = _run([*resume, str(tmp_path / "resumed.npz"), "0"])
    assert json.loads(out.strip().splitlines()[-1])["resumed_from"] == killed_at
    _run([sys.executable, str(SCRIPT), "cg", "dask", "-", str(tmp_path / "whole.npz"), "0"])
    resumed, whole = np.load(tmp_path / "resumed.npz"), np.load(tmp_path / "whole.npz")
    for name in whole.files:  # worker processes or in-process workers: the same bits
        assert np.array_equal(resumed[name], whole[name]), name
