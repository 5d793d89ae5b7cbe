"""The MPI runtime: SPMD execution of a plan, one MPI rank per processor.

Every rank runs the same script, so every rank compiles the same kernel; rank ``p`` builds
and carries out its own program, ``kernel.program(p)`` (its instructions and the messages it
sends or receives, never the other ranks' programs), and holds only its own blocks. It mirrors
:mod:`distal.runtime.local` (the oracle) step for step, with real transfers:

* every message of ``plan.messages`` is one MPI point-to-point transfer of a numpy buffer
  (``Isend``/``Irecv``, no pickling); a non-contiguous box is described by an MPI subarray
  datatype, so blocks are sent from and received into place without copies;
* a message's tag is its sequence number among the plan's messages between the same two
  ranks (the plan orders messages by step, kind, source, destination), so tags never collide;
* the fetches of step ``s+1`` (receives posted, owners' sends issued) start before step
  ``s`` computes: communication overlaps computation, as the memory model assumes;
* partial sums go to their reducers at ``Flush``; the reducers' receives are posted when the
  step starts; finished blocks go to the other replicas after the last step;
* measured per-rank ``Stats`` use the plan's memory model on the real buffers and are
  all-gathered, so every rank's ``Result.stats`` is the full ``Stats``.

Failures never hang the job: every wait polls its requests with ``Test`` and, in between,
the *error channels* (private duplicate communicators, probed with ``Iprobe``). Every run
starts with all ranks agreeing that each passed its checks (options, size, inputs, same
kernel): a rank whose inputs are wrong raises ``InputError`` and the others a
:class:`PeerFailure` naming it, together. A rank whose execution raises sends its error text
to every other rank and raises :class:`~distal.errors.RuntimeFailure` with its own number;
the others raise a ``RuntimeFailure`` naming that rank at their next poll. Importing this
package installs an exception hook and an exit handler (see :func:`.channel.end_job`): an
uncaught exception on any rank, or a rank ending its script after a failure while others
did not catch theirs, ends the whole job with ``MPI_Abort`` once every rank has printed its
report (or after a few seconds), so the job never hangs. A rank that never reaches its first
run (it raised before it, or is stuck) is noticed by a join deadline (``DISTAL_MPI_JOIN``,
60 s): the waiting ranks raise :class:`~.channel.JoinTimeout` and the job is aborted.

The package is split by what each part does: :mod:`.channel` (communicators, the error
channel, ending the job), :mod:`.rank` (one rank's store, transfers and steps) and
:mod:`.entry` (``run``: checks, the collective result and stats). It is the only place
that imports ``mpi4py``.
"""

from __future__ import annotations

from distal.kernels import blas as _blas
from distal.kernels.cores import cores as _cores
from distal.runtime.mpi.channel import (
    JoinTimeout,
    PeerFailure,
    end_job,
    install_excepthook,
    start,
)
from distal.runtime.mpi.entry import GATHER_MODES, MPISizeError, run, world

start()

#: what importing the runtime did to numpy's BLAS threads: ranks that a launcher started on
#: one node without binding them each take their share of its cores, not all of them
BLAS_THREADS = _blas.share_threads(_cores())

__all__ = [
    "BLAS_THREADS",
    "GATHER_MODES",
    "JoinTimeout",
    "MPISizeError",
    "PeerFailure",
    "end_job",
    "install_excepthook",
    "run",
    "world",
]
