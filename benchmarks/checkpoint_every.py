"""What saving every iteration of a checkpointed loop costs: CG, as ``dl.apps.cg`` runs it.

    .venv/bin/python benchmarks/checkpoint_every.py [--grid 400] [--iters 40] [--rounds 3]

CG on the 2-D 5-point Laplacian of a ``grid x grid`` mesh (``grid^2`` rows), written on
arrays as ``dl.apps.cg`` is (its four values ``x, r, p, r.r`` kept per iteration), run in
one local session three ways: without a checkpoint; ``save="every"`` (what ``dl.apps``
does: iteration ``it`` is on disk before ``it + 1`` starts); ``save="latest"`` (a writer
thread behind the computation, iterations finished while it is busy skipped). Prints the
median time per iteration of ``--rounds`` runs of each, the ratios against no checkpoint,
the bytes saved per iteration and the load average; every run's ``x`` is checked equal
(the checkpoint never changes the numbers). The checkpoint goes to a temporary directory
(``--dir`` for another filesystem).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import scipy.sparse as sp

import distal as dl


def laplacian(n: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    return (sp.kron(sp.eye(n), t) + sp.kron(t, sp.eye(n))).tocsr()


def cg(A: sp.csr_matrix, b: np.ndarray, iters: int, checkpoint: str | None, save: str) -> tuple:
    """``iters`` CG iterations; the seconds of the loop alone and the final ``x``."""
    sess = dl.Session("local", machine=2, progress=False, checkpoint=checkpoint)
    A_, b_ = sess.asarray(A), sess.asarray(b)
    x, r, p, rs = b_ * 0.0, b_, b_, b_ @ b_
    keep = ["cg_x", "cg_r", "cg_p", "cg_rr"] if checkpoint else []
    if checkpoint:
        sess["cg_x"], sess["cg_r"], sess["cg_p"], sess["cg_rr"] = x, r, p, rs
        x, r, p, rs = (sess.array(n) for n in keep)
    t0 = time.perf_counter()
    for _ in sess.iterations(iters, keep=keep, name="cg", save=save):
        q = A_ @ p
        pq = p @ q
        if not float(pq) > 0:  # (as dl.apps.cg reads it: its breakdown check)
            break
        alpha = rs / pq
        x = x + alpha * p
        r = r - alpha * q
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
        if checkpoint:
            sess["cg_x"], sess["cg_r"], sess["cg_p"], sess["cg_rr"] = x, r, p, rs
    seconds = time.perf_counter() - t0  # (the loop's end waits for its last save)
    return seconds, np.asarray(x.get())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=int, default=400)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the checkpoints go (a temporary dir)")
    args = ap.parse_args(argv)
    A = laplacian(args.grid)
    b = np.random.default_rng(0).random(A.shape[0])
    cg(A, b, 2, None, "every")  # first calls: compiles
    times: dict[str, list[float]] = {"none": [], "every": [], "latest": []}
    ref = None
    for _ in range(args.rounds):
        for mode in times:
            with tempfile.TemporaryDirectory(dir=args.dir) as d:
                ck = None if mode == "none" else os.path.join(d, "ck")
                secs, x = cg(A, b, args.iters, ck, "every" if mode == "none" else mode)
            times[mode].append(secs / args.iters)
            if ref is None:
                ref = x
            elif not np.array_equal(ref, x):
                print(f"WRONG: {mode} changed the result")
                return 1
    per = {m: statistics.median(t) for m, t in times.items()}
    words = 3 * A.shape[0] + 1
    print(f"CG on {A.shape[0]} rows, {args.iters} iterations, local runtime, 2 processors")
    print(f"saved per iteration: {words * 8 / 2**20:.1f} MiB (x, r, p, r.r)")
    for m in times:
        print(f"  {m:7s} {per[m] * 1e3:8.2f} ms / iteration  ({per[m] / per['none']:.2f}x)")
    print(f"load average: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
