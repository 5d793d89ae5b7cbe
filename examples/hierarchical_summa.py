"""Hierarchical SUMMA from the library: 2 x 2 nodes x 2 processors.

dl.algorithms.hierarchical_summa builds the two-level distributions and the nested
schedule (see hierarchical_cannon.py for the code written out). Between nodes it moves what
flat SUMMA on the node grid moves; inside a node only partial sums of A.
"""

import sys

from _report import report

import distal as dl

n = 8
M = dl.Machine(2, 2).nest(dl.Machine(2))
alg = dl.algorithms.hierarchical_summa(n, machine=M)

# --- distribution -------------------------------------------------------------------------
for name, t in alg.tensors.items():
    print(f"{name}: {t.dist}")
# --- computation: A(i,j) = B(i,k) * C(k,j) ------------------------------------------------
# --- schedule -----------------------------------------------------------------------------
print(alg.schedule)

inputs = alg.inputs(0)
code = report(alg.compile(), inputs, alg.reference(inputs), alg.words, explain=False)
print(f"closed form per level: {[list(w) for w in alg.level_words]}")
sys.exit(code)
