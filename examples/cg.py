"""Conjugate gradients with dl.apps.cg: A x = b, A SPD, on a line of 4 processors.

dl.apps.cg is written on distal arrays: A lives in row blocks, the vectors in blocks;
every iteration runs the distributed matrix-vector product q = A p (p read replicated: the
session moves n*(P-1) words; one more product, b - A x, checks the converged x), the inner
products p.q and r.r as distributed scalars and the vector updates as fused kernels (x, r
and r.r as one fused set: a map, numpy over the blocks, which has no plan stats to check).
Checked against numpy.linalg.solve.
"""

import sys

import numpy as np

import distal as dl

n, P = 100, 4
rng = np.random.default_rng(0)
Q = rng.standard_normal((n, n))
A = Q @ Q.T / n + np.eye(n)
b = rng.standard_normal(n)

sess = dl.Session(progress=False, check_stats=True)
x, iterations = dl.apps.cg(A, b, machine=P, tol=1e-10, session=sess)
ref = np.linalg.solve(A, b)
err = float(np.max(np.abs(x - ref)))
ok = err <= 1e-8
moved_ok = sess.moved_words == (iterations + 1) * n * (P - 1)  # + the true residual's A x
print(
    f"cg: {iterations} iterations, {sess.kernels_run} kernel runs ({sess.compiles} compiled), "
    f"words moved {sess.moved_words}"
)
print(f"check vs numpy.linalg.solve: max abs error {err:.2e}  {'PASS' if ok else 'FAIL'}")
print(f"moved words == (iterations + 1) * n * (P - 1): {'yes' if moved_ok else 'NO'}")
planned = sess.kernels_run - sess.maps_run  # the kernels run from a plan
same = sess.stats_checked == planned and not sess.stats_differ
print(
    f"measured stats == predicted: {'yes' if same else 'NO'} ({sess.stats_checked} runs; "
    f"{sess.maps_run} maps)"
)
sys.exit(0 if ok and moved_ok and same else 1)
