"""Relays forward routed pieces while they compute.

In a routed plan (``plan/engine.py``) a relay passes pieces of the next step's
fetches on to its subtree from its own fetch buffer, as soon as its copy has arrived. Done
by the rank's main thread, that can only happen between computations — when the rank waits
for the next step's fetches — so a tree of depth ``d`` would expose ``d`` store-and-forward
hops per step and a relay busy computing would hold its whole subtree up. A
:class:`Forwarder` thread does it during the computation instead: it tests the relay's own
receives and posts the forwarding sends the moment each copy is complete (the leaf kernels
release the GIL, so the thread runs while BLAS does).

It needs ``MPI_THREAD_MULTIPLE`` (the main thread keeps making MPI calls meanwhile);
without it :func:`threads_ok` is False, the thread is never started, and :meth:`finish`
does the same forwarding in the rank's wait for the fetches. The thread never touches the
error channel: the main thread notices failures, then stops it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from mpi4py import MPI

Send = tuple[list[Any], int, int]  # (MPI buffer spec, destination rank, tag)


def threads_ok() -> bool:
    """Whether MPI calls may be made from a second thread."""
    try:
        return MPI.Query_thread() >= MPI.THREAD_MULTIPLE
    except Exception:  # pragma: no cover - not initialised / odd builds
        return False


class Forwarder(threading.Thread):
    """Posts each relayed piece's sends once the receive bringing it here completes.

    ``todo``: ``(receive request, sends)`` pairs; the send requests it posts are in
    :attr:`sends` after :meth:`finish`.
    """

    def __init__(self, comm: Any, todo: Sequence[tuple[Any, list[Send]]]) -> None:
        super().__init__(name="distal-mpi-relay", daemon=True)
        self.comm = comm
        self.todo = list(todo)
        self.sends: list[Any] = []
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._forward(None)
        except BaseException as e:  # handed to the main thread by finish()
            self.error = e

    def _forward(self, check: Any) -> None:
        """Post each piece's sends as its receive completes, until all are posted."""
        spins = 0
        while self.todo and not self.halt.is_set():
            left = []
            for req, sends in self.todo:
                if req.Test():
                    self.sends += [self.comm.Isend(spec, dest=d, tag=t) for spec, d, t in sends]
                else:
                    left.append((req, sends))
            self.todo = left
            if self.todo:
                if check is not None:
                    check()
                spins += 1
                if spins > 50:
                    time.sleep(min(1e-3, 2e-6 * spins))

    def finish(self, check: Any) -> list[Any]:
        """Every forward posted (calling ``check`` meanwhile: a peer's failure stops the
        thread and propagates); the send requests. Forwards here when no thread was started."""
        if self.ident is None:  # not started: no MPI_THREAD_MULTIPLE
            self._forward(check)
            return self.sends
        try:
            while self.is_alive():
                check()
                self.join(timeout=2e-3)
        except BaseException:
            self.stop()
            raise
        if self.error is not None:
            raise self.error
        return self.sends

    def stop(self) -> None:
        """Abandon what is left (after a failure) and wait for the thread to end."""
        self.halt.set()
        if self.ident is not None:
            self.join(timeout=5.0)


__all__ = ["Forwarder", "Send", "threads_ok"]
