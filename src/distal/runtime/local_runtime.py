"""The ``"local"`` runtime: every processor in this process (the executor is
:class:`distal.runtime.local.LocalRuntime`, the oracle the other runtimes are compared with).

A value held between runs is one numpy array in this process, of which every processor's
block is a view (the executor assembles results in one array), so placing and
redistributing move nothing in memory (a session counts a redistribution's words from its
copy kernel's exact plan).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from distal.distribution.layout import Layout
from distal.errors import InputError
from distal.runtime.base import Runtime
from distal.runtime.executable import Executable
from distal.runtime.local import LocalRuntime, side_by_side
from distal.runtime.result import Result
from distal.runtime.source import read_block
from distal.typing import Box, box_index


class Local(Runtime):
    """Runs an executable's whole plan in this process (options: ``trace``, ``progress``)."""

    name = "local"
    options: ClassVar[tuple[str, ...]] = ("trace", "progress")
    in_process = True

    def execute(
        self,
        exe: Executable,
        inputs: Mapping[str, Any],
        *,
        keep: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        if not exe.whole:
            raise InputError(
                f"the local runtime runs every processor's program, and {exe!r} holds only "
                "some: run the whole executable (kernel.executable())"
            )
        data = exe.check_inputs(inputs)
        t0 = time.perf_counter()
        rt = LocalRuntime(exe.plan, exe.leaves, exe.dtypes, **self.opts)
        value, stats, _ = rt.run(data)
        # (kept or not, the result is the one array every processor's block is a view of)
        return Result(value, stats, time.perf_counter() - t0, trace=rt.trace.events)

    # -- held values: whole arrays in this process -------------------------------------------

    def place(self, name: str, value: Any, layout: Layout) -> Any:
        if isinstance(value, np.ndarray):
            return value
        return read_block(name, value, _whole(layout.shape), np.dtype(_dtype(value)))

    def move(self, held: Any, source: Layout, target: Layout, copy: Executable) -> Any:
        return held  # the one array holds every block of every layout

    def gather(self, name: str, held: Any, layout: Layout | None) -> np.ndarray:
        if isinstance(held, np.ndarray):
            return np.array(held)
        shape = tuple(int(n) for n in held.shape)
        return read_block(name, held, _whole(shape), np.dtype(_dtype(held)))

    def map(
        self, fn: Any, operands: Sequence[tuple[Any, Layout]], target: Layout, dtype: Any
    ) -> Any:
        value = np.asarray(fn([x for x, _ in operands]), dtype=dtype)
        if value.shape != target.shape:
            value = np.broadcast_to(value, target.shape).copy()
        return value

    def fused(
        self,
        fn: Any,
        nslots: int,
        operands: Sequence[tuple[int, Any, Layout]],
        elems: Sequence[np.dtype],
        sums: Sequence[np.dtype],
        target: Layout,
        *,
        donate: Sequence[tuple[int, int]] = (),
        dot: Any = None,
    ) -> tuple[list[Any], list[Any], bool]:
        slots: list[Any] = [None] * nslots
        for k, x, _ in operands:
            slots[k] = x
        cuts = [(b[0][0], b[0][1]) for b, _ in target.blocks]
        got, partials = fn(slots, cuts, target.shape, side_by_side, donate)
        return (
            [np.asarray(a, dtype=d) for a, d in zip(got, elems, strict=True)],
            [added(parts, d) for parts, d in zip(partials, sums, strict=True)],
            False,
        )

    def blocks(
        self,
        fn: Any,
        operands: Sequence[tuple[Any, Layout]],
        needs: Mapping[int, Sequence[Any]],
        work: Sequence[tuple[Box, int]],
        target: Layout,
        dtype: Any,
        combine: Any = None,
    ) -> Any:
        """Every unit in this process, each reading its boxes of the whole arrays by view;
        large ones side by side in the processors' threads."""
        data = [np.asarray(x) for x, _ in operands]
        if combine is None:  # (one unit per distinct box: a 0-d result is every processor's)
            work = list({box: (box, p) for box, p in work}.values())

        def unit(item: tuple[Box, int]) -> Any:
            box, p = item
            arrays = [
                None if need is None else (d[box_index(need, _whole(d.shape))] if need else d)
                for d, need in zip(data, needs[p], strict=True)
            ]
            return fn(arrays, box)

        big = len(work) > 1 and sum(d.size for d in data) >= 1 << 16
        results = side_by_side(unit, list(work)) if big else [unit(w) for w in work]
        if combine is not None:
            return np.asarray(combine(results), dtype=dtype)
        value = np.empty(target.shape, dtype)
        for (box, _), r in zip(work, results, strict=True):
            value[box_index(box, _whole(target.shape))] = r
        return value

    def own_block(self, held: Any) -> np.ndarray | None:
        return held if isinstance(held, np.ndarray) else None

    # -- saving ----------------------------------------------------------------------------------

    def block_of(self, held: Any, layout: Layout | None, box: Box, p: int) -> Any:
        if isinstance(held, np.ndarray):
            return held[box_index(box, _whole(held.shape))]
        return read_block("kept value", held, box, np.dtype(_dtype(held)))

    def save_blocks(
        self, store: Any, todo: Sequence[tuple[str, int, Any]], wanted: bool
    ) -> list[tuple[str, int, str, str | None]]:
        # (side by side: each entry's fsync overlaps the others', CheckpointStore.save_many)
        digests = store.save_many([(f"{v}.{k}", a) for v, k, a in todo])
        return [(v, k, d, content(a, wanted)) for (v, k, a), d in zip(todo, digests, strict=True)]


def _whole(shape: tuple[int, ...]) -> Box:
    return tuple((0, int(n)) for n in shape)


def _dtype(value: Any) -> Any:
    return getattr(value, "dtype", np.float64)


def added(parts: Sequence[Any], dtype: np.dtype) -> np.ndarray:
    """Partial sums added in processor order (the same bits on every runtime)."""
    total = parts[0]
    for x in parts[1:]:
        total = total + x
    return np.asarray(total, dtype=dtype)


def content(arr: np.ndarray, wanted: bool) -> str | None:
    """A block's content digest, where a keyed session records one."""
    if not wanted:
        return None
    from distal.runtime.checkpoint_auth import content_digest

    return content_digest(arr)


__all__ = ["Local", "added", "content"]
