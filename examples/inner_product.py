"""Inner product a = B(i,j,k) * C(i,j,k) into a scalar on processor 0.

B and C are cut alike, every processor reduces its blocks, and processor 0 receives one
partial word from each of the P - 1 others.
"""

import sys

import numpy as np
from _report import report

import distal as dl

NI, NJ, NK = 4, 6, 5
M = dl.Machine(2, 3)

# --- distribution -------------------------------------------------------------------------
a = dl.Tensor("a", (), dist="-> 00", machine=M)
B = dl.Tensor("B", (NI, NJ, NK), dist="ijk -> ij", machine=M)
C = dl.Tensor("C", (NI, NJ, NK), dist="ijk -> ij", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, k = dl.index_vars("i j k")
a[()] = B[i, j, k] * C[i, j, k]

# --- schedule -----------------------------------------------------------------------------
io, jo, ii, ji = dl.index_vars("io jo ii ji")
s = dl.schedule(a).distribute([i, j], [io, jo], [ii, ji], M).communicate([a, B, C], jo)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, c = rng.standard_normal((NI, NJ, NK)), rng.standard_normal((NI, NJ, NK))
closed = [M.size - 1] + [0] * (M.size - 1)
sys.exit(report(kernel, {"B": b, "C": c}, np.asarray(np.sum(b * c)), closed))
