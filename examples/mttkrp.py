"""MTTKRP A(i,l) = B(i,j,k) * C(j,l) * D(k,l) on a 2 x 2 x 2 grid (Ballard et al.).

B is cut in 3-D blocks; the factor matrices live on the grid's edges (A on the i edge,
C on the j edge, D on the k edge). Processor (x, y, z) fetches C[y] unless x == z == 0 and
D[z] unless x == y == 0; the partial rows of A are summed onto its edge, where (x, 0, 0)
receives (gy*gz - 1) partial blocks.
"""

import sys

import numpy as np
from _report import report

import distal as dl

NI = NJ = NK = 4
NL, g = 3, 2
M = dl.Machine(g, g, g)

# --- distribution: B in 3-D blocks, factor matrices on edges ------------------------------
A = dl.Tensor("A", (NI, NL), dist="il -> i00", machine=M)
B = dl.Tensor("B", (NI, NJ, NK), dist="ijk -> ijk", machine=M)
C = dl.Tensor("C", (NJ, NL), dist="jl -> 0j0", machine=M)
D = dl.Tensor("D", (NK, NL), dist="kl -> 00k", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, k, lv = dl.index_vars("i j k l")
A[i, lv] = B[i, j, k] * C[j, lv] * D[k, lv]

# --- schedule -----------------------------------------------------------------------------
io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
s = (
    dl.schedule(A)
    .distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)
    .communicate([A, B, C, D], ko)
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, cm, dm = (rng.standard_normal(s) for s in ((NI, NJ, NK), (NJ, NL), (NK, NL)))
blk = (NI // g) * NL
closed = [
    ((x, z) != (0, 0)) * blk + ((x, y) != (0, 0)) * blk + (y == z == 0) * (g * g - 1) * blk
    for x, y, z in M.coords()
]
expected = np.einsum("ijk,jl,kl->il", b, cm, dm)
sys.exit(report(kernel, {"B": b, "C": cm, "D": dm}, expected, closed))
