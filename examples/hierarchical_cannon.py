"""Hierarchical Cannon: 2 x 2 nodes, each a line of 2 processors.

One distribution per level (level 1 cuts the node's piece) and one distribute per level,
the second nested in the first. Between nodes: Cannon on the node grid. Inside a node the
two processors split every k-chunk, so what a node fetches from other nodes is exactly
what one processor of the flat 2 x 2 Cannon fetches: 2*(g-1)*(n/g)**2 words per node.
"""

import sys

import numpy as np
from _report import report

import distal as dl

n, g, q = 8, 2, 2
M = dl.Machine(g, g).nest(dl.Machine(q))
nodes, procs = M.level(0), M.level(1)

# --- distribution: node tiles, then cut inside the node ------------------------------------
A = dl.Tensor("A", (n, n), dist=["ij -> ij", "ij -> i"], machine=M)
B = dl.Tensor("B", (n, n), dist=["ik -> ik", "ik -> k"], machine=M)
C = dl.Tensor("C", (n, n), dist=["kj -> kj", "kj -> k"], machine=M)

# --- computation --------------------------------------------------------------------------
i, j, k = dl.index_vars("i j k")
A[i, j] = B[i, k] * C[k, j]

# --- schedule: Cannon between nodes, k-chunks split inside a node --------------------------
io, jo, ii, ji, ko, ki, kos, kio, kii = dl.index_vars("io jo ii ji ko ki kos kio kii")
s = (
    dl.schedule(A)
    .distribute([i, j], [io, jo], [ii, ji], nodes)
    .divide(k, ko, ki, g)
    .reorder([ko, ii, ji])
    .rotate(ko, [io, jo], kos)
    .communicate(A, jo)
    .communicate([B, C], kos)
    .distribute([ki], [kio], [kii], procs)
    .reorder([kos, kii])
)

kernel = dl.compile(s, routing="direct")  # as the closed form counts; "auto" may use trees
rng = np.random.default_rng(0)
b, c = rng.standard_normal((n, n)), rng.standard_normal((n, n))
lib = dl.algorithms.hierarchical_cannon(n, machine=M)
code = report(kernel, {"B": b, "C": c}, b @ c, lib.words)
inter = kernel.stats().level_words_received[0]
per_node = [sum(inter[x * q : (x + 1) * q]) for x in range(nodes.size)]
flat = dl.algorithms.cannon(n, machine=nodes).compile().stats().words_received
print(f"inter-node words per node {per_node}; flat Cannon on the node grid {list(flat)}")
sys.exit(code or int(per_node != list(flat)))
