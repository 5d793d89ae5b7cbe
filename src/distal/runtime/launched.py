"""Under an MPI launcher, ``import distal`` installs the MPI runtime's failure hook.

The MPI runtime ends the whole job when a rank's script raises (an exception hook that
tells the other ranks, then ``MPI_Abort``; :mod:`distal.runtime.mpi.channel`), but only
from the moment it is imported: under ``distal run`` before the script starts, under a
plain ``mpiexec -n P python script.py`` at the first ``kernel.run(..., runtime="mpi")``. A
rank that raised between ``import distal`` and that first run told nobody, and the others
waited out the join deadline (``DISTAL_MPI_JOIN``, 60 s) in their first run.

So ``import distal`` imports the MPI runtime itself when this process was started by an
MPI launcher for a job of more than one rank: Hydra (MPICH's ``mpiexec``: ``PMI_RANK``,
``PMI_SIZE``, ``MPI_LOCALNRANKS``), Open MPI (``OMPI_COMM_WORLD_RANK``,
``OMPI_COMM_WORLD_SIZE``) and Slurm's PMI / PMIx (``PMI_RANK``, ``PMIX_RANK``), with
mpi4py installed. That starts MPI (every rank of such a job does), installs the hook and
the exit handler, and a rank that raises before its first run ends the job within the
hook's grace (``DISTAL_MPI_GRACE``, 5 s), the others' first run raising ``PeerFailure``
naming it.

Not in a process that a hooked rank started (it inherits the launcher's variables but is
no rank: a Dask worker, a pool volunteer): the rank marks the environment with its pid
(``DISTAL_MPI_HOOKED``). ``DISTAL_MPI_HOOK=0`` turns it off (the runtime then starts at
the first MPI run, as before).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

#: the launchers' variables naming this process's rank, and the job's size
RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")
#: the variable a hooked rank sets to its pid, so that its children are not hooked
MARK = "DISTAL_MPI_HOOKED"


def launched_rank(environ: Mapping[str, str] | None = None) -> bool:
    """Whether an MPI launcher started this process as a rank of a job of several ranks
    (and not a process that such a rank started)."""
    env = os.environ if environ is None else environ
    if env.get("DISTAL_MPI_HOOK", "1").strip() == "0":
        return False
    mark = env.get(MARK)
    if mark and mark != str(os.getpid()):
        return False
    if not any(env.get(v) for v in RANK_VARS) and not env.get("MPI_LOCALNRANKS"):
        return False
    size = next((env[v] for v in SIZE_VARS if env.get(v)), "")
    return not (size.isdigit() and int(size) <= 1)


def install_at_import() -> bool:
    """Import the MPI runtime (its failure hook) when :func:`launched_rank`; whether it did.
    Without mpi4py, or where importing it fails, nothing happens here: the first MPI run
    reports that as it always does."""
    if not launched_rank():
        return False
    try:
        if importlib.util.find_spec("mpi4py") is None:
            return False
    except (ImportError, ValueError, AttributeError):  # (a module entry that is not one)
        return False
    os.environ[MARK] = str(os.getpid())
    try:
        import distal.runtime.mpi  # noqa: F401  (starts MPI, installs the hook)
    except Exception:  # (a broken MPI install: the first MPI run says what is wrong)
        return False
    return True


__all__ = ["install_at_import", "launched_rank"]
