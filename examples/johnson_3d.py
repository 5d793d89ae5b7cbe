"""Johnson's 3-D algorithm on a 2 x 2 x 2 cube: operands on three faces.

Processor (x, y, z) computes B[x, z] * C[z, y]; B lives on the face y = 0, C on x = 0, A on
z = 0, where the partial products are summed. Closed form with b = (n/g)**2:
[y != 0]*b + [x != 0]*b + [z == 0]*(g-1)*b words.
"""

import sys

import numpy as np
from _report import report

import distal as dl

n, g = 6, 2
M = dl.Machine(g, g, g)

# --- distribution: three faces of the cube ------------------------------------------------
A = dl.Tensor("A", (n, n), dist="ij -> ij0", machine=M)
B = dl.Tensor("B", (n, n), dist="ik -> i0k", machine=M)
C = dl.Tensor("C", (n, n), dist="kj -> 0jk", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, k = dl.index_vars("i j k")
A[i, j] = B[i, k] * C[k, j]

# --- schedule: distribute the summed variable too -----------------------------------------
io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
s = dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M).communicate([A, B, C], ko)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
blk = (n // g) ** 2
closed = [(y != 0) * blk + (x != 0) * blk + (z == 0) * (g - 1) * blk for x, y, z in M.coords()]
sys.exit(report(kernel, {"B": b, "C": c}, b @ c, closed))
