"""The volunteer pool measured: per-unit bytes and round trips, a GEMM behind slow links
against its bounds, the cost of a killed volunteer, unequal volunteers.

Run as root from the repository root (with the ``pool`` extra installed)::

    .venv/bin/python benchmarks/pool.py units [--delay 0.05] [--rate 1000]
    .venv/bin/python benchmarks/pool.py gemm [--n 8192] [--grid 4] [--rate 40] [--delay 0.01]
    .venv/bin/python benchmarks/pool.py cg [--m 48] [--iters 20] [--delays 0.002,0.01,0.04]
    .venv/bin/python benchmarks/pool.py unequal [--n 2048] [--grid 8] [--quota 0.4]

``units``: on a loopback pool, what one unit of a GEMM and of a CG's SpMV costs on the wire:
the unit message, its program, its blocks, its reply, in bytes, and the round trips a
volunteer makes for it (pull, one meta and one batch of chunks per object it does not hold,
the reply's acknowledgements: awaited together), first run and a second run of the same
plan (blocks held).

``units``: one volunteer in a network namespace behind a ``--rate`` Mbit/s link with
``--delay`` s each way; one unit a run (a GEMM of order ``--n`` on one processor), run
twice (new data, then the same: its blocks held): the bytes sent (program and blocks not
held) and received (the reply) per unit as the coordinator counted them, and the round
trips, measured: the unit's time from its hand-out to its reply, less its compute time and
its bytes at the link rate, over the round-trip time.

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

``cg``: the same four namespaced volunteers behind ``--rate`` links, once for each relay
latency in ``--delays``: a checkpoint-free ``dl.apps.cg`` session on the 2-D Laplacian of
order ``--m``**2 (a warm-up solve first: the matrix and the compute processes are then
in place, as in a long loop), ``--iters`` iterations timed: seconds per iteration against
the link latency, and the round trips per iteration that the slope implies (seconds per
iteration over the round-trip time). At the first latency also with ``verify=None``
(nothing checked), alternated ``--reps`` times: the verification overhead per iteration.

``unequal``: three volunteers on loopback in cgroups (v1 ``cpu``, as
``benchmarks/elastic_unequal.py``) allowed ``quota``, ``quota / 2`` and ``quota / 4`` of a
core; a GEMM over-decomposed on ``grid x grid`` processors, on the pool and on the fastest
volunteer alone. The speed bound is the fastest alone over ``1 + 1/2 + 1/4``.

Every result is compared with numpy's (exact: small integers in float64).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
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


# -- cg against the link latency ------------------------------------------------------------


def laplacian(m: int) -> Any:
    import scipy.sparse as sps

    t = sps.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    return sps.csr_array(sps.kron(t, sps.identity(m)) + sps.kron(sps.identity(m), t))


def _timed_cg(creds: str, A: Any, b: np.ndarray, iters: int, verify: Any) -> dict[str, Any]:
    """A warm-up solve, then ``iters`` iterations timed, in one session."""
    import warnings

    runs: list[Any] = []

    class Watched(dl.Session):
        def run_named(self, kernel, names, inputs=None, **kw):  # type: ignore[no-untyped-def]
            res = super().run_named(kernel, names, inputs, **kw)
            runs.append(res.extra.get("summary"))
            return res

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (it stops at maxiter, unconverged: as asked)
        with Watched("pool", machine=4, pool=creds, verify=verify) as sess:
            dl.apps.cg(A, b, tol=1e-30, maxiter=3, session=sess)
            runs.clear()
            t0 = time.perf_counter()
            x, its = dl.apps.cg(A, b, tol=1e-30, maxiter=iters, session=sess)
            seconds = time.perf_counter() - t0
    ss = [s for s in runs if s is not None]
    return {"seconds": seconds, "iterations": int(its), "s_per_it": seconds / max(int(its), 1),
            "kernel_runs": len(runs), "check_seconds": sum(s.check_seconds for s in ss),
            "checked": sum(s.checked for s in ss),
            "bytes_sent": sum(s.bytes_sent for s in ss),
            "bytes_received": sum(s.bytes_received for s in ss),
            "x_norm": float(np.linalg.norm(np.asarray(x)))}  # fmt: skip


@contextlib.contextmanager
def served_donors(nvol: int, rate: float, delay: float, root: Path) -> Iterator[Any]:
    """A served pool and ``nvol`` volunteers in namespaces behind ``rate`` Mbit/s links with
    ``delay`` s each way; yields (the pool directory, the donors, the volunteers' names)."""
    from netns import donors

    from distal.runtime.pool.server import NatsServer, PoolDir

    port = _free_port()
    pd = PoolDir.create(root / "pool", port=port)
    server = NatsServer(pd, tied=True).start()
    cores = sorted(os.sched_getaffinity(0))
    try:
        with donors(nvol, port, rate_mbit=rate, delay_s=delay, logs=root) as d:
            names = [f"d{i}" for i in range(nvol)]
            procs = []
            for i, name in enumerate(names):
                creds = root / f"{name}.creds"
                if not creds.exists():
                    pd.invite(name).write(creds)
                cmd = [sys.executable, "-m", "distal", "volunteer", str(creds), "--server",
                       d.links[i].server, "--nice", "0"]  # fmt: skip
                procs.append(d.start(i, name, cmd, _env(), cores=[cores[i % len(cores)]]))
            _wait_connected(d.log, names)
            try:
                yield pd, d, names, procs
            finally:
                _stop(procs)
    finally:
        server.stop()


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def bench_cg(args: argparse.Namespace) -> dict[str, Any]:
    import shutil
    import tempfile

    A = laplacian(args.m)
    b = np.random.default_rng(0).standard_normal(args.m * args.m)
    delays = [float(v) for v in args.delays.split(",")]
    out: dict[str, Any] = {"m": args.m, "iters": args.iters, "rate_mbit": args.rate,
                           "load_before": os.getloadavg(), "by_delay": []}  # fmt: skip
    for k, delay in enumerate(delays):
        root = Path(tempfile.mkdtemp(prefix="distal-bench-pool-cg-"))
        try:
            with served_donors(4, args.rate, delay, root) as _:
                creds = str(root / "pool" / "coordinator.creds")
                row = {"delay_s": delay, "rtt_s": 2 * delay, "check": _timed_cg(
                    creds, A, b, args.iters, "check")}  # fmt: skip
                print(f"cg m={args.m} delay {delay * 1e3:.0f} ms each way: "
                      f"{row['check']['s_per_it']:.3f} s/iteration "
                      f"({row['check']['kernel_runs']} kernel runs)", flush=True)  # fmt: skip
                if k == 0:
                    pairs = []
                    for _ in range(args.reps):
                        none = _timed_cg(creds, A, b, args.iters, None)
                        chk = _timed_cg(creds, A, b, args.iters, "check")
                        assert np.isclose(none["x_norm"], chk["x_norm"], rtol=1e-12)
                        pairs.append((chk["s_per_it"], none["s_per_it"], chk["check_seconds"]
                                      / max(chk["iterations"], 1)))  # fmt: skip
                    row["verify_pairs"] = pairs
                    over = [c / n - 1 for c, n, _ in pairs]
                    row["verify_overhead"] = float(np.median(over))
                    print(f"verification overhead per iteration: "
                          f"{', '.join(f'{o:+.1%}' for o in over)} (median "
                          f"{row['verify_overhead']:+.1%}); checks took "
                          f"{np.median([c for _, _, c in pairs]) * 1e3:.1f} ms/iteration",
                          flush=True)  # fmt: skip
                out["by_delay"].append(row)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    rows = out["by_delay"]
    if len(rows) >= 2:
        x = np.array([r["rtt_s"] for r in rows])
        y = np.array([r["check"]["s_per_it"] for r in rows])
        slope, icpt = np.polyfit(x, y, 1)
        out["round_trips_per_iteration"] = float(slope)
        out["s_per_it_at_zero_latency"] = float(icpt)
        print(f"seconds/iteration = {icpt:.3f} + {slope:.1f} x RTT: {slope:.1f} round trips "
              f"an iteration", flush=True)  # fmt: skip
    out["load_after"] = os.getloadavg()
    return out


# -- one unit's bytes and round trips -------------------------------------------------------


class _Replies(logging.Handler):
    """The engine's record of each reply: (seconds from hand-out to reply, computing)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.got: list[tuple[float, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if " <- " in str(record.msg) and len(record.args or ()) >= 5:
            args = record.args
            assert isinstance(args, tuple)
            self.got.append((float(args[3]), float(args[4])))


def bench_units(args: argparse.Namespace) -> dict[str, Any]:
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="distal-bench-pool-units-"))
    replies = _Replies()
    lg = logging.getLogger("distal.pool")
    lg.addHandler(replies)
    lg.setLevel(logging.DEBUG)
    out: dict[str, Any] = {"delay_s": args.delay, "rate_mbit": args.rate,
                           "load_before": os.getloadavg(), "rows": []}  # fmt: skip
    try:
        with served_donors(1, args.rate, args.delay, root) as (pd, d, _, _):
            link = Link(pd.coordinator()).start()
            try:
                engine = Engine(link, Options(speculate=False))
                gk, gx = gemm_problem(args.n, 1)
                wk, wx = gemm_problem(16, 1, 7)
                for case, k, x in (("warm-up", wk, wx),
                                   ("gemm", gk, gx)):  # fmt: skip
                    for held in (False, True) if case != "warm-up" else (False,):
                        replies.got.clear()
                        drv = PoolDriver(Job(k.plan, k.kernels, k.dtypes), x)
                        value, _, s = drv.run(engine, lambda c: link.call(c, 600))
                        assert np.array_equal(value, x["B"] @ x["C"])
                        if case == "warm-up":
                            continue
                        elapsed, compute = replies.got[-1]
                        sent, recv = s.bytes_sent / s.units, s.bytes_received / s.units
                        wire = (sent + recv) / d.rate_bytes
                        trips = (elapsed - compute - wire) / (2 * args.delay)
                        row = {"case": case, "blocks_held": held, "units": s.units,
                               "bytes_sent": sent, "bytes_received": recv,
                               "seconds": elapsed, "compute_s": compute, "wire_s": wire,
                               "round_trips": trips}  # fmt: skip
                        out["rows"].append(row)
                        print(f"{case} ({'blocks held' if held else 'new blocks'}): "
                              f"{sent:,.0f} B sent, {recv:,.0f} B received a unit; "
                              f"{elapsed:.2f} s hand-out to reply ({compute:.2f} computing, "
                              f"{wire:.2f} on the wire) -> {trips:.1f} round trips",
                              flush=True)  # fmt: skip
            finally:
                link.close()
    finally:
        lg.removeHandler(replies)
        shutil.rmtree(root, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    return out


# -- unequal volunteers ---------------------------------------------------------------------


def bench_unequal(args: argparse.Namespace) -> dict[str, Any]:
    import shutil
    import tempfile

    from elastic_unequal import cgroups_unavailable, make_group, remove_group

    from distal.runtime.pool.server import NatsServer, PoolDir

    why = cgroups_unavailable()
    if why:
        print(f"skipped: {why}")
        return {"skipped": why}
    root = Path(tempfile.mkdtemp(prefix="distal-bench-pool-unequal-"))
    port = _free_port()
    pd = PoolDir.create(root / "pool", port=port)
    server = NatsServer(pd, tied=True).start()
    speeds = {"fast": 1.0, "half": 0.5, "quarter": 0.25}
    groups = {n: make_group(f"distal-pool-{os.getpid()}-{n}", args.quota * f)
              for n, f in speeds.items()}  # fmt: skip
    procs: dict[str, Any] = {}
    out: dict[str, Any] = {"n": args.n, "grid": args.grid, "quota": args.quota,
                           "load_before": os.getloadavg()}  # fmt: skip
    logs = lambda n: (root / f"{n}.log").read_text(errors="replace")  # noqa: E731

    def start(name: str) -> None:
        creds = root / f"{name}.creds"
        pd.invite(name).write(creds)
        cmd = (f"echo $$ > {groups[name] / 'cgroup.procs'} && exec {sys.executable} -m distal "
               f"volunteer {creds} --server tls://127.0.0.1:{port} --nice 0")  # fmt: skip
        with open(root / f"{name}.log", "wb") as log:
            procs[name] = subprocess.Popen(["sh", "-c", cmd], stdout=log,
                                           stderr=subprocess.STDOUT, env=_env())  # fmt: skip

    def timed(names: list[str], seed: int) -> tuple[float, Any]:
        link = Link(pd.coordinator()).start()
        try:
            engine = Engine(link, Options())
            ks, xs = gemm_problem(64, 2, 99)
            run_gemm(engine, link, ks, xs)  # warm: compute processes up, TLS made
            k, x = gemm_problem(args.n, args.grid, seed)
            value, s, seconds = run_gemm(engine, link, k, x)
        finally:
            link.close()
        assert np.array_equal(value, x["B"] @ x["C"]), "the pool's GEMM differs from numpy's"
        assert set(s.units_by_volunteer) <= set(names)
        return seconds, s

    try:
        start("fast")
        _wait_connected(logs, ["fast"])
        alone, _ = timed(["fast"], 1)
        print(f"fast volunteer alone: {alone:.1f} s", flush=True)
        for name in ("half", "quarter"):
            start(name)
        _wait_connected(logs, list(speeds))
        together, s3 = timed(list(speeds), 2)
        bound = alone / sum(speeds.values())
        out.update(alone_s=alone, pool_s=together, speed_bound_s=bound,
                   ratio=together / bound, units_by_volunteer=s3.units_by_volunteer,
                   compute_seconds=s3.compute_seconds, copies=s3.copies)  # fmt: skip
        print(f"unequal 1x/2x/4x: {together:.1f} s; speed bound {bound:.1f} s "
              f"(alone / 1.75) -> {together / bound:.2f}x; units {s3.units_by_volunteer}",
              flush=True)  # fmt: skip
    finally:
        _stop(list(procs.values()))
        server.stop()
        for g in groups.values():
            remove_group(g)
        shutil.rmtree(root, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
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
    c = sub.add_parser("cg")
    c.add_argument("--m", type=int, default=48)
    c.add_argument("--iters", type=int, default=20)
    c.add_argument("--delays", default="0.002,0.01,0.04")
    c.add_argument("--rate", type=float, default=40.0)
    c.add_argument("--reps", type=int, default=3)
    c.add_argument("--json", default=None)
    u = sub.add_parser("units")
    u.add_argument("--n", type=int, default=512)
    u.add_argument("--rate", type=float, default=1000.0)
    u.add_argument("--delay", type=float, default=0.05)
    u.add_argument("--json", default=None)
    q = sub.add_parser("unequal")
    q.add_argument("--n", type=int, default=2048)
    q.add_argument("--grid", type=int, default=8)
    q.add_argument("--quota", type=float, default=0.4, help="the fastest volunteer's cores")
    q.add_argument("--json", default=None)
    args = ap.parse_args()
    benches = {"gemm": bench_gemm, "cg": bench_cg, "units": bench_units, "unequal": bench_unequal}
    out = benches[args.what](args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
