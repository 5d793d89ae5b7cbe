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

    def stop_all(self) -> None:
        """End every volunteer the earlier tests left (each test starts with none)."""
        for p in self.donors.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self.donors.procs.clear()


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
    donor_pool.stop_all()
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


def test_a_checkpointed_cg_session_survives_the_same(donor_pool: DonorPool, tmp_path: Path) -> None:
    """A checkpointed CG session on donors: one volunteer SIGKILLed mid-loop and a newcomer
    joining, a liar and a garbler excluded; x bit for bit the local runtime's, and close to
    scipy's solution."""
    sps = pytest.importorskip("scipy.sparse")
    spla = pytest.importorskip("scipy.sparse.linalg")
    psutil = pytest.importorskip("psutil")
    marker = tmp_path / "ran"
    env = {"DISTAL_ROGUE_MARKER": str(marker)}
    donor_pool.stop_all()
    for name in ("cg-a", "cg-b"):
        donor_pool.volunteer(0 if name == "cg-a" else 1, name)
    donor_pool.rogue(2, "cg-liar", "liar", env)
    donor_pool.rogue(3, "cg-garbler", "malformed", env)
    for name in ("cg-a", "cg-b", "cg-liar", "cg-garbler"):
        wait_for(lambda n=name: "connected" in donor_pool.log(n), 120, f"{name} to connect")
    m = 12
    t = sps.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    A = sps.csr_array(sps.kron(t, sps.identity(m)) + sps.kron(sps.identity(m), t))
    b = np.random.default_rng(9).standard_normal(m * m)
    creds = str(donor_pool.dir.path / "coordinator.creds")
    runs: list[Any] = []

    class Watched(dl.Session):
        def run_named(self, kernel, names, inputs=None, **kw):  # type: ignore[no-untyped-def]
            res = super().run_named(kernel, names, inputs, **kw)
            runs.append(res.extra.get("summary"))
            if len(runs) == 12:  # mid-loop: one volunteer dies, a new one comes
                donor_pool.donors.procs["cg-b"].kill()
                donor_pool.volunteer(4, "cg-new")
                # (the loop goes on once it is in: on a loaded machine its start could
                # otherwise outlast the loop)
                wait_for(lambda: "connected" in donor_pool.log("cg-new"), 120, "cg-new")
            return res

    me = psutil.Process()
    rss0 = me.memory_info().rss
    # four processors: a kernel has a unit for each of the four volunteers
    with Watched("pool", machine=4, pool=creds, checkpoint=str(tmp_path / "ck"),
                 checkpoint_key=b"k" * 16) as sess:  # fmt: skip
        x, its = dl.apps.cg(A, b, tol=1e-10, session=sess)
    with dl.Session("local", machine=4) as sess:
        x_local, its_local = dl.apps.cg(A, b, tol=1e-10, session=sess)
    assert its == its_local
    assert np.array_equal(np.asarray(x), np.asarray(x_local))
    np.testing.assert_allclose(np.asarray(x), spla.spsolve(A.tocsc(), b), rtol=1e-8, atol=1e-9)
    summaries = [s for s in runs if s is not None]
    excluded = {n for s in summaries for n in s.excluded_volunteers}
    assert {"cg-liar", "cg-garbler"} <= excluded, donor_pool.log("cg-garbler")[-3000:]
    why = {n: r for s in summaries for n, r in s.excluded_volunteers.items()}
    assert "cg-a" not in excluded, why
    assert any(r["volunteer"] == "cg-garbler" for s in summaries for r in s.replies_refused)
    assert any(r["volunteer"] == "cg-liar" for s in summaries for r in s.units_rejected)
    done_by = {n for s in summaries for n in s.units_by_volunteer}
    assert "cg-new" in done_by, (len(runs), donor_pool.log("cg-new")[-2000:])
    assert not done_by & {"cg-liar", "cg-garbler"}
    assert not marker.exists()
    assert me.memory_info().rss - rss0 < 300 << 20
