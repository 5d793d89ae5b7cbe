"""Redistribution as a kernel: a copy statement from one layout to another.

To move a value of shape ``S`` from layout ``L1`` to ``L2`` the session compiles

    dst[i0, ..., e...] = src[i0, ...]

with ``src`` distributed as ``L1`` and ``dst`` as ``L2`` made replication-free: every
machine dimension that replicates ``L2`` (``*``) becomes an extra dimension ``e`` of
``dst`` of that dimension's extent, cut by it, and every machine dimension restricting
``L2`` to coordinate 0 an extra dimension of extent 1 cut by it (only coordinate 0 gets
its index). Each processor then owns exactly one copy of exactly the box ``L2`` gives it,
and the schedule is owner-computes: ``distribute`` over ``dst``'s machine dimensions, the
source fetched once per processor at the processor level. A processor fetches only the
part of its box it does not hold (pieces it holds come from itself and are not traffic),
so ``kernel.stats().total_words`` is the exact number of elements that must move.

Target layouts the statement cannot express this way raise ``NotSupportedYet``: a tensor
dimension cut by several machine dimensions at once, a restriction to a coordinate other
than 0, and one distribution statement per level of a hierarchical machine.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from distal.distribution.layout import Layout
from distal.distribution.machine import Machine
from distal.distribution.notation import PART, REPL, RESTRICT, Distribution
from distal.errors import NotSupportedYet
from distal.lang.nodes import Tensor, index_vars
from distal.schedule.api import schedule as default_schedule

SRC, DST = "src", "dst"


@dataclass(frozen=True)
class Copy:
    """A compiled redistribution: ``kernel`` reads ``src`` and writes ``dst`` (a runtime
    runs its executable, ``kernel.executable(...)``; each processor's block of ``dst`` is
    its target box, reshaped)."""

    kernel: Any
    words: int  # exact elements moved (the kernel's predicted total words)
    source: Layout
    target: Layout
    extra: int  # trailing extra dimensions of ``dst`` (each of extent 1 on a processor)


def _target_rules(target: Layout) -> Distribution:
    dist = target.distribution
    if isinstance(dist, tuple):
        if len(dist) != 1:
            raise NotSupportedYet(
                f"redistributing to layout {target} (one statement per machine level) is not "
                "in this version; give the tensor one distribution string over the whole grid"
            )
        dist = dist[0]
    order = len(target.shape)
    for d, ms in enumerate(dist.cuts(order)):
        if len(ms) > 1:
            raise NotSupportedYet(
                f"redistributing to layout {target}: tensor dimension {d} is cut by several "
                "machine dimensions at once, which this version's copy kernel cannot express"
            )
    for m, r in enumerate(dist.rules):
        if r.kind == RESTRICT and r.coord != 0:
            raise NotSupportedYet(
                f"redistributing to layout {target}: machine dimension {m} restricts the data "
                f"to coordinate {r.coord}; this version's copy kernel handles coordinate 0 only"
            )
    return dist


def compile_copy(shape: tuple[int, ...], dtype: Any, source: Layout, target: Layout) -> Copy:
    """The owner-computes copy kernel from ``source`` to ``target`` (see the module doc)."""
    from distal.kernel import compile as compile_kernel

    dist = _target_rules(target)
    grid = target.machine.shape
    machine = Machine(*grid)  # same processor numbers as the (possibly nested) target machine
    order = len(shape)
    # one letter per entry: the notation reads unspaced sides letter by letter (a one-entry
    # side such as "a0 -> a0" would not be one entry)
    letters = iter(string.ascii_letters)
    names = [next(letters) for _ in range(order)]
    extents = list(shape)
    rhs: list[str] = []
    for m, r in enumerate(dist.rules):
        if r.kind == PART:
            rhs.append(names[r.dim])
        elif r.kind == REPL:
            names.append(next(letters))
            extents.append(grid[m])
            rhs.append(names[-1])
        else:  # restricted to coordinate 0: an extent-1 dimension only coordinate 0 holds
            names.append(next(letters))
            extents.append(1)
            rhs.append(names[-1])
    extra = len(names) - order
    src_dist = (
        source.dist if source.dist is None or isinstance(source.dist, str) else list(source.dist)
    )
    src = Tensor(SRC, tuple(shape), dist=src_dist, machine=source.machine, dtype=dtype)
    dst_dist = f"{' '.join(names)} -> {' '.join(rhs)}"
    dst = Tensor(DST, tuple(extents), dist=dst_dist, machine=machine, dtype=dtype)
    vs = index_vars(" ".join(f"v{n}" for n in range(len(names)))) if names else ()
    by_name = dict(zip(names, vs, strict=True))
    dst[tuple(vs)] = src[tuple(vs[:order])]
    per_dim = [by_name[x] for x in rhs]
    outers = list(index_vars(" ".join(f"p{m}" for m in range(len(grid)))))
    inners = list(index_vars(" ".join(f"q{m}" for m in range(len(grid)))))
    s = default_schedule(dst).distribute(per_dim, outers, inners, machine)
    kernel = compile_kernel(s, routing="direct")
    return Copy(kernel, kernel.stats().total_words, source, target, extra)


__all__ = ["Copy", "compile_copy"]
