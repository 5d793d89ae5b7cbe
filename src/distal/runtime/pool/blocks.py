"""Blocks by content: the coordinator's object store, and how a volunteer reads it.

Every input block (and every unit's program) is an object of the JetStream object store
:data:`~.subjects.BLOCKS_BUCKET` named by its content digest (BLAKE2b-256 of its dtype,
shape and bytes, :func:`~.wire.array_digest`), so a block that does not change between runs
(a loop's matrix) has the same name in every run and a volunteer that holds it fetches
nothing.

A volunteer reads an object with JetStream's *direct get* only (its permissions allow no
other JetStream call on the bucket): the object's meta message by its subject, then its
chunks in batches (``{"seq", "next_by_subj", "batch"}``; the server answers with the
messages and an end-of-batch status), so it can neither create consumers nor write. It
checks the object's size against what its unit declared before it reads a byte, and the
content digest afterwards (in the compute process, :mod:`.child`).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from distal.runtime.pool.subjects import BLOCKS_BUCKET, BLOCKS_STREAM

OBJECT_CHUNK = 1 << 20  # bytes per object-store chunk (the server's limit is 8 MiB)
BATCH_BYTES = 16 << 20  # bytes a volunteer asks for in one direct-get batch
REQUEST_TIMEOUT = 30.0  # seconds without a message before a batch is asked for again


class ObjectMissing(Exception):
    """The object store has no such object (or it is not of the declared size)."""


def _meta_subject(name: str) -> str:
    return f"$O.{BLOCKS_BUCKET}.M." + base64.urlsafe_b64encode(name.encode()).decode()


def _status(msg: Any) -> str:
    return (msg.headers or {}).get("Status", "") if msg.headers else ""


async def object_meta(nc: Any, name: str, timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
    """The object store's meta record of object ``name`` (direct get)."""
    subject = f"$JS.API.DIRECT.GET.{BLOCKS_STREAM}.{_meta_subject(name)}"
    msg = await nc.request(subject, b"", timeout=timeout)
    if _status(msg) or not msg.data:
        raise ObjectMissing(f"object {name[:16]}... is not in the store")
    try:
        meta = json.loads(msg.data)
    except ValueError:
        raise ObjectMissing(f"object {name[:16]}...: unreadable meta record") from None
    if not isinstance(meta, dict) or meta.get("deleted") or not isinstance(meta.get("nuid"), str):
        raise ObjectMissing(f"object {name[:16]}... is deleted or has no chunks")
    return meta


async def read_object(nc: Any, name: str, size: int) -> AsyncIterator[bytes]:
    """Object ``name``'s bytes, chunk by chunk; an object of another size than ``size`` (what
    the unit declared) is refused before any chunk is read."""
    meta = await object_meta(nc, name)
    if meta.get("size") != size:
        raise ObjectMissing(f"object {name[:16]}... holds {meta.get('size')} bytes, not {size}")
    if size == 0:
        return
    subject = f"$O.{BLOCKS_BUCKET}.C.{meta['nuid']}"
    got, seq = 0, 0
    per = max(1, BATCH_BYTES // OBJECT_CHUNK)
    while got < size:
        inbox = nc.new_inbox()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        sub = await nc.subscribe(inbox, cb=queue.put)
        try:
            req = {"seq": seq + 1 if seq else 0, "next_by_subj": subject, "batch": per}
            await nc.publish(f"$JS.API.DIRECT.GET.{BLOCKS_STREAM}", json.dumps(req).encode(),
                             reply=inbox)  # fmt: skip
            while True:
                msg = await asyncio.wait_for(queue.get(), REQUEST_TIMEOUT)
                status = _status(msg)
                if status:
                    if status == "204" or status == "404":  # end of batch / nothing more
                        break
                    raise ObjectMissing(f"object {name[:16]}...: direct get status {status}")
                data = msg.data
                if got + len(data) > size:
                    raise ObjectMissing(f"object {name[:16]}... is longer than declared")
                got += len(data)
                seq = int(msg.headers.get("Nats-Sequence", seq))
                yield data
        finally:
            await sub.unsubscribe()
        if got < size and seq == 0:
            raise ObjectMissing(f"object {name[:16]}... has no chunks")


@dataclass
class CacheBook:
    """What a volunteer's compute process holds, by digest, least recently used first (the
    bytes are in the child; this is the bookkeeping that decides evictions)."""

    capacity: int
    held: OrderedDict[str, int] = field(default_factory=OrderedDict)

    @property
    def used(self) -> int:
        return sum(self.held.values())

    def touch(self, digest: str) -> bool:
        """Whether ``digest`` is held (and mark it used now)."""
        if digest in self.held:
            self.held.move_to_end(digest)
            return True
        return False

    def admit(self, digest: str, nbytes: int, keep: set[str]) -> list[str]:
        """Record ``digest``; return the digests to evict first (the least recently used,
        never one in ``keep``) so the total stays within capacity."""
        out = []
        for d in list(self.held):
            if self.used + nbytes <= self.capacity:
                break
            if d not in keep:
                out.append(d)
                del self.held[d]
        self.held[digest] = nbytes
        return out

    def clear(self) -> None:
        self.held.clear()


__all__ = ["OBJECT_CHUNK", "CacheBook", "ObjectMissing", "object_meta", "read_object"]
