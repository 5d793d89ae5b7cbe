"""CP-ALS with dl.apps.cp_als: a rank-4 decomposition of a 20 x 18 x 16 tensor, 4 processors.

X is cut along its first mode and never moves; each mode's MTTKRP is a distributed kernel
(partial results summed onto their owners), the R x R solves run on the driver, and the fit
comes from the last MTTKRP and the Gram matrices. Checked against the reconstruction
computed with numpy.
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


rng = np.random.default_rng(3)
true = [rng.random((s, 4)) for s in (20, 18, 16)]
X = np.einsum("ir,jr,kr->ijk", *true)

sess = Checked(progress=False)
weights, factors, fit = dl.apps.cp_als(X, 4, machine=4, iters=500, tol=1e-12, session=sess)
Xh = np.einsum("r,ir,jr,kr->ijk", weights, *factors)
real = 1 - np.linalg.norm(X - Xh) / np.linalg.norm(X)
ok = fit >= 0.999 and abs(real - fit) < 1e-6
print(f"cp_als: fit {fit:.9f} after {sess.runs} kernel runs; weights {np.round(weights, 3)}")
print(f"check vs numpy reconstruction: fit {real:.9f}  {'PASS' if ok else 'FAIL'}")
print(f"measured stats == predicted: {'yes' if sess.same else 'NO'}")
sys.exit(0 if ok and sess.same else 1)
