"""Communicators and the error channel: waits that never hang, and ending the job.

Every wait polls its requests with ``Test`` and, in between, an *error channel* (a private
duplicate communicator, probed with ``Iprobe``); a failing rank reports there, and the
others raise :class:`PeerFailure` naming it at their next poll.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from distal.errors import RuntimeFailure

ERR_TAG = 7
TAG_BASE = 16


class PeerFailure(RuntimeFailure):
    """Another rank failed; ``processor`` is that rank, the message carries its error."""


_CHANNELS: dict[int, Channel] = {}
GRAVEYARD: list[Any] = []  # stores of failed runs: peers may still touch their buffers


class Channel:
    """Private duplicates of the user's communicator: one for data, one for errors.

    Waits never block inside MPI: they poll the requests and the error channel, backing off
    to short sleeps so that oversubscribed ranks leave the cores to those computing.
    """

    def __init__(self, comm: Any) -> None:
        self.data = comm.Dup()
        self.err = comm.Dup()
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        ub = self.data.Get_attr(MPI.TAG_UB) or 32767
        self.span = max(1, (int(ub) - TAG_BASE) // 2)
        self.gather_base = TAG_BASE + self.span
        self.deferred: PeerFailure | None = None

    def tag(self, seq: int) -> int:
        """Data tag of the ``seq``-th plan message between one pair of ranks."""
        return TAG_BASE + seq % self.span

    def gather_tag(self, seq: int) -> int:
        return self.gather_base + seq % self.span

    def check(self) -> None:
        """Raise :class:`PeerFailure` if another rank has reported an error."""
        if self.deferred is not None:
            failure, self.deferred = self.deferred, None
            raise failure
        status = MPI.Status()
        if not self.err.Iprobe(source=MPI.ANY_SOURCE, tag=ERR_TAG, status=status):
            return
        src = status.Get_source()
        buf = bytearray(status.Get_count(MPI.BYTE))
        self.err.Recv([buf, MPI.BYTE], source=src, tag=ERR_TAG)
        text = buf.decode("utf-8", "replace")
        raise PeerFailure(f"processor {src} (MPI rank {src}) failed: {text}", processor=src)

    def wait(
        self, reqs: Sequence[Any], keep: tuple[Any, ...] = (), cancel: Sequence[Any] = ()
    ) -> None:
        """Wait for all ``reqs`` while watching the error channel.

        If a peer fails meanwhile, the receives among them (``cancel``) are withdrawn, and
        every request, with the buffers in ``keep``, is kept alive for good: MPI may still
        write into a receive buffer after the wait is abandoned, so freeing it would corrupt
        the heap. Sends and collectives are never cancelled (cancelling a send is deprecated
        and crashes some MPI libraries; a collective cannot be cancelled at all).
        """
        if not reqs:
            return
        spins = 0
        try:
            while not MPI.Request.Testall(list(reqs)):
                try:
                    self.check()
                except PeerFailure as failure:
                    self._settle(reqs, failure)
                    return
                spins += 1
                if spins > 100:
                    time.sleep(min(2e-3, 2e-6 * spins))
        except BaseException:
            for r in cancel:
                try:
                    r.Cancel()
                except Exception:
                    pass
            GRAVEYARD.append((list(reqs), keep))
            raise

    def _settle(self, reqs: Sequence[Any], failure: PeerFailure, grace: float = 1.0) -> None:
        """A peer failed while these requests were pending. It may have failed *after* its
        part in them (a collective completes on each rank at its own time, so a fast rank
        can finish one, go on and fail in the next operation before a slow rank has seen
        the first complete): if they complete within ``grace`` seconds, this operation
        succeeded and the failure is raised by the next wait. Otherwise it is raised now."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if MPI.Request.Testall(list(reqs)):
                self.deferred = failure
                return
            time.sleep(1e-3)
        raise failure

    def barrier(self) -> None:
        """A barrier that still notices failures (non-blocking barrier, polled)."""
        self.wait([self.data.Ibarrier()])

    def allgather(self, row: np.ndarray) -> np.ndarray:
        """All ranks' ``row`` (float64) stacked, via a polled ``Iallgather``."""
        row = np.ascontiguousarray(row, dtype=np.float64)
        out = np.empty((self.size, row.size), np.float64)
        self.wait([self.data.Iallgather([row, MPI.DOUBLE], [out, MPI.DOUBLE])], keep=(row, out))
        return out

    def notify(self, text: str, grace: float = 2.0) -> None:
        """Tell every other rank that this one failed (best effort, bounded time)."""
        buf = bytearray(text.encode("utf-8")[:8000])
        reqs = [
            self.err.Isend([buf, MPI.BYTE], dest=r, tag=ERR_TAG)
            for r in range(self.size)
            if r != self.rank
        ]
        GRAVEYARD.append((reqs, buf))  # a send still in flight must keep its buffer
        deadline = time.monotonic() + grace
        while reqs and not MPI.Request.Testall(reqs) and time.monotonic() < deadline:
            time.sleep(1e-3)


def channel(comm: Any) -> Channel:
    key = comm.py2f()
    if key not in _CHANNELS:
        _CHANNELS[key] = Channel(comm)
    return _CHANNELS[key]


def install_excepthook() -> None:
    """End the whole MPI job when an exception escapes a rank's script.

    Like ``python -m mpi4py``: the traceback is printed, then ``MPI_Abort`` stops every rank
    (a rank that merely learned of another's failure waits a moment first, so the failing
    rank's own report comes out). Errors raised identically on every rank (a wrong number
    of ranks) exit normally instead, so that every rank prints its message.
    """
    if getattr(sys.excepthook, "_distal_mpi", False):
        return
    previous = sys.excepthook

    def hook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
        previous(tp, value, tb)
        if getattr(value, "collective", False) or MPI.COMM_WORLD.Get_size() == 1:
            return
        # let the other ranks print their reports before the abort reaches them
        time.sleep(2.0 if isinstance(value, PeerFailure) else 0.5)
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)

    hook._distal_mpi = True  # type: ignore[attr-defined]
    sys.excepthook = hook


__all__ = [
    "ERR_TAG",
    "GRAVEYARD",
    "TAG_BASE",
    "Channel",
    "PeerFailure",
    "channel",
    "install_excepthook",
]
