"""Higher-order kernels as schedules: TTV, TTM, MTTKRP, inner product, a 4-D contraction.

As in :mod:`distal.algorithms.matmul`, every function returns an :class:`Algorithm`
built from public commands only, with the closed-form words received per processor
(block lengths ``|I_x|`` are those of the notation's block rule; a processor whose
iteration space is empty is taken to move nothing).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from distal.algorithms.base import (
    Algorithm,
    block,
    check_extent,
    check_machine,
    check_steps,
    lcm,
    size,
)
from distal.distribution.machine import Machine
from distal.errors import ScheduleError
from distal.lang.nodes import Tensor, index_vars
from distal.schedule.api import schedule


def _shape(shape: Sequence[int], order: int, name: str) -> tuple[int, ...]:
    if isinstance(shape, int) or not isinstance(shape, Sequence) or len(shape) != order:
        raise ScheduleError(f"{name}: shape must be {order} extents, got {shape!r}")
    return tuple(check_extent(s, f"shape[{d}]", name) for d, s in enumerate(shape))


def _grid_machine(machine: Machine, name: str, ranks: Sequence[int]) -> Machine:
    if not isinstance(machine, Machine):
        raise ScheduleError(f"{name}: machine {machine!r} is not a dl.Machine")
    if machine.ndim not in ranks:
        raise ScheduleError(
            f"{name}: needs a machine of rank {' or '.join(map(str, ranks))}, got {machine!r}"
        )
    return machine


def _blocks(extents: Sequence[int], grid: Sequence[int], coord: Sequence[int]) -> list[int]:
    """Block lengths of the first ``len(grid)`` extents at processor ``coord``."""
    return [size(block(e, g, c)) for e, g, c in zip(extents, grid, coord, strict=False)]


def ttv(shape: Sequence[int], *, machine: Machine) -> Algorithm:
    """Tensor-times-vector ``A(i,j) = B(i,j,k) * c(k)``, owner computes, vector replicated.

    Distribution on a 1-D or 2-D grid: ``A`` and ``B`` cut alike over ``i`` (and ``j``),
    ``B``'s k fibres whole; ``c "k -> *"`` (``"**"``) replicated on every processor.
    Schedule: distribute ``i`` (and ``j``), everything once per processor.

    Closed form: every processor owns what it reads and writes — 0 words.
    """
    name = "ttv"
    I, J, K = _shape(shape, 3, name)  # noqa: E741
    M = _grid_machine(machine, name, (1, 2))
    lhs = "ij"[: M.ndim]
    i, j, k = index_vars("i j k")
    A = Tensor("A", (I, J), dist=f"ij -> {lhs}", machine=M)
    B = Tensor("B", (I, J, K), dist=f"ijk -> {lhs}", machine=M)
    c = Tensor("c", (K,), dist="k -> " + "*" * M.ndim, machine=M)
    A[i, j] = B[i, j, k] * c[k]
    outs = list(index_vars("io jo")[: M.ndim])
    ins = list(index_vars("ii ji")[: M.ndim])
    s = schedule(A).distribute([i, j][: M.ndim], outs, ins, M).communicate([A, B, c], outs[-1])
    return Algorithm(
        name=name,
        tensors={"A": A, "B": B, "c": c},
        schedule=s,
        output="A",
        subscripts="ijk,k->ij",
        machine=M,
        words=(0,) * M.size,
        formula="0",
        params={"grid": M.shape},
    )


def ttm(shape: Sequence[int], l: int, *, machine: Machine, factor: str = "replicated") -> Algorithm:  # noqa: E741
    """Tensor-times-matrix (TTMC) ``A(i,j,l) = B(i,j,k) * C(k,l)`` on a 1-D or 2-D grid.

    Distribution: ``A "ijl -> ij"``, ``B "ijk -> ij"`` (aligned, owner computes);
    ``factor="replicated"``: ``C "kl -> **"`` on every processor (DISTAL's TTMC);
    ``factor="distributed"``: ``C "kl -> kl"`` in tiles, so every processor fetches the
    rest of ``C`` once. Schedule: distribute ``i`` (and ``j``), once per processor.

    Closed form: replicated, 0 words; distributed, ``K*L - |K_x|*|L_y|`` per processor
    with work (``K*L*(1 - 1/P)`` divisible).
    """
    name = "ttm"
    I, J, K = _shape(shape, 3, name)  # noqa: E741
    L = check_extent(l, "l", name)
    M = _grid_machine(machine, name, (1, 2))
    if factor not in ("replicated", "distributed"):
        raise ScheduleError(f"{name}: factor must be 'replicated' or 'distributed', got {factor!r}")
    lhs = "ij"[: M.ndim]
    cdist = "kl -> " + ("*" * M.ndim if factor == "replicated" else "kl"[: M.ndim])
    i, j, k, lv = index_vars("i j k l")
    A = Tensor("A", (I, J, L), dist=f"ijl -> {lhs}", machine=M)
    B = Tensor("B", (I, J, K), dist=f"ijk -> {lhs}", machine=M)
    C = Tensor("C", (K, L), dist=cdist, machine=M)
    A[i, j, lv] = B[i, j, k] * C[k, lv]
    outs = list(index_vars("io jo")[: M.ndim])
    ins = list(index_vars("ii ji")[: M.ndim])
    s = schedule(A).distribute([i, j][: M.ndim], outs, ins, M).communicate([A, B, C], outs[-1])
    words = []
    for coord in M.coords():
        work = all(_blocks((I, J), M.shape, coord))
        own = math.prod(_blocks((K, L), M.shape, coord)) * (L if M.ndim == 1 else 1)
        words.append(K * L - own if work and factor == "distributed" else 0)
    formula = "0" if factor == "replicated" else "K*L - |K_x|*|L_y|"
    return Algorithm(
        name=name,
        tensors={"A": A, "B": B, "C": C},
        schedule=s,
        output="A",
        subscripts="ijk,kl->ijl",
        machine=M,
        words=tuple(words),
        formula=formula,
        params={"grid": M.shape, "factor": factor},
    )


def mttkrp(shape: Sequence[int], l: int, *, machine: Machine) -> Algorithm:  # noqa: E741
    """MTTKRP ``A(i,l) = B(i,j,k) * C(j,l) * D(k,l)`` on a 3-D grid (Ballard et al.).

    Distribution on ``gx x gy x gz``: ``B "ijk -> ijk"`` in 3-D blocks; the factor
    matrices on the grid's edges, ``A "il -> i00"``, ``C "jl -> 0j0"``, ``D "kl -> 00k"``.
    Schedule: distribute ``i, j, k``, every tensor once per processor; the partial
    ``A`` rows of the ``gy*gz`` processors of a slab are summed onto its edge.

    Closed form: processor ``(x, y, z)`` receives ``[(x,z) != (0,0)]*|J_y|*L +
    [(x,y) != (0,0)]*|K_z|*L`` factor words, and the edge processor ``(x, 0, 0)`` also
    ``(gy*gz - 1)*|I_x|*L`` partial words.
    """
    name = "mttkrp"
    I, J, K = _shape(shape, 3, name)  # noqa: E741
    L = check_extent(l, "l", name)
    M = check_machine(machine, 3, name)
    _, gy, gz = M.shape
    i, j, k, lv = index_vars("i j k l")
    A = Tensor("A", (I, L), dist="il -> i00", machine=M)
    B = Tensor("B", (I, J, K), dist="ijk -> ijk", machine=M)
    C = Tensor("C", (J, L), dist="jl -> 0j0", machine=M)
    D = Tensor("D", (K, L), dist="kl -> 00k", machine=M)
    A[i, lv] = B[i, j, k] * C[j, lv] * D[k, lv]
    io, jo, ko, ii, ji, ki = index_vars("io jo ko ii ji ki")
    s = (
        schedule(A)
        .distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)
        .communicate([A, B, C, D], ko)
    )
    works = {c: all(_blocks((I, J, K), M.shape, c)) for c in M.coords()}
    words = []
    for x, y, z in M.coords():
        ix, jy, kz = _blocks((I, J, K), M.shape, (x, y, z))
        w = 0
        if works[(x, y, z)]:
            w = ((x, z) != (0, 0)) * jy * L + ((x, y) != (0, 0)) * kz * L
        if y == 0 and z == 0:
            w += sum(
                ix * L
                for yy, zz in itertools.product(range(gy), range(gz))
                if (yy, zz) != (0, 0) and works[(x, yy, zz)]
            )
        words.append(w)
    formula = "[(x,z)!=(0,0)]*|J_y|*L + [(x,y)!=(0,0)]*|K_z|*L + [y==z==0]*(gy*gz-1)*|I_x|*L"
    return Algorithm(
        name=name,
        tensors={"A": A, "B": B, "C": C, "D": D},
        schedule=s,
        output="A",
        subscripts="ijk,jl,kl->il",
        machine=M,
        words=tuple(words),
        formula=formula,
        params={"grid": M.shape},
    )


def inner_product(shape: Sequence[int], *, machine: Machine) -> Algorithm:
    """Inner product ``a = B(i,j,k) * C(i,j,k)`` into a scalar on processor 0.

    Distribution on a 1-, 2- or 3-D grid: ``B`` and ``C`` cut alike (``"ijk -> ij"`` on
    2-D), the scalar ``a "-> 00"`` on processor 0. Schedule: distribute the leading
    variables; each processor reduces its blocks locally.

    Closed form: processor 0 receives one partial word from every other processor with
    work (``P - 1`` when every block is non-empty); the others receive nothing.
    """
    name = "inner_product"
    I, J, K = _shape(shape, 3, name)  # noqa: E741
    M = _grid_machine(machine, name, (1, 2, 3))
    cut = "ijk"[: M.ndim]
    i, j, k = index_vars("i j k")
    a = Tensor("a", (), dist="-> " + "0" * M.ndim, machine=M)
    B = Tensor("B", (I, J, K), dist=f"ijk -> {cut}", machine=M)
    C = Tensor("C", (I, J, K), dist=f"ijk -> {cut}", machine=M)
    a[()] = B[i, j, k] * C[i, j, k]
    vs = [i, j, k][: M.ndim]
    outs = list(index_vars("io jo ko")[: M.ndim])
    ins = list(index_vars("ii ji ki")[: M.ndim])
    s = schedule(a).distribute(vs, outs, ins, M).communicate([a, B, C], outs[-1])
    workers = [all(_blocks((I, J, K), M.shape, c)) for c in M.coords()]
    words = [sum(workers[1:])] + [0] * (M.size - 1)
    return Algorithm(
        name=name,
        tensors={"a": a, "B": B, "C": C},
        schedule=s,
        output="a",
        subscripts="ijk,ijk->",
        machine=M,
        words=tuple(words),
        formula="[p==0]*(P-1)",
        params={"grid": M.shape},
    )


def contraction_4d(
    a: int,
    b: int,
    c: int,
    i: int,
    j: int,
    k: int,
    *,
    machine: Machine,
    steps: int | None = None,
) -> Algorithm:
    """The 4-D contraction ``A(a,b,i,j) = B(a,c,i,k) * C(c,b,k,j)``, Cannon-style.

    A matrix product in disguise (rows ``(a,i)``, columns ``(b,j)``, summed ``(c,k)``):
    ``A "abij -> ab"``, ``B "acik -> ac"``, ``C "cbkj -> cb"`` in 2-D tiles on a
    ``gx x gy`` grid; distribute ``a, b``; ``c`` divided into ``steps`` chunks (default
    ``lcm(gx, gy)``) visited with ``rotate(co, [ao, bo], cos)``; B and C fetched per step.

    Closed form (Cannon's with fibres): ``|A_x|*i*k*(c - |C^gy_y|) + |B_y|*k*j*(c -
    |C^gx_x|)``; divisible square ``g x g``: ``2*(g-1)*(a/g)*(c/g)*i*k`` when ``a == b``
    and ``i == j``.
    """
    name = "contraction_4d"
    Na, Nb, Nc, Ni, Nj, Nk = (
        check_extent(v, w, name) for v, w in zip((a, b, c, i, j, k), "abcijk", strict=True)
    )
    M = check_machine(machine, 2, name)
    gx, gy = M.shape
    steps = lcm(gx, gy) if steps is None else check_steps(steps, name)
    va, vb, vc, vi, vj, vk = index_vars("a b c i j k")
    A = Tensor("A", (Na, Nb, Ni, Nj), dist="abij -> ab", machine=M)
    B = Tensor("B", (Na, Nc, Ni, Nk), dist="acik -> ac", machine=M)
    C = Tensor("C", (Nc, Nb, Nk, Nj), dist="cbkj -> cb", machine=M)
    A[va, vb, vi, vj] = B[va, vc, vi, vk] * C[vc, vb, vk, vj]
    ao, bo, ai, bi, co, ci, cos = index_vars("ao bo ai bi co ci cos")
    s = (
        schedule(A)
        .distribute([va, vb], [ao, bo], [ai, bi], M)
        .divide(vc, co, ci, steps)
        .reorder([co, ai, bi, vi, vj])
        .rotate(co, [ao, bo], cos)
        .communicate(A, bo)
        .communicate([B, C], cos)
    )
    words = []
    for x, y in M.coords():
        ax, by = size(block(Na, gx, x)), size(block(Nb, gy, y))
        if not (ax and by):
            words.append(0)
            continue
        wb = ax * Ni * Nk * (Nc - size(block(Nc, gy, y)))
        wc = by * Nk * Nj * (Nc - size(block(Nc, gx, x)))
        words.append(wb + wc)
    formula = "|A_x|*i*k*(c - |C^gy_y|) + |B_y|*k*j*(c - |C^gx_x|)"
    return Algorithm(
        name=name,
        tensors={"A": A, "B": B, "C": C},
        schedule=s,
        output="A",
        subscripts="acik,cbkj->abij",
        machine=M,
        words=tuple(words),
        formula=formula,
        params={"grid": M.shape, "steps": steps},
    )
