"""The stencil loop every runtime runs (``test_stencil.py``; ``_mpi_stencil.py`` under
``mpiexec``): Jacobi sweeps written as numpy users write them, a slice's in-place update
through a view, and a strided read, each against numpy."""

from __future__ import annotations

from typing import Any

import numpy as np


def grid(n: int, m: int, seed: int = 0) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal((n, m))
    a[0], a[-1], a[:, 0], a[:, -1] = 1.0, -1.0, 0.5, 2.0
    return a


def sweeps(u: Any, iters: int) -> Any:
    """``iters`` Jacobi sweeps of the 5-point stencil, in place (numpy or distal arrays)."""
    for _ in range(iters):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return u


def program(u: Any) -> Any:
    """Sweeps, then an update through a view and a strided, reversed read."""
    sweeps(u, 5)
    inner = u[1:-1, 1:-1]
    inner *= 2.0
    u[0, :] = u[-1, ::-1]
    return u[::-2, 1:]


def run(sess: Any, n: int = 13, m: int = 9) -> dict[str, Any]:
    """The program on ``sess`` and on numpy: the largest difference and what ran."""
    a = grid(n, m)
    want = program(a.copy())
    before = sess.kernels_run
    got = np.asarray(program(sess.asarray(a)))
    return {
        "err": float(np.max(np.abs(got - want))),
        "same": bool(np.array_equal(got, want)),
        "kernels": sess.kernels_run - before,
        "moved": int(sess.moved_words),
    }
