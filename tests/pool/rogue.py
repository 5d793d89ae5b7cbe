"""A volunteer that misbehaves, for the pool's tests: ``python rogue.py MODE CREDS --server URL``.

It is the real volunteer (:class:`distal.runtime.pool.volunteer.Volunteer`: the same
connection, pulling, fetching and compute process) with its reply replaced:

- ``liar``: adds 1 to every result (well-formed numbers, wrong);
- ``malformed``: replies, unit after unit, with a pickle whose unpickling would create
  ``$DISTAL_ROGUE_MARKER``, an object dtype carrying that pickle, a shape 10^6 times the
  unit's, truncated data, and garbage msgpack (then starts over);
- ``slow``: computes correctly after ``$DISTAL_ROGUE_DELAY`` seconds (a unit in progress
  that SIGTERM interrupts);
- ``flood``: after each well-formed result, publishes 64 further 1 MiB messages for
  attempts it never got (the coordinator must refuse, not buffer, them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

from fakes import malformed_reply

from distal.runtime.pool import subjects, volunteer, wire
from distal.runtime.pool.credentials import Credentials
from distal.runtime.pool.sandbox import Limits


class Rogue(volunteer.Volunteer):
    def __init__(self, mode: str, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.mode = mode
        self.count = 0
        self.marker = Path(os.environ.get("DISTAL_ROGUE_MARKER", "/nonexistent/marker"))

    async def _reply(self, unit: wire.UnitMsg, *parts: bytes) -> None:
        if self.mode == "slow":
            logging.getLogger("distal.volunteer").info("%s: holding %s", self.name, unit.attempt)
            await asyncio.sleep(float(os.environ.get("DISTAL_ROGUE_DELAY", "30")))
            return await super()._reply(unit, *parts)
        if self.mode in ("liar", "malformed") and parts and len(parts[0]) > 0:
            import msgpack
            import numpy as np

            doc = msgpack.unpackb(parts[0], raw=False)
            if doc.get("kind") == "result":
                head = doc["head"]
                data = b"".join(msgpack.unpackb(p, raw=False)["data"] for p in parts)
                arr = np.frombuffer(data, np.dtype(head["dtype"])).reshape(head["shape"])
                if self.mode == "liar":
                    parts = tuple(wire.result_messages(arr + 1.0, head["seconds"], 1))
                else:
                    kinds = ("pickle", "object-dtype", "huge-shape", "truncated", "garbage")
                    kind = kinds[self.count % len(kinds)]
                    self.count += 1
                    logging.getLogger("distal.volunteer").info("%s: sends %s", self.name, kind)
                    parts = tuple(malformed_reply(kind, arr, self.marker))
        await super()._reply(unit, *parts)
        if self.mode == "flood":
            for k in range(64):
                subject = subjects.result_subject(self.name, unit.run, f"x{k}")
                try:
                    await self.js.publish(subject, b"\0" * (1 << 20), timeout=5)
                except Exception:
                    break


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    mode, creds = sys.argv[1], sys.argv[2]
    servers = (
        tuple(sys.argv[sys.argv.index("--server") + 1 :][:1]) if "--server" in sys.argv else None
    )
    v = Rogue(mode, Credentials.read(creds), Limits(1, None), servers)
    stats = asyncio.run(v.run())
    print(f"rogue {mode}: {stats.units} unit(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
