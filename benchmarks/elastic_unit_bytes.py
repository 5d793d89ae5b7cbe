"""What the elastic driver ships with each unit, against P: the thin-driver check.

    python benchmarks/elastic_unit_bytes.py          # the figures in docs/elastic.md

For a SUMMA GEMM (n = 2048, a sqrt(P) x sqrt(P) grid) and an SpMV (``dl.algorithms.spmv``,
row split, a uniform random 100,000 x 100,000 CSR matrix of 1,000,000 stored entries) at
P = 16, 64 and 256, every unit's task description is pickled as Dask pickles it (the
unit's ``task()``, the run's ``Ctx`` with the leaf kernels, and the handles of its input
blocks: their boxes or shapes, not their data, which travel in their own tasks once per
run). Printed: the bytes of the largest and the median unit, and of the run's ``Ctx``, next
to the unit's own work (iterations its leaves visit) and the bytes of its input data. A thin
driver's unit grows with its own work, not with P or nnz: the bytes per unit should fall
as P grows, about as the work per unit does.
"""

from __future__ import annotations

import os
import pickle
import statistics

import numpy as np

import distal as dl
from distal.plan.region import shape
from distal.runtime.elastic.tasks import Ctx, planned_iterations
from distal.runtime.elastic.units import Span, block_region, decompose
from distal.sparse.generate import uniform


def _gemm(P: int, n: int = 2048):
    q = round(P**0.5)
    return dl.algorithms.summa(n, machine=dl.Machine(q, q)).compile()


def _spmv(P: int, B):
    kernel = dl.algorithms.spmv(B.shape, dl.Machine(P), split="rows").compile()
    return kernel.bind({"B": B})


def unit_bytes(kernel) -> dict[str, float]:
    plan = kernel.plan
    units = decompose(plan, "flush")
    ctx = Ctx(topic="t", kernels=kernel.kernels, out_dtype=np.dtype(np.float64), store=None,
              worker=os.getpid)  # fmt: skip
    ctx_bytes = len(pickle.dumps(ctx))
    sizes, work, data = [], [], []
    for u in units:
        holders = []
        words = 0
        for t, idx in u.needs:
            region = block_region(plan, t, idx)
            holders.append((t, region if isinstance(region, tuple) else Span(shape(region))))
            words += int(np.prod(shape(region)))
        sizes.append(len(pickle.dumps((u.task(), holders))))
        work.append(planned_iterations(u))
        data.append(8 * words)
    i = int(np.argmax(sizes))
    return {
        "units": len(units),
        "max": max(sizes),
        "median": statistics.median(sizes),
        "ctx": ctx_bytes,
        "work of the largest": work[i],
        "data of the largest": data[i],
    }


def main() -> None:
    print(f"load average: {os.getloadavg()[0]:.2f}")
    B = uniform(100_000, 100_000, 1_000_000, seed=0)
    print(
        "| kernel | P | units | task bytes, largest unit | median | Ctx | its work "
        "(iterations) | its input data bytes |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, make in (("GEMM 2048", _gemm), ("SpMV 1e5, nnz 1e6", lambda P: _spmv(P, B))):
        for P in (16, 64, 256):
            r = unit_bytes(make(P))
            print(
                f"| {name} | {P} | {r['units']} | {r['max']:,} | {r['median']:,.0f} | "
                f"{r['ctx']:,} | {r['work of the largest']:,} | {r['data of the largest']:,} |"
            )


if __name__ == "__main__":
    main()
