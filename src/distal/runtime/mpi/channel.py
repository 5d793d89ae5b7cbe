"""Communicators, the error channels and ending the job: waits that never hang.

Every wait polls its requests with ``Test`` and, in between, two *error channels*: the run's
own (a private duplicate of its communicator, probed with ``Iprobe``), where a rank whose run
fails reports, and the job's (a private duplicate of ``COMM_WORLD``, made without blocking
when the runtime is imported), where a rank whose script ends with an exception -- inside a
run or not -- reports and every rank that saw a failure says when its script is over. The
others raise :class:`PeerFailure` naming the failed rank at their next poll.

:func:`start` (run when :mod:`distal.runtime.mpi` is imported) installs the exception hook
and the exit handler that end the whole job after a failure (see :func:`end_job`).

Neither channel exists before every rank has come to distal: a rank whose script fails
before its first run under a plain ``mpiexec`` (no hook installed yet) tells nobody. So the
two places where ranks first wait for each other have a *join deadline* (``DISTAL_MPI_JOIN``
seconds, default 60): MPI's start-up when this module starts MPI (:func:`_start_mpi`: a
watchdog process, since ``MPI_Init`` holds the GIL) and the first collective on each
communicator (:class:`Channel`'s duplicates: :class:`JoinTimeout`).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from distal.errors import RuntimeFailure

ERR_TAG = 7  # an error's text (run channel, job channel)
END_TAG = 8  # job channel: this rank's script is over (one byte: 1 with an exception, else 0)
TAG_BASE = 16


def _seconds(name: str, default: float) -> float:
    """A non-negative number of seconds from the environment (``inf``: no limit)."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return default if math.isnan(value) else max(0.0, value)


# how long a rank whose script is over waits for the others' scripts to be over too
EXIT_GRACE = _seconds("DISTAL_MPI_GRACE", 5.0)
# how long a rank waits for every other rank to come to distal's first collective step (MPI's
# start-up, a communicator's first use); generous, since a rank may legitimately arrive late
JOIN_TIMEOUT = _seconds("DISTAL_MPI_JOIN", 60.0)
# how long a rank ending the job waits between printing why and calling MPI_Abort
ABORT_PAUSE = 0.2
#: a wait first polls this many times back to back, then yields its core for up to
#: ``YIELD_S`` seconds (``sched_yield``: back at once when no other process wants the core),
#: then sleeps in short naps. Yielding before sleeping keeps an oversubscribed job's
#: collectives from a ping-pong of naps (4 ranks on 2 cores: a polled allgather took 510 us
#: with naps after the spins, 45 us yielding first); a rank alone on its core loses nothing
SPINS = 32
YIELD_S = 1e-3
# how long a rank that sees another's script end waits for that rank's run error, sent before
END_SETTLE = 0.5

_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")

# The watchdog of MPI's start-up, run as ``python -c``: argv = the read end of a pipe whose
# write end the rank closes once MPI has started (or by ending), the deadline, the grace, the
# rank's pid, the text to print.
_WATCHDOG = r"""
import os, select, signal, sys
fd, limit, grace, pid = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
text = sys.argv[5]
if select.select([fd], [], [], limit)[0]:
    sys.exit(0)
os.write(2, text.encode())
select.select([], [], [], grace)
for sig in (signal.SIGTERM, signal.SIGKILL):  # KILL: a Python SIGTERM handler cannot run
    try:
        os.kill(pid, sig)
    except OSError:
        break
    if select.select([fd], [], [], 2.0)[0]:  # the rank is gone: its end of the pipe closed
        break
"""
_WATCHDOGS: list[Any] = []  # kept so that they are reaped, not left as zombies


def _launched_rank() -> tuple[str, int] | None:
    """This process's rank (as text) and the job's size from the launcher's environment,
    or None when no launcher started it (a singleton ``MPI_Init`` waits for nobody)."""
    rank = next((os.environ[v] for v in _RANK_VARS if os.environ.get(v)), None)
    size = next((os.environ[v] for v in _SIZE_VARS if os.environ.get(v)), "0")
    if rank is None:
        return None
    try:
        return rank, int(size)
    except ValueError:
        return rank, 0


@contextlib.contextmanager
def _start_mpi() -> Iterator[None]:
    """Around ``from mpi4py import MPI`` when that starts MPI: end the job if ``MPI_Init``
    waits more than ``JOIN_TIMEOUT`` seconds for the other ranks.

    A rank whose script raised before its first ``kernel.run(..., runtime="mpi")`` (and
    never imported mpi4py) exits without starting MPI, and MPICH's ``mpiexec`` does not end
    the job for it: the other ranks would wait in ``MPI_Init`` for good. ``MPI_Init`` holds
    the GIL, so no Python thread can watch it: a small child process does, printing the
    reason on this rank's stderr at the deadline and stopping the rank (``SIGTERM``, then
    ``SIGKILL``, after ``EXIT_GRACE`` seconds so that every waiting rank prints its line),
    which makes the launcher end the whole job. Nothing is watched when MPI is already
    started, when no launcher started this process, or with ``DISTAL_MPI_JOIN=inf``; on time
    the rank closes the pipe and the child exits (the rank spends ~10 ms starting it).
    """
    me = _launched_rank()
    if "mpi4py.MPI" in sys.modules or me is None or me[1] == 1 or math.isinf(JOIN_TIMEOUT):
        yield
        return
    text = (
        f"distal: MPI rank {me[0]}: MPI's start-up (at this rank's first kernel.run) has "
        f"waited {JOIN_TIMEOUT:g} s (DISTAL_MPI_JOIN) for the other ranks: a rank may have "
        "failed before its first kernel.run (see its traceback) or be stuck or still "
        "working. Ending the job (`distal run -n P SCRIPT` ends it at once when a rank's "
        "script raises)\n"
    )
    read, write = os.pipe()
    try:
        args = [str(read), repr(JOIN_TIMEOUT), repr(EXIT_GRACE), str(os.getpid()), text]
        _WATCHDOGS.append(
            subprocess.Popen(
                [sys.executable, "-S", "-I", "-c", _WATCHDOG, *args],
                pass_fds=(read,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        )
    except OSError:  # pragma: no cover - cannot start a process: start MPI unwatched
        pass
    finally:
        os.close(read)
    try:
        yield
    finally:
        os.close(write)  # the watchdog sees the pipe end and exits


with _start_mpi():
    from mpi4py import MPI


class PeerFailure(RuntimeFailure):
    """Another rank failed; ``processor`` is that rank, the message carries its error."""


class JoinTimeout(RuntimeFailure):
    """Not every rank of a communicator came to distal's first collective step on it within
    ``JOIN_TIMEOUT`` seconds (``DISTAL_MPI_JOIN``).

    Raised on each rank that waited; ``processor`` is None: MPI cannot say which ranks are
    missing (the duplicate communicators that would carry it need every rank). The
    communicator is not used again, and this rank's script ends the job with ``MPI_Abort``
    however it ends (:func:`end_job`), since the missing ranks may never come.
    """


_CHANNELS: dict[int, Channel] = {}
GRAVEYARD: list[Any] = []  # stores of failed runs: peers may still touch their buffers


def bury(owner: Any, receives: list[Any], pending: list[Any], grace: float = 0.5) -> None:
    """After a failure: cancel ``receives``, give ``pending`` requests ``grace`` seconds to
    settle, and keep ``owner`` (and so every buffer a request may still touch) for good."""
    for r in receives:
        try:
            r.Cancel()
        except Exception:
            pass
    deadline = time.monotonic() + grace
    try:
        while pending and not MPI.Request.Testall(pending) and time.monotonic() < deadline:
            time.sleep(1e-3)
    except Exception:
        pass
    GRAVEYARD.append(owner)


def _note(text: str) -> None:
    """One line on this rank's stderr (an error the user may catch and never print)."""
    try:
        sys.stderr.write(f"distal: MPI rank {MPI.COMM_WORLD.Get_rank()}: {text}\n")
        sys.stderr.flush()
    except Exception:  # pragma: no cover - stderr closed
        pass


class Job:
    """The job's error channel: a private duplicate of ``COMM_WORLD``, plus what this rank
    has learned through it and the failures it took part in.

    The duplicate is made with ``Idup`` (nothing blocks; it is usable once every rank has
    imported the runtime). ``errors``: world rank -> the text of the exception that ended
    its script; ``ended``: world rank -> 1 if its script ended with an exception, 0 if
    normally (only ranks that saw a failure say so); ``seen``: the failures of runs this
    rank took part in (its own or a peer's), each printed once on stderr.
    """

    def __init__(self) -> None:
        world = MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.comm: Any = None
        self.req: Any = None
        self.ready = False
        if self.size > 1 and MPI.Is_initialized() and not MPI.Is_finalized():
            self.comm, self.req = world.Idup()
        self.errors: dict[int, str] = {}
        self.ended: dict[int, int] = {}
        self.seen: list[str] = []
        self.told = False  # this rank's error text was sent
        self.said_end = False  # this rank's end of script was announced
        self.unjoined: str | None = None  # a JoinTimeout this rank raised: end the job

    def get(self, timeout: float = 0.0) -> Any:
        """The duplicate once it is complete (waiting up to ``timeout`` s), else None."""
        if self.ready or self.req is None:
            return self.comm if self.ready else None
        deadline = time.monotonic() + timeout
        while True:
            if self.req.Test():
                self.ready = True
                return self.comm
            if time.monotonic() >= deadline:
                return None
            time.sleep(1e-3)

    def poll(self) -> None:
        """Take in every error and end-of-script message that has arrived."""
        comm = self.get()
        if comm is None:
            return
        status = MPI.Status()
        while True:
            msg = comm.Improbe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            if msg is None:
                return
            src, tag = status.Get_source(), status.Get_tag()
            buf = bytearray(status.Get_count(MPI.BYTE))
            msg.Recv([buf, MPI.BYTE])
            if tag == ERR_TAG:
                self.errors.setdefault(src, buf.decode("utf-8", "replace"))
            elif tag == END_TAG:
                self.ended[src] = max(self.ended.get(src, 0), int(buf[0]) if buf else 1)

    def send(self, tag: int, payload: bytes) -> list[Any]:
        """Post ``payload`` to every other rank (the buffers are kept alive for good)."""
        comm = self.get()
        if comm is None:
            return []
        buf = bytearray(payload)
        reqs = [
            comm.Isend([buf, MPI.BYTE], dest=r, tag=tag) for r in range(self.size) if r != self.rank
        ]
        GRAVEYARD.append((reqs, buf))
        return reqs

    def record(self, text: str) -> None:
        """A run this rank takes part in failed: remember it, and print it once."""
        if text not in self.seen:
            self.seen.append(text)
            _note(text)


JOB: Job | None = None


def job() -> Job:
    global JOB
    if JOB is None:
        JOB = Job()
    return JOB


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # pragma: no cover - closed
            pass


def _world_ranks(comm: Any) -> list[int]:
    """The ``COMM_WORLD`` rank of each rank of ``comm``."""
    size = comm.Get_size()
    if comm == MPI.COMM_WORLD:
        return list(range(size))
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return [int(r) for r in MPI.Group.Translate_ranks(group, list(range(size)), world)]
    finally:
        group.Free()
        world.Free()


class Channel:
    """Private duplicates of the user's communicator: one for data, one for errors.

    Waits never block inside MPI: they poll the requests and the error channels (this one's
    and the job's), then yield the core, then back off to short sleeps, so that
    oversubscribed ranks leave the cores to those computing (``SPINS``, ``YIELD_S``). The
    duplicates are made with ``Idup`` and polled the same way, so a rank that fails before
    its first run cannot leave the others waiting in a ``Dup``.
    ``broken`` is set once a run on it failed: its data communicator may still hold that
    run's messages and collectives, so it is never used again.
    """

    def __init__(self, comm: Any) -> None:
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.members = _world_ranks(comm)
        self.deferred: PeerFailure | None = None
        self.broken: str | None = None
        self.ready = False  # the error duplicate is usable
        self.data, r1 = comm.Idup()
        self.err, r2 = comm.Idup()
        self.wait([r1, r2], join=True)  # the first time these ranks meet: with a deadline
        self.ready = True
        ub = self.data.Get_attr(MPI.TAG_UB) or 32767
        self.span = max(1, (int(ub) - TAG_BASE) // 2)
        self.gather_base = TAG_BASE + self.span

    def tag(self, seq: int) -> int:
        """Data tag of the ``seq``-th plan message between one pair of ranks."""
        return TAG_BASE + seq % self.span

    def gather_tag(self, seq: int) -> int:
        return self.gather_base + seq % self.span

    def name(self, p: int) -> str:
        return f"processor {p} (MPI rank {self.members[p]})"

    def check(self, record: bool = True) -> None:
        """Raise :class:`PeerFailure` if another rank has reported an error, or its script
        has ended (it will never take part in anything again). ``record``: print the
        failure (once; :meth:`wait` does it only if it does not defer it)."""
        if self.deferred is not None:
            failure, self.deferred = self.deferred, None
            if record:
                job().record(str(failure))
            raise failure
        self._run_error(MPI.ANY_SOURCE, record)
        state = job()
        state.poll()
        if not (state.errors or state.ended):
            return
        for p, w in enumerate(self.members):
            if w in state.ended and w not in state.errors:
                # A rank that failed in this run and then ended its script sent its error
                # here before its end on the job channel, but MPI orders messages only within
                # one communicator: give the earlier one a moment to arrive, so the report
                # names the failure rather than the end.
                deadline = time.monotonic() + END_SETTLE
                while True:
                    self._run_error(p, record)
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(1e-3)
            if w in state.errors:
                text = f"{self.name(p)} failed: {state.errors[w]}"
            elif w in state.ended:
                how = "with an exception" if state.ended[w] else "normally"
                text = f"{self.name(p)} has ended its script ({how}) while this rank waits for it"
            else:
                continue
            self.broken = self.broken or text
            if record:
                state.record(text)
            raise PeerFailure(text, processor=p)

    def _run_error(self, source: int, record: bool) -> None:
        """Raise :class:`PeerFailure` if ``source`` (any rank: ``MPI.ANY_SOURCE``) has
        reported an error on this run's channel."""
        status = MPI.Status()
        if not (self.ready and self.err.Iprobe(source=source, tag=ERR_TAG, status=status)):
            return
        src = status.Get_source()
        buf = bytearray(status.Get_count(MPI.BYTE))
        self.err.Recv([buf, MPI.BYTE], source=src, tag=ERR_TAG)
        text = f"{self.name(src)} failed: {buf.decode('utf-8', 'replace')}"
        self.broken = self.broken or text
        if record:
            job().record(text)
        raise PeerFailure(text, processor=src)

    def wait(
        self,
        reqs: Sequence[Any],
        keep: tuple[Any, ...] = (),
        cancel: Sequence[Any] = (),
        join: bool = False,
    ) -> None:
        """Wait for all ``reqs`` while watching the error channel.

        If a peer fails meanwhile, the receives among them (``cancel``) are withdrawn, and
        every request, with the buffers in ``keep``, is kept alive for good: MPI may still
        write into a receive buffer after the wait is abandoned, so freeing it would corrupt
        the heap. Sends and collectives are never cancelled (cancelling a send is deprecated
        and crashes some MPI libraries; a collective cannot be cancelled at all).

        ``join``: these are the first requests every rank of the communicator must take part
        in; a rank that never comes cannot report (no channel exists yet), so after
        ``JOIN_TIMEOUT`` seconds :class:`JoinTimeout` is raised. Ranks that come in time
        pass without any wait of their own.
        """
        if not reqs:
            return
        spins = 0
        deadline = time.monotonic() + JOIN_TIMEOUT if join else math.inf
        since = 0.0  # when the spins ran out
        try:
            while not MPI.Request.Testall(list(reqs)):
                try:
                    self.check(record=False)
                except PeerFailure as failure:
                    self._settle(reqs, failure)
                    return
                spins += 1
                if spins > SPINS:
                    now = time.monotonic()
                    since = since or now
                    if now - since < YIELD_S:
                        os.sched_yield()
                    else:
                        time.sleep(min(1e-4, 2e-6 * spins))
                    if now > deadline:
                        raise JoinTimeout(self._unjoined(), processor=None)
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
        job().record(str(failure))
        raise failure

    def _unjoined(self) -> str:
        """Why :meth:`wait` gave up on the first meeting of this communicator's ranks."""
        where = "the job" if self.members == list(range(job().size)) else "this communicator"
        return (
            f"not every rank of {where} ({self.size} ranks) came to its first distal MPI "
            f"step within {JOIN_TIMEOUT:g} s (DISTAL_MPI_JOIN): a rank may have failed before "
            "its first kernel.run (see its traceback) or be stuck or still working; MPI "
            "cannot say which. Ending the job (`distal run -n P SCRIPT` ends it at once when "
            "a rank's script raises)"
        )

    def barrier(self) -> None:
        """A barrier that still notices failures (non-blocking barrier, polled)."""
        self.wait([self.data.Ibarrier()])

    def allgather(self, row: np.ndarray) -> np.ndarray:
        """All ranks' ``row`` (float64) stacked, via a polled ``Iallgather``."""
        row = np.ascontiguousarray(row, dtype=np.float64)
        out = np.empty((self.size, row.size), np.float64)
        self.wait([self.data.Iallgather([row, MPI.DOUBLE], [out, MPI.DOUBLE])], keep=(row, out))
        return out

    def allgather_bytes(self, payload: bytes, width: int) -> list[bytes]:
        """All ranks' ``payload`` (each at most ``width`` bytes), via a polled ``Iallgather``."""
        row = np.zeros(max(width, 1), np.uint8)
        row[: len(payload)] = np.frombuffer(payload[:width], np.uint8)
        out = np.zeros((self.size, row.size), np.uint8)
        self.wait([self.data.Iallgather([row, MPI.BYTE], [out, MPI.BYTE])], keep=(row, out))
        return [bytes(r) for r in out]

    def notify(self, text: str, grace: float = 2.0) -> None:
        """Tell every other rank that this one failed (best effort, bounded time)."""
        full = f"{self.name(self.rank)} failed: {text}"
        self.broken = self.broken or full
        job().record(full)
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


_UNJOINED: dict[int, str] = {}  # communicators whose ranks never all met: never used again


def channel(comm: Any) -> Channel:
    """The :class:`Channel` of ``comm``, made by the first run on it -- the first time its
    ranks meet in distal, with the join deadline (:class:`JoinTimeout`, printed at once on
    stderr; a later call on the same communicator raises it again without waiting)."""
    key = comm.py2f()
    if key in _UNJOINED:
        raise JoinTimeout(
            f"an earlier run on this communicator timed out waiting for its ranks "
            f"({_UNJOINED[key]}); the MPI runtime does not use it again: end the job",
            processor=None,
        )
    if key not in _CHANNELS:
        try:
            _CHANNELS[key] = Channel(comm)
        except JoinTimeout as e:
            _UNJOINED[key] = str(e)
            state = job()
            state.unjoined = state.unjoined or str(e)
            state.record(str(e))
            raise
    return _CHANNELS[key]


def end_job(failed: bool, text: str = "") -> None:
    """This rank's script is over (``failed``: with an exception, whose ``text`` is given).

    The rank says so on the job channel (with the error's text first if ``failed``), so
    that ranks still waiting for it in a run raise :class:`PeerFailure`. A rank whose
    script failed, or that knows another one's did, then waits at most ``EXIT_GRACE``
    seconds (``$DISTAL_MPI_GRACE``, default 5) until every other rank has said the same --
    so every rank has printed its report -- and ends the whole job with ``MPI_Abort(1)``,
    naming the ranks that failed or never got there. A rank that ends normally, with no
    other rank known to have failed, returns at once: when every rank caught its error the
    job ends normally.
    """
    state = job()
    if state.size == 1 or MPI.Is_finalized():
        return
    _flush()
    comm = state.get(timeout=EXIT_GRACE if failed else 0.5)
    if comm is not None:
        if failed and not state.told:
            state.told = True
            state.send(ERR_TAG, text.encode("utf-8")[:8000])
        if not state.said_end:
            state.said_end = True
            state.send(END_TAG, b"\x01" if failed else b"\x00")
        state.poll()
    clean = not failed and not state.errors and not any(state.ended.values())
    if clean and state.unjoined is None:
        return  # a normal end; no rank is known to have failed for good
    if comm is not None:
        deadline = time.monotonic() + EXIT_GRACE
        spins = 0
        while time.monotonic() < deadline and len(state.ended) < state.size - 1:
            spins += 1
            time.sleep(min(5e-3, 1e-5 * spins))
            state.poll()
    others = [r for r in range(state.size) if r != state.rank]
    missing = [r for r in others if r not in state.ended]
    failing = sorted({r for r in others if state.ended.get(r)} | set(state.errors))
    if missing or not failed:
        why = [f"rank(s) {failing} ended with an exception"] if failing else []
        if comm is None:  # the job's error channel never formed: no rank can tell another
            why.append("not every rank has started distal's MPI runtime")
        elif missing:
            why.append(f"rank(s) {missing} did not end within {EXIT_GRACE:g} s")
        cause = f" after: {state.seen[0]}" if state.seen else ""
        if state.seen and state.seen[0] == state.unjoined:  # printed just before
            cause = f" (the join deadline, {JOIN_TIMEOUT:g} s, has passed)"
        _note(f"ending the MPI job (MPI_Abort): {'; '.join(why)}{cause}")
    _flush()
    # the launcher forwards each rank's stderr from a pipe: on MPI_Abort it ends every rank
    # and may drop what it has not read yet (seen on a loaded machine: the reason above
    # lost), so give it a moment to read this rank's last lines first
    time.sleep(ABORT_PAUSE)
    MPI.COMM_WORLD.Abort(1)
    os._exit(1)  # MPI_Abort may return before the process manager ends this process


def _at_exit() -> None:
    """At the normal end of a script: if this rank saw a failure, or heard of another rank's
    script ending, tell the others this one is over (:func:`end_job`)."""
    if JOB is None or JOB.size == 1 or MPI.Is_finalized():
        return
    JOB.get(timeout=2.0)  # let the duplicate complete: MPI_Finalize warns of a pending one
    JOB.poll()
    if not JOB.seen and not JOB.errors and not JOB.ended:
        return
    if not JOB.seen:  # a peer's script failed, and this rank never heard of it in a run
        for r, text in sorted(JOB.errors.items()):
            JOB.record(f"MPI rank {r} failed: {text}")
    end_job(False)


def install_excepthook() -> None:
    """End the whole MPI job when an exception escapes a rank's script.

    Like ``python -m mpi4py``: the traceback is printed, then the job ends with
    ``MPI_Abort`` -- after every other rank has printed its own report, or after
    ``EXIT_GRACE`` seconds (see :func:`end_job`). The exception's text goes to every other
    rank first, so those waiting for this one in a run raise :class:`PeerFailure` at once.
    """
    start()


def start() -> None:
    """Set up ending the job (done once, when :mod:`distal.runtime.mpi` is imported): the
    job's error channel, the exception hook and the exit handler."""
    job()
    if getattr(sys.excepthook, "_distal_mpi", False):
        return
    previous = sys.excepthook

    def hook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
        if previous is sys.__excepthook__:  # in one write: other ranks' output cannot split it
            try:
                sys.stderr.write("".join(traceback.format_exception(tp, value, tb)))
                sys.stderr.flush()
            except Exception:  # pragma: no cover - stderr closed
                previous(tp, value, tb)
        else:
            previous(tp, value, tb)
        if MPI.Is_finalized() or MPI.COMM_WORLD.Get_size() == 1:
            return
        end_job(True, f"{tp.__name__}: {value}")

    hook._distal_mpi = True  # type: ignore[attr-defined]
    sys.excepthook = hook
    atexit.register(_at_exit)


__all__ = [
    "END_TAG",
    "ERR_TAG",
    "EXIT_GRACE",
    "GRAVEYARD",
    "JOIN_TIMEOUT",
    "TAG_BASE",
    "Channel",
    "Job",
    "JoinTimeout",
    "PeerFailure",
    "bury",
    "channel",
    "end_job",
    "install_excepthook",
    "job",
    "start",
]
