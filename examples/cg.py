"""Conjugate gradients with dl.apps.cg: A x = b, A SPD, on a line of 4 processors.

A lives in row blocks, the vectors in blocks; every iteration runs the distributed
matrix-vector product q = A p (p read replicated: the session moves n*(P-1) words) and the
inner products p.q and r.r as distributed scalars. Checked against numpy.linalg.solve.
"""

import sys

import numpy as np

import distal as dl


class Checked(dl.Session):
    """A session that checks every kernel's measured traffic against its prediction."""

    runs, same = 0, True

    def run(self, kernel, inputs=None, *, gather=False):  # type: ignore[no-untyped-def]
        res = super().run(kernel, inputs, gather=gather)
        self.runs += 1
        self.same &= res.stats.as_dict() == kernel.stats().as_dict()
        return res


n = 100
rng = np.random.default_rng(0)
Q = rng.standard_normal((n, n))
A = Q @ Q.T / n + np.eye(n)
b = rng.standard_normal(n)

sess = Checked(progress=False)
x, iterations = dl.apps.cg(A, b, machine=4, tol=1e-10, session=sess)
ref = np.linalg.solve(A, b)
err = float(np.max(np.abs(x - ref)))
ok = err <= 1e-8
print(f"cg: {iterations} iterations, {sess.runs} kernel runs, words moved {sess.moved_words}")
print(f"check vs numpy.linalg.solve: max abs error {err:.2e}  {'PASS' if ok else 'FAIL'}")
print(f"measured stats == predicted: {'yes' if sess.same else 'NO'}")
sys.exit(0 if ok and sess.same else 1)
