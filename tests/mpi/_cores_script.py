"""Each rank prints, as one JSON line, what importing the MPI runtime did to numpy's BLAS
threads (``distal.runtime.mpi.BLAS_THREADS``), the count after it, and the cores
``distal.kernels.cores`` gives this rank (:mod:`tests.mpi.test_mpi_cores`)."""

from __future__ import annotations

import json
import os

from mpi4py import MPI

import distal.runtime.mpi as dmpi
from distal.kernels import blas, cores

print(
    json.dumps(
        {
            "rank": MPI.COMM_WORLD.Get_rank(),
            "note": dmpi.BLAS_THREADS,
            "threads": blas.threads(),
            "cores": cores.cores(),
            "local": cores.local_ranks(),
            "affinity": len(os.sched_getaffinity(0)),
            "machine": os.cpu_count(),
            "bound": blas.available(),
        }
    ),
    flush=True,
)
