"""Heterogeneous pool: one of four Dask workers is 4x slower; how close is the run to ideal?

Run (from the repository root, with the ``dask`` extra installed)::

    .venv/bin/python benchmarks/elastic_hetero.py [--grid 8] [--delay 0.3] [--reps 3]

A GEMM is compiled for a ``grid x grid`` machine of *virtual* processors (over-decomposition:
64 units of work for 4 workers by default) and run on an in-process pool of four
single-threaded workers. Every unit is padded with ``faults={"delay": ...}`` seconds (so
the figures measure scheduling, not this shared 2-core machine's BLAS), and worker 0 is
made 4x slower with ``faults={"slow": ...}`` (its delay and its compute are stretched 4x).
The ideal time is the
speed-weighted split of the same work: ``units * delay / (3 + 1/4)``. Because a shared,
loaded 2-core machine adds a per-task overhead of its own, the run on an equal pool is
measured too, and a second ideal uses that measured per-unit cost (the slow worker paying
``(slow - 1) * delay`` more per unit). The slow worker should get about 1/13 of the units.

The heterogeneous pool runs with speculative tail duplication (the default) and, for
comparison, without (``speculate=False``); ``--no-compare`` skips the latter. The same GEMM
also runs on a pool of only the three fast workers: adding the slow worker should never make
a run slower than that pool without it (``with_slow_vs_without``, target <= 1.10).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from distributed import Client, LocalCluster

import distal as dl
from distal.runtime.dask import decompose


def gemm(n: int, g: int) -> dl.Kernel:
    M = dl.Machine(g, g)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="xy -> xy", machine=M)
    B = dl.Tensor("B", (n, n), dist="xy -> xy", machine=M)
    C = dl.Tensor("C", (n, n), dist="xy -> xy", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji, ko, ki = dl.index_vars("io jo ii ji ko ki")
    s = (
        dl.schedule(A)
        .distribute([i, j], [io, jo], [ii, ji], M)
        .divide(k, ko, ki, g)
        .reorder([ko, ii, ji])
        .communicate(A, jo)
        .communicate([B, C], ko)
    )
    return dl.compile(s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--grid", type=int, default=8)
    ap.add_argument("--delay", type=float, default=0.3)
    ap.add_argument("--slow", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--window", type=int, default=None, help="units in flight (default: auto)")
    ap.add_argument("--no-compare", action="store_true", help="skip the speculate=False runs")
    args = ap.parse_args()

    kernel = gemm(args.n, args.grid)
    units = len(decompose(kernel.plan))
    rng = np.random.default_rng(0)
    x = {"B": rng.random((args.n, args.n)), "C": rng.random((args.n, args.n))}
    speeds = [1 / args.slow, 1.0, 1.0, 1.0]
    ideal = units * args.delay / sum(speeds)
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
    ):
        names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
        slow_addr = next(a for a, nm in names.items() if nm == 0)
        kernel.run(x, runtime="dask", client=client)  # warm up imports and the pool

        def timed(slow: dict[int, float], speculate: bool = True) -> tuple[float, int, int, int]:
            time.sleep(1.5 * args.slow * args.delay)  # a losing copy from the last run ends
            t0 = time.perf_counter()
            res = kernel.run(
                x,
                runtime="dask",
                client=client,
                window=args.window,
                speculate=speculate,
                faults={"delay": args.delay, "slow": slow},
            )
            dt = time.perf_counter() - t0
            assert np.allclose(res.value, x["B"] @ x["C"])
            s = res.extra["summary"]
            return dt, s.per_worker.get(slow_addr, 0), s.speculative, s.speculative_won

        equal = [timed({})[0] for _ in range(args.reps)]
        hetero = [timed({0: args.slow}) for _ in range(args.reps)]
        plain = [] if args.no_compare else [timed({0: args.slow}, False) for _ in range(args.reps)]
    with (
        LocalCluster(
            n_workers=3, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster3,
        Client(cluster3) as client3,
    ):
        kernel.run(x, runtime="dask", client=client3)  # warm up
        without = []
        for _ in range(args.reps):
            time.sleep(0.5)
            t0 = time.perf_counter()
            r3 = kernel.run(
                x, runtime="dask", client=client3, window=args.window, faults={"delay": args.delay}
            )
            without.append(time.perf_counter() - t0)
            assert np.allclose(r3.value, x["B"] @ x["C"])
    t_eq = statistics.median(equal)
    t = statistics.median(h[0] for h in hetero)
    # The per-unit cost on this machine, overheads included, measured on the equal pool;
    # the slow worker pays the same overhead plus (slow - 1) x delay more per unit.
    cost = t_eq * 4 / units
    slow_cost = cost + (args.slow - 1) * args.delay
    ideal_measured = units / (3 / cost + 1 / slow_cost)
    report = {
        "units": units,
        "window": args.window or "auto (2 x threads)",
        "delay_s": args.delay,
        "slow_factor": args.slow,
        "ideal_s": round(ideal, 3),
        "equal_pool_s": round(t_eq, 3),
        "ideal_with_measured_overhead_s": round(ideal_measured, 3),
        "hetero_median_s": round(t, 3),
        "ratio_to_ideal": round(t / ideal, 3),
        "ratio_to_ideal_with_overhead": round(t / ideal_measured, 3),
        "hetero_times_s": [round(h[0], 3) for h in hetero],
        "slow_worker_tasks": [h[1] for h in hetero],
        "speculative_copies": [h[2] for h in hetero],
        "speculative_won": [h[3] for h in hetero],
        "ideal_slow_worker_units": round(units * speeds[0] / sum(speeds), 1),
        "without_slow_worker_times_s": [round(v, 3) for v in without],
        "without_slow_worker_median_s": round(statistics.median(without), 3),
        "with_slow_vs_without": round(t / statistics.median(without), 3),
    }
    if plain:
        t_plain = statistics.median(h[0] for h in plain)
        report |= {
            "no_speculation_median_s": round(t_plain, 3),
            "no_speculation_ratio_to_ideal": round(t_plain / ideal, 3),
            "no_speculation_ratio_to_ideal_with_overhead": round(t_plain / ideal_measured, 3),
            "no_speculation_times_s": [round(h[0], 3) for h in plain],
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
