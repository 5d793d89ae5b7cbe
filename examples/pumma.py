"""PUMMA: Cannon with the rotation by the row coordinate only, on a 3 x 2 grid.

rotate(ko, [io], kos): grid row x starts at k-chunk x. On a non-square grid k is divided
into lcm(gx, gy) chunks, so each chunk lies in one B block (k cut by gy) and one C block
(k cut by gx). Closed form: m*k*(gy-1)/P + n*k*(gx-1)/P words per processor.
"""

import sys

import numpy as np
from _report import report

import distal as dl

m, n, k = 9, 6, 12
gx, gy = 3, 2
M = dl.Machine(gx, gy)

# --- distribution -------------------------------------------------------------------------
A = dl.Tensor("A", (m, n), dist="ij -> ij", machine=M)
B = dl.Tensor("B", (m, k), dist="ik -> ik", machine=M)
C = dl.Tensor("C", (k, n), dist="kj -> kj", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, kk = dl.index_vars("i j k")
A[i, j] = B[i, kk] * C[kk, j]

# --- schedule -----------------------------------------------------------------------------
io, jo, ii, ji, ko, ki, kos = dl.index_vars("io jo ii ji ko ki kos")
s = (
    dl.schedule(A)
    .distribute([i, j], [io, jo], [ii, ji], M)
    .divide(kk, ko, ki, 6)  # lcm(3, 2)
    .reorder([ko, ii, ji])
    .rotate(ko, [io], kos)
    .communicate(A, jo)
    .communicate([B, C], kos)
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, c = rng.standard_normal((m, k)), rng.standard_normal((k, n))
closed = [(m * k * (gy - 1) + n * k * (gx - 1)) // (gx * gy)] * (gx * gy)
assert repr(dl.algorithms.pumma(m, n, k, machine=M).schedule) == repr(s)
sys.exit(report(kernel, {"B": b, "C": c}, b @ c, closed))
