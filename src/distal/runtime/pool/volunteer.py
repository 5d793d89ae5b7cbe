"""A volunteer: ``distal volunteer CREDENTIALS [--cpus N] [--memory GB]``.

The donor's process. It connects out to the coordinator's NATS server (TLS against the
pool's CA, its own nkey; it opens no port), says ``hello`` every :data:`HEARTBEAT`
seconds, and pulls its units one at a time from its own consumer of the work-queue stream.
For each unit it checks the message (:func:`.wire.read_unit`: versions, dtypes, sizes),
fetches the program and the blocks it does not hold from the object store (by digest:
:mod:`.blocks`), has its compute process (:mod:`.child`, within the donor's limits,
:mod:`.sandbox`) run it, publishes the result under its own subject, and acks the unit.
While it computes one unit it already fetches the next one's blocks.

What it refuses (a ``refuse`` reply, the unit acked away): a unit of another wire or
program version, a dtype or a leaf routine it does not know, inputs larger than its
memory limit. A unit its compute process cannot run (or dies running) is a ``failed``
reply. It runs nothing but distal's own kernels: a program is data (:mod:`.program`).

SIGTERM or SIGINT stops it cleanly: it stops pulling, gives back the units it holds (a
``bye`` naming them, so the coordinator hands them to others at once, and ``term`` so the
stream forgets them), closes its connection and exits 0. When the coordinator's server goes
away it keeps reconnecting (every second) and carries on where it was; when the server
refuses its key (``distal pool revoke``) it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from distal.runtime.pool import subjects, wire
from distal.runtime.pool.blocks import CacheBook, ObjectMissing, read_object
from distal.runtime.pool.credentials import Credentials
from distal.runtime.pool.sandbox import ChildDied, ChildProcess, Limits
from distal.runtime.pool.wire import BlockRef, UnitMsg, WireError

log = logging.getLogger("distal.volunteer")

HEARTBEAT = 2.0
"""Seconds between two ``hello`` messages."""

REVOKED_AFTER = 5
"""Authorization refusals in a row after which the volunteer takes itself as revoked."""

FETCHES = 3
"""Objects of one unit fetched at the same time."""


def _block_dir(name: str) -> Path:
    """A private directory for this volunteer's blocks: in memory (``/dev/shm``) where it
    can be."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=f"distal-volunteer-{name}-", dir=base))


SOFTWARE = "distal-volunteer"


@dataclass
class Stats:
    """What this volunteer did (printed when it stops; read by the tests)."""

    units: int = 0
    refused: int = 0
    failed: int = 0
    bytes_in: int = 0
    blocks_fetched: int = 0
    blocks_cached: int = 0
    started: float = field(default_factory=time.monotonic)


class Volunteer:
    """One volunteer process's work (see the module docstring)."""

    def __init__(
        self, creds: Credentials, limits: Limits, servers: tuple[str, ...] | None = None,
        cache_bytes: int | None = None,
    ) -> None:  # fmt: skip
        if creds.role != "volunteer":
            raise ValueError("these are not a volunteer's credentials")
        self.creds, self.limits, self.servers = creds, limits, servers
        self.name = creds.user
        budget = limits.memory if limits.memory is not None else 8 << 30
        self.book = CacheBook(cache_bytes if cache_bytes is not None else budget // 2)
        self.root = _block_dir(self.name)
        self.child = ChildProcess(limits, self.root)
        self.forget: set[str] = set()  # evicted programs the compute process may drop
        self.fetching = asyncio.Semaphore(FETCHES)
        self.stats = Stats()
        self.stopping = asyncio.Event()
        self.auth_failures = 0
        self.holding: dict[str, Any] = {}  # attempt -> its message, until acked
        self.fetched: dict[str, tuple[int, float]] = {}  # attempt -> (bytes, seconds) fetched
        self.ready: asyncio.Queue[tuple[UnitMsg, Any, str]] = asyncio.Queue(maxsize=1)
        self.nc: Any = None
        self.js: Any = None

    # -- connection ----------------------------------------------------------------------

    async def _error(self, e: Exception) -> None:
        text = str(e)
        if "Authorization Violation" in text or "authorization" in text.lower():
            self.auth_failures += 1
            if self.auth_failures >= REVOKED_AFTER:
                log.error("%s: the coordinator refuses this volunteer's key (revoked?)", self.name)
                self.stopping.set()
        else:
            log.debug("%s: %s", self.name, text)

    async def _connected(self) -> None:
        self.auth_failures = 0
        log.info("%s: connected", self.name)
        with contextlib.suppress(Exception):
            await self._hello()

    async def connect(self) -> None:
        import nats

        opts = self.creds.connect_options(self.servers)
        opts.update(error_cb=self._error, reconnected_cb=self._connected)
        while not self.stopping.is_set():
            try:
                self.nc = await nats.connect(**opts)
                break
            except Exception as e:  # the server is not up yet, or refuses us
                await self._error(e)
                log.info("%s: cannot connect yet (%s); trying again", self.name, type(e).__name__)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), 1.0)
        if self.nc is not None:
            self.js = self.nc.jetstream()
            await self._connected()

    async def _hello(self) -> None:
        mem = self.limits.memory or 0
        await self.nc.publish(
            subjects.hello_subject(self.name),
            wire.hello((wire.VERSION,), self.limits.cpus, mem, 2, SOFTWARE),
        )

    # -- the loops -------------------------------------------------------------------------

    async def run(self) -> Stats:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stopping.set)
        await self.child.start()
        await self.connect()
        if self.nc is None:
            await self.child.stop()
            shutil.rmtree(self.root, ignore_errors=True)
            return self.stats
        tasks = [asyncio.ensure_future(c) for c in (self._beat(), self._pull(), self._work())]
        ctl = await self.nc.subscribe(subjects.control_subject(self.name), cb=self._control)
        await self.stopping.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._give_back()
        with contextlib.suppress(Exception):
            await ctl.unsubscribe()
        # (no drain: what was given back is flushed, and nothing still arriving is wanted;
        # a drain waits on the pull subscription for seconds)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.nc.close(), 5)
        await self.child.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        log.info("%s: stopped after %d unit(s)", self.name, self.stats.units)
        return self.stats

    async def _give_back(self) -> None:
        """Tell the coordinator which units this volunteer leaves, and let the stream forget
        them (they are the coordinator's to hand out again)."""
        for attempt, msg in list(self.holding.items()):
            with contextlib.suppress(Exception):
                await self.nc.publish(subjects.bye_subject(self.name), wire.bye(attempt))
            with contextlib.suppress(Exception):
                await msg.term()
        self.holding.clear()
        with contextlib.suppress(Exception):
            await self.nc.publish(subjects.bye_subject(self.name), wire.bye())
            await self.nc.flush(2)

    async def _beat(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self._hello()
            await asyncio.sleep(HEARTBEAT)

    async def _control(self, msg: Any) -> None:
        try:
            ctl = wire.read_control(msg.data)
        except WireError:
            return
        if ctl["kind"] == "stop":
            log.warning("%s: the coordinator asks it to stop: %s", self.name, ctl["reason"])

    async def _pull(self) -> None:
        """Pull units, check them, fetch what they need; hand them to :meth:`_work`."""
        sub = None
        while True:
            try:
                if sub is None:
                    sub = await self.js.pull_subscribe_bind(
                        durable=self.name, stream=subjects.UNITS_STREAM
                    )
                msgs = await sub.fetch(1, timeout=2.0)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # no unit yet, the consumer not made yet, reconnecting
                if not type(e).__name__.endswith("TimeoutError"):
                    await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                await self._take(msg)

    async def _take(self, msg: Any) -> None:
        try:
            unit = wire.read_unit(msg.data)
        except WireError as e:
            log.warning("%s: a unit refused unread: %s", self.name, e)
            self.stats.refused += 1
            with contextlib.suppress(Exception):
                await msg.term()
            return
        if unit.attempt in self.holding:
            return  # redelivered while this volunteer still works on it
        self.holding[unit.attempt] = msg
        t0, before = time.monotonic(), self.stats.bytes_in
        log.info("%s: unit %s (%s) pulled", self.name, unit.attempt, unit.name)
        try:
            prog = await self._prepare(unit)
        except _Refuse as e:
            await self._reply(unit, wire.report("refuse", str(e)))
            self.stats.refused += 1
            return
        except (ObjectMissing, ChildDied, asyncio.TimeoutError) as e:
            await self._reply(unit, wire.report("failed", f"could not get its inputs: {e}"))
            self.stats.failed += 1
            return
        got = self.stats.bytes_in - before
        took = time.monotonic() - t0
        log.info("%s: unit %s: %.1f MB fetched in %.2f s", self.name, unit.attempt, got / 1e6,
                 took)  # fmt: skip
        self.fetched[unit.attempt] = (got, took)
        await self.ready.put((unit, msg, prog))

    async def _prepare(self, unit: UnitMsg) -> str:
        """Make sure the block directory holds the unit's program and blocks (fetching the
        missing ones together); the program's digest."""
        if self.limits.memory is not None and 2 * unit.input_bytes + unit.out.nbytes > (
            self.limits.memory
        ):
            raise _Refuse(
                f"its inputs ({unit.input_bytes} bytes) and output ({unit.out.nbytes}) do not "
                f"fit this volunteer's memory limit ({self.limits.memory})"
            )
        await self.child.ensure()
        if isinstance(unit.program, bytes):
            prog = BlockRef(wire.array_digest(np.dtype("|u1"), (len(unit.program),),
                                              unit.program), np.dtype("|u1"),
                            (len(unit.program),))  # fmt: skip
            if not self.book.touch(prog.digest):
                self._admit(prog, {prog.digest})
                self._write(prog, unit.program)
        else:
            prog = unit.program
        refs = {r.digest: r for r in (prog, *unit.blocks)}
        keep = set(refs)
        missing = []
        for d, r in refs.items():
            if self.book.touch(d):
                self.stats.blocks_cached += 1
            else:
                missing.append(r)
        await asyncio.gather(*(self._fetch(r, keep) for r in missing))
        return prog.digest

    def _admit(self, ref: BlockRef, keep: set[str]) -> None:
        for old in self.book.admit(ref.digest, ref.nbytes, keep):
            with contextlib.suppress(OSError):
                (self.root / old).unlink()
            self.forget.add(old)

    def _write(self, ref: BlockRef, data: bytes) -> None:
        part = self.root / f"{ref.digest}.part"
        part.write_bytes(data)
        os.replace(part, self.root / ref.digest)

    async def _fetch(self, ref: BlockRef, keep: set[str]) -> None:
        """Fetch object ``ref`` into the block directory: written as it arrives, its digest
        checked before the file gets its name."""
        async with self.fetching:
            self._admit(ref, keep)
            part = self.root / f"{ref.digest}.part"
            dims = list(ref.shape) if ref.shape else [1]
            h = hashlib.blake2b(f"{ref.dtype.str}{dims}|".encode(), digest_size=32)
            try:
                with open(part, "wb") as f:
                    async for chunk in read_object(self.nc, ref.digest, ref.nbytes):
                        f.write(chunk)
                        h.update(chunk)
                if h.hexdigest() != ref.digest:
                    raise ObjectMissing(f"object {ref.digest[:16]}...: not the declared digest")
                os.replace(part, self.root / ref.digest)
            except BaseException:
                self.book.held.pop(ref.digest, None)
                with contextlib.suppress(OSError):
                    part.unlink()
                raise
            self.stats.blocks_fetched += 1
            self.stats.bytes_in += ref.nbytes

    async def _work(self) -> None:
        """Run prepared units one at a time and publish their results."""
        while True:
            unit, _, prog = await self.ready.get()
            await self._compute(unit, prog)

    async def _compute(self, unit: UnitMsg, prog: str) -> None:
        got, took = self.fetched.pop(unit.attempt, (0, 0.0))
        with contextlib.suppress(Exception):  # the coordinator times the unit from here
            subject = subjects.result_subject(self.name, unit.run, unit.attempt)
            await self.nc.publish(subject, wire.started(got, took))
        blocks = [[b.digest, b.dtype.str, list(b.shape)] for b in unit.blocks]
        for _ in range(2):
            forget, self.forget = sorted(self.forget), set()
            request = {"op": "run", "program": prog, "blocks": blocks, "forget": forget}
            try:
                answer = await self.child.request(request)
            except ChildDied as e:
                await self._reply(unit, wire.report("failed", f"the compute process died: {e}"))
                self.stats.failed += 1
                return
            if answer.get("op") == "done":
                await self._send_result(unit, answer)
                return
            if answer.get("op") == "refuse":
                await self._reply(unit, wire.report("refuse", str(answer.get("reason"))))
                self.stats.refused += 1
                return
            if answer.get("reason") != "missing":
                break
            for d in answer.get("missing", []):  # gone meanwhile: fetch again, once
                self.book.held.pop(str(d), None)
            try:
                prog = await self._prepare(unit)
            except (_Refuse, ObjectMissing, ChildDied, asyncio.TimeoutError) as e:
                answer = {"reason": f"could not get its inputs again: {e}"}
                break
        await self._reply(unit, wire.report("failed", str(answer.get("reason", "unknown"))))
        self.stats.failed += 1

    async def _send_result(self, unit: UnitMsg, answer: dict[str, Any]) -> None:
        path = self.root / str(answer["file"])
        try:
            dt, shape = np.dtype(answer["dtype"]), tuple(answer["shape"])
            arr = np.fromfile(path, dtype=dt).reshape(shape)
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        parts = wire.result_messages(
            arr, answer["seconds"], answer["iterations"], int(answer.get("held", 0))
        )
        t0 = time.monotonic()
        await self._reply(unit, *parts)
        log.info("%s: unit %s: computed in %.2f s, %.1f MB replied in %.2f s", self.name,
                 unit.attempt, answer["seconds"], arr.nbytes / 1e6,
                 time.monotonic() - t0)  # fmt: skip
        self.stats.units += 1

    async def _reply(self, unit: UnitMsg, *parts: bytes) -> None:
        """Publish a unit's reply and ack the unit once the stream has acknowledged every
        part. The parts go out back to back, in order (their acknowledgements awaited
        together: one round trip, not one a part); a publish cut off by a lost connection
        is made again from the first part."""
        subject = subjects.result_subject(self.name, unit.run, unit.attempt)
        while True:
            try:
                acks = [await self.js.publish_async(subject, p) for p in parts]
                await asyncio.wait_for(asyncio.gather(*acks), 60 + 10 * len(parts))
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("%s: publishing a result failed (%s); again", self.name, type(e).__name__)
                await asyncio.sleep(1.0)
        msg = self.holding.pop(unit.attempt, None)
        if msg is not None:
            with contextlib.suppress(Exception):
                await msg.ack()


class _Refuse(Exception):
    """A unit this volunteer will not compute (the reason is the message)."""


def main(creds_path: str, cpus: int, memory_gb: float | None, nice: int = 10,
         servers: tuple[str, ...] | None = None) -> int:  # fmt: skip
    """``distal volunteer``: run until stopped; the exit status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from distal.runtime.pool.link import quiet_tls_eof

    quiet_tls_eof()
    creds = Credentials.read(creds_path)
    memory = None if memory_gb is None else int(memory_gb * (1 << 30))
    v = Volunteer(creds, Limits(cpus, memory, nice), servers)
    stats = asyncio.run(v.run())
    print(
        f"distal volunteer {creds.user}: {stats.units} unit(s) computed, {stats.refused} "
        f"refused, {stats.failed} failed; {stats.blocks_fetched} block(s) fetched "
        f"({stats.bytes_in} bytes), {stats.blocks_cached} found in its cache",
        flush=True,
    )
    return 0 if v.auth_failures < REVOKED_AFTER else 3


__all__ = ["HEARTBEAT", "Volunteer", "main"]
