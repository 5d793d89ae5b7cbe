"""Donors behind slow links: each volunteer in a network namespace that reaches only the
coordinator's address.

Unlike the Dask harness (``tests/dask/netns_pool.py``, whose workers share a bridge because
Dask needs them to reach each other), every namespace here has one veth pair of its own to
the root namespace on a /30 of its own, and no route but that link: a volunteer can reach
the coordinator's address on its link and nothing else. The root namespace does not forward
(``net.ipv4.ip_forward`` must be 0, checked), so there is no path between volunteers; the
coordinator's NATS server listens on loopback only, reached through the latency relay
(``relay.py``, a process of its own) on each link's root address, so nothing outside
reaches it either, and the volunteers listen on nothing (:meth:`Donors.listening`). Both
ends of every veth carry a ``tc ... tbf`` qdisc of ``rate_mbit``.

This kernel has no packet filter modules (no ``iptables``, no ``nft``, no tc actions), so
an inbound connection attempt into a namespace is refused by the absence of a listener,
not dropped as a NAT would drop it; the tests check that nothing listens there.

:func:`donors` builds the links and the relay and always tears everything down (processes,
relay, veths, namespaces), skipping the calling test where namespaces cannot be made.
Shared with ``benchmarks/pool.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "dask"))

from netns_pool import _quiet, _run, _SetupFailed  # noqa: E402

_COUNTER = itertools.count()
RELAY_PORT = 14222  # on each link's root address: one port fits all (one address a link)


class CannotBuild(Exception):
    """Namespaces cannot be made here (the reason is the message): the caller skips."""


@dataclass
class Donor:
    """One namespace: its veth ends, its /30 and where its volunteer connects."""

    netns: str
    root_dev: str
    ns_dev: str
    root_addr: str
    ns_addr: str

    @property
    def server(self) -> str:
        return f"tls://{self.root_addr}:{RELAY_PORT}"


@dataclass
class Donors:
    """The namespaces built (what :func:`donors` yields)."""

    links: list[Donor]
    rate_mbit: float
    delay_s: float
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def rate_bytes(self) -> float:
        return self.rate_mbit * 1e6 / 8

    def start(self, k: int, name: str, cmd: list[str], env: dict[str, str],
              cores: list[int] | None = None) -> subprocess.Popen:  # fmt: skip
        """Run ``cmd`` in namespace ``k`` (its output in ``logs/NAME.log``), on ``cores``."""

        def pin() -> None:  # pragma: no cover - runs in the child
            if cores is not None:
                os.sched_setaffinity(0, cores)

        log = open(self.logs / f"{name}.log", "wb")
        p = subprocess.Popen(["ip", "netns", "exec", self.links[k].netns, *cmd], stdout=log,
                             stderr=subprocess.STDOUT, env=env, preexec_fn=pin)  # fmt: skip
        log.close()
        self.procs[name] = p
        return p

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def counters(self) -> dict[str, tuple[int, int]]:
        """Bytes per link so far: (into the namespace, out of it)."""
        out = {}
        for lk in self.links:
            stats = Path("/sys/class/net") / lk.root_dev / "statistics"
            out[lk.netns] = (int((stats / "tx_bytes").read_text()),
                             int((stats / "rx_bytes").read_text()))  # fmt: skip
        return out

    def reaches(self, k: int, addr: str, port: int) -> bool:
        """Whether namespace ``k`` can open a TCP connection to ``addr:port``."""
        code = (
            "import socket,sys\ns=socket.socket();s.settimeout(2)\n"
            f"try:\n s.connect(({addr!r},{port}));print('yes')\n"
            "except OSError as e:\n print('no', e)\n"
        )
        got = subprocess.run(["ip", "netns", "exec", self.links[k].netns, sys.executable, "-c",
                              code], capture_output=True, text=True, timeout=20)  # fmt: skip
        return got.stdout.startswith("yes")

    def listening(self, k: int) -> list[str]:
        """TCP sockets listening in namespace ``k`` (``/proc/net/tcp`` state 0A)."""
        got = subprocess.run(["ip", "netns", "exec", self.links[k].netns, "cat",
                              "/proc/net/tcp", "/proc/net/tcp6"], capture_output=True,
                             text=True, timeout=20)  # fmt: skip
        rows = [r.split() for r in got.stdout.splitlines()[1:]]
        return [r[1] for r in rows if len(r) > 3 and r[3] == "0A"]


def _subnet() -> str:
    routes = _run(["ip", "-4", "route", "show", "table", "all"])
    pid = os.getpid()
    for k in range(512):
        a, b = 100 + (pid + k) // 256 % 50, (pid + k) % 256
        if f"10.{a}.{b}." not in routes:
            return f"10.{a}.{b}"
    raise _SetupFailed("no free 10.x.y.0/24 for the donors' links")


@contextlib.contextmanager
def donors(
    n: int, nats_port: int, rate_mbit: float = 40.0, delay_s: float = 0.010,
    burst: int = 32 * 1024, logs: Path | None = None,
) -> Iterator[Donors]:  # fmt: skip
    """``n`` namespaces, each a donor behind a ``rate_mbit`` link with ``delay_s`` each way,
    reaching the NATS server on ``127.0.0.1:nats_port`` through the relay.

    Raises :class:`CannotBuild` (nothing left behind) when the first namespace, veth or tbf
    cannot be made; any later failure is an error. Everything is removed on the way out.
    """
    tag = f"{os.getpid():x}p{next(_COUNTER)}"
    links = [Donor(f"distal-{tag}-{i}", f"dlr{tag}x{i}", f"dln{tag}x{i}", "", "")
             for i in range(n)]  # fmt: skip
    made_ns: list[str] = []
    made_dev: list[str] = []
    relays: list[subprocess.Popen[str]] = []
    logs = logs or Path(os.environ.get("TMPDIR", "/tmp"))
    tbf = ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "100ms"]
    try:
        try:
            if os.geteuid() != 0:
                raise _SetupFailed("not root: network namespaces need CAP_NET_ADMIN")
            fwd = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
            if fwd != "0":
                raise _SetupFailed("ip_forward is on: volunteers could reach each other")
            net = _subnet()
            for i, lk in enumerate(links):
                _run(["ip", "netns", "add", lk.netns])
                made_ns.append(lk.netns)
                _run(["ip", "-n", lk.netns, "link", "set", "lo", "up"])
                _run(["ip", "link", "add", lk.root_dev, "type", "veth", "peer", "name",
                      lk.ns_dev, "netns", lk.netns])  # fmt: skip
                made_dev.append(lk.root_dev)
                _run(["tc", "qdisc", "add", "dev", lk.root_dev, "root", *tbf])
                _run(["tc", "-n", lk.netns, "qdisc", "add", "dev", lk.ns_dev, "root", *tbf])
                lk.root_addr, lk.ns_addr = f"{net}.{4 * i + 1}", f"{net}.{4 * i + 2}"
        except (_SetupFailed, OSError) as e:
            if made_ns[1:]:
                raise RuntimeError(str(e)) from e
            for dev in made_dev:
                _quiet(["ip", "link", "del", dev])
            for ns in made_ns:
                _quiet(["ip", "netns", "del", ns])
            made_ns, made_dev = [], []
            raise CannotBuild(f"cannot build donor namespaces: {e}") from e
        for lk in links:
            _run(["ip", "addr", "add", f"{lk.root_addr}/30", "dev", lk.root_dev])
            _run(["ip", "link", "set", lk.root_dev, "up"])
            _run(["ip", "-n", lk.netns, "addr", "add", f"{lk.ns_addr}/30", "dev", lk.ns_dev])
            _run(["ip", "-n", lk.netns, "link", "set", lk.ns_dev, "up"])
        # one relay process a link: a Python relay carries a few MB/s per core
        for lk in links:
            spec = f"{lk.root_addr}:{RELAY_PORT}=127.0.0.1:{nats_port}"
            r = subprocess.Popen([sys.executable, str(HERE / "relay.py"), str(delay_s), spec],
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
            relays.append(r)
            assert r.stdout is not None
            if r.stdout.readline().strip() != "ready":
                raise RuntimeError("a latency relay did not start")
        yield Donors(links, rate_mbit, delay_s, logs)
    finally:
        for relay in relays:
            relay.terminate()
        for relay in relays:
            with contextlib.suppress(subprocess.TimeoutExpired):
                relay.wait(10)
            if relay.poll() is None:
                relay.kill()
        for dev in made_dev:
            _quiet(["ip", "link", "del", dev])
        for ns in made_ns:
            _quiet(["ip", "netns", "del", ns])


def overlimits(d: Donors) -> int:
    """Times a tbf qdisc of the donors' links held a packet back."""
    total = 0
    for lk in d.links:
        for cmd in (
            ["tc", "-s", "-j", "qdisc", "show", "dev", lk.root_dev],
            ["tc", "-n", lk.netns, "-s", "-j", "qdisc", "show", "dev", lk.ns_dev],
        ):
            for q in json.loads(_run(cmd)):
                if q.get("kind") == "tbf":
                    total += int(q.get("overlimits", 0))
    return total


__all__ = ["CannotBuild", "Donor", "Donors", "donors", "overlimits"]
