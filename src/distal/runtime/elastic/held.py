"""Values held on the pool's workers: what a Dask session keeps between kernels.

A :class:`WorkerValue` is a dense value as Dask futures, one per distinct block of its
layout, each future's result that block's array. The driver holds only the futures: a
kernel's input blocks are those futures (or small tasks cutting them, run on the workers,
when the kernel reads other boxes than the value holds), and a kernel's output blocks stay
where the units and reductions computed them (the elastic driver's ``_hold`` option), so a
chain of kernels moves blocks worker to worker and nothing through the driver. Every read
through the driver (:meth:`WorkerValue.read_block`, :meth:`WorkerValue.gather`) is reported
to ``meter`` with its element count: the session's ``driver_words``.

Dask keeps each block's lineage while its future is held, so a block lost with its
worker is recomputed (from the kernel's units, back to the input blocks that carry their
data in their tasks).

This module never imports ``distributed``: it works through the client it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.errors import InternalError
from distal.runtime.checkpoint_auth import content_digest
from distal.runtime.elastic.tasks import _fault, input_block
from distal.typing import Box, box_index, box_intersect, box_is_empty, box_shape, box_volume


def _tiling(boxes: Iterable[Box | None], shape: tuple[int, ...]) -> list[Box]:
    """The distinct non-empty ``boxes`` (a layout's blocks, by processor), or the whole
    value as one box when they do not cover it exactly once."""
    distinct = [b for b in dict.fromkeys(boxes) if b is not None and not (b and box_is_empty(b))]
    if sum(box_volume(b) for b in distinct) != int(np.prod(shape, dtype=np.int64)):
        return [tuple((0, n) for n in shape)]
    return distinct


def cut(box: Box, dtype: np.dtype, pieces: Sequence[tuple[Box, np.ndarray]]) -> np.ndarray:
    """``box`` of a value, as ``dtype``, from held blocks ``(block box, array)`` that cover it
    (run on a worker)."""
    if len(pieces) == 1 and pieces[0][0] == box:
        return _fault(np.array(pieces[0][1], dtype=dtype))
    out = np.empty(box_shape(box), dtype)
    for b, arr in pieces:
        inter = box_intersect(b, box) if box else box
        out[box_index(inter, box)] = arr[box_index(inter, b)]
    return _fault(out)  # a test hook, off unless its variable is set


def map_block(
    fn: Callable[[list[np.ndarray]], Any], arrays: list[np.ndarray], shape: Any, dtype: Any
) -> np.ndarray:
    """``fn`` over one processor's operand blocks, as a block of ``shape`` (run on a worker;
    the element-wise maps of the arrays front)."""
    value = np.asarray(fn(list(arrays)), dtype=dtype)
    value = np.broadcast_to(value, shape).copy() if value.shape != tuple(shape) else value
    return _fault(value)  # a test hook, off unless its variable is set


#: how far two workers' results of one map may differ, in units in the last place: numpy
#: picks its element-wise loops by the processor's instruction set, and its SIMD
#: transcendental functions (``exp``) differ from the scalar ones by up to a few ulp, so
#: unequal machines disagree in the last bits where neither is wrong
MAP_ULPS = 8


def same_map_result(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two computations of one map block agree: same shape and dtype; integers
    and booleans equal; floating point with ``nan`` and infinities where the other has
    them and every finite pair within :data:`MAP_ULPS` ulp of the larger magnitude."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(a[~finite], b[~finite], equal_nan=True):
        return False
    x, y = a[finite], b[finite]
    eps = np.finfo(a.dtype).eps
    with np.errstate(over="ignore", invalid="ignore"):
        bound = MAP_ULPS * eps * np.maximum(np.abs(x), np.abs(y))
        return bool(np.all(np.abs(x - y) <= bound))


def recompute_agrees(func: Callable[..., Any], args: tuple, claimed: Any) -> bool:
    """Whether another worker's ``claimed`` is ``func(*args)`` computed again here (run on a
    worker other than the one that computed it): the check of a map block (one operation
    per element it reads, so no check is cheaper than doing it again), of a cut, and of a
    fused set's block (:func:`same_result`)."""
    return same_result(func(*args), claimed)


def recompute_partials(func: Callable[..., Any], args: tuple, claimed: Any) -> tuple[bool, list]:
    """:func:`recompute_agrees` of a :func:`fused_block`, and the partial sums this
    worker computed: where the two workers agree these are the checked partials, which
    the driver adds up itself (a 0-d value a single worker summed would go unchecked)."""
    mine = func(*args)
    return same_result(mine, claimed), list(mine[1])


def check_many(
    check: Callable[..., Any], items: list[tuple[Callable[..., Any], tuple, Any]]
) -> list:
    """``check(func, args, claimed)`` for each item, in one task: the checks one worker
    makes of the blocks another computed in one operation (a task each would cost the
    scheduler and the workers more than the checks themselves)."""
    return [check(func, args, claimed) for func, args, claimed in items]


def partials_many(results: list[tuple[list[np.ndarray], list[Any]]]) -> list[list[Any]]:
    """:func:`fused_partials` of several results held by one worker, in one task."""
    return [fused_partials(r) for r in results]


def same_result(a: Any, b: Any) -> bool:
    """:func:`same_map_result` of two results of one job: an array, or a
    :func:`fused_block`'s (member blocks, partial sums), compared member by member."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2):
            return False
        (ea, pa), (eb, pb) = a, b
        if len(ea) != len(eb) or len(pa) != len(pb):
            return False
        pairs = [*zip(ea, eb, strict=True), *zip(pa, pb, strict=True)]
        return all(same_map_result(np.asarray(x), np.asarray(y)) for x, y in pairs)
    return same_map_result(a, b)


def fused_block(
    fn: Callable[..., tuple[list, list]],
    nslots: int,
    where: list[int],
    arrays: list[np.ndarray],
    shape: Any,
    dtypes: list[Any],
) -> tuple[list[np.ndarray], list[Any]]:
    """A fused set of the arrays front over one processor's blocks (run on a worker):
    ``arrays`` fill slots ``where`` of ``nslots``; the element-wise members' blocks (as
    ``dtypes``, in order) and each reduction's partial sum over the block."""
    slots: list[Any] = [None] * nslots
    for k, a in zip(where, arrays, strict=True):
        slots[k] = a
    shape = tuple(shape)
    elems, sums = fn(slots, [(0, shape[0])], shape)
    # the fault hook (off unless its variable is set) perturbs members and partial sums
    out = [_fault(np.asarray(e, dtype=d)) for e, d in zip(elems, dtypes, strict=True)]
    return out, [_fault_scalar(s[0]) for s in sums]


def _fault_scalar(x: Any) -> Any:
    """:func:`_fault` of one partial sum (a numpy scalar stays one)."""
    arr = np.asarray(x)
    got = _fault(arr)
    return x if got is arr else got[()]


def fused_elem(result: tuple[list[np.ndarray], list[Any]], j: int) -> np.ndarray:
    """Element-wise member ``j``'s block of a :func:`fused_block` result (on a worker)."""
    return result[0][j]


def fused_partials(result: tuple[list[np.ndarray], list[Any]]) -> list[Any]:
    """The partial sums of a :func:`fused_block` result (on the worker holding it), so that
    adding them moves a few words, not the block's arrays."""
    return result[1]


def fused_sum(partials: list[list[Any]], j: int, dtype: Any) -> Any:
    """Reduction ``j`` of a fused set: its blocks' partial sums added in block order (on a
    worker), as a 0-d array."""
    total = partials[0][j]
    for r in partials[1:]:
        total = total + r[j]
    return np.asarray(total, dtype=dtype)


def host_op(fn: Callable[..., Any], args: list[Any], dtype: Any) -> np.ndarray:
    """A 0-d operation over 0-d operands (run on a worker)."""
    with np.errstate(all="ignore"):
        return np.asarray(fn(*[np.asarray(a).reshape(()) for a in args]), dtype=dtype)


def save_block(store: Any, name: str, arr: np.ndarray, content: bool) -> tuple[str, str | None]:
    """A session loop's checkpoint entry written by the worker holding the block (run on a
    worker): its checksum, and its content digest when the session seals its iterations
    (the seal itself is made by the session, which alone has the key)."""
    digest = store.save(name, arr)
    return digest, content_digest(arr) if content else None


@dataclass(eq=False)
class WorkerValue:
    """A dense value held on the workers: ``blocks`` maps each distinct box of its layout
    to the future of that box's array; together they cover the value exactly once.

    It follows the block-source protocol (``shape``, ``dtype``, ``read_block``), so every
    runtime can read it; the elastic driver takes its futures instead.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    blocks: dict[Box, Any]
    client: Any
    meter: Callable[[int], None] | None = None
    #: how a cut is made under ``verify=`` (a session's): ``checked(func, args)`` returns the
    #: future of ``func(*args)`` computed on one trusted worker and checked on another
    checked: Callable[[Callable[..., Any], tuple], Any] | None = None
    #: the cuts made of it, by (box, dtype): every kernel reading the same box shares one
    _cuts: dict[tuple[Box, str], Any] = field(default_factory=dict, repr=False)

    @classmethod
    def place(
        cls,
        client: Any,
        arr: np.ndarray,
        boxes: Iterable[Box],
        meter: Callable[[int], None] | None = None,
    ) -> WorkerValue:
        """``arr`` sent to the workers as the distinct ``boxes`` (its layout's blocks), each
        block in its own task (so Dask can rebuild it), or whole when those boxes do not
        cover the value exactly once."""
        shape = tuple(arr.shape)
        whole = tuple((0, n) for n in shape)
        blocks = {
            b: client.submit(input_block, np.array(arr[box_index(b, whole)], order="C"), pure=False)
            for b in _tiling(boxes, shape)
        }
        return cls(shape, np.dtype(arr.dtype), blocks, client, meter)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def part(self, box: Box, dtype: Any = None) -> Any:
        """A future of ``box`` of the value as ``dtype`` (default the value's): a held block
        itself when it is exactly that box, else a task cutting it from the blocks that
        meet it, on the workers."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        f = self.blocks.get(box)
        if f is not None and dtype == self.dtype:
            return f
        f = self._cuts.get((box, dtype.str))
        if f is not None:  # cut before: a value never changes, so neither do its cuts
            return f
        if box:
            pieces = [
                (b, g) for b, g in self.blocks.items() if not box_is_empty(box_intersect(b, box))
            ]
        else:
            pieces = list(self.blocks.items())
        if not pieces:
            raise InternalError(f"a held value of shape {self.shape} has no block for {box}")
        if self.checked is not None:
            f = self.checked(cut, (box, dtype, pieces))
        else:
            f = self.client.submit(cut, box, dtype, pieces, pure=False)
        self._cuts[(box, dtype.str)] = f
        return f

    def recut(self, boxes: Iterable[Box]) -> WorkerValue:
        """The value held as the distinct ``boxes`` (another layout's blocks), cut on the
        workers."""
        blocks = {b: self.part(b) for b in _tiling(boxes, self.shape)}
        return WorkerValue(self.shape, self.dtype, blocks, self.client, self.meter, self.checked)

    def read_block(self, box: Box) -> np.ndarray:
        """``box`` fetched to this process (counted by ``meter``)."""
        box = tuple((int(lo), int(hi)) for lo, hi in box)
        arr = np.asarray(self.client.gather(self.part(box)))
        if self.meter is not None:
            self.meter(int(arr.size))
        return arr

    def gather(self) -> np.ndarray:
        """The whole value fetched to this process (counted by ``meter``)."""
        whole = tuple((0, n) for n in self.shape)
        if list(self.blocks) == [whole]:
            out = np.array(self.client.gather(self.blocks[whole]), dtype=self.dtype)
        else:
            boxes = list(self.blocks)
            arrays = self.client.gather([self.blocks[b] for b in boxes])
            out = np.empty(self.shape, self.dtype)
            for b, arr in zip(boxes, arrays, strict=True):
                out[box_index(b, whole)] = arr
        if self.meter is not None:
            self.meter(self.size)
        return out

    def holders(self) -> dict[Box, list[str]]:
        """The workers holding each block now (by the scheduler), once every block is made
        (a pipelined run's blocks may still be computing; waiting moves no data)."""
        futures = list(self.blocks.values())
        for f in futures:
            f.exception()
        who = self.client.who_has(futures)
        return {b: sorted(who.get(f.key, ())) for b, f in self.blocks.items()}

    def __repr__(self) -> str:
        return f"WorkerValue(shape={self.shape}, dtype={self.dtype}, blocks={len(self.blocks)})"


__all__ = ["WorkerValue", "cut", "host_op", "map_block", "save_block"]
