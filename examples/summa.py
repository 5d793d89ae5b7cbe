"""SUMMA: A(i,j) = B(i,k) * C(k,j) on a 2 x 3 grid.

Each processor owns one tile of A, B and C. At each of the lcm(2, 3) = 6 steps it fetches
one k-chunk of its B row panel and of its C column panel. Closed form: processor (x, y)
receives m*k*(gy-1)/P + n*k*(gx-1)/P words (2*(g-1)*(n/g)**2 on a square g x g grid).
"""

import sys

import numpy as np
from _report import report

import distal as dl

m, n, k = 6, 9, 12
M = dl.Machine(2, 3)

# --- distribution: 2-D tiles of every matrix ---------------------------------------------
A = dl.Tensor("A", (m, n), dist="ij -> ij", machine=M)
B = dl.Tensor("B", (m, k), dist="ik -> ik", machine=M)
C = dl.Tensor("C", (k, n), dist="kj -> kj", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, kk = dl.index_vars("i j k")
A[i, j] = B[i, kk] * C[kk, j]

# --- schedule -----------------------------------------------------------------------------
io, jo, ii, ji, ko, ki = dl.index_vars("io jo ii ji ko ki")
s = (
    dl.schedule(A)
    .distribute([i, j], [io, jo], [ii, ji], M)
    .divide(kk, ko, ki, 6)  # lcm(gx, gy) chunks: each lies in one owner's block
    .reorder([ko, ii, ji])
    .communicate(A, jo)
    .communicate([B, C], ko)
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, c = rng.standard_normal((m, k)), rng.standard_normal((k, n))
closed = [(m * k * (3 - 1) + n * k * (2 - 1)) // 6] * 6
library = dl.algorithms.summa(m, n, k, machine=M)  # the same schedule, from the library
assert repr(library.schedule) == repr(s)
sys.exit(report(kernel, {"B": b, "C": c}, b @ c, closed))
