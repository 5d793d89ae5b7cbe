"""dl.apps on the MPI runtime under a real ``mpiexec -n 4`` (skipped without MPI, except
under CI, as in tests/mpi and tests/session)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.mpi
ENV = dict(
    os.environ,
    OMP_NUM_THREADS="1",
    OPENBLAS_NUM_THREADS="1",
    MKL_NUM_THREADS="1",
    PYTHONUNBUFFERED="1",
    DISTAL_PROGRESS="0",
)


def mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    launcher = str(beside) if beside.is_file() else shutil.which("mpiexec")
    reason = None
    try:
        import mpi4py  # noqa: F401
    except ModuleNotFoundError:
        reason = "mpi4py is not installed (pip install 'distal[mpi]')"
    if reason is None and launcher is None:
        reason = "no mpiexec found beside the Python interpreter or on PATH"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"MPI tests cannot run in CI: {reason}")
        pytest.skip(reason)
    return launcher  # type: ignore[return-value]


def test_apps_on_four_ranks() -> None:
    cmd = [mpiexec(), "-n", "4", sys.executable, str(HERE / "_mpi_apps.py")]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=ENV,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"hung\n{out}\n{err}")
    assert proc.returncode == 0, f"{out}\n{err}"
    res = {d["app"]: d for d in map(json.loads, re.findall(r"\{[^{}]*\}", out))}
    assert res["cp_als"]["fit"] >= 0.999
    assert res["cp_als"]["true_fit"] >= 0.999
    assert res["pagerank"]["err"] <= 1e-10
    assert abs(res["pagerank"]["sum"] - 1.0) < 1e-12
    assert res["cg"]["err"] <= 1e-8
