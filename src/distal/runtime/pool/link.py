"""The coordinator's connection to its pool: NATS and JetStream, in a thread of its own.

One asyncio loop in a daemon thread holds the connection (the coordinator's nkey, TLS),
makes the JetStream resources the pool uses, and turns what arrives into events for the
run loop (:mod:`.engine`), which runs in the same loop:

- ``("hello", name, raw)`` / ``("bye", name, raw)``: core NATS, ``distal.hello.*`` and
  ``distal.bye.*``; the subject's third token is the sender (the server's permissions let
  each volunteer publish only its own);
- ``("result", name, subject tokens, raw)``: the results stream, read by the coordinator's
  own pull consumer a few messages at a time (so a flood waits in the stream, not in
  memory) and acked at once (its bytes are the run loop's from then on).

Resources (made if absent, so a restarted coordinator finds them): the work-queue stream
of units (one durable pull consumer per volunteer, filtered on its subject; its ack wait is
the volunteer's deadline), the results stream, the object store of blocks (memory) and the
KV bucket of leases and trust (file). At start the units and results streams are purged:
a new coordinator's runs are new.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from distal.errors import RuntimeFailure
from distal.runtime.pool import subjects as S
from distal.runtime.pool.blocks import OBJECT_CHUNK
from distal.runtime.pool.credentials import Credentials
from distal.runtime.pool.server import MAX_PAYLOAD

RESULTS_CONSUMER = "coordinator"
RESULTS_BATCH = 8  # result messages fetched at a time (at most 8 MiB each)
#: events waiting for the run loop: with results at most 8 MiB each, what a flood of
#: replies can hold in the coordinator's memory before the stream holds the rest
EVENTS = 32
#: bytes the units and results streams may hold (reserved from the server's memory store;
#: the rest is the object store's)
STREAM_BYTES = {"DISTAL_UNITS": 256 << 20, "DISTAL_RESULTS": 2 << 30}


class _EofNote(logging.Filter):
    """Drops asyncio's note that a TLS connection ignores ``eof_received``'s return value:
    every NATS connection closed over TLS logs it, and it means nothing here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received()" not in record.getMessage()


def quiet_tls_eof() -> None:
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _EofNote) for f in logger.filters):
        logger.addFilter(_EofNote())


class _Reader:
    """``readinto`` over a memoryview (what nats-py's object store ``put`` reads from,
    without a copy of the whole)."""

    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def readinto(self, buf: bytearray) -> int:
        n = min(len(buf), len(self.data) - self.at)
        buf[:n] = self.data[self.at : self.at + n]
        self.at += n
        return n


@dataclass
class Stored:
    """An object the coordinator put in the store: its size and when it was last named."""

    nbytes: int
    used: int


class Link:
    """The coordinator's side of the pool's NATS server (see the module docstring)."""

    def __init__(self, creds: Credentials, servers: tuple[str, ...] | None = None) -> None:
        if creds.role != "coordinator":
            raise RuntimeFailure("these are a volunteer's credentials, not the coordinator's")
        self.creds, self.servers = creds, servers
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="distal-pool-link", daemon=True)
        self.events: asyncio.Queue[tuple] | None = None
        self.nc: Any = None
        self.js: Any = None
        self.kv: Any = None
        self.objects: Any = None
        self.stored: dict[str, Stored] = {}
        self.consumers: dict[str, float] = {}  # volunteer -> ack wait set
        self.tick = 0
        self._tasks: list[asyncio.Task[Any]] = []
        self.reconnects = 0

    # -- the thread --------------------------------------------------------------------------

    def _main(self) -> None:
        quiet_tls_eof()
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self, timeout: float = 60.0) -> Link:
        self.thread.start()
        self.call(self._start(), timeout)
        return self

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run ``coro`` in the link's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        if not self.thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self.call(self._stop(), 15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    # -- inside the loop ---------------------------------------------------------------------

    async def _start(self) -> None:
        import nats
        from nats.js.api import (
            AckPolicy,
            ConsumerConfig,
            DiscardPolicy,
            KeyValueConfig,
            RetentionPolicy,
            StorageType,
            StreamConfig,
        )

        self.events = asyncio.Queue(maxsize=EVENTS)

        async def reconnected() -> None:
            self.reconnects += 1
            self.stored.clear()  # a restarted server may have lost its memory streams
            self.consumers.clear()

        async def quiet(e: Exception) -> None:
            return None

        opts = self.creds.connect_options(self.servers)
        opts.update(reconnected_cb=reconnected, error_cb=quiet)
        self.nc = await nats.connect(**opts)
        self.js = self.nc.jetstream(timeout=30)
        mem = StorageType.MEMORY
        streams = ((S.UNITS_STREAM, "distal.unit.*"), (S.RESULTS_STREAM, "distal.result.>"))
        for name, subj in streams:
            cfg = StreamConfig(
                name=name, subjects=[subj], retention=RetentionPolicy.WORK_QUEUE, storage=mem,
                max_bytes=STREAM_BYTES[name], max_msg_size=MAX_PAYLOAD, discard=DiscardPolicy.NEW,
            )  # fmt: skip
            try:
                await self.js.add_stream(cfg)
            except Exception:  # there already, perhaps with other limits
                await self.js.update_stream(cfg)
            await self.js.purge_stream(name)
        await self.js.add_consumer(
            S.RESULTS_STREAM,
            ConsumerConfig(durable_name=RESULTS_CONSUMER, ack_policy=AckPolicy.EXPLICIT,
                           ack_wait=60, max_ack_pending=RESULTS_BATCH * 4),
        )  # fmt: skip
        try:
            self.objects = await self.js.object_store(S.BLOCKS_BUCKET)
        except Exception:
            self.objects = await self.js.create_object_store(S.BLOCKS_BUCKET, storage=mem)
        try:
            self.kv = await self.js.key_value(S.STATE_BUCKET)
        except Exception:
            self.kv = await self.js.create_key_value(
                KeyValueConfig(bucket=S.STATE_BUCKET, history=1, storage=StorageType.FILE)
            )
        await self.nc.subscribe("distal.hello.*", cb=self._on("hello"))
        await self.nc.subscribe("distal.bye.*", cb=self._on("bye"))
        self._tasks.append(asyncio.ensure_future(self._results()))

    def _on(self, kind: str) -> Any:
        async def cb(msg: Any) -> None:
            assert self.events is not None
            name = msg.subject.split(".")[2]
            with contextlib.suppress(asyncio.QueueFull):
                self.events.put_nowait((kind, name, msg.data))  # heartbeats may be dropped

        return cb

    async def _results(self) -> None:
        assert self.events is not None
        sub = await self.js.pull_subscribe_bind(durable=RESULTS_CONSUMER, stream=S.RESULTS_STREAM)
        while True:
            try:
                msgs = await sub.fetch(RESULTS_BATCH, timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception:  # no results yet, or reconnecting
                await asyncio.sleep(0.01)
                continue
            for m in msgs:
                tokens = m.subject.split(".")
                name = tokens[2] if len(tokens) > 2 else ""
                with contextlib.suppress(Exception):
                    await m.ack()
                await self.events.put(("result", name, tuple(tokens[3:]), m.data))

    async def _stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.nc.close(), 5)

    # -- units, consumers, objects, state -----------------------------------------------------

    async def consumer(self, name: str, ack_wait: float) -> None:
        """Volunteer ``name``'s pull consumer, its ack wait (the deadline of the units it
        holds) set to ``ack_wait`` seconds when that is far from the one set."""
        from nats.js.api import AckPolicy, ConsumerConfig

        have = self.consumers.get(name)
        if have is not None and have / 2 <= ack_wait <= have * 2:
            return
        ack_wait = max(2.0, float(ack_wait))
        cfg = ConsumerConfig(
            durable_name=name, filter_subject=S.unit_subject(name),
            ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait, max_deliver=3,
            max_ack_pending=4, max_waiting=8,
        )  # fmt: skip
        await self.js.add_consumer(S.UNITS_STREAM, cfg)
        self.consumers[name] = ack_wait

    async def shut_out(self, name: str) -> None:
        """An excluded volunteer: drop what it has queued in the results stream and the units
        queued for it (its consumer stays: the pool's owner revokes identities)."""
        with contextlib.suppress(Exception):
            await self.js.purge_stream(S.RESULTS_STREAM, subject=f"distal.result.{name}.>")
        with contextlib.suppress(Exception):
            await self.js.purge_stream(S.UNITS_STREAM, subject=S.unit_subject(name))

    async def send(self, name: str, unit: bytes) -> None:
        await self.js.publish(S.unit_subject(name), unit)

    async def control(self, name: str, msg: bytes) -> None:
        with contextlib.suppress(Exception):
            await self.nc.publish(S.control_subject(name), msg)

    async def put_object(self, digest: str, data: memoryview) -> None:
        """Object ``digest`` in the store (put unless the coordinator put it already)."""
        from nats.js.api import ObjectMeta, ObjectMetaOptions

        self.tick += 1
        got = self.stored.get(digest)
        if got is not None:
            got.used = self.tick
            return
        meta = ObjectMeta(name=digest, options=ObjectMetaOptions(max_chunk_size=OBJECT_CHUNK))
        await self.objects.put(digest, _Reader(data), meta=meta)
        self.stored[digest] = Stored(len(data), self.tick)

    async def forget_object(self, digest: str) -> None:
        """Take object ``digest`` out of the store (a volunteer could not read it: it is
        put again on next use)."""
        self.stored.pop(digest, None)

    async def trim(self, budget: int, keep: set[str]) -> None:
        """Delete the least recently used objects beyond ``budget`` bytes (never ``keep``)."""
        total = sum(s.nbytes for s in self.stored.values())
        for digest, s in sorted(self.stored.items(), key=lambda kv: kv[1].used):
            if total <= budget:
                break
            if digest in keep:
                continue
            with contextlib.suppress(Exception):
                await self.objects.delete(digest)
            total -= s.nbytes
            del self.stored[digest]

    async def kv_get(self, key: str) -> bytes | None:
        try:
            entry = await self.kv.get(key)
        except Exception:
            return None
        return entry.value

    async def kv_put(self, key: str, value: bytes) -> None:
        with contextlib.suppress(Exception):
            await self.kv.put(key, value)

    async def kv_delete(self, key: str) -> None:
        with contextlib.suppress(Exception):
            await self.kv.delete(key)


__all__ = ["Link"]
