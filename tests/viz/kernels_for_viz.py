"""Small kernels built with the public API only."""

from __future__ import annotations

import distal as dl


def cannon(n: int = 32, g: int = 2) -> dl.Kernel:
    """Cannon's GEMM on a g x g grid (``dl.algorithms.cannon``, compiled as ``dl.compile``
    does by default)."""
    return dl.algorithms.cannon(n, machine=dl.Machine(g, g), steps=g).compile(routing="auto")


def johnson(n: int = 16) -> dl.Kernel:
    """Johnson's 3-D GEMM on 2x2x2: operands on faces (restricted), partial sums reduced."""
    M = dl.Machine(2, 2, 2)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> ij0", machine=M)
    B = dl.Tensor("B", (n, n), dist="ik -> i0k", machine=M)
    C = dl.Tensor("C", (n, n), dist="kj -> 0jk", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
    s = dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)
    return dl.compile(s.communicate([A, B, C], ko))


def ttm_replicated(n: int = 16) -> dl.Kernel:
    """A(i,j,l) = B(i,j,k) * C(k,l) with C on every processor: no communication at all."""
    M = dl.Machine(2, 2)
    i, j, k, l = dl.index_vars("i j k l")  # noqa: E741
    A = dl.Tensor("A", (n, n, 8), dist="ijl -> ij", machine=M)
    B = dl.Tensor("B", (n, n, n), dist="ijk -> ij", machine=M)
    C = dl.Tensor("C", (n, 8), dist="kl -> **", machine=M)
    A[i, j, l] = B[i, j, k] * C[k, l]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    s = dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M)
    return dl.compile(s.communicate([A, B, C], jo))


def vector(n: int = 20) -> dl.Kernel:
    """y(i) = x(i) * 2 on a line of 4 processors, x replicated (1-D machine, 1-D tensors)."""
    M = dl.Machine(4)
    (i,) = dl.index_vars("i")
    y = dl.Tensor("y", (n,), dist="i -> i", machine=M)
    x = dl.Tensor("x", (n,), dist="i -> *", machine=M)
    y[i] = x[i] * 2
    io, ii = dl.index_vars("io ii")
    return dl.compile(dl.schedule(y).distribute([i], [io], [ii], M).communicate([x, y], io))
