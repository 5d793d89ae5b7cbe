"""Checkpoint overhead of the Dask runtime on a GEMM (target: under 10%).

Run (from the repository root, with the ``dask`` extra installed)::

    .venv/bin/python benchmarks/elastic_checkpoint.py [--n 2048] [--grid 4] [--reps 3]

A Cannon GEMM compiled for a ``grid x grid`` machine of virtual processors runs on an
in-process pool of two single-threaded workers (one BLAS thread each; ``--processes``
for two worker processes), alternately without
a checkpoint and with a fresh checkpoint directory (so every block is written: the cost of
a first, uninterrupted run). The checkpointed run also fingerprints both inputs (sha256 of
their bytes) and writes each finished block with a checksum, fsync and an atomic rename.
A third variant reruns on the complete checkpoint (everything loaded, nothing computed).
``--key`` gives the checkpointed runs and the reruns a ``checkpoint_key=``: the driver
seals every entry and the rerun authenticates every block before using it.

The machine is shared and noisy, so the pairs alternate which variant goes first and the
report gives three estimates from the same run: the ratio of the medians, the ratio of the
best times (the intrinsic cost, least disturbed by other load) and the median of the
per-pair ratios.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import shutil
import statistics
import tempfile
import time

import numpy as np
from distributed import Client, LocalCluster

import distal as dl


def cannon(n: int, g: int) -> dl.Kernel:
    """Cannon's GEMM on a ``g x g`` grid of virtual processors, from ``dl.algorithms``."""
    return dl.algorithms.cannon(n, machine=dl.Machine(g, g)).compile()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--grid", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where checkpoints go (default: a temp dir)")
    ap.add_argument("--no-fsync", action="store_true", help="entries without fsync")
    ap.add_argument(
        "--processes", action="store_true", help="worker processes (default: in-process threads)"
    )
    ap.add_argument("--key", action="store_true", help="checkpoint_key= on checkpointed runs")
    args = ap.parse_args()

    kernel = cannon(args.n, args.grid)
    rng = np.random.default_rng(0)
    x = {"B": rng.random((args.n, args.n)), "C": rng.random((args.n, args.n))}
    want = x["B"] @ x["C"]
    base = args.dir or tempfile.mkdtemp(prefix="distal-ck-bench-")
    plain, ckpt, rerun = [], [], []
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
        kernel.run(x, runtime="dask", client=client)  # warm up
        fsync = not args.no_fsync
        keyed = {"checkpoint_key": b"benchmark key"} if args.key else {}
        for rep in range(args.reps):
            where = os.path.join(base, f"rep{rep}")
            for variant in ("plain", "ckpt") if rep % 2 == 0 else ("ckpt", "plain"):
                opts = {} if variant == "plain" else {"checkpoint": where, "fsync": fsync, **keyed}
                t0 = time.perf_counter()
                r = kernel.run(x, runtime="dask", client=client, **opts)
                (plain if variant == "plain" else ckpt).append(time.perf_counter() - t0)
                assert np.allclose(r.value, want)
            t0 = time.perf_counter()
            r = kernel.run(x, runtime="dask", client=client, checkpoint=where, **keyed)
            rerun.append(time.perf_counter() - t0)
            assert r.tasks_executed == 0
            assert not r.extra["summary"].unauthenticated
    if args.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    p, c = statistics.median(plain), statistics.median(ckpt)
    report = {
        "n": args.n,
        "virtual_grid": f"{args.grid}x{args.grid}",
        "workers": "2 processes" if args.processes else "2 in-process",
        "no_checkpoint_s": [round(v, 3) for v in plain],
        "checkpoint_s": [round(v, 3) for v in ckpt],
        "rerun_from_checkpoint_s": [round(v, 3) for v in rerun],
        "median_no_checkpoint_s": round(p, 3),
        "median_checkpoint_s": round(c, 3),
        "overhead_pct": round(100 * (c - p) / p, 1),
        "overhead_best_pct": round(100 * (min(ckpt) / min(plain) - 1), 1),
        "overhead_paired_median_pct": round(
            100 * (statistics.median(b / a for a, b in zip(plain, ckpt, strict=True)) - 1), 1
        ),
        "bytes_written": args.n * args.n * 8,
        "fsync": not args.no_fsync,
        "checkpoint_key": args.key,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
