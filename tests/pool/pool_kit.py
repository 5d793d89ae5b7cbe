"""Pool test helpers: a pool directory with its NATS server on loopback, volunteer processes
(imported by the tests by a name of their own, so no other test folder's helpers shadow them)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _have_pool() -> str | None:
    for mod in ("nats", "nkeys", "msgpack", "cryptography"):
        try:
            __import__(mod)
        except ImportError:
            return f"needs {mod!r} (pip install 'distal[pool]')"
    from distal.errors import InputError
    from distal.runtime.pool.server import nats_server_binary

    try:
        nats_server_binary()
    except InputError as e:
        return str(e)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env() -> dict[str, str]:
    """This environment, with the distal under test importable by absolute path and one
    BLAS thread per process (the machine has two shared cores)."""
    import distal

    src = str(Path(distal.__file__).resolve().parents[1])
    path = [src, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1"}  # fmt: skip


@dataclass
class LocalPool:
    """A pool on loopback: its directory, server, the address and the volunteers started."""

    dir: Any
    server: Any
    address: str
    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def invite(self, name: str) -> Path:
        path = self.root / f"{name}.creds"
        self.dir.invite(name).write(path)
        return path

    def volunteer(self, name: str, *args: str, script: list[str] | None = None,
                  invite: bool = True) -> subprocess.Popen[bytes]:  # fmt: skip
        creds = self.invite(name) if invite else self.root / f"{name}.creds"
        cmd = script or [sys.executable, "-m", "distal", "volunteer"]
        cmd = [*cmd, str(creds), "--server", self.address, *args]
        log = open(self.root / f"{name}.log", "wb")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env())
        log.close()
        self.procs[name] = p
        return p

    def rogues(self, modes: dict[str, str], label: str = "rogues") -> subprocess.Popen[bytes]:
        """One ``rogue.py`` process playing the volunteers ``modes`` (name -> mode)."""
        pairs = [f"{mode}={self.invite(name)}" for name, mode in modes.items()]
        cmd = [sys.executable, str(HERE / "rogue.py"), "--server", self.address, *pairs]
        log = open(self.root / f"{label}.log", "wb")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env())
        log.close()
        self.procs[label] = p
        return p

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str, timeout: float = 20) -> int:
        p = self.procs[name]
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        return int(p.returncode)


def stop_all(procs: dict[str, subprocess.Popen[bytes]], timeout: float = 10) -> None:
    """SIGTERM every process still running, then wait for them together (a stop costs the
    slowest one's time, not the sum); what does not stop in ``timeout`` s is killed."""
    live = [p for p in procs.values() if p.poll() is None]
    for p in live:
        p.terminate()
    end = time.monotonic() + timeout
    for p in live:
        try:
            p.wait(max(end - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def wait_for(cond: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
