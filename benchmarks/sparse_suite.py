"""The sparse suite: distal next to scipy, python-graphblas, Dask + pydata sparse and PETSc.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/run.py --suite sparse [--quick]
        [--repeat 5] [--kernels spmv,spmm] [--data rmat,zipf] [--no-mpi] [--cg]

distal runs on the local runtime with 2 processors (the row split and the non-zero split of
``dl.algorithms``, bound once: iterative use binds once; ``-scipy`` rows hand every run the
peers' scipy CSR matrix, as users do, instead of distal's own; ``-scipy-ro`` rows the same
matrix with read-only index arrays, which distal trusts without a digest a run), timed in
the same run as the peers of ``benchmarks/sparse_peers.py`` on the same data sets (R-MAT
unpermuted, Zipf rows sorted heaviest first, banded; a Zipf 3-tensor; a stiffness matrix, a
road network, a web graph), every result checked against scipy / numpy. Then:

* **targets**: SpMV against scipy, SpMM and SDDMM against GraphBLAS, SpMTTKRP against the
  numpy ``np.add.at`` formulation, as ratios measured in this run;
* **bind**: the time to bind (read the pattern and build the exact plan) against one run,
  at 2 and 16 processors;
* **exact gathers**: words an SpMV moves with exact gathers against the hull fetch
  (``exact=False``, SpDISTAL's), at 2, 4 and 16 processors;
* **MPI**: SpMV on every matrix data set of the run (the better split) and SpMM on R-MAT,
  at 2 and 4 ranks (``mpiexec`` of the mpich wheel; the result left in its blocks,
  ``gather="none"``, as PETSc's ``MatMult`` leaves its vector), next to the local runtime's
  figure (4 ranks on a 2-core machine are oversubscribed), and each SpMV at 2 ranks against
  PETSc on 2 ranks from the same run's table;
* **CG** (``--cg``): per iteration on a 1000 x 1000 Laplacian, distal against scipy and
  PETSc (``sparse_peers.cg_lines``), and (with MPI) ``dl.apps.cg`` on 1 and 2 ranks, next to
  PETSc's ``KSPCG`` on as many; ``--cg-rounds N`` (alone, no other rows): N rounds, each
  ``dl.apps.cg`` on MPI and then PETSc's ``KSPCG`` on 1 and on 2 ranks, their median
  iterations side by side and each round's ratio (the figure to quote on a machine whose
  speed moves between minutes: a pair is taken within seconds).

SpMV rows show their bandwidth and its fraction of the STREAM triad measured at the start;
PETSc joins as ``petsc-seq`` / ``petsc-mpi2`` once ``benchmarks/setup_petsc.sh`` has run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sparse_peers as peers  # noqa: E402

import distal as dl  # noqa: E402
from distal import algorithms as al  # noqa: E402

P_LOCAL = 2


def _algorithm(kernel: str, data: peers.Data, machine: dl.Machine, split: str) -> Any:
    """The library schedule of ``kernel`` on ``data`` with ``split``, and its inputs."""
    shape = data.shape
    a = data.array
    if kernel == "spmv":
        return al.spmv(shape, machine, split), {"B": a, "c": data["c"]}
    if kernel == "spmm":
        return al.spmm(shape, peers.WIDTH, machine, split), {"B": a, "C": data["C"]}
    if kernel == "sddmm":
        alg = al.sddmm(shape, peers.WIDTH, machine, split)
        return alg, {"B": a, "C": data["C"], "D": data["D"]}
    if kernel == "spadd3":
        if split != "rows":
            raise peers.Unsupported("SpAdd3 is scheduled by rows")
        # the peers convert their inputs once, before timing: so does distal
        c = data.cached("distal:C_add", lambda: dl.SparseArray.from_scipy(data["C_add"]))
        d = data.cached("distal:D_add", lambda: dl.SparseArray.from_scipy(data["D_add"]))
        return al.spadd3(shape, machine), {"B": a, "C": c, "D": d}
    if kernel == "spttv":
        alg = al.spttv(shape, machine, "rows" if split == "rows" else "fibers")
        return alg, {"B": a, "c": data["c"]}
    if kernel == "spmttkrp":
        alg = al.spmttkrp(shape, peers.WIDTH, machine, split)
        return alg, {"B": a, "C": data["C"], "D": data["D"]}
    if kernel == "spinnerprod":
        if split != "rows":
            raise peers.Unsupported("the inner product is scheduled by rows")
        return al.spinnerprod(shape, machine, a.format.name), {"B": a, "C": data["other"]}
    raise KeyError(kernel)


def _convert(value: Any) -> Any:
    if isinstance(value, dl.SparseArray):
        return value.to_scipy().tocsr()
    arr = np.asarray(value)
    return float(arr) if arr.ndim == 0 else arr


def _read_only(m: Any) -> Any:
    """A scipy CSR matrix with ``m``'s values and copies of its index arrays, made read-only
    (the caller's word that the pattern stays: distal then checks no digest per run)."""
    import scipy.sparse as sp

    out = sp.csr_array((m.data, m.indices.copy(), m.indptr.copy()), shape=m.shape)
    out.indices.flags.writeable = False
    out.indptr.flags.writeable = False
    return out


def distal_system(
    split: str, nprocs: int = P_LOCAL, scipy_in: bool = False, read_only: bool = False
) -> peers.System:
    """distal on the local runtime: compiled and bound once, each timed call a run.
    ``scipy_in``: the matrix is handed to every run as the scipy CSR matrix the peers use
    (as users pass it: its pattern recognised, its values read in place), not as distal's
    own ``SparseArray``; ``read_only``: with its index arrays read-only (no digest a run)."""

    def system(kernel: str, data: peers.Data) -> peers.Prepared:
        if (kernel in peers.MATRIX_KERNELS) != (data.kind == "matrix"):
            raise peers.Unsupported("another kind of data")
        if scipy_in and kernel != "spmv":
            raise peers.Unsupported("scipy inputs are timed for SpMV (the target's)")
        alg, inputs = _algorithm(kernel, data, dl.Machine(nprocs), split)
        if scipy_in:
            inputs = {**inputs, "B": _read_only(data["csr"]) if read_only else data["csr"]}
        bound = alg.compile().bind(inputs)
        return (lambda: bound.run(inputs).value), _convert

    return system


def _memory() -> str:
    """This process's resident memory now and at its peak (Linux), in GiB."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    try:
        with open("/proc/self/statm") as f:
            now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    except OSError:
        return f"peak {peak:.2f} GiB"
    return f"{now:.2f} GiB resident, peak {peak:.2f} GiB"


def _best(fn: Any, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bind_table(data: peers.Data, kernels: Sequence[str], repeat: int) -> list[str]:
    """Bind time against one run (both the best of ``repeat``), per kernel and split."""
    lines = [f"bind time against one run ({data.name}):"]
    for kernel in kernels:
        if (kernel in peers.MATRIX_KERNELS) != (data.kind == "matrix"):
            continue
        for split in ("rows", "nonzeros"):
            for P in (P_LOCAL, 16):
                try:
                    alg, inputs = _algorithm(kernel, data, dl.Machine(P), split)
                except peers.Unsupported:
                    continue
                k = alg.compile()

                def bind(k: Any = k, inputs: Any = inputs) -> Any:
                    k._bound = None  # a fresh bind each time (the kernel keeps the last)
                    return k.bind(inputs)

                tb = _best(bind, repeat)
                bound = k.bind(inputs)
                tr = _best(lambda bound=bound, inputs=inputs: bound.run(inputs), repeat)
                lines.append(
                    f"  {kernel:12s} {split:9s} P={P:<3d} bind {tb * 1e3:8.1f} ms  run "
                    f"{tr * 1e3:8.1f} ms  bind/run {tb / tr:6.2f}"
                )
    return lines


def gather_table(data: peers.Data) -> list[str]:
    """SpMV words with exact gathers against the hull fetch (SpDISTAL's)."""
    lines = [f"SpMV words moved, exact gathers vs hull ({data.name}):"]
    for split in ("rows", "nonzeros"):
        for P in (2, 4, 16):
            M = dl.Machine(P)
            inputs = {"B": data.array}
            ex = al.spmv(data.shape, M, split).compile().stats(inputs).total_words
            hull = al.spmv(data.shape, M, split, exact=False).compile().stats(inputs).total_words
            saved = 1 - ex / hull if hull else 0.0
            lines.append(
                f"  {split:9s} P={P:<3d} exact {ex:10d}  hull {hull:10d}  "
                f"exact moves {100 * saved:5.1f}% less"
            )
    return lines


def target_lines(rows: Sequence[peers.Row]) -> list[str]:
    """The targets as measured ratios (peer time / distal time: higher is better for
    distal): SpMV with scipy inputs against GraphBLAS on 2 threads; SpMM, SDDMM and SpAdd3
    against the best of scipy and GraphBLAS on 2 threads; SpTTV against scipy; SpMTTKRP
    against numpy's ``np.add.at`` formulation."""

    def t(kernel: str, data: str, system: str) -> float | None:
        r = next((x for x in rows if (x.kernel, x.data, x.system) == (kernel, data, system)), None)
        return r.seconds if r and r.status == "ok" else None

    out = ["targets (peer time / distal time, distal on 2 processors, best split):"]
    plain, scipy_in = ("rows", "nonzeros"), ("rows-scipy", "nonzeros-scipy")
    read_only = ("rows-scipy-ro", "nonzeros-scipy-ro")
    goals = [
        ("spmv", ("graphblas-2t",), scipy_in, 1.0),
        ("spmv", ("graphblas-2t",), read_only, 1.0),
        ("spmm", ("scipy", "graphblas-2t"), plain, 1.0),
        ("sddmm", ("scipy", "graphblas-2t"), plain, 1.0),
        ("spadd3", ("scipy", "graphblas-2t"), plain, 1.0),
        ("spttv", ("scipy",), plain, 1.0),
        ("spmttkrp", ("numpy",), plain, 10.0),
    ]
    for kernel, against, splits, goal in goals:
        for data in sorted({r.data for r in rows if r.kernel == kernel}):
            mine = [t(kernel, data, f"distal-{s}") for s in splits]
            mine = [m for m in mine if m]
            others = [x for x in (t(kernel, data, p) for p in against) if x]
            if not mine or not others:
                continue
            ratio = min(others) / min(mine)
            who = "best of " + " and ".join(against) if len(against) > 1 else against[0]
            how = {scipy_in: " (scipy inputs)", read_only: " (scipy, read-only indices)"}.get(
                splits, ""
            )
            out.append(
                f"  {kernel:9s} {data:7s} vs {who:30s} {ratio:6.2f}x{how}  (target >= {goal}x: "
                f"{'met' if ratio >= goal else 'NOT met'})"
            )
    return out


def _mpiexec() -> str | None:
    """The venv's ``mpiexec`` (the mpich wheel's), else one on the PATH."""
    return shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def _mpi_job(mpiexec: str, P: int, args: list[str], lines: list[str]) -> list[dict[str, Any]]:
    """This script on ``P`` ranks with ``args``: rank 0's ``RESULT`` lines (none, and a line
    in ``lines`` saying why, when the job failed)."""
    cmd = [mpiexec, "-n", str(P), sys.executable, __file__, *args]
    env = {**os.environ, "DISTAL_PROGRESS": "0"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    got = [json.loads(x[7:]) for x in res.stdout.splitlines() if x.startswith("RESULT ")]
    if res.returncode or not got:
        lines.append(f"  {P} ranks: failed ({res.returncode}): {res.stderr[-400:]}")
        return []
    return got


def mpi_rows(
    quick: bool, repeat: int, data: Sequence[str] = (), rows: Sequence[peers.Row] = ()
) -> list[str]:
    """SpMV on every matrix data set of ``data`` (default R-MAT; the better of the two
    splits) and SpMM on R-MAT, at 2 and 4 ranks, timed by rank 0 of an mpiexec job; each
    SpMV at 2 ranks against PETSc on 2 ranks in ``rows`` (the same run's table), the
    issue's target (>= 1.0x)."""
    mpiexec = _mpiexec()
    if mpiexec is None:
        return ["MPI: skipped (no mpiexec: pip install 'distal[mpi]')"]
    names = [d for d in data if d in MPI_DATA] or ["rmat"]
    lines = [
        "MPI (SpMV: the better split; SpMM on R-MAT, non-zero split; ms, best of the timed runs):"
    ]
    targets = []
    for P in (2, 4):
        args = ["--mpi-worker", "--repeat", str(repeat), "--data", ",".join(names)]
        got = _mpi_job(mpiexec, P, args + (["--quick"] if quick else []), lines)
        for r in got:
            lines.append(
                f"  {r['kernel']:6s} {r['data']:7s} {P} ranks {r['ms']:9.2f} ms  (local runtime "
                f"with {P} processors in the same job's rank 0: {r['local_ms']:9.2f} ms)"
            )
            petsc = next(
                (x.seconds for x in rows if (x.kernel, x.data, x.system, x.status)
                 == ("spmv", r["data"], "petsc-mpi2", "ok")), None,
            )  # fmt: skip
            if P == 2 and r["kernel"] == "spmv" and petsc:
                ratio = 1e3 * petsc / r["ms"]
                targets.append(
                    f"  spmv      {r['data']:7s} MPI 2 ranks vs petsc-mpi2 ({1e3 * petsc:.2f} ms)"
                    f" {ratio:6.2f}x  (target >= 1.0x: {'met' if ratio >= 1 else 'NOT met'})"
                )
    return lines + targets


#: the matrix data sets the MPI rows can take
MPI_DATA = ("rmat", "zipf", "banded", "fem", "road", "web")


def mpi_worker(quick: bool, repeat: int, data: Sequence[str] = ("rmat",)) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    P = comm.size

    def timed(bound: Any, inputs: Any) -> tuple[float, float | None]:
        # the result left in its blocks, as PETSc's MatMult leaves its vector (gathering
        # it to every rank is a collective of its own, not the product)
        bound.run(inputs, runtime="mpi", gather="none")
        times = []
        for _ in range(repeat):
            comm.Barrier()
            t = time.perf_counter()
            bound.run(inputs, runtime="mpi", gather="none")
            times.append(time.perf_counter() - t)
        local = None
        if comm.rank == 0:
            local = _best(lambda bound=bound, inputs=inputs: bound.run(inputs), repeat)
        comm.Barrier()
        return min(times), local

    for make in peers.dataset_makers(quick, list(data)):
        ds = make()
        kernels = ("spmv", "spmm") if ds.name == "rmat" else ("spmv",)
        for kernel in kernels:
            best: tuple[float, float | None] | None = None
            for split in ("nonzeros", "rows") if kernel == "spmv" else ("nonzeros",):
                alg, inputs = _algorithm(kernel, ds, dl.Machine(P), split)
                got = timed(alg.compile().bind(inputs), inputs)
                if best is None or got[0] < best[0]:
                    best = got
            assert best is not None
            if comm.rank == 0:
                print("RESULT " + json.dumps({"kernel": kernel, "data": ds.name,
                                              "ms": 1e3 * best[0], "local_ms": 1e3 * best[1]}),
                      flush=True)  # fmt: skip
        ds.cache.clear()
        del ds
        gc.collect()


def mpi_cg_rows(grid: int, iters: int, repeat: int) -> list[str]:
    """``dl.apps.cg`` on MPI ranks (1 and 2), per iteration as ``peers.cg_lines`` times the
    local runtime (the one-iteration solve, which binds, subtracted): next to PETSc's
    ``KSPCG`` on the same rank count."""
    mpiexec = _mpiexec()
    if mpiexec is None:
        return ["MPI CG: skipped (no mpiexec: pip install 'distal[mpi]')"]
    lines = [f"CG on MPI ranks ({grid} x {grid} Laplacian, {iters} iterations, ms per iteration):"]
    for P in (1, 2):
        args = ["--mpi-cg-worker", "--repeat", str(repeat), "--cg-grid", str(grid)]
        got = _mpi_job(mpiexec, P, [*args, "--cg-iters", str(iters)], lines)
        if not got:
            continue
        r = got[0]
        lines.append(
            f"  distal mpi{P:<9d} {r['ms']:9.2f} ms  iterations {r['its']}  "
            f"residual {r['residual']:.6e}  median iteration {r['median_ms']:7.2f} ms"
        )
    return lines


def mpi_cg_worker(grid: int, iters: int, repeat: int) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    a = peers.laplacian(grid)
    b = peers._dense(np.random.default_rng(7), a.shape[0])  # as peers.cg_lines draws it

    marks: list[float] = []
    steps: list[float] = []

    def solve(k: int) -> tuple[Any, int]:
        marks.clear()
        got = dl.apps.cg(a, b, tol=0.0, maxiter=k, session=dl.Session("mpi"),
                         callback=lambda _: marks.append(time.perf_counter()))  # fmt: skip
        if k > 1:
            steps.extend(np.diff(marks))
        return got

    def timed(k: int) -> tuple[float, Any, int]:
        best, x, its = float("inf"), None, 0
        for _ in range(repeat):
            comm.Barrier()
            t = time.perf_counter()
            x, its = solve(k)
            comm.Barrier()
            best = min(best, time.perf_counter() - t)
        return best, x, its

    solve(1)
    one, _, _ = timed(1)
    t, x, its = timed(iters)
    if comm.rank == 0:
        res = float(np.linalg.norm(b - a @ x))
        ms = 1e3 * (t - one) / (iters - 1)
        med = 1e3 * float(np.median(steps))
        print("RESULT " + json.dumps({"ms": ms, "its": its, "residual": res, "median_ms": med}),
              flush=True)  # fmt: skip


def cg_rounds(grid: int, iters: int, rounds: int) -> list[str]:
    """``rounds`` rounds of ``dl.apps.cg`` on MPI and PETSc's ``KSPCG``, on 1 and 2 ranks,
    one solve each (median iteration), alternating: per-round ratios and their median."""
    mpiexec = _mpiexec()
    why = peers.system_petsc_unavailable()
    if mpiexec is None or why:
        return [f"CG rounds: skipped ({why or 'no mpiexec: pip install distal[mpi]'})"]
    a = peers.laplacian(grid)
    b = peers._dense(np.random.default_rng(7), a.shape[0])
    lines = [f"CG rounds ({grid} x {grid} Laplacian, {iters} iterations, median iteration ms):"]
    pairs: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    for r in range(rounds):
        for P in (1, 2):
            args = ["--mpi-cg-worker", "--repeat", "1", "--cg-grid", str(grid)]
            got = _mpi_job(mpiexec, P, [*args, "--cg-iters", str(iters)], lines)
            if not got:
                continue
            petsc = peers.run_petsc_peer("cg", a, b, P, "--iters", str(iters), "--repeat", "1")
            ours, theirs = got[0]["median_ms"], 1e3 * petsc["iteration_median"]
            pairs[P].append((ours, theirs))
            lines.append(f"  round {r + 1} {P} rank(s): distal mpi {ours:7.2f}  petsc "
                         f"{theirs:7.2f}  petsc / distal {theirs / ours:5.2f}")  # fmt: skip
    for P, got in pairs.items():
        if got:
            ratio = float(np.median([t / o for o, t in got]))
            lines.append(f"  {P} rank(s): median petsc / distal {ratio:.2f} over {len(got)} "
                         "rounds (target >= 1.0x)")  # fmt: skip
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="about 250 k entries per data set")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kernels", default=",".join(peers.KERNELS))
    ap.add_argument("--data", default="", help="comma-separated data sets (default: all)")
    ap.add_argument("--no-mpi", action="store_true", help="leave out the MPI rows")
    ap.add_argument("--cg", action="store_true", help="add CG on a 1000 x 1000 Laplacian")
    ap.add_argument("--cg-rounds", type=int, default=0,
                    help="only: N alternating rounds of MPI CG against PETSc")  # fmt: skip
    ap.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mpi-cg-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cg-grid", type=int, default=1000, help=argparse.SUPPRESS)
    ap.add_argument("--cg-iters", type=int, default=50, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mpi_worker:
        mpi_worker(args.quick, args.repeat, [x for x in args.data.split(",") if x] or ["rmat"])
        return 0
    if args.mpi_cg_worker:
        mpi_cg_worker(args.cg_grid, args.cg_iters, args.repeat)
        return 0
    if args.cg_rounds:
        print(f"load average before: {os.getloadavg()}")
        print("\n".join(cg_rounds(args.cg_grid, args.cg_iters, args.cg_rounds)))
        print(f"load average after: {os.getloadavg()}")
        return 0
    kernels = [k for k in args.kernels.split(",") if k]
    print(f"load average before: {os.getloadavg()}")
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, cores {os.cpu_count()}")
    print(peers.measure_triad())
    peers._register_peers(repeat=args.repeat)
    for split in ("rows", "nonzeros"):
        peers.add_system(f"distal-{split}", distal_system(split))
    for split in ("rows", "nonzeros"):
        peers.add_system(f"distal-{split}-scipy", distal_system(split, scipy_in=True))
    for split in ("rows", "nonzeros"):
        system = distal_system(split, scipy_in=True, read_only=True)
        peers.add_system(f"distal-{split}-scipy-ro", system)
    for name, why in peers.MISSING.items():
        print(f"skipped {name}: {why}")
    print(peers.versions())
    rows: list[peers.Row] = []
    extra: list[str] = []
    for make in peers.dataset_makers(args.quick, [x for x in args.data.split(",") if x]):
        data = make()
        print(f"data {data.name}: {data.describe}, shape {data.shape}, nnz {data.nnz}", flush=True)
        rows += peers.run_suite([data], kernels, args.repeat, out=peers._progress)
        extra += bind_table(data, [k for k in kernels if k in ("spmv", "spmm", "sddmm",
                                                                 "spmttkrp")], 3)  # fmt: skip
        if data.kind == "matrix":
            extra += gather_table(data)
        data.cache.clear()
        del data
        gc.collect()
        print(f"  memory after it: {_memory()}", flush=True)
    print(peers.measure_triad())
    print()
    print(peers.table(rows))
    print()
    print("\n".join(target_lines(rows)))
    print()
    print("\n".join(extra))
    if args.cg:
        print()
        grid = 200 if args.quick else 1000
        print("\n".join(peers.cg_lines(grid, 50, 3)))
        if not args.no_mpi:
            print("\n".join(mpi_cg_rows(grid, 50, 3)))
    if not args.no_mpi:
        print()
        data = [x for x in args.data.split(",") if x] or list(MPI_DATA)
        print("\n".join(mpi_rows(args.quick, args.repeat, data, rows)))
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
