"""How binding a sparse kernel scales: bind, one rank's program, the whole plan, its stats.

    python benchmarks/sparse_plan_scale.py            # the figures in docs/performance.md
    python benchmarks/sparse_plan_scale.py --quick    # P = 64 and 256 only

Measured for SpMV (``dl.algorithms.spmv``, c and a in row blocks) on a uniform random
100,000 x 100,000 CSR matrix of 1,000,000 stored entries, in the row and the non-zero
split, at P = 64, 256 and 1024:

* ``bind``: ``kernel.bind({"B": B})`` (what every processor visits and needs: the pattern's
  cut, the distinct columns each references, their owners);
* ``program(p)``: ``bound.program(p)`` for the processors at the start, the middle and the
  end, on a kernel whose whole plan has not been written (what an MPI rank does; the
  message count is the middle processor's);
* ``plan``: ``bound.plan``, every processor's program (what the local runtime executes);
* ``stats``: ``bound.stats()`` once the plan exists (counted from it);
* ``memory``: the peak bytes Python allocated (``tracemalloc``, in a separate pass after the
  timed ones) while the middle processor's ``program(p)`` was built, and while the whole
  plan was, each after the bind (the bound pattern itself is shared, not copied).

Each figure is the best of ``--repeat`` runs (CPU seconds of this process; wall seconds
beside them), so read them with the load average printed at the top: the machine may be
shared.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc

import distal as dl
from distal.sparse.generate import uniform


def _clock(fn) -> tuple[float, float, object]:
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c, time.perf_counter() - t, out


def measure(B, P: int, split: str, repeat: int) -> dict[str, tuple[float, float]]:
    """Best (cpu, wall) seconds of each stage, and the message counts."""
    kernel = dl.algorithms.spmv(B.shape, dl.Machine(P), split=split).compile()
    best: dict[str, tuple[float, float]] = {}

    def keep(name: str, cpu: float, wall: float) -> None:
        if name not in best or cpu < best[name][0]:
            best[name] = (cpu, wall)

    for _ in range(repeat):
        # bind afresh (a kernel remembers the patterns it was bound to), with the previous
        # run's plan freed before the clock starts
        kernel._bound = None
        gc.collect()
        cpu, wall, bound = _clock(lambda: kernel.bind({"B": B}))
        keep("bind", cpu, wall)
        for p in (0, P // 2, P - 1):
            cpu, wall, prog = _clock(lambda p=p, b=bound: b.program(p))
            keep("program(p)", cpu, wall)
            if p == P // 2:
                best["program messages"] = (len(prog.messages), 0.0)
        assert "plan" not in bound.__dict__, "program(p) wrote the whole plan"
        cpu, wall, plan = _clock(lambda b=bound: b.plan)
        keep("plan", cpu, wall)
        best["plan messages"] = (len(plan.messages), 0.0)
        cpu, wall, _ = _clock(lambda b=bound: b.stats())
        keep("stats", cpu, wall)
        del bound, plan, prog
    kernel._bound = None
    gc.collect()
    bound = kernel.bind({"B": B})
    for name, fn in (("program", lambda: bound.program(P // 2)), ("plan", lambda: bound.plan)):
        gc.collect()
        tracemalloc.start()
        out = fn()
        best[f"{name} peak MB"] = (tracemalloc.get_traced_memory()[1] / 1e6, 0.0)
        tracemalloc.stop()
        del out
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="P = 64 and 256 only")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; SpMV, 100000 x 100000, 1000000 entries")
    B = uniform(100_000, 100_000, 1_000_000, seed=1)
    for P in (64, 256) if args.quick else (64, 256, 1024):
        for split in ("rows", "nonzeros"):
            r = measure(B, P, split, args.repeat)
            stages = "  ".join(
                f"{n} {r[n][0]:.3f} s (wall {r[n][1]:.3f})"
                for n in ("bind", "program(p)", "plan", "stats")
            )
            print(
                f"P={P:<5} {split:<9} {stages}  messages: program "
                f"{r['program messages'][0]:.0f}, plan {r['plan messages'][0]:.0f}  "
                f"memory: program peak {r['program peak MB'][0]:.1f} MB, "
                f"plan peak {r['plan peak MB'][0]:.0f} MB"
            )


if __name__ == "__main__":
    main()
