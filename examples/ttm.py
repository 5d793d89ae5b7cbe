"""Tensor-times-matrix (TTMC) A(i,j,l) = B(i,j,k) * C(k,l), C in tiles.

A and B are tiled alike over (i, j); C is cut in 2 x 2 tiles, so every processor fetches
the rest of C once: K*L*(1 - 1/P) words. With C replicated ("kl -> **", DISTAL's TTMC)
nothing moves: dl.algorithms.ttm(..., factor="replicated").
"""

import sys

import numpy as np
from _report import report

import distal as dl

NI, NJ, NK, NL = 4, 6, 4, 6
M = dl.Machine(2, 2)

# --- distribution -------------------------------------------------------------------------
A = dl.Tensor("A", (NI, NJ, NL), dist="ijl -> ij", machine=M)
B = dl.Tensor("B", (NI, NJ, NK), dist="ijk -> ij", machine=M)
C = dl.Tensor("C", (NK, NL), dist="kl -> kl", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, k, lv = dl.index_vars("i j k l")
A[i, j, lv] = B[i, j, k] * C[k, lv]

# --- schedule -----------------------------------------------------------------------------
io, jo, ii, ji = dl.index_vars("io jo ii ji")
s = dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M).communicate([A, B, C], jo)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, cm = rng.standard_normal((NI, NJ, NK)), rng.standard_normal((NK, NL))
closed = [NK * NL * (M.size - 1) // M.size] * M.size
sys.exit(report(kernel, {"B": b, "C": cm}, np.einsum("ijk,kl->ijl", b, cm), closed))
