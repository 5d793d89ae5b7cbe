"""dl.apps against their usual single-process peers: per-iteration times from one run.

    python benchmarks/apps.py [--procs P] [--json PATH]

* CP-ALS (dense ``I x J x K`` tensor, rank ``R``, a fixed number of iterations) against
  tensorly's ``parafac`` (random init, the error computed each iteration as here);
* CG (dense SPD ``n x n``, a fixed number of iterations) against
  ``scipy.sparse.linalg.cg`` on the same dense matrix and on it as a CSR matrix;
* PageRank (random graph with dangling nodes, a fixed number of iterations) against a numpy
  power iteration on the dense Google matrix and a scipy CSR power iteration.

distal runs on the local runtime, ``P`` processors in this one process (every processor's
kernel part runs in turn), so its times include the whole runtime's work per kernel. The
load average is printed with the figures: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import distal as dl


def timed(fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def bench_cp(P: int, shape=(60, 50, 40), rank=8, iters=20) -> list[dict]:
    rng = np.random.default_rng(0)
    X = np.einsum("ir,jr,kr->ijk", *(rng.random((s, rank)) for s in shape))
    X += 0.01 * rng.standard_normal(shape)
    rows = []

    def run(k: int):  # type: ignore[no-untyped-def]
        return dl.apps.cp_als(X, rank, machine=P, iters=k, tol=0.0, session=_sess())

    (_, _, fit), sec = timed(lambda: run(iters))
    _, setup = timed(lambda: run(0))
    rows.append(
        dict(app="cp_als", impl=f"distal local P={P}", iters=iters, sec=sec, setup=setup, fit=fit)
    )
    try:
        import tensorly as tl
        from tensorly.decomposition import parafac
    except ImportError as e:
        print(f"tensorly not installed ({e}); pip install 'distal[bench]'")
        return rows
    tl.set_backend("numpy")
    (_cp, errs), sec = timed(
        lambda: parafac(
            X,
            rank,
            n_iter_max=iters,
            init="random",
            random_state=0,
            tol=1e-300,
            return_errors=True,
        )
    )
    rows.append(
        dict(app="cp_als", impl="tensorly parafac", iters=len(errs), sec=sec, fit=1 - errs[-1])
    )
    return rows


def bench_cg(P: int, n=2000, iters=50) -> list[dict]:
    import scipy.sparse as sp
    from scipy.sparse.linalg import cg

    rng = np.random.default_rng(1)
    Q = rng.standard_normal((n, n))
    A = Q @ Q.T / n + np.eye(n)
    b = rng.standard_normal(n)
    rows = []

    def run(k: int):  # type: ignore[no-untyped-def]
        return dl.apps.cg(A, b, machine=P, tol=0.0, maxiter=k, session=_sess())

    (x, its), sec = timed(lambda: run(iters))
    _, setup = timed(lambda: run(0))
    rows.append(dict(app="cg", impl=f"distal local P={P}", iters=its, sec=sec, setup=setup))
    for name, M in (("scipy cg (dense)", A), ("scipy cg (CSR)", sp.csr_array(A))):
        count = [0]

        def cb(_xk, count=count) -> None:
            count[0] += 1

        (y, _), sec = timed(lambda M=M, cb=cb: cg(M, b, rtol=1e-300, maxiter=iters, callback=cb))
        rows.append(dict(app="cg", impl=name, iters=count[0], sec=sec))
        rows[-1]["max_diff_vs_distal"] = float(np.max(np.abs(y - x)))
    return rows


def bench_pagerank(P: int, n=2000, iters=50, d=0.85) -> list[dict]:
    import scipy.sparse as sp

    rng = np.random.default_rng(2)
    a = (rng.random((n, n)) < 0.01) * rng.random((n, n))
    a[rng.choice(n, n // 20, replace=False)] = 0.0
    rows = []

    def run(k: int):  # type: ignore[no-untyped-def]
        return dl.apps.pagerank(a, machine=P, damping=d, tol=0.0, maxiter=k, session=_sess())

    x, sec = timed(lambda: run(iters))
    _, setup = timed(lambda: run(0))
    rows.append(dict(app="pagerank", impl=f"distal local P={P}", iters=iters, sec=sec, setup=setup))
    s = a.sum(axis=1)
    dangling = s == 0
    P_ = np.divide(a, s[:, None], out=np.zeros_like(a), where=~dangling[:, None])

    def dense() -> np.ndarray:
        G = d * np.where(dangling[:, None], 1.0 / n, P_) + (1 - d) / n
        y = np.full(n, 1.0 / n)
        for _ in range(iters):
            y = G.T @ y
        return y

    PT = sp.csr_array(P_.T)

    def sparse() -> np.ndarray:
        y = np.full(n, 1.0 / n)
        for _ in range(iters):
            y = d * (PT @ y) + (d * y[dangling].sum() + 1 - d) / n
        return y

    for name, fn in (
        ("numpy power iteration (dense G)", dense),
        ("scipy CSR power iteration", sparse),
    ):
        y, sec = timed(fn)
        rows.append(dict(app="pagerank", impl=name, iters=iters, sec=sec))
        rows[-1]["max_diff_vs_distal"] = float(np.max(np.abs(y / y.sum() - x)))
    return rows


def _sess() -> dl.Session:
    return dl.Session(progress=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=max(1, min(os.cpu_count() or 1, 8)))
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args()
    load = os.getloadavg()
    print(
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  cores: {os.cpu_count()}"
    )
    rows = bench_cp(args.procs) + bench_cg(args.procs) + bench_pagerank(args.procs)
    base: dict[str, float] = {}
    print(
        f"{'app':9} {'implementation':34} {'iters':>5} {'total s':>9} {'ms/iter':>9} {'ratio':>7}"
    )
    for r in rows:
        # distal: the time of the same call without iterations (inputs, kernels compiled,
        # the set-up kernels) is taken off, so the figure is the loop's own
        r["ms_per_iter"] = 1e3 * (r["sec"] - r.get("setup", 0.0)) / max(r["iters"], 1)
        base.setdefault(r["app"], r["ms_per_iter"])
        r["distal_over_this"] = base[r["app"]] / r["ms_per_iter"]
        extra = "".join(
            f"  {k}={v:.3g}" for k, v in r.items() if k in ("setup", "fit", "max_diff_vs_distal")
        )
        print(
            f"{r['app']:9} {r['impl']:34} {r['iters']:5d} {r['sec']:9.3f} "
            f"{r['ms_per_iter']:9.2f} {r['distal_over_this']:7.2f}{extra}"
        )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("ratio: distal's time per iteration over this implementation's")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load": load, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
