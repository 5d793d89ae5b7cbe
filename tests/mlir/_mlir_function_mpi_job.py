"""Runs on every rank under ``mpiexec -n 2``; driven by ``tests/mlir/test_graph_import.py``.

An imported MLIR function (``argv[1]``: its text; ``argv[2]``: an ``.npz`` of its
arguments and the producer's result) run on the MPI runtime: rank 0 prints the largest
relative difference from the producer's result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import distal as dl

text = Path(sys.argv[1]).read_text()
with np.load(sys.argv[2]) as z:
    want = z["want"]
    args = [z[f"arg{k}"] for k in range(len(z.files) - 1)]
sess = dl.Session("mpi")
got = dl.mlir_function(text)(*args, session=sess).get()
if MPI.COMM_WORLD.rank == 0:
    err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-300)))
    print(json.dumps({"rel_err": err, "nprocs": sess.machine.size}), flush=True)
