"""Network and machine models for the simulator: alpha-beta links, NICs and compute rates.

A :class:`Network` describes one node type and the fabric between nodes. Every
processor of a plan is one node with one network interface: an *injection* port
(sends) and an *ejection* port (receives), each of ``bandwidth`` bytes/s. A
message of ``b`` bytes occupies both its sender's injection port and its
receiver's ejection port for ``b / bandwidth`` seconds (first come, first served
per port) and arrives ``latency`` seconds after it leaves: contention is modelled
at the endpoints only, as on a full-bisection fat tree.

Presets (:data:`PRESETS`):

* ``"local"``: this computer, calibrated in a fraction of a second (memcpy
  bandwidth, single-threaded GEMM rate; the leaf kernels of a plan are timed on it
  too, with one BLAS thread). The processors are ``mpiexec -n P`` ranks of one BLAS
  thread each sharing its ``cores``: while ``b`` of them are busy each runs at
  ``min(1, cores / b)`` of a core (4 ranks on 2 cores: half a core each while all
  compute, a whole one for a rank computing while the others wait).
* ``"fat-tree-edr"`` / ``"fat-tree-hdr"``: a CPU cluster on InfiniBand EDR
  (12.5 GB/s, 1 us) / HDR (25 GB/s, 0.6 us), 1.5 TFLOP/s per node at 70% of peak
  for BLAS-3 (a dual-socket node of the Lassen class reaches about 0.7 TFLOP/s in
  COSMA; that figure is ``Network.lassen()``).
* ``"volunteer-wan"``: a wide-area pool of volunteer machines: 50 ms latency,
  10-100 Mbit/s links and 20-200 GFLOP/s machines, both log-uniform per machine
  (seeded, so runs repeat).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from distal.costmodel.seconds import config_path, load_params
from distal.errors import DistalUserError
from distal.kernels.cores import affinity


class NetworkError(DistalUserError):
    """An unknown network preset or a non-positive rate in a :class:`Network`."""


@dataclass(frozen=True)
class Network:
    """One node type and the fabric between nodes (rates in bytes/s, flop/s and seconds).

    Attributes:
        name: label shown in reports.
        bandwidth: bytes/s of each node's injection and of its ejection port (the fastest
            node's when ``bandwidth_spread > 1``).
        latency: seconds from a message leaving its sender to its arrival.
        flops: flop/s of one node on the leaf kernels (the fastest node's when
            ``speed_spread > 1``).
        memory_bandwidth: bytes/s of local copies and reductions on one node.
        intra_bandwidth, intra_latency: messages between processors of the same node on a
            hierarchical machine (``plan.level_of(src, dst) > 0``); default: memory speed.
        bandwidth_spread, speed_spread: ratio fastest / slowest node; per-node values are
            log-uniform in between, drawn with ``seed``.
        op_overhead: seconds of runtime bookkeeping per instruction (Python, MPI calls).
        cores: the nodes are processes sharing one host with this many cores (``"local"``);
            ``flops`` and ``memory_bandwidth`` are then one core's, and a busy processor runs
            at ``min(1, cores / busy processors)`` of them (processor sharing: the runtime's
            waits sleep, so waiting processors leave their core to the others). None: every
            node has its own CPU.
        core_efficiency: with ``cores``, the speed of each core while all of them are busy
            relative to one core alone (shared caches and memory bandwidth, time slicing
            between more processes than cores); interpolated linearly in the number of busy
            cores below ``cores``. ``local`` measures it with ``2 * cores`` independent
            one-thread GEMM processes at once (4 ranks on 2 cores here): their total rate /
            (cores x one process alone).
        measure_kernels: time the plan's leaf kernels on this computer instead of using
            ``flops`` (only meaningful for this computer), with ``kernel_threads`` BLAS
            threads (1: an MPI rank run with ``OPENBLAS_NUM_THREADS=1``).
        kernel_threads: BLAS threads of one processor when its kernels are measured.
        eager_bytes: messages up to this size leave when the sender posts them; larger ones
            wait for the receiver to post its receive too (MPI's rendezvous protocol).
        seed: random seed of the per-node spreads.
    """

    name: str
    bandwidth: float
    latency: float
    flops: float
    memory_bandwidth: float
    intra_bandwidth: float | None = None
    intra_latency: float | None = None
    bandwidth_spread: float = 1.0
    speed_spread: float = 1.0
    op_overhead: float = 5e-6
    cores: int | None = None
    core_efficiency: float = 1.0
    measure_kernels: bool = False
    kernel_threads: int = 1
    eager_bytes: int = 65536
    seed: int = 0

    def __post_init__(self) -> None:
        for f in ("bandwidth", "flops", "memory_bandwidth", "bandwidth_spread", "speed_spread"):
            v = getattr(self, f)
            if not (isinstance(v, int | float) and v > 0 and math.isfinite(v)):
                raise NetworkError(f"Network {self.name!r}: {f} must be positive, not {v!r}")
        for f in ("latency", "op_overhead"):
            v = getattr(self, f)
            if not (isinstance(v, int | float) and v >= 0 and math.isfinite(v)):
                raise NetworkError(f"Network {self.name!r}: {f} must be >= 0, not {v!r}")
        if self.cores is not None and not (isinstance(self.cores, int) and self.cores >= 1):
            raise NetworkError(f"Network {self.name!r}: cores must be None or >= 1")
        if not (isinstance(self.core_efficiency, int | float) and 0 < self.core_efficiency <= 1):
            raise NetworkError(f"Network {self.name!r}: core_efficiency must be in (0, 1]")
        if not (isinstance(self.kernel_threads, int) and self.kernel_threads >= 1):
            raise NetworkError(f"Network {self.name!r}: kernel_threads must be >= 1")
        for f in ("bandwidth_spread", "speed_spread"):
            if getattr(self, f) < 1:
                raise NetworkError(f"Network {self.name!r}: {f} is max/min and must be >= 1")

    def with_(self, **changes: object) -> Network:
        """A copy with some fields changed, e.g. ``net.with_(bandwidth=2 * net.bandwidth)``."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def node_rates(self, nprocs: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-node ``(bandwidth, flops)`` arrays: log-uniform spreads below the maxima."""
        rng = np.random.default_rng(self.seed)
        u_bw, u_fl = rng.random(nprocs), rng.random(nprocs)
        bw = self.bandwidth / self.bandwidth_spread**u_bw
        fl = self.flops / self.speed_spread**u_fl
        if self.bandwidth_spread == 1:
            bw = np.full(nprocs, float(self.bandwidth))
        if self.speed_spread == 1:
            fl = np.full(nprocs, float(self.flops))
        return bw, fl

    @staticmethod
    def lassen() -> Network:
        """A Lassen CPU node (2 x Power9) on EDR InfiniBand, at COSMA's 670 GFLOP/s per node."""
        return Network("lassen-cpu", 12.5e9, 1.0e-6, 670e9, 120e9, op_overhead=5e-6)


CALIBRATION_VERSION = 4  # 4: one BLAS thread's GEMM rate and oversubscribed core_efficiency
CALIBRATION_FILE = Path(
    os.environ.get("DISTAL_SIM_CALIBRATION", Path.home() / ".cache" / "distal" / "sim-local.json")
)


def _measure_memcpy(nbytes: int = 32 << 20, repeat: int = 5) -> float:
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best  # read + write


def host_cores() -> int:
    """Cores this process may run on (its affinity mask; ``os.cpu_count()`` elsewhere)."""
    return affinity()


@contextmanager
def blas_threads(threads: int | None) -> Iterator[bool]:
    """Run the block with ``threads`` BLAS threads (None: leave them); yields whether the
    limit holds (threadpoolctl, an optional dependency, is what sets it)."""
    if threads is None:
        yield True
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield False
        return
    with threadpool_limits(limits=threads, user_api="blas"):
        yield True


def _measure_gemm(n: int = 1024, repeat: int = 3, threads: int | None = 1) -> float:
    """Best GEMM rate (flop/s) on ``threads`` BLAS threads (1: what one ``mpiexec`` rank
    gets alone; None: numpy's default, every core)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    with blas_threads(threads) as limited:
        a @ b
        best = math.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
    rate = 2 * n**3 / best
    return rate if limited else rate / host_cores()  # no limit: assume the threads scaled


_GEMM_LOOP = """
import sys, time
import numpy as np
n, start, span = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
a = np.random.default_rng(0).standard_normal((n, n)); b = a.T.copy()
a @ b
while time.time() < start:
    time.sleep(1e-3)
done, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < span:
    a @ b
    done += 1
print(done * 2 * n**3 / (time.perf_counter() - t0))
"""


def _measure_oversubscribed(procs: int, n: int = 1024, span: float = 1.0) -> float:
    """Total GEMM rate (flop/s) of ``procs`` independent one-thread processes running at once
    on this host: what ``mpiexec -n procs`` ranks get together, cache thrashing and time
    slicing included."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    start = time.time() + 1.5  # every process has imported numpy and warmed up by then
    cmd = [sys.executable, "-c", _GEMM_LOOP, str(n), str(start), str(span)]
    runs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    return sum(float(r.communicate()[0]) for r in runs)


def _from_cost_model() -> dict[str, float] | None:
    """What ``distal calibrate`` measured (``distal.costmodel.seconds``), when it has been
    run here.

    Its ``alpha`` / ``beta`` come from a ping-pong between two processes of this computer:
    exactly this preset's latency and link. Its ``gamma`` (a numpy GEMM with every BLAS
    thread) is not one core's rate, so it is not used here.
    """
    path = config_path()  # this preset describes this computer: read what it measured
    if not path.is_file():
        return None
    try:
        params = load_params(path)
    except Exception:
        return None
    if not str(getattr(params, "source", "")).startswith("calibrated"):
        return None
    if not (params.alpha >= 0 and params.beta > 0 and params.gamma > 0):
        return None
    return {
        "bandwidth": params.word_bytes / params.beta,
        "latency": params.alpha,
    }


@lru_cache(maxsize=1)
def calibrate_local(refresh: bool = False) -> dict[str, float]:
    """One core's GEMM rate (flop/s, one BLAS thread), memcpy bandwidth (bytes/s) and
    ``core_efficiency`` (see :class:`Network`).

    Read from ``CALIBRATION_FILE`` (younger than a day), else measured (about 3 s) and
    cached there. ``distal calibrate``'s figures, when present, add the link bandwidth and
    latency (see :func:`local_network`). Measure on a quiet machine: other jobs' load
    lowers both rates.
    """
    if not refresh:
        try:
            data = json.loads(CALIBRATION_FILE.read_text())
            fresh = time.time() - data["when"] < 86400 and data.get("cpus") == os.cpu_count()
            if fresh and data.get("version") == CALIBRATION_VERSION:
                return {k: data[k] for k in ("flops", "memory_bandwidth", "core_efficiency")}
        except (OSError, ValueError, KeyError, TypeError):
            pass
    one = _measure_gemm(repeat=5)
    cores = host_cores()
    every = _measure_oversubscribed(2 * cores)
    eff = min(1.0, every / (cores * one))
    cal = {"flops": one, "memory_bandwidth": _measure_memcpy(), "core_efficiency": eff}
    try:
        CALIBRATION_FILE.parent.mkdir(parents=True, exist_ok=True)
        stamp = {"when": time.time(), "cpus": os.cpu_count(), "version": CALIBRATION_VERSION}
        CALIBRATION_FILE.write_text(json.dumps({**cal, **stamp}))
    except OSError:
        pass
    return cal


def local_network() -> Network:
    """This computer as ``mpiexec`` ranks of one BLAS thread sharing its cores (calibrated)."""
    cal = calibrate_local()
    mem = cal["memory_bandwidth"]
    link = _from_cost_model() or {}
    return Network(
        "local",
        bandwidth=link.get("bandwidth", mem / 2),  # shared-memory MPI copies twice
        latency=link.get("latency", 5e-6),
        flops=cal["flops"],
        memory_bandwidth=mem,
        op_overhead=20e-6,
        cores=host_cores(),
        core_efficiency=cal["core_efficiency"],
        measure_kernels=True,
    )


def _fat_tree(name: str, bandwidth: float, latency: float) -> Network:
    return Network(name, bandwidth, latency, flops=0.7 * 1.5e12, memory_bandwidth=150e9)


PRESETS = {
    "local": local_network,
    "fat-tree-edr": lambda: _fat_tree("fat-tree-edr", 12.5e9, 1.0e-6),
    "fat-tree-hdr": lambda: _fat_tree("fat-tree-hdr", 25e9, 0.6e-6),
    "volunteer-wan": lambda: Network(
        "volunteer-wan",
        bandwidth=100e6 / 8,
        latency=50e-3,
        flops=200e9,
        memory_bandwidth=20e9,
        bandwidth_spread=10.0,
        speed_spread=10.0,
        op_overhead=20e-6,
        eager_bytes=0,
    ),
    "lassen": Network.lassen,
}


def get_network(network: str | Network) -> Network:
    """A :class:`Network` from a preset name or an instance (``NetworkError`` otherwise)."""
    if isinstance(network, Network):
        return network
    if isinstance(network, str) and network in PRESETS:
        return PRESETS[network]()
    raise NetworkError(f"unknown network {network!r}; presets are {sorted(PRESETS)}")
