"""A driver process for the kill-the-driver test: one GEMM on its own in-process pool.

Usage: python elastic_driver.py CHECKPOINT TRACE DELAY
Prints ``tasks <executed> <reused>`` and ``exact <True|False>`` when it finishes.
"""

from __future__ import annotations

import sys

import numpy as np
from elastic_helpers import gemm, gemm_inputs

if __name__ == "__main__":
    checkpoint, trace, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    k, x = gemm(), gemm_inputs()
    res = k.run(
        x,
        runtime="dask",
        checkpoint=checkpoint,
        n_workers=2,
        processes=False,
        progress=False,
        _delay=delay,
        _trace=trace,
    )
    print("tasks", res.tasks_executed, res.tasks_reused, flush=True)
    print("exact", np.array_equal(res.value, x["B"] @ x["C"]), flush=True)
