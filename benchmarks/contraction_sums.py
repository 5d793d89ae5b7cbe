"""Sums of contractions that are never formed, against numpy in the same run.

    .venv/bin/python benchmarks/contraction_sums.py [--n 100000] [--rounds 5]

``dl.einsum("i,j->", x, x)`` (numpy operands) runs as ``sum(x) * sum(x)``: each operand is
summed over the letters only it carries before the rest is contracted
(``distal.kernels.leaf._presummed``); ``dl.einsum("i,j->ij", X, X).sum()`` on a DArray is one
einsum, the product never formed. Each is timed beside numpy's ``np.einsum`` of the same
subscripts and numpy's factored ``np.sum(x) * np.sum(x)``; prints the medians of
``--rounds`` and the ratios (distal / numpy: below 1, distal faster), every result checked.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import distal as dl


def median_time(fn, rounds: int) -> tuple[float, object]:
    out = fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10**5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip-np-einsum", action="store_true", help="numpy's n*n loop is slow")
    args = ap.parse_args(argv)
    x = np.random.default_rng(0).random(args.n)
    want = float(np.sum(x)) ** 2
    rows = []
    t_fact, v = median_time(lambda: np.sum(x) * np.sum(x), args.rounds)
    rows.append(("numpy sum(x) * sum(x)", t_fact, v))
    if not args.skip_np_einsum:
        t_np, v = median_time(lambda: np.einsum("i,j->", x, x), 1)
        rows.append(('numpy einsum("i,j->")', t_np, v))
    t_dl, v = median_time(lambda: dl.einsum("i,j->", x, x), args.rounds)
    rows.append(('dl.einsum("i,j->")', t_dl, v))
    sess = dl.Session("local")
    X = sess.asarray(x)
    t_arr, v = median_time(lambda: float(dl.einsum("i,j->ij", X, X).sum()), args.rounds)
    rows.append(('DArray einsum("i,j->ij").sum()', t_arr, v))
    print(f"n = {args.n}; medians of {args.rounds} rounds")
    for name, t, val in rows:
        ok = abs(float(val) - want) <= 1e-10 * abs(want)
        print(f"  {name:34s} {t * 1e3:10.3f} ms  {'ok' if ok else 'WRONG'}")
        if not ok:
            return 1
    print(f"ratio dl.einsum / numpy factored: {t_dl / t_fact:.1f}")
    if not args.skip_np_einsum:
        print(f"ratio dl.einsum / numpy einsum:   {t_dl / t_np:.5f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
