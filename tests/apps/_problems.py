"""The test problems of tests/apps, and their numpy float64 references."""

from __future__ import annotations

import numpy as np


def cp_tensor(shape=(20, 18, 16), rank=4, seed=3):
    rng = np.random.default_rng(seed)
    fs = [rng.random((s, rank)) for s in shape]
    letters = "ijk"[: len(shape)]
    sub = ",".join(f"{c}r" for c in letters) + "->" + letters
    return np.einsum(sub, *fs)


def reconstruct(weights, factors):
    letters = "ijkmn"[: len(factors)]
    sub = "r," + ",".join(f"{c}r" for c in letters) + "->" + letters
    return np.einsum(sub, weights, *factors)


def graph(n=200, seed=2, dangling=20):
    rng = np.random.default_rng(seed)
    a = (rng.random((n, n)) < 0.03) * rng.random((n, n))
    a[rng.choice(n, dangling, replace=False)] = 0.0
    return a


def numpy_pagerank(a, d=0.85, tol=1e-15, maxiter=10_000):
    """Power iteration on the dense Google matrix (dangling rows uniform)."""
    n = a.shape[0]
    s = a.sum(axis=1)
    P = np.where(s[:, None] > 0, a / np.where(s > 0, s, 1.0)[:, None], 1.0 / n)
    G = d * P + (1 - d) / n
    x = np.full(n, 1.0 / n)
    for _ in range(maxiter):
        y = G.T @ x
        if np.abs(y - x).sum() < tol:
            return y
        x = y
    return x


def spd(n=100, seed=1):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, n))
    return q @ q.T / n + np.eye(n), rng.standard_normal(n)


def sparse_cp_tensor(shape=(30, 25, 20), rank=4, seed=5, keep=0.3):
    """A rank-``rank`` tensor of sparse factors (about 12 % of its entries non-zero), dense."""
    rng = np.random.default_rng(seed)
    fs = [rng.random((s, rank)) * (rng.random((s, rank)) < keep) for s in shape]
    return np.einsum("ir,jr,kr->ijk", *fs)


def sparse_spd(n=300, seed=5):
    """A sparse SPD matrix (a few random off-diagonals, diagonally dominant), dense."""
    rng = np.random.default_rng(seed)
    a = (rng.random((n, n)) < 0.01) * rng.random((n, n))
    a = a + a.T
    return a + np.diag(a.sum(axis=1) + 1.0), rng.standard_normal(n)
