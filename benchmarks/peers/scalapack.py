"""ScaLAPACK PDGEMM (Debian's libscalapack-mpich-dev) on a 2 x 2 process grid.

The PyPI ``mpich`` wheel (distal's MPI runtime) and Debian's MPICH are two separate MPI
installations; rather than mixing them in one process through ctypes, PDGEMM runs as a
small C program (``pdgemm.c``) compiled with Debian's ``mpicc`` and launched with Debian's
``mpiexec``, 1 BLAS thread per rank (Debian's OpenBLAS when ``libopenblas0`` is installed,
else reference BLAS: reported).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MPICC, MPIEXEC = "/usr/bin/mpicc.mpich", "/usr/bin/mpiexec.mpich"


def unavailable() -> str | None:
    """Why PDGEMM can't run here (None when it can)."""
    if not Path(MPICC).exists() or not Path(MPIEXEC).exists():
        return "Debian MPICH not installed (apt-get install libscalapack-mpich-dev)"
    if not list(Path("/usr/lib").rglob("libscalapack-mpich.so*")):
        return "libscalapack-mpich not installed (apt-get install libscalapack-mpich-dev)"
    return None


def blas_name(binary: str) -> str:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return "Debian OpenBLAS" if "openblas" in out else "reference BLAS (slow)"


def run(n: int, repeat: int, env: dict[str, str], nb: int = 256) -> dict[str, object]:
    """Compile (cached in a temp dir) and run; the slowest rank's median time."""
    build = Path(tempfile.gettempdir()) / "distal-bench-pdgemm"
    src = HERE / "pdgemm.c"
    if not build.exists() or build.stat().st_mtime < src.stat().st_mtime:
        cmd = [MPICC, "-O2", "-o", str(build), str(src), "-lscalapack-mpich", "-lm"]
        subprocess.run(cmd, check=True, capture_output=True)
    env = dict(env, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PMI_FD", None)
    cmd = [MPIEXEC, "-n", "4", str(build), str(n), str(nb), str(repeat)]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=1800)
    line = res.stdout.strip().splitlines()[-1]
    data = json.loads(line)
    data["seconds"] = statistics.median(data["times"])
    data["blas"] = blas_name(str(build))
    return data


if __name__ == "__main__":
    print(run(1024, 2, dict(os.environ)), shutil.which("mpiexec"))
