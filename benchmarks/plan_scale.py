"""How the plan engine scales: one rank's program, and compile + stats, at thousands of ranks.

    python benchmarks/plan_scale.py            # the figures in docs/performance.md
    python benchmarks/plan_scale.py --quick    # smaller machines

Measured for SUMMA (n = 64 per processor row), routing ``direct`` and ``tree``:

* ``program``: ``kernel.program(p)`` for processors at the corner, the middle and the end of
  the grid (seconds: best of three; MB: peak traced allocation of one build);
* ``compile+stats``: ``dl.compile(s, routing)`` then ``kernel.stats()``, for the named routings
  and for ``auto`` (which evaluates all three);
* ``whole plan``: ``kernel.plan`` (every processor's program), for comparison at P=1024.

Times are wall seconds of this process on a shared machine (CPU seconds beside them); the
targets are ratios of nothing, so read them with the load average printed at the top.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import distal as dl
from distal.algorithms import summa


def _timed(fn, repeat: int = 3) -> tuple[float, float, object]:
    best_wall, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        c, t = time.process_time(), time.perf_counter()
        out = fn()
        best_wall = min(best_wall, time.perf_counter() - t)
        best_cpu = min(best_cpu, time.process_time() - c)
    return best_wall, best_cpu, out


def _traced_mb(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6


def program_rows(gx: int, gy: int) -> list[str]:
    s = summa(64 * gx, machine=dl.Machine(gx, gy)).schedule
    rows = []
    for routing in ("direct", "tree"):
        kernel = dl.compile(s, routing=routing)
        P = gx * gy
        for p in (0, P // 2 + gy // 2, P - 1):
            wall, cpu, prog = _timed(lambda p=p, k=kernel: k.program(p))
            mb = _traced_mb(lambda p=p, k=kernel: k.program(p))
            rows.append(
                f"program     P={P:<6} {routing:<9} p={p:<6} {wall:7.3f} s  (cpu {cpu:6.3f})"
                f"  {mb:6.1f} MB  {len(prog.ops(p))} ops, {len(prog.messages)} messages,"
                f" {prog.nsteps} steps"
            )
    return rows


def stats_rows(gx: int, gy: int, routings: tuple[str, ...]) -> list[str]:
    rows = []
    for routing in routings:
        s = summa(64 * gx, machine=dl.Machine(gx, gy)).schedule

        def both(s=s, routing=routing):
            return dl.compile(s, routing=routing).stats()

        wall, cpu, _ = _timed(both, repeat=1)
        rows.append(f"compile+stats P={gx * gy:<6} {routing:<9} {wall:7.3f} s  (cpu {cpu:6.3f})")
    return rows


def whole_plan_row(gx: int, gy: int) -> str:
    s = summa(64 * gx, machine=dl.Machine(gx, gy)).schedule
    kernel = dl.compile(s, routing="direct")
    c, t = time.process_time(), time.perf_counter()
    plan = dl.compile(s, routing="direct").plan
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    mb = _traced_mb(lambda: dl.compile(s, routing="direct").plan)
    del kernel
    return (
        f"whole plan  P={gx * gy:<6} direct    {wall:7.3f} s  (cpu {cpu:6.3f})  {mb:6.1f} MB  "
        f"{len(plan.messages)} messages"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller machines")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    if args.quick:
        rows = program_rows(16, 16) + stats_rows(32, 64, ("direct", "auto"))
        rows.append(whole_plan_row(16, 16))
    else:
        rows = program_rows(64, 64)
        rows += stats_rows(128, 256, ("direct", "broadcast", "tree", "auto"))
        rows.append(whole_plan_row(32, 32))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
