"""Cores this process may use: its affinity mask, shared out among the MPI ranks that a
launcher started on the same node without binding them.

Why: ``mpiexec -n 2`` on a two-core machine starts two ranks that each see both cores. Each
rank's numpy BLAS (OpenBLAS starts a thread per core for a dot product of more than 10 000
elements) and each parallelized leaf would then run two threads, four on two cores: a CG
iteration on a 300 x 300 grid took 2.7-3.1 ms on two ranks against 1.46 ms with
``OMP_NUM_THREADS=1``. The launchers say how many ranks share the node in the environment
(MPICH's and Intel's Hydra ``MPI_LOCALNRANKS``, Open MPI's ``OMPI_COMM_WORLD_LOCAL_SIZE``,
MVAPICH's ``MV2_COMM_WORLD_LOCAL_SIZE``, Slurm's ``SLURM_STEP_TASKS_PER_NODE`` with
``SLURM_NODEID``), which needs no collective call and no ``mpi4py``. A rank the launcher
bound to fewer cores than the machine has keeps its own mask: the launcher already shared
the cores out.
"""

from __future__ import annotations

import os
import re

#: environment variables, in order, a launcher sets to the number of ranks on this node
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")


def _slurm_local() -> int:
    """Ranks of this Slurm step on this node (``SLURM_STEP_TASKS_PER_NODE``: ``"2(x3),1"``
    lists the nodes in order; ``SLURM_NODEID`` picks this node's), 1 when not given."""
    spec = os.environ.get("SLURM_STEP_TASKS_PER_NODE", "")
    node = os.environ.get("SLURM_NODEID", "")
    if not spec or not node.isdigit():
        return 1
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m is None:
            return 1
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    i = int(node)
    return counts[i] if i < len(counts) else 1


def local_ranks() -> int:
    """MPI ranks the launcher started on this node (1 outside a launcher)."""
    for var in LOCAL_SIZE_VARS:
        v = os.environ.get(var, "").strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    return max(1, _slurm_local())


def affinity() -> int:
    """Cores this process's affinity mask allows (``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cores() -> int:
    """Cores this process may run threads on: its affinity mask, divided among the node's
    ranks where the launcher left every rank the whole machine (at least one)."""
    mine = affinity()
    machine = os.cpu_count() or mine
    ranks = local_ranks()
    if ranks > 1 and mine >= machine:
        return max(1, mine // ranks)
    return mine
