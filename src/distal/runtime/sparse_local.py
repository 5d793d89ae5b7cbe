"""A bound sparse kernel on the local runtime: one thread per processor, messages in memory.

Every value and coordinate that crosses between processors is a real array handed from
the sender's data to the receiver's inbox; the stats count those arrays as they are handed
over, so ``Result.stats`` is measured, and it equals the bound plan's prediction.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from distal.plan.sparse import SparsePlan
from distal.runtime.result import Result
from distal.runtime.sparse_exec import (
    Compute,
    assemble,
    new_stats,
    owned_data,
    owned_words,
    partial,
    payload,
    reduce_output,
    words_of,
)

_POOL: list[ThreadPoolExecutor] = []


def _pool() -> ThreadPoolExecutor:
    """The threads processors run on, one per core, made once per process."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(max(1, os.cpu_count() or 1), "distal-sparse"))
    return _POOL[0]


def run(plan: SparsePlan, computes: list[Compute], inputs: Mapping[str, Any]) -> Result:
    """Run every processor's part of ``plan`` on ``inputs`` (patterns already checked)."""
    t0 = time.perf_counter()
    P = plan.nprocs
    owned = [owned_data(plan, p, inputs) for p in range(P)]
    stats = new_stats(P)
    held = [owned_words(plan, o) for o in owned]
    inbox: list[dict[tuple[str, int], list[list[np.ndarray]]]] = [
        defaultdict(list) for _ in range(P)
    ]
    for pp in plan.procs:
        p = pp.p
        for need in pp.needs.values():
            for pc in need.pieces:
                if pc.peer == p:
                    continue
                arrays = payload(plan, owned[pc.peer], need, pc)
                w, iw = words_of(arrays)
                if not inbox[p][(need.tensor, pc.peer)]:
                    stats.messages_received[p] += 1
                    stats.messages_sent[pc.peer] += 1
                inbox[p][(need.tensor, pc.peer)].append(arrays)
                stats.words_received[p] += w
                stats.words_sent[pc.peer] += w
                stats.index_words_received[p] += iw
                stats.index_words_sent[pc.peer] += iw
                held[p] += w
        stats.iterations[p] = pp.iterations
    pool = _pool()  # one pool for every run: starting threads costs more than a small kernel
    ys = list(pool.map(lambda p: computes[p].run(owned[p], inbox[p]), range(P)))
    partials: list[dict[int, list[np.ndarray]]] = [defaultdict(list) for _ in range(P)]
    for pp in plan.procs:
        p = pp.p
        for pc in pp.out.pieces:
            if pc.peer == p:
                continue
            part = partial(pp, ys[p], pc)
            if not partials[pc.peer][p]:
                stats.messages_sent[p] += 1
                stats.messages_received[pc.peer] += 1
            partials[pc.peer][p].append(part)
            stats.words_sent[p] += part.size
            stats.words_received[pc.peer] += part.size
            held[p] += part.size
            held[pc.peer] += part.size
    blocks = dict(
        enumerate(pool.map(lambda p: reduce_output(plan, p, ys[p], partials[p]), range(P)))
    )
    stats.peak_words = held
    # one machine level: every word received crosses level 0 (as in the plan's stats)
    stats.level_words_received = [list(stats.words_received)]
    value = assemble(plan, blocks)
    return Result(value, stats, time.perf_counter() - t0)
