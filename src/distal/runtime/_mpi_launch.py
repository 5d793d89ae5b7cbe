"""``python -m distal.runtime._mpi_launch SCRIPT [ARGS]`` (or ``-m MODULE [ARGS]``): what
``distal run`` starts per rank.

It imports the MPI runtime (which installs its exception hook and exit handler) before the
user's script runs, so an exception on any rank -- inside a kernel run or anywhere else in
the script -- ends the whole job instead of leaving the other ranks waiting; then it runs the
script as ``__main__``. A script that ends with ``sys.exit(code)``, ``code`` non-zero, on one
rank ends the job the same way (a plain ``mpiexec -n P python SCRIPT`` cannot see that code).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m distal.runtime._mpi_launch SCRIPT [ARGS...]")
    try:
        from distal.runtime.mpi import end_job, install_excepthook
    except ModuleNotFoundError as e:
        sys.exit(f"distal run needs {e.name!r}: pip install 'distal[mpi]'")
    install_excepthook()
    module = argv[1] if argv[0] == "-m" and len(argv) > 1 else None
    try:
        if module is not None:  # python -m MODULE ARGS
            sys.argv = [module, *argv[2:]]
            sys.path.insert(0, "")
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script = argv[0]
            sys.argv = list(argv)
            sys.path.insert(0, str(Path(script).resolve().parent))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            if not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
            end_job(True, f"SystemExit: {e.code}")
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
