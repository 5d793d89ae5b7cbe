"""The pool with donors behind slow links (``netns.donors``): each volunteer in a network
namespace that reaches only the coordinator's address, 40 Mbit/s tbf each way, 10 ms of
relay latency each way. A run still finishes exact while one volunteer is SIGKILLed
holding units and a new one joins, one lies with well-formed numbers and one sends
malformed replies; the latter two are excluded and nothing they sent runs.

Skipped, with the reason, where namespaces cannot be made (not root, no ``ip``/``tc``)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pool_kit import HERE, _have_pool, child_env, free_port, wait_for

import distal as dl
from distal.runtime.pool.driver import Job, PoolDriver
from distal.runtime.pool.engine import Engine, Options

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]

ROGUE = [sys.executable, str(HERE / "rogue.py")]
VOLUNTEER = [sys.executable, "-m", "distal", "volunteer"]


@dataclass
class DonorPool:
    dir: Any
    server: Any
    donors: Any
    root: Path
    port: int

    def creds(self, name: str) -> Path:
        path = self.root / f"{name}.creds"
        self.dir.invite(name).write(path)
        return path

    def volunteer(self, k: int, name: str, *args: str) -> Any:
        cmd = [*VOLUNTEER, str(self.creds(name)), "--server", self.donors.links[k].server, *args]
        return self.donors.start(k, name, cmd, child_env())

    def rogue(self, k: int, name: str, mode: str, env: dict[str, str]) -> Any:
        cmd = [*ROGUE, "--server", self.donors.links[k].server, f"{mode}={self.creds(name)}"]
        return self.donors.start(k, name, cmd, {**child_env(), **env})

    def log(self, name: str) -> str:
        return self.donors.log(name)


@pytest.fixture(scope="module")
def donor_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DonorPool]:
    why = _have_pool()
    if why:
        pytest.skip(why)
    from netns import CannotBuild, donors

    from distal.runtime.pool.server import NatsServer, PoolDir

    root = tmp_path_factory.mktemp("donors")
    port = free_port()
    pd = PoolDir.create(root / "pool", port=port)
    server = NatsServer(pd, tied=True).start()
    try:
        try:
            ctx = donors(5, port, rate_mbit=40.0, delay_s=0.010, logs=root)
            d = ctx.__enter__()
        except CannotBuild as e:
            pytest.skip(str(e))
        try:
            pool = DonorPool(pd, server, d, root, port)
            yield pool
        finally:
            for p in d.procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
            ctx.__exit__(None, None, None)
    finally:
        server.stop()


def test_a_donor_reaches_the_coordinator_and_nothing_else(donor_pool: DonorPool) -> None:
    d = donor_pool.donors
    a, b = d.links[0], d.links[1]
    from netns import RELAY_PORT

    assert d.reaches(0, a.root_addr, RELAY_PORT)
    assert not d.reaches(0, b.ns_addr, RELAY_PORT)  # another donor
    assert not d.reaches(0, b.root_addr, RELAY_PORT)  # the coordinator's other links
    assert not d.reaches(0, "127.0.0.1", donor_pool.port)  # the server itself
    assert not d.listening(0)


def test_a_gemm_survives_a_killed_a_lying_and_a_malformed_volunteer(
    donor_pool: DonorPool, tmp_path: Path
) -> None:
    psutil = pytest.importorskip("psutil")
    from distal.runtime.pool.link import Link

    marker = tmp_path / "ran"
    env = {"DISTAL_ROGUE_MARKER": str(marker), "DISTAL_ROGUE_DELAY": "600"}
    donor_pool.volunteer(0, "honest")
    killed = donor_pool.rogue(1, "killed", "slow", env)
    donor_pool.rogue(2, "liar", "liar", env)
    donor_pool.rogue(3, "garbler", "malformed", env)
    for name in ("honest", "killed", "liar", "garbler"):
        wait_for(lambda n=name: "connected" in donor_pool.log(n), 120, f"{name} to connect")
    n = 1536  # 18 MB a matrix: the run outlasts a newcomer's start on its 5 MB/s link
    k = dl.algorithms.summa(n, machine=dl.Machine(4, 4), steps=2).compile()
    rng = np.random.default_rng(7)
    x = {"B": rng.integers(-3, 4, (n, n)) * 1.0, "C": rng.integers(-3, 4, (n, n)) * 1.0}
    link = Link(donor_pool.dir.coordinator()).start()
    me = psutil.Process()
    rss0 = me.memory_info().rss
    out: dict[str, Any] = {}
    try:
        engine = Engine(link, Options())

        def go() -> None:
            try:
                drv = PoolDriver(Job(k.plan, k.kernels, k.dtypes), x)
                out["run"] = drv.run(engine, lambda c: link.call(c, 360))
            except BaseException as e:  # handed to the test thread
                out["error"] = e

        t = threading.Thread(target=go)
        t0 = time.monotonic()
        t.start()
        wait_for(lambda: "holding" in donor_pool.log("killed") or "error" in out, 180,
                 "the doomed volunteer to hold a unit")  # fmt: skip
        killed.kill()  # SIGKILL: no bye, no cleanup
        donor_pool.volunteer(4, "newcomer")
        t.join(360)
        seconds = time.monotonic() - t0
    finally:
        link.close()
    assert "error" not in out, out.get("error")
    value, stats, s = out["run"]
    assert np.array_equal(value, x["B"] @ x["C"])
    assert stats.words_received == k.stats().words_received
    assert "liar" in s.excluded_volunteers
    assert {r["volunteer"] for r in s.units_rejected} == {"liar"}
    assert "garbler" in s.excluded_volunteers
    assert [r["volunteer"] for r in s.replies_refused] == ["garbler"]
    # the killed volunteer's units were placed again (gone quiet) or copied (overdue)
    assert s.reassigned + s.copies >= 1
    assert set(s.units_by_volunteer) <= {"honest", "newcomer"}
    assert s.units_by_volunteer.get("newcomer", 0) >= 1
    assert not marker.exists()
    assert me.memory_info().rss - rss0 < 300 << 20
    assert seconds < 360
