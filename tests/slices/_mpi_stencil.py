"""Runs on every rank under ``mpiexec -n P``; driven by ``test_stencil.py``: the stencil
program of ``_stencil_program.py`` on MPI, one JSON line per rank."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stencil_program import run
from mpi4py import MPI

import distal as dl

sess = dl.Session("mpi", check_stats=True)
out = run(sess)
out.update(
    rank=MPI.COMM_WORLD.Get_rank(), differ=len(sess.stats_differ), checked=sess.stats_checked
)
print(json.dumps(out), flush=True)
