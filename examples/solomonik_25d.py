"""Solomonik's 2.5-D algorithm on a 4 x 4 x 2 grid (r = 4, c = 2 layers).

Data lives on the bottom layer only ("xy -> xy0"). Layer z computes the k-slab z of every
tile, Cannon-style in r/c = 2 rotated steps; the layers' partial tiles are summed onto the
bottom layer. Closed form: 2*n**2/(r*c) words off the bottom layer.
"""

import sys

import numpy as np
from _report import report

import distal as dl

n, r, c = 8, 4, 2
M = dl.Machine(r, r, c)

# --- distribution: r x r tiles on the bottom layer ----------------------------------------
A = dl.Tensor("A", (n, n), dist="ij -> ij0", machine=M)
B = dl.Tensor("B", (n, n), dist="ik -> ik0", machine=M)
C = dl.Tensor("C", (n, n), dist="kj -> kj0", machine=M)

# --- computation --------------------------------------------------------------------------
i, j, k = dl.index_vars("i j k")
A[i, j] = B[i, k] * C[k, j]

# --- schedule -----------------------------------------------------------------------------
io, jo, ko, ii, ji, ki, kio, kii, kios = dl.index_vars("io jo ko ii ji ki kio kii kios")
s = (
    dl.schedule(A)
    .distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)  # layer ko takes k-slab ko
    .divide(ki, kio, kii, r // c)
    .reorder([kio, ii, ji])
    .rotate(kio, [io, jo], kios)  # Cannon inside each layer
    .communicate(A, ko)
    .communicate([B, C], kios)
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, cm = rng.standard_normal((n, n)), rng.standard_normal((n, n))
closed = list(dl.algorithms.solomonik_25d(n, machine=M).words)
assert all(w == 2 * n * n // (r * c) for (_, _, z), w in zip(M.coords(), closed, strict=True) if z)
sys.exit(report(kernel, {"B": b, "C": cm}, b @ cm, closed, explain=False))
