"""What checking one SpMV unit costs a checker: computing it again, against the unit's kept
checksum ``c = r^T A`` (``verify="check"`` on a pool), and the unit's own computation.

    python benchmarks/elastic_checksum.py [--grid 1000] [--procs 4] [--repeat 5]

The 5-point Laplacian on a ``grid x grid`` mesh (or ``--rmat SCALE``), bound once and cut by
rows over ``--procs`` virtual processors; each unit is handed its input blocks as a worker
would get them, in this process (no pool: only the checker's own work is timed). Per unit,
best of ``--repeat``: the unit's SpMV as the worker computes it, the check by recomputing
(what every check cost before the checksum), the first checksum check (which makes ``c``:
one pass over the entries) and a later one (``r . y`` against ``c . x``, with the unit's
input structure and values hashed to find ``c``). A wrong result (one element off by
four times the tolerance) is rejected by the kept checksum in every unit, and the report
gives that tolerance, the smallest error in one element it sees, against the median
element.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

import distal as dl
from distal.plan.region import Entries
from distal.runtime.elastic import tasks, units
from distal.runtime.elastic.check import recompute_verdict


def laplacian(g: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(g, g))
    return (sp.kron(sp.eye(g), t) + sp.kron(t, sp.eye(g))).tocsr()


def _blocks(bound: Any, data: dict[str, Any], u: Any) -> list[tuple[str, Any, Any]]:
    plan, out = bound.plan, []
    for t, idx in u.needs:
        r = units.block_region(plan, t, idx)
        if isinstance(r, Entries):
            out.append((t, units.Span(r.shape), np.asarray(data[t].vals)[r.positions]))
        else:
            out.append((t, r, np.asarray(data[t])[tuple(slice(lo, hi) for lo, hi in r)]))
    return out


def _best(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=int, default=1000)
    ap.add_argument("--rmat", type=int, default=0, help="an R-MAT matrix of 2^SCALE rows")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if args.rmat:
        from distal.sparse.generate import rmat

        A = rmat(args.rmat, 16, seed=0).to_scipy().tocsr()
    else:
        A = laplacian(args.grid)
    x = np.random.default_rng(0).standard_normal(A.shape[1])
    alg = dl.algorithms.spmv(A.shape, dl.Machine(args.procs), "rows")
    inputs = {"B": A, "c": x}
    bound = alg.compile().bind(inputs)
    data = bound.check_inputs(inputs)
    ctx = tasks.Ctx("bench", bound.kernels, np.dtype(np.float64), None, lambda: None)
    # as the driver hands it: the unit's structure named by the plan's key, not hashed
    named = dataclasses.replace(ctx, plan_key=tasks.plan_key(bound.plan))
    print(
        f"load average {os.getloadavg()[0]:.2f}; matrix {A.shape[0]:,} rows, {A.nnz:,} "
        f"entries, {args.procs} units by rows; ms per unit, best of {args.repeat}"
    )
    print(f"{'unit':>22} {'entries':>10} {'compute':>8} {'recompute':>10} {'first':>8} "
          f"{'kept':>8} {'kept/compute':>12} {'named':>8} {'named/compute':>13}")  # fmt: skip
    rows, seen = [], []
    for u in units.decompose(bound.plan):
        u = u.task()
        blocks = _blocks(bound, data, u)
        y, _, _ = tasks._compute(ctx, u, blocks)
        entries = sum(len(t.out) for _, _, ws in u.steps for w in ws for t in w.terms)
        compute = _best(lambda u=u, b=blocks: tasks._compute(ctx, u, b), args.repeat)

        def recompute(u: Any = u, b: Any = blocks, y: Any = y) -> Any:
            want, _, _ = tasks._compute(ctx, u, b)
            mag, _, _ = tasks._compute(ctx, u, b, absolute=True)
            return recompute_verdict(y, want, mag, 1, 1, ctx.out_dtype)

        again = _best(recompute, args.repeat)
        tasks._CHECKSUMS.clear()
        t0 = time.perf_counter()
        v = tasks.verdict(ctx, u, blocks, y, 1, None)
        first = time.perf_counter() - t0
        assert v.ok, v.describe()
        assert not v.exact, v.describe()
        kept = _best(lambda u=u, b=blocks, y=y: tasks.verdict(ctx, u, b, y, 1, None), args.repeat)
        assert tasks.verdict(named, u, blocks, y, 1, None).ok  # (makes the named checksum)
        fast = _best(lambda u=u, b=blocks, y=y: tasks.verdict(named, u, b, y, 1, None), args.repeat)
        bad = y.copy()
        bad[len(bad) // 2] += 4 * v.tol  # |r| >= 1: the left side moves by 4 tol at least
        assert not tasks.verdict(ctx, u, blocks, bad, 1, None).ok
        stored = np.abs(y[y != 0])  # (a row block's empty rows are zeros)
        seen.append(v.tol / float(np.median(stored)) if stored.size else float("nan"))
        rows.append((compute, again, first, kept, fast))
        print(f"{u.name:>22} {entries:>10,} {compute * 1e3:8.2f} {again * 1e3:10.2f} "
              f"{first * 1e3:8.2f} {kept * 1e3:8.2f} {kept / compute:12.2f} "
              f"{fast * 1e3:8.2f} {fast / compute:13.2f}")  # fmt: skip
    c, a, f, k, n = (sum(r[i] for r in rows) for i in range(5))
    print(f"{'all units':>22} {A.nnz:>10,} {c * 1e3:8.2f} {a * 1e3:10.2f} {f * 1e3:8.2f} "
          f"{k * 1e3:8.2f} {k / c:12.2f} {n * 1e3:8.2f} {n / c:13.2f}")  # fmt: skip
    print(
        f"a kept checksum's check costs {k / a:.2f}x a recomputing one and {k / c:.2f}x the "
        f"SpMV itself ({n / c:.2f}x with the unit named by the driver's plan key); an element "
        "4x the tolerance off rejected in every unit; the smallest error in one element a "
        f"kept checksum sees: {max(seen):.1e} of the median |y|"
    )


if __name__ == "__main__":
    main()
