"""Speculation on slow links, measured: a 64-unit GEMM on a pool behind 40 Mbit/s links.

``python tests/dask/chaos_gemm.py [--n 1024] [--workers 2 1] [--reps 1]`` (as root: it
builds the namespaced pool of :mod:`netns_pool`) runs a Cannon GEMM on 8x8 virtual
processors (64 units) over a pool of 2 and of 1 worker(s), each behind a tbf link of 40
Mbit/s each way and 10 ms of relay latency, with ``speculate`` on and off, and prints per
run: seconds, speculative copies (and how many for units past their deadline), the bytes
the links carried (both directions, every link) and Dask's own transfer bytes. Exact
against numpy every time. The load average is printed first.

Not a test: a run takes tens of seconds. ``PYTHONPATH`` decides which distal is measured
(the workers import the same one).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from elastic_helpers import gemm, gemm_inputs
from netns_pool import netns_pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores", flush=True)
    k, x = gemm(n=args.n, grid=(8, 8)), gemm_inputs(args.n)
    want = x["B"] @ x["C"]
    for nw in args.workers:
        with netns_pool(n=nw, rate_mbit=40.0, delay_s=0.010) as pool:
            small, xs = gemm(n=16, grid=(2, 2)), gemm_inputs(16)
            small.run(xs, runtime="dask", client=pool.client, progress=False)  # warm up
            for rep in range(args.reps):
                for spec in (True, False):
                    before = pool.counters()
                    t0 = time.perf_counter()
                    res = k.run(
                        x, runtime="dask", client=pool.client, progress=False, speculate=spec
                    )
                    took = time.perf_counter() - t0
                    after = pool.counters()
                    moved = sum(
                        after[ns][0] - before[ns][0] + after[ns][1] - before[ns][1] for ns in before
                    )
                    s = res.extra["summary"]
                    ok = np.array_equal(res.value, want)
                    print(
                        f"workers {nw} rep {rep} speculate={spec!s:5}: {took:6.2f} s, "
                        f"copies {s.speculative:3d} (overdue {s.overdue:3d}, won "
                        f"{s.speculative_won:3d}), links {moved / 1e6:7.1f} MB, dask "
                        f"transfers {res.extra['dask_transfer_bytes'] / 1e6:7.1f} MB, "
                        f"exact {ok}, load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
