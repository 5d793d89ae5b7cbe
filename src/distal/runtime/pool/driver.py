"""One run of a plan on the pool: units as data, blocks by digest, verified results, the sum.

A run cuts the plan into the elastic runtime's units (:func:`~distal.runtime.elastic.units.
decompose`; a unit that alone makes a whole output block is that block), writes each unit's
program (:mod:`.program`) and names its input blocks by content digest, and hands them to
the run loop (:mod:`.engine`), which returns every unit's verified result. The coordinator
then adds the units' partials into the output blocks itself, in the plan's fixed order
(the elastic runtime's reduction, :func:`~distal.runtime.elastic.tasks._sum_block`), so
the bits do not depend on which volunteer answered first, and counts the plan's traffic
from the blocks each unit was handed (``Result.stats``): everything a volunteer could lie
about is either verified or counted here.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.plan.ir import RecvFinal
from distal.plan.region import Entries, shape, words
from distal.plan.stats import Stats
from distal.runtime.elastic import tasks
from distal.runtime.elastic.submit import sent_to
from distal.runtime.elastic.units import Span, Unit, block_name, block_region, decompose, fuse
from distal.runtime.pool import policy, program
from distal.runtime.pool.engine import Engine, Summary, Task
from distal.runtime.pool.wire import BlockRef, Expect, array_bytes, array_digest
from distal.runtime.source import is_block_source, read_block
from distal.typing import box_index, box_intersect, box_is_empty, box_volume

STATS_NOTE = (
    "Result.stats counts the plan's messages between its virtual processors, from the blocks "
    "the coordinator handed each unit and the partials it added; what crossed the network is "
    "Result.extra['summary'].bytes_sent / bytes_received"
)


@dataclass(frozen=True)
class Job:
    """What a run needs from the compiled kernel (nothing that calls back into it)."""

    plan: Any
    kernels: tuple[Any, ...]
    dtypes: Mapping[str, np.dtype]


def _ref_of(data: memoryview, dtype: np.dtype, shp: tuple[int, ...]) -> BlockRef:
    return BlockRef(array_digest(dtype, shp, data), np.dtype(dtype), shp)


class PoolDriver:
    """One run (see the module docstring)."""

    def __init__(self, job: Job, data: Mapping[str, Any], granularity: str | int = "flush",
                 seed: int | None = None) -> None:  # fmt: skip
        self.job, self.data = job, data
        self.plan = job.plan
        self.granularity = granularity
        self.out_dtype = np.dtype(job.dtypes[self.plan.output])
        self.out_pl = self.plan.placements.get(self.plan.output)
        self.ctx = tasks.Ctx("", tuple(job.kernels), self.out_dtype, None, worker=lambda: None)
        self.seed = seed if seed is not None else int.from_bytes(hashlib.blake2b(
            str(time.time_ns()).encode(), digest_size=8).digest(), "little")  # fmt: skip
        self.arrays: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
        self.plan_key = tasks.plan_key(self.plan)  # checksums of its units kept by name

    # -- blocks ------------------------------------------------------------------------------

    def block(self, t: str, idx: tuple[int, ...]) -> np.ndarray:
        """Input block ``(t, idx)`` as a little-endian C-order array (made once per run)."""
        key = (t, idx)
        got = self.arrays.get(key)
        if got is None:
            region = block_region(self.plan, t, idx)
            dtype = np.dtype(self.job.dtypes[t]).newbyteorder("<")
            x = self.data[t]
            if isinstance(region, Entries):
                got = np.ascontiguousarray(np.asarray(x.vals, dtype=dtype)[region.positions])
            elif is_block_source(x):  # read here: the coordinator sends what it read
                got = np.ascontiguousarray(read_block(t, x, region, dtype))
            else:
                part = np.asarray(x[box_index(region, ((0, 0),) * len(region))], dtype=dtype)
                # a contiguous block (a row block) is used in place; a 0-d one stays 0-d
                got = np.ascontiguousarray(part) if part.ndim else np.array(part)
            self.arrays[key] = got
        return got

    def holders(self, u: Unit) -> list[Any]:
        out = []
        for t, idx in u.needs:
            region = block_region(self.plan, t, idx)
            out.append(region if isinstance(region, tuple) else Span(shape(region)))
        return out

    def output_blocks(self) -> dict[tuple[int, ...], Any]:
        plan = self.plan
        if self.out_pl is None:
            regions = plan.owned[plan.output]
            return {(q,): r for q, r in enumerate(regions) if r is not None and words(r) > 0}
        pl = self.out_pl
        return {
            idx: pl.block_box(idx)
            for idx in sorted(plan.primary)
            if not (pl.block_box(idx) and box_is_empty(pl.block_box(idx)))
        }

    # -- the run -----------------------------------------------------------------------------

    def prepare(self) -> tuple[list[Task], list[str], tuple[str, ...]]:
        """The run's tasks, their locality order and the output blocks to deliver (by
        name), for :meth:`Engine.run` (with :meth:`reduce`)."""
        self.blocks = self.output_blocks()
        units = fuse(decompose(self.plan, self.granularity), self.blocks)
        self.units = {u.name: u for u in units}
        owners = {idx: (idx[0] if self.out_pl is None else self.plan.primary[idx])
                  for idx in self.blocks}  # fmt: skip
        contrib: dict[tuple[int, ...], list[tuple[Unit, Any]]] = defaultdict(list)
        for u in units:
            for idx, piece in u.pieces:
                if idx in self.blocks:
                    contrib[idx].append((u, piece))
        for idx, cs in contrib.items():
            cs.sort(key=lambda c: (c[0].proc != owners.get(idx), c[0].first, c[0].proc, c[0].name))
        self.contrib = contrib
        self.names = {block_name(idx): idx for idx in self.blocks}
        dtypes = {t: np.dtype(d) for t, d in self.job.dtypes.items() if t in self.plan.inputs}
        out: list[Task] = []
        grid = _grid(self.plan)
        for n, u in enumerate(units):
            holders = self.holders(u)
            raw = program.encode(u, tuple(self.job.kernels), self.out_dtype, dtypes, holders)
            pview = memoryview(raw)
            pref = _ref_of(pview, np.dtype("|u1"), (len(raw),))
            payloads: dict[str, memoryview] = {pref.digest: pview}
            refs = []
            arrays = []
            for t, idx in u.needs:
                a = self.block(t, idx)
                data = array_bytes(a)
                ref = _ref_of(data, a.dtype, a.shape)
                payloads[ref.digest] = data
                refs.append(ref)
                arrays.append(a)
            blocks_for = [(t, h, a) for (t, _), h, a in zip(u.needs, holders, arrays, strict=True)]
            outputs = tuple(block_name(idx) for idx, _ in u.pieces if idx in self.blocks)
            out.append(
                Task(
                    uid=u.name, program=pref, blocks=tuple(refs),
                    out=Expect(self.out_dtype.newbyteorder("<"), shape(u.out_box)),
                    work=tasks.planned_iterations(u), payloads=payloads,
                    check=self._checker(u, blocks_for, n), outputs=outputs, final=u.final,
                )
            )  # fmt: skip
        order = [u.name for u in sorted(units, key=lambda u: (policy.morton(grid(u.proc)),
                                                              u.first, u.name))]  # fmt: skip
        self.traffic: list[tuple[int, int, int, int]] = []
        return out, order, tuple(self.names)

    def _checker(self, u: Unit, blocks: list, n: int) -> Any:
        def check(arr: np.ndarray, attempt: int) -> Any:
            # each attempt draws its own vectors, from a seed the volunteers never see
            seed = (self.seed + 0x9E3779B97F4A7C15 * (n + 1) + 7919 * attempt) % (1 << 63)
            return tasks.check(self.job.kernels, self.out_dtype, u, blocks, arr, seed,
                               plan_key=self.plan_key)  # fmt: skip

        return check

    def reduce(self, name: str, parts: Mapping[str, np.ndarray]) -> np.ndarray:
        """Output block ``name`` summed from its units' accepted partials, in the plan's
        order (the reducer's own piece first, then by step and processor)."""
        idx = self.names[name]
        region = self.blocks[idx]
        cs = [
            (parts[u.name], u.out_box if isinstance(piece, tuple) else None, piece, u.proc,
             sent_to(u, piece))
            for u, piece in self.contrib.get(idx, [])
        ]  # fmt: skip
        holder = region if isinstance(region, tuple) else Span(shape(region))
        arr, traffic = tasks._sum_block(self.ctx, holder, cs)
        self.traffic.extend(traffic)
        return arr

    def run(self, engine: Engine, link_call: Any) -> tuple[np.ndarray, Stats, Summary]:
        """Run on the pool (``link_call`` runs a coroutine in the link's loop); the output
        (the whole array; a sparse output's stored values), the stats and the summary."""
        task_list, order, names = self.prepare()
        delivered, summary = link_call(engine.run(task_list, order, names, self.reduce))
        value, stats = self.finish(delivered, summary.held)
        return value, stats, summary

    def finish(self, delivered: Mapping[str, np.ndarray],
               held: Mapping[str, int] | None = None) -> tuple[np.ndarray, Stats]:  # fmt: skip
        """The output and the stats from every delivered block (``held``: what each unit
        held at its fullest, as its volunteer measured it)."""
        if self.out_pl is None:
            nnz = sum(words(r) for r in self.plan.owned[self.plan.output] if r is not None)
            value = np.zeros((int(nnz),), self.out_dtype)
        else:
            value = np.zeros(self.out_pl.shape, self.out_dtype)
        for name, idx in self.names.items():
            region = self.blocks[idx]
            arr = np.asarray(delivered[name], self.out_dtype)
            if isinstance(region, Entries):
                value[region.positions] = arr
            else:
                value[box_index(region, ((0, 0),) * len(region))] = arr
            u = self.units.get(name)
            if u is not None and u.final:
                for dst, piece in u.sends:
                    inter = box_intersect(piece, region) if region else piece
                    self.traffic.append((u.proc, dst, box_volume(inter), 0))
            for src, dst, rbox in self._replicas():  # the plan's copies of finished blocks
                if isinstance(region, tuple):
                    inter = box_intersect(rbox, region) if region else rbox
                    if not box_is_empty(inter):
                        self.traffic.append((src, dst, box_volume(inter), 0))
        return value, self._stats(held or {})

    def _replicas(self) -> list[tuple[int, int, Any]]:
        got = getattr(self, "_replica_list", None)
        if got is None:
            got = self._replica_list = [
                (op.src, p, op.box)
                for p, prog in enumerate(self.plan.programs)
                for op in prog
                if isinstance(op, RecvFinal)
            ]
        return got

    def _stats(self, held: Mapping[str, int]) -> Stats:
        plan = self.plan
        stats = Stats.zeros(plan.nprocs, plan.machine.nlevels if plan.machine else 1)
        for p in range(plan.nprocs):
            stats.held(p, plan.owned_words(p))
        for name, n in held.items():  # beside its processor's owned blocks
            u = self.units.get(name)
            if u is not None:
                stats.held(u.proc, plan.owned_words(u.proc) + int(n))
        for u in self.units.values():
            blocks_u = [(t, h, self.block(t, idx)) for (t, idx), h in
                        zip(u.needs, self.holders(u), strict=True)]  # fmt: skip
            for src, dst, n, iw in tasks._received(u, blocks_u, tasks._by_tensor(blocks_u)):
                stats.record(src, dst, n, plan.level_of(src, dst), iw)
            stats.iterations[u.proc] += tasks.planned_iterations(u)
        for src, dst, n, iw in self.traffic:
            stats.record(src, dst, n, plan.level_of(src, dst), iw)
        return stats


def _grid(plan: Any) -> Any:
    """Processor -> grid coordinates (the plan's machine), for the locality order."""
    m = getattr(plan, "machine", None)
    shp = tuple(getattr(m, "shape", ()) or ())
    if not shp or int(np.prod(shp)) != plan.nprocs:
        return lambda p: (p,)
    return lambda p: tuple(int(c) for c in np.unravel_index(p, shp))


__all__ = ["STATS_NOTE", "Job", "PoolDriver"]
