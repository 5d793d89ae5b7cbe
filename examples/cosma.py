"""COSMA-style matrix multiply: the grid chosen for m, n, k and P; one copy of each matrix.

dl.algorithms.cosma_grid searches every 3-D grid gx*gy*gz == P. Joint partitions spread
each matrix over the whole grid (A "ij -> iji", B "ik -> ikk", C "kj -> kjk"); k is first
divided into serial chunks, then each chunk over z. On a cube every processor receives
3*n**2/P**(2/3) - 3*n**2/P words: the tight lower bound (Al Daas et al., SPAA 2022).
"""

import sys

import numpy as np
from _report import report

import distal as dl

m = n = k = 8
P = 8
(gx, gy, gz), steps = dl.algorithms.cosma_grid(m, n, k, P)  # (2, 2, 2), 2 steps
M = dl.Machine(gx, gy, gz)

# --- distribution: joint partitions, one copy over the whole grid -------------------------
A = dl.Tensor("A", (m, n), dist="ij -> iji", machine=M)
B = dl.Tensor("B", (m, k), dist="ik -> ikk", machine=M)
C = dl.Tensor("C", (k, n), dist="kj -> kjk", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, kk = dl.index_vars("i j k")
A[i, j] = B[i, kk] * C[kk, j]

# --- schedule: serial chunks of k, each distributed over z --------------------------------
io, jo, ko, ii, ji, ki, ks, kr = dl.index_vars("io jo ko ii ji ki ks kr")
s = (
    dl.schedule(A)
    .divide(kk, ks, kr, steps)
    .distribute([i, j, kr], [io, jo, ko], [ii, ji, ki], M)
    .reorder([ks, ii, ji, ki])
    .communicate(A, ko)
    .communicate([B, C], ks)
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, c = rng.standard_normal((m, k)), rng.standard_normal((k, n))
bound = 3 * (m * n * k / P) ** (2 / 3) - (m * n + m * k + n * k) / P
print(f"grid {(gx, gy, gz)}, {steps} serial steps; lower bound {bound:g} words per processor")
closed = [(m * k * (gy - 1) + n * k * (gx - 1) + m * n * (gz - 1)) // P] * P
sys.exit(report(kernel, {"B": b, "C": c}, b @ c, closed))
