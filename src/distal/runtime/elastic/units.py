"""A plan as units of work and output blocks: what the elastic runtime hands to Dask.

Pure functions of the plan (no Dask), so they are unit-testable and the checkpoint names
they produce are stable across runs and machines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from distal.plan.ir import Compute, Fetch, Flush, OpenOutput, Plan
from distal.plan.stats import ops_by_step
from distal.typing import Box

GRANULARITIES = ("flush", "step")


@dataclass(frozen=True, slots=True)
class Unit:
    """The work of virtual processor ``proc`` into one output buffer, over some steps.

    Attributes:
        name: checkpoint entry name, stable across runs (``part-p<proc>-s<first>-<last>``).
        proc: the plan's processor.
        out_box: the output buffer (the plan's ``OpenOutput`` box).
        steps: per step: the input buffers ``(tensor, box)`` in use, and the compute boxes.
        needs: the input blocks ``(tensor, block index)`` the buffers are cut from.
        pieces: ``(output block index, piece)``: where the partial goes.
        final: the unit alone computes the whole of one output block, so its result *is*
            that block (named ``block-...``; no separate reduction task or partial file).
        receives: the plan's fetches this unit is the first to use: ``(tensor, pieces)``,
            each piece ``(source processor, box)`` coming from another processor. The
            unit counts the elements of these pieces it actually cut from the blocks it
            was handed: that is the fetch traffic ``Result.stats`` reports.
        sends: the plan's ``Flush`` sends ``(destination, piece)`` of the output buffer,
            on the last unit of the buffer only (the processor sends its sum once); the
            task that receives the unit's partial counts them.
    """

    name: str
    proc: int
    first: int
    out_box: Box
    steps: tuple[tuple[tuple[tuple[str, Box], ...], tuple[Box, ...]], ...]
    needs: tuple[tuple[str, tuple[int, ...]], ...]
    pieces: tuple[tuple[tuple[int, ...], Box], ...]
    final: bool = False
    receives: tuple[tuple[str, tuple[tuple[int, Box], ...]], ...] = ()
    sends: tuple[tuple[int, Box], ...] = ()


@dataclass
class _Segment:
    """One output buffer of a processor: its steps and the ``Flush`` sends that end it."""

    out_box: Box
    steps: list[tuple[int, Any, tuple[Box, ...], Any]] = field(default_factory=list)
    sends: tuple[tuple[int, Box], ...] = ()


def _chunks(items: list[Any], granularity: str | int) -> list[list[Any]]:
    if granularity == "flush":
        return [items] if items else []
    size = 1 if granularity == "step" else int(granularity)
    return [items[i : i + size] for i in range(0, len(items), size)]


def decompose(plan: Plan, granularity: str | int = "flush") -> list[Unit]:
    """The units of a plan, in (processor, step) order.

    ``granularity``: ``"flush"`` (one unit per output buffer: everything a processor adds
    up before flushing), ``"step"`` (one per processor and step) or an integer ``k`` (up to
    ``k`` steps of one output buffer). Finer units cost more partial sums; coarser ones
    leave Dask less to balance. For more parallelism, compile for more virtual processors.

    Only ``Fetch`` of inputs, ``OpenOutput``, ``Compute`` and ``Flush`` matter: a unit cuts
    its buffers straight from the input blocks whatever the routing; routing trees
    (``Forward``/``Combine``) only change which processor each fetched piece and each
    partial sum is counted from (the sources in ``Fetch.pieces``, the destinations in
    ``Flush.sends``), exactly as the plan moves them.
    """
    out_pl = plan.placements[plan.output]
    units: list[Unit] = []
    for p in range(plan.nprocs):
        buffers: dict[str, Box | None] = {}
        # fetches not yet used by a Compute: the first unit using one receives it
        unclaimed: dict[str, tuple[tuple[int, Box], ...]] = {}
        segments: list[_Segment] = []
        for s, ops in enumerate(ops_by_step(plan, p)[: plan.nsteps]):
            for op in ops:
                if isinstance(op, Fetch) and op.tensor in plan.inputs:
                    buffers[op.tensor] = op.box
                    remote = tuple((src, b) for src, b in op.pieces if src != p)
                    if op.box is None or not remote:
                        unclaimed.pop(op.tensor, None)
                    else:
                        unclaimed[op.tensor] = remote
                elif isinstance(op, OpenOutput):
                    segments.append(_Segment(op.box))
                elif isinstance(op, Compute) and segments:
                    bufs = tuple(sorted((t, b) for t, b in buffers.items() if b is not None))
                    recv = tuple(sorted(unclaimed.items()))
                    unclaimed.clear()
                    segments[-1].steps.append((s, bufs, op.boxes, recv))
                elif isinstance(op, Flush) and segments:
                    segments[-1].sends = op.sends
        for seg in segments:
            pieces = tuple(out_pl.split(seg.out_box))
            chunks = _chunks(seg.steps, granularity)
            for n, chunk in enumerate(chunks):
                needs: set[tuple[str, tuple[int, ...]]] = set()
                for _, bufs, _, _ in chunk:
                    for t, b in bufs:
                        needs.update((t, idx) for idx, _ in plan.placements[t].split(b))
                units.append(
                    Unit(
                        name=f"part-p{p}-s{chunk[0][0]}-{chunk[-1][0]}",
                        proc=p,
                        first=chunk[0][0],
                        out_box=seg.out_box,
                        steps=tuple((bufs, boxes) for _, bufs, boxes, _ in chunk),
                        needs=tuple(sorted(needs)),
                        pieces=pieces,
                        receives=tuple(r for _, _, _, recv in chunk for r in recv),
                        sends=seg.sends if n == len(chunks) - 1 else (),
                    )
                )
    return units


def fuse(units: list[Unit], blocks: Mapping[tuple[int, ...], Box]) -> list[Unit]:
    """Mark units that alone make a whole output block (e.g. a GEMM owner's direct sum).

    Such a unit's result is the finished block: it is checkpointed under the block's name
    and needs no reduction task, which halves the tasks and files of owner-computes plans.
    """
    contributors: dict[tuple[int, ...], list[Unit]] = defaultdict(list)
    for u in units:
        for idx, _ in u.pieces:
            contributors[idx].append(u)
    out = []
    for u in units:
        if len(u.pieces) == 1:
            idx, piece = u.pieces[0]
            if idx in blocks and len(contributors[idx]) == 1 and piece == u.out_box == blocks[idx]:
                u = replace(u, name=block_name(idx), final=True)
        out.append(u)
    return out


def block_name(idx: tuple[int, ...]) -> str:
    """Checkpoint entry name of output block ``idx``."""
    return "block-" + "-".join(str(i) for i in idx) if idx else "block"


__all__ = ["GRANULARITIES", "Unit", "block_name", "decompose", "fuse"]
