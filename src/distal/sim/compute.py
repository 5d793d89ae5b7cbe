"""How long a processor computes: flop counts per iteration and measured leaf-kernel rates.

Work is counted in iterations of the statement (points of the ``Compute`` boxes).
A term that multiplies ``f`` factors costs ``f`` flops per iteration (``f - 1``
multiplies and one add: 2 for a matrix product, the usual ``2*m*n*k``); a
constant term costs one. On a model machine the time is
``flops / rate``. On this computer (``Network.measure_kernels``) the plan's own
leaf kernels are timed instead, once per distinct box shape, on random data of
that shape shrunk to at most ``MEASURE_ITERATIONS`` points: BLAS, opt_einsum and
Python overheads are then what the runtime will meet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from distal.costmodel.seconds import flops_per_iteration as statement_flops
from distal.kernels import blas
from distal.kernels.leaf import run_leaf
from distal.lang.affine import image
from distal.plan.ir import Plan
from distal.sim.network import blas_threads
from distal.typing import box_shape

MEASURE_ITERATIONS = 1 << 30
MAX_MEASURED_SHAPES = 6


def flops_per_iteration(kernel: Any) -> int:
    """Flops of one iteration: the cost model's count for the kernel's statement."""
    return statement_flops(kernel.schedule.statement)


def _shrink(shape: Sequence[int], limit: int) -> tuple[int, ...]:
    """Halve the largest extents until the box has at most ``limit`` points."""
    out = list(shape)
    while math.prod(out) > limit and max(out) > 1:
        d = out.index(max(out))
        out[d] = (out[d] + 1) // 2
    return tuple(out)


class KernelTimer:
    """Seconds per iteration of a kernel's leaf computation on this computer, by box shape.

    ``threads``: BLAS threads while timing (1 for an MPI rank run with
    ``OPENBLAS_NUM_THREADS=1``; None: numpy's default, as the local runtime has it).
    """

    def __init__(self, kernel: Any, threads: int | None = None) -> None:
        self.kernel = kernel
        self.threads = threads
        self.cache: dict[tuple[int, ...], float] = {}

    def _measure(self, shape: tuple[int, ...]) -> float:
        small = _shrink(shape, MEASURE_ITERATIONS)
        box = tuple((0, e) for e in small)
        plan: Plan = self.kernel.plan
        rng = np.random.default_rng(0)
        held: dict[str, list[tuple[int, int]]] = {}
        for tk in self.kernel.kernels:
            for n, (name, idx) in enumerate(tk.factors):
                # what the factor reads over the box (a shifted one: the box's image)
                scales = tk.scales[n] if tk.offsets else (1,) * len(idx)
                offsets = tk.offsets[n] if tk.offsets else (0,) * len(idx)
                reach = [
                    image(0, small[i], a, c) for i, a, c in zip(idx, scales, offsets, strict=True)
                ]
                old = held.get(name)
                if old is not None:
                    reach = [
                        (min(a, x), max(b, y)) for (a, b), (x, y) in zip(reach, old, strict=True)
                    ]
                held[name] = reach
        operands: dict[str, tuple[np.ndarray, Any]] = {}
        for name, reach in held.items():
            dtype = self.kernel.dtypes.get(name, np.float64)
            ext = tuple(b - a for a, b in reach)
            arr = rng.standard_normal(ext).astype(dtype, copy=False)
            operands[name] = (arr, tuple(reach))
        out_idx = self.kernel.kernels[0].out if self.kernel.kernels else ()
        out_ext = tuple(small[i] for i in out_idx)
        out = np.zeros(out_ext, self.kernel.dtypes.get(plan.output, np.float64))
        origin = tuple((0, e) for e in out_ext)
        with blas_threads(self.threads) as limited:
            run_leaf(self.kernel.kernels, box, operands, out, origin)  # warm-up: page faults
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                run_leaf(self.kernel.kernels, box, operands, out, origin)
                times.append(time.perf_counter() - t0)
        best = sorted(times)[1]  # the median: what a run meets on a shared machine
        if not limited:  # threadpoolctl missing: assume the default threads scaled perfectly
            best *= max(1, blas.threads() // (self.threads or 1))
        return best / max(math.prod(small), 1)

    def prepare(self, shapes: dict[tuple[int, ...], int]) -> None:
        """Measure the shapes carrying the most iterations (``shapes``: shape -> iterations)."""
        heavy = sorted(shapes, key=lambda s: -shapes[s])[:MAX_MEASURED_SHAPES]
        for s in heavy:
            if s not in self.cache:
                self.cache[s] = self._measure(s)

    def seconds(self, shape: tuple[int, ...]) -> float:
        """Seconds to run one box of this shape (the nearest measured rate if not measured)."""
        spi = self.cache.get(shape)
        if spi is None:
            n = math.prod(shape)
            near = min(self.cache, key=lambda s: abs(math.log((math.prod(s) + 1) / (n + 1))))
            spi = self.cache[near]
        return spi * math.prod(shape)


box_shape_of = box_shape  # the extents of an iteration box (the name distal.sim imports)
