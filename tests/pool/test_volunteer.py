"""Volunteer processes on a loopback pool: computing, caching, giving a unit back on
SIGTERM, reconnecting to a restarted coordinator, and the donor's limits."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pool_kit import LocalPool, child_env, wait_for

import distal as dl
from distal.runtime.pool.driver import Job, PoolDriver
from distal.runtime.pool.engine import Engine, Options

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def _gemm(n: int = 32, grid: tuple[int, int] = (2, 2)) -> tuple[Any, dict[str, np.ndarray]]:
    k = dl.algorithms.summa(n, machine=dl.Machine(*grid), steps=2).compile()
    rng = np.random.default_rng(1)
    return k, {"B": rng.integers(-3, 4, (n, n)) * 1.0, "C": rng.integers(-3, 4, (n, n)) * 1.0}


def _run(link: Any, engine: Engine, k: Any, x: dict[str, np.ndarray]) -> Any:
    drv = PoolDriver(Job(k.plan, k.kernels, k.dtypes), x)
    value, stats, summary = drv.run(engine, lambda c: link.call(c, 200))
    assert np.array_equal(value, x["B"] @ x["C"])
    assert stats.words_received == k.stats().words_received
    return summary


def test_volunteer_processes_compute_and_a_second_run_sends_no_block(
    local_pool: LocalPool, link: Any
) -> None:
    for name in ("v1", "v2"):
        local_pool.volunteer(name)
    engine = Engine(link, Options())
    k, x = _gemm()
    s1 = _run(link, engine, k, x)
    s2 = _run(link, engine, k, x)
    assert set(s1.volunteers) == {"v1", "v2"}
    assert s1.checked >= 4
    assert s1.bytes_sent > 0
    assert s2.bytes_sent <= s1.bytes_sent // 3  # blocks found where the first run left them
    assert local_pool.stop("v1") == 0
    assert "unit(s) computed" in local_pool.log("v1")


def test_sigterm_gives_the_unit_back_and_another_volunteer_finishes_the_run(
    local_pool: LocalPool, link: Any
) -> None:
    env = {"DISTAL_ROGUE_DELAY": "60"}
    os.environ.update(env)
    try:
        slow = local_pool.rogues({"slow": "slow"}, "slow")
    finally:
        for key in env:
            os.environ.pop(key, None)
    engine = Engine(link, Options(speculate=False))
    k, x = _gemm(grid=(1, 1))  # one unit: the slow volunteer holds it
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.setdefault("s", _run(link, engine, k, x)))
    t.start()
    wait_for(lambda: "holding" in local_pool.log("slow"), 90, "the slow volunteer to hold the unit")
    t0 = time.monotonic()
    slow.send_signal(signal.SIGTERM)
    assert slow.wait(30) == 0
    assert time.monotonic() - t0 < 15
    local_pool.volunteer("fresh")
    t.join(120)
    s = out["s"]
    assert s.reassigned >= 1
    assert s.units_by_volunteer == {"fresh": 1}


def test_volunteers_reconnect_to_a_restarted_coordinator(local_pool: LocalPool) -> None:
    from distal.runtime.pool.link import Link
    from distal.runtime.pool.server import NatsServer

    local_pool.volunteer("v1")
    k, x = _gemm()
    link = Link(local_pool.dir.coordinator()).start()
    try:
        _run(link, Engine(link, Options()), k, x)
    finally:
        link.close()
    local_pool.server.kill()  # the coordinator's machine goes down
    time.sleep(2)
    local_pool.server = NatsServer(local_pool.dir, tied=True).start()
    link = Link(local_pool.dir.coordinator()).start()
    try:
        s = _run(link, Engine(link, Options()), k, x)
    finally:
        link.close()
    assert s.units_by_volunteer == {"v1": 4}
    assert local_pool.procs["v1"].poll() is None


def test_the_compute_process_runs_within_the_donors_limits(local_pool: LocalPool) -> None:
    psutil = pytest.importorskip("psutil")
    p = local_pool.volunteer("v1", "--cpus", "1", "--memory", "1.5", "--nice", "7")
    wait_for(lambda: "connected" in local_pool.log("v1"), 60, "the volunteer to connect")
    kids = psutil.Process(p.pid).children()
    assert len(kids) == 1
    c = kids[0]
    assert "distal.runtime.pool.child" in " ".join(c.cmdline())
    assert len(c.cpu_affinity()) == 1
    assert c.nice() == 7
    soft, hard = c.rlimit(psutil.RLIMIT_AS)
    assert soft == hard == int(1.5 * (1 << 30))
    assert c.environ().get("OPENBLAS_NUM_THREADS") == "1"
    # it dies with the volunteer (SIGKILL: no chance to clean up)
    p.kill()
    p.wait(10)
    wait_for(lambda: not c.is_running() or c.status() == psutil.STATUS_ZOMBIE, 10,
             "the compute process to go")  # fmt: skip


def test_a_unit_over_the_memory_limit_is_refused_before_fetching(tmp_path: Path) -> None:
    from distal.runtime.pool import volunteer, wire
    from distal.runtime.pool.credentials import Credentials, new_seed
    from distal.runtime.pool.sandbox import Limits

    creds = Credentials("p", "v", "volunteer", new_seed(), ("tls://127.0.0.1:1",), "")
    v = volunteer.Volunteer(creds, Limits(1, 512 << 20))
    big = wire.BlockRef("a" * 64, np.dtype("<f8"), (8192, 8192))
    unit = wire.UnitMsg("r", "a1", "u", big, (big,), wire.Expect(np.dtype("<f8"), (10,)), 1, 1.0)
    with pytest.raises(volunteer._Refuse, match="memory limit"):
        asyncio.run(v._prepare(unit))


def test_the_compute_process_fails_alone_over_its_memory_limit(tmp_path: Path) -> None:
    """A unit whose output is over the limit: a MemoryError in the compute process,
    reported, and the process goes on."""
    from distal.runtime.elastic.units import decompose
    from distal.runtime.pool import program, wire
    from distal.runtime.pool.sandbox import ChildProcess, Limits

    n = 6000  # a 6000 x 6000 float64 output: 288 MB, over a 256 MB limit
    i, j = dl.index_vars("i j")
    M = dl.Machine(1)
    A = dl.Tensor("A", (n, n), dist="xy -> x", machine=M)
    b = dl.Tensor("b", (n,), dist="x -> x", machine=M)
    c = dl.Tensor("c", (n,), dist="x -> *", machine=M)
    A[i, j] = b[i] * c[j]
    k = dl.compile(dl.schedule(A))
    u = decompose(k.plan)[0]
    holders = [((0, n),), ((0, n),)]
    raw = program.encode(
        u, k.kernels, np.dtype("<f8"), {"b": np.dtype("<f8"), "c": np.dtype("<f8")}, holders
    )
    ref = wire.array_digest(np.dtype("|u1"), (len(raw),), raw)
    (tmp_path / ref).write_bytes(raw)
    vec = np.ones(n)
    dig = wire.array_digest(vec.dtype, vec.shape, vec.tobytes())
    vec.tofile(tmp_path / dig)

    async def go() -> list[str]:
        child = ChildProcess(Limits(1, 256 << 20), tmp_path)
        os.environ.update(child_env())
        await child.start()
        try:
            req = {"op": "run", "program": ref, "blocks": [[dig, "<f8", [n]]] * len(u.needs),
                   "forget": []}  # fmt: skip
            first = await child.request(req)
            second = await child.request({"op": "ping"})
            return [str(first), str(second)]
        finally:
            await child.kill()

    first, second = asyncio.run(go())
    assert "out of memory" in first or "MemoryError" in first
    assert "ok" in second
