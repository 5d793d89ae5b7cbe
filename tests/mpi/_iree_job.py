"""Runs on every rank under ``mpiexec -n 2``; driven by ``tests/mlir/test_mlir.py``.

SUMMA with IREE leaves on the MPI runtime: rank 0 prints the largest difference from the
default leaves' result and whether the measured stats equal the prediction.
"""

from __future__ import annotations

import json

import numpy as np
from mpi4py import MPI

import distal as dl
from distal import algorithms as al

alg = al.summa(16, machine=dl.Machine(2, 1))
inputs = alg.inputs(3)
kernel = dl.compile(alg.schedule, leaf="iree")
res = kernel.run(inputs, runtime="mpi")
ref = dl.compile(alg.schedule).run(inputs).value
if MPI.COMM_WORLD.rank == 0:
    err = float(np.max(np.abs(res.value - ref) / np.maximum(np.abs(ref), 1e-300)))
    same = res.stats.as_dict() == kernel.stats().as_dict()
    print(json.dumps({"rel_err": err, "same_stats": same}), flush=True)
