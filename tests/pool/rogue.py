"""Misbehaving volunteers for the pool's tests.

``python rogue.py --server URL MODE=CREDS [MODE=CREDS ...]`` runs, in this one process, one
volunteer per ``MODE=CREDS`` pair, each with its own connection and identity, speaking the
wire protocol as a volunteer does (hello, pull its units, read blocks with direct gets,
compute with distal's own code) and replying as ``MODE`` says:

- ``liar``: the right result plus 1 (well-formed numbers, wrong);
- ``malformed``: to its first unit, one after the other, a pickle whose unpickling would
  create ``$DISTAL_ROGUE_MARKER``, an object dtype carrying that pickle, a shape 10^6 times
  the unit's, truncated data and garbage msgpack (the first refusal excludes it and the
  coordinator drops the rest unread); ``malformed:KIND`` replies with that kind only
  (``fakes.MALFORMED``);
- ``flood``: after each right result, 64 messages of 1 MiB for attempts it never got.

``python rogue.py --server URL slow=CREDS`` instead runs the real volunteer
(:class:`~distal.runtime.pool.volunteer.Volunteer`, with its compute process and its
signal handling) that holds each result for ``$DISTAL_ROGUE_DELAY`` seconds before sending
it: a unit in progress that SIGTERM or SIGKILL interrupts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from fakes import MALFORMED, malformed_reply

from distal.runtime.pool import child, program, subjects, volunteer, wire
from distal.runtime.pool.blocks import read_object
from distal.runtime.pool.credentials import Credentials
from distal.runtime.pool.sandbox import Limits

log = logging.getLogger("distal.volunteer")


class Slow(volunteer.Volunteer):
    async def _reply(self, unit: wire.UnitMsg, *parts: bytes) -> None:
        log.info("%s: holding %s", self.name, unit.attempt)
        await asyncio.sleep(float(os.environ.get("DISTAL_ROGUE_DELAY", "30")))
        await super()._reply(unit, *parts)


async def _fetch(nc: Any, ref: wire.BlockRef) -> bytes:
    return b"".join([c async for c in read_object(nc, ref.digest, ref.nbytes)])


async def rogue(mode: str, creds: Credentials, server: str, marker: Path) -> None:
    """One misbehaving volunteer (see the module docstring)."""
    import nats

    opts = creds.connect_options((server,))
    nc = await nats.connect(**opts)
    js = nc.jetstream()
    name = creds.user
    log.info("%s: connected", name)

    async def beat() -> None:
        while True:
            with contextlib.suppress(Exception):
                await nc.publish(subjects.hello_subject(name), wire.hello((1,), 1, 0, 2, mode))
            await asyncio.sleep(2.0)

    beating = asyncio.ensure_future(beat())
    sub = None
    try:
        while True:
            try:
                if sub is None:
                    sub = await js.pull_subscribe_bind(durable=name, stream=subjects.UNITS_STREAM)
                msgs = await sub.fetch(1, timeout=2.0)
            except Exception:
                await asyncio.sleep(0.2)
                continue
            for msg in msgs:
                unit = wire.read_unit(msg.data)
                prog = program.decode(await _fetch(nc, unit.program))
                arrays = [np.frombuffer(await _fetch(nc, b), b.dtype).reshape(b.shape)
                          for b in unit.blocks]  # fmt: skip
                arr, _, _ = child.compute(prog, arrays, {})
                if mode == "liar":
                    parts = wire.result_messages(arr + 1.0, 0.01, unit.work)
                elif mode.startswith("malformed"):
                    kinds = MALFORMED if mode == "malformed" else (mode.split(":", 1)[1],)
                    parts = [p for k in kinds for p in malformed_reply(k, arr, marker)]
                else:
                    parts = wire.result_messages(arr, 0.01, unit.work)
                log.info("%s: replies to %s (%s)", name, unit.attempt, mode)
                subject = subjects.result_subject(name, unit.run, unit.attempt)
                for p in parts:
                    await js.publish(subject, p, timeout=30)
                await msg.ack()
                if mode == "flood":
                    for k in range(64):
                        junk = msgpack.packb({"v": 1, "kind": "result", "data": b"\0" * (1 << 20)})
                        with contextlib.suppress(Exception):
                            await js.publish(subjects.result_subject(name, unit.run, f"x{k}"),
                                             junk, timeout=5)  # fmt: skip
    finally:
        beating.cancel()
        with contextlib.suppress(Exception):
            await nc.close()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = sys.argv[1:]
    server = args[args.index("--server") + 1]
    pairs = [a.split("=", 1) for a in args if "=" in a and not a.startswith("--")]
    if len(pairs) == 1 and pairs[0][0] == "slow":
        v = Slow(Credentials.read(pairs[0][1]), Limits(1, None), (server,))
        asyncio.run(v.run())
        return 0
    marker = Path(os.environ.get("DISTAL_ROGUE_MARKER", "/nonexistent/marker"))

    async def all_of() -> None:
        await asyncio.gather(
            *(rogue(mode, Credentials.read(path), server, marker) for mode, path in pairs)
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(all_of())
    return 0


if __name__ == "__main__":
    sys.exit(main())
