"""Churn: how much longer does a CG run take when one of 8 workers is killed mid-run?

Run (from the repository root, with the ``dask`` extra installed)::

    .venv/bin/python benchmarks/elastic_churn.py [--n 2048] [--iters 30] [--reps 3]

One pool of 8 single-threaded worker processes (a ``LocalCluster``: its nanny starts a new
worker for each one killed). The same CG, ``iters`` iterations on a dense SPD matrix of
order ``n`` from ``x0 = 0``, is written twice:

* distal: ``dl.apps.cg`` in a checkpointed ``dl.Session("dask")`` (its vectors held on
  the workers, one future per block; every iteration saved);
* Dask: the textbook loop on ``dask.array`` (row blocks, one per worker), persisting
  ``x``, ``r`` and ``p`` after each iteration and reading ``r . r`` as a real solver's
  stopping test does. A lost block is recomputed from its lineage.

Each is timed undisturbed, then with one worker SIGKILLed halfway through (at half the
undisturbed time), best of ``reps`` each; the figure is killed / undisturbed (target for
distal: at most 1.15). Both end with the same solution as numpy's loop (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import distal as dl


def spd(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    m = rng.standard_normal((n, n)) / np.sqrt(n)
    return m @ m.T + 2.0 * np.eye(n)


def numpy_cg(A: np.ndarray, b: np.ndarray, iters: int) -> np.ndarray:
    x, r = np.zeros_like(b), b.copy()
    p, rs = r.copy(), r @ r
    for _ in range(iters):
        q = A @ p
        alpha = rs / (p @ q)
        x, r = x + alpha * p, r - alpha * q
        rs_new = r @ r
        p, rs = r + (rs_new / rs) * p, rs_new
    return x


def distal_cg(client: Any, A: np.ndarray, b: np.ndarray, iters: int) -> np.ndarray:
    sess = dl.Session("dask", client=client, checkpoint=tempfile.mkdtemp(), progress=False)
    x, _ = dl.apps.cg(A, b, machine=8, tol=0.0, maxiter=iters, session=sess)
    return x


def dask_cg(client: Any, A: np.ndarray, b: np.ndarray, iters: int) -> np.ndarray:
    import dask.array as da

    import dask

    n = b.shape[0]
    rows = -(-n // 8)
    dA = client.persist(da.from_array(A, chunks=(rows, n)))
    x = da.zeros(n, chunks=rows)
    r = client.persist(da.from_array(b, chunks=rows))
    p, rs = r, float(r @ r)
    for _ in range(iters):
        q = dA @ p
        alpha = rs / (p @ q)
        x, r = x + alpha * p, r - alpha * q
        rs_new = float(r @ r)  # the stopping test's read
        p = r + (rs_new / rs) * p
        x, r, p = dask.persist(x, r, p)
        rs = rs_new
    return x.compute()


def timed(
    client: Any, fn: Callable[..., np.ndarray], args: tuple, kill_at: float | None
) -> tuple[float, np.ndarray, bool]:
    """Seconds ``fn(client, *args)`` takes, its result, and whether a worker was killed
    while it ran (at ``kill_at`` seconds)."""
    out: dict[str, Any] = {}

    def go() -> None:
        out["x"] = fn(client, *args)

    t = threading.Thread(target=go)
    t0 = time.perf_counter()
    t.start()
    killed = False
    if kill_at is not None:
        t.join(kill_at)
        if t.is_alive():
            pids = client.run(os.getpid)
            os.kill(pids[sorted(pids)[0]], signal.SIGKILL)
            killed = True
    t.join()
    dt = time.perf_counter() - t0
    if "x" not in out:
        raise RuntimeError(f"{fn.__name__} failed")
    if killed:
        client.wait_for_workers(8, timeout=120)  # the nanny's replacement
    return dt, out["x"], killed


def main() -> None:
    from distributed import Client, LocalCluster

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    A = spd(args.n)
    b = np.random.default_rng(1).standard_normal(args.n)
    want = numpy_cg(A, b, args.iters)
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    print(f"CG, n = {args.n} dense, {args.iters} iterations, 8 workers (processes)")
    report: dict[str, Any] = {}
    with (
        LocalCluster(
            n_workers=8,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as client,
    ):
        for name, fn in (("distal", distal_cg), ("dask", dask_cg)):
            fn(client, A, b, 2)  # warm: imports, compiles
            calm = []
            for _ in range(args.reps):
                dt, x, _ = timed(client, fn, (A, b, args.iters), None)
                np.testing.assert_allclose(x, want, rtol=1e-8, atol=1e-10)
                calm.append(dt)
            t0 = min(calm)
            hit = []
            for _ in range(args.reps):
                dt, x, killed = timed(client, fn, (A, b, args.iters), t0 / 2)
                np.testing.assert_allclose(x, want, rtol=1e-8, atol=1e-10)
                if killed:
                    hit.append(dt)
            t1 = min(hit) if hit else float("nan")
            report[name] = {"undisturbed_s": t0, "one_killed_s": t1, "slowdown": t1 / t0}
            print(
                f"  {name:7s} undisturbed {t0:7.2f} s   one of 8 killed {t1:7.2f} s   "
                f"slowdown x{t1 / t0:.2f}  ({len(hit)} runs killed mid-run)"
            )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
