"""STREAM copy and triad: the memory bandwidth the sparse kernels are held against.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/stream.py
        [--threads 2] [--repeat 10] [--mib 160]

McCalpin's STREAM kernels over float64 arrays of ``--mib`` MiB each (default 160 MiB, five
times a 32 MiB last-level cache, so no array stays in cache between passes)::

    copy    c[i] = a[i]                 16 bytes per element
    triad   a[i] = b[i] + s * c[i]      24 bytes per element

Bytes are counted as STREAM counts them: each array read or written once, no write-allocate
traffic. The kernels are numba ``prange`` loops on ``--threads`` threads (numba is in the
``sparse`` extra); without numba, numpy ufuncs on ``--threads`` equal slices, one Python thread
each (ufuncs release the GIL). Each figure is the best of ``--repeat`` passes after a warm-up
pass that also first-touches the arrays.

Other benchmarks import :func:`triad_bandwidth`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MIB = 160
SCALAR = 3.0


def _numba_kernels(threads: int) -> tuple[str, Callable[..., None], Callable[..., None]] | None:
    """numba's parallel copy and triad on ``threads`` threads; None without numba."""
    try:
        import numba
    except ImportError:
        return None
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))

    @numba.njit(parallel=True, cache=False)
    def copy(a: np.ndarray, c: np.ndarray) -> None:
        for i in numba.prange(a.shape[0]):
            c[i] = a[i]

    @numba.njit(parallel=True, cache=False)
    def triad(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: float) -> None:
        for i in numba.prange(a.shape[0]):
            a[i] = b[i] + s * c[i]

    label = f"numba {numba.__version__} prange, {numba.get_num_threads()} threads"
    return label, copy, triad


def _numpy_kernels(threads: int) -> tuple[str, Callable[..., None], Callable[..., None]]:
    """numpy ufuncs on ``threads`` equal slices, one thread each."""
    pool = ThreadPoolExecutor(threads)

    def split(n: int) -> list[slice]:
        cuts = np.linspace(0, n, threads + 1).astype(int)
        return [slice(int(lo), int(hi)) for lo, hi in itertools.pairwise(cuts)]

    def copy(a: np.ndarray, c: np.ndarray) -> None:
        list(pool.map(lambda e: np.copyto(c[e], a[e]), split(len(a))))

    def part(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: float, e: slice) -> None:
        np.multiply(c[e], s, out=a[e])
        np.add(a[e], b[e], out=a[e])

    def triad(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: float) -> None:
        list(pool.map(lambda e: part(a, b, c, s, e), split(len(a))))

    # numpy's triad makes two passes over a: it moves 32 bytes per element, counted as 24
    return f"numpy ufuncs, {threads} threads (two-pass triad)", copy, triad


def kernels(threads: int) -> tuple[str, Callable[..., None], Callable[..., None]]:
    """The copy and triad kernels and what they are."""
    return _numba_kernels(threads) or _numpy_kernels(threads)


def _best(fn: Callable[[], None], repeat: int) -> float:
    fn()  # the warm-up (and numba's compilation)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure(threads: int = 2, repeat: int = 10, mib: int = MIB) -> dict[str, float | str]:
    """Copy and triad bandwidth in bytes/s (best of ``repeat``), and the kernels' label."""
    n = (mib << 20) // 8
    label, copy, triad = kernels(threads)
    a = np.full(n, 1.0)
    b = np.full(n, 2.0)
    c = np.zeros(n)
    t_copy = _best(lambda: copy(a, c), repeat)
    t_triad = _best(lambda: triad(a, b, c, SCALAR), repeat)
    if not np.all(a[:: max(1, n // 1000)] == 2.0 + SCALAR * 1.0):
        raise RuntimeError("triad computed the wrong values")
    return {"copy": 16 * n / t_copy, "triad": 24 * n / t_triad, "kernels": label, "n": n}


def triad_bandwidth(threads: int = 2, repeat: int = 10, mib: int = MIB) -> float:
    """The STREAM triad bandwidth in bytes/s on ``threads`` threads (best of ``repeat``)."""
    return float(measure(threads, repeat, mib)["triad"])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--mib", type=int, default=MIB, help="MiB per array")
    args = p.parse_args(argv)
    print(f"load average before: {os.getloadavg()}")
    r = measure(args.threads, args.repeat, args.mib)
    print(f"kernels: {r['kernels']}; 3 arrays of {r['n']:,} float64 ({args.mib} MiB each)")
    print(f"copy   {float(r['copy']) / 1e9:7.2f} GB/s  (best of {args.repeat})")
    print(f"triad  {float(r['triad']) / 1e9:7.2f} GB/s  (best of {args.repeat})")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
