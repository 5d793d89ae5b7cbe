"""Cannon: A(i,j) = B(i,k) * C(k,j) on a 3 x 3 grid.

SUMMA plus a rotation: processor (x, y) visits the k-chunks starting at x + y, so the
processors of a grid row read different chunks at every step (Cannon's skew, no explicit
shifts). Closed form: every processor receives 2*(g-1)*(n/g)**2 words.
"""

import sys

import numpy as np
from _report import report

import distal as dl

n, g = 9, 3
M = dl.Machine(g, g)

# --- distribution -------------------------------------------------------------------------
A = dl.Tensor("A", (n, n), dist="xy -> xy", machine=M)
B = dl.Tensor("B", (n, n), dist="xy -> xy", machine=M)
C = dl.Tensor("C", (n, n), dist="xy -> xy", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, k = dl.index_vars("i j k")
A[i, j] = B[i, k] * C[k, j]

# --- schedule -----------------------------------------------------------------------------
io, jo, ii, ji, ko, ki, kos = dl.index_vars("io jo ii ji ko ki kos")
s = (
    dl.schedule(A)
    .distribute([i, j], [io, jo], [ii, ji], M)
    .divide(k, ko, ki, g)
    .reorder([ko, ii, ji])
    .rotate(ko, [io, jo], kos)  # Cannon's systolic skew
    .communicate(A, jo)
    .communicate([B, C], kos)
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
closed = [2 * (g - 1) * (n // g) ** 2] * (g * g)
assert list(dl.algorithms.cannon(n, machine=M).words) == closed
sys.exit(report(kernel, {"B": b, "C": c}, b @ c, closed))
