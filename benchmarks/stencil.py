"""A 2-D Jacobi / 5-point stencil written with slices, distal against numpy in one run.

``python benchmarks/stencil.py [--n 4096] [--iters 10] [--procs 2] [--rounds 3]`` runs the
same function on a numpy array and on a ``dl.DArray`` (``dl.Session("local",
machine=procs)``)::

    for _ in range(iters):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])

numpy makes a temporary per operation (three sums, a product) and copies the last into the
interior; distal records the sweep and runs it as one kernel per iteration (fused: one loop
over each processor's block and halo). The rounds alternate numpy and distal; each prints
both times per iteration and the ratio ``numpy / distal`` (above 1: distal is faster), then
the best of each. It also prints the kernel's predicted halo words against those counted
by hand from the block sizes and those the run measured, and checks the result against
numpy's (bit for bit: the same order of operations). The load average is printed first;
compare ratios from one run.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

import distal as dl


def sweeps(u: Any, iters: int) -> Any:
    """The stencil as numpy users write it (the same code for both)."""
    for _ in range(iters):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return u


def start(n: int) -> np.ndarray:
    u = np.zeros((n, n))
    u[0, :] = 1.0  # a hot edge
    u[:, 0] = np.linspace(1.0, 0.0, n)
    return u


def timed_numpy(a: np.ndarray, iters: int) -> tuple[float, np.ndarray]:
    u = a.copy()
    sweeps(u, 1)  # as distal's first (untimed) sweep
    t0 = time.perf_counter()
    sweeps(u, iters)
    return (time.perf_counter() - t0) / iters, u


def timed_distal(sess: dl.Session, a: np.ndarray, iters: int) -> tuple[float, Any]:
    u = sess.asarray(a)
    sweeps(u, 1)  # placement and (first round only) the compile
    sess.flush()
    t0 = time.perf_counter()
    sweeps(u, iters)
    sess.flush()
    return (time.perf_counter() - t0) / iters, u


def halo_words(n: int, procs: int) -> list[int]:
    """Words each processor receives, by hand: its block's interior rows read one row above
    and one below; the rows outside its block are its neighbours', whole (n columns)."""
    c = -(-n // procs)
    out = []
    for b in range(procs):
        lo, hi = min(b * c, n), min((b + 1) * c, n)
        a, z = max(lo, 1), min(hi, n - 1)
        out.append(0 if z <= a else n * ((a - 1 < lo) + (z + 1 > hi)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    n, iters = args.n, args.iters
    a = start(n)
    sess = dl.Session("local", machine=args.procs, check_stats=True)
    print(f"{n} x {n} float64, {iters} sweeps a round, {args.procs} processors (local runtime)")
    best_np = best_dl = float("inf")
    for r in range(args.rounds):
        t_np, want = timed_numpy(a, iters)
        before = sess.kernels_run
        t_dl, u = timed_distal(sess, a, iters)
        kernels = (sess.kernels_run - before) / (iters + 1)
        best_np, best_dl = min(best_np, t_np), min(best_dl, t_dl)
        got = np.asarray(u)
        ok = "same bits" if np.array_equal(got, want) else f"max diff {np.abs(got - want).max()}"
        print(
            f"round {r}: numpy {t_np * 1e3:8.1f} ms/iter   distal {t_dl * 1e3:8.1f} ms/iter   "
            f"ratio {t_np / t_dl:5.2f}x   ({kernels:.0f} kernel/iter, {ok})"
        )
        del u, got
    print(
        f"best: numpy {best_np * 1e3:.1f} ms, distal {best_dl * 1e3:.1f} ms/iter: "
        f"ratio {best_np / best_dl:.2f}x"
    )
    kernel = next(k for key, k in sess.arrays_program().kernels.items() if key[0] == "region")
    print(f"halo words by hand:  {halo_words(n, args.procs)}")
    print(f"predicted (Stats):   {kernel.stats().words_received}")
    print(
        f"runs checked against their prediction: {sess.stats_checked}, "
        f"differing: {len(sess.stats_differ)}"
    )


if __name__ == "__main__":
    main()
