"""``dl.einsum`` with no machine given, interleaved with numpy's best formulation in one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/einsum_interleaved.py
        [--quick] [--rounds 7] [--kernels ttv,inner]

How most users call distal: ``dl.einsum(subscripts, *arrays)`` between their own numpy calls.
Each round times numpy's fastest formulation of a kernel of the peers suite
(``benchmarks/problems.py``: GEMM at n = 4096, the 3-tensor kernels at 512^3, the 4-D
contraction) and then ``dl.einsum`` on the same arrays, so distal always runs right after a
numpy BLAS call, as it does in a user's program. Prints the best and median of ``--rounds``
for each and the ratio numpy / distal of the medians (above 1: distal faster), every result
checked against numpy's.

``DISTAL_OPENBLAS_THREAD_TIMEOUT=0`` leaves OpenBLAS's idle threads polling as long as
OpenBLAS makes them (about 0.1 s after each call), for the comparison with what distal sets
at import (``distal.kernels.blas.spin()`` says which; the first line prints it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from problems import numpy_candidates, problems  # noqa: E402

import distal as dl  # noqa: E402
from distal.kernels import blas  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the peers suite's quick sizes")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--kernels", default="", help="comma-separated (default: all)")
    args = ap.parse_args(argv)
    chosen = [k for k in args.kernels.split(",") if k]
    print(f"OpenBLAS: {blas.spin()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'kernel':11s} {'numpy form':17s} {'numpy best/median':>20s} "
          f"{'dl.einsum best/median':>24s} {'numpy/distal':>12s}")  # fmt: skip
    for p in problems(args.quick):
        if chosen and p.name not in chosen:
            continue
        arrays = list(p.arrays().values())
        forms = numpy_candidates(p)
        # numpy's fastest formulation, chosen on one call each after a warm-up
        best_form, best_t = "", float("inf")
        for form, fn in forms.items():
            fn(*arrays)
            t = time.perf_counter()
            want = fn(*arrays)
            t = time.perf_counter() - t
            if t < best_t:
                best_form, best_t = form, t
        numpy_fn = forms[best_form]
        want = numpy_fn(*arrays)
        got = dl.einsum(p.subscripts, *arrays)  # compiles once: later calls reuse it
        np.testing.assert_allclose(got, want, rtol=1e-6 if p.dtype == np.float32 else 1e-9)
        del got
        tn, td = [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            numpy_fn(*arrays)
            tn.append(time.perf_counter() - t)
            t = time.perf_counter()
            dl.einsum(p.subscripts, *arrays)
            td.append(time.perf_counter() - t)
        mn, md = statistics.median(tn), statistics.median(td)
        line = f"{p.name:11s} {best_form:17s} {min(tn) * 1e3:9.1f} / {mn * 1e3:7.1f} ms "
        line += f"{min(td) * 1e3:11.1f} / {md * 1e3:7.1f} ms {mn / md:11.2f}x"
        print(line, flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
