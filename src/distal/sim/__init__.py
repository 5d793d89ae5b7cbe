"""A discrete-event simulator of plans: what a kernel would take on a machine you do not have.

``simulate(kernel, network)`` replays every processor's program (overlap exactly
as the runtimes do it) against a :class:`Network` model: alpha-beta messages
contending at the endpoints, compute at a measured or nominal rate, copies and
reductions at memory speed. It reads the plan only, never data, so a 256-node
plan of a 131072^2 GEMM simulates in about a second.

>>> import distal as dl
>>> from distal.algorithms import cannon
>>> kernel = cannon(64, machine=dl.Machine(2, 2)).compile()
>>> sim = kernel.simulate("fat-tree-edr")
>>> sim.seconds > 0
True
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Any

import numpy as np

from distal.errors import DistalUserError
from distal.plan.ir import Compute
from distal.sim.compute import KernelTimer, box_shape_of, flops_per_iteration
from distal.sim.engine import Engine, StepCosts, processor, step_costs, wire_of
from distal.sim.network import PRESETS, Network, NetworkError, calibrate_local, get_network
from distal.sim.result import SimResult
from distal.trace import COMPUTE, FETCH, FINAL, FLUSH, REDUCE, Event

__all__ = [
    "PRESETS",
    "Network",
    "NetworkError",
    "SimResult",
    "SimulationError",
    "calibrate_local",
    "get_network",
    "simulate",
]


class SimulationError(DistalUserError):
    """``simulate`` was given something it cannot simulate (names the culprit)."""


def _kernel_of(kernel: Any) -> Any:
    if hasattr(kernel, "plan") and hasattr(kernel, "kernels"):
        return kernel
    if hasattr(kernel, "compile") and hasattr(kernel, "schedule"):  # an Algorithm
        return kernel.compile()
    raise SimulationError(f"simulate() needs a compiled dl.Kernel, got {type(kernel).__name__}")


def _network(network: Any, options: dict[str, Any]) -> Network:
    net = get_network(network)
    fields = {f.name for f in dataclasses.fields(Network)}
    bad = sorted(set(options) - fields)
    if bad:
        raise SimulationError(
            f"simulate(): unknown option {bad[0]!r}; options are sequential, trace and the "
            f"Network fields {sorted(fields - {'name'})}"
        )
    return net.with_(**options) if options else net


def simulate(
    kernel: Any,
    network: str | Network = "local",
    *,
    sequential: bool = False,
    trace: bool = True,
    **options: Any,
) -> SimResult:
    """Simulate ``kernel``'s plan on ``network`` (a preset name or a :class:`Network`).

    Args:
        kernel: a compiled :class:`~distal.Kernel` (or an ``Algorithm``, compiled here).
        network: ``"local"``, ``"fat-tree-edr"``, ``"fat-tree-hdr"``, ``"volunteer-wan"``,
            ``"lassen"`` or a :class:`Network`.
        sequential: simulate the local runtime instead: one process runs every processor's
            instructions one after another with the whole machine, and every message is a
            memory copy.
        trace: keep the per-processor events (for ``SimResult.plot``); off saves memory.
        options: :class:`Network` fields to override, e.g. ``bandwidth=25e9``.
    """
    kernel = _kernel_of(kernel)
    net = _network(network, options)
    plan = kernel.plan
    P = plan.nprocs
    itemsize = _itemsizes(kernel)
    bw, fl = net.node_rates(P)
    fpi = flops_per_iteration(kernel)
    compute = _compute_model(kernel, net, fl, fpi, sequential)
    mem = net.memory_bandwidth
    costs = [
        step_costs(plan, p, compute(p), mem, itemsize, net.op_overhead, copy_remote=sequential)
        for p in range(P)
    ]
    iterations = sum(sum(c.iterations) for c in costs)
    events: list[Event] = []
    sent: list[float] = []
    arrived: list[float] = []
    if sequential:
        seconds, finish = _sequential(plan.nsteps, costs, events)
    else:
        eng = _parallel(kernel, net, bw, itemsize, costs, events)
        seconds, finish = eng.end, list(eng.done)
        sent, arrived = eng.sent_at, eng.arrival
    wire_bytes = float(sum(m.words * itemsize(m.tensor) for m in plan.messages))
    return SimResult(
        network=net,
        seconds=seconds,
        nprocs=P,
        flops=float(iterations * fpi),
        trace=events if trace else [],
        sequential=sequential,
        messages=len(plan.messages),
        bytes=wire_bytes,
        finish=finish,
        departures=sent,
        arrivals=arrived,
    )


def _itemsizes(kernel: Any) -> Any:
    sizes = {n: np.dtype(d).itemsize for n, d in kernel.dtypes.items()}
    return lambda name: sizes.get(name, 8)


def _compute_model(kernel: Any, net: Network, fl: np.ndarray, fpi: int, sequential: bool) -> Any:
    """``compute(p)(box) -> seconds`` for processor ``p`` running alone on its CPU (shared
    cores slow it down in the engine). The local runtime (``sequential``) is one process
    with numpy's default BLAS threads, i.e. every core."""
    threads = None if sequential else net.kernel_threads
    if net.measure_kernels:
        timer = KernelTimer(kernel, threads)
        shapes: dict[tuple[int, ...], int] = defaultdict(int)
        for prog in kernel.plan.programs:
            for op in prog:
                if isinstance(op, Compute):
                    for box in op.boxes:
                        shp = box_shape_of(box)
                        shapes[shp] += math.prod(shp)
        if shapes:
            timer.prepare(shapes)
        slow = float(net.flops) / fl  # heterogeneous speeds scale the measured rate
        return lambda p: lambda box: timer.seconds(box_shape_of(box)) * slow[p]
    if sequential and net.cores:
        fl = fl * net.cores
    return lambda p: lambda box: math.prod(hi - lo for lo, hi in box) * fpi / fl[p]


def _sequential(nsteps: int, costs: list[StepCosts], events: list[Event]) -> tuple[float, list]:
    """The local runtime's order: step by step, processor after processor, on one CPU."""
    clock = 0.0
    P = len(costs)
    finish = [0.0] * P

    def run(p: int, kind: str, s: int, dt: float, words: int = 0) -> None:
        nonlocal clock
        if dt > 0:
            events.append(Event(p, kind, s, clock, clock + dt, words))
            clock += dt
            finish[p] = clock

    if nsteps:
        for p in range(P):
            run(p, FETCH, 0, costs[p].copy[0])
    for s in range(nsteps):
        for p in range(P):
            if s + 1 < nsteps:
                run(p, FETCH, s + 1, costs[p].copy[s + 1])
            run(p, COMPUTE, s, costs[p].compute[s], costs[p].iterations[s])
            run(p, FLUSH, s, costs[p].flush[s])
        for p in range(P):
            run(p, REDUCE, s, costs[p].reduce[s])
    for p in range(P):
        run(p, FINAL, nsteps, costs[p].reduce[nsteps])
    return clock, finish


def _parallel(
    kernel: Any, net: Network, bw: np.ndarray, itemsize: Any, costs: list, events: list[Event]
) -> Engine:
    plan = kernel.plan
    wire = wire_of(plan, itemsize)
    intra_bw = net.intra_bandwidth or net.memory_bandwidth / 2
    intra_lat = net.intra_latency if net.intra_latency is not None else net.latency / 4
    eng = Engine(
        wire, bw, net.latency, intra_bw, intra_lat, net.eager_bytes, net.cores, net.core_efficiency
    )
    gens = [processor(eng, p, plan.nsteps, costs[p], events) for p in range(plan.nprocs)]
    eng.run(gens)
    if any(eng.pending):
        stuck = [p for p, n in enumerate(eng.pending) if n]
        raise SimulationError(f"simulation deadlocked: processors {stuck[:8]} wait forever")
    return eng
