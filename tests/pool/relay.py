"""A latency relay in a process of its own: ``python relay.py DELAY HOST:PORT=TARGET:PORT ...``.

The kernel here has no ``netem``, so the pool's netns tests add latency with the Dask
tests' :class:`DelayRelay` (``tests/dask/netns_pool.py``): every chunk waits ``DELAY``
seconds each way. Running it outside the test process keeps its work off the coordinator's
interpreter (one GIL would otherwise serve both). Prints ``ready`` once it listens; stops
on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dask"))

from netns_pool import DelayRelay


class FixedRelay(DelayRelay):
    """:class:`DelayRelay` listening on a given port (the volunteers' credentials name it),
    reading 1 MiB at a time (several MB/s a link through one interpreter)."""

    chunk = 1 << 20

    def forward_at(self, port: int, target: tuple[str, int]) -> int:
        async def serve() -> int:
            async def accepted(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                assert task is not None
                self._tasks.add(task)
                try:
                    await self._connection(r, w, target)
                finally:
                    self._tasks.discard(task)

            server = await asyncio.start_server(accepted, self.host, port)
            self._servers.append(server)
            return int(server.sockets[0].getsockname()[1])

        return asyncio.run_coroutine_threadsafe(serve(), self.loop).result(10)


def main() -> int:
    import logging

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # connections cut at the end
    delay = float(sys.argv[1])
    relays = []
    for spec in sys.argv[2:]:
        here, there = spec.split("=")
        host, port = here.rsplit(":", 1)
        thost, tport = there.rsplit(":", 1)
        r = FixedRelay(host, delay)
        r.forward_at(int(port), (thost, int(tport)))
        relays.append(r)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    for r in relays:
        r.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
