"""Authenticated checkpoint entries: ``checkpoint_key=``.

An entry's checksum (:mod:`~distal.runtime.checkpoint_hash`) catches accidents, but anyone
who can write to the checkpoint location can write a forged value with a checksum that
matches it. With a key, an entry is used only when a *seal* made with the key vouches for
it:

- the **content digest** of an entry is BLAKE2b-256 (unkeyed, cryptographic) over its
  dtype, shape and bytes, so no one can make other bytes, or the same bytes read with
  another dtype or shape, that have the same digest;
- its **seal** is HMAC-SHA256, under the key, of the entry's identity (the run directory,
  which names the run key or the session loop and iteration, and the entry's name, which
  names the unit's processor and steps or the output block) and its content digest. A
  valid entry copied over another one, or into another run or iteration, fails its seal.

The key is only ever used where it is held: the elastic runtime's driver (workers write
entries and report their content digests; the driver seals what it accepted, see
``docs/elastic.md``) and the session process that writes a loop's manifest. Nothing in this
module sends the key anywhere; :class:`Sealer` is deliberately not picklable.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.errors import InputError

DIGEST = "blake2b_256"
"""The name the content digest is stored under (seal files, session manifests)."""

MAC = "hmac_sha256"
"""The name the seal is stored under."""

SEAL_SUFFIX = ".seal"
"""A seal file sits beside its entry: ``<name>.seal`` next to ``<name>.ck``."""


def check_key(key: Any, what: str = "checkpoint_key") -> bytes | None:
    """``key`` as bytes, or None when it is None.

    Raises:
        InputError: naming ``what`` when the key is not ``bytes`` (a ``str`` is refused
            rather than encoded, so that two spellings of a secret never differ silently)
            or is empty.
    """
    if key is None:
        return None
    if not isinstance(key, bytes):
        # the value itself is not repeated: it may be the secret, spelled as a str
        raise InputError(f"{what} must be bytes (a secret), got a {type(key).__name__}")
    if not key:
        raise InputError(f"{what} must not be empty: an empty key authenticates nothing")
    return key


def content_digest(arr: np.ndarray) -> str:
    """BLAKE2b-256 hex of an array's dtype, shape and C-order bytes (what a seal vouches
    for; dtype and shape are included so a header cannot reinterpret sealed bytes)."""
    a = np.require(arr, requirements="C")
    # a 0-d array and its (1,) copy (how some writers store a scalar) hash alike
    dims = list(a.shape) if a.ndim else [1]
    h = hashlib.blake2b(f"{a.dtype.str}{dims}|".encode(), digest_size=32)
    if a.size:
        h.update(memoryview(a.reshape(-1).view(np.uint8)))
    return h.hexdigest()


@dataclass(frozen=True, slots=True, eq=False)
class Sealer:
    """The key, and the seals made with it. Lives on the trusted side only.

    Pickling is refused: a ``Sealer`` travelling in a task would hand the key to a worker.
    The key is left out of ``repr`` (and equality: two sealers are never compared by
    their secrets).
    """

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        check_key(self.key)

    def __reduce__(self) -> Any:
        raise TypeError("a checkpoint Sealer holds the key and is never sent anywhere")

    def mac(self, scope: str, name: str, digest: str) -> str:
        """The seal of entry ``name`` of run directory ``scope`` with content ``digest``."""
        msg = json.dumps(["distal-seal", 1, scope, name, digest]).encode()
        return hmac.new(self.key, msg, hashlib.sha256).hexdigest()

    def opens(self, scope: str, name: str, digest: Any, mac: Any) -> bool:
        """Whether ``mac`` is this key's seal of (``scope``, ``name``, ``digest``)."""
        if not isinstance(digest, str) or not isinstance(mac, str):
            return False
        return hmac.compare_digest(self.mac(scope, name, digest), mac)

    def seal_document(self, scope: str, name: str, digest: str) -> bytes:
        """The bytes of a seal file for entry ``name``."""
        return json.dumps({DIGEST: digest, MAC: self.mac(scope, name, digest)}).encode()

    def open_document(self, scope: str, name: str, raw: bytes | None) -> str | None:
        """The content digest a seal file vouches for, or None (absent, unreadable, made
        with another key or for another entry)."""
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        digest = doc.get(DIGEST)
        return digest if self.opens(scope, name, digest, doc.get(MAC)) else None

    def manifest_mac(self, scope: str, manifest: dict[str, Any]) -> str:
        """The seal of a whole manifest (a session iteration's), over its canonical JSON
        without its own ``MAC`` field."""
        body = {k: v for k, v in manifest.items() if k != MAC}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return self.mac(scope, "manifest", hashlib.sha256(text.encode()).hexdigest())

    def manifest_opens(self, scope: str, manifest: dict[str, Any]) -> bool:
        """Whether ``manifest`` carries this key's seal for ``scope``."""
        mac = manifest.get(MAC)
        return isinstance(mac, str) and hmac.compare_digest(self.manifest_mac(scope, manifest), mac)


__all__ = [
    "DIGEST",
    "MAC",
    "SEAL_SUFFIX",
    "Sealer",
    "check_key",
    "content_digest",
]
