"""Overhead of verifying every unit on an untrusted pool: verify="check" vs verify=2.

Run (from the repository root, with the ``dask`` extra installed)::

    .venv/bin/python benchmarks/elastic_verify.py [--n 4096] [--grid 2] [--reps 3]
    .venv/bin/python benchmarks/elastic_verify.py --kernel spmv [--scale 18] [--procs 4]

A Cannon GEMM compiled for a ``grid x grid`` machine of virtual processors (or, with
``--kernel spmv``, an SpMV ``a = B c`` of an R-MAT matrix, ``distal.sparse.generate.rmat(
scale, edge_factor)``, 2^18 rows and ~3.9 M non-zeros by default, bound once and cut over
``--procs`` virtual processors by non-zeros or by rows) runs on an in-process pool of two
single-threaded workers (one BLAS thread each; ``--processes`` for worker processes), in
interleaved groups: no verification, ``verify="check"`` (each unit's result tested on the
other worker by the randomized projection check of ``distal.runtime.elastic.check``; an
SpMV unit against its checksum ``c = r^T A``, made on the checker's first check of it and
kept, see its ``entry_checksum``) and
``verify=2`` (every unit computed twice, on both workers). The order within each group
rotates, so slow drifts of the shared machine's load fall on every variant alike. The
report gives each variant's overhead against no verification as the ratio of medians, of
best times and the median of per-group ratios.
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
from typing import Any

import numpy as np
from distributed import Client, LocalCluster

import distal as dl

VARIANTS = {"none": {}, "check": {"verify": "check"}, "verify2": {"verify": 2}}


def spmv(args: argparse.Namespace) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The bound SpMV, its inputs, and what the report says of it."""
    from distal.sparse import generate

    if args.matrix == "rmat":
        B = generate.rmat(args.scale, args.edge_factor)
    else:
        n = 2**args.scale
        B = generate.uniform(n, n, args.edge_factor * n)
    n = B.shape[0]
    M = dl.Machine(args.procs)
    i, j = dl.index_vars("i j")
    dist = "xy -> x" if args.split == "row" else "xy -> (xy)"
    Bt = dl.Tensor("B", (n, n), format="csr", dist=dist, machine=M)
    c = dl.Tensor("c", (n,), dist="x -> x", machine=M)
    a = dl.Tensor("a", (n,), dist="x -> x", machine=M)
    a[i] = Bt[i, j] * c[j]
    io, ii, f, fp, fo, fi = dl.index_vars("io ii f fp fo fi")
    s = dl.schedule(a)
    if args.split == "row":
        s, o = s.distribute([i], [io], [ii], M), io
    else:
        s, o = s.fuse(i, j, f).pos(f, fp, Bt).distribute([fp], [fo], [fi], M), fo
    x = {"B": B, "c": np.random.default_rng(0).random(n)}
    bound = dl.compile(s.communicate([a, Bt, c], o)).bind(x)
    about = {
        "kernel": "spmv",
        "matrix": f"{args.matrix}(scale={args.scale}, edge_factor={args.edge_factor})",
        "rows": n,
        "nnz": int(B.nnz),
        "split": args.split,
        "virtual_processors": args.procs,
    }
    return bound, x, about


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", choices=["gemm", "spmv"], default="gemm")
    ap.add_argument("--n", type=int, default=4096, help="GEMM size")
    ap.add_argument("--grid", type=int, default=2, help="GEMM: grid x grid processors")
    ap.add_argument("--matrix", choices=["rmat", "uniform"], default="rmat", help="SpMV")
    ap.add_argument("--scale", type=int, default=18, help="SpMV: 2^scale rows")
    ap.add_argument("--edge-factor", type=int, default=16, help="SpMV: non-zeros per row")
    ap.add_argument("--procs", type=int, default=4, help="SpMV: virtual processors")
    ap.add_argument("--split", choices=["nz", "row"], default="nz", help="SpMV: the cut")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=None, help="verify_repeats (default: auto)")
    ap.add_argument("--no-verify2", action="store_true", help="skip the verify=2 runs")
    ap.add_argument("--processes", action="store_true", help="worker processes")
    args = ap.parse_args()

    if args.kernel == "gemm":
        kernel = dl.algorithms.cannon(args.n, machine=dl.Machine(args.grid, args.grid)).compile()
        rng = np.random.default_rng(0)
        x = {"B": rng.random((args.n, args.n)), "C": rng.random((args.n, args.n))}
        want = x["B"] @ x["C"]
        units = args.grid * args.grid
        report: dict[str, object] = {"n": args.n, "virtual_grid": f"{args.grid}x{args.grid}"}

        def same(value: np.ndarray) -> bool:
            return bool(np.allclose(value, want, rtol=1e-12))

    else:
        kernel, x, report = spmv(args)
        want = kernel.run(x).value  # the local runtime: the same bits
        units = args.procs

        def same(value: np.ndarray) -> bool:
            return bool(np.array_equal(value, want))

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
                assert same(r.value)
                s = r.extra["summary"]
                assert s.units_rejected == 0
                if v == "check":
                    assert s.checked == units
    base = times["none"]
    report |= {
        "workers": "2 processes" if args.processes else "2 in-process",
        "verify_repeats": args.repeats or "auto",
        "load_average": [round(a, 2) for a in os.getloadavg()],
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
