"""Sessions on the MPI runtime under a real ``mpiexec -n 4`` (skipped without MPI, except
under CI, as in tests/mpi)."""

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
from test_loops import ENV, killed_and_resumed

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.mpi


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


def test_chain_and_redistribution_on_four_ranks() -> None:
    cmd = [mpiexec(), "-n", "4", sys.executable, str(HERE / "_mpi_chain.py")]
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
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"hung\n{out}\n{err}")
    assert proc.returncode == 0, f"{out}\n{err}"
    cases = {json.loads(m)["case"] for m in re.findall(r"\{[^{}]*\}", out)}
    assert {"agreeing chain", "xy -> x*", "ij -> ji n=7", "None -> ij n=6"} <= cases
    assert len(cases) == 2 + 2 * 8, cases


def test_killed_loop_resumes_exactly_mpi(tmp_path: Path) -> None:
    killed_and_resumed([mpiexec(), "-n", "4", sys.executable], tmp_path, "mpi")
