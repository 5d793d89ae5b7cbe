"""Tensor-times-vector A(i,j) = B(i,j,k) * c(k) with the vector replicated: no traffic."""

import sys

import numpy as np
from _report import report

import distal as dl

NI, NJ, NK = 6, 4, 5
M = dl.Machine(2, 2)

# --- distribution: A and B tiled alike over (i, j), c on every processor ------------------
A = dl.Tensor("A", (NI, NJ), dist="ij -> ij", machine=M)
B = dl.Tensor("B", (NI, NJ, NK), dist="ijk -> ij", machine=M)
c = dl.Tensor("c", (NK,), dist="k -> **", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, k = dl.index_vars("i j k")
A[i, j] = B[i, j, k] * c[k]

# --- schedule: owner computes --------------------------------------------------------------
io, jo, ii, ji = dl.index_vars("io jo ii ji")
s = dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M).communicate([A, B, c], jo)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, cv = rng.standard_normal((NI, NJ, NK)), rng.standard_normal(NK)
sys.exit(report(kernel, {"B": b, "c": cv}, np.einsum("ijk,k->ij", b, cv), [0] * M.size))
