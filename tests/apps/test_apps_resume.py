"""A checkpointed application killed with SIGKILL mid-run and started again resumes from
its last saved iteration and ends exactly equal to a run that was never killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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
