"""Block operations: what each processor computes from the boxes of its operands it reads.

Index notation computes sums of products and maps compute numpy's element-wise functions;
everything else ``distal.numpy`` offers (a maximum over an axis, ``arange``, a reshape, a
concatenation, a cumulative sum, random numbers) is a :class:`Block` node: each processor
computes a box of the result (or, for a reduction over the distributed axis, a *partial*
over its own block of the operand, the partials then combined in processor order) from
the boxes of its operands it reads. Which boxes those are is worked out from shapes alone,
on every process alike, and what a processor reads but does not hold is moved (counted in
``sess.moved_words``, as a redistribution's words are).

A block's *kind* is a registered :class:`Kind`; a node records the kind's name and its
parameters as one hashable ``spec`` tuple, so its function is made again from the spec
on any process (a Dask worker: a :class:`distal.kernels.passes.Pass` of kind ``"block"``).

Modes:

* ``rows``: the result is held in blocks of its first axis, as every value is; processor
  ``p`` computes its own block of rows. An operand whose first axis is the result's
  (:attr:`Block.aligned`) is read in the same rows, any other whole (replicated: a small
  operand, or a broadcast one). Nothing moves for aligned operands.
* ``partials``: processor ``p`` computes a partial over its block of the first operand
  (rows of its first axis); the partials, in processor order, are combined into the whole
  result, held replicated (a reduction over the first axis: the maximum of a column).
* ``boxes``: the kind says which box of each operand each block of the result reads
  (a reshape, a concatenation along the first axis, a diagonal).

A block fuses the element-wise tree feeding its first operand (a ``rows`` or ``partials``
block over one operand): the processors evaluate it over their boxes of its leaves and
hand the result to the block's function, so ``(x * x).max(axis=1)`` is one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.arrays.graph import Node
from distal.errors import InternalError
from distal.kernels.passes import register_pass
from distal.typing import Box

Spec = tuple


class Block(Node):
    """A block operation (see the module docstring): ``spec`` names a registered
    :class:`Kind` and its parameters; ``mode`` is ``"rows"``, ``"partials"`` or
    ``"boxes"``; ``aligned[k]``: operand ``k`` is read in the result's rows (``rows``
    mode) or in its own blocks (``partials`` mode, operand 0)."""

    __slots__ = ("aligned", "mode", "operands", "spec")
    _fields = (*Node._fields, "spec", "mode", "operands")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        spec: Spec,
        operands: tuple[Node, ...] = (),
        mode: str = "rows",
        aligned: tuple[bool, ...] | None = None,
    ) -> None:
        super().__init__(shape, dtype)
        if spec[0] not in KINDS:
            raise InternalError(f"unknown block kind {spec[0]!r}")
        self.spec = spec
        self.operands = operands
        self.mode = mode
        if aligned is None:
            aligned = tuple(_aligned_with(shape, x.shape, mode) for x in operands)
        self.aligned = aligned

    def args(self) -> tuple[Node, ...]:
        return self.operands


def _aligned_with(out: tuple[int, ...], operand: tuple[int, ...], mode: str) -> bool:
    """Whether an operand of ``operand`` shape is read in the processors' rows: in rows
    mode, when its first axis is the result's (same order, same extent, more than one);
    in partials mode (the first operand's blocks), when it has one or more axes."""
    if mode == "partials":
        return bool(operand)
    return bool(out) and len(operand) >= 1 and operand[0] == out[0] and len(out) >= 1


@dataclass(frozen=True)
class Kind:
    """How a block kind computes.

    ``compute(spec, arrays, box)``: the result's ``box`` (rows mode, boxes mode) or the
    partial over the first operand's ``box`` (partials mode) from the operands' arrays
    (the boxes of them the processor reads).
    ``combine(spec, parts)``: partials mode, the whole result from the partials in
    processor order (none where every block is empty).
    ``reads(spec, out_shape, in_shapes, box)``: boxes mode, the box of each operand the
    result's ``box`` needs (``None``: none of it)."""

    compute: Callable[[Spec, list[np.ndarray], Box], Any]
    combine: Callable[[Spec, list[Any]], Any] | None = None
    reads: (
        Callable[[Spec, tuple[int, ...], list[tuple[int, ...]], Box], list[Box | None]] | None
    ) = None


#: the registered kinds, by name
KINDS: dict[str, Kind] = {}


def register(name: str, kind: Kind) -> None:
    """Register block kind ``name`` (once, at import of the module defining it)."""
    if name in KINDS and KINDS[name] is not kind:
        raise InternalError(f"block kind {name!r} registered twice")
    KINDS[name] = kind


def block_function(key: tuple) -> Callable[[list[np.ndarray], Box], Any]:
    """The function a block's processors run: ``key`` is ``(spec, exprs)``, ``exprs`` the
    expression of each operand over the slot arrays (``None``: the slot itself, in order),
    evaluated first (see :func:`distal.arrays.lower.evaluator`)."""
    from distal.arrays.lower import evaluator

    spec, exprs = key
    kind = KINDS[spec[0]]
    compute = kind.compute
    if exprs is None:

        def run(arrays: list[np.ndarray], box: Box) -> Any:
            return compute(spec, arrays, box)

        return run
    fns = [evaluator(e) for e in exprs]

    def run_fused(arrays: list[np.ndarray], box: Box) -> Any:
        with np.errstate(all="ignore"):
            xs = [f(arrays) for f in fns]
        xs = [None if x is None else np.asarray(x) for x in xs]
        return compute(spec, xs, box)

    return run_fused


def combine_function(spec: Spec) -> Callable[[list[Any]], Any]:
    """The function combining a partials block's partials (in processor order)."""
    kind = KINDS[spec[0]]
    if kind.combine is None:
        raise InternalError(f"block kind {spec[0]!r} has no combine")
    combine = kind.combine

    def run(parts: list[Any]) -> Any:
        return combine(spec, parts)

    return run


register_pass("block", block_function)
register_pass("combine", combine_function)


def rows_of(box: Box, shape: tuple[int, ...]) -> Box:
    """The rows of ``box`` (its first interval) across all of an operand of ``shape``."""
    if not shape:
        return ()
    return ((box[0][0], box[0][1]), *((0, n) for n in shape[1:]))


def whole(shape: Sequence[int]) -> Box:
    return tuple((0, int(n)) for n in shape)


# -- where each processor works and what it reads --------------------------------------------------


def cuts(extent: int, nprocs: int) -> list[tuple[int, int]]:
    """The blocks of an axis of ``extent`` over ``nprocs`` processors (the distribution
    notation's: ``ceil(extent / nprocs)`` each, the last ones shorter or empty)."""
    step = -(-extent // nprocs) if extent else 0
    return [(min(b * step, extent), min((b + 1) * step, extent)) for b in range(nprocs)]


def held_boxes(shape: tuple[int, ...], nprocs: int) -> list[Box]:
    """Each processor's box of a value of ``shape`` held in blocks of its first axis (a 0-d
    value: every processor holds it)."""
    if not shape:
        return [() for _ in range(nprocs)]
    return [((lo, hi), *((0, n) for n in shape[1:])) for lo, hi in cuts(shape[0], nprocs)]


def _nonempty(box: Box) -> bool:
    return not box or all(hi > lo for lo, hi in box)


def slots_of(expr: tuple) -> set[int]:
    """The slots an expression reads."""
    tag = expr[0]
    if tag == "slot":
        return {int(expr[1])}
    if tag == "const":
        return set()
    out: set[int] = set()
    for e in expr[1:]:
        out |= slots_of(e)
    return out


def _hull(a: Box | None, b: Box | None) -> Box | None:
    if a is None:
        return b
    if b is None:
        return a
    return tuple((min(x0, y0), max(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b, strict=True))


def units(
    node: Block, exprs: tuple[tuple, ...], slots: list[Node], nprocs: int
) -> tuple[dict[int, list[Box | None]], list[tuple[Box, int]]]:
    """Each processor's unit of ``node``'s work and the box of every slot it reads.

    ``exprs[k]`` is operand ``k`` over the slots (a leaf of an element-wise tree fused
    into the block is read in the operand's rows where its first axis is the operand's,
    whole otherwise: numpy's broadcasting)."""
    mode = node.mode
    xs = node.operands
    if mode == "partials":
        src = xs[0].shape
        work = [(b, p) for p, b in enumerate(held_boxes(src, nprocs)) if _nonempty(b)]
        if not src:
            work = work[:1]
    else:
        work = [(b, p) for p, b in enumerate(held_boxes(node.shape, nprocs)) if _nonempty(b)]
    needs: dict[int, list[Box | None]] = {}
    reads = KINDS[node.spec[0]].reads
    for box, p in work:
        per: list[Box | None] = [None] * len(slots)
        if mode == "boxes":
            assert reads is not None
            got = reads(node.spec, node.shape, [x.shape for x in xs], box)
            for k, b in enumerate(got):
                for s in slots_of(exprs[k]):
                    per[s] = _hull(per[s], b)
        else:
            for k, x in enumerate(xs):
                for s in slots_of(exprs[k]):
                    leaf = slots[s]
                    if (
                        node.aligned[k]
                        and x.shape
                        and leaf.ndim == x.ndim
                        and (leaf.shape[0] == x.shape[0])
                    ):
                        b = rows_of(box, leaf.shape)
                    else:
                        b = whole(leaf.shape)
                    per[s] = _hull(per[s], b)
        needs[p] = per
    return needs, work
