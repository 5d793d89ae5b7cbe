"""Runs on every rank under ``mpiexec -n 4``; driven by ``test_executable.py``.

Rank 0 alone lowers each case of ``exe_cases.CASES`` and serializes its executable; the
bytes are broadcast, and every rank reads them back and runs them on the MPI runtime: the
other ranks never lower a plan (they build the same seeded inputs only). Each rank checks
its value against numpy's / scipy's and the measured stats against the executable's
prediction, and prints one JSON line per case (``{"case", "rank", "ok"}``, with ``"error"``
when a check failed), then ``{"done"}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exe_cases import CASES, close
from mpi4py import MPI

import distal as dl

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

for name, build in CASES.items():
    line: dict = {"case": name, "rank": rank}
    try:
        case = build()
        if rank == 0:
            data = np.frombuffer(case.planned().executable().dumps(), np.uint8)
            size = np.array([data.size], np.int64)
        else:
            size = np.zeros(1, np.int64)
        comm.Bcast(size, root=0)
        if rank != 0:
            data = np.empty(int(size[0]), np.uint8)
        comm.Bcast(data, root=0)
        exe = dl.Executable.loads(data.tobytes())
        res = exe.run(case.inputs, runtime="mpi")
        assert close(res.value, case.reference), "value"
        assert res.stats == exe.stats(), ("stats", res.stats, exe.stats())
        line["ok"] = True
    except Exception as e:  # reported, so the test sees every case
        line |= {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    print(json.dumps(line), flush=True)
print(json.dumps({"done": rank}), flush=True)
