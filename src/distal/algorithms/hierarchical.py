"""Hierarchical SUMMA and Cannon: a 2-D grid of nodes, each a line of processors.

The machine is ``dl.Machine(gx, gy).nest(dl.Machine(q))``. Each tensor has one
distribution per level (level 1 cuts the node's piece), and the schedule has one
``distribute`` per level, the second nested in the first (DISTAL §5.4).

A processor fetches every piece straight from its owner (there is no node-level
staging buffer), so what crosses the node boundary depends on how the node's
processors split the work:

* ``inner="k"`` (default): the node's ``q`` processors split each k-chunk of the
  flat algorithm into ``q`` sub-chunks. Their remote needs are disjoint, so each B
  and C element a node needs crosses the node boundary once — the inter-node words
  of a node equal the flat algorithm's words on the node grid — and the node's
  partial A tiles are summed inside the node.
* ``inner="rows"`` (DISTAL's hierarchical schedule, 1-D inner grid): the
  processors split the node's rows. B rows are disjoint, but every processor of the
  node needs the same C chunk and fetches it from the remote owner itself, so C
  crosses the node boundary ``q`` times.
"""

from __future__ import annotations

import itertools

from distal.algorithms.base import (
    Algorithm,
    block,
    check_steps,
    lcm,
    meet,
    size,
    sub_chunks,
)
from distal.algorithms.matmul import _algorithm, _extents, _tensors
from distal.distribution.machine import Machine
from distal.errors import ScheduleError
from distal.lang.nodes import index_vars
from distal.schedule.api import schedule

INNER = ("k", "rows")


def _check_nested(machine: object, name: str) -> tuple[Machine, Machine, Machine]:
    levels = getattr(machine, "levels", None)
    if not isinstance(machine, Machine) or levels is None or len(levels) != 2:
        raise ScheduleError(
            f"{name}: machine {machine!r} must be a 2-level machine, "
            "e.g. dl.Machine(2, 2).nest(dl.Machine(2))"
        )
    outer, inner = machine.level(0), machine.level(1)
    if outer.ndim != 2 or inner.ndim != 1:
        raise ScheduleError(
            f"{name}: machine {machine!r} must nest a 1-D grid of processors in a 2-D grid of "
            f"nodes; got levels {outer.shape} and {inner.shape}"
        )
    return machine, outer, inner


def _sub(iv: tuple[int, int], q: int, p: int) -> tuple[int, int]:
    """Piece ``p`` of interval ``iv`` cut into ``q`` blocks (the level-1 block rule)."""
    lo, hi = block(size(iv), q, p)
    return (iv[0] + lo, iv[0] + hi)


def _hierarchical(
    name: str, rotate: bool, m, n, k, machine: Machine, steps: int | None, inner: str
) -> Algorithm:
    m, n, k = _extents(m, n, k, name)
    M, M0, M1 = _check_nested(machine, name)
    if inner not in INNER:
        raise ScheduleError(f"{name}: inner must be one of {INNER}, got {inner!r}")
    gx, gy = M0.shape
    (q,) = M1.shape
    steps = lcm(gx, gy) if steps is None else check_steps(steps, name)
    if inner == "k":
        dists = (["ij -> ij", "ij -> i"], ["ik -> ik", "ik -> k"], ["kj -> kj", "kj -> k"])
    else:
        dists = (["ij -> ij", "ij -> i"], ["ik -> ik", "ik -> i"], ["kj -> kj", "kj -> k"])
    A, B, C, i, j, kv = _tensors(m, n, k, M, *dists)
    io, jo, ii, ji, ko, ki, kos = index_vars("io jo ii ji ko ki kos")
    s = schedule(A).distribute([i, j], [io, jo], [ii, ji], M0).divide(kv, ko, ki, steps)
    s = s.reorder([ko, ii, ji])
    step = ko
    if rotate:
        s, step = s.rotate(ko, [io, jo], kos), kos
    s = s.communicate(A, jo).communicate([B, C], step)
    if inner == "k":
        kio, kii = index_vars("kio kii")
        s = s.distribute([ki], [kio], [kii], M1).reorder([step, kii])
    else:
        iio, iii = index_vars("iio iii")
        s = s.distribute([ii], [iio], [iii], M1).reorder([step, iii])
    inter, intra = _level_words(m, n, k, gx, gy, q, steps, inner)
    words = tuple(a + b for a, b in zip(inter, intra, strict=True))
    formula = (
        "inter-node per node = flat on the node grid; intra-node: (q-1)*|I_x|/q*|J_y| (A)"
        if inner == "k"
        else "inter-node: |R_p|*(k-|K^gy_y|) + |J_y|*(k-|K^gx_x|); intra: rest of C's node block"
    )
    return _algorithm(
        name,
        A,
        B,
        C,
        s,
        M,
        words,
        formula,
        level_words=(tuple(inter), tuple(intra)),
        nodes=M0.shape,
        processors=M1.shape,
        steps=steps,
        inner=inner,
    )


def _level_words(
    m: int, n: int, k: int, gx: int, gy: int, q: int, steps: int, inner: str
) -> tuple[list[int], list[int]]:
    """Closed-form words received per processor between nodes and inside a node."""
    inter, intra = [], []
    for x, y, p in itertools.product(range(gx), range(gy), range(q)):
        ix, jy = block(m, gx, x), size(block(n, gy, y))
        kb, kc = block(k, gy, y), block(k, gx, x)  # the node's k ranges of B and of C
        if inner == "k":
            chunks = sub_chunks(k, steps, q, p)
            rows = size(ix)
            work = rows and jy and any(size(c) for c in chunks)
            a_in = 0
            if rows and jy:  # partial A rows of the other processors of the node
                a_in = sum(
                    size(_sub(ix, q, p)) * jy
                    for pp in range(q)
                    if pp != p and any(size(c) for c in sub_chunks(k, steps, q, pp))
                )
            if not work:
                inter.append(0)
                intra.append(a_in)
                continue
            ob, oc = _sub(kb, q, p), _sub(kc, q, p)  # the processor's own k pieces
            b_out = rows * sum(size(c) - meet(c, kb) for c in chunks)
            c_out = jy * sum(size(c) - meet(c, kc) for c in chunks)
            b_in = rows * sum(meet(c, kb) - meet(c, ob) for c in chunks)
            c_in = jy * sum(meet(c, kc) - meet(c, oc) for c in chunks)
            inter.append(b_out + c_out)
            intra.append(b_in + c_in + a_in)
        else:
            rows = size(_sub(ix, q, p))
            if not (rows and jy):
                inter.append(0)
                intra.append(0)
                continue
            inter.append(rows * (k - size(kb)) + jy * (k - size(kc)))
            intra.append(jy * (size(kc) - size(_sub(kc, q, p))))
    return inter, intra


def hierarchical_summa(
    m: int,
    n: int | None = None,
    k: int | None = None,
    *,
    machine: Machine,
    steps: int | None = None,
    inner: str = "k",
) -> Algorithm:
    """SUMMA over a ``gx x gy`` grid of nodes, each a line of ``q`` processors.

    Level 0 is :func:`~distal.algorithms.summa` on the node grid (A, B, C in node
    tiles ``"xy -> xy"``, k divided into ``lcm(gx, gy)`` serial chunks). Level 1, with
    ``inner="k"``: ``distribute([ki], [kio], [kii], M.level(1))`` — processor ``p`` of a
    node takes sub-chunk ``p`` of every chunk; B and C are cut by k inside the node
    (``"ik -> k"``, ``"kj -> k"``), A by rows (``"ij -> i"``).

    Closed form (``inner="k"``): the words a node receives from other nodes equal the
    flat algorithm's per processor on the node grid, ``|I_x|*(k - |K^gy_y|) + |J_y|*(k -
    |K^gx_x|)``, split evenly over its processors. Inside the node, on a square node grid
    (each chunk is one node block, so a processor's sub-chunks are its own pieces), each
    processor receives only the others' partial sums of its rows of the A tile,
    ``(q-1)*|I_x|/q*|J_y|``; on ``gx != gy`` some B or C sub-chunks also come from a
    node-mate (exact form in ``level_words``). ``inner="rows"`` (DISTAL's split): C crosses the node
    boundary once per processor (see the module docstring).
    """
    return _hierarchical("hierarchical_summa", False, m, n, k, machine, steps, inner)


def hierarchical_cannon(
    m: int,
    n: int | None = None,
    k: int | None = None,
    *,
    machine: Machine,
    steps: int | None = None,
    inner: str = "k",
) -> Algorithm:
    """Cannon over a ``gx x gy`` grid of nodes, each a line of ``q`` processors.

    :func:`hierarchical_summa` with Cannon's skew between nodes,
    ``rotate(ko, [io, jo], kos)``. Closed form: that of :func:`hierarchical_summa` (the
    rotation only reorders the chunks).
    """
    return _hierarchical("hierarchical_cannon", True, m, n, k, machine, steps, inner)
