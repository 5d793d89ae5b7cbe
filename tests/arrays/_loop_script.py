"""The checkpointed loop of ``tests/session/_loop_script.py`` written on arrays, run as a
subprocess (or on every rank under ``mpiexec``).

``python _loop_script.py RUNTIME LOCATION N OUT [SLEEP]``: binds ``A``, ``B`` and ``X``, then
for ``it`` in ``sess.iterations(N, keep=["X", "R"], name="power")`` prints ``{"start": it}``
(rank 0), sleeps SLEEP seconds and computes ``X = 0.05 * (A @ X).T + B`` and
``R = (X * X).sum()``. At the end rank 0 prints ``{"resumed_from", "ran"}`` and saves ``X``
and ``R`` to OUT.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import distal as dl


def main() -> None:
    runtime, location, n_iter, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    pause = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    n = 12
    sess = dl.Session(runtime, checkpoint=location)
    rng = np.random.default_rng(7)
    sess["A"], sess["B"], sess["X"] = rng.random((n, n)), rng.random((n, n)), np.eye(n)
    ran = []
    for it in sess.iterations(n_iter, keep=["X", "R"], name="power"):
        if sess.rank == 0:
            print(json.dumps({"start": it}), flush=True)
        time.sleep(pause)
        x = 0.05 * (sess["A"] @ sess["X"]).T + sess["B"]
        sess["X"], sess["R"] = x, (x * x).sum()
        ran.append(it)
    x, r = sess.get("X"), sess.get("R")
    if sess.rank == 0:
        np.savez(out, X=x, R=r)
        print(json.dumps({"resumed_from": sess.resumed_from, "ran": ran}))


if __name__ == "__main__":
    main()
