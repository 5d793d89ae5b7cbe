"""What ``verify="check"`` and ``verify="adaptive"`` cost per CG iteration in a Dask session
(values on the workers).

    python benchmarks/elastic_cg_check.py [--grid 300] [--iters 10] [--reps 3] [--warm 30]

``dl.apps.cg`` on the ``grid^2`` 2-D Laplacian (5 stored entries a row), 4 processors, in a
``dl.Session("dask")`` over two single-threaded worker processes: without verification,
with ``verify="check"`` (every unit's result tested on the other worker; an SpMV unit
against its checksum ``c = r^T A``, made on the first check and kept, ``check.
entry_checksum``; vector kernels by the randomized projection) and with
``verify="adaptive"`` (a worker's results checked with a probability that falls, down to
1/20, with its run of verified results). Each variant's
session first solves ``--warm`` iterations (compiling, placing, and earning trust), then
times a 1- and an ``iters``-iteration solve; groups rotate the order of the variants.
Printed: ms per iteration (the median over groups of iterations 2..iters), each overhead as
the ratio of medians, the driver words per iteration, the time of the SpMV's kernel runs per
iteration (``Session._execute``, timed around each call; under verification it includes
waiting for its units' checks) and its extra time under each verification as a share of the
unverified iteration (the issue's target names the SpMV's check), and the share of results
the adaptive session checked while timed.
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
from distal.runtime.elastic.trust import FLOOR


def laplacian(g: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(g, g))
    return (sp.kron(sp.eye(g), t) + sp.kron(t, sp.eye(g))).tocsr()


def per_iteration(
    client: Client, A: sp.csr_matrix, b: np.ndarray, iters: int, warm: int, **opts
) -> tuple:
    """Seconds per iteration (iterations 2..iters), driver words per iteration, and (under
    ``verify="adaptive"``) the fraction of results checked in the timed calls.

    One session per variant: first a ``warm``-iteration solve (compiles, places, and under
    ``"adaptive"`` earns the workers their trust), then the timed solves on it."""
    sess = dl.Session("dask", client=client, machine=4, progress=False, **opts)
    dl.apps.cg(A, b, session=sess, maxiter=warm, tol=0.0)
    # the kernel runs' own time (CG's one kernel is the SpMV ``A @ p``; the element-wise
    # sets are not kernel runs): what its units and, verified, their checks cost the loop
    spent = [0.0]
    execute = sess._execute

    def timed_execute(*a, **k):
        t = time.perf_counter()
        try:
            return execute(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t

    sess._execute = timed_execute
    trust = sess.trust
    before = (trust.checked, trust.unchecked) if trust is not None else (0, 0)
    times, kernel = [], []
    w0 = sess.driver_words
    for its in (1, iters):
        spent[0] = 0.0
        t0 = time.perf_counter()
        dl.apps.cg(A, b, session=sess, maxiter=its, tol=0.0)
        times.append(time.perf_counter() - t0)
        kernel.append(spent[0])
    words = sess.driver_words - w0
    share = None
    if trust is not None:
        checked, unchecked = trust.checked - before[0], trust.unchecked - before[1]
        share = checked / max(checked + unchecked, 1)
    sess.close()
    per = (times[1] - times[0]) / (iters - 1)
    return per, words / (iters + 1), share, (kernel[1] - kernel[0]) / (iters - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=int, default=300)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warm", type=int, default=30, help="iterations solved before timing")
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
        variants = {"plain": {}, "check": {"verify": "check"}, "adaptive": {"verify": "adaptive"}}
        runs: dict[str, list[float]] = {name: [] for name in variants}
        spmv: dict[str, list[float]] = {name: [] for name in variants}
        words: dict[str, float] = {}
        shares: list[float] = []
        for r in range(args.reps):
            names = list(variants)
            order = names[r % 3 :] + names[: r % 3]  # rotate which variant goes first
            for name in order:
                t, w, share, k = per_iteration(
                    client, A, b, args.iters, args.warm, **variants[name]
                )
                runs[name].append(t)
                spmv[name].append(k)
                words[name] = w
                if share is not None:
                    shares.append(share)
        for name, ts in runs.items():
            print(
                f"{name:>8}: {statistics.median(ts) * 1e3:8.1f} ms/iteration "
                f"(runs {', '.join(f'{t * 1e3:.1f}' for t in ts)}); "
                f"driver words/iteration {words[name]:.1f}; the SpMV's runs "
                f"{statistics.median(spmv[name]) * 1e3:.1f} ms/iteration "
                f"({', '.join(f'{k * 1e3:.1f}' for k in spmv[name])})"
            )
        base = statistics.median(runs["plain"])
        for name in ("check", "adaptive"):
            ratio = statistics.median(runs[name]) / base
            print(f"verify={name!r} overhead per CG iteration: {ratio - 1:+.1%} (target <= +5%)")
            # paired by round: the SpMV run's extra time under verification, as a share of
            # that round's unverified iteration
            pairs = zip(spmv[name], spmv["plain"], runs["plain"], strict=True)
            extra = [(k - k0) / t0 for k, k0, t0 in pairs]
            print(
                f"verify={name!r}: the SpMV's check, its run's extra time, "
                f"{statistics.median(extra):+.1%} of an unverified iteration "
                f"(rounds {', '.join(f'{e:+.1%}' for e in extra)}; target <= +5%)"
            )
        print(
            f"adaptive: {statistics.median(shares):.1%} of results checked in the timed solves "
            f"(after a {args.warm}-iteration warm-up; floor {FLOOR:.0%})"
        )


if __name__ == "__main__":
    main()
