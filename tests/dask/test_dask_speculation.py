"""Speculative tail duplication: a straggler's unit is copied onto an idle worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import gemm, gemm_inputs, mttkrp, mttkrp_expected, mttkrp_inputs

from distal.runtime import checkpoint as ck
from distal.runtime.elastic import speculate

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]


def _slow_worker(client: Any) -> Any:
    """The name of one pool worker, to be made slow with the ``_slow`` test hook."""
    return sorted(w["name"] for w in client.scheduler_info()["workers"].values())[0]


def test_slow_worker_tail_is_duplicated_and_result_exact(client: Any) -> None:
    k, x = gemm(), gemm_inputs()
    slow = {_slow_worker(client): 20.0}  # 2 s per unit there, 0.1 s on the other worker
    res = k.run(x, runtime="dask", client=client, _delay=0.1, _slow=slow, timeout=60)
    assert np.array_equal(res.value, x["B"] @ x["C"])
    s = res.extra["summary"]
    print(s)
    assert s.speculative >= 1
    assert 1 <= s.speculative_won <= s.speculative
    # the losing copies are neither recomputations nor extra completed tasks
    assert s.recomputed == 0
    assert res.tasks_executed == s.tasks_total == 16
    assert sum(s.per_worker.values()) == s.tasks_total
    # both copies of a raced unit received its inputs; its delivery counts once
    assert res.stats.as_dict() == k.stats().as_dict()
    assert "speculation:" in str(s)

    off = k.run(x, runtime="dask", client=client, _delay=0.1, _slow=slow, speculate=False)
    assert np.array_equal(off.value, x["B"] @ x["C"])
    assert off.extra["summary"].speculative == 0


def test_duplicated_partials_are_checkpointed_once_and_summed_once(
    client: Any, tmp_path: Path
) -> None:
    """Partial sums (MTTKRP, one unit per step): a reduction adds exactly one copy."""
    k, x = mttkrp(), mttkrp_inputs()
    want = mttkrp_expected(x)
    slow = {_slow_worker(client): 20.0}
    opts: dict[str, Any] = {"granularity": "step", "checkpoint": tmp_path, "keep_partials": True}
    res = k.run(x, runtime="dask", client=client, _delay=0.1, _slow=slow, timeout=60, **opts)
    assert np.array_equal(res.value, want)
    s = res.extra["summary"]
    assert s.speculative >= 1
    assert s.speculative_won >= 1
    assert res.tasks_executed == s.tasks_total
    assert res.stats.as_dict() == k.stats().as_dict()
    # every entry is whole and checksummed; a rerun from the partials alone is exact
    run = Path(res.extra["checkpoint"])
    store = ck.CheckpointStore(tmp_path, run.name)
    names = store.names()
    assert not [p for p in run.iterdir() if ".tmp-" in p.name]
    assert all(store.load(n)[1] == ck.OK for n in names)
    for n in names:
        if n.startswith("block"):
            store.remove(n)
    again = k.run(x, runtime="dask", client=client, speculate=False, **opts)
    assert np.array_equal(again.value, want)
    blocks = sum(n.startswith("block") for n in names)
    assert again.tasks_executed == blocks  # only the reductions; every unit was loaded


def test_the_policy() -> None:
    times = {"slow": [1.2, 1.3], "a": [0.3, 0.31, 0.29], "b": [0.32]}
    assert speculate.reference(times) == pytest.approx(0.305)
    assert speculate.reference({}) is None
    ev = {
        "u1": [
            {"kind": "start", "worker": "slow", "unit": True, "recv": 10.0},
        ],
        "u2": [
            {"kind": "start", "worker": "a", "unit": True, "recv": 10.5},
            {"kind": "done", "worker": "a", "unit": True, "status": "computed", "seconds": 0.3},
        ],
        "u3": [
            {"kind": "start", "worker": "b", "unit": True, "recv": 10.8},
            {"kind": "start", "worker": "a", "unit": True, "recv": 10.9, "spec": 1},
        ],
    }
    run = speculate.running(ev, 11.0)
    assert set(run) == {"u1", "u3"}
    assert run["u1"] == ("slow", pytest.approx(1.0))
    cands = [("u1", "slow", 1.0), ("u3", "b", 0.2)]
    # the oldest straggler gets the fastest idle worker; never its own, never a slow one
    assert speculate.pair(cands, ["b", "a"], times) == [("u1", "a")]
    assert speculate.pair(cands, ["b", "slow"], times) == [("u1", "b")]
    assert speculate.pair(cands, ["new", "a"], times) == [("u1", "a"), ("u3", "new")]


def test_units_waiting_behind_a_busy_worker_are_stragglers_too() -> None:
    ev = {
        "u1": [{"kind": "start", "worker": "slow", "unit": True, "recv": 1.0}],
        "u2": [{"kind": "start", "worker": "a", "unit": True, "spec": 1, "recv": 1.0}],
    }
    assert speculate.started(ev) == {"u1"}
    busy = {"slow": ["k1", "k4"], "a": ["k3"], "b": []}
    waiting = {"u4": ("k4", 0.5), "u3": ("k3", 0.5), "u5": ("k5", 0.5)}
    # u4 waits behind k1 on "slow"; u3 is alone on "a" (about to start); u5 is not assigned
    assert speculate.queued(waiting, busy) == [("u4", "slow", 0.5)]


def test_deadlines_come_from_a_unit_s_size_and_the_observed_speed() -> None:
    done = {"kind": "done", "unit": True, "status": "computed"}
    ev = {
        "u1": [done | {"worker": "a", "seconds": 0.5, "iterations": [0, 1_000_000]}],
        "u2": [done | {"worker": "a", "seconds": 0.5, "iterations": [1, 1_000_000]}],
        "u3": [done | {"worker": "slow", "seconds": 2.0, "iterations": [2, 1_000_000]}],
        "u4": [{"kind": "done", "unit": True, "status": "reused", "worker": "b"}],
    }
    rates = speculate.rates(ev)
    assert rates == {"a": pytest.approx(2e6), "slow": pytest.approx(5e5)}
    # a worker's own speed, else the pool's fastest; never under the warm floor
    assert speculate.deadline(4_000_000, "a", rates) == pytest.approx(speculate.LATE * 2.0)
    assert speculate.deadline(4_000_000, "slow", rates) == pytest.approx(speculate.LATE * 8.0)
    assert speculate.deadline(4_000_000, "new", rates) == pytest.approx(speculate.LATE * 2.0)
    assert speculate.deadline(10, "a", rates) == speculate.WARM_FLOOR
    # before anything finished: the cold floor, or the size at the cold rate
    assert speculate.deadline(10, "", {}) == speculate.COLD_FLOOR
    big = int(10 * speculate.COLD_RATE)
    assert speculate.deadline(big, "", {}) == pytest.approx(speculate.LATE * 10)
    # overdue units go to the least loaded workers holding none, busy or not, never their own
    busy = {"stuck": ["k1", "k2", "k3"], "a": ["k4"], "b": []}
    late = [("u1", "stuck", 9.0), ("u2", "stuck", 7.0), ("u3", "stuck", 6.0)]
    assert speculate.pair_overdue(late, busy, {"stuck"}, {}) == [
        ("u1", "b"),
        ("u2", "a"),
        ("u3", "b"),
    ]
    assert speculate.pair_overdue(late, {"stuck": ["k1"]}, {"stuck"}, {}) == []


def test_a_unit_that_stops_answering_is_run_elsewhere_without_a_timeout() -> None:
    """No ``timeout=``: a worker whose units do not come back (300x slower: 30 s a unit
    against 0.1 s elsewhere) holds the run up only until their deadline; then they are
    copied to the worker that answers, new units go there, and the run ends exact.
    (Worker processes: closing the pool ends the stuck one instead of waiting for it.)"""
    import time

    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        k, x = gemm(), gemm_inputs()
        stuck = {_slow_worker(c): 300.0}
        t0 = time.perf_counter()
        res = k.run(x, runtime="dask", client=c, _delay=0.1, _slow=stuck)
        took = time.perf_counter() - t0
        assert np.array_equal(res.value, x["B"] @ x["C"])
        s = res.extra["summary"]
        assert s.speculative_won >= 1
        assert took < 25.0, f"the run waited {took:.1f} s for the units that stopped answering"
        assert res.stats.as_dict() == k.stats().as_dict()
