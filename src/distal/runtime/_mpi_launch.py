"""``python -m distal.runtime._mpi_launch SCRIPT [ARGS]``: what ``distal run`` starts per rank.

It installs the MPI runtime's exception hook before the user's script runs, so an exception
on any rank -- inside a kernel run or anywhere else in the script -- ends the whole job
instead of leaving the other ranks waiting; then it runs the script as ``__main__``.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m distal.runtime._mpi_launch SCRIPT [ARGS...]")
    try:
        from distal.runtime.mpi import install_excepthook
    except ModuleNotFoundError as e:
        sys.exit(f"distal run needs {e.name!r}: pip install 'distal[mpi]'")
    install_excepthook()
    script = argv[0]
    sys.argv = list(argv)
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
