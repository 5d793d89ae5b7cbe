"""The benchmark problems: data, numpy formulations and distal schedules, shared by every system.

Every input element is a cheap function of its global index (``f(i, j, ...)``), so each
process of the run (numpy here, the MPI ranks, the JAX worker, Dask's workers) makes the
same data without shipping it, and a distributed system reads only its own blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import distal as dl

P = 4  # processors of every distributed system: a 2 x 2 grid (MTTKRP: 2 x 2 x 1)


def _fn(seed: int, ndim: int) -> Callable[..., np.ndarray]:
    """An element function of ``ndim`` global indices (smooth, in [-1, 1], seed-dependent)."""
    w = [0.0007 * (seed + 1) + 0.00031 * d for d in range(ndim)]

    def f(*idx: np.ndarray) -> np.ndarray:
        x = sum(wd * ix for wd, ix in zip(w, idx, strict=True)) + 0.1 * seed
        return np.sin(x)

    return f


@dataclass(frozen=True)
class Problem:
    """One kernel of the suite.

    ``subscripts`` is the numpy einsum over ``inputs`` (name -> shape) in order; ``flops``
    counts multiply-adds as two; ``grid`` is the distal machine (4 processors).
    """

    name: str
    subscripts: str
    inputs: dict[str, tuple[int, ...]]
    flops: float
    grid: tuple[int, ...]
    dtype: Any = np.float64
    blas_bound: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def out_shape(self) -> tuple[int, ...]:
        ins, out = self.subscripts.split("->")
        ext = {}
        for part, shape in zip(ins.split(","), self.inputs.values(), strict=True):
            ext.update(zip(part, shape, strict=True))
        return tuple(ext[c] for c in out)

    def fn(self, name: str) -> Callable[..., np.ndarray]:
        seed = list(self.inputs).index(name)
        return _fn(seed, len(self.inputs[name]))

    def array(self, name: str) -> np.ndarray:
        """The whole input (for numpy and the single-process systems)."""
        shape = self.inputs[name]
        return np.asarray(self.fn(name)(*np.ogrid[tuple(slice(0, s) for s in shape)]), self.dtype)

    def arrays(self) -> dict[str, np.ndarray]:
        return {n: self.array(n) for n in self.inputs}

    def sources(self) -> dict[str, Any]:
        """Block sources: a rank evaluates only the blocks it owns."""
        return {n: dl.from_function(s, self.fn(n), self.dtype) for n, s in self.inputs.items()}

    def schedule(self) -> dl.Schedule:
        """The distal schedule on a 4-processor machine (built per dtype)."""
        return _SCHEDULES[self.name.split("-")[0]](self)


def _gemm_schedule(p: Problem, rotate: bool = False) -> dl.Schedule:
    """SUMMA on 2 x 2 (Cannon with ``rotate``), built by hand so float32 works too."""
    n = p.inputs["B"][0]
    M = dl.Machine(*p.grid)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> ij", machine=M, dtype=p.dtype)
    B = dl.Tensor("B", (n, n), dist="ik -> ik", machine=M, dtype=p.dtype)
    C = dl.Tensor("C", (n, n), dist="kj -> kj", machine=M, dtype=p.dtype)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji, ko, ki, kos = dl.index_vars("io jo ii ji ko ki kos")
    s = dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M).divide(k, ko, ki, M.shape[0])
    s = s.reorder([ko, ii, ji])
    step = ko
    if rotate:
        s, step = s.rotate(ko, [io, jo], kos), kos
    return s.communicate(A, jo).communicate([B, C], step)


def _alg(p: Problem) -> dl.Schedule:
    M = dl.Machine(*p.grid)
    a = dl.algorithms
    name = p.name
    if name == "ttv":
        return a.ttv(p.inputs["B"], machine=M).schedule
    if name == "ttm":
        return a.ttm(p.inputs["B"], p.inputs["C"][1], machine=M).schedule
    if name == "mttkrp":
        return a.mttkrp(p.inputs["B"], p.inputs["C"][1], machine=M).schedule
    if name == "inner":
        return a.inner_product(p.inputs["B"], machine=M).schedule
    if name == "contract4d":
        na, nc, ni, nk = p.inputs["B"]
        nb, nj = p.inputs["C"][1], p.inputs["C"][3]
        return a.contraction_4d(na, nb, nc, ni, nj, nk, machine=M).schedule
    raise KeyError(name)


_SCHEDULES: dict[str, Callable[[Problem], dl.Schedule]] = {
    "gemm": _gemm_schedule,
    "ttv": _alg,
    "ttm": _alg,
    "mttkrp": _alg,
    "inner": _alg,
    "contract4d": _alg,
}


def problems(quick: bool = False, n: int | None = None) -> list[Problem]:
    """The peer suite. ``quick`` shrinks every problem (a smoke run, minutes -> seconds)."""
    g = n or (1024 if quick else 4096)
    t = 128 if quick else 512  # 3-tensor side
    r = 32  # MTTKRP rank, TTM columns
    a4, i4 = (16, 16) if quick else (64, 32)  # 4-D: a=b=c, i=j=k
    out = [
        Problem("gemm-f64", "ik,kj->ij", {"B": (g, g), "C": (g, g)}, 2.0 * g**3, (2, 2)),
        Problem(
            "gemm-f32", "ik,kj->ij", {"B": (g, g), "C": (g, g)}, 2.0 * g**3, (2, 2), np.float32
        ),
        Problem(
            "ttv", "ijk,k->ij", {"B": (t, t, t), "c": (t,)}, 2.0 * t**3, (2, 2), blas_bound=False
        ),
        Problem("ttm", "ijk,kl->ijl", {"B": (t, t, t), "C": (t, r)}, 2.0 * t**3 * r, (2, 2)),
        Problem(
            "mttkrp",
            "ijk,jl,kl->il",
            {"B": (t, t, t), "C": (t, r), "D": (t, r)},
            2.0 * t**3 * r,
            (2, 2, 1),
        ),
        Problem(
            "inner",
            "ijk,ijk->",
            {"B": (t, t, t), "C": (t, t, t)},
            2.0 * t**3,
            (2, 2),
            blas_bound=False,
        ),
        Problem(
            "contract4d",
            "acik,cbkj->abij",
            {"B": (a4, a4, i4, i4), "C": (a4, a4, i4, i4)},
            2.0 * a4**3 * i4**3,
            (2, 2),
        ),
    ]
    return out


# ------------------------------------------------------------------------------------------
# numpy's best formulations (single process, all BLAS threads)
# ------------------------------------------------------------------------------------------


def _kr_gemm(b: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    i, j, k = b.shape
    w = (c[:, None, :] * d[None, :, :]).reshape(j * k, -1)
    return b.reshape(i, j * k) @ w


NUMPY: dict[str, dict[str, Callable[..., Any]]] = {
    "gemm": {"@": lambda b, c: b @ c},
    "ttv": {
        "tensordot": lambda b, c: np.tensordot(b, c, 1),
        "@": lambda b, c: b @ c,
    },
    "ttm": {
        "tensordot": lambda b, c: np.tensordot(b, c, 1),
        "@": lambda b, c: b @ c,
    },
    "mttkrp": {
        "khatri-rao+gemm": _kr_gemm,
        "einsum(optimize)": lambda b, c, d: np.einsum("ijk,jl,kl->il", b, c, d, optimize=True),
    },
    "inner": {
        "vdot": lambda b, c: np.vdot(b, c),
        "tensordot": lambda b, c: np.tensordot(b, c, 3),
    },
    "contract4d": {
        # the result is materialised in A(a,b,i,j) order, as every other system returns it
        "tensordot": lambda b, c: np.ascontiguousarray(
            np.tensordot(b, c, ([1, 3], [0, 2])).transpose(0, 2, 1, 3)
        ),
        "einsum(optimize)": lambda b, c: np.ascontiguousarray(
            np.einsum("acik,cbkj->abij", b, c, optimize=True)
        ),
    },
}


def numpy_candidates(p: Problem) -> dict[str, Callable[..., Any]]:
    return NUMPY[p.name.split("-")[0]]


def gflops(p: Problem, seconds: float) -> float:
    return p.flops / seconds / 1e9 if seconds > 0 else math.nan
