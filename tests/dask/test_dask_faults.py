"""Fault tests: hard-killed workers, a hard-killed driver, both on loopback, bounded in time.

Workers are killed under a dense GEMM and under a sparse SpMM cut by non-zeros (partial
sums, reductions): the same checks on both.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import (
    assert_stats,
    gemm_problem,
    mttkrp,
    mttkrp_expected,
    mttkrp_inputs,
    sparse_problem,
    trace_lines,
)

import distal as dl

pytestmark = [pytest.mark.dask, pytest.mark.timeout(150)]

HERE = Path(__file__).resolve().parent


def _wait_for(pred: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _done(trace: Path) -> int:
    return sum(e == "done" for e, _, _ in trace_lines(trace))


# (problem, workers, kill one worker after each of these many finished tasks, task delay)
KILLS = {
    "gemm": (4, [4, 10], 0.3),  # 16 units on 4 workers; two of them killed
    "spmm nz": (3, [2], 0.4),  # SpMM by non-zeros on 8 processors: partials, reductions
}


@pytest.mark.parametrize("name", list(KILLS))
def test_killing_workers_mid_run_keeps_the_result_exact(tmp_path: Path, name: str) -> None:
    from distributed import Client, LocalCluster

    nworkers, after, delay = KILLS[name]
    p = gemm_problem() if name == "gemm" else sparse_problem("spmm", "nz", 3, n=80, procs=8)
    bound = p.bound
    local = p.local()
    trace = tmp_path / "trace"
    with (
        LocalCluster(
            n_workers=nworkers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as c,
    ):
        out: dict[str, Any] = {}

        def go() -> None:
            try:
                out["res"] = bound.run(
                    p.inputs,
                    runtime="dask",
                    client=c,
                    checkpoint=tmp_path / "ck",
                    faults={"delay": delay, "trace": str(trace)},
                )
            except BaseException as e:  # surfaced below
                out["err"] = e

        pids = c.run(os.getpid)
        t = threading.Thread(target=go)
        t.start()
        victims = sorted(pids)[: len(after)]
        for victim, done in zip(victims, after, strict=True):
            _wait_for(lambda n=done: _done(trace) >= n, 60, f"{done} finished tasks")
            os.kill(pids[victim], signal.SIGKILL)
        t.join(120)
        assert not t.is_alive()
    assert "err" not in out, out.get("err")
    res = out["res"]
    p.check(res.value, local.value)
    s = res.extra["summary"]
    print(s)
    # The kills cut work short; finished work was checkpointed, so at most what ran on the
    # victims at the kill is redone: none of it when a speculative copy of the cut unit, made
    # in the tail, finished it first, or when the victim had written the unit's entry just
    # before the kill and its result never reached the driver (the resubmitted unit loads
    # that entry: the run's checkpoint was empty when it began, so a reused entry can only
    # be such a one)
    # (a victim may be idle at its kill, so no work need be lost: what holds is that lost
    # work is never negative, and that work done again was work lost)
    assert 0.0 <= s.lost_seconds < math.inf, str(s)
    assert s.recomputed == 0 or s.lost_seconds > 0, str(s)
    assert s.recomputed <= len(victims), str(s)
    assert s.recomputed >= 1 or s.speculative_won >= 1 or s.tasks_reused >= 1, str(s)
    assert set(victims) <= set(s.workers_lost)
    assert res.tasks_executed + res.tasks_reused == s.tasks_total
    # recomputed tasks count their delivery once, loaded ones nothing; a fresh checkpoint
    # means every task computed once in this run before any reload
    assert_stats(res.stats, bound)


def test_killing_the_driver_recomputes_at_most_the_tasks_in_flight(tmp_path: Path) -> None:
    ck_dir, t1, t2 = tmp_path / "ck", tmp_path / "trace1", tmp_path / "trace2"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    cmd = [sys.executable, str(HERE / "elastic_driver.py"), str(ck_dir), str(t1), "0.25"]
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _wait_for(lambda: _done(t1) >= 6, 90, "the first run's checkpoints")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    lines = trace_lines(t1)
    started = {n for e, n, _ in lines if e == "start"}
    finished = {n for e, n, _ in lines if e == "done"}
    in_flight = started - finished
    assert finished, "nothing was checkpointed before the kill"
    # two single-threaded workers, each with one task computing and at most one more whose
    # checkpoint entry is still being written (a task is done once its entry is in place)
    assert len(in_flight) <= 4

    # Rerun (another driver, here in-process) with the same checkpoint location.
    proc2 = subprocess.run(
        [sys.executable, str(HERE / "elastic_driver.py"), str(ck_dir), str(t2), "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    assert "exact True" in proc2.stdout
    computed2 = {n for e, n, st in trace_lines(t2) if e == "done" and st == "computed"}
    recomputed = computed2 & started
    assert len(recomputed) <= len(in_flight), (recomputed, in_flight)
    assert not finished & computed2  # finished work is loaded (or not needed), never redone
    executed, reused = (int(v) for v in proc2.stdout.split("tasks")[1].split()[:2])
    assert reused >= len(finished)
    assert executed + reused == 16  # one task per output block (see fuse())


def test_corrupt_block_on_a_process_pool_mttkrp(tmp_path: Path) -> None:
    """MTTKRP over a process pool: a damaged block file; memory:// is refused there."""
    from distributed import Client, LocalCluster

    k, x = mttkrp(), mttkrp_inputs()
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as c,
    ):
        r1 = k.run(x, runtime="dask", client=c, checkpoint=f"file://{tmp_path}")
        run = Path(r1.extra["checkpoint"])
        (run / "block-1-0.ck").write_bytes(b"DISTALCK\x01{}\n")
        r2 = k.run(x, runtime="dask", client=c, checkpoint=f"file://{tmp_path}")
        with pytest.raises(dl.InputError, match="memory://"):
            k.run(x, runtime="dask", client=c, checkpoint="memory://elsewhere")
    assert np.array_equal(r2.value, mttkrp_expected(x))
    assert r2.extra["summary"].corrupt == 1
    assert r2.tasks_executed == 3  # two partials (deleted after run 1) and the block
