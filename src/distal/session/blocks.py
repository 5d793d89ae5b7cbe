"""Block operations of the arrays front on the session's runtime (see
:mod:`distal.arrays.blocks`): each processor reads boxes of held values, computes its box
of the result (or a partial), and the result is held in blocks of its first axis (or, from
partials, combined in processor order and held replicated).

What a processor reads and does not hold is moved exactly: on MPI the pieces go rank to
rank (one polled all-to-all), on Dask they are cut on the workers, and on the local
runtime (every block in this process) nothing is copied; on every runtime the words are
counted from the boxes alone (the same on every rank) into ``sess.moved_words``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from distal.arrays.lower import held_dist
from distal.session.layout import Layout, layout_for
from distal.typing import Box, box_index, box_intersect, box_is_empty, box_shape

#: ``(box, processor)``: a unit of a block's work (its result box, or the box of the
#: first operand a partial is over) and the processor computing it
Work = tuple[Box, int]


def _size(box: Box | None) -> int:
    if box is None:
        return 0
    return int(np.prod(box_shape(box), dtype=np.int64)) if box else 1


def _whole(shape: Sequence[int]) -> Box:
    return tuple((0, int(n)) for n in shape)


def run_block(
    sess: Any,
    fn: Callable[[list[np.ndarray], Box], Any],
    slots: Sequence[str],
    needs: dict[int, list[Box | None]],
    work: Sequence[Work],
    out: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    nprocs: int,
    combine: Callable[[list[Any]], Any] | None = None,
) -> None:
    """Compute a block operation into value ``out``.

    ``slots``: the held values it reads; ``needs[p][k]``: the box of slot ``k`` processor
    ``p`` reads (None: none); ``work``: each processor's unit (see :data:`Work`), in
    processor order. Without ``combine`` each unit's ``fn`` is its box of the result, held
    in blocks of the first axis (``held_dist``); with it, each unit's ``fn`` is a partial,
    and ``combine(partials)`` the whole result, held replicated.
    """
    sess._settle()
    machine = sess._machine_of(nprocs)
    layouts = [_placed(sess, name, machine) for name in slots]
    sess.moved_words += _moved(layouts, needs, work)
    if combine is None:
        target = layout_for(out, shape, held_dist(len(shape)), machine)
    else:
        target = layout_for(out, shape, _replicated(len(shape)), machine)
    if sess.runtime == "mpi":
        _on_mpi(sess, fn, slots, layouts, needs, work, out, shape, dtype, target, combine)
    elif sess.runtime == "dask":
        _on_dask(sess, fn, slots, needs, work, out, shape, dtype, target, combine)
    else:
        _local(sess, fn, slots, needs, work, out, shape, dtype, target, combine)
    sess.kernels_run += 1
    sess.maps_run += 1


def _replicated(ndim: int) -> str:
    names = "abcdefghijklmnopqrstuvwxyz"[:ndim]
    return f"{names} -> *"


def _placed(sess: Any, name: str, machine: Any) -> Layout:
    """Value ``name``'s layout, placed first (in blocks of its first axis) when it was only
    put: placing is not moving."""
    held = sess.values[name]
    if held.layout is None or (sess.runtime == "dask" and isinstance(held.data, np.ndarray)):
        lay = held.layout or layout_for(name, held.shape, held_dist(len(held.shape)), machine)
        sess._input(name, lay)
    lay = held.layout
    if lay.nprocs != machine.size:
        # held over another machine (a value of another program): read it over this one
        lay = layout_for(name, held.shape, held_dist(len(held.shape)), machine)
        sess._input(name, lay)
    return lay


def _sources(lay: Layout, p: int) -> list[tuple[Box, int]]:
    """The distinct blocks of ``lay`` and the processor ``p`` reads each from: itself where
    it holds that block, else its lowest holder."""
    own = lay.boxes[p]
    return [(b, p if own == b else q) for b, q in lay.blocks]


def _moved(layouts: list[Layout], needs: dict[int, list[Box | None]], work: Sequence[Work]) -> int:
    """Words processors read and do not hold (each processor's needs once)."""
    words = 0
    for p in sorted({p for _, p in work}):
        for lay, need in zip(layouts, needs[p], strict=True):
            if need is None or (box_is_empty(need) and need):
                continue
            own = lay.boxes[p]
            have = 0 if own is None else _size(box_intersect(own, need) if need else ())
            words += _size(need) - have
    return words


def _local(
    sess: Any,
    fn: Callable[..., Any],
    slots: Sequence[str],
    needs: dict[int, list[Box | None]],
    work: Sequence[Work],
    out: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    target: Layout,
    combine: Callable[[list[Any]], Any] | None,
) -> None:
    """Every block in this process: the values are whole arrays, cut by view."""
    from distal.runtime.local import side_by_side
    from distal.session import Held

    data = [np.asarray(sess.values[name].data) for name in slots]

    def unit(item: Work) -> Any:
        box, p = item
        arrays = [
            None if need is None else d[box_index(need, _whole(d.shape))] if need else d
            for d, need in zip(data, needs[p], strict=True)
        ]
        return fn(arrays, box)

    big = sum(d.size for d in data) >= 1 << 16 and len(work) > 1
    results = side_by_side(unit, list(work)) if big else [unit(w) for w in work]
    if combine is not None:
        value = np.asarray(combine(results), dtype=dtype)
    else:
        value = np.empty(shape, dtype)
        for (box, _), r in zip(work, results, strict=True):
            value[box_index(box, _whole(shape))] = r
    sess.values[out] = Held(shape, np.dtype(dtype), target, value)


def _on_mpi(
    sess: Any,
    fn: Callable[..., Any],
    slots: Sequence[str],
    layouts: list[Layout],
    needs: dict[int, list[Box | None]],
    work: Sequence[Work],
    out: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    target: Layout,
    combine: Callable[[list[Any]], Any] | None,
) -> None:
    """Each rank its own unit: the pieces it reads and does not hold come in one
    all-to-all; partials are all-gathered and combined on every rank alike."""
    from distal.runtime.mpi.session import allgather_objects, alltoall_objects
    from distal.session import Held, HeldBlock

    rank, size = sess.rank, sess.nranks
    comm = sess.options.get("comm")
    blocks = [sess.values[name].data for name in slots]
    # what this rank sends each other rank: the pieces of its blocks that rank reads
    sends: list[list[tuple[int, Box, np.ndarray]]] = [[] for _ in range(size)]
    for q in range(size):
        if q == rank or q not in needs:
            continue
        for k, (lay, need) in enumerate(zip(layouts, needs[q], strict=True)):
            if need is None:
                continue
            for b, src in _sources(lay, q):
                piece = box_intersect(b, need) if need else ()
                if src != rank or (piece and box_is_empty(piece)):
                    continue
                sends[q].append((k, piece, np.ascontiguousarray(blocks[k].read_block(piece))))
    got = alltoall_objects(sends, comm)
    mine = [u for u in work if u[1] == rank]
    result: Any = None
    if mine:
        box = mine[0][0]
        arrays: list[Any] = []
        for k, (lay, need) in enumerate(zip(layouts, needs[rank], strict=True)):
            if need is None:
                arrays.append(None)
                continue
            buf = np.empty(box_shape(need) if need else (), blocks[k].dtype)
            for b, src in _sources(lay, rank):
                piece = box_intersect(b, need) if need else ()
                if src == rank and not (piece and box_is_empty(piece)):
                    buf[box_index(piece, need)] = blocks[k].read_block(piece)
            for src_rank in range(size):
                for kk, piece, arr in got[src_rank]:
                    if kk == k:
                        buf[box_index(piece, need)] = arr
            arrays.append(buf)
        result = fn(arrays, box)
    if combine is not None:
        parts = allgather_objects([] if result is None else [result], comm)
        value = np.asarray(combine([x for r in parts for x in r]), dtype=dtype)
        whole = _whole(shape)
        sess.values[out] = Held(
            shape, np.dtype(dtype), target, HeldBlock(shape, dtype, whole, value)
        )
        return
    box = target.boxes[rank]
    arr = None
    if box is not None:
        arr = np.asarray(result, dtype=dtype) if mine else np.empty(box_shape(box), dtype)
    sess.values[out] = Held(shape, np.dtype(dtype), target, HeldBlock(shape, dtype, box, arr))


def _on_dask(
    sess: Any,
    fn: Callable[..., Any],
    slots: Sequence[str],
    needs: dict[int, list[Box | None]],
    work: Sequence[Work],
    out: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    target: Layout,
    combine: Callable[[list[Any]], Any] | None,
) -> None:
    """A task per unit over the cuts of the held blocks it reads (made on the workers);
    partials combined by one more task (here, under ``verify=``: checked partials)."""
    from distal.runtime.elastic.held import WorkerValue
    from distal.session import Held, Inline

    client = sess.client
    values = [sess.values[name].data for name in slots]
    jobs = []
    for box, p in work:
        parts = []
        for v, need in zip(values, needs[p], strict=True):
            if need is None:
                parts.append(None)
            elif isinstance(v, WorkerValue):
                parts.append(v.part(need))
            else:  # a 0-d value held here (Inline) or an array not placed
                arr = np.asarray(v.array if isinstance(v, Inline) else v)
                parts.append(arr[box_index(need, _whole(arr.shape))] if need else arr)
        jobs.append((block_task, (fn, parts, box)))
    verified = sess.options.get("verify", 1) != 1
    if verified:
        futures = sess._twice(jobs, defer=combine is None)
    else:
        futures = [client.submit(f, *a, pure=False) for f, a in jobs]
    if combine is not None:
        if verified:
            parts = client.gather(futures)
            sess._count_driver(sum(np.size(x) for x in parts))
            value = np.asarray(combine(parts), dtype=dtype)
            sess.values[out] = Held(shape, np.dtype(dtype), target, value)
            return
        f = client.submit(combine_task, combine, futures, dtype, pure=False)
        whole = _whole(shape)
        wv = WorkerValue(shape, np.dtype(dtype), {whole: f}, client, sess._count_driver)
        sess.values[out] = Held(shape, np.dtype(dtype), target, wv)
        return
    blocks = {}
    for (box, _), f in zip(work, futures, strict=True):
        blocks[box] = client.submit(as_dtype, f, dtype, pure=False)
    if not blocks:  # an empty result: one empty block
        whole = _whole(shape)
        blocks[whole] = client.submit(np.empty, shape, dtype, pure=False)
    value = WorkerValue(shape, np.dtype(dtype), blocks, client, sess._count_driver)
    sess.values[out] = Held(shape, np.dtype(dtype), target, value)


def block_task(fn: Callable[..., Any], arrays: list[Any], box: Box) -> Any:
    """One unit of a block operation (run on a worker)."""
    return fn(list(arrays), box)


def combine_task(combine: Callable[[list[Any]], Any], parts: list[Any], dtype: Any) -> Any:
    """The partials of a block operation combined (run on a worker)."""
    return np.asarray(combine(list(parts)), dtype=dtype)


def as_dtype(x: Any, dtype: Any) -> np.ndarray:
    return np.asarray(x, dtype=dtype)


__all__ = ["run_block"]
