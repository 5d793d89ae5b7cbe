"""A cost model over plans: ``alpha * messages + beta * words + gamma * flops`` per processor.

The model reads only a plan's exact ``Stats`` (and the statement, for flops per
iteration), so ranking schedules by it ranks their real plans. A processor's time
is ``alpha * max(messages received, sent) + beta * max(words received, sent) +
gamma * flops`` (full-duplex links: sending and receiving overlap; an owner that
serves many receivers pays for it); the kernel's time is the slowest processor's.
Peak memory is reported beside it: ``peak_words`` elements of the widest dtype.

Constants are an explicit :class:`MachineParams` or else the documented cluster defaults
(:data:`DEFAULT_PARAMS`, the ``hdr`` entry of :data:`CLUSTERS`): fixed numbers, so that a
compile or an auto schedule is the same on every computer. Calibrated constants written
by ``distal calibrate`` (``$DISTAL_CONFIG`` or ``~/.config/distal/machine.json``) are
read only when asked for: ``load_params(path)`` or ``load_params(config_path())``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distal.errors import DistalUserError
from distal.kernels.leaf import flops_per_point, term_specs

__all__ = [
    "CLUSTERS",
    "DEFAULT_PARAMS",
    "Cost",
    "CostModelError",
    "MachineParams",
    "calibrate",
    "config_path",
    "flops_per_iteration",
    "load_params",
    "plan_cost",
    "save_params",
    "stats_cost",
]


class CostModelError(DistalUserError):
    """A bad machine-parameter file or value (the message names it)."""


@dataclass(frozen=True)
class MachineParams:
    """Seconds per message (``alpha``), per word moved (``beta``), per flop (``gamma``) and
    per byte a leaf streams from memory (``mu``).

    A word is one tensor element; ``word_bytes`` converts bandwidth (8: float64). ``mu``
    prices leaves that do a flop or two per entry they read (a sparse matrix's stored
    entries: SpMV streams each value and column index once), which run at the memory's
    bandwidth, not the flop rate; a point of the iteration space costs the larger of its
    flops and its streamed bytes (a roofline).
    """

    alpha: float = 1.5e-6
    beta: float = 8 / 25e9
    gamma: float = 1 / 2e12
    word_bytes: int = 8
    source: str = "default: InfiniBand HDR cluster"
    mu: float = 1 / 300e9

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma", "mu"):
            x = getattr(self, name)
            if isinstance(x, bool) or not isinstance(x, int | float) or x < 0:
                raise CostModelError(f"MachineParams.{name} must be a number >= 0, got {x!r}")


#: Typical clusters, one processor = one node (MPI latency, link bandwidth, node DGEMM rate,
#: node memory bandwidth). EDR: 100 Gb/s links (12.5 GB/s), ~2 us MPI latency, ~1 TFLOP/s
#: and ~200 GB/s per node (2x20-core Skylake). HDR: 200 Gb/s (25 GB/s), ~1.5 us, ~2 TFLOP/s
#: and ~300 GB/s per node (2x64-core EPYC).
CLUSTERS: dict[str, MachineParams] = {
    "edr": MachineParams(
        2.0e-6, 8 / 12.5e9, 1 / 1e12, 8, "default: InfiniBand EDR cluster", 1 / 200e9
    ),
    "hdr": MachineParams(
        1.5e-6, 8 / 25e9, 1 / 2e12, 8, "default: InfiniBand HDR cluster", 1 / 300e9
    ),
}


#: What every cost function uses unless given other constants (never read from a file).
DEFAULT_PARAMS: MachineParams = CLUSTERS["hdr"]


def config_path() -> Path:
    """Where ``distal calibrate`` stores constants: ``$DISTAL_CONFIG`` or
    ``~/.config/distal/machine.json``. Nothing reads it unless passed to :func:`load_params`."""
    env = os.environ.get("DISTAL_CONFIG")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".config" / "distal" / "machine.json"


def load_params(path: str | os.PathLike | None = None) -> MachineParams:
    """Cost-model constants: :data:`DEFAULT_PARAMS` without ``path``, else the JSON file there.

    Without ``path`` no file and no environment variable is consulted, so results never
    depend on the computer they are computed on. With ``path`` (e.g. :func:`config_path`
    for what ``distal calibrate`` stored) the file must exist and hold ``alpha``,
    ``beta`` and ``gamma``; otherwise :class:`CostModelError` names it.
    """
    if path is None:
        return DEFAULT_PARAMS
    p = Path(path).expanduser()
    if not p.is_file():
        raise CostModelError(f"machine parameter file {str(p)!r} does not exist")
    try:
        data = json.loads(p.read_text())
        return MachineParams(
            float(data["alpha"]),
            float(data["beta"]),
            float(data["gamma"]),
            int(data.get("word_bytes", 8)),
            f"calibrated: {p}",
            float(data.get("mu", DEFAULT_PARAMS.mu)),
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CostModelError(f"machine parameter file {str(p)!r} is unreadable: {e}") from e


def save_params(
    params: MachineParams,
    path: str | os.PathLike | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write constants as JSON (creating the directory) and return the path."""
    p = Path(path) if path is not None else config_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    data = {k: v for k, v in asdict(params).items() if k != "source"}
    data.update(extra or {})
    p.write_text(json.dumps(data, indent=2) + "\n")
    return p


# -- the model ----------------------------------------------------------------------------


def flops_per_iteration(statement: Any) -> int:
    """Flops per point of the iteration space: a term of ``f`` factors costs ``f`` (``f - 1``
    multiplications and one addition into the sum; a constant term 1), and a dense term the
    leaf runs as a Khatri-Rao product and a GEMM 2 (:func:`distal.kernels.leaf.flops_per_point`).
    A sparse statement's leaf visits stored entries: its terms cost ``f``."""
    if any(not f.tensor.format.is_dense for t in statement.terms for f in t.factors):
        return sum(max(1, len(t.factors)) for t in statement.terms)
    return sum(flops_per_point(spec) for spec in term_specs(statement))


@dataclass(frozen=True)
class Cost:
    """Modelled time of a plan: the slowest processor, with its parts and peak memory."""

    seconds: float
    comm_seconds: float
    compute_seconds: float
    per_processor: tuple[float, ...]
    max_words: int
    max_messages: int
    peak_words: int
    peak_bytes: int


def stats_cost(
    stats: Any,
    flops_per_iter: int,
    params: MachineParams,
    itemsize: int = 8,
    bytes_per_iter: float = 0.0,
) -> Cost:
    """The model applied to a ``Stats`` (exact, from a plan or a run).

    ``bytes_per_iter``: what the leaf streams from memory per point of the iteration space
    (a sparse leaf's value and index per stored entry; 0 for dense leaves, whose blocked
    kernels reuse what they read), priced at ``params.mu`` against the flops at ``gamma``.

    Evaluated with arrays (the same float operations in the same order as per processor):
    ``compile`` costs every routing of a plan, and a Python loop over a million processors
    took 1.4 s per routing.
    """
    if stats.nprocs == 0:
        return Cost(0.0, 0.0, 0.0, (), 0, 0, 0, 0)
    msgs = np.maximum(stats.messages_received, stats.messages_sent).astype(np.float64)
    words = np.maximum(stats.words_received, stats.words_sent).astype(np.float64)
    comm = params.alpha * msgs + params.beta * words
    point = max(params.gamma * flops_per_iter, params.mu * bytes_per_iter)
    comp = point * np.asarray(stats.iterations, np.float64)
    per = comm + comp
    worst = int(np.argmax(per))  # the first slowest processor
    peak = int(np.max(stats.peak_words))
    return Cost(
        seconds=float(per[worst]),
        comm_seconds=float(comm[worst]),
        compute_seconds=float(comp[worst]),
        per_processor=tuple(per.tolist()),
        max_words=int(np.max(stats.words_received)),
        max_messages=int(np.max(stats.messages_received)),
        peak_words=peak,
        peak_bytes=peak * itemsize,
    )


def plan_cost(kernel: Any, params: MachineParams | None = None) -> Cost:
    """Modelled time of a compiled kernel (``dl.compile(schedule)``) from its exact stats."""
    params = params if params is not None else load_params()
    itemsize = max((t.dtype.itemsize for t in kernel.schedule.tensors().values()), default=8)
    return stats_cost(
        kernel.stats(), flops_per_iteration(kernel.schedule.statement), params, itemsize
    )


# -- calibration --------------------------------------------------------------------------


def _echo(conn: Any) -> None:
    """Child of the ping-pong: send every message straight back until told to stop."""
    while True:
        msg = conn.recv_bytes()
        if not msg:
            break
        conn.send_bytes(msg)
    conn.close()


def _pingpong(nbytes: int, repeat: int, conn: Any) -> float:
    """Best one-way time of ``nbytes`` over the pipe (half of a round trip)."""
    payload = b"x" * nbytes
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        conn.send_bytes(payload)
        conn.recv_bytes()
        best = min(best, (time.perf_counter() - t0) / 2)
    return best


def calibrate(quick: bool = False) -> tuple[MachineParams, dict[str, Any]]:
    """Measure this computer: ping-pong between two processes and numpy GEMM.

    * ``alpha``: one-way time of a 1-byte message through a multiprocessing pipe.
    * ``beta``: one-way time per 8-byte word of a large message minus ``alpha``.
    * ``gamma``: seconds per flop of ``a @ b`` (float64, ``2*n**3`` flops, best of 3).

    Returns the constants and the raw measurements (saved beside them).
    """
    import multiprocessing as mp

    import numpy as np

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_echo, args=(there,), daemon=True)
    proc.start()
    try:
        _pingpong(1, 20, here)  # warm up
        lat = _pingpong(1, 200 if not quick else 50, here)
        big = (1 << 22) if quick else (1 << 25)
        bw_time = _pingpong(big, 3 if quick else 5, here)
    finally:
        here.send_bytes(b"")
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()
    words = big / 8
    beta = max(bw_time - lat, 1e-12) / words
    n = 1024 if quick else 2048
    a = np.random.default_rng(0).standard_normal((n, n))
    b = np.random.default_rng(1).standard_normal((n, n))
    a @ b
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    gamma = best / (2.0 * n**3)
    stream = np.ones((1 << 22) if quick else (1 << 25))  # read once per sum, past the caches
    read = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        stream.sum()
        read = min(read, time.perf_counter() - t0)
    mu = read / stream.nbytes
    raw = {
        "latency_s": lat,
        "bandwidth_bytes_per_s": big / bw_time,
        "message_bytes": big,
        "gemm_n": n,
        "gemm_gflops": 2.0 * n**3 / best / 1e9,
        "read_bytes_per_s": stream.nbytes / read,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "method": "multiprocessing pipe ping-pong; numpy float64 GEMM; numpy sum of an array",
    }
    return MachineParams(lat, beta, gamma, 8, "calibrated: this computer", mu), raw
