"""An arrays loop SIGKILLed in the middle resumes after its last saved iteration and ends
bit-identical to an uninterrupted run (local, and on 4 MPI ranks)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "session"))

from test_loops import killed_and_resumed  # noqa: E402

from mpi_jobs import require_mpi  # noqa: E402

SCRIPT = HERE / "_loop_script.py"


def test_killed_arrays_loop_resumes_exactly_local(tmp_path: Path) -> None:
    killed_and_resumed([sys.executable], tmp_path, "local", script=SCRIPT)
    # and the loop is the numpy one
    rng = np.random.default_rng(7)
    a, b, x = rng.random((12, 12)), rng.random((12, 12)), np.eye(12)
    for _ in range(8):
        x = 0.05 * (a @ x).T + b
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["X"], x, rtol=1e-12)


@pytest.mark.mpi
def test_killed_arrays_loop_resumes_exactly_mpi(tmp_path: Path) -> None:
    killed_and_resumed([require_mpi(), "-n", "4", sys.executable], tmp_path, "mpi", script=SCRIPT)
