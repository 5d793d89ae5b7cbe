"""A user-written solver on distal arrays: BiCGSTAB for a non-symmetric sparse system.

The algorithm is the textbook one (van der Vorst, 1992), written on ``dl.DArray``s: the
matrix-vector products are SpDISTAL's SpMV cut by stored entries over 2 processors, the
vector updates and inner products are fused distributed kernels, and the scalars (rho,
alpha, omega) are 0-d values computed on each process. Checked against scipy's solver.
"""

import sys

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

import distal as dl


def bicgstab(sess, A, b, tol=1e-10, maxiter=1000):
    A, b = sess.asarray(A), sess.asarray(b)
    x = b * 0.0
    r = b
    r0 = r
    rho = alpha = omega = None
    p = v = None
    stop = tol * float(dl.sqrt(b @ b))
    for it in range(1, maxiter + 1):
        rho_new = r0 @ r
        if p is None:
            p = r
        else:
            beta = (rho_new / rho) * (alpha / omega)
            p = r + beta * (p - omega * v)
        v = A @ p
        alpha = rho_new / (r0 @ v)
        s = r - alpha * v
        t = A @ s
        omega = (t @ s) / (t @ t)
        x = x + alpha * p + omega * s
        r = s - omega * t
        rho = rho_new
        if float(dl.sqrt(r @ r)) <= stop:
            return x, it
    raise RuntimeError(f"bicgstab did not converge in {maxiter} iterations")


# a convection-diffusion operator on a 40 x 40 grid: non-symmetric
n = 40
lap = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
conv = sp.diags([-0.3, 0.3], [-1, 1], shape=(n, n))
one = sp.eye(n)
A = (sp.kron(one, lap + conv) + sp.kron(lap, one)).tocsr()
b = np.random.default_rng(0).standard_normal(A.shape[0])

sess = dl.Session("local", machine=2, check_stats=True)
x, its = bicgstab(sess, A, b)
ref = spsolve(A.tocsc(), b)
err = float(np.max(np.abs(x.get() - ref)))
ok = err <= 1e-7
print(f"bicgstab: {its} iterations, {sess.kernels_run} kernels run, {sess.compiles} compiled")
print(f"check vs scipy.sparse.linalg.spsolve: max abs error {err:.2e}  {'PASS' if ok else 'FAIL'}")
# every kernel but the maps (numpy over blocks, no plan) has a prediction to compare with
same = sess.stats_checked == sess.kernels_run - sess.maps_run and not sess.stats_differ
print(f"measured stats == predicted: {'yes' if same else 'NO'} ({sess.stats_checked} runs)")
sys.exit(0 if ok and same else 1)
