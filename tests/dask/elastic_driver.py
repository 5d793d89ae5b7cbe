"""A driver process for the kill-the-driver test: one GEMM on its own in-process pool.

Usage: python elastic_driver.py CHECKPOINT TRACE DELAY [KEY]
Prints ``tasks <executed> <reused>``, ``exact <True|False>`` and ``unauthenticated
<names>`` when it finishes; ``KEY`` (text) is given as ``checkpoint_key=`` (its bytes).
"""

from __future__ import annotations

import sys

import numpy as np
from elastic_helpers import gemm, gemm_inputs

if __name__ == "__main__":
    checkpoint, trace, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    key = {"checkpoint_key": sys.argv[4].encode()} if len(sys.argv) > 4 else {}
    k, x = gemm(), gemm_inputs()
    res = k.run(
        x,
        runtime="dask",
        checkpoint=checkpoint,
        n_workers=2,
        processes=False,
        progress=False,
        faults={"delay": delay, "trace": trace},
        **key,
    )
    print("tasks", res.tasks_executed, res.tasks_reused, flush=True)
    print("exact", np.array_equal(res.value, x["B"] @ x["C"]), flush=True)
    print("unauthenticated", *res.extra["summary"].unauthenticated, flush=True)
