"""Hands units to Dask a window at a time, and each block's reduction once it can."""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from distal.runtime.elastic.tasks import Ctx, reduce_task
from distal.runtime.elastic.units import Unit, block_name
from distal.typing import Box

if TYPE_CHECKING:
    from distal.runtime.elastic.driver import Driver


class Feeder:
    """Hands units to Dask a window at a time, and each block's reduction once it can.

    Dask queues root tasks on the scheduler until a worker has a free thread, so a slow
    worker never hoards work; our units depend on input blocks, which would make Dask assign
    them all up front and rely on work stealing, which does not know one worker is slower.
    Keeping only ``window`` units submitted (default: twice the pool's threads, re-read as
    workers join or leave) restores that pull behaviour; Dask still chooses the worker.
    Units go in block order, so blocks finish (and are checkpointed) progressively.
    """

    def __init__(
        self,
        driver: Driver,
        ctx: Ctx,
        needed: list[Unit],
        pending: dict[tuple[int, ...], Box],
        present: set[str],
        finals: set[tuple[int, ...]],
    ) -> None:
        self.driver, self.ctx, self.present = driver, ctx, present
        contrib: dict[tuple[int, ...], list[tuple[Unit, Box]]] = defaultdict(list)
        for u in sorted(needed, key=lambda u: (u.first, u.proc, u.name)):
            for idx, piece in u.pieces:
                if idx in pending:
                    contrib[idx].append((u, piece))
        self.queue: list[Unit] = []
        queued: set[str] = set()
        for idx in sorted(pending):
            for u, _ in contrib[idx]:
                if u.name not in queued:
                    queued.add(u.name)
                    self.queue.append(u)
        self.queue.reverse()  # pop() from the end
        self.reduces = {idx: box for idx, box in pending.items() if idx not in finals}
        self.contrib = contrib
        self.waiting = {idx: len({u.name for u, _ in contrib[idx]}) for idx in self.reduces}
        self.unit_f: dict[str, Any] = {}
        self.users: dict[str, int] = defaultdict(int)
        for idx in self.reduces:
            for u, _ in contrib[idx]:
                self.users[u.name] += 1
        self.block_of: dict[str, tuple[int, ...]] = {}
        self.inflight: set[str] = set()
        self.count = 0

    def feed(self, window: int) -> list[Any]:
        """Submit units up to the window, and every reduction whose units are all submitted."""
        out: list[Any] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "large graph": array blocks travel in their tasks
            ready = [idx for idx, w in self.waiting.items() if w == 0]
            while self.queue and len(self.inflight) < window:
                u = self.queue.pop()
                f = self.driver.submit_unit(self.ctx, u, self.count, self.present)
                self.count += 1
                if self.users[u.name]:
                    self.unit_f[u.name] = f
                self.inflight.add(f.key)
                out.append(f)
                if u.final:
                    self.block_of[f.key] = u.pieces[0][0]
                for idx, _ in u.pieces:
                    if idx in self.waiting:
                        self.waiting[idx] -= 1
                        if self.waiting[idx] == 0:
                            ready.append(idx)
            for idx in ready:
                del self.waiting[idx]
                contribs = [
                    (self.unit_f[u.name], u.out_box, piece) for u, piece in self.contrib[idx]
                ]
                f = self.driver.client.submit(
                    reduce_task,
                    self.ctx,
                    block_name(idx),
                    self.reduces[idx],
                    contribs,
                    key=f"distal-block-{self.driver.nonce}-{'.'.join(map(str, idx))}",
                    pure=False,
                )
                self.block_of[f.key] = idx
                out.append(f)
                # Dask keeps a unit's result while a submitted reduction needs it; we hold
                # the future only until every reduction using it is submitted.
                for u, _ in self.contrib[idx]:
                    self.users[u.name] -= 1
                    if self.users[u.name] == 0:
                        del self.unit_f[u.name]
        return out

    def finished(self, key: str) -> None:
        """A task is done: its slot in the window is free."""
        self.inflight.discard(key)


__all__ = ["Feeder"]
