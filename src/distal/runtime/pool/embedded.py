"""Reaching a pool: an existing one (its coordinator credentials), or an embedded one.

``pool=None`` (the default of ``runtime="pool"``) starts, for one machine, a pool in a
temporary directory: its NATS server on a free loopback port and ``volunteers`` volunteer
processes (one per core by default, each pinned to a core of its own, one BLAS thread),
all tied to this process (they die with it, even on SIGKILL), and removes it on
:meth:`Coordinator.close`. ``pool="DIR/coordinator.creds"`` (or the pool's directory)
connects to a pool that ``distal pool serve`` runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distal.errors import InputError, RuntimeFailure
from distal.runtime.pool.credentials import Credentials
from distal.runtime.pool.engine import Engine, Options
from distal.runtime.pool.link import Link
from distal.runtime.pool.sandbox import THREAD_VARS, _preexec, child_env

START_TIMEOUT = 120.0


def _cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


@dataclass
class Coordinator:
    """The coordinator's side of a pool: the link, the run loop, and what it started."""

    link: Link
    engine: Engine
    root: Path | None = None
    server: Any = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def call(self, coro: Any, timeout: float | None = None) -> Any:
        return self.link.call(coro, timeout)

    def wait_for(self, n: int, timeout: float = START_TIMEOUT) -> None:
        """Wait until ``n`` volunteers have said hello (failing early when a volunteer
        process this coordinator started has exited)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeFailure(
                    f"{len(dead)} volunteer process(es) of the embedded pool exited "
                    f"(status {dead[0].returncode}); see {self.root}"
                )
            if self.call(self.engine.gather(n, 1.0), 60) >= n:
                return
        raise RuntimeFailure(f"the pool's {n} volunteer(s) did not connect in {timeout:.0f} s")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.link.close()
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.procs.clear()
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        self.engine.checks.shutdown(wait=False)


def connect(pool: Any, opts: Options, volunteers: int | None = None) -> Coordinator:
    """A :class:`Coordinator` for ``pool`` (see the module docstring)."""
    if pool is None:
        return embedded(opts, volunteers)
    path = Path(os.path.expanduser(str(pool)))
    if path.is_dir():
        from distal.runtime.pool.server import PoolDir

        creds = PoolDir(path).coordinator()
    elif path.exists():
        creds = Credentials.read(path)
    else:
        raise InputError(f"pool={pool!r}: no pool directory or coordinator credentials file there")
    if creds.role != "coordinator":
        raise InputError(f"pool={pool!r}: a volunteer's credentials, not the coordinator's")
    if not creds.servers:
        from distal.runtime.pool.server import PoolDir

        creds = PoolDir(path.parent).coordinator()
    link = Link(creds).start()
    return Coordinator(link, Engine(link, opts))


def embedded(opts: Options, volunteers: int | None = None) -> Coordinator:
    """A pool on this machine (see the module docstring)."""
    from distal.runtime.pool.sandbox import Limits
    from distal.runtime.pool.server import NatsServer, PoolDir

    cores = _cores()
    n = volunteers if volunteers is not None else len(cores)
    if n < 1:
        raise InputError(f"volunteers={volunteers!r}: an embedded pool needs at least one")
    root = Path(tempfile.mkdtemp(prefix="distal-pool-"))
    server = None
    procs: list[subprocess.Popen[bytes]] = []
    link = None
    try:
        pd = PoolDir.create(root / "pool", port=0)
        server = NatsServer(pd, tied=True).start()
        address = f"tls://127.0.0.1:{pd.port()}"
        limits = Limits(1, None, 0)
        env = child_env(limits)
        for v in THREAD_VARS:
            env[v] = "1"
        for i in range(n):
            name = f"local{i}"
            creds = root / f"{name}.creds"
            pd.invite(name).write(creds)
            cmd = [sys.executable, "-m", "distal", "volunteer", str(creds), "--server", address,
                   "--nice", "0"]  # fmt: skip
            log = open(root / f"{name}.log", "wb")
            core = [cores[i % len(cores)]]
            procs.append(
                subprocess.Popen(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    preexec_fn=_preexec(Limits(1, None, 0), core),
                )
            )
            log.close()
        link = Link(pd.coordinator()).start()
        coord = Coordinator(link, Engine(link, opts), root, server, procs)
        coord.wait_for(n)
        return coord
    except BaseException:
        if link is not None:
            link.close()
        for p in procs:
            p.kill()
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise


__all__ = ["Coordinator", "connect", "embedded"]
