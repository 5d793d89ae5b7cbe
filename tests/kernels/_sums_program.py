"""The float32 reductions of ``test_sums.py``: 10^7 times 0.1, summed by every path a
program takes (a DArray's sum, its inner product with ones, a kernel's leaf sum and inner
product). Imported by the tests (local and Dask sessions) and run on every MPI rank
(``python _sums_program.py``), which prints one JSON line."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import distal as dl

N = 10**7


def values() -> np.ndarray:
    return np.full(N, 0.1, dtype=np.float32)


def kernels(machine: dl.Machine) -> tuple[dl.Kernel, dl.Kernel]:
    """``s = sum_i X[i]`` and ``d = sum_i X[i] Y[i]``, X and Y in blocks, owner-computes."""
    (i,) = dl.index_vars("i")
    io, ii = dl.index_vars("io ii")
    f32 = np.float32
    X = dl.Tensor("X", (N,), dist="x -> x", machine=machine, dtype=f32)
    Y = dl.Tensor("Y", (N,), dist="x -> x", machine=machine, dtype=f32)
    s = dl.Tensor("s", (), dist="-> *", machine=machine, dtype=f32)
    d = dl.Tensor("d", (), dist="-> *", machine=machine, dtype=f32)
    s[()] = X[i]
    d[()] = X[i] * Y[i]
    out = []
    for t in (s, d):
        out.append(dl.compile(dl.schedule(t).distribute([i], [io], [ii], machine)))
    return out[0], out[1]


def sums(sess: dl.Session, **run: Any) -> dict[str, float]:
    """Every path's value of the sum, as Python floats of the float32 results."""
    x = values()
    d = sess.asarray(x)
    ones = sess.asarray(np.ones(N, dtype=np.float32))
    got = {"sum": float(d.sum()), "dot": float(d @ ones), "scaled": float((d * 1.0).sum())}
    del d, ones
    ks, kd = kernels(sess.machine)
    got["kernel_sum"] = float(ks.run({"X": x}, **run).value)
    got["kernel_dot"] = float(kd.run({"X": x, "Y": np.ones(N, np.float32)}, **run).value)
    return got


if __name__ == "__main__":
    sess = dl.Session("mpi")
    out = sums(sess, runtime="mpi")
    print(json.dumps({"rank": sess.rank, **out}), flush=True)
    sys.exit(0)
