"""Named distributed algorithms written with the public API, for the MPI tests.

Each builder returns ``(kernel, inputs, expected)`` for a machine of the given shape; the
inputs are deterministic, so every MPI rank builds the same ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import distal as dl

Built = tuple[Any, dict[str, np.ndarray], np.ndarray]


def _rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def gemm(shape: tuple[int, int], n: int, algorithm: str) -> Built:
    """``dl.algorithms``' SUMMA, Cannon or PUMMA, ``A(i,j) = B(i,k) * C(k,j)`` on a 2-D grid,
    every tensor in 2-D tiles, ``k`` in ``max(shape)`` steps."""
    alg = getattr(dl.algorithms, algorithm)(n, machine=dl.Machine(*shape), steps=max(shape))
    b, c = _rand((n, n), 1), _rand((n, n), 2)
    return alg.compile(routing="auto"), {"B": b, "C": c}, b @ c


def johnson3d(shape: tuple[int, int, int], n: int) -> Built:
    """3-D GEMM: [i, j, k] distributed over a cube; the output is summed across k."""
    M = dl.Machine(*shape)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> ij0", machine=M)
    B = dl.Tensor("B", (n, n), dist="ik -> i*k", machine=M)
    C = dl.Tensor("C", (n, n), dist="kj -> *jk", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
    s = dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)
    s = s.communicate([A, B, C], ko)
    b, c = _rand((n, n), 3), _rand((n, n), 4)
    return dl.compile(s), {"B": b, "C": c}, b @ c


def ttv(shape: tuple[int, ...], n: int) -> Built:
    """``A(i,j) = B(i,j,k) * c(k)``, c replicated; on a 3-D grid k is cut and summed."""
    M = dl.Machine(*shape)
    i, j, k = dl.index_vars("i j k")
    if len(shape) == 3:
        A = dl.Tensor("A", (n, n - 1), dist="ij -> ij*", machine=M)
        B = dl.Tensor("B", (n, n - 1, n + 1), dist="ijk -> ijk", machine=M)
        c = dl.Tensor("c", (n + 1,), dist="k -> ***", machine=M)
        names = "io jo ko ii ji ki"
        axes = [i, j, k]
    else:
        A = dl.Tensor("A", (n, n - 1), dist="ij -> ij", machine=M)
        B = dl.Tensor("B", (n, n - 1, n + 1), dist="ijk -> ij", machine=M)
        c = dl.Tensor("c", (n + 1,), dist="k -> **", machine=M)
        names = "io jo ii ji"
        axes = [i, j]
    A[i, j] = B[i, j, k] * c[k]
    v = dl.index_vars(names)
    h = len(v) // 2
    s = dl.schedule(A).distribute(axes, list(v[:h]), list(v[h:]), M)
    b, cc = _rand((n, n - 1, n + 1), 5), _rand((n + 1,), 6)
    return dl.compile(s), {"B": b, "c": cc}, np.einsum("ijk,k->ij", b, cc)


def mttkrp(shape: tuple[int, int, int], n: int, r: int = 5) -> Built:
    """``A(i,l) = B(i,j,k) * C(j,l) * D(k,l)`` with [i, j, k] over a 3-D grid."""
    M = dl.Machine(*shape)
    i, j, k, l_ = dl.index_vars("i j k l")
    A = dl.Tensor("A", (n, r), dist="il -> i00", machine=M)
    B = dl.Tensor("B", (n, n + 1, n + 2), dist="ijk -> ijk", machine=M)
    C = dl.Tensor("C", (n + 1, r), dist="jl -> *j*", machine=M)
    D = dl.Tensor("D", (n + 2, r), dist="kl -> **k", machine=M)
    A[i, l_] = B[i, j, k] * C[j, l_] * D[k, l_]
    io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
    s = dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)
    s = s.communicate([A, B, C, D], ko)
    b = _rand((n, n + 1, n + 2), 7)
    c, d = _rand((n + 1, r), 8), _rand((n + 2, r), 9)
    return dl.compile(s), {"B": b, "C": c, "D": d}, np.einsum("ijk,jl,kl->il", b, c, d)


def named_cases(p: int, n: int = 24) -> dict[str, Callable[[], Built]]:
    """The named algorithms that fit a machine of ``p`` processors."""
    two = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (4, 2)}[p]
    three = {1: (1, 1, 1), 2: (1, 1, 2), 4: (2, 1, 2), 8: (2, 2, 2)}[p]
    out: dict[str, Callable[[], Built]] = {
        f"summa {two}": lambda: gemm(two, n, "summa"),
        f"summa {two[::-1]}": lambda: gemm(two[::-1], n + 3, "summa"),
        f"3-D gemm {three}": lambda: johnson3d(three, n),
        f"ttv {two}": lambda: ttv(two, n),
        f"ttv {three}": lambda: ttv(three, n - 5),
        f"mttkrp {three}": lambda: mttkrp(three, n - 4),
    }
    if two[0] == two[1]:
        out[f"cannon {two}"] = lambda: gemm(two, n + 1, "cannon")
        out[f"pumma {two}"] = lambda: gemm(two, n, "pumma")
    else:
        sq = {2: (1, 2), 8: (2, 4)}[p]
        out[f"cannon {sq}"] = lambda: gemm(sq, n + 1, "cannon")
    return out


def library_cases(p: int, n: int = 12) -> dict[str, Callable[[], Any]]:
    """Algorithms of ``distal.algorithms`` on machines of ``p`` processors (name -> builder).

    Each builder returns an ``Algorithm`` (``compile()``, ``inputs()``, ``reference()``).
    """
    import distal.algorithms as al

    M = dl.Machine
    two = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (4, 2)}[p]
    three = {1: (1, 1, 1), 2: (1, 1, 2), 4: (2, 1, 2), 8: (2, 2, 2)}[p]
    cube = {1: (1, 1, 1), 2: (1, 1, 2), 4: (2, 2, 1), 8: (2, 2, 2)}[p]
    nodes, q = {1: ((1, 1), 1), 2: ((1, 1), 2), 4: ((2, 1), 2), 8: ((2, 2), 2)}[p]
    t3 = (n, n - 1, n + 1)
    return {
        "summa": lambda: al.summa(n, n + 1, n + 2, machine=M(*two)),
        "cannon": lambda: al.cannon(n, machine=M(*two)),
        "pumma": lambda: al.pumma(n, machine=M(*two)),
        "row_1d": lambda: al.row_1d(n, machine=M(p)),
        "johnson_3d": lambda: al.johnson_3d(n, machine=M(*three)),
        "solomonik_25d": lambda: al.solomonik_25d(n, machine=M(*cube)),
        "cosma": lambda: al.cosma(n, n + 2, n - 1, machine=p),
        "ttv": lambda: al.ttv(t3, machine=M(*two)),
        "ttm": lambda: al.ttm(t3, 4, machine=M(*two)),
        "mttkrp": lambda: al.mttkrp(t3, 4, machine=M(*three)),
        "inner_product": lambda: al.inner_product(t3, machine=M(*three)),
        "contraction_4d": lambda: al.contraction_4d(4, 3, 5, 4, 3, 2, machine=M(*two)),
        "hierarchical_summa": lambda: al.hierarchical_summa(n, machine=M(*nodes).nest(M(q))),
        "hierarchical_cannon": lambda: al.hierarchical_cannon(n, machine=M(*nodes).nest(M(q))),
    }
