"""One processor's data while it executes its program, shared by the runtimes.

The local and the MPI runtime differ only in how pieces travel; what a processor holds and
how its output accumulates is the plan's memory model (``plan/stats.py``), written once here:
owned blocks, the fetch buffers of the current step and those prefetched for the next one,
the partial output buffer (or the owned block itself when the processor is its reducer),
partial sums received this step (``inbox``) and children's sums combined on a routing tree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.kernels.leaf import TermKernel, run_leaf
from distal.plan.ir import Compute, Fetch, Flush, OpenOutput
from distal.typing import Box, box_shape, box_volume
from distal.typing import box_index as _box_index

Held = tuple[np.ndarray, Box]  # an array and the box of the tensor it holds

INDEXES = 1 << 14  # (box, origin) pairs whose index is kept: a plan's boxes recur every run
_INDEX: dict[tuple[Box, Box], tuple[Any, ...]] = {}


def box_index(box: Box, origin: Box) -> tuple[Any, ...]:
    """:func:`distal.typing.box_index`, kept per ``(box, origin)``."""
    key = (box, origin)
    try:
        ix = _INDEX.get(key)
    except TypeError:  # a box given as a list
        return _box_index(box, origin)
    if ix is None:
        ix = _box_index(box, origin)
        if len(_INDEX) >= INDEXES:
            _INDEX.clear()
        _INDEX[key] = ix
    return ix


class Store:
    """What processor ``p`` holds, and its output accumulation."""

    def __init__(self, p: int, output: str, out_dtype: Any) -> None:
        self.p = p
        self.output = output
        self.out_dtype = out_dtype
        self.owned: dict[str, Held] = {}
        self.buffers: dict[str, Held] = {}
        self.next: dict[str, Held | None] = {}
        self.partial: Held | None = None
        self.direct = False  # the partial "buffer" is the owned output block
        self.flushed = False
        self.fresh = False  # the partial buffer is still all zeros (leaf kernels may store)
        self.own_fresh = True  # the owned output block is still all zeros
        self.inbox: list[Held] = []  # partial sums received this step, for the owned block
        self.combined: list[Held] = []  # children's partial sums this step (routing)

    def swap(self) -> None:
        """Buffers prefetched for the next step replace the current ones."""
        for name, b in self.next.items():
            if b is None:
                self.buffers.pop(name, None)
            else:
                self.buffers[name] = b
        self.next = {}

    def fetch_buffer(self, op: Fetch, dtype: Any) -> np.ndarray | None:
        """Start fetch ``op``: nothing to hold, or a view of an owned block (both done here,
        ``None`` returned), or a new buffer for the pieces, which the runtime fills its way
        (and which is already the next step's buffer for ``op.tensor``)."""
        if op.box is None:
            self.next[op.tensor] = None
            return None
        if op.view:
            own, origin = self.owned[op.tensor]
            self.next[op.tensor] = (own[box_index(op.box, origin)], op.box)
            return None
        buf = np.empty(box_shape(op.box), dtype)
        self.next[op.tensor] = (buf, op.box)
        return buf

    def held_words(self) -> int:
        """Elements held now, by the plan's memory model (views of own blocks are free)."""
        total = sum(a.size for a, _ in self.owned.values())
        total += sum(a.size for a, _ in self.buffers.values() if a.base is None)
        total += sum(b[0].size for b in self.next.values() if b is not None and b[0].base is None)
        if self.partial is not None and not self.direct:
            total += self.partial[0].size
        return total + sum(a.size for a, _ in self.inbox) + sum(a.size for a, _ in self.combined)

    def open_output(self, op: OpenOutput) -> None:
        """Start accumulating ``op.box``: into the owned block, or a zeroed buffer."""
        if op.direct:
            self.partial, self.direct, self.fresh = self.owned[self.output], True, self.own_fresh
        else:
            arr = np.zeros(box_shape(op.box), self.out_dtype)
            self.partial, self.direct, self.fresh = (arr, op.box), False, True

    def compute(self, op: Compute, kernels: tuple[TermKernel, ...]) -> int:
        """Run the leaf over every box of ``op``; returns the iterations executed."""
        out, origin = self.partial  # type: ignore[misc]
        done = 0
        for box in op.boxes:
            run_leaf(kernels, box, self.buffers, out, origin, self.fresh)
            self.fresh = False
            self.own_fresh = self.own_fresh and not self.direct
            done += box_volume(box)
        return done

    def combine(self) -> None:
        """Add the children's partial sums (received for this step) into the buffer."""
        arr, origin = self.partial  # type: ignore[misc]
        for part, box in self.combined:
            arr[box_index(box, origin)] += part

    def flush_local(self, op: Flush) -> Held:
        """Add ``op.local`` pieces into the owned block; returns the buffer to send from."""
        arr, origin = self.partial  # type: ignore[misc]
        for box in op.local:
            own, oorigin = self.owned[self.output]
            own[box_index(box, oorigin)] += arr[box_index(box, origin)]
            self.own_fresh = False
        self.flushed = True
        return arr, origin

    def reduce_inbox(self) -> int:
        """Add the partial sums received this step into the owned block; returns words."""
        if not self.inbox:
            return 0
        own, origin = self.owned[self.output]
        for arr, box in self.inbox:
            own[box_index(box, origin)] += arr
        self.own_fresh = False
        words = sum(a.size for a, _ in self.inbox)
        self.inbox.clear()
        return words

    def end_step(self) -> None:
        """Release what the step used: combined pieces and a flushed buffer."""
        self.combined.clear()
        if self.flushed:
            self.partial, self.flushed = None, False
