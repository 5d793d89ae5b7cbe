"""The suites' cuPyNumeric peer: ``cupynumeric_peer.py`` under the interpreter of the venv
``benchmarks/setup_cupynumeric.sh`` makes (``$DISTAL_CUPYNUMERIC_PYTHON`` names another),
as a subprocess, so a library it cannot load fails that process, not the suite. (This file
is not called ``cupynumeric.py``: the script beside it imports ``cupynumeric``.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VENV_PYTHON = HERE.parent / ".venv-cupynumeric" / "bin" / "python"
SETUP = "sh benchmarks/setup_cupynumeric.sh"


def python() -> Path | None:
    """The interpreter that has cuPyNumeric, or None."""
    given = os.environ.get("DISTAL_CUPYNUMERIC_PYTHON")
    path = Path(given) if given else VENV_PYTHON
    return path if path.exists() else None


def run(n: int, grid: int, repeat: int) -> tuple[dict[str, Any] | None, str | None]:
    """``(timings, None)``, or ``(None, why it did not run)``."""
    py = python()
    if py is None:
        return None, f"not installed ({SETUP} makes its venv, about 3 GB)"
    cmd = [str(py), str(HERE / "cupynumeric_peer.py"), str(n), str(grid), str(repeat)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return None, "it ran past 30 minutes"
    lines = [x for x in res.stdout.splitlines() if x.startswith("{")]
    if not lines:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"it exited with status {res.returncode}: {tail}"
    data = json.loads(lines[-1])
    if "error" in data:
        return None, str(data["error"])
    if not data.get("checked"):
        return None, "its results differ from numpy's at a small size: not timed"
    return data, None
