"""A pool without NATS: the coordinator's run loop against in-process volunteers.

:class:`FakeLink` has the :class:`~distal.runtime.pool.link.Link` methods the run loop
calls (consumers, units, objects, the KV bucket) and its ``events`` queue. Each
:class:`FakeVolunteer` says hello on a timer and answers the units sent to it the way its
``behaviour`` says: computing them with the volunteer's own compute code
(:func:`distal.runtime.pool.child.compute` on the decoded program), lying with
well-formed numbers, sending a malformed reply of one of the kinds the wire format
refuses, or going silent. Replies are real wire messages, so the coordinator's checks are
the ones a NATS pool runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from distal.runtime.pool import child, program, wire
from distal.runtime.pool.wire import UnitMsg


class Evil:
    """Unpickling this creates the marker file: what a pickle payload would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


MALFORMED = ("pickle", "object-dtype", "huge-shape", "truncated", "garbage")


def malformed_reply(kind: str, arr: np.ndarray, marker: Path) -> list[bytes]:
    """A reply of ``kind`` for result ``arr`` (see :data:`MALFORMED`)."""
    good = wire.result_messages(arr, 0.01, 1)
    if kind == "pickle":
        return [pickle.dumps(Evil(marker))]
    doc = msgpack.unpackb(good[0], raw=False)
    if kind == "object-dtype":
        doc["head"]["dtype"] = "|O"
        doc["data"] = pickle.dumps(Evil(marker))
    elif kind == "huge-shape":
        shape = list(arr.shape) or [1]
        doc["head"]["shape"] = [shape[0] * 10**6, *shape[1:]]
        doc["head"]["nbytes"] = arr.dtype.itemsize * int(np.prod(shape)) * 10**6
    elif kind == "truncated":
        doc["data"] = doc["data"][: len(doc["data"]) // 2]
    elif kind == "garbage":
        return [b"\x93\x01\xc1" + bytes(range(40))]
    return [msgpack.packb(doc, use_bin_type=True), *good[1:]]


@dataclass
class FakeVolunteer:
    name: str
    behaviour: str = "honest"  # honest | liar | silent | slow | refuse | one of MALFORMED
    delay: float = 0.0
    marker: Path = Path("/nonexistent/marker")
    units: int = 0
    beating: bool = True
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


class FakeLink:
    """What the run loop needs of :class:`~distal.runtime.pool.link.Link`, in process."""

    def __init__(self, beat: float = 0.05) -> None:
        self.events: asyncio.Queue[tuple] = asyncio.Queue()
        self.volunteers: dict[str, FakeVolunteer] = {}
        self.stored: dict[str, memoryview] = {}
        self.kv: dict[str, bytes] = {}
        self.sent: list[tuple[str, UnitMsg]] = []
        self.controls: list[tuple[str, bytes]] = []
        self.shut: list[str] = []
        self.consumers: dict[str, float] = {}
        self.beat = beat
        self.puts = 0

    def join(self, v: FakeVolunteer) -> FakeVolunteer:
        self.volunteers[v.name] = v
        v.tasks.append(asyncio.ensure_future(self._beat(v)))
        return v

    async def _beat(self, v: FakeVolunteer) -> None:
        while True:
            if v.beating:
                await self.events.put(("hello", v.name, wire.hello((1,), 1, 1 << 30, 2, "f")))
            await asyncio.sleep(self.beat)

    def stop(self) -> None:
        for v in self.volunteers.values():
            for t in v.tasks:
                t.cancel()

    # -- the Link interface --------------------------------------------------------------

    async def consumer(self, name: str, ack_wait: float) -> None:
        self.consumers[name] = ack_wait

    async def send(self, name: str, raw: bytes) -> None:
        unit = wire.read_unit(raw)
        self.sent.append((name, unit))
        v = self.volunteers[name]
        v.tasks.append(asyncio.ensure_future(self._answer(v, unit)))

    async def shut_out(self, name: str) -> None:
        self.shut.append(name)

    async def control(self, name: str, msg: bytes) -> None:
        self.controls.append((name, msg))

    async def put_object(self, digest: str, data: memoryview) -> None:
        if digest not in self.stored:
            self.puts += 1
        self.stored[digest] = data

    async def kv_get(self, key: str) -> bytes | None:
        return self.kv.get(key)

    async def kv_put(self, key: str, value: bytes) -> None:
        self.kv[key] = value

    # -- a volunteer's side -----------------------------------------------------------------

    def compute(self, unit: UnitMsg) -> np.ndarray:
        prog = program.decode(bytes(self.stored[unit.program.digest]))
        arrays = [
            np.frombuffer(self.stored[b.digest], b.dtype).reshape(b.shape) for b in unit.blocks
        ]
        out, _, _ = child.compute(prog, arrays, {})
        return out

    async def _answer(self, v: FakeVolunteer, unit: UnitMsg) -> None:
        if v.behaviour == "silent":
            return
        await asyncio.sleep(v.delay)
        if v.behaviour == "refuse":
            parts = [wire.report("refuse", "not this one")]
        else:
            arr = self.compute(unit)
            if v.behaviour == "liar":
                arr = arr + 1.0
            if v.behaviour in MALFORMED:
                parts = malformed_reply(v.behaviour, arr, v.marker)
            else:
                parts = wire.result_messages(arr, 0.01 + v.delay, unit.work)
        v.units += 1
        for p in parts:
            await self.events.put(("result", v.name, (unit.run, unit.attempt), p))


def run_loop(coro: Any) -> Any:
    """Run ``coro`` on a fresh loop (cancelling what the fakes left running)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        for t in asyncio.all_tasks(loop):
            t.cancel()
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.sleep(0))
        loop.close()
