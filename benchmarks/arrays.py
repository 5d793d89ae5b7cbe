"""The arrays front against the single-process peers, side by side in one run.

``python benchmarks/arrays.py [--grid 1000] [--iters 20]`` prints, per iteration, P = 2 on
the local runtime:

* CG on the 2-D 5-point Laplacian (``grid x grid`` points) written on ``dl.DArray``s,
  against ``scipy.sparse.linalg.cg`` on the same matrix (both run a fixed number of
  iterations), against the same program with every operation its own kernel (unfused),
  and against ``dl.apps.cg`` (the application, on arrays too);
* PageRank's power iteration on an R-MAT graph (2^18 nodes, about 4 M links) written on
  arrays, against the same iteration with scipy;
* dispatch: a chain of five element-wise operations on 1000-element vectors, computed as
  one fused kernel, against numpy running the five operations;
* the same CG on a Dask session (``--dask``, on by default where the dask extra is
  installed): two single-threaded worker processes of a ``LocalCluster``, P = 2, against the
  local runtime's iteration measured in this run.

Ratios are ``peer time / distal time`` (above 1: distal is faster). The load average is
printed first; compare ratios from one run.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import distal as dl


def laplacian(n: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    return (sp.kron(sp.eye(n), t) + sp.kron(t, sp.eye(n))).tocsr()


def cg_arrays(sess: dl.Session, A: Any, b: Any, iters: int) -> Any:
    """CG as a user writes it on arrays (a fixed number of iterations)."""
    x, r = b * 0.0, b
    p, rs = r, r @ r
    for _ in range(iters):
        q = A @ p
        alpha = rs / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        rs_new = r @ r
        float(rs_new)  # the stopping test's read, as a real solver does
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


def cg_unfused(sess: dl.Session, A: Any, b: Any, iters: int) -> Any:
    """The same CG with every operation its own kernel (each intermediate held, so none
    is fused): what a runtime without fusion runs."""
    x, r = b * 0.0, b
    p, rs = r, r @ r
    for _ in range(iters):
        q = A @ p
        pq = p @ q
        alpha = rs / pq
        ap = alpha * p
        x = x + ap
        aq = alpha * q
        r = r - aq
        rs_new = r @ r
        float(rs_new)
        beta = rs_new / rs
        bp = beta * p
        p = r + bp
        rs = rs_new
    return x


def pagerank_arrays(sess: dl.Session, PT: Any, dangling: Any, n: int, iters: int) -> Any:
    """PageRank's power iteration as a user writes it on arrays: ``PT`` is the transposed,
    row-normalized link matrix, ``dangling`` 1 on rows without links."""
    x = dangling * 0.0 + 1.0 / n
    for _ in range(iters):
        x_new = 0.85 * (PT @ x) + (0.85 * (dangling @ x) + 0.15) / n
        delta = dl.abs(x_new - x).sum()
        float(delta)  # the stopping test's read
        x = x_new
    return x


def pagerank(k: int) -> None:
    from distal.sparse import generate

    A = generate.rmat(18, 16, seed=3).to_scipy().tocsr()
    n = A.shape[0]
    s = np.asarray(A.sum(axis=1)).ravel()
    dangling = (s == 0).astype(np.float64)
    scale = np.divide(1.0, s, out=np.zeros(n), where=s != 0)
    PT = sp.csr_array(A.multiply(scale[:, None]).T).tocsr()
    print(f"PageRank: R-MAT 2^18, nnz = {A.nnz}, {k} iterations, P = 2 (local runtime)")
    sess = dl.Session("local", machine=2)
    dPT, dd = sess.asarray(PT), sess.asarray(dangling)
    pagerank_arrays(sess, dPT, dd, n, 2).get()
    t_arr = best(lambda: pagerank_arrays(sess, dPT, dd, n, k).get()) / k
    got = pagerank_arrays(sess, dPT, dd, n, k).get()

    def scipy_pr() -> np.ndarray:
        y = np.full(n, 1.0 / n)
        for _ in range(k):
            y_new = 0.85 * (PT @ y) + (0.85 * (dangling @ y) + 0.15) / n
            float(np.abs(y_new - y).sum())
            y = y_new
        return y

    t_sp = best(scipy_pr) / k
    diff = float(np.max(np.abs(scipy_pr() - got)))
    print(f"  distal arrays   {t_arr * 1e3:8.2f} ms/iter")
    print(f"  scipy           {t_sp * 1e3:8.2f} ms/iter  (ratio scipy/distal {t_sp / t_arr:.2f}; "
          f"max diff {diff:.1e})")  # fmt: skip


def best(f: Any, repeats: int = 3) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--dask", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--only-cg", action="store_true", help="CG rows only (local and Dask)")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    A = laplacian(args.grid)
    n = A.shape[0]
    b = np.random.default_rng(0).standard_normal(n)
    k = args.iters
    print(f"CG: n = {n}, nnz = {A.nnz}, {k} iterations, P = 2 (local runtime)")

    sess = dl.Session("local", machine=2)
    dA, db = sess.asarray(A), sess.asarray(b)
    cg_arrays(sess, dA, db, 2).get()  # compile and place
    runs0 = sess.kernels_run
    t_arr = best(lambda: cg_arrays(sess, dA, db, k).get()) / k
    kernels = (sess.kernels_run - runs0) / (3 * k)
    t_sp = best(lambda: spla.cg(A, b, rtol=0.0, atol=0.0, maxiter=k)) / k
    # unfused: a session that runs every array's group by itself (fuse=False), with every
    # operation's result held, so that no element-wise chain is fused into another either
    sess_u = dl.Session("local", machine=2, fuse=False)
    uA, ub = sess_u.asarray(A), sess_u.asarray(b)
    cg_unfused(sess_u, uA, ub, 2).get()
    runs0 = sess_u.kernels_run
    t_unf = best(lambda: cg_unfused(sess_u, uA, ub, k).get()) / k
    unfused = (sess_u.kernels_run - runs0) / (3 * k)
    app_sess = dl.Session("local", progress=False)
    dl.apps.cg(A, b, machine=2, tol=0.0, maxiter=2, session=app_sess)
    t_app = best(lambda: dl.apps.cg(A, b, machine=2, tol=0.0, maxiter=k, session=app_sess)) / k
    print(f"  distal arrays   {t_arr * 1e3:8.2f} ms/iter  ({kernels:.1f} kernels/iter)")
    print(f"  unfused         {t_unf * 1e3:8.2f} ms/iter  ({unfused:.1f} kernels/iter; "
          f"fused x{t_unf / t_arr:.2f} faster)")  # fmt: skip
    print(f"  dl.apps.cg      {t_app * 1e3:8.2f} ms/iter  (arrays, with its checks and names)")
    print(f"  scipy cg        {t_sp * 1e3:8.2f} ms/iter  (ratio scipy/distal {t_sp / t_arr:.2f})")
    if args.dask:
        dask_cg(A, b, k, t_arr)
    if args.only_cg:
        return

    pagerank(k)

    v = np.random.default_rng(1).standard_normal(1000)
    sess2 = dl.Session("local", machine=2)
    sess2["v"] = v
    x = sess2["v"]

    def chain() -> None:
        sess2["w"] = (((x * 2.0 + 1.0) * x - x) * 0.5) + x  # five operations, one group

    chain()
    runs0 = sess2.kernels_run
    reps = 200
    t_chain = best(lambda: [chain() for _ in range(reps)]) / reps
    assert (sess2.kernels_run - runs0) == 3 * reps
    t_np = best(lambda: [(((v * 2.0 + 1.0) * v - v) * 0.5) + v for _ in range(reps)]) / reps
    print("dispatch: five element-wise operations on 1000-element vectors")
    print(f"  distal (one fused group)  {t_chain * 1e6:8.1f} us  (a map: it multiplies sums)")
    print(f"  numpy (five operations)   {t_np * 1e6:8.1f} us  ({t_np / 5 * 1e6:.1f} us each)")
    dask_chain(v, reps)
    cupynumeric_op()


def dask_cg(A: Any, b: np.ndarray, k: int, t_local: float) -> None:
    """The arrays CG on a Dask session: two single-threaded worker processes on this machine,
    P = 2, values held on the workers; per iteration, against the local runtime's
    ``t_local`` measured in the same run."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        print(f"  Dask session: not measured ({e}; pip install -e '.[dask]')")
        return
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as client,
    ):
        sess = dl.Session("dask", client=client, machine=2, progress=False)
        dA, db = sess.asarray(A), sess.asarray(b)
        cg_arrays(sess, dA, db, 2).get()  # compile, place, and the workers' first leaves
        runs0, words0 = sess.kernels_run, sess.driver_words
        t = best(lambda: cg_arrays(sess, dA, db, k).get()) / k
        kernels = (sess.kernels_run - runs0) / (3 * k)
        words = (sess.driver_words - words0) / (3 * k)
        x = cg_arrays(sess, dA, db, k).get()
    local = dl.Session("local", machine=2)
    want = cg_arrays(local, local.asarray(A), local.asarray(b), k).get()
    diff = float(np.max(np.abs(x - want)))
    print(f"  Dask session    {t * 1e3:8.2f} ms/iter  ({kernels:.1f} kernels/iter, "
          f"{words - A.shape[0] / k:.0f} driver words/iter beside x; "
          f"{t / t_local:.1f}x the local iteration; max diff {diff:.1e})")  # fmt: skip


def cupynumeric_op() -> None:
    """One element-wise operation in cuPyNumeric's numpy (``benchmarks/peers``; its own venv,
    ``sh benchmarks/setup_cupynumeric.sh``), or why it did not run."""
    from peers import cupynumeric_launcher

    data, why = cupynumeric_launcher.run(256, 64, 3)
    if why is not None:
        print(f"  cuPyNumeric: not measured ({why})")
        return
    print(f"  cuPyNumeric (x + 1.0)     {data['op_us']:8.1f} us  (numpy {data['op_numpy_us']:.1f})")


def dask_chain(v: np.ndarray, reps: int) -> None:
    """The same chain as a Dask array in two chunks (one per core), computed each time with
    Dask's threaded scheduler: what a deferred, fused array library costs per evaluation."""
    try:
        import dask.array as da

        import dask
    except ImportError as e:
        print(f"  Dask array: not measured ({e}; pip install -e '.[dask]')")
        return
    x = da.from_array(v, chunks=(v.shape[0] + 1) // 2)

    def chain() -> None:
        (((x * 2.0 + 1.0) * x - x) * 0.5 + x).compute(scheduler="threads")

    chain()
    with dask.config.set(scheduler="threads"):
        t = best(lambda: [chain() for _ in range(reps // 4)]) / (reps // 4)
    print(f"  Dask array (2 chunks)     {t * 1e6:8.1f} us  (one .compute() of the chain)")


if __name__ == "__main__":  # Dask's worker processes import this file again
    main()
