"""Speculative tail duplication on a pool: a straggler's unit is copied onto an idle
worker, a stuck one's past its deadline. The policy itself is tested without a pool in
``test_core.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import assert_stats, gemm, gemm_inputs, mttkrp, mttkrp_expected, mttkrp_inputs

from distal.runtime import checkpoint as ck

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]


def _faults(slow: dict[Any, float]) -> dict[str, Any]:
    """Units of 0.1 s, some workers ``slow`` times slower."""
    return {"delay": 0.1, "slow": slow}


def _slow_worker(client: Any) -> Any:
    """The name of one pool worker, to be made slow with ``faults={"slow": ...}``."""
    return sorted(w["name"] for w in client.scheduler_info()["workers"].values())[0]


def test_slow_worker_tail_is_duplicated_and_result_exact(client: Any) -> None:
    k, x = gemm(), gemm_inputs()
    slow = {_slow_worker(client): 20.0}  # 2 s per unit there, 0.1 s on the other worker
    res = k.run(x, runtime="dask", client=client, faults=_faults(slow), timeout=60)
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
    assert_stats(res.stats, k)
    assert "speculation:" in str(s)

    off = k.run(x, runtime="dask", client=client, faults=_faults(slow), speculate=False)
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
    res = k.run(x, runtime="dask", client=client, faults=_faults(slow), timeout=60, **opts)
    assert np.array_equal(res.value, want)
    s = res.extra["summary"]
    assert s.speculative >= 1
    assert s.speculative_won >= 1
    assert res.tasks_executed == s.tasks_total
    assert_stats(res.stats, k)
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
        res = k.run(x, runtime="dask", client=c, faults=_faults(stuck))
        took = time.perf_counter() - t0
        assert np.array_equal(res.value, x["B"] @ x["C"])
        s = res.extra["summary"]
        assert s.speculative_won >= 1
        assert took < 25.0, f"the run waited {took:.1f} s for the units that stopped answering"
        assert_stats(res.stats, k)
