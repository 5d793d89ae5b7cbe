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


def alltoall_objects(sends: list[Any], comm: Any = None) -> list[Any]:
    """Every rank's ``sends[r]`` (picklable) delivered to rank ``r``: the list of what each
    rank sent this one, in rank order (polled non-blocking all-to-alls of the sizes, then of
    the bytes)."""
    chan = _chan(comm)
    payloads = [pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL) for s in sends]
    counts = np.array([len(p) for p in payloads], np.int64)
    theirs = np.empty_like(counts)
    req = chan.data.Ialltoall([counts, MPI.INT64_T], [theirs, MPI.INT64_T])
    chan.wait([req], keep=(counts, theirs))
    sdispl = [0, *np.cumsum(counts)[:-1].tolist()]
    rdispl = [0, *np.cumsum(theirs)[:-1].tolist()]
    send = np.frombuffer(b"".join(payloads) or b"\0", np.uint8)
    recv = np.empty(max(int(theirs.sum()), 1), np.uint8)
    req = chan.data.Ialltoallv(
        [send, (counts.tolist(), sdispl), MPI.BYTE], [recv, (theirs.tolist(), rdispl), MPI.BYTE]
    )
    chan.wait([req], keep=(send, recv))
    return [
        pickle.loads(recv[d : d + c].tobytes()) if c else []
        for d, c in zip(rdispl, theirs.tolist(), strict=True)
    ]


def allgather_floats(row: np.ndarray, comm: Any = None) -> np.ndarray:
    """Every rank's float64 ``row`` (the same length on every rank), stacked in rank order:
    one polled collective, where :func:`allgather_objects` needs two and a pickle."""
    return _chan(comm).allgather(row)


def barrier(comm: Any = None) -> None:
    """A polled barrier."""
    _chan(comm).barrier()


__all__ = ["allgather_floats", "allgather_objects", "alltoall_objects", "barrier", "rank_size"]
