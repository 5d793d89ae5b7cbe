"""The checksum of checkpoint entries and the fingerprint of input arrays.

XXH3-128 (``xxhash``, about 30 GB/s on one core) where ``xxhash`` is installed -- the ``dask``
extra installs it -- and BLAKE2b-128 (``hashlib``, about 1 GB/s) otherwise, so a checkpointed
loop works from the core install. A digest names its algorithm: XXH3-128 digests are bare hex
(the format checkpoints always had), BLAKE2b-128 digests read ``"blake2b_128:<hex>"``, and an
entry's header stores the hex under the algorithm's name (``"xxh3_128"`` or
``"blake2b_128"``). So an entry written without ``xxhash`` verifies everywhere; one written
with it verifies wherever ``xxhash`` is installed, and elsewhere :func:`verify` says it
cannot tell (the caller treats the entry as unusable and recomputes it).
"""

from __future__ import annotations

import hashlib
from typing import Any

try:
    import xxhash
except ImportError:  # the core install: hashlib's BLAKE2b instead
    xxhash = None

XXH3 = "xxh3_128"
BLAKE2B = "blake2b_128"
ALGORITHMS = (XXH3, BLAKE2B)
#: the algorithm this process writes with
ALGORITHM = XXH3 if xxhash is not None else BLAKE2B


def available(algorithm: str) -> bool:
    """Whether this process can compute ``algorithm``."""
    return algorithm == BLAKE2B or (algorithm == XXH3 and xxhash is not None)


def hasher(algorithm: str = ALGORITHM, data: bytes | memoryview = b"") -> Any:
    """A new hash object of ``algorithm`` (``update`` / ``hexdigest``), fed ``data``."""
    if algorithm == XXH3:
        if xxhash is None:
            raise ValueError("xxh3_128 needs the xxhash package (pip install xxhash)")
        return xxhash.xxh3_128(data)
    if algorithm == BLAKE2B:
        return hashlib.blake2b(data, digest_size=16)
    raise ValueError(f"unknown checksum algorithm {algorithm!r}; known: {ALGORITHMS}")


def tag(algorithm: str, hexdigest: str) -> str:
    """The digest string of ``algorithm``'s ``hexdigest``: bare for XXH3, named otherwise."""
    return hexdigest if algorithm == XXH3 else f"{algorithm}:{hexdigest}"


def untag(digest: str) -> tuple[str, str]:
    """``(algorithm, hexdigest)`` of a digest string."""
    algorithm, sep, hexdigest = digest.rpartition(":")
    return (algorithm, hexdigest) if sep else (XXH3, digest)


def finish(h: Any, algorithm: str = ALGORITHM) -> str:
    """The digest string of a hash object made by :func:`hasher`."""
    return tag(algorithm, h.hexdigest())


def checksum(data: bytes | memoryview, algorithm: str = ALGORITHM) -> str:
    """The digest string of ``data``."""
    return finish(hasher(algorithm, data), algorithm)


def verify(data: bytes | memoryview, digest: str) -> bool | None:
    """Whether ``data`` has ``digest``; ``None`` when its algorithm is not available here."""
    algorithm, _ = untag(digest)
    if not available(algorithm):
        return None
    return checksum(data, algorithm) == digest


def placeholder(algorithm: str = ALGORITHM) -> str:
    """A digest string as long as ``algorithm``'s (to size a header before hashing)."""
    return tag(algorithm, "0" * 32)


__all__ = [
    "ALGORITHM",
    "ALGORITHMS",
    "BLAKE2B",
    "XXH3",
    "available",
    "checksum",
    "finish",
    "hasher",
    "placeholder",
    "tag",
    "untag",
    "verify",
]
