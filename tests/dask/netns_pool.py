"""A Dask pool behind a real, slow network: workers in Linux network namespaces.

The other Dask tests run every worker on loopback, where a block of any size arrives at
once; nothing there can show what a pool of machines behind slow links does. Here each
worker runs in its own network namespace, joined to the root namespace by a veth pair
whose root ends are ports of one bridge (so worker-to-worker traffic is switched on the
bridge: no IP forwarding, no firewall rule is touched). Both ends of every veth carry a
``tc ... tbf`` qdisc: everything into and out of a worker crosses a link of ``rate_mbit``.

This kernel has no ``netem``, so the latency is added by :class:`DelayRelay`, a small TCP
relay in the test process: the scheduler and every worker are reached only through it
(the workers advertise the relay's address with ``--contact-address``), and it holds each
chunk it forwards for ``delay_s`` before writing it on. Every connection of the pool --
worker to scheduler, client to scheduler, worker to worker, driver to worker -- therefore
sees ``delay_s`` each way on top of the shaped link.

:func:`netns_pool` builds all of this, yields a :class:`NetnsPool` with a connected
``distributed.Client``, and always tears it down again (processes, relay, veths,
namespaces, bridge), on failure and on ``KeyboardInterrupt`` too. Names carry this
process's id and a counter, so a leftover of a crashed run cannot collide with a new one.
Where namespaces cannot be made (not root, no ``ip``, no tbf), the test is skipped with
the failing command and its error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

WORKER_PORT = 40000  # each worker has a namespace of its own, so one port fits all
_COUNTER = itertools.count()


class _SetupFailed(Exception):
    """A command that builds the pool failed (the command and its error are the message)."""


def _run(cmd: list[str]) -> str:
    """Run one setup command; raise :class:`_SetupFailed` naming it and its error."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise _SetupFailed(f"`{' '.join(cmd)}` failed: {e}") from e
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip()
        raise _SetupFailed(f"`{' '.join(cmd)}` failed (exit {done.returncode}): {err}")
    return done.stdout


def _quiet(cmd: list[str]) -> None:
    """A teardown command: its failure (the thing is already gone) is not an error."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(cmd, capture_output=True, timeout=30, check=False)


def _free_subnet() -> str:
    """``10.A.B`` of a /24 no route of this machine uses (a leftover bridge included)."""
    routes = _run(["ip", "-4", "route", "show", "table", "all"])
    pid = os.getpid()
    for k in range(512):
        a, b = 200 + (pid + k) // 256 % 50, (pid + k) % 256
        if f"10.{a}.{b}." not in routes:
            return f"10.{a}.{b}"
    raise _SetupFailed("no free 10.x.y.0/24 subnet for the pool's bridge")


class DelayRelay:
    """TCP forwarders that hold every chunk ``delay`` seconds: a one-way latency.

    One asyncio loop in a daemon thread serves every forwarder. Each direction of a
    connection is a delay line: a reader stamps each chunk with its arrival time and
    queues it, a writer sends it once ``delay`` has passed, so chunks keep their order
    and the delay does not cap throughput (a bounded queue passes back-pressure on).
    """

    #: bytes read at a time (a relay carrying many MB/s per link wants larger reads)
    chunk = 1 << 16

    def __init__(self, host: str, delay: float) -> None:
        self.host, self.delay = host, delay
        self.loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def forward(self, target: tuple[str, int]) -> int:
        """Listen on a fresh port of ``host`` that relays to ``target``; return the port."""
        return asyncio.run_coroutine_threadsafe(self._serve(target), self.loop).result(10)

    async def _serve(self, target: tuple[str, int]) -> int:
        async def accepted(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                await self._connection(r, w, target)
            finally:
                self._tasks.discard(task)

        server = await asyncio.start_server(accepted, self.host, 0)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _connection(
        self, r: asyncio.StreamReader, w: asyncio.StreamWriter, target: tuple[str, int]
    ) -> None:
        try:
            tr, tw = await asyncio.open_connection(*target)
        except OSError:
            w.close()
            return
        pipes = [asyncio.ensure_future(self._pipe(r, tw)), asyncio.ensure_future(self._pipe(tr, w))]
        try:
            # both ends closed (EOF each way) or one failed (a reset): the connection is over
            await asyncio.wait(pipes, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for p in pipes:
                p.cancel()
            for x in (w, tw):
                x.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        line: asyncio.Queue[tuple[float, bytes | Exception]] = asyncio.Queue(maxsize=64)

        async def feed() -> None:
            try:
                while True:
                    data = await reader.read(self.chunk)
                    await line.put((loop.time() + self.delay, data))
                    if not data:
                        return
            except Exception as e:  # a reset: the writer raises it once it gets there
                await line.put((loop.time(), e))

        feeder = asyncio.ensure_future(feed())
        try:
            while True:
                due, data = await line.get()
                if isinstance(data, Exception):
                    raise data
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        finally:
            feeder.cancel()

    def close(self) -> None:
        """Stop every forwarder and connection, then the loop and its thread."""

        async def stop() -> None:
            for s in self._servers:
                s.close()
            for t in list(self._tasks):
                t.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


@dataclass
class Link:
    """One worker's link: the veth end in the root namespace and the one in ``netns``."""

    netns: str
    root_dev: str
    ns_dev: str
    address: str


@dataclass
class NetnsPool:
    """A running pool behind shaped links (what :func:`netns_pool` yields)."""

    client: Any
    links: list[Link]
    rate_mbit: float
    burst: int
    delay_s: float
    bridge_address: str
    logs: Path

    @property
    def rate_bytes(self) -> float:
        """The tbf rate in bytes a second."""
        return self.rate_mbit * 1e6 / 8

    def counters(self) -> dict[str, tuple[int, int]]:
        """Bytes per worker link so far: (into the namespace, out of it), read from the
        root end's kernel counters (its tx is the link into the namespace, its rx what
        the namespace's end sent). Both directions are shaped."""
        out = {}
        for lk in self.links:
            stats = Path("/sys/class/net") / lk.root_dev / "statistics"
            tx = int((stats / "tx_bytes").read_text())
            rx = int((stats / "rx_bytes").read_text())
            out[lk.netns] = (tx, rx)
        return out

    def overlimits(self) -> int:
        """Times any of the pool's tbf qdiscs held a packet back for want of tokens."""
        total = 0
        for lk in self.links:
            for cmd in (
                ["tc", "-s", "-j", "qdisc", "show", "dev", lk.root_dev],
                ["tc", "-n", lk.netns, "-s", "-j", "qdisc", "show", "dev", lk.ns_dev],
            ):
                for q in json.loads(_run(cmd)):
                    if q.get("kind") == "tbf":
                        total += int(q.get("overlimits", 0))
        return total


def _log_tail(logs: Path, chars: int = 3000) -> str:
    """The end of the scheduler's and workers' logs (for the error when a pool won't start)."""
    parts = []
    for f in sorted(logs.glob("*.log")):
        parts.append(f"--- {f.name}\n{f.read_text(errors='replace')[-chars:]}")
    return "\n".join(parts)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _worker_env() -> dict[str, str]:
    """This process's environment, with the distal being tested importable by absolute
    path (a relative ``PYTHONPATH=src`` does not survive another working directory) and
    one BLAS thread per worker (the machine has two shared cores)."""
    import distal

    src = str(Path(distal.__file__).resolve().parents[1])
    path = [src, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the scheduler exited ({proc.returncode}) before starting")
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads(path.read_text()))
        time.sleep(0.1)
    raise RuntimeError(f"the scheduler wrote no {path.name} in {timeout} s")


@contextlib.contextmanager
def netns_pool(
    n: int = 2,
    rate_mbit: float = 40.0,
    delay_s: float = 0.010,
    burst: int = 32 * 1024,
    queue_latency: str = "100ms",
) -> Iterator[NetnsPool]:
    """``n`` single-threaded ``dask worker`` processes, each in a network namespace of its
    own behind a ``rate_mbit`` tbf link each way and ``delay_s`` of relay latency each way;
    a ``dask scheduler`` process in the root namespace; a connected client.

    Skips the calling test (naming the command and its error) if the first namespace,
    veth or tbf qdisc cannot be made; any later failure is an error. Everything made is
    removed on the way out, whatever happened.
    """
    distributed = pytest.importorskip("distributed", reason="needs distributed (dask extra)")
    # pid in hex (6 digits at most), "g", this process's count of pools: unambiguous, and
    # "dlv" + tag + "x" + worker fits a device name's 15 characters
    tag = f"{os.getpid():x}g{next(_COUNTER)}"
    bridge = f"dlb{tag}"
    links = [Link(f"distal-{tag}-{i}", f"dlv{tag}x{i}", f"dlp{tag}x{i}", "") for i in range(n)]
    made_ns: list[str] = []
    made_dev: list[str] = []
    made_bridge = False
    procs: list[subprocess.Popen[bytes]] = []
    relay: DelayRelay | None = None
    client: Any = None
    logs = Path(tempfile.mkdtemp(prefix=f"distal-netns-{tag}-"))
    tbf = ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", queue_latency]
    try:
        try:
            if shutil.which("ip") is None or shutil.which("tc") is None:
                raise _SetupFailed("`ip` or `tc` (iproute2) is not on PATH")
            net = _free_subnet()
            for i, lk in enumerate(links):
                _run(["ip", "netns", "add", lk.netns])
                made_ns.append(lk.netns)
                _run(["ip", "-n", lk.netns, "link", "set", "lo", "up"])
                peer = ["peer", "name", lk.ns_dev, "netns", lk.netns]
                _run(["ip", "link", "add", lk.root_dev, "type", "veth", *peer])
                made_dev.append(lk.root_dev)
                _run(["tc", "qdisc", "add", "dev", lk.root_dev, "root", *tbf])
                _run(["tc", "-n", lk.netns, "qdisc", "add", "dev", lk.ns_dev, "root", *tbf])
                lk.address = f"{net}.{10 + i}"
        except _SetupFailed as e:
            if made_ns[1:] or made_dev[1:]:  # the first pair worked: a harness bug, not the host
                raise RuntimeError(str(e)) from e
            pytest.skip(f"cannot build a network-namespace pool: {e}")
        _run(["ip", "link", "add", bridge, "type", "bridge"])
        made_bridge = True
        host = f"{net}.1"
        _run(["ip", "addr", "add", f"{host}/24", "dev", bridge])
        _run(["ip", "link", "set", bridge, "up"])
        for lk in links:
            _run(["ip", "link", "set", lk.root_dev, "master", bridge])
            _run(["ip", "link", "set", lk.root_dev, "up"])
            _run(["ip", "-n", lk.netns, "addr", "add", f"{lk.address}/24", "dev", lk.ns_dev])
            _run(["ip", "-n", lk.netns, "link", "set", lk.ns_dev, "up"])

        env = _worker_env()
        relay = DelayRelay(host, delay_s)
        sched_file = logs / "scheduler.json"
        opts = ["--port", "0", "--no-dashboard", "--scheduler-file", str(sched_file)]
        cmd = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", host, *opts]
        with open(logs / "scheduler.log", "wb") as log:
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=log, env=env, cwd=logs))
        sched = _wait_for_file(sched_file, procs[0], 60)["address"]
        s_host, s_port = sched.removeprefix("tcp://").rsplit(":", 1)
        entry = f"tcp://{host}:{relay.forward((s_host, int(s_port)))}"
        for i, lk in enumerate(links):
            contact = f"tcp://{host}:{relay.forward((lk.address, WORKER_PORT))}"
            opts = [
                *("--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", f"w{i}"),
                *("--listen-address", f"tcp://{lk.address}:{WORKER_PORT}"),
                *("--contact-address", contact, "--memory-limit", "0", "--death-timeout", "60"),
                *("--local-directory", str(logs / f"w{i}")),
            ]
            cmd = ["ip", "netns", "exec", lk.netns, sys.executable, "-m"]
            cmd += ["distributed.cli.dask_worker", entry, *opts]
            with open(logs / f"worker{i}.log", "wb") as log:
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=log, env=env, cwd=logs))
        try:
            client = distributed.Client(entry, timeout=60)
            client.wait_for_workers(n, timeout=90)
        except (OSError, TimeoutError) as e:
            raise RuntimeError(f"the pool did not start: {e}\n{_log_tail(logs)}") from e
        yield NetnsPool(client, links, rate_mbit, burst, delay_s, host, logs)
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=10)
        for p in reversed(procs):
            with contextlib.suppress(Exception):
                _stop(p)
        if relay is not None:
            relay.close()
        for dev in made_dev:  # synchronous, unlike a namespace's deletion
            _quiet(["ip", "link", "del", dev])
        for ns in made_ns:
            _quiet(["ip", "netns", "del", ns])
        if made_bridge:
            _quiet(["ip", "link", "del", bridge])
        shutil.rmtree(logs, ignore_errors=True)
