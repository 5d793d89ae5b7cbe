"""A plain user script under a bare ``mpiexec -n 4 python _import_hook_script.py RANK``:
it imports only ``distal`` (MPI is not started by the script), and rank ``RANK`` raises
right after, before its first run; the other ranks go on to run a kernel on the MPI
runtime. Driven by ``test_mpi_import_hook.py``."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

import distal as dl  # noqa: E402

RANK = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
BAD = int(sys.argv[1])

if RANK == BAD:
    raise ValueError(f"rank {RANK} fails before its first run")

from _mpi_cases import gemm  # noqa: E402

kernel, inputs, expected = gemm((2, 2), 32, "summa")
t0 = time.monotonic()
try:
    kernel.run(inputs, runtime="mpi")
except dl.DistalError as e:
    print(json.dumps({"rank": RANK, "error": type(e).__name__, "text": str(e)[:200]}), flush=True)
    print(json.dumps({"rank": RANK, "seconds": time.monotonic() - t0}), flush=True)
    raise
print(json.dumps({"rank": RANK, "ran": True}), flush=True)
