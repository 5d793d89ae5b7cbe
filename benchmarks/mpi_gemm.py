"""GEMM on the MPI runtime: distal Cannon / SUMMA on 4 ranks vs numpy on 2 threads.

Run (from the repository root, with the ``mpi`` and ``bench`` extras installed)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/mpi_gemm.py

One invocation times numpy's ``b @ c`` on 2 BLAS threads in this process, then launches
``mpiexec -n 4`` once per algorithm (every rank with 1 BLAS thread), and prints GFLOP/s next
to each other together with each rank's peak memory against the plan's ``peak_words * 8``
bytes. Inputs are built per block with ``dl.from_function`` (no rank ever holds them whole)
and the result stays distributed (``gather="none"``); correctness is checked on a sample of
entries of every rank's block.

Figures: ``execute`` is the slowest rank's time from the first fetch to the end of the final
phase (what numpy's single call corresponds to); ``run`` is the whole ``kernel.run`` wall
time, which adds placing the inputs (evaluating the functions) and the stats exchange.
Peak memory is the tracemalloc peak of numpy allocations during ``kernel.run`` (placing the
inputs included) and the peak RSS growth over the same span.
On a 2-core machine 4 ranks are oversubscribed 2x: the ranks share the cores with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FLOP = 2.0


def fb(i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """B's element (i, j): a smooth function of the global index."""
    return np.sin(i * 0.001 + j * 0.0007)


def fc(i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """C's element (i, j)."""
    return np.cos(i * 0.0003 - j * 0.0011)


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ModuleNotFoundError:
        return "threadpoolctl not installed (pip install 'distal[bench]')"
    infos = [x for x in threadpool_info() if x.get("user_api") == "blas"]
    return "; ".join(
        f"{x.get('internal_api')} {x.get('version')} {x.get('architecture')} "
        f"threads={x.get('num_threads')}"
        for x in infos
    )


def _vm(field: str) -> int:
    """A /proc/self/status memory field in bytes (0 where unavailable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _reset_peak_rss() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def worker(n: int, algorithm: str, repeat: int) -> None:
    """One rank: run the kernel ``repeat`` times, measure, report through rank 0."""
    import distal as dl
    from distal.cli import gemm_kernel
    from distal.runtime.mpi import world

    world()  # MPI_Init (and its shared-memory segments) before anything is measured
    kernel = gemm_kernel(n, (2, 2), algorithm)
    B = dl.from_function((n, n), fb)
    C = dl.from_function((n, n), fc)
    tracemalloc.start()
    best: Any = None
    mem: list[tuple[int, int]] = []
    for _ in range(repeat):
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        rss0 = _vm("VmRSS")
        _reset_peak_rss()
        res = kernel.run({"B": B, "C": C}, runtime="mpi", gather="none")
        traced = tracemalloc.get_traced_memory()[1] - base
        rss = max(_vm("VmHWM") - rss0, 0)
        mem.append((traced, rss))
        if best is None or res.extra["execute_seconds"] < best.extra["execute_seconds"]:
            best = res
        del res
    # correctness: sampled entries of this rank's block against dot products of rows/columns
    rng = np.random.default_rng(best.rank)
    errors = []
    for box, block in best.blocks.items():
        (i0, i1), (j0, j1) = box
        for _ in range(16):
            i, j = int(rng.integers(i0, i1)), int(rng.integers(j0, j1))
            ks = np.arange(n)
            want = float(fb(np.full(n, i), ks) @ fc(ks, np.full(n, j)))
            errors.append(abs(block[i - i0, j - j0] - want) / max(1.0, abs(want)))
    report = {
        "rank": best.rank,
        "execute_seconds": best.extra["execute_seconds"],
        "run_seconds": best.seconds,
        "compute_seconds": best.extra["compute_seconds"],
        "traced_peak_bytes": max(t for t, _ in mem),
        "rss_peak_growth_bytes": max(r for _, r in mem),
        "plan_peak_bytes": kernel.stats().peak_words[best.rank] * 8,
        "max_sample_error": max(errors, default=0.0),
        "measured_equals_predicted": best.stats.as_dict() == kernel.stats().as_dict(),
        "blas": blas_info(),
    }
    Path(os.environ["DISTAL_BENCH_OUT"] + f".{best.rank}").write_text(json.dumps(report))


def numpy_gflops(n: int, threads: int, repeat: int) -> tuple[float, float]:
    """Best GFLOP/s of ``b @ c`` on ``threads`` BLAS threads (and its seconds)."""
    from threadpoolctl import threadpool_limits

    i, j = np.ogrid[0:n, 0:n]
    b, c = fb(i, j), fc(i, j)
    with threadpool_limits(limits=threads, user_api="blas"):
        b @ c
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            b @ c
            times.append(time.perf_counter() - t0)
    s = min(times)
    return FLOP * n**3 / s / 1e9, s


def launch(n: int, algorithm: str, repeat: int, out: Path) -> list[dict[str, Any]]:
    """Run the worker on 4 ranks with 1 BLAS thread each; the ranks' reports."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["DISTAL_BENCH_OUT"] = str(out)
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    cmd = [mpiexec, "-n", "4", sys.executable, __file__, "--worker"]
    cmd += ["--n", str(n), "--algorithm", algorithm, "--repeat", str(repeat)]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    return [json.loads(Path(f"{out}.{r}").read_text()) for r in range(4)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per algorithm (best)")
    ap.add_argument("--algorithm", default=None, help="worker only")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.n, args.algorithm, args.repeat)
        return
    n = args.n
    print(f"GEMM n={n} float64; machine: {os.cpu_count()} cores")
    print(
        "env: OPENBLAS_CORETYPE="
        f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')} "
        f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')}"
    )
    # numpy is timed before and after the MPI jobs (best of both): a shared machine's load
    # varies, and the comparison should not hinge on when numpy happened to run
    gf_np, s_np = numpy_gflops(n, 2, max(args.repeat, 2))
    import tempfile

    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for alg in ("cannon", "summa"):
            runs[alg] = launch(n, alg, args.repeat, Path(tmp) / alg)
    gf2, s2 = numpy_gflops(n, 2, max(args.repeat, 2))
    print(
        f"numpy b @ c, 2 BLAS threads: {max(gf_np, gf2):7.2f} GFLOP/s ({min(s_np, s2):.2f} s; "
        f"before/after the MPI jobs: {gf_np:.2f}/{gf2:.2f})   [{blas_info()}]"
    )
    gf_np = max(gf_np, gf2)
    for alg, reps in runs.items():
        ex = max(r["execute_seconds"] for r in reps)
        run = max(r["run_seconds"] for r in reps)
        gf, gf_run = FLOP * n**3 / ex / 1e9, FLOP * n**3 / run / 1e9
        ok = all(r["max_sample_error"] < 1e-9 and r["measured_equals_predicted"] for r in reps)
        print(
            f"distal {alg:6s} 4 ranks x 1 thread: {gf:7.2f} GFLOP/s execute ({ex:.2f} s), "
            f"{gf_run:7.2f} GFLOP/s whole run ({run:.2f} s); "
            f"ratio to numpy {gf / gf_np:.2f}x; correct+stats exact: {ok}"
        )
        print(f"   rank 0 BLAS: [{reps[0]['blas']}]")
        for r in reps:
            plan, traced, rss = (
                r["plan_peak_bytes"],
                r["traced_peak_bytes"],
                r["rss_peak_growth_bytes"],
            )
            print(
                f"   rank {r['rank']}: peak numpy allocations {traced / 2**20:7.1f} MiB = "
                f"{traced / plan:.2f}x plan peak_words*8 ({plan / 2**20:.1f} MiB); "
                f"peak RSS growth {rss / 2**20:7.1f} MiB = {rss / plan:.2f}x"
            )


if __name__ == "__main__":
    main()
