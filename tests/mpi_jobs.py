"""Launching MPI jobs from the tests: ``mpiexec -n P python SCRIPT`` (or ``distal run``).

Without mpi4py or an ``mpiexec`` a test is skipped with the reason -- except under CI
(``CI`` set), where it fails: CI installs both, so a missing launcher is a broken set-up.
A job that hangs is killed with its whole process group and fails the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

JOB_TIMEOUT = 90.0


def mpiexec_path() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


def require_mpi() -> str:
    """The launcher, or skip (fail under CI) with the reason."""
    reason = None
    try:
        import mpi4py  # noqa: F401
    except ModuleNotFoundError:
        reason = "mpi4py is not installed (pip install 'distal[mpi]')"
    launcher = mpiexec_path()
    if reason is None and launcher is None:
        reason = "no mpiexec found beside the Python interpreter or on PATH"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"MPI tests cannot run in CI: {reason}")
        pytest.skip(reason)
    return launcher  # type: ignore[return-value]


class Job:
    def __init__(self, rc: int, out: str, err: str, seconds: float) -> None:
        self.rc, self.out, self.err, self.seconds = rc, out, err, seconds

    def lines(self) -> list[dict[str, Any]]:
        """The JSON objects in stdout (ranks' lines may interleave, so objects are searched)."""
        out = []
        for m in re.finditer(r"\{\"[^{}]*\}", self.out):
            try:
                out.append(json.loads(m.group(0)))
            except ValueError:
                continue
        return out

    def __repr__(self) -> str:
        head = f"rc={self.rc} after {self.seconds:.1f}s"
        return f"{head}\n--stdout--\n{self.out}\n--stderr--\n{self.err}"


def run_job(
    nprocs: int,
    *args: str,
    via_cli: bool = False,
    timeout: float = JOB_TIMEOUT,
    env: dict[str, str] | None = None,
    script: Path,
) -> Job:
    """Launch the script on ``nprocs`` ranks; kill the whole process group on a time-out."""
    launcher = require_mpi()
    base = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env = {**base, "PYTHONUNBUFFERED": "1", **(env or {})}
    if via_cli:
        cmd = [sys.executable, "-m", "distal", "run", "-n", str(nprocs), "--mpiexec", launcher]
        cmd += [str(script), *args]
    else:
        cmd = [launcher, "-n", str(nprocs), sys.executable, str(script), *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mpiexec -n {nprocs} {' '.join(args)} hung for {timeout}s\n{out}\n{err}")
    return Job(proc.returncode, out, err, time.monotonic() - t0)
