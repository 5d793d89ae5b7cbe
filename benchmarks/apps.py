"""dl.apps against their usual single-process peers: per-iteration times from one run.

    python benchmarks/apps.py [--procs P] [--json PATH] [--large] [--sparse | --sparse-only]

* CP-ALS (dense ``I x J x K`` tensor, rank ``R``, a fixed number of iterations) against
  tensorly's ``parafac`` (random init, the error computed each iteration as here), and
  once more in a session with a checkpoint location (the loop's ``save="latest"``);
* CG (dense SPD ``n x n``, a fixed number of iterations) against
  ``scipy.sparse.linalg.cg`` on the same dense matrix and on it as a CSR matrix;
* PageRank (random graph with dangling nodes, a fixed number of iterations) against a numpy
  power iteration on the dense Google matrix and a scipy CSR power iteration.

distal runs on the local runtime, ``P`` processors in this one process (every processor's
kernel part runs in turn), so its times include the whole runtime's work per kernel. The
load average is printed with the figures: the machine may be shared. Every distal call is
made once first (one iteration), so first-call costs such as imports are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
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
    problem = f"{'x'.join(map(str, shape))} R={rank}"

    def run(k: int, checkpoint: str | None = None):  # type: ignore[no-untyped-def]
        sess = _sess(checkpoint)
        return dl.apps.cp_als(X, rank, machine=P, iters=k, tol=0.0, session=sess)

    run(1)  # first-call costs (imports, BLAS set-up) are not the loop's
    (_, _, fit), sec = timed(lambda: run(iters))
    _, setup = timed(lambda: run(0))
    rows.append(
        dict(app="cp_als", problem=problem, impl=f"distal local P={P}", iters=iters, sec=sec,
             setup=setup, fit=fit)
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as ck:  # every iteration offered to the checkpoint
        _, sec = timed(lambda: run(iters, f"{ck}/a"))
        _, setup = timed(lambda: run(0, f"{ck}/b"))
    rows.append(
        dict(app="cp_als", problem=problem, impl=f"distal local P={P} checkpointed", iters=iters,
             sec=sec, setup=setup)
    )  # fmt: skip
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
        dict(app="cp_als", problem=problem, impl="tensorly parafac", iters=len(errs), sec=sec,
             fit=1 - errs[-1])
    )  # fmt: skip
    return rows


def bench_cg(P: int, n=2000, iters=50) -> list[dict]:
    import scipy.sparse as sp
    from scipy.sparse.linalg import cg

    rng = np.random.default_rng(1)
    if n <= 4000:
        Q = rng.standard_normal((n, n))
        A = Q @ Q.T / n + np.eye(n)
    else:  # a shifted symmetric random matrix (eigenvalues in about [1.6, 4.4]): no n^3 set-up
        A = rng.standard_normal((n, n))
        A += A.T
        A /= 2 * np.sqrt(n)
        A[np.diag_indices(n)] += 3.0
    b = rng.standard_normal(n)
    rows = []
    problem = f"n={n}"

    def run(k: int):  # type: ignore[no-untyped-def]
        return dl.apps.cg(A, b, machine=P, tol=0.0, maxiter=k, session=_sess())

    run(1)
    (x, its), sec = timed(lambda: run(iters))
    _, setup = timed(lambda: run(0))
    rows.append(
        dict(app="cg", problem=problem, impl=f"distal local P={P}", iters=its, sec=sec,
             setup=setup)
    )  # fmt: skip
    for name, M in (("scipy cg (dense)", A), ("scipy cg (CSR)", sp.csr_array(A))):
        count = [0]

        def cb(_xk, count=count) -> None:
            count[0] += 1

        (y, _), sec = timed(lambda M=M, cb=cb: cg(M, b, rtol=1e-300, maxiter=iters, callback=cb))
        rows.append(dict(app="cg", problem=problem, impl=name, iters=count[0], sec=sec))
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

    run(1)
    x, sec = timed(lambda: run(iters))
    _, setup = timed(lambda: run(0))
    rows.append(
        dict(app="pagerank", problem=f"n={n}", impl=f"distal local P={P}", iters=iters, sec=sec,
             setup=setup)
    )  # fmt: skip
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
        rows.append(dict(app="pagerank", problem=f"n={n}", impl=name, iters=iters, sec=sec))
        rows[-1]["max_diff_vs_distal"] = float(np.max(np.abs(y / y.sum() - x)))
    return rows


def _loop(run, iters: int):  # type: ignore[no-untyped-def]
    """A sparse app's result, total time and set-up: the set-up is the one-iteration call's
    time less one iteration (binding the sparse kernels happens in the first iteration)."""
    one = min(timed(lambda: run(1))[1] for _ in range(3))  # the best of three: first-call noise
    out, sec = timed(lambda: run(iters))
    sec = min(sec, timed(lambda: run(iters))[1])
    per = (sec - one) / max(iters - 1, 1)
    return out, sec, one - per


def bench_sparse(P: int, iters: int = 30) -> list[dict]:
    """The applications on sparse inputs (their sparse kernels) against scipy's CSR loops:
    PageRank on an unpermuted R-MAT graph, CG on a banded SPD matrix, CP-ALS on a sparse
    rank-8 tensor (against tensorly's dense parafac on the same tensor)."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import cg

    from distal.sparse import generate

    rows: list[dict] = []
    # PageRank: R-MAT scale 18 (about 4 M links), non-zero split
    A = generate.rmat(18, 16, seed=3).to_scipy().tocsr()
    n = A.shape[0]
    problem = f"R-MAT 2^18 nnz={A.nnz}"

    def pr(k: int):  # type: ignore[no-untyped-def]
        return dl.apps.pagerank(A, machine=P, tol=0.0, maxiter=k, session=_sess())

    pr(1)
    x, sec, setup = _loop(pr, iters)
    rows.append(dict(app="pagerank", problem=problem, impl=f"distal local P={P} sparse",
                     iters=iters, sec=sec, setup=setup))  # fmt: skip
    s = np.asarray(A.sum(axis=1)).ravel()
    dangling = s == 0
    PT = sp.csr_array(A.multiply(np.divide(1.0, s, out=np.zeros(n), where=~dangling)[:, None]).T)

    def scipy_pr() -> np.ndarray:
        y = np.full(n, 1.0 / n)
        for _ in range(iters):
            y = 0.85 * (PT @ y) + (0.85 * y[dangling].sum() + 0.15) / n
        return y

    y, sec = timed(scipy_pr)
    diff = float(np.max(np.abs(y / y.sum() - x)))
    rows.append(dict(app="pagerank", problem=problem, impl="scipy CSR power iteration",
                     iters=iters, sec=sec, max_diff_vs_distal=diff))  # fmt: skip
    # CG: banded SPD, 2^20 rows, bandwidth 7 (about 7 M entries)
    B = generate.banded(1 << 20, 6, seed=4).to_scipy().tocsr()
    B = ((B + B.T) * 0.5).tocsr()
    B = (B + sp.diags(np.asarray(abs(B).sum(axis=1)).ravel() + 1.0)).tocsr()
    b = np.random.default_rng(5).standard_normal(B.shape[0])
    problem = f"banded 2^20 nnz={B.nnz}"

    def cgrun(k: int):  # type: ignore[no-untyped-def]
        return dl.apps.cg(B, b, machine=P, tol=0.0, maxiter=k, session=_sess())

    cgrun(1)
    (xc, its), sec, setup = _loop(cgrun, iters)
    rows.append(dict(app="cg", problem=problem, impl=f"distal local P={P} sparse", iters=its,
                     sec=sec, setup=setup))  # fmt: skip
    count = [0]

    def cb(_xk) -> None:
        count[0] += 1

    (yc, _), sec = timed(lambda: cg(B, b, rtol=1e-300, maxiter=iters, callback=cb))
    rows.append(dict(app="cg", problem=problem, impl="scipy cg (CSR)", iters=count[0], sec=sec,
                     max_diff_vs_distal=float(np.max(np.abs(yc - xc)))))  # fmt: skip
    # CP-ALS: a sparse rank-8 tensor (sparse factors), 200^3, about 1.7 % stored
    rng = np.random.default_rng(6)
    fs = [rng.random((200, 8)) * (rng.random((200, 8)) < 0.25) for _ in range(3)]
    X = np.einsum("ir,jr,kr->ijk", *fs)
    import sparse as pydata

    Xs = pydata.COO.from_numpy(X)
    problem = f"200^3 nnz={Xs.nnz} R=8"

    def cprun(k: int):  # type: ignore[no-untyped-def]
        return dl.apps.cp_als(Xs, 8, machine=P, iters=k, tol=0.0, session=_sess())

    cprun(1)
    _, sec, setup = _loop(cprun, iters)
    rows.append(dict(app="cp_als", problem=problem, impl=f"distal local P={P} sparse",
                     iters=iters, sec=sec, setup=setup))  # fmt: skip
    try:
        import tensorly as tl
        from tensorly.decomposition import parafac
    except ImportError:
        return rows
    tl.set_backend("numpy")
    (_cp, errs), sec = timed(
        lambda: parafac(
            X, 8, n_iter_max=iters, init="random", random_state=0, tol=1e-300, return_errors=True
        )
    )
    rows.append(dict(app="cp_als", problem=problem, impl="tensorly parafac (dense X)",
                     iters=len(errs), sec=sec))  # fmt: skip
    return rows


def _sess(checkpoint: str | None = None) -> dl.Session:
    return dl.Session(progress=False, checkpoint=checkpoint)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=max(1, min(os.cpu_count() or 1, 8)))
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument(
        "--large",
        action="store_true",
        help="also CP-ALS 200x200x200 rank 16 and CG n=8000 (arithmetic-bound sizes)",
    )
    ap.add_argument("--sparse", action="store_true", help="also the apps on sparse inputs")
    ap.add_argument("--sparse-only", action="store_true", help="only the apps on sparse inputs")
    args = ap.parse_args()
    load = os.getloadavg()
    print(
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  cores: {os.cpu_count()}"
    )
    if args.sparse_only:
        rows = bench_sparse(args.procs)
    else:
        rows = bench_cp(args.procs) + bench_cg(args.procs) + bench_pagerank(args.procs)
        if args.sparse:
            rows += bench_sparse(args.procs)
    if args.large:
        rows += bench_cp(args.procs, (200, 200, 200), 16, 10) + bench_cg(args.procs, 8000, 30)
    base: dict[tuple[str, str], float] = {}
    print(
        f"{'app':9} {'problem':18} {'implementation':34} {'iters':>5} {'total s':>9} "
        f"{'ms/iter':>9} {'ratio':>7}"
    )
    for r in rows:
        # distal: the time of the same call without iterations (inputs, kernels compiled,
        # the set-up kernels) is taken off, so the figure is the loop's own
        r["ms_per_iter"] = 1e3 * (r["sec"] - r.get("setup", 0.0)) / max(r["iters"], 1)
        base.setdefault((r["app"], r["problem"]), r["ms_per_iter"])
        r["distal_over_this"] = base[r["app"], r["problem"]] / r["ms_per_iter"]
        extra = "".join(
            f"  {k}={v:.3g}" for k, v in r.items() if k in ("setup", "fit", "max_diff_vs_distal")
        )
        print(
            f"{r['app']:9} {r['problem']:18} {r['impl']:34} {r['iters']:5d} {r['sec']:9.3f} "
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
