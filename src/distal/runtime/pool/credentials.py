"""Credentials files: who a pool member is and how it reaches the coordinator.

A credentials file is JSON (never code), mode 0600::

    {"distal_pool_credentials": 1, "pool": "<pool id>", "user": "<name>",
     "role": "volunteer" | "coordinator", "seed": "SU...", "servers": ["tls://host:port"],
     "ca": "-----BEGIN CERTIFICATE-----..."}

``seed`` is the member's NATS nkey seed (an Ed25519 private key; the server knows only its
public key), ``ca`` the pool's CA certificate that the server's certificate must chain to.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distal.errors import InputError

FORMAT = 1
ROLES = ("volunteer", "coordinator")


def _nkeys() -> Any:
    try:
        import nkeys
    except ImportError as e:
        raise InputError(f"the volunteer pool needs {e.name!r}: pip install 'distal[pool]'") from e
    return nkeys


def new_seed() -> str:
    """A fresh nkey user seed (``SU...``)."""
    nk = _nkeys()
    return bytes(nk.encode_seed(secrets.token_bytes(32), nk.PREFIX_BYTE_USER)).decode()


def public_key(seed: str) -> str:
    """The public nkey (``U...``) of ``seed``."""
    nk = _nkeys()
    try:
        kp = nk.from_seed(bytearray(seed.encode()))
    except Exception as e:  # nkeys raises its own error classes and binascii's
        raise InputError(f"not an nkey seed: {type(e).__name__}") from e
    try:
        return bytes(kp.public_key).decode()
    finally:
        kp.wipe()


@dataclass(frozen=True)
class Credentials:
    """One member's credentials (see the module docstring)."""

    pool: str
    user: str
    role: str
    seed: str
    servers: tuple[str, ...]
    ca: str

    def __repr__(self) -> str:  # the seed is a secret
        return f"Credentials(pool={self.pool!r}, user={self.user!r}, role={self.role!r})"

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "distal_pool_credentials": FORMAT,
                "pool": self.pool,
                "user": self.user,
                "role": self.role,
                "seed": self.seed,
                "servers": list(self.servers),
                "ca": self.ca,
            },
            indent=1,
        ).encode()

    def write(self, path: str | Path) -> None:
        """Write the file, readable by its owner only."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.to_json())
        os.chmod(path, 0o600)

    @classmethod
    def read(cls, path: str | Path) -> Credentials:
        """Read a credentials file; anything malformed is an :class:`InputError` naming it."""
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise InputError(f"cannot read credentials file {path}: {e.strerror}") from e
        return cls.parse(raw, str(path))

    @classmethod
    def parse(cls, raw: bytes, what: str = "credentials") -> Credentials:
        if len(raw) > 1 << 20:
            raise InputError(f"{what}: larger than any credentials file")
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise InputError(f"{what}: not a credentials file (not JSON)") from e
        if not isinstance(doc, dict) or doc.get("distal_pool_credentials") != FORMAT:
            raise InputError(f"{what}: not a distal pool credentials file of format {FORMAT}")
        fields = {"pool": str, "user": str, "role": str, "seed": str, "servers": list, "ca": str}
        for k, t in fields.items():
            if not isinstance(doc.get(k), t):
                raise InputError(f"{what}: field {k!r} is missing or not a {t.__name__}")
        if doc["role"] not in ROLES:
            raise InputError(f"{what}: role {doc['role']!r} is not one of {ROLES}")
        if not all(isinstance(s, str) for s in doc["servers"]):
            raise InputError(f"{what}: 'servers' must be a list of addresses")
        public_key(doc["seed"])  # a bad seed is refused here, not at connect
        return cls(
            doc["pool"], doc["user"], doc["role"], doc["seed"], tuple(doc["servers"]), doc["ca"]
        )

    def connect_options(self, servers: tuple[str, ...] | None = None) -> dict[str, Any]:
        """Keyword arguments of ``nats.connect`` for this member: TLS against the pool's CA
        under its server name, the nkey, the member's own inbox prefix, reconnection
        forever."""
        from distal.runtime.pool import subjects, tls

        addr = servers or self.servers
        if not addr:
            raise InputError(f"credentials of {self.user!r} name no server address")
        opts: dict[str, Any] = {
            "servers": [a if "://" in a else f"tls://{a}" for a in addr],
            "tls": tls.client_context(self.ca),
            "tls_hostname": tls.SERVER_NAME,
            "nkeys_seed_str": self.seed,
            "name": self.user,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 1,
            "connect_timeout": 10,
        }
        if self.role == "volunteer":
            opts["inbox_prefix"] = subjects.inbox_prefix(self.user)
        return opts


__all__ = ["Credentials", "new_seed", "public_key"]
