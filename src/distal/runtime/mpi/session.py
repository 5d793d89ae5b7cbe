"""Collectives the session layer needs under MPI (``distal.session`` imports this lazily).

Every wait is polled through the run's :class:`~distal.runtime.mpi.channel.Channel`, so a
rank that fails while the others gather raises there instead of leaving them waiting.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from mpi4py import MPI

from distal.errors import RuntimeFailure
from distal.runtime.mpi.channel import channel


def _chan(comm: Any) -> Any:
    chan = channel(MPI.COMM_WORLD if comm is None else comm)
    if chan.broken is not None:
        raise RuntimeFailure(
            f"an earlier run on this communicator failed ({chan.broken}); end the job",
            processor=chan.rank,
        )
    return chan


def rank_size(comm: Any = None) -> tuple[int, int]:
    """``(rank, size)`` of ``comm`` (default ``COMM_WORLD``)."""
    comm = MPI.COMM_WORLD if comm is None else comm
    return comm.Get_rank(), comm.Get_size()


def allgather_objects(obj: Any, comm: Any = None) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    chan = _chan(comm)
    payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    counts = [int(x) for x in chan.allgather(np.array([payload.size], np.float64))[:, 0]]
    displs = [sum(counts[:r]) for r in range(len(counts))]
    out = np.empty(max(sum(counts), 1), np.uint8)
    send = payload if payload.size else np.zeros(1, np.uint8)
    req = chan.data.Iallgatherv([send, payload.size, MPI.BYTE], [out, (counts, displs), MPI.BYTE])
    chan.wait([req], keep=(send, out))
    return [pickle.loads(out[d : d + c].tobytes()) for d, c in zip(displs, counts, strict=True)]


def allgather_floats(row: np.ndarray, comm: Any = None) -> np.ndarray:
    """Every rank's float64 ``row`` (the same length on every rank), stacked in rank order:
    one polled collective, where :func:`allgather_objects` needs two and a pickle."""
    return _chan(comm).allgather(row)


def barrier(comm: Any = None) -> None:
    """A polled barrier."""
    _chan(comm).barrier()


__all__ = ["allgather_floats", "allgather_objects", "barrier", "rank_size"]
