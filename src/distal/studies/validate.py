"""Validation of the ``local`` preset against real runs on this computer (issue 7's table).

Run from the repository root on a quiet machine::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python -m distal.studies.validate

It waits until the 1-minute load average is below ``--max-load`` before every timed phase
(the figures mean nothing while other jobs share the cores), then

1. launches ``mpiexec -n 4`` once (the venv's, every rank with one BLAS thread) and takes,
   per case, the median of ``--repeat`` ``extra["execute_seconds"]`` after a warm-up run,
   with each rank's compute seconds of the median run;
2. runs the local runtime in this process (median ``Result.seconds``);
3. recalibrates the ``local`` preset and simulates every plan in parallel (the MPI ranks)
   and sequential (the local runtime) mode;

and prints a markdown table with the load average before each phase. ``--json`` writes the
raw figures too. Cases are those of ``docs/scaling.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import distal as dl
from distal.algorithms import cannon, mttkrp, summa, ttm

#: case name -> the algorithm, as in docs/scaling.md's validation table
FULL: dict[str, Callable[[], Any]] = {
    "GEMM Cannon n=2048, 2x2": lambda: cannon(2048, machine=dl.Machine(2, 2)),
    "GEMM SUMMA n=2048, 2x2": lambda: summa(2048, machine=dl.Machine(2, 2)),
    "TTM 256^3, L=128, 2x2 (C tiled)": lambda: ttm(
        (256, 256, 256), 128, machine=dl.Machine(2, 2), factor="distributed"
    ),
    "MTTKRP 192^3, R=64, 2x2x1": lambda: mttkrp((192, 192, 192), 64, machine=dl.Machine(2, 2, 1)),
}
#: tiny versions of the same algorithms: a smoke test of the procedure (``--small``)
SMALL: dict[str, Callable[[], Any]] = {
    "GEMM Cannon n=64, 2x2": lambda: cannon(64, machine=dl.Machine(2, 2)),
    "MTTKRP 16^3, R=4, 2x2x1": lambda: mttkrp((16, 16, 16), 4, machine=dl.Machine(2, 2, 1)),
}
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def load1() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def idle_fraction(seconds: float = 2.0) -> float:
    """Fraction of CPU time idle over the next ``seconds`` (1.0 where /proc/stat is missing):
    the load average lags by a minute, so a job that just started only shows here."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)

    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except OSError:
        return 1.0
    return (idle1 - idle0) / max(total1 - total0, 1)


def wait_quiet(max_load: float, timeout: float, min_idle: float = 0.9) -> float:
    """Sleep until the 1-minute load is below ``max_load`` and the CPUs are at least
    ``min_idle`` idle (or ``timeout`` passed); the load."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if load1() < max_load and idle_fraction() >= min_idle:
            break
        time.sleep(10)
    return load1()


def inputs_of(kernel: Any) -> dict[str, np.ndarray]:
    """Random inputs of the kernel's shapes (seeded: every MPI rank builds the same)."""
    rng = np.random.default_rng(0)
    plan = kernel.plan
    return {
        name: rng.standard_normal(plan.placements[name].shape).astype(kernel.dtypes[name])
        for name in plan.inputs
    }


def worker(cases: dict[str, Callable[[], Any]], repeat: int, out: Path) -> None:
    """One MPI rank: every case, a warm-up and ``repeat`` timed runs; rank 0 reports."""
    from distal.runtime.mpi import world

    rank, _ = world()
    report = {}
    for name, make in cases.items():
        kernel = make().compile()
        data = inputs_of(kernel)
        kernel.run(data, runtime="mpi", gather="none")
        runs = [kernel.run(data, runtime="mpi", gather="none") for _ in range(repeat)]
        runs.sort(key=lambda r: r.extra["execute_seconds"])
        mid = runs[len(runs) // 2]
        report[name] = {
            "execute": [r.extra["execute_seconds"] for r in runs],
            "median": mid.extra["execute_seconds"],
            "compute": mid.extra["compute_seconds"],
            "routing": kernel.plan.routing,
        }
    if rank == 0:
        out.write_text(json.dumps(report))


def measure_mpi(cases: dict[str, Callable[[], Any]], repeat: int) -> dict[str, Any]:
    """``mpiexec -n 4`` of :func:`worker`, one BLAS thread per rank."""
    env = {**os.environ, **ONE_THREAD}
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(var, None)
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mpi.json"
        cmd = [mpiexec, "-n", "4", sys.executable, "-m", "distal.studies.validate"]
        cmd += ["--worker", str(out), "--repeat", str(repeat)]
        cmd += ["--small"] if cases is SMALL else []
        subprocess.run(cmd, check=True, env=env)
        return json.loads(out.read_text())


def in_fresh_process(phase: str, cases: dict[str, Callable[[], Any]], repeat: int) -> Any:
    """Run a phase in its own interpreter: BLAS thread settings a run leaves behind (the
    leaf kernels' slab threads set OpenBLAS's count) must not leak into the next phase."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{phase}.json"
        cmd = [sys.executable, "-m", "distal.studies.validate", "--phase", phase]
        cmd += ["--worker", str(out), "--repeat", str(repeat)]
        cmd += ["--small"] if cases is SMALL else []
        subprocess.run(cmd, check=True)
        return json.loads(out.read_text())


def measure_local(cases: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median ``Result.seconds`` of the local runtime per case (after a warm-up)."""
    out = {}
    for name, make in cases.items():
        kernel = make().compile()
        data = inputs_of(kernel)
        kernel.run(data, trace=False)
        out[name] = statistics.median(kernel.run(data, trace=False).seconds for _ in range(repeat))
    return out


def simulated(
    cases: dict[str, Callable[[], Any]], recalibrate: bool = True
) -> dict[str, dict[str, Any]]:
    """Both simulations per case on the ``local`` preset (freshly calibrated: the cached
    calibration may come from a loaded machine)."""
    from distal.sim import network, simulate

    network.calibrate_local.cache_clear()
    cal = network.calibrate_local(refresh=recalibrate)
    out: dict[str, dict[str, Any]] = {}
    for name, make in cases.items():
        kernel = make().compile()
        par = simulate(kernel, "local")
        seq = simulate(kernel, "local", sequential=True)
        out[name] = {
            "parallel": par.seconds,
            "sequential": seq.seconds,
            "compute": par.breakdown()["compute"],
            "routing": kernel.plan.routing,
        }
    out["_calibration"] = cal
    return out


def table(results: dict[str, Any]) -> str:
    """The markdown table of docs/scaling.md."""
    rows = [
        "| case | `mpiexec -n 4` measured (execute) | simulated, parallel | error "
        "| rank compute measured / simulated (max) | local runtime measured "
        "| simulated, `sequential=True` | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    mpi, local, sim = results["mpi"], results["local"], results["sim"]
    for name in mpi:
        m, s, lo = mpi[name]["median"], sim[name], local[name]
        rows.append(
            f"| {name} | {m:.3f} s | {s['parallel']:.3f} s | {s['parallel'] / m - 1:+.0%} "
            f"| {max(mpi[name]['compute']):.3f} / {max(s['compute']):.3f} s "
            f"| {lo:.3f} s | {s['sequential']:.3f} s | {s['sequential'] / lo - 1:+.0%} |"
        )
    loads = ", ".join(f"{k} {v:.2f}" for k, v in results["loads"].items())
    return "\n".join([*rows, "", f"1-minute load average: {loads}"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--max-load", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for quiet")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--small", action="store_true", help="tiny cases: a smoke test")
    ap.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--phase", choices=("local", "sim"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cases = SMALL if args.small else FULL
    if args.worker is not None and args.phase is not None:
        fn = measure_local if args.phase == "local" else lambda c, _: simulated(c)
        args.worker.write_text(json.dumps(fn(cases, args.repeat)))
        return
    if args.worker is not None:
        worker(cases, args.repeat, args.worker)
        return
    loads: dict[str, float] = {}
    results: dict[str, Any] = {"loads": loads}
    for phase in ("mpi", "local", "sim"):
        loads[phase] = wait_quiet(args.max_load, args.timeout)
        if phase == "mpi":
            results[phase] = measure_mpi(cases, args.repeat)
        else:
            results[phase] = in_fresh_process(phase, cases, args.repeat)
        loads[phase + " (after)"] = load1()
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
