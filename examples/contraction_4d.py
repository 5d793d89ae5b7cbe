"""The 4-D contraction A(a,b,i,j) = B(a,c,i,k) * C(c,b,k,j), Cannon-style on 2 x 2.

A matrix product in disguise: rows (a, i), columns (b, j), summed (c, k). Tiles over
(a, b); c is divided into g chunks visited with Cannon's rotation. Closed form:
2*(g-1)*(a/g)*(c/g)*i*k words per processor (square case).
"""

import sys

import numpy as np
from _report import report

import distal as dl

Na, Nb, Nc, Ni, Nj, Nk = 4, 4, 4, 2, 2, 3
g = 2
M = dl.Machine(g, g)

# --- distribution -------------------------------------------------------------------------
A = dl.Tensor("A", (Na, Nb, Ni, Nj), dist="abij -> ab", machine=M)
B = dl.Tensor("B", (Na, Nc, Ni, Nk), dist="acik -> ac", machine=M)
C = dl.Tensor("C", (Nc, Nb, Nk, Nj), dist="cbkj -> cb", machine=M)

# --- computation --------------------------------------------------------------------------
a, b, c, i, j, k = dl.index_vars("a b c i j k")
A[a, b, i, j] = B[a, c, i, k] * C[c, b, k, j]

# --- schedule -----------------------------------------------------------------------------
ao, bo, ai, bi, co, ci, cos = dl.index_vars("ao bo ai bi co ci cos")
s = (
    dl.schedule(A)
    .distribute([a, b], [ao, bo], [ai, bi], M)
    .divide(c, co, ci, g)
    .reorder([co, ai, bi, i, j])
    .rotate(co, [ao, bo], cos)
    .communicate(A, bo)
    .communicate([B, C], cos)
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
bt, ct = rng.standard_normal(B.shape), rng.standard_normal(C.shape)
closed = [2 * (g - 1) * (Na // g) * (Nc // g) * Ni * Nk] * M.size
expected = np.einsum("acik,cbkj->abij", bt, ct)
sys.exit(report(kernel, {"B": bt, "C": ct}, expected, closed))
