"""The donor's limits on a volunteer's compute process, and the process itself.

``distal volunteer FILE --cpus N --memory GB`` runs every unit in a child process
(:mod:`.child`) started with, before it runs any Python:

- an address-space limit of ``GB`` (``RLIMIT_AS``): an allocation beyond it fails in the
  child (a ``MemoryError``, reported as the unit's failure), never on the donor's machine;
- a CPU affinity mask of ``N`` of the cores this process may use, and BLAS / OpenMP /
  numba thread counts of ``N``;
- a lower scheduling priority (``nice`` 10 by default), so the donor's own work comes first;
- ``PR_SET_PDEATHSIG``: it dies with the volunteer.

The main process talks to it through :class:`ChildProcess` (asyncio pipes, one request
at a time) and restarts it when it dies (an out-of-memory kill, a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distal.errors import InputError
from distal.runtime.pool.child import HEADER, MAX_HEADER
from distal.runtime.pool.wire import pack, unpack

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """What the donor allows: ``cpus`` (cores), ``memory`` (bytes of address space for the
    compute process), ``nice`` (scheduling priority, 0-19)."""

    cpus: int
    memory: int | None
    nice: int = 10

    def __post_init__(self) -> None:
        if self.cpus < 1:
            raise InputError(f"--cpus must be at least 1, got {self.cpus}")
        if self.memory is not None and self.memory < 256 << 20:
            raise InputError("--memory must be at least 0.25 GB (the compute process needs it)")
        if not 0 <= self.nice <= 19:
            raise InputError(f"--nice must be in 0..19, got {self.nice}")

    def cores(self) -> list[int]:
        """The cores the child may run on: the first ``cpus`` of this process's own."""
        try:
            mine = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            mine = list(range(os.cpu_count() or 1))
        return mine[: self.cpus]


def _preexec(limits: Limits, cores: list[int]) -> Any:
    def apply() -> None:  # pragma: no cover - runs in the child before exec
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if limits.memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cores)
        with contextlib.suppress(OSError):
            os.nice(limits.nice)

    return apply


def child_env(limits: Limits) -> dict[str, str]:
    """The child's environment: this one's, BLAS threads set to the cores it gets, and the
    distal package this process runs importable by absolute path."""
    src = str(Path(__file__).resolve().parents[3])  # the directory holding the distal package
    env = dict(os.environ)
    path = [src, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(path)
    for v in THREAD_VARS:
        env[v] = str(limits.cpus)
    return env


class ChildDied(Exception):
    """The compute process ended (killed over its limit, crashed) during a request."""


class ChildProcess:
    """The compute process and its pipe protocol (see :mod:`.child`), over block directory
    ``root``."""

    def __init__(self, limits: Limits, root: Path) -> None:
        self.limits, self.root = limits, root
        self.proc: asyncio.subprocess.Process | None = None
        self.lock = asyncio.Lock()
        self.starts = 0

    async def start(self) -> None:
        cores = self.limits.cores()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "distal.runtime.pool.child", str(self.root),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=child_env(self.limits), preexec_fn=_preexec(self.limits, cores),
        )  # fmt: skip
        self.starts += 1

    async def ensure(self) -> bool:
        """Start the process if it is not running; True when it was (re)started."""
        if self.proc is None or self.proc.returncode is not None:
            await self.start()
            return True
        return False

    async def request(self, head: dict[str, Any]) -> dict[str, Any]:
        """Send one request and read the answer."""
        async with self.lock:
            proc = self.proc
            if proc is None or proc.stdin is None or proc.stdout is None:
                raise ChildDied("the compute process is not running")
            body = pack(head)
            try:
                proc.stdin.write(HEADER.pack(len(body)) + body)
                await proc.stdin.drain()
                (n,) = HEADER.unpack(await proc.stdout.readexactly(HEADER.size))
                answer = unpack(await proc.stdout.readexactly(n), MAX_HEADER)
            except (BrokenPipeError, ConnectionResetError, asyncio.IncompleteReadError) as e:
                await self._reap()
                raise ChildDied(f"the compute process ended ({type(e).__name__})") from None
            if not isinstance(answer, dict):
                raise ChildDied("the compute process answered nonsense")
            return answer

    async def _reap(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.proc.wait(), 5)

    async def kill(self) -> None:
        """Stop the process at once (a unit given up; the volunteer stopping)."""
        await self._reap()
        self.proc = None

    async def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            await asyncio.wait_for(self.proc.wait(), 5)
        await self.kill()


__all__ = ["ChildDied", "ChildProcess", "Limits", "child_env"]
