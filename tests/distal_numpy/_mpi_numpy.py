"""Runs on every rank under ``mpiexec -n P``; driven by ``test_numpy_runtimes.py``: the
``distal.numpy`` program of ``numpy_program.py`` in an MPI session; every rank prints one
JSON line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from numpy_program import program

import distal as dl
import distal.numpy as dnp


def main() -> None:
    with dl.Session("mpi") as sess:
        err, value = program(dnp)
        print(json.dumps({"rank": sess.rank, "err": err, "value": value}), flush=True)


if __name__ == "__main__":
    main()
