"""The sparse leaf kernels (:class:`distal.kernels.sparse_leaf.TermLeaf`) against scipy and
numpy, and two processors (threads) against one.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sparse_leaf.py [--rows 1000000] \
        [--nnz 4000000] [--cols 32] [--dim 100000] [--repeat 5]

Cases (each timed in interleaved rounds in one process; the minimum and the median of the
rounds are printed, ratios from the medians):

* ``spmv``: ``y(i) = B(i,j) x(j)`` on a random CSR ``B`` with ``--rows`` rows and columns
  and ``--nnz`` stored entries, against scipy's ``B @ x``;
* ``spmm``: ``Y(i,k) = B(i,j) C(j,k)`` with ``--cols`` columns, against scipy's ``B @ C``;
* ``sddmm``: ``A(i,j) = B(i,j) sum_k C(i,k) D(k,j)`` on B's pattern, against numpy's
  ``(C[rows] * D.T[cols]).sum(1) * vals``;
* ``mttkrp``: ``A(i,l) = T(i,j,k) B(j,l) C(k,l)`` on a random ``--dim``-cube with ``--nnz``
  entries, against numpy's ``np.add.at(A, i, vals[:, None] * B[j] * C[k])``;
* ``2 threads``: the entries cut in two halves by row (two processors of the local
  runtime), each half's TermLeaf in its own thread, against one TermLeaf over all the
  entries in one thread; the same for scipy's ``B @ x`` / ``B @ C`` on the two row
  halves;
* ``stall``: whether a kernel releases the GIL, seen from another Python thread: how long
  that thread waits, at most, to wake from a short sleep while the kernel runs (about one
  call when the kernel holds the GIL). The two-thread times depend on a free second core;
  this does not.

The numpy formulations run in chunks of ``--chunk`` entries (each chunk the formulation
above), so that their temporaries (``nnz x cols`` elements each) fit in memory; the
chunking makes them faster, not slower.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from distal.kernels.sparse_leaf import TermLeaf


def random_csr(rows: int, cols: int, nnz: int, rng: np.random.Generator) -> sp.csr_array:
    """A CSR matrix with ``nnz`` entries at uniformly random positions (duplicates kept)."""
    r = np.sort(rng.integers(0, rows, nnz))
    c = rng.integers(0, cols, nnz)
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=rows), out=indptr[1:])
    return sp.csr_array((rng.standard_normal(nnz), c, indptr), shape=(rows, cols))


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def in_threads(*fns: Callable[[], object]) -> Callable[[], None]:
    """A function that runs ``fns`` each in its own thread and waits for all."""

    def run() -> None:
        ts = [threading.Thread(target=f) for f in fns]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return run


def longest_stall(fn: Callable[[], object], calls: int = 5) -> float:
    """The longest this thread waits to wake from a 0.5 ms sleep while another thread calls
    ``fn`` ``calls`` times: about one call's time when ``fn`` holds the GIL, about a
    millisecond when it releases it."""
    t = threading.Thread(target=lambda: [fn() for _ in range(calls)])
    t.start()
    longest, last = 0.0, time.perf_counter()
    while t.is_alive():
        time.sleep(0.0005)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    t.join()
    return longest


def stalls(cases: dict[str, Callable[[], object]], med: dict[str, float]) -> None:
    for k, fn in cases.items():
        print(
            f"  -> {k}: another thread stalls up to {longest_stall(fn) * 1e3:.1f} ms "
            f"(one call: {med[k] * 1e3:.1f} ms)"
        )


def compare(name: str, cases: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Time ``cases`` in ``repeat`` interleaved rounds (after one warm-up call each); print
    and return the medians."""
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for k, fn in cases.items():
            times[k].append(timed(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {name:8s} {k:28s} min {min(v) * 1e3:9.1f} ms   median {med[k] * 1e3:9.1f} ms")
    return med


def ratio(label: str, num: float, den: float) -> None:
    print(f"  -> {label}: {num / den:.2f}x")


def halves(ptr: np.ndarray) -> int:
    """The row at which a CSR's entries split in two equal halves."""
    return int(np.searchsorted(ptr, ptr[-1] // 2))


def bench_matrix(a: argparse.Namespace, rng: np.random.Generator) -> None:
    """SpMV, SpMM and SDDMM on one random CSR matrix."""
    B = random_csr(a.rows, a.rows, a.nnz, rng)
    rows = np.repeat(np.arange(a.rows), np.diff(B.indptr))
    cols = B.indices.astype(np.int64)
    vals = B.data
    x = rng.standard_normal(a.rows)
    C = rng.standard_normal((a.rows, a.cols))
    mid = halves(B.indptr)
    lo, hi = B[:mid], B[mid:]
    cut = int(B.indptr[mid])

    def leaf_pair(subs: str) -> tuple[TermLeaf, TermLeaf, TermLeaf]:
        ext = {"k": a.cols}
        whole = TermLeaf(rows, [cols], [subs], subs, a.rows, ext)
        first = TermLeaf(rows[:cut], [cols[:cut]], [subs], subs, mid, ext)
        second = TermLeaf(rows[cut:] - mid, [cols[cut:]], [subs], subs, a.rows - mid, ext)
        return whole, first, second

    # -- SpMV -----------------------------------------------------------------------------
    print("SpMV")
    spmv, spmv1, spmv2 = leaf_pair("")
    y = np.zeros(a.rows)
    y1, y2 = y[:mid], y[mid:]
    assert spmv.path == "csr-spmv", spmv.path
    med = compare(
        "spmv",
        {
            "TermLeaf": lambda: spmv(y, vals, [x]),
            "scipy B @ x": lambda: B @ x,
            "TermLeaf halves, 2 threads": in_threads(
                lambda: spmv1(y1, vals[:cut], [x]), lambda: spmv2(y2, vals[cut:], [x])
            ),
            "scipy halves, 2 threads": in_threads(lambda: lo @ x, lambda: hi @ x),
        },
        a.repeat,
    )
    ratio("scipy / TermLeaf (1 thread)", med["scipy B @ x"], med["TermLeaf"])
    ratio("TermLeaf 1 thread / 2 threads", med["TermLeaf"], med["TermLeaf halves, 2 threads"])
    ratio("scipy 1 thread / 2 threads", med["scipy B @ x"], med["scipy halves, 2 threads"])
    stalls({"TermLeaf": lambda: spmv(y, vals, [x]), "scipy B @ x": lambda: B @ x}, med)
    y[:] = 0
    spmv(y, vals, [x])
    np.testing.assert_allclose(y, B @ x, rtol=1e-10, atol=1e-10)

    # -- SpMM -----------------------------------------------------------------------------
    print(f"SpMM ({a.cols} columns)")
    spmm, spmm1, spmm2 = leaf_pair("k")
    Y = np.zeros((a.rows, a.cols))
    Y1, Y2 = Y[:mid], Y[mid:]
    assert spmm.path == "csr-spmm", spmm.path
    med = compare(
        "spmm",
        {
            "TermLeaf": lambda: spmm(Y, vals, [C]),
            "scipy B @ C": lambda: B @ C,
            "TermLeaf halves, 2 threads": in_threads(
                lambda: spmm1(Y1, vals[:cut], [C]), lambda: spmm2(Y2, vals[cut:], [C])
            ),
            "scipy halves, 2 threads": in_threads(lambda: lo @ C, lambda: hi @ C),
        },
        a.repeat,
    )
    ratio("scipy / TermLeaf (1 thread)", med["scipy B @ C"], med["TermLeaf"])
    ratio("TermLeaf 1 thread / 2 threads", med["TermLeaf"], med["TermLeaf halves, 2 threads"])
    ratio("scipy 1 thread / 2 threads", med["scipy B @ C"], med["scipy halves, 2 threads"])
    stalls({"TermLeaf": lambda: spmm(Y, vals, [C]), "scipy B @ C": lambda: B @ C}, med)
    Y[:] = 0
    spmm(Y, vals, [C])
    np.testing.assert_allclose(Y, B @ C, rtol=1e-10, atol=1e-10)

    # -- SDDMM ----------------------------------------------------------------------------
    print(f"SDDMM ({a.cols} columns)")
    D = rng.standard_normal((a.cols, a.rows))
    Dt = np.ascontiguousarray(D.T)
    nnz = vals.shape[0]
    sddmm = TermLeaf(np.arange(nnz), [rows, cols], ["k", "k"], "", nnz, {"k": a.cols})
    assert sddmm.path == "numba-sddmm", sddmm.path
    s_out = np.zeros(nnz)

    def sddmm_numpy() -> np.ndarray:
        res = np.empty(nnz)
        for b in range(0, nnz, a.chunk):
            e = slice(b, b + a.chunk)
            res[e] = (C[rows[e]] * Dt[cols[e]]).sum(1) * vals[e]
        return res

    med = compare(
        "sddmm",
        {"TermLeaf": lambda: sddmm(s_out, vals, [C, Dt]), "numpy": sddmm_numpy},
        a.repeat,
    )
    ratio("numpy / TermLeaf", med["numpy"], med["TermLeaf"])
    s_out[:] = 0
    sddmm(s_out, vals, [C, Dt])
    np.testing.assert_allclose(s_out, sddmm_numpy(), rtol=1e-10, atol=1e-10)


def bench_mttkrp(a: argparse.Namespace, rng: np.random.Generator) -> None:
    """MTTKRP on a random 3-tensor."""
    dim = a.dim
    print(f"MTTKRP (3-tensor {dim}^3, {a.nnz} entries, l={a.cols})")
    ti = np.sort(rng.integers(0, dim, a.nnz))
    tj = rng.integers(0, dim, a.nnz)
    tk = rng.integers(0, dim, a.nnz)
    tv = rng.standard_normal(a.nnz)
    F = rng.standard_normal((dim, a.cols))
    G = rng.standard_normal((dim, a.cols))
    ext = {"l": a.cols}
    mttkrp = TermLeaf(ti, [tj, tk], ["l", "l"], "l", dim, ext)
    assert mttkrp.path == "numba-mttkrp", mttkrp.path
    tcut = a.nnz // 2
    tmid = int(ti[tcut])
    tcut = int(np.searchsorted(ti, tmid))
    m1 = TermLeaf(ti[:tcut], [tj[:tcut], tk[:tcut]], ["l", "l"], "l", tmid, ext)
    m2 = TermLeaf(ti[tcut:] - tmid, [tj[tcut:], tk[tcut:]], ["l", "l"], "l", dim - tmid, ext)
    M = np.zeros((dim, a.cols))
    M1, M2 = M[:tmid], M[tmid:]

    def mttkrp_numpy() -> np.ndarray:
        res = np.zeros((dim, a.cols))
        for b in range(0, a.nnz, a.chunk):
            e = slice(b, b + a.chunk)
            np.add.at(res, ti[e], tv[e, None] * F[tj[e]] * G[tk[e]])
        return res

    med = compare(
        "mttkrp",
        {
            "TermLeaf": lambda: mttkrp(M, tv, [F, G]),
            "numpy add.at": mttkrp_numpy,
            "TermLeaf halves, 2 threads": in_threads(
                lambda: m1(M1, tv[:tcut], [F, G]), lambda: m2(M2, tv[tcut:], [F, G])
            ),
        },
        a.repeat,
    )
    ratio("numpy / TermLeaf", med["numpy add.at"], med["TermLeaf"])
    ratio("TermLeaf 1 thread / 2 threads", med["TermLeaf"], med["TermLeaf halves, 2 threads"])
    M[:] = 0
    mttkrp(M, tv, [F, G])
    np.testing.assert_allclose(M, mttkrp_numpy(), rtol=1e-10, atol=1e-10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--nnz", type=int, default=4_000_000)
    ap.add_argument("--cols", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=1 << 20)
    ap.add_argument("--dim", type=int, default=100_000, help="MTTKRP tensor extent (cube)")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"rows {a.rows}, nnz {a.nnz}, cols {a.cols}, repeat {a.repeat}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    bench_matrix(a, rng)
    bench_mttkrp(a, rng)


if __name__ == "__main__":
    main()
