"""What ``verify="check"`` costs per CG iteration in a Dask session (values on the workers).

    python benchmarks/elastic_cg_check.py [--grid 300] [--iters 10] [--reps 3]

``dl.apps.cg`` on the ``grid^2`` 2-D Laplacian (5 stored entries a row), 4 processors, in a
``dl.Session("dask")`` over two single-threaded worker processes, with and without
``verify="check"`` (every unit's result tested on the other worker; an SpMV unit is
checked by computing it again, ``check.recompute_cheaper``; vector kernels by the
randomized projection). Groups alternate the order of the two variants; printed: ms per
iteration (the median over groups of iterations 2..iters, the first being compile and
placement), the overhead as the ratio of medians, and the driver words per iteration.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import statistics
import time

import numpy as np
import scipy.sparse as sp
from distributed import Client, LocalCluster

import distal as dl


def laplacian(g: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(g, g))
    return (sp.kron(sp.eye(g), t) + sp.kron(t, sp.eye(g))).tocsr()


def per_iteration(client: Client, A: sp.csr_matrix, b: np.ndarray, iters: int, **opts) -> tuple:
    """Seconds per iteration (iterations 2..iters) and driver words per iteration."""
    times = []
    for its in (1, iters):
        sess = dl.Session("dask", client=client, machine=4, progress=False, **opts)
        t0 = time.perf_counter()
        dl.apps.cg(A, b, session=sess, maxiter=its, tol=0.0)
        times.append(time.perf_counter() - t0)
        words = sess.driver_words
        sess.close()
    return (times[1] - times[0]) / (iters - 1), words / iters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=int, default=300)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    A = laplacian(args.grid)
    b = np.ones(A.shape[0])
    print(f"load average: {os.getloadavg()[0]:.2f}; n = {A.shape[0]}, nnz = {A.nnz}")
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        runs: dict[str, list[float]] = {"plain": [], "check": []}
        words: dict[str, float] = {}
        for r in range(args.reps):
            order = ["plain", "check"] if r % 2 == 0 else ["check", "plain"]
            for name in order:
                opts = {"verify": "check"} if name == "check" else {}
                t, w = per_iteration(client, A, b, args.iters, **opts)
                runs[name].append(t)
                words[name] = w
        for name, ts in runs.items():
            print(
                f"{name:>5}: {statistics.median(ts) * 1e3:8.1f} ms/iteration "
                f"(runs {', '.join(f'{t * 1e3:.1f}' for t in ts)}); "
                f"driver words/iteration {words[name]:.1f}"
            )
        ratio = statistics.median(runs["check"]) / statistics.median(runs["plain"])
        print(f"verify='check' overhead per CG iteration: {ratio - 1:+.1%} (target <= +5%)")


if __name__ == "__main__":
    main()
