"""The ``distal`` command line: ``distal demo`` runs a distributed GEMM end to end.

The demo uses the public API only: it states the computation (index notation), the data
distribution (``"xy -> xy"`` on a 2-D grid) and a schedule (Cannon, SUMMA or PUMMA), compiles
it, runs it on the local runtime, checks the result against numpy and prints the plan's
per-processor traffic next to the measured one.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

import numpy as np

import distal as dl
from distal.text import plural, time_text

ALGORITHMS = ("cannon", "summa", "pumma")
STAT_FIELDS = ("words_received", "words_sent", "messages_received", "iterations", "peak_words")
TOLERANCE = 1e-10


def parse_grid(text: str) -> tuple[int, int]:
    """Parse a grid such as ``"2x2"`` into ``(gx, gy)``, both positive; the message says
    whether the form or an extent is wrong (``0x2`` has the right form)."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"grid must look like GXxGY, e.g. 2x2; got {text!r}")
    gx, gy = int(parts[0]), int(parts[1])
    if gx < 1 or gy < 1:
        raise argparse.ArgumentTypeError(
            f"grid {text!r} has an extent of 0; each must be at least 1, e.g. 2x2"
        )
    return gx, gy


def positive_int(text: str) -> int:
    """An argparse type for integers >= 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def gemm_kernel(n: int, grid: tuple[int, int], algorithm: str) -> Any:
    """Compile ``A[i,j] = B[i,k] * C[k,j]`` on a ``grid`` machine with the named schedule
    from ``dl.algorithms`` (ordinary public schedules: ``print(kernel.schedule)``)."""
    make = {"summa": dl.algorithms.summa, "cannon": dl.algorithms.cannon}
    make["pumma"] = dl.algorithms.pumma
    return dl.compile(make[algorithm](n, machine=dl.Machine(*grid)).schedule)


def stats_table(stats: Any, coords: list[tuple[int, ...]]) -> str:
    """Format per-processor statistics as a fixed-width table."""
    header = f"{'proc':>4} {'coords':>8} " + " ".join(f"{f:>17}" for f in STAT_FIELDS)
    rows = [header]
    for p, coord in enumerate(coords):
        cells = " ".join(f"{getattr(stats, f)[p]:>17}" for f in STAT_FIELDS)
        rows.append(f"{p:>4} {tuple(coord)!s:>8} {cells}")
    return "\n".join(rows)


#: The demo's defaults: SUMMA for n=2048 on a 2x1 grid. The local runtime runs the
#: processors one after another, each GEMM on all cores; a fetched input block is read where
#: it lies (the message is counted, nothing is copied), so the run is the GEMMs: four of
#: 1024x1024x2048, at BLAS's full speed (0.98x numpy on this 2-core machine, idle).
DEMO_N, DEMO_GRID, DEMO_ALGORITHM = 2048, (2, 1), "summa"
FAIR = 0.9  # distal/numpy below this: the demo says what holds distal back


def _busy_seconds(trace: list[Any], kind: str) -> float:
    """Wall time during which at least one ``kind`` event of the trace was running (the
    local runtime's copies of one step overlap: their events share a start)."""
    total, reach = 0.0, -np.inf
    for a, b in sorted((e.start, e.end) for e in trace if e.kind == kind):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _seconds(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def leaf_gemms(res: Any, n: int, grid: tuple[int, int]) -> tuple[int, tuple[int, int, int]]:
    """How many GEMMs a run made and the shape ``(m, k, n)`` of one, read off its trace
    (compute events) and its iteration counts: what numpy has to match to be compared at
    distal's own block size."""
    calls = [e for e in res.trace if e.kind == "compute"]
    mine = sum(1 for e in calls if e.proc == 0)
    mb, nb = -(-n // grid[0]), -(-n // grid[1])
    kb = max(1, res.stats.iterations[0] // (mb * nb * mine)) if mine else n
    return len(calls), (mb, kb, nb)


def _cuts(n: int, parts: int) -> list[slice]:
    """``parts`` blocks of ``range(n)`` as the distribution notation cuts them (equal blocks
    of ``ceil(n / parts)``, the last ones shorter or empty)."""
    size = -(-n // parts)
    return [slice(min(n, p * size), min(n, (p + 1) * size)) for p in range(parts)]


def numpy_blocks(b: np.ndarray, c: np.ndarray, grid: tuple[int, int], count: int) -> Any:
    """A function making numpy compute ``b @ c`` as ``count`` block GEMMs, the blocks cut as
    distal cuts them: numpy at distal's block size, reading distinct blocks from memory as
    distal does (the same block again and again would stay in cache and flatter numpy).
    Each product goes to its output block's buffer (not accumulated: BLAS's own speed)."""
    n, (gx, gy) = b.shape[0], grid
    ks = max(1, count // (gx * gy))
    rows, cols, inner = _cuts(n, gx), _cuts(n, gy), _cuts(n, ks)
    outs = [[np.ones((r.stop - r.start, q.stop - q.start)) for q in cols] for r in rows]
    work = [
        (b[r, k], c[k, q], outs[x][y])
        for x, r in enumerate(rows)
        for y, q in enumerate(cols)
        for k in inner
    ]

    def run() -> None:
        for u, v, out in work:
            np.matmul(u, v, out=out)

    return run


def demo_limits(
    res: Any, n: int, numpy_s: float, blocks_s: float, gemms: tuple[int, tuple[int, int, int]]
) -> list[str]:
    """Where distal's time went and, when it is below ``FAIR`` x numpy, why.

    The local runtime runs every processor's GEMMs one after another (each on all cores)
    and copies the blocks each processor fetches: against numpy's one GEMM it does the same
    flops as ``P x steps`` smaller GEMMs (``blocks_s``: numpy doing just those, timed beside
    the runs), plus the copies (``n^2`` words against ``n^3`` flops: a larger ``n`` makes
    them a smaller share) and its own bookkeeping.
    """
    count, (mb, kb, nb) = gemms
    shape = f"{mb}x{kb}x{nb}"
    compute_s, copy_s = _busy_seconds(res.trace, "compute"), _busy_seconds(res.trace, "fetch")
    other_s = max(0.0, res.seconds - compute_s - copy_s)
    total = res.seconds
    lines = [
        f"distal's time: {count} GEMMs of {shape} {compute_s:.4f} s, copies between processors "
        f"{copy_s:.4f} s ({copy_s / total:.0%}), the rest {other_s:.4f} s ({other_s / total:.0%})",
        f"numpy doing b @ c as the same {count} block GEMMs: {blocks_s:.4f} s "
        f"({numpy_s / blocks_s:.2f}x its speed on the whole n={n} GEMM)",
    ]
    if numpy_s / total >= FAIR:
        return lines
    why = []
    if numpy_s < FAIR * blocks_s:
        why.append(
            f"the per-processor blocks ({shape}) are too small for BLAS to reach full speed "
            f"here: numpy itself is {numpy_s / blocks_s:.2f}x as fast on them as on one n={n} "
            "GEMM; a larger --n or a smaller --grid gives larger blocks"
        )
    if compute_s * FAIR > blocks_s:
        why.append(
            f"distal's GEMM calls took {compute_s / blocks_s:.2f}x as long as numpy's on the "
            "same blocks in this run (on a busy machine one run's calls can be slowed by "
            "others' work; rerun)"
        )
    if copy_s > (1 - FAIR) * total:
        why.append(
            f"copying fetched blocks between the processors' stores takes {copy_s / total:.0%} "
            "of the run (numpy moves nothing); it grows as n^2 and the flops as n^3, so a "
            "larger --n makes it a smaller share"
        )
    if other_s > (1 - FAIR) * total:
        why.append(
            f"the runtime's own work (scatter, bookkeeping) takes {other_s / total:.0%} of the "
            "run: the problem is small for this grid"
        )
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > cores:
        why.append(f"the machine is busy (load {load:.1f} on {cores} cores): timings vary")
    if not why:
        why.append("no single cause stands out (timing noise?): rerun, or raise --repeat")
    return lines + [f"limited by: {w}" for w in why]


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the GEMM demo; 0 on PASS, 1 on a wrong result, 2 on an invalid request.

    distal, numpy's one GEMM and numpy doing distal's block GEMMs are timed in turn (best of
    ``--repeat`` each), so that a burst of load on a shared machine slows all three.
    """
    n, (gx, gy), algorithm = args.n, args.grid, args.algorithm
    print(f"distal demo: {algorithm} GEMM, n={n}, grid {gx}x{gy}, seed {args.seed}")
    rng = np.random.default_rng(args.seed)
    b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))

    kernel = gemm_kernel(n, (gx, gy), algorithm)
    print(kernel.explain())
    predicted = kernel.stats()
    expected = b @ c  # numpy's warm-up too
    inputs = {"B": b, "C": c}
    gemms = leaf_gemms(kernel.run(inputs), n, (gx, gy))  # distal's warm-up
    blocks = numpy_blocks(b, c, (gx, gy), gemms[0])

    # only the best run is kept: each result holds its own output, and keeping every one
    # makes each later run write fresh pages (first-touch faults numpy's dropped product
    # never pays: that cost 0.19 s against 0.145 s per run at the default size)
    res, numpy_times, block_times = None, [], []
    for _ in range(args.repeat):
        run = kernel.run(inputs)
        if res is None or run.seconds < res.seconds:
            res = run
        del run
        numpy_times.append(_seconds(lambda: b @ c))
        block_times.append(_seconds(blocks))
    numpy_s, blocks_s = min(numpy_times), min(block_times)

    err = float(np.max(np.abs(res.value - expected))) / max(1.0, float(np.max(np.abs(expected))))
    ok = err <= TOLERANCE
    print(f"\nmax abs error (relative to max |b @ c|): {err:.3e}  {'PASS' if ok else 'FAIL'}")

    coords = [tuple(x) for x in dl.Machine(gx, gy).coords()]
    print("\nmeasured per-processor stats (local runtime):")
    print(stats_table(res.stats, coords))
    same = all(list(getattr(res.stats, f)) == list(getattr(predicted, f)) for f in STAT_FIELDS)
    print(f"measured == predicted: {'yes' if same else 'NO'}")
    print(
        f"max words received: {res.stats.max_words_received}, "
        f"total words moved: {res.stats.total_words}"
    )

    flops = 2.0 * n**3
    distal_gf, numpy_gf = flops / res.seconds / 1e9, flops / numpy_s / 1e9
    print(f"\ndistal: {distal_gf:8.2f} GFLOP/s  ({res.seconds:.4f} s, best of {args.repeat})")
    print(f"numpy:  {numpy_gf:8.2f} GFLOP/s  ({numpy_s:.4f} s, best of {args.repeat})")
    if res.trace and gemms[0]:
        print("\n".join(demo_limits(res, n, numpy_s, blocks_s, gemms)))
    print(f"ratio distal/numpy: {distal_gf / numpy_gf:.2f}x")
    return 0 if ok and same else 1


def find_mpiexec(explicit: str | None = None) -> str | None:
    """The MPI launcher: ``--mpiexec``, ``$DISTAL_MPIEXEC``, the venv's (mpich wheel), PATH."""
    import os
    import shutil
    from pathlib import Path

    for cand in (explicit, os.environ.get("DISTAL_MPIEXEC")):
        if cand:
            return shutil.which(cand) or (cand if Path(cand).is_file() else None)
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.is_file() else shutil.which("mpiexec")


def cmd_run(args: argparse.Namespace) -> int:
    """Launch a script under ``mpiexec -n P``; returns the launcher's exit code."""
    import subprocess

    mpiexec = find_mpiexec(args.mpiexec)
    if mpiexec is None:
        print(
            "error: no mpiexec found: pip install 'distal[mpi]' (mpi4py + the mpich wheel), "
            "or pass --mpiexec / set DISTAL_MPIEXEC to your cluster's launcher",
            file=sys.stderr,
        )
        return 2
    target = run_target(args.script, list(args.args))
    if isinstance(target, str):
        print(f"error: distal run: {target}", file=sys.stderr)
        return 2
    cmd = [mpiexec, "-n", str(args.n), *args.mpi_arg, sys.executable]
    cmd += ["-m", "distal.runtime._mpi_launch", *target]
    if args.verbose:
        print(" ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd)


_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?(\.exe)?$")


def is_python(word: str) -> bool:
    """Whether ``word`` names a Python interpreter (``python``, ``python3.11``, a path to
    one, this interpreter)."""
    return bool(_PYTHON.match(os.path.basename(word))) or (
        os.path.exists(word) and os.path.realpath(word) == os.path.realpath(sys.executable)
    )


def run_target(script: str, rest: list[str]) -> list[str] | str:
    """What ``distal run`` hands each rank's launcher (``SCRIPT ARGS`` or ``-m MODULE
    ARGS``), or the sentence saying why it cannot.

    ``distal run -n 2 python script.py`` (as one would type after ``mpiexec -n 2``) means
    the script: every rank runs this interpreter already, so a leading interpreter name is
    dropped (with ``-m MODULE`` kept); its other options are not taken."""
    if is_python(script):
        if rest and rest[0] == "-m" and len(rest) >= 2:
            return ["-m", *rest[1:]]
        if not rest or rest[0].startswith("-"):
            got = " ".join(rest) or "nothing"
            return (
                f"after {script!r} give the script (or -m MODULE), got {got}: "
                "distal run -n P SCRIPT [ARGS] runs SCRIPT with this interpreter on every rank"
            )
        script, rest = rest[0], rest[1:]
    if not os.path.isfile(script):
        why = "a directory" if os.path.isdir(script) else "no such file"
        return (
            f"cannot run {script!r}: {why}; distal run -n P SCRIPT [ARGS] runs the Python "
            "file SCRIPT on every rank (or -m MODULE)"
        )
    return [script, *rest]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; one subcommand per verb (``demo`` now, ``run`` etc. later)."""
    parser = argparse.ArgumentParser(
        prog="distal", description="distal: distributed tensor algebra compiler and runtime."
    )
    parser.add_argument("--version", action="version", version=f"distal {dl.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cal = sub.add_parser("calibrate", help="measure alpha/beta/gamma of this computer")
    cal.add_argument(
        "--output",
        default=None,
        help="JSON path (default: $DISTAL_CONFIG or ~/.config/distal/machine.json)",
    )
    cal.add_argument("--quick", action="store_true", help="smaller, faster measurements")
    cal.add_argument("--dry-run", action="store_true", help="print only, do not store")
    cal.set_defaults(func=cmd_calibrate)
    demo = sub.add_parser("demo", help="compile, run and check a distributed GEMM")
    demo.add_argument(
        "--n",
        type=positive_int,
        default=DEMO_N,
        help=f"matrix size (default {DEMO_N}: blocks large enough for BLAS's full speed)",
    )
    demo.add_argument(
        "--grid",
        type=parse_grid,
        default=DEMO_GRID,
        help="GXxGY (default {}x{})".format(*DEMO_GRID),
    )
    demo.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=DEMO_ALGORITHM,
        help=f"schedule to use (default {DEMO_ALGORITHM})",
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument(
        "--repeat", type=positive_int, default=5, help="timed runs; the best counts (default 5)"
    )
    demo.set_defaults(func=cmd_demo)
    run = sub.add_parser("run", help="run a script on P MPI ranks (mpiexec -n P python SCRIPT)")
    run.add_argument("-n", "--np", dest="n", type=positive_int, required=True, help="ranks")
    run.add_argument("--mpiexec", default=None, help="launcher to use (default: the venv's)")
    run.add_argument(
        "--mpi-arg", action="append", default=[], help="extra launcher argument (repeatable)"
    )
    run.add_argument("-v", "--verbose", action="store_true", help="print the launch command")
    run.add_argument("script", help="the Python script every rank runs")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    run.set_defaults(func=cmd_run)
    ck = sub.add_parser(
        "checkpoint", help="list, verify or remove the runs in a checkpoint location"
    )
    ck.add_argument("location", help="the directory or URL given as checkpoint=")
    ck.add_argument(
        "--verify", metavar="RUN", help="read every entry of RUN (a run key, a prefix, or 'all')"
    )
    ck.add_argument(
        "--remove", metavar="RUN", action="append", default=[], help="delete RUN (repeatable)"
    )
    ck.add_argument(
        "--clean",
        metavar="RUN",
        help="delete RUN's (or 'all' runs') half-written entries older than --older-than",
    )
    ck.add_argument(
        "--older-than", type=float, default=3600.0, help="seconds, for --clean (default 3600)"
    )
    ck.add_argument("--json", action="store_true", help="print the runs as JSON")
    ck.set_defaults(func=cmd_checkpoint)
    from distal.cli_study import add_subcommands  # explain, plot, simulate

    add_subcommands(sub)
    from distal.cli_pool import add_subcommands as add_pool  # pool serve/invite/revoke, volunteer

    add_pool(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distal`` console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit flush
        return code
    except BrokenPipeError:
        return closed_pipe()
    except dl.DistalError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1 if isinstance(e, dl.RuntimeFailure) else 2


SIGPIPE_EXIT = 128 + 13  # what a shell reports for a tool that SIGPIPE ended (`yes | head`)


def closed_pipe() -> int:
    """The reader of stdout went away (``distal checkpoint --json | head``): stop quietly.

    Python ignores SIGPIPE, so a write to a closed pipe raises ``BrokenPipeError`` instead
    of ending the process as it ends C tools. Pointing stdout at devnull keeps the
    interpreter's final flush from raising it again; the exit status is the one such a
    tool gets, so ``set -o pipefail`` scripts see the same thing for distal as for ``cat``.
    """
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (a test's capture): nothing to do
        pass
    return SIGPIPE_EXIT


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure the cost model's constants (ping-pong, GEMM) and store them as JSON."""
    from distal.cost.model import calibrate, save_params

    params, raw = calibrate(quick=args.quick)
    print(f"alpha (latency)     : {time_text(params.alpha):>10} per message")
    gbs, gflops = raw["bandwidth_bytes_per_s"] / 1e9, raw["gemm_gflops"]
    print(f"beta  (1/bandwidth) : {time_text(params.beta):>10} per 8-byte word ({gbs:.2f} GB/s)")
    print(
        f"gamma (1/flop rate) : {time_text(params.gamma):>10} per flop "
        f"({gflops:.1f} GFLOP/s numpy GEMM n={raw['gemm_n']})"
    )
    if not args.dry_run:
        print(f"stored in {save_params(params, args.output, raw)}")
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """What a checkpoint location holds; ``--verify`` exits 1 when an entry is damaged."""
    import datetime
    import json

    try:
        from distal.runtime import checkpoint_tools as ct
    except ModuleNotFoundError as e:
        raise dl.NotSupportedYet(f"checkpoints need {e.name!r}: pip install 'distal[dask]'") from e
    for run in args.remove:
        print(f"removed {ct.remove(args.location, run)}")

    def targets(run: str) -> list[str]:  # full run names: what is printed is what was acted on
        if run == "all":
            return [r.run for r in ct.runs(args.location)]
        return [ct.find(args.location, run).run]

    if args.clean:
        for run in targets(args.clean):
            gone = ct.remove_temporaries(args.location, run, args.older_than)
            print(
                f"{run}  removed {plural(len(gone), 'half-written entry', 'half-written entries')}"
            )
    if args.verify:
        damaged = 0
        for run in targets(args.verify):
            res = ct.verify(args.location, run)
            bad = res[ct.CORRUPT]
            note = f": {', '.join(bad)}" if bad else ""
            print(
                f"{run}  {plural(len(res[ct.OK]), 'entry', 'entries')} ok, {len(bad)} corrupt{note}"
            )
            damaged += len(bad)
        return 1 if damaged else 0
    found = ct.runs(args.location)
    if args.json:
        print(json.dumps([ct.as_dict(r) for r in found], indent=1))
        return 0
    if not found:
        print(f"no runs in {args.location}")
        return 0
    w = max(16, *(len(r.run) for r in found))  # names in full: two runs never look alike
    print(
        f"{'run':<{w}}  {'complete':>8}  {'entries':>7}  {'blocks':>6}  {'size':>10}  "
        f"{'modified':<16}  statement"
    )
    for r in found:
        when = (
            datetime.datetime.fromtimestamp(r.modified).strftime("%Y-%m-%d %H:%M")
            if r.modified
            else "?"
        )
        print(
            f"{r.run:<{w}}  {'yes' if r.complete else 'no':>8}  {r.entries:>7}  "
            f"{r.blocks:>6}  {ct.size_text(r.nbytes):>10}  {when:<16}  {r.statement or '?'}"
        )
        if r.temporaries:
            print(f"{'':<{w}}  {r.temporaries} half-written entries (see --clean)")
    return 0
