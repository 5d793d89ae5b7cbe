"""The volunteer pool measured: per-unit bytes and round trips, a GEMM behind slow links
against its bounds, the cost of a killed volunteer, unequal volunteers.

Run as root from the repository root (with the ``pool`` extra installed)::

    .venv/bin/python benchmarks/pool.py units
    .venv/bin/python benchmarks/pool.py gemm [--n 8192] [--grid 4] [--rate 40] [--delay 0.01]
    .venv/bin/python benchmarks/pool.py unequal [--n 2048] [--grid 8] [--quota 0.4]

``units``: on a loopback pool, what one unit of a GEMM and of a CG's SpMV costs on the wire:
the unit message, its program, its blocks, its reply, in bytes, and the round trips a
volunteer makes for it (pull, one meta and one batch of chunks per object it does not hold,
the reply's acknowledgements: awaited together), first run and a second run of the same
plan (blocks held).

``gemm``: four volunteers in network namespaces (``tests/pool/netns.py``: each behind a
``--rate`` Mbit/s tbf link each way, ``--delay`` s of relay latency each way, reaching only
the coordinator), each pinned to a core of its own (round-robin over this machine's), one
BLAS thread. A GEMM of order ``--n`` on a ``--grid x --grid`` machine (SUMMA, one unit a
processor): the wall time against the larger of the pool's compute time (the units' compute
seconds as the volunteers measured them, over the four) and the busiest link's bytes over
the link rate (measured on the veths, and as the placement implies: the blocks each
volunteer was sent plus its replies); the volunteers' utilization (compute seconds over
four times the wall time). Then the same with one of the four SIGKILLed a third of the way
in (not replaced): the slowdown.

``unequal``: three volunteers on loopback in cgroups (v1 ``cpu``, as
``benchmarks/elastic_unequal.py``) allowed ``quota``, ``quota / 2`` and ``quota / 4`` of a
core; a GEMM over-decomposed on ``grid x grid`` processors, on the pool and on the fastest
volunteer alone. The speed bound is the fastest alone over ``1 + 1/2 + 1/4``.

Every result is compared with numpy's (exact: small integers in float64).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "pool"))
sys.path.insert(0, str(HERE))

import distal as dl  # noqa: E402
from distal.runtime.pool.driver import Job, PoolDriver  # noqa: E402
from distal.runtime.pool.engine import Engine, Options  # noqa: E402
from distal.runtime.pool.link import Link  # noqa: E402


def _env() -> dict[str, str]:
    src = str(HERE.parent / "src")
    path = [src, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1"}  # fmt: skip


def gemm_problem(n: int, grid: int, seed: int = 0) -> tuple[Any, dict[str, np.ndarray]]:
    k = dl.algorithms.summa(n, machine=dl.Machine(grid, grid), steps=grid).compile()
    rng = np.random.default_rng(seed)
    x = {"B": rng.integers(-3, 4, (n, n)).astype(np.float64),
         "C": rng.integers(-3, 4, (n, n)).astype(np.float64)}  # fmt: skip
    return k, x


def run_gemm(engine: Engine, link: Link, k: Any, x: dict[str, np.ndarray],
             timeout: float = 3600) -> tuple[np.ndarray, Any, float]:  # fmt: skip
    drv = PoolDriver(Job(k.plan, k.kernels, k.dtypes), x)
    t0 = time.perf_counter()
    value, _, summary = drv.run(engine, lambda c: link.call(c, timeout))
    return value, summary, time.perf_counter() - t0


def _wait_connected(logs: Any, names: list[str], timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all("connected" in logs(n) for n in names):
            return
        time.sleep(0.2)
    raise RuntimeError(f"volunteers {names} did not connect")


# -- gemm behind slow links -----------------------------------------------------------------


def bench_gemm(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    from netns import donors

    from distal.runtime.pool.server import NatsServer, PoolDir

    root = Path(tempfile.mkdtemp(prefix="distal-bench-pool-"))
    port = _free_port()
    pd = PoolDir.create(root / "pool", port=port)
    server = NatsServer(pd, tied=True).start()
    cores = sorted(os.sched_getaffinity(0))
    out: dict[str, Any] = {"n": args.n, "grid": args.grid, "rate_mbit": args.rate,
                           "delay_s": args.delay, "load": os.getloadavg()}  # fmt: skip
    try:
        with donors(4, port, rate_mbit=args.rate, delay_s=args.delay, logs=root) as d:
            names = [f"d{i}" for i in range(4)]

            def start(i: int) -> Any:
                creds = root / f"{names[i]}.creds"
                if not creds.exists():
                    pd.invite(names[i]).write(creds)
                cmd = [sys.executable, "-m", "distal", "volunteer", str(creds), "--server",
                       d.links[i].server, "--nice", "0"]  # fmt: skip
                return d.start(i, names[i], cmd, _env(), cores=[cores[i % len(cores)]])

            procs = [start(i) for i in range(4)]
            _wait_connected(d.log, names)
            for seed, label in enumerate(("undisturbed", "one killed")):
                # new data each time: every block travels again (nothing found in a cache)
                k, x = gemm_problem(args.n, args.grid, seed)
                want = x["B"] @ x["C"]
                link = Link(pd.coordinator()).start()
                engine = Engine(link, Options())
                # warm: every volunteer's compute process up, every link's TLS session made
                ks, xs = gemm_problem(64, 2)
                run_gemm(engine, link, ks, xs)
                before = d.counters()
                killer = None
                if label == "one killed":
                    at = out["undisturbed"]["seconds"] / 3
                    killer = threading.Timer(at, procs[3].kill)
                    killer.start()
                value, s, seconds = run_gemm(engine, link, k, x)
                out.setdefault("runs", []).append({"label": label, "summary": s.as_dict()})
                after = d.counters()
                link.close()
                if killer is not None:
                    killer.cancel()
                assert np.array_equal(value, want), "the pool's GEMM differs from numpy's"
                moved = {ns: (after[ns][0] - before[ns][0], after[ns][1] - before[ns][1])
                         for ns in before}  # fmt: skip
                busiest = max(max(a, b) for a, b in moved.values())
                out_bytes = 8 * (args.n // args.grid) ** 2  # a unit's reply
                plan = {v: s.bytes_sent_by_volunteer.get(v, 0) for v in names}
                plan_busiest = max(max(plan[v], s.units_by_volunteer.get(v, 0) * out_bytes)
                                   for v in names)  # fmt: skip
                compute = sum(s.compute_seconds.values())
                live = 4 if label == "undisturbed" else 3
                row = {
                    "seconds": seconds,
                    "compute_seconds": s.compute_seconds,
                    "pool_compute_bound_s": compute / live,
                    "link_bound_s": busiest / d.rate_bytes,
                    "plan_link_bound_s": plan_busiest / d.rate_bytes,
                    "link_bytes": moved,
                    "units_by_volunteer": s.units_by_volunteer,
                    "bytes_sent_by_volunteer": s.bytes_sent_by_volunteer,
                    "utilization": compute / (live * seconds),
                    "check_seconds": s.check_seconds,
                    "copies": s.copies,
                    "reassigned": s.reassigned,
                }
                row["bound_s"] = max(row["pool_compute_bound_s"], row["link_bound_s"])
                row["ratio"] = seconds / row["bound_s"]
                out[label] = row
                print(f"gemm n={args.n} {label}: {seconds:.1f} s; bound {row['bound_s']:.1f} s "
                      f"(compute {row['pool_compute_bound_s']:.1f}, link "
                      f"{row['link_bound_s']:.1f}, plan's link {row['plan_link_bound_s']:.1f}) "
                      f"-> {row['ratio']:.2f}x; utilization {row['utilization']:.0%}",
                      flush=True)  # fmt: skip
            killed, base = out["one killed"]["seconds"], out["undisturbed"]["seconds"]
            out["slowdown_one_killed"] = killed / base
            print(f"one of 4 killed at a third: {out['slowdown_one_killed']:.2f}x", flush=True)
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
    finally:
        server.stop()
        import shutil

        if args.keep:
            print(f"logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    import logging

    if os.environ.get("DISTAL_POOL_LOG"):
        logging.basicConfig(level=logging.DEBUG, filename=os.environ["DISTAL_POOL_LOG"],
                            format="%(asctime)s %(name)s %(message)s")  # fmt: skip
        for quiet in ("asyncio", "nats"):
            logging.getLogger(quiet).setLevel(logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    g = sub.add_parser("gemm")
    g.add_argument("--n", type=int, default=8192)
    g.add_argument("--grid", type=int, default=4)
    g.add_argument("--rate", type=float, default=40.0)
    g.add_argument("--delay", type=float, default=0.010)
    g.add_argument("--json", default=None)
    g.add_argument("--keep", action="store_true", help="keep the logs and the pool directory")
    args = ap.parse_args()
    out = {"gemm": bench_gemm}[args.what](args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
