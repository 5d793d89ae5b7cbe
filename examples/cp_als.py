"""CP-ALS with dl.apps.cp_als: a rank-4 decomposition of a 20 x 18 x 16 tensor, 4 processors.

Written on distal's arrays: X is held in blocks of its first mode and never moves; each
mode's MTTKRP is a distributed einsum (partial results summed onto their owners), the
R x R solves run on the host, and the fit comes from the last MTTKRP and the Gram
matrices. Checked against the reconstruction computed with numpy, and every kernel's
measured traffic against its prediction (``check_stats=True``).
"""

import sys

import numpy as np

import distal as dl

rng = np.random.default_rng(3)
true = [rng.random((s, 4)) for s in (20, 18, 16)]
X = np.einsum("ir,jr,kr->ijk", *true)

sess = dl.Session(progress=False, check_stats=True)
weights, factors, fit = dl.apps.cp_als(X, 4, machine=4, iters=500, tol=1e-12, session=sess)
Xh = np.einsum("r,ir,jr,kr->ijk", weights, *factors)
real = 1 - np.linalg.norm(X - Xh) / np.linalg.norm(X)
ok = fit >= 0.999 and abs(real - fit) < 1e-6
same = sess.stats_checked > 0 and sess.stats_differ == []
print(f"cp_als: fit {fit:.9f} after {sess.kernels_run} kernel runs; weights {np.round(weights, 3)}")
print(f"check vs numpy reconstruction: fit {real:.9f}  {'PASS' if ok else 'FAIL'}")
print(f"kernel runs compared with their prediction: {sess.stats_checked}")
print(f"measured stats == predicted: {'yes' if same else 'NO'}")
sys.exit(0 if ok and same else 1)
