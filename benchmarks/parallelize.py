"""``Schedule.parallelize`` on a 2-processor plan whose leaves cannot use both cores alone.

Usage::

    .venv/bin/python benchmarks/parallelize.py [--n 256] [--k 128] [--repeat 9]

Kernels (each compiled with and without ``parallelize`` of an output loop, timed in
interleaved pairs in one process, medians reported):

* ``einsum3``: ``A(i,j) = B(i,j,k) * C(i,k) * D(j,k)`` on ``Machine(2)`` cut along ``i``:
  every letter but one is shared, so there is no GEMM form and the leaf is numpy's
  single-threaded einsum loop;
* ``ttm-1blas``: TTM ``A(i,j,l) = B(i,j,k) C(k,l)`` on ``Machine(2)`` with BLAS at one
  thread, i.e. the case where each leaf call is single-threaded BLAS; ``parallelize(ii)``
  (the inner loop of the distributed ``i``) cuts ``i``, so each chunk is still one GEMM.

Results must be identical with and without ``parallelize`` and the measured stats equal
(checked on every pair).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import distal as dl
from distal.kernels import blas
from distal.kernels.leaf import term_kernels


def compiled(sched: Any) -> Any:
    """``dl.compile(sched)`` with leaves that honour the schedule's parallelized loops."""
    kernel = dl.compile(sched)
    if sched.parallel and not any(tk.parallel for tk in kernel.kernels):
        kernel.kernels = term_kernels(sched.statement, sched)
    return kernel


def einsum3(n: int, k: int) -> tuple[Any, Any, dict[str, np.ndarray]]:
    i, j, kk, io, ii = dl.index_vars("i j k io ii")
    m = dl.Machine(2)
    A = dl.Tensor("A", (n, n), dist="ij -> i", machine=m)
    B = dl.Tensor("B", (n, n, k), dist="ijk -> i", machine=m)
    C = dl.Tensor("C", (n, k), dist="ik -> i", machine=m)
    D = dl.Tensor("D", (n, k), dist="jk -> *", machine=m)
    A[i, j] = B[i, j, kk] * C[i, kk] * D[j, kk]
    s = dl.schedule(A).distribute([i], [io], [ii], m).communicate([A, B, C, D], io)
    rng = np.random.default_rng(0)
    data = {"B": rng.random((n, n, k)), "C": rng.random((n, k)), "D": rng.random((n, k))}
    return s, s.parallelize(j), data


def ttm(n: int, k: int) -> tuple[Any, Any, dict[str, np.ndarray]]:
    i, j, kk, ll, io, ii = dl.index_vars("i j k l io ii")
    m = dl.Machine(2)
    A = dl.Tensor("A", (n, n, 32), dist="ijl -> i", machine=m)
    B = dl.Tensor("B", (n, n, k), dist="ijk -> i", machine=m)
    C = dl.Tensor("C", (k, 32), dist="kl -> *", machine=m)
    A[i, j, ll] = B[i, j, kk] * C[kk, ll]
    s = dl.schedule(A).distribute([i], [io], [ii], m).communicate([A, B, C], io)
    rng = np.random.default_rng(0)
    data = {"B": rng.random((n, n, k)), "C": rng.random((k, 32))}
    return s, s.parallelize(ii), data


def pairs(plain: Any, par: Any, data: dict[str, np.ndarray], repeat: int) -> tuple[float, float]:
    kp, kq = compiled(plain), compiled(par)
    ref = kp.run(data, trace=False)
    got = kq.run(data, trace=False)
    assert np.array_equal(np.asarray(ref.value), np.asarray(got.value)), "results differ"
    assert ref.stats == got.stats, "stats differ"
    ta, tb = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        kp.run(data, trace=False)
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        kq.run(data, trace=False)
        tb.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


def one_blas_thread() -> Any:
    import contextlib

    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-not-found]

        return threadpool_limits(1, user_api="blas")
    except ImportError:
        pass
    lib = blas._LIB
    if lib is None or lib.set_global is None:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def one() -> Any:
        before = blas.threads()
        lib.set_global(1)
        try:
            yield
        finally:
            lib.set_global(before)

    return one()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    print(f"BLAS binding {blas.binding()}, {blas.threads()} BLAS threads")
    print("| kernel | serial leaf ms | parallelize ms | speed-up |")
    print("|---|---:|---:|---:|")
    plain, par, data = einsum3(a.n, a.k)
    t0, t1 = pairs(plain, par, data, a.repeat)
    print(f"| einsum3 n={a.n} k={a.k} | {t0 * 1e3:.1f} | {t1 * 1e3:.1f} | {t0 / t1:.2f}x |")
    plain, par, data = ttm(a.n, a.k)
    with one_blas_thread():
        t0, t1 = pairs(plain, par, data, a.repeat)
    print(f"| ttm-1blas n={a.n} k={a.k} | {t0 * 1e3:.1f} | {t1 * 1e3:.1f} | {t0 / t1:.2f}x |")


if __name__ == "__main__":
    main()
