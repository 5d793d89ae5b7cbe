"""Distributed matrix multiplication ``A(i,j) = B(i,k) * C(k,j)`` as schedules.

Every function takes the extents ``m`` (rows of A), ``n`` (columns of A), ``k`` (the
summed extent) and a machine, and returns an :class:`Algorithm` built only from
public commands. Its ``words`` field is the closed-form number of words each
processor receives, derived from the distributions' block rule alone (with
ragged blocks: ``|I_x|`` is the length of block ``x`` of ``m`` over ``gx``, etc.);
a processor whose iteration space is empty is taken to move nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from distal.algorithms.base import (
    Algorithm,
    block,
    check_extent,
    check_machine,
    check_steps,
    lcm,
    meet,
    size,
    sub_chunks,
)
from distal.distribution.machine import Machine
from distal.errors import ScheduleError
from distal.lang.nodes import Tensor, index_vars
from distal.schedule.api import schedule

MATMUL = "ik,kj->ij"


def _extents(m: int, n: int | None, k: int | None, name: str) -> tuple[int, int, int]:
    m = check_extent(m, "m", name)
    n = m if n is None else check_extent(n, "n", name)
    k = m if k is None else check_extent(k, "k", name)
    return m, n, k


def _tensors(
    m: int, n: int, k: int, machine: Machine, da: str, db: str, dc: str
) -> tuple[Tensor, Tensor, Tensor, Any, Any, Any]:
    i, j, kv = index_vars("i j k")
    A = Tensor("A", (m, n), dist=da, machine=machine)
    B = Tensor("B", (m, k), dist=db, machine=machine)
    C = Tensor("C", (k, n), dist=dc, machine=machine)
    A[i, j] = B[i, kv] * C[kv, j]
    return A, B, C, i, j, kv


def _algorithm(name, A, B, C, s, machine, words, formula, level_words=None, **params) -> Algorithm:
    return Algorithm(
        name=name,
        tensors={"A": A, "B": B, "C": C},
        schedule=s,
        output="A",
        subscripts=MATMUL,
        machine=machine,
        words=tuple(words),
        formula=formula,
        params=params,
        level_words=level_words,
    )


# ---------------------------------------------------------------------------------------------
# 1-D
# ---------------------------------------------------------------------------------------------


def row_1d(
    m: int,
    n: int | None = None,
    k: int | None = None,
    *,
    machine: Machine,
    steps: int | None = None,
) -> Algorithm:
    """Row-wise 1-D matrix multiply on a line of ``P`` processors.

    Distribution: ``A "ij -> i"``, ``B "ik -> i"`` (row blocks, aligned with the
    output), ``C "kj -> k"`` (row blocks of C). Schedule: distribute ``i``; ``k`` is
    divided into ``steps`` serial chunks (default ``P``, one per owner of C) and C is
    fetched one chunk at a time, so only one chunk of C is held at once.

    Closed form: processor ``p`` receives the C rows it does not own,
    ``n * (k - |K_p|)`` words (``n*k*(1 - 1/P)`` when divisible) — the tight lower
    bound in the 1-D regime (``m`` much larger than ``n`` and ``k``).
    """
    name = "row_1d"
    m, n, k = _extents(m, n, k, name)
    M = check_machine(machine, 1, name)
    P = M.shape[0]
    steps = P if steps is None else check_steps(steps, name)
    A, B, C, i, j, kv = _tensors(m, n, k, M, "ij -> i", "ik -> i", "kj -> k")
    io, ii, ko, ki = index_vars("io ii ko ki")
    s = (
        schedule(A)
        .distribute([i], [io], [ii], M)
        .divide(kv, ko, ki, steps)
        .reorder([ko, ii, j])
        .communicate(A, io)
        .communicate([B, C], ko)
    )
    words = [n * (k - size(block(k, P, p))) if size(block(m, P, p)) else 0 for p in range(P)]
    formula = "n*(k - |K_p|)  [= n*k*(1 - 1/P) divisible]"
    return _algorithm(name, A, B, C, s, M, words, formula, grid=M.shape, steps=steps)


# ---------------------------------------------------------------------------------------------
# 2-D: SUMMA, Cannon, PUMMA
# ---------------------------------------------------------------------------------------------


def _two_d_words(m: int, n: int, k: int, gx: int, gy: int) -> list[int]:
    words = []
    for x, y in itertools.product(range(gx), range(gy)):
        ix, jy = size(block(m, gx, x)), size(block(n, gy, y))
        if ix == 0 or jy == 0:
            words.append(0)
            continue
        b = ix * (k - size(block(k, gy, y)))  # B's row panel minus the block it owns
        c = jy * (k - size(block(k, gx, x)))  # C's column panel minus the block it owns
        words.append(b + c)
    return words


_TWO_D_FORMULA = (
    "|I_x|*(k - |K^gy_y|) + |J_y|*(k - |K^gx_x|)  "
    "[= m*k*(gy-1)/P + n*k*(gx-1)/P divisible; 2*(g-1)*(n/g)**2 square]"
)


def _two_d(name: str, rotate_by: str, m, n, k, machine: Machine, steps: int | None) -> Algorithm:
    m, n, k = _extents(m, n, k, name)
    M = check_machine(machine, 2, name)
    gx, gy = M.shape
    steps = lcm(gx, gy) if steps is None else check_steps(steps, name)
    A, B, C, i, j, kv = _tensors(m, n, k, M, "ij -> ij", "ik -> ik", "kj -> kj")
    io, jo, ii, ji, ko, ki, kos = index_vars("io jo ii ji ko ki kos")
    s = schedule(A).distribute([i, j], [io, jo], [ii, ji], M).divide(kv, ko, ki, steps)
    s = s.reorder([ko, ii, ji])
    step = ko
    if rotate_by == "ij":
        s, step = s.rotate(ko, [io, jo], kos), kos
    elif rotate_by == "i":
        s, step = s.rotate(ko, [io], kos), kos
    s = s.communicate(A, jo).communicate([B, C], step)
    words = _two_d_words(m, n, k, gx, gy)
    return _algorithm(name, A, B, C, s, M, words, _TWO_D_FORMULA, grid=M.shape, steps=steps)


def summa(
    m: int,
    n: int | None = None,
    k: int | None = None,
    *,
    machine: Machine,
    steps: int | None = None,
) -> Algorithm:
    """SUMMA on a ``gx x gy`` grid: A, B, C in 2-D tiles ``"xy -> xy"``.

    Schedule: distribute ``i, j``; ``k`` divided into ``steps`` serial chunks (default
    ``lcm(gx, gy)``, so every chunk lies in one owner's block of B and of C: one
    message per fetched piece); at each step a processor fetches the B and C pieces of
    the chunk (the row and column broadcasts of SUMMA, as owner-to-processor messages).

    Closed form (any ``steps``): processor ``(x, y)`` receives its B row panel and C
    column panel minus what it owns, ``|I_x|*(k - |K^gy_y|) + |J_y|*(k - |K^gx_x|)``;
    divisible: ``m*k*(gy-1)/P + n*k*(gx-1)/P``, i.e. ``2*(g-1)*(n/g)**2`` on a square
    grid with square matrices.
    """
    return _two_d("summa", "", m, n, k, machine, steps)


def cannon(
    m: int,
    n: int | None = None,
    k: int | None = None,
    *,
    machine: Machine,
    steps: int | None = None,
) -> Algorithm:
    """Cannon's algorithm on a ``gx x gy`` grid (any shape, not only square).

    SUMMA's schedule plus ``rotate(ko, [io, jo], kos)``: processor ``(x, y)`` visits the
    k-chunks starting at ``x + y``, so at each step the processors of one grid row
    (column) read different chunks — Cannon's skew without explicit shifts. On a
    non-square grid ``k`` is divided into ``lcm(gx, gy)`` chunks by default: each chunk
    lies in one B block (k cut by ``gy``) and one C block (k cut by ``gx``), and the
    rotation runs over all of them. ``steps=gx`` (DISTAL's ``divide(k, ko, ki, gx)``)
    is also correct and moves the same words, but a chunk may straddle two owners'
    blocks (more messages).

    Closed form (any ``steps``): the rotation only reorders the chunks, so the words are
    SUMMA's:
    ``|I_x|*(k - |K^gy_y|) + |J_y|*(k - |K^gx_x|)``; ``2*(g-1)*(n/g)**2`` square.
    """
    return _two_d("cannon", "ij", m, n, k, machine, steps)


def pumma(
    m: int,
    n: int | None = None,
    k: int | None = None,
    *,
    machine: Machine,
    steps: int | None = None,
) -> Algorithm:
    """PUMMA on a ``gx x gy`` grid: Cannon with the rotation by the row coordinate only.

    ``rotate(ko, [io], kos)``: a grid row starts at chunk ``x``, so the processors of
    one column read different B chunks while a row shares its C chunk. ``k`` is
    divided into ``lcm(gx, gy)`` chunks by default, as for Cannon.

    Closed form: SUMMA's, ``|I_x|*(k - |K^gy_y|) + |J_y|*(k - |K^gx_x|)``.
    """
    return _two_d("pumma", "i", m, n, k, machine, steps)


# ---------------------------------------------------------------------------------------------
# 3-D: Johnson, Solomonik 2.5-D, COSMA-style
# ---------------------------------------------------------------------------------------------


def johnson_3d(
    m: int, n: int | None = None, k: int | None = None, *, machine: Machine
) -> Algorithm:
    """Johnson's 3-D algorithm on a ``gx x gy x gz`` grid (a cube ``g x g x g`` classically).

    Distribution: operands on three faces of the grid — ``A "ij -> ij0"``,
    ``B "ik -> i0k"``, ``C "kj -> 0jk"``. Schedule: distribute ``i, j, k``, every tensor
    once per processor. Processor ``(x, y, z)`` computes the block product
    ``B[x, z] * C[z, y]`` and its partial ``A[x, y]`` is summed onto the face ``z = 0``.

    Closed form: ``[y != 0]*|I_x|*|K_z| + [x != 0]*|K_z|*|J_y|`` (the B and C blocks
    not on its own face) plus, on the face ``z = 0``, ``(gz-1)*|I_x|*|J_y|`` partial
    words. On a cube with ``n/g`` blocks: an interior processor receives ``2*(n/g)**2``,
    a face-``z=0`` processor up to ``(g+1)*(n/g)**2``.
    """
    name = "johnson_3d"
    m, n, k = _extents(m, n, k, name)
    M = check_machine(machine, 3, name)
    gx, gy, gz = M.shape
    A, B, C, i, j, kv = _tensors(m, n, k, M, "ij -> ij0", "ik -> i0k", "kj -> 0jk")
    io, jo, ko, ii, ji, ki = index_vars("io jo ko ii ji ki")
    s = schedule(A).distribute([i, j, kv], [io, jo, ko], [ii, ji, ki], M).communicate([A, B, C], ko)
    I = [size(block(m, gx, x)) for x in range(gx)]  # noqa: E741
    J = [size(block(n, gy, y)) for y in range(gy)]
    K = [size(block(k, gz, z)) for z in range(gz)]
    words = []
    for x, y, z in M.coords():
        if not (I[x] and J[y]):
            words.append(0)
            continue
        w = (y != 0) * I[x] * K[z] + (x != 0) * K[z] * J[y] if K[z] else 0
        if z == 0:
            w += sum(I[x] * J[y] for zz in range(1, gz) if K[zz])
        words.append(w)
    formula = (
        "[y!=0]*|I_x|*|K_z| + [x!=0]*|K_z|*|J_y| + [z==0]*(gz-1)*|I_x|*|J_y|  "
        "[cube: 2*(n/g)**2 interior, up to (g+1)*(n/g)**2 on the face]"
    )
    return _algorithm(name, A, B, C, s, M, words, formula, grid=M.shape)


def solomonik_25d(
    m: int,
    n: int | None = None,
    k: int | None = None,
    *,
    machine: Machine,
    steps: int | None = None,
) -> Algorithm:
    """Solomonik's 2.5-D algorithm on an ``r x r x c`` grid (``c`` layers).

    Distribution: A, B, C in ``r x r`` tiles on the bottom layer only (``"xy -> xy0"``).
    Schedule: distribute ``i, j, k`` (layer ``z`` takes the k-slab ``z`` of ``c``); inside
    a layer the slab is divided into ``steps`` chunks (default ``r // c``, one B/C tile
    each when ``c`` divides ``r``) visited Cannon-style (``rotate(kio, [io, jo], kios)``);
    the layers' partial A tiles are summed onto the bottom layer.

    Closed form: processor ``(x, y, z)`` receives its slab of the B row panel and of the
    C column panel, minus what it owns on the bottom layer, plus on the bottom layer the
    ``c-1`` partial tiles: ``|I_x|*(|S_z| - [z==0]*|S_0 & K_y|) + |J_y|*(|S_z| -
    [z==0]*|S_0 & K_x|) + [z==0]*(c-1)*|I_x|*|J_y|``. Divisible, ``c | r``: ``2*n**2/(r*c)``
    off the bottom layer; on it ``2*n**2/(r*c) + (c-1)*(n/r)**2``, less ``(n/r)**2`` per
    operand tile it already owns.
    """
    name = "solomonik_25d"
    m, n, k = _extents(m, n, k, name)
    M = check_machine(machine, 3, name)
    r, r2, c = M.shape
    if r != r2:
        raise ScheduleError(f"{name}: the machine must be r x r x c, got {M!r} ({r} != {r2})")
    steps = max(1, r // c) if steps is None else check_steps(steps, name)
    A, B, C, i, j, kv = _tensors(m, n, k, M, "ij -> ij0", "ik -> ik0", "kj -> kj0")
    io, jo, ko, ii, ji, ki, kio, kii, kios = index_vars("io jo ko ii ji ki kio kii kios")
    s = (
        schedule(A)
        .distribute([i, j, kv], [io, jo, ko], [ii, ji, ki], M)
        .divide(ki, kio, kii, steps)
        .reorder([kio, ii, ji])
        .rotate(kio, [io, jo], kios)
        .communicate(A, ko)
        .communicate([B, C], kios)
    )
    words = []
    for x, y, z in M.coords():
        ix, jy, sz = size(block(m, r, x)), size(block(n, r, y)), block(k, c, z)
        if not (ix and jy):
            words.append(0)
            continue
        w = 0
        if size(sz):
            own_b = meet(sz, block(k, r, y)) if z == 0 else 0
            own_c = meet(sz, block(k, r, x)) if z == 0 else 0
            w = ix * (size(sz) - own_b) + jy * (size(sz) - own_c)
        if z == 0:
            w += sum(ix * jy for zz in range(1, c) if size(block(k, c, zz)))
        words.append(w)
    formula = (
        "|I_x|*(|S_z| - [z==0]*|S_0&K_y|) + |J_y|*(|S_z| - [z==0]*|S_0&K_x|) "
        "+ [z==0]*(c-1)*|I_x|*|J_y|  [off bottom layer: 2*n**2/(r*c)]"
    )
    return _algorithm(name, A, B, C, s, M, words, formula, grid=M.shape, steps=steps)


def cosma_words(m: int, n: int, k: int, grid: Sequence[int], steps: int) -> list[int]:
    """Closed-form words received per processor by :func:`cosma` on ``grid`` with ``steps``.

    Processor ``(x, y, z)`` works on ``I_x x J_y x S_z`` where ``S_z`` is sub-chunk ``z`` of
    each of the ``steps`` serial chunks of ``k``. It receives the parts of ``B[I_x, S_z]``
    and ``C[S_z, J_y]`` outside its own blocks (``B``: k block ``y*gz+z`` of ``gy*gz``;
    ``C``: k block ``x*gz+z`` of ``gx*gz``), and, as owner of ``A``'s row block ``x*gz+z``
    of ``gx*gz`` (columns ``J_y``), the partial sums of the other processors that computed
    rows of it.
    """
    gx, gy, gz = grid
    I = [block(m, gx, x) for x in range(gx)]  # noqa: E741
    J = [size(block(n, gy, y)) for y in range(gy)]
    S = [sub_chunks(k, steps, gz, z) for z in range(gz)]
    Ssize = [sum(size(c) for c in S[z]) for z in range(gz)]
    layers = sum(1 for z in range(gz) if Ssize[z])
    words = []
    for x, y, z in itertools.product(range(gx), range(gy), range(gz)):
        w = 0
        ix, jy = size(I[x]), J[y]
        if ix and jy and Ssize[z]:
            kb = block(k, gy * gz, y * gz + z)
            kc = block(k, gx * gz, x * gz + z)
            w += ix * sum(size(c) - meet(c, kb) for c in S[z])
            w += jy * sum(size(c) - meet(c, kc) for c in S[z])
        if jy:
            ra = block(m, gx * gz, x * gz + z)
            for xx in range(gx):
                if size(I[xx]):
                    w += meet(I[xx], ra) * jy * layers
            if ix and Ssize[z]:
                w -= meet(I[x], ra) * jy  # its own contribution stays local
        words.append(w)
    return words


def factorizations(P: int, ndim: int = 3) -> list[tuple[int, ...]]:
    """All ordered ways to write ``P`` as a product of ``ndim`` positive integers."""
    if ndim == 1:
        return [(P,)]
    out = []
    for d in range(1, P + 1):
        if P % d == 0:
            out.extend((d, *rest) for rest in factorizations(P // d, ndim - 1))
    return out


def cosma_grid(m: int, n: int, k: int, P: int) -> tuple[tuple[int, int, int], int]:
    """The ``(gx, gy, gz)`` grid and serial ``steps`` for :func:`cosma` moving fewest words.

    Searches every factorisation ``gx*gy*gz == P`` and ``steps`` in ``{gx, gy}`` by the
    closed form (:func:`cosma_words`): grids that leave no processor idle first (a
    block of ``m``, ``n`` or of the k-slabs may be empty when the grid is finer than the
    extent), then smallest maximum per processor, smallest total, fewest layers (less
    memory), fewest steps.
    """
    best: tuple[Any, ...] | None = None
    for grid in factorizations(P, 3):
        gx, gy, gz = grid
        for steps in sorted({gx, gy}):
            idle = (
                size(block(m, gx, gx - 1)) == 0
                or size(block(n, gy, gy - 1)) == 0
                or any(not any(size(c) for c in sub_chunks(k, steps, gz, z)) for z in range(gz))
            )
            w = cosma_words(m, n, k, grid, steps)
            key = (idle, max(w), sum(w), gz, steps, grid)
            if best is None or key < best:
                best = key
    assert best is not None
    return best[5], best[4]


def cosma(
    m: int,
    n: int | None = None,
    k: int | None = None,
    *,
    machine: Machine | int,
    grid: Sequence[int] | None = None,
    steps: int | None = None,
) -> Algorithm:
    """COSMA-style matrix multiply: a 3-D grid chosen for ``m, n, k, P``, one copy of each matrix.

    The grid ``(gx, gy, gz)`` with ``gx*gy*gz == P`` (``P = machine.size``) and the number
    of serial k-chunks come from :func:`cosma_grid` unless given. Joint partitions
    spread every matrix over the whole grid: ``A "ij -> iji"`` (i cut by x then z),
    ``B "ik -> ikk"`` (k cut by y then z), ``C "kj -> kjk"`` (k cut by x then z). ``k`` is
    first divided into ``steps`` serial chunks, then each chunk is distributed over
    ``z``; B and C are fetched chunk by chunk, the partial A blocks summed to their
    owners.

    Closed form (:func:`cosma_words`); divisible and ``gx == gy`` (or ``gz == 1``) with
    ``steps = gy``: every processor receives
    ``(m*k*(gy-1) + n*k*(gx-1) + m*n*(gz-1)) / P`` words — on a cube
    ``3*n**2/P**(2/3) - 3*n**2/P``, the tight lower bound. With ``gx != gy`` and
    ``gz > 1`` one of B, C is not aligned with the chunks and moves somewhat more; the
    search weighs that.
    """
    name = "cosma"
    m, n, k = _extents(m, n, k, name)
    if isinstance(machine, Machine):
        P = machine.size
    elif isinstance(machine, int) and not isinstance(machine, bool) and machine > 0:
        P = machine
    else:
        raise ScheduleError(f"{name}: machine {machine!r} is neither a dl.Machine nor a count")
    if grid is None:
        g3, best_steps = cosma_grid(m, n, k, P)
        steps = best_steps if steps is None else check_steps(steps, name)
    else:
        g3 = tuple(check_extent(g, "grid", name) for g in grid)
        if len(g3) != 3 or g3[0] * g3[1] * g3[2] != P:
            raise ScheduleError(f"{name}: grid {tuple(grid)} is not 3 sizes whose product is {P}")
        steps = g3[1] if steps is None else check_steps(steps, name)
    gx, gy, gz = g3
    M = Machine(gx, gy, gz)
    A, B, C, i, j, kv = _tensors(m, n, k, M, "ij -> iji", "ik -> ikk", "kj -> kjk")
    io, jo, ko, ii, ji, ki, ks, kr = index_vars("io jo ko ii ji ki ks kr")
    s = (
        schedule(A)
        .divide(kv, ks, kr, steps)
        .distribute([i, j, kr], [io, jo, ko], [ii, ji, ki], M)
        .reorder([ks, ii, ji, ki])
        .communicate(A, ko)
        .communicate([B, C], ks)
    )
    words = cosma_words(m, n, k, g3, steps)
    formula = (
        "B, C outside own blocks over S_z, plus A partials  "
        "[divisible, gx==gy: (m*k*(gy-1) + n*k*(gx-1) + m*n*(gz-1))/P]"
    )
    return _algorithm(name, A, B, C, s, M, words, formula, grid=g3, steps=steps)
