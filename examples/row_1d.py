"""1-D row algorithm: A, B in row blocks, C in row blocks, on a line of 3 processors.

Each processor owns the B rows of its A rows and fetches the C rows it lacks, one chunk per
step. Closed form: n*k*(1 - 1/P) words per processor, the tight lower bound when m is much
larger than n and k.
"""

import sys

import numpy as np
from _report import report

import distal as dl

m, n, k, P = 12, 3, 3, 3
M = dl.Machine(P)

# --- distribution -------------------------------------------------------------------------
A = dl.Tensor("A", (m, n), dist="ij -> i", machine=M)
B = dl.Tensor("B", (m, k), dist="ik -> i", machine=M)
C = dl.Tensor("C", (k, n), dist="kj -> k", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, kk = dl.index_vars("i j k")
A[i, j] = B[i, kk] * C[kk, j]

# --- schedule -----------------------------------------------------------------------------
io, ii, ko, ki = dl.index_vars("io ii ko ki")
s = (
    dl.schedule(A)
    .distribute([i], [io], [ii], M)
    .divide(kk, ko, ki, P)
    .reorder([ko, ii, j])
    .communicate(A, io)
    .communicate([B, C], ko)
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, c = rng.standard_normal((m, k)), rng.standard_normal((k, n))
closed = [n * k * (P - 1) // P] * P
sys.exit(report(kernel, {"B": b, "C": c}, b @ c, closed))
