"""distal against numpy and its peers, every kernel on the same data in one process tree.

    .venv/bin/python benchmarks/run.py --suite peers [--quick] [--n 4096] [--repeat 5]
    .venv/bin/python benchmarks/run.py --suite small      # per-call overhead, n=128..512
    .venv/bin/python benchmarks/run.py --suite scaling    # compile + stats() at P up to 32761
    .venv/bin/python benchmarks/run.py --suite sparse [--quick]  # benchmarks/sparse_suite.py

Prints a table (median time of ``--repeat`` runs after a warm-up, GFLOP/s, throughput as a
fraction of numpy's best formulation; for the peers suite then every row's fraction of its
kernel's limit, the roofline of this machine measured in the same run: flops at numpy's own
GEMM rate, compulsory bytes at the STREAM triad) and writes
``benchmarks/results/<suite>-<time>.json`` and ``.png`` (plus ``<suite>-latest.*``). Peers
missing from this machine are skipped with the reason. BLAS-bound benchmarks want OpenBLAS's
own kernel choice: when ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` are set, this script
re-executes itself with both removed (this benchmark's environment only) and prints the
kernel threadpoolctl sees.

Systems: numpy (one process, 2 BLAS threads; the fastest of its formulations), distal on
the local runtime (one process, 2 BLAS threads per leaf), distal on MPI (4 ranks x 1 BLAS
thread, the venv's mpiexec), dask.array threaded (2 threads x 1 BLAS thread) and on a
``distributed.LocalCluster`` (2 processes x 1 thread), JAX on a 2 x 2 CPU mesh, ScaLAPACK
PDGEMM on 2 x 2 (GEMM float64 only), cuPyNumeric in its own venv (GEMM; its CG iteration and
one element-wise operation are printed; ``sh benchmarks/setup_cupynumeric.sh`` installs it,
and the suite prints why it does not run where it does not). Distributed systems are timed
from inputs placed to result placed (distal MPI: the slowest rank's execute time,
``gather="none"``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
RESULTS = HERE / "results"
SYSTEMS = (
    "numpy", "distal-local", "distal-mpi", "dask-threads", "dask-cluster", "jax", "scalapack",
    "cupynumeric",
)  # fmt: skip


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ModuleNotFoundError:
        return "threadpoolctl not installed (pip install 'distal[bench]')"
    infos = [x for x in threadpool_info() if x.get("user_api") == "blas"]
    return "; ".join(
        f"{x.get('internal_api')} {x.get('version')} kernel={x.get('architecture')} "
        f"threads={x.get('num_threads')}"
        for x in infos
    )


def load() -> float:
    return os.getloadavg()[0]


def median_time(fn: Any, repeat: int) -> tuple[float, list[float], Any]:
    """Warm-up call, then the median of ``repeat`` timed calls (and the warm-up's result)."""
    first = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, first


def checksum(x: Any) -> float:
    import numpy as np

    return float(np.asarray(x, np.float64).sum())


# ------------------------------------------------------------------------------------------
# MPI worker (every rank runs this)
# ------------------------------------------------------------------------------------------


def mpi_worker(names: list[str], quick: bool, n: int | None, repeat: int) -> None:
    from mpi4py import MPI
    from problems import problems

    import distal as dl
    from distal.kernels.leaf import release_buffers
    from distal.runtime.mpi import world

    world()
    comm = MPI.COMM_WORLD
    out = {}
    for p in problems(quick, n):
        if p.name not in names:
            continue
        kernel = dl.compile(p.schedule())
        predicted = kernel.stats()
        # whole arrays, made before measuring: block sources would put their own
        # temporaries (evaluating the data function per block) into the peak
        src = p.arrays()
        release_buffers()
        tracemalloc.start()
        times, peaks, exact = [], [], True
        res: Any = None
        for r in range(repeat + 1):
            res = None
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            res = kernel.run(src, runtime="mpi", gather="none")
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
            exact = exact and res.stats.as_dict() == predicted.as_dict()
            if r:
                times.append(comm.allreduce(res.extra["execute_seconds"], op=MPI.MAX))
        tracemalloc.stop()
        mine = sum(checksum(b) for b in res.blocks.values())
        total = comm.allreduce(mine)
        plan_bytes = predicted.peak_words[comm.rank] * p.dtype().itemsize
        ratios = comm.gather(max(peaks) / plan_bytes if plan_bytes else 0.0)
        if comm.rank == 0:
            out[p.name] = {
                "seconds": statistics.median(times),
                "times": times,
                "checksum": total,
                "stats_exact": exact,
                "peak_vs_plan": ratios,
            }
        del res, src
    if comm.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def launch_mpi(names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    cmd = [mpiexec, "-n", "4", sys.executable, __file__, "--mpi-worker", ",".join(names)]
    cmd += ["--repeat", str(args.repeat)] + (["--quick"] if args.quick else [])
    cmd += ["--n", str(args.n)] if args.n else []
    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"MPI worker failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")


# ------------------------------------------------------------------------------------------
# The peer suite
# ------------------------------------------------------------------------------------------


def peers(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from peers import dask_peer, scalapack
    from problems import gflops, numpy_candidates, problems

    import distal as dl

    probs = [p for p in problems(args.quick, args.n) if not args.only or p.name in args.only]
    names = [p.name for p in probs]
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    want = set(args.systems)

    def add(p: Any, system: str, seconds: float, detail: str, check: float | None, **kw: Any):
        ref = next(r for r in rows if r["problem"] == p.name and r["system"] == "numpy")
        tol = 1e-3 if p.dtype == np.float32 else 1e-7
        ok = (
            None
            if check is None
            else abs(check - ref["checksum"]) <= tol * max(1.0, abs(ref["checksum"]))
        )
        rows.append(
            dict(problem=p.name, system=system, seconds=seconds, gflops=gflops(p, seconds),
                 ratio=ref["seconds"] / seconds, detail=detail, checksum=check, correct=ok, **kw)
        )  # fmt: skip
        r = rows[-1]
        print(
            f"  {p.name:11s} {system:13s} {seconds * 1e3:10.2f} ms {r['gflops']:8.2f} GFLOP/s "
            f"{r['ratio']:6.2f}x  {detail}" + ("" if ok is not False else "  CHECKSUM MISMATCH"),
            flush=True,
        )

    for p in probs:
        data = p.arrays()
        best: Any = None
        for form, fn in numpy_candidates(p).items():
            s, ts, val = median_time(lambda fn=fn, d=data: fn(*d.values()), args.repeat)
            if best is None or s < best[0]:
                best = (s, ts, form, checksum(val))
        rows.append(dict(problem=p.name, system="numpy", seconds=best[0], times=best[1],
                         gflops=gflops(p, best[0]), ratio=1.0, detail=best[2],
                         checksum=best[3], correct=True))  # fmt: skip
        print(f"  {p.name:11s} {'numpy':13s} {best[0] * 1e3:10.2f} ms "
              f"{gflops(p, best[0]):8.2f} GFLOP/s   1.00x  {best[2]}", flush=True)  # fmt: skip
        if "distal-local" in want:
            kernel = dl.compile(p.schedule())
            s, ts, res = median_time(
                lambda k=kernel, d=data: k.run(d, trace=False, progress=False), args.repeat
            )
            exact = res.stats.as_dict() == kernel.stats().as_dict()
            add(p, "distal-local", s, f"grid {'x'.join(map(str, p.grid))}, stats exact={exact}",
                checksum(res.value), times=ts)  # fmt: skip
            del res, kernel
        if "dask-threads" in want:
            why = dask_peer.unavailable(cluster=False)
            if why:
                skipped["dask-threads"] = why
            else:
                d = dask_peer.time_problem(p, args.repeat)
                add(p, "dask-threads", d["seconds"], "einsum(optimize=True)", d["checksum"],
                    times=d["times"])  # fmt: skip
        del data
    # the cluster's worker processes start (and import) while nothing else is being timed
    client = None
    if "dask-cluster" in want:
        why = dask_peer.unavailable(cluster=True)
        if why:
            skipped["dask-cluster"] = why
        else:
            client = dask_peer.cluster()
    if client is not None:
        for p in probs:
            d = dask_peer.time_problem(p, args.repeat, client)
            add(p, "dask-cluster", d["seconds"], "2 procs x 1 thread", d["checksum"],
                times=d["times"])  # fmt: skip
        client.close()
        client.cluster.close()

    by_name = {p.name: p for p in probs}
    if "jax" in want:
        try:
            import jax  # noqa: F401

            env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
            cmd = [sys.executable, str(HERE / "peers" / "jax_peer.py"), ",".join(names),
                   "1" if args.quick else "0", str(args.n or 0), str(args.repeat)]  # fmt: skip
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            for name, d in res.items():
                add(by_name[name], "jax", d["seconds"], "2x2 mesh, jit einsum", d["checksum"],
                    times=d["times"])  # fmt: skip
        except ModuleNotFoundError:
            skipped["jax"] = "jax not installed (pip install 'distal[bench]')"
        except Exception as e:
            skipped["jax"] = f"failed: {e}"
    if "cupynumeric" in want:
        cupynumeric_rows(probs, args, add, skipped)
    if "distal-mpi" in want:
        try:
            import mpi4py  # noqa: F401

            res = launch_mpi(names, args)
            for name, d in res.items():
                worst = max(d["peak_vs_plan"])
                add(by_name[name], "distal-mpi", d["seconds"],
                    f"4 ranks x 1 thread, stats exact={d['stats_exact']}, "
                    f"peak mem {worst:.2f}x plan", d["checksum"], times=d["times"],
                    peak_vs_plan=d["peak_vs_plan"])  # fmt: skip
        except ModuleNotFoundError:
            skipped["distal-mpi"] = "mpi4py not installed (pip install 'distal[mpi]')"
    if "scalapack" in want:
        why = scalapack.unavailable()
        gemm = by_name.get("gemm-f64")
        if why:
            skipped["scalapack"] = why
        elif gemm is not None:
            d = scalapack.run(gemm.inputs["B"][0], args.repeat, dict(os.environ))
            add(gemm, "scalapack", d["seconds"], f"PDGEMM 2x2, nb={d['nb']}, {d['blas']}",
                d["checksum"], times=d["times"])  # fmt: skip
    for s, why in skipped.items():
        print(f"  skipped {s}: {why}")
    return {"rows": rows, "skipped": skipped, "limits": against_limits(probs, rows, args.quick)}


def cupynumeric_rows(probs: list[Any], args: argparse.Namespace, add: Any, skipped: dict) -> None:
    """cuPyNumeric's GEMM rows (its own random inputs, checked against numpy at n = 256),
    its CG iteration and one element-wise operation next to numpy's, or why it did not run
    (``benchmarks/peers/cupynumeric_launcher.py``)."""
    from peers import cupynumeric_launcher as cupynumeric

    gemms = [p for p in probs if p.name.startswith("gemm")]
    n = gemms[0].inputs["B"][0] if gemms else (1024 if args.quick else 4096)
    grid = 300 if args.quick else 1000
    data, why = cupynumeric.run(n, grid, args.repeat)
    if why is not None:
        skipped["cupynumeric"] = why
        return
    for p in gemms:
        add(p, "cupynumeric", data[p.name], f"cuPyNumeric {data['version']}", None)
    print(f"  cupynumeric: CG on the {grid}^2 Laplacian {data['cg_ms']:.2f} ms an iteration "
          f"(numpy {data['cg_numpy_ms']:.2f}); x + 1.0 on 1000 elements {data['op_us']:.1f} us "
          f"(numpy {data['op_numpy_us']:.1f})")  # fmt: skip


def _gemm_rate(dtype: Any, rows: list[dict[str, Any]], n: int) -> tuple[float, str]:
    """numpy's own two-thread GEMM rate (flop/s) in ``dtype``: the suite's GEMM row of that
    dtype where it ran, else an order-``n`` ``@`` timed here."""
    import numpy as np
    from problems import problems

    for p in problems():
        if p.name.startswith("gemm") and np.dtype(p.dtype) == np.dtype(dtype):
            r = next((r for r in rows if r["problem"] == p.name and r["system"] == "numpy"), None)
            if r is not None:
                return r["gflops"] * 1e9, f"numpy's {p.name} row"
    a = np.random.default_rng(0).random((n, n)).astype(dtype)
    s, _, _ = median_time(lambda: a @ a, 3)
    return 2.0 * n**3 / s, f"numpy @ at n={n}"


def against_limits(probs: list[Any], rows: list[dict[str, Any]], quick: bool) -> dict[str, Any]:
    """Every row's fraction of its kernel's limit, printed and returned.

    The limit is the roofline of this machine as measured in this run: a kernel cannot take
    less than its flops at numpy's own two-thread GEMM rate in its dtype, nor less than its
    compulsory bytes (every input read once, the output written once) at the STREAM triad
    bandwidth on both cores (``benchmarks/stream.py``); the larger of the two is its limit,
    and ``limit / seconds`` the fraction of it a system reached (TTV and the inner product
    are memory-bound; GEMM, TTM, MTTKRP and the 4-D contraction compute-bound)."""
    import math

    import numpy as np
    from stream import measure

    tri = measure(2, 10)
    bw = float(tri["triad"])
    print(f"  against the limit (roofline): STREAM triad {bw / 1e9:.1f} GB/s ({tri['kernels']})")
    rates: dict[str, tuple[float, str]] = {}
    out: dict[str, Any] = {"triad_bytes_per_s": bw, "kernels": {}}
    for p in probs:
        dt = np.dtype(p.dtype)
        if dt.name not in rates:
            rates[dt.name] = _gemm_rate(dt, rows, 1024 if quick else 2048)
            print(f"    GEMM rate {dt.name}: {rates[dt.name][0] / 1e9:.1f} GFLOP/s "
                  f"({rates[dt.name][1]})")  # fmt: skip
        words = sum(math.prod(s) for s in p.inputs.values()) + math.prod(p.out_shape)
        t_mem, t_flop = words * dt.itemsize / bw, p.flops / rates[dt.name][0]
        limit = max(t_mem, t_flop)
        bound = "memory" if t_mem >= t_flop else "compute"
        got = {}
        for r in rows:
            if r["problem"] == p.name:
                r["of_limit"] = got[r["system"]] = limit / r["seconds"]
        out["kernels"][p.name] = dict(bound=bound, limit_seconds=limit, bytes=words * dt.itemsize,
                                      of_limit=got)  # fmt: skip
        print(f"    {p.name:11s} {bound}-bound, limit {limit * 1e3:8.2f} ms: "
              + "  ".join(f"{k} {v:.2f}" for k, v in got.items()))  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------
# Small problems and compile-time scaling
# ------------------------------------------------------------------------------------------


def small(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    import distal as dl

    rows = []
    for n in args.sizes or (128, 256, 512):
        alg = dl.algorithms.cannon(n, machine=dl.Machine(2, 2))
        kernel = alg.compile()
        inp = alg.inputs()
        b, c = inp["B"], inp["C"]
        reps = max(args.repeat, 30)
        t_np, _, _ = median_time(lambda b=b, c=c: b @ c, reps)
        t0 = time.perf_counter()
        kernel.run(inp)
        first = time.perf_counter() - t0
        t_d, _, res = median_time(lambda k=kernel, i=inp: k.run(i), reps)
        t_nt, _, _ = median_time(lambda k=kernel, i=inp: k.run(i, trace=False), reps)
        assert np.allclose(res.value, b @ c)
        rows.append(dict(n=n, numpy=t_np, distal=t_d, distal_notrace=t_nt, first_run=first,
                         ratio=t_d / t_np))  # fmt: skip
        print(f"  GEMM n={n:4d} Cannon 2x2 local: numpy {t_np * 1e3:7.3f} ms, distal "
              f"{t_d * 1e3:7.3f} ms ({t_d / t_np:4.2f}x numpy; trace off {t_nt * 1e3:.3f} ms; "
              f"first run incl. plan {first * 1e3:.1f} ms)")  # fmt: skip
    return {"rows": rows}


def scaling(args: argparse.Namespace) -> dict[str, Any]:
    import distal as dl

    rows = []
    for side in (32, 64, 181):
        P = side * side
        t0 = time.perf_counter()
        kernel = dl.algorithms.summa(side * 64, machine=dl.Machine(side, side)).compile()
        t1 = time.perf_counter()
        st = kernel.stats()
        t2 = time.perf_counter()
        rows.append(dict(P=P, compile=t1 - t0, stats=t2 - t1, max_words=st.max_words_received))
        print(f"  SUMMA {side}x{side} (P={P:5d}, n={side * 64}): compile {t1 - t0:6.3f} s, "
              f"stats() {t2 - t1:6.3f} s, total {t2 - t0:6.3f} s")  # fmt: skip
    return {"rows": rows}


# ------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    probs = list(dict.fromkeys(r["problem"] for r in rows))
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in rows)]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / max(1, len(systems))
    for n, s in enumerate(systems):
        xs, ys = [], []
        for m, p in enumerate(probs):
            r = next((r for r in rows if r["problem"] == p and r["system"] == s), None)
            if r:
                xs.append(m + (n - (len(systems) - 1) / 2) * width)
                ys.append(r["ratio"])
        ax.bar(xs, ys, width, label=s)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(probs)), probs)
    ax.set_ylabel("throughput / numpy's best")
    ax.set_title(f"distal vs peers, one run (load {result['load_before']:.2f}, "
                 f"{result['machine']})")  # fmt: skip
    ax.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(result: dict[str, Any]) -> str:
    lines = [
        "| kernel | system | median ms | GFLOP/s | vs numpy | of limit | notes |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        lim = f"{r['of_limit']:.2f}" if "of_limit" in r else "-"
        lines.append(
            f"| {r['problem']} | {r['system']} | {r['seconds'] * 1e3:.1f} | {r['gflops']:.1f} | "
            f"{r['ratio']:.2f} | {lim} | {r['detail']}"
            + ("" if r.get("correct") is not False else " (WRONG)")
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    if "--suite" in sys.argv[1:] and sys.argv[sys.argv.index("--suite") + 1 :][:1] == ["sparse"]:
        # the sparse suite has its own options (benchmarks/sparse_suite.py --help)
        import sparse_suite

        k = sys.argv.index("--suite")
        raise SystemExit(sparse_suite.main(sys.argv[1:k] + sys.argv[k + 2 :]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", choices=("peers", "small", "scaling", "sparse"), default="peers")
    ap.add_argument("--n", type=int, default=None, help="GEMM order (default 4096; quick 1024)")
    ap.add_argument("--quick", action="store_true", help="small problems: a smoke run")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per system (median)")
    ap.add_argument("--only", nargs="*", default=None, help="problem names (e.g. gemm-f64 ttv)")
    ap.add_argument("--systems", nargs="*", default=list(SYSTEMS), choices=SYSTEMS)
    ap.add_argument("--sizes", nargs="*", type=int, default=None, help="small suite: GEMM orders")
    ap.add_argument("--keep-blas-env", action="store_true", help="don't unset OPENBLAS_CORETYPE")
    ap.add_argument("--mpi-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mpi_worker:
        mpi_worker(args.mpi_worker.split(","), args.quick, args.n, args.repeat)
        return
    if not args.keep_blas_env and any(k in os.environ for k in BLAS_ENV):
        env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
        print(f"re-executing without {', '.join(k for k in BLAS_ENV if k in os.environ)}")
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    import numpy as np

    from distal.kernels import blas

    before = load()
    machine = f"{os.cpu_count()} cores, numpy {np.__version__}"
    print(f"suite {args.suite}; load average {before:.2f}; {machine}")
    print(f"BLAS: {blas_info()}; distal direct BLAS binding: {blas.available()}; {blas.spin()}")
    if before >= 1.0:
        print("  note: load average >= 1.0, other work is running; re-run for clean figures")
    t0 = time.time()
    result: dict[str, Any] = {"suite": args.suite, "load_before": before, "machine": machine,
                              "blas": blas_info(), "quick": args.quick}  # fmt: skip
    result.update({"peers": peers, "small": small, "scaling": scaling}[args.suite](args))
    result["load_after"] = load()
    result["wall_seconds"] = time.time() - t0
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (f"{args.suite}-{stamp}", f"{args.suite}-latest"):
        (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
        if args.suite == "peers":
            chart(result, RESULTS / f"{name}.png")
    if args.suite == "peers":
        print()
        print(table(result))
    print(f"load average before/after: {before:.2f}/{result['load_after']:.2f}; "
          f"results in {RESULTS}/{args.suite}-{stamp}.*")  # fmt: skip


if __name__ == "__main__":
    main()
