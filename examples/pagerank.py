"""PageRank with dl.apps.pagerank on a random graph with dangling nodes, 4 processors.

P^T lives in row blocks; every iteration runs the distributed matrix-vector product (x read
replicated), the dangling mass and the change as distributed scalars. Checked against a
numpy power iteration on the dense Google matrix.
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


n, d = 200, 0.85
rng = np.random.default_rng(0)
A = (rng.random((n, n)) < 0.03) * rng.random((n, n))
A[rng.choice(n, 20, replace=False)] = 0.0  # 20 dangling nodes

sess = Checked(progress=False)
x = dl.apps.pagerank(A, machine=4, damping=d, session=sess)

s = A.sum(axis=1)
P = np.where(s[:, None] > 0, A / np.where(s > 0, s, 1.0)[:, None], 1.0 / n)
G = d * P + (1 - d) / n
ref = np.full(n, 1.0 / n)
for _ in range(10_000):
    ref, prev = G.T @ ref, ref
    if np.abs(ref - prev).sum() < 1e-15:
        break
err = float(np.max(np.abs(x - ref)))
ok = err <= 1e-10 and abs(x.sum() - 1) < 1e-12
print(f"pagerank: {sess.runs} kernel runs, words moved {sess.moved_words}")
print(f"top nodes: {[int(v) for v in np.argsort(-x)[:5]]}")
print(f"check vs numpy power iteration: max abs error {err:.2e}  {'PASS' if ok else 'FAIL'}")
print(f"measured stats == predicted: {'yes' if sess.same else 'NO'}")
sys.exit(0 if ok and sess.same else 1)
