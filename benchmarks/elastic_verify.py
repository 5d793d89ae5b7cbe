"""Overhead of verifying every unit on an untrusted pool: verify="check" vs verify=2.

Run (from the repository root, with the ``dask`` extra installed)::

    .venv/bin/python benchmarks/elastic_verify.py [--n 4096] [--grid 2] [--reps 3]

A Cannon GEMM compiled for a ``grid x grid`` machine of virtual processors runs on an
in-process pool of two single-threaded workers (one BLAS thread each; ``--processes`` for
worker processes), in interleaved groups: no verification, ``verify="check"`` (each unit's
result tested on the other worker by the randomized projection check of
``distal.runtime.elastic.check``) and ``verify=2`` (every unit computed twice, on both
workers). The order within each group rotates, so slow drifts of the shared machine's load
fall on every variant alike. The report gives each variant's overhead against no
verification as the ratio of medians, of best times and the median of per-group ratios.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import statistics
import time

import numpy as np
from distributed import Client, LocalCluster

import distal as dl

VARIANTS = {"none": {}, "check": {"verify": "check"}, "verify2": {"verify": 2}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--grid", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=None, help="verify_repeats (default: auto)")
    ap.add_argument("--no-verify2", action="store_true", help="skip the verify=2 runs")
    ap.add_argument("--processes", action="store_true", help="worker processes")
    args = ap.parse_args()

    kernel = dl.algorithms.cannon(args.n, machine=dl.Machine(args.grid, args.grid)).compile()
    rng = np.random.default_rng(0)
    x = {"B": rng.random((args.n, args.n)), "C": rng.random((args.n, args.n))}
    want = x["B"] @ x["C"]
    names = [v for v in VARIANTS if not (args.no_verify2 and v == "verify2")]
    times: dict[str, list[float]] = {v: [] for v in names}
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=args.processes,
            dashboard_address="127.0.0.1:0",
            **({"host": "127.0.0.1"} if args.processes else {}),
        ) as cluster,
        Client(cluster) as client,
    ):
        kernel.run(x, runtime="dask", client=client, progress=False)  # warm up
        kernel.run(x, runtime="dask", client=client, progress=False, verify="check")
        for rep in range(args.reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for v in order:
                opts = dict(VARIANTS[v])
                if v == "check" and args.repeats is not None:
                    opts["verify_repeats"] = args.repeats
                t0 = time.perf_counter()
                r = kernel.run(x, runtime="dask", client=client, progress=False, **opts)
                times[v].append(time.perf_counter() - t0)
                assert np.allclose(r.value, want, rtol=1e-12)
                s = r.extra["summary"]
                assert s.units_rejected == 0
                if v == "check":
                    assert s.checked == args.grid * args.grid
    base = times["none"]
    report: dict[str, object] = {
        "n": args.n,
        "virtual_grid": f"{args.grid}x{args.grid}",
        "workers": "2 processes" if args.processes else "2 in-process",
        "verify_repeats": args.repeats or "auto",
        "median_none_s": round(statistics.median(base), 3),
    }
    for v in names:
        report[f"{v}_s"] = [round(t, 3) for t in times[v]]
        if v == "none":
            continue
        t = times[v]
        report[f"{v}_overhead_pct"] = {
            "medians": round(100 * (statistics.median(t) / statistics.median(base) - 1), 1),
            "best": round(100 * (min(t) / min(base) - 1), 1),
            "paired": round(
                100 * (statistics.median(b / a for a, b in zip(base, t, strict=True)) - 1), 1
            ),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
