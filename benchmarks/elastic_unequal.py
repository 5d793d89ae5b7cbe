"""Unequal machines for real: worker processes limited to 1x, 1/2 and 1/4 of one speed.

Run as root (from the repository root, with the ``dask`` extra installed)::

    .venv/bin/python benchmarks/elastic_unequal.py [--n 2048] [--grid 8] [--quota 0.4] [--reps 3]

Three single-threaded ``dask worker`` processes, each started inside its own cgroup (v1
``cpu`` controller, ``cpu.cfs_quota_us``) that lets it use ``quota``, ``quota / 2`` and
``quota / 4`` of a core: the slow workers are slow because the kernel gives them less CPU,
not because a test hook sleeps. A GEMM of order ``n`` is over-decomposed onto a
``grid x grid`` machine (``grid^2`` units) and run on the pool, and on the fastest worker
alone. What the pool's total speed allows is the fastest worker's time over the pool's
speed in units of it, ``T_fast / (1 + 1/2 + 1/4)``; the figure is the pool's time against
that (target: at most 1.2). The same GEMM on numpy checks every result.

The cgroups are made under ``/sys/fs/cgroup/cpu/`` and removed at the end (also on
failure); without root or without that controller the benchmark says why and stops.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import distal as dl
from distal.runtime.dask import decompose

sys.path.insert(0, str(Path(__file__).resolve().parent))
from elastic_hetero import gemm  # the same over-decomposed GEMM

CGROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000


def cgroups_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (it writes cgroups under /sys/fs/cgroup/cpu)"
    if not (CGROOT / "cgroup.procs").exists():
        return f"no cgroup v1 cpu controller at {CGROOT}"
    return None


def make_group(name: str, cores: float) -> Path:
    path = CGROOT / name
    path.mkdir(exist_ok=True)
    (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (path / "cpu.cfs_quota_us").write_text(str(max(1000, int(cores * PERIOD_US))))
    return path


def remove_group(path: Path) -> None:
    for _ in range(50):  # a process that just exited may take a moment to leave
        try:
            path.rmdir()
            return
        except OSError:
            time.sleep(0.1)


def start_worker(address: str, name: str, group: Path) -> subprocess.Popen:
    """A single-threaded dask worker that joins ``group`` before it starts (``exec``)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = (
        f"echo $$ > {group / 'cgroup.procs'} && exec {sys.executable} -m distributed.cli."
        f"dask_worker {address} --nthreads 1 --nworkers 1 --no-nanny --name {name} "
        "--no-dashboard --memory-limit 0"
    )
    return subprocess.Popen(
        ["sh", "-c", cmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def wait_workers(client: Any, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(client.scheduler_info()["workers"]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(client.scheduler_info()['workers'])} of {count} workers")
        time.sleep(0.2)


def timed_run(kernel: dl.Kernel, inputs: dict, client: Any, want: np.ndarray) -> tuple[float, Any]:
    t = time.perf_counter()
    res = kernel.run(inputs, runtime="dask", client=client)
    seconds = time.perf_counter() - t
    np.testing.assert_allclose(res.value, want, rtol=1e-10)
    return seconds, res.extra["summary"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--grid", type=int, default=8)
    ap.add_argument("--quota", type=float, default=0.4, help="the fastest worker's cores")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    why = cgroups_unavailable()
    if why:
        print(f"skipped: {why}")
        return
    from distributed import Client, LocalCluster

    kernel = gemm(args.n, args.grid)
    units = len(decompose(kernel.plan))
    rng = np.random.default_rng(0)
    inputs = {"B": rng.random((args.n, args.n)), "C": rng.random((args.n, args.n))}
    want = inputs["B"] @ inputs["C"]
    speeds = {"fast": 1.0, "half": 0.5, "quarter": 0.25}
    tag = f"distal_unequal_{os.getpid()}"
    groups = {nm: make_group(f"{tag}_{nm}", args.quota * s) for nm, s in speeds.items()}
    procs: list[subprocess.Popen] = []
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores; GEMM n={args.n}, "
          f"{units} units; cores: " + ", ".join(f"{nm} {args.quota * s:.2f}"
                                                for nm, s in speeds.items()))  # fmt: skip
    try:
        with (
            LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0") as lc,
            Client(lc) as client,
        ):
            procs.append(start_worker(lc.scheduler_address, "fast", groups["fast"]))
            wait_workers(client, 1)
            timed_run(kernel, inputs, client, want)  # warm: imports, compiled leaves
            alone = [timed_run(kernel, inputs, client, want)[0] for _ in range(args.reps)]
            for nm in ("half", "quarter"):
                procs.append(start_worker(lc.scheduler_address, nm, groups[nm]))
            wait_workers(client, 3)
            timed_run(kernel, inputs, client, want)  # the new workers warm too
            pool, per_worker = [], []
            for _ in range(args.reps):
                seconds, summary = timed_run(kernel, inputs, client, want)
                pool.append(seconds)
                per_worker.append(dict(summary.per_worker))
            names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        for g in groups.values():
            remove_group(g)
    t_fast = statistics.median(alone)
    allowed = t_fast / sum(speeds.values())
    t_pool = statistics.median(pool)
    shares = {names.get(a, a): n for a, n in per_worker[pool.index(t_pool)].items()}
    print(f"fastest worker alone   {t_fast:7.2f} s  (runs {', '.join(f'{x:.2f}' for x in alone)})")
    print(f"pool of three          {t_pool:7.2f} s  (runs {', '.join(f'{x:.2f}' for x in pool)})")
    print(f"allowed by its speed   {allowed:7.2f} s  (fastest alone / {sum(speeds.values()):.2f})")
    print(f"pool / allowed         {t_pool / allowed:7.2f}   (target <= 1.2)")
    print(
        f"units per worker (the median run): {shares}; by speed "
        + ", ".join(f"{nm} {units * s / sum(speeds.values()):.1f}" for nm, s in speeds.items())
    )
    print("RESULT " + json.dumps({"alone": alone, "pool": pool, "ratio": t_pool / allowed}))


if __name__ == "__main__":
    main()
