"""What the ``"dask"`` runtime does with a session's values: held on the workers.

A dense value is held as one Dask future per block of its layout
(:class:`~distal.runtime.elastic.held.WorkerValue`): a value ``put`` is sent out block by
block when first placed, a kernel's inputs are those futures (cut on the workers when the
kernel reads other boxes), its output blocks stay where they were computed, and a
redistribution cuts the blocks anew on the workers. A 0-d value held here (a verified
session's ``alpha``) is handed to the tasks in their arguments (:class:`Inline`). Element-wise
maps and fused sets run one task per block, on the workers. ``driver_words`` counts every
element that comes back through the driver.

Under ``verify=`` every block a map, a fused set or a cut makes is computed on one trusted
worker and computed again and compared on another (these passes do one operation per word
they read, so no cheaper check exists); where the two disagree a third decides and the
worker it contradicts is excluded from the session's later work. The decisions are the
elastic runtime's sans-IO :class:`~distal.runtime.elastic.twice.Twice`; this module submits
the tasks it names and reports their verdicts. A map's checks are left
running (:class:`Unsettled`) and read at the next operation that reads its blocks
(:meth:`HeldOnWorkers.settle`).

This module never imports ``distributed``: it works through the runtime's client.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.distribution.layout import Layout
from distal.runtime.elastic import held as held_tasks
from distal.runtime.elastic.events import Fail
from distal.runtime.elastic.held import WorkerValue
from distal.runtime.elastic.tasks import VerificationFailed
from distal.runtime.elastic.twice import Assign, Judge, Judged, Keep, Twice, Verdict, pairs_of
from distal.runtime.executable import Executable
from distal.runtime.local_runtime import added, content
from distal.runtime.source import read_block
from distal.typing import Box, box_index, box_shape


@dataclass(frozen=True)
class Inline:
    """A 0-d value held in this process, handed to a map's or fused set's tasks inside
    their arguments (a word) rather than placed on a worker first (a task of its own):
    ``part`` is the value, whatever the box. It is a block source too, for a kernel run."""

    array: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    def part(self, box: Box, dtype: Any = None) -> np.ndarray:
        return self.array

    def read_block(self, box: Box) -> np.ndarray:
        return self.array

    def recut(self, boxes: Any) -> Inline:
        return self


@dataclass
class Unsettled:
    """Checks :meth:`HeldOnWorkers._twice` left running (``defer``): the jobs, their
    decisions (``twice``), their results' futures, the check task and item that is each
    checked job's verdict; ``repair(n, future)`` puts the result kept for job ``n`` where
    the wrong one was (set by the operation that made values of the results)."""

    twice: Twice
    jobs: list[tuple[Any, tuple]]
    futures: dict[int, Any]
    verdict_of: dict[int, tuple[Any, int]]
    partials: bool  # a verdict comes with the checker's partial sums: ``(ok, sums)``
    repair: Any = None


def _on(worker: str) -> dict[str, Any]:
    """Submit keywords pinning a task to ``worker``."""
    return {"workers": [worker], "allow_other_workers": False, "pure": False}


def _raise_failed(todo: Sequence[Any], verify: Any) -> None:
    """A ``Fail`` among the decisions ends the operation: no agreement can be reached."""
    for ins in todo:
        if isinstance(ins, Fail):
            raise VerificationFailed(f"verify={verify!r}: {ins.message}")


def block_task(fn: Any, arrays: list[Any], box: Box) -> Any:
    """One unit of a block operation of the arrays front (run on a worker)."""
    return fn(list(arrays), box)


def combine_task(combine: Any, parts: list[Any], dtype: Any) -> Any:
    """A block operation's partials combined in processor order (run on a worker)."""
    return np.asarray(combine(list(parts)), dtype=dtype)


def as_dtype(x: Any, dtype: Any) -> np.ndarray:
    return np.asarray(x, dtype=dtype)


def _whole(shape: Sequence[int]) -> Box:
    return tuple((0, int(n)) for n in shape)


class HeldOnWorkers:
    """The held-value half of the Dask runtime (see the module docstring). The runtime
    gives ``client``, ``parsed`` (its options), ``trust`` and ``excluded``."""

    client: Any
    parsed: Any
    trust: Any
    excluded: set[str]

    def _start_values(self) -> None:
        #: elements of values that crossed between the driver and the workers after placement
        self.driver_words = 0
        #: under ``verify=``: map blocks and cuts of held values computed twice and compared
        self.maps_checked = 0
        self.cuts_checked = 0
        #: kernel runs made again because a block they read failed its check after they
        #: started (the check was read once they had finished)
        self.runs_redone = 0
        self._unsettled: list[Unsettled] = []
        self._pool_seen: tuple[float, set[str]] | None = None

    @property
    def verified(self) -> bool:
        return self.parsed.verify != 1

    def _count(self, n: int) -> None:
        self.driver_words += int(n)

    def _value(self, shape: tuple[int, ...], dtype: Any, blocks: dict[Box, Any]) -> WorkerValue:
        """A held value of futures made here (metered, its cuts checked under ``verify=``)."""
        checked = self._checked_cut if self.verified else None
        return WorkerValue(tuple(shape), np.dtype(dtype), blocks, self.client, self._count, checked)

    def adopt(self, value: Any) -> Any:
        """A kernel's kept output: metered and checked as the values made here."""
        if isinstance(value, WorkerValue):
            value.meter = self._count
            value.checked = self._checked_cut if self.verified else None
        return value

    # -- the session's operations -------------------------------------------------------------

    def place(self, name: str, value: Any, layout: Layout) -> Any:
        if isinstance(value, WorkerValue | Inline):
            return value
        dtype = np.dtype(getattr(value, "dtype", np.float64))
        whole = tuple((0, n) for n in layout.shape)
        arr = value if isinstance(value, np.ndarray) else read_block(name, value, whole, dtype)
        if not layout.shape:
            return Inline(np.asarray(arr))
        held = WorkerValue.place(self.client, arr, layout.boxes, self._count)
        held.checked = self._checked_cut if self.verified else None
        return held

    def move(self, held: Any, source: Layout, target: Layout, copy: Executable) -> Any:
        self.settle()  # (a cut copies blocks: they must have passed)
        return held.recut(target.boxes)  # cut anew on the workers

    def gather(self, name: str, held: Any, layout: Layout | None) -> np.ndarray:
        self.settle()  # nothing leaves the workers before its check has passed
        if isinstance(held, WorkerValue):
            return held.gather()  # counted in driver_words
        if isinstance(held, Inline):
            return np.array(held.array)
        shape = tuple(int(n) for n in held.shape)
        return read_block(name, held, tuple((0, n) for n in shape), held.dtype)

    def holders(self, held: Any) -> dict[Any, list[str]]:
        self.settle()
        return held.holders() if isinstance(held, WorkerValue) else {}

    def map(
        self, fn: Any, operands: Sequence[tuple[Any, Layout]], target: Layout, dtype: Any
    ) -> Any:
        """One task per distinct block of ``target``, over the operands' blocks of the
        processor that holds it, on the workers (each checked under ``verify=``)."""
        self.settle()
        dtype = np.dtype(dtype)
        jobs, boxes = [], []
        for box, p in target.blocks:  # each distinct block, its first processor
            parts = [x.part(lay.boxes[p]) for x, lay in operands]
            jobs.append((held_tasks.map_block, (fn, parts, box_shape(box), dtype)))
            boxes.append(box)
        if self.verified:
            futures = self._twice(jobs, defer=True)
        else:
            futures = [self.client.submit(f, *a, pure=False) for f, a in jobs]
        value = self._value(target.shape, dtype, dict(zip(boxes, futures, strict=True)))
        if self._unsettled and self._unsettled[-1].repair is None:  # (_twice's, deferred)

            def repair(n: int, good: Any) -> None:
                value.blocks[boxes[n]] = good
                value._cuts.clear()

            self._unsettled[-1].repair = repair
        return value

    def blocks(
        self,
        fn: Any,
        operands: Sequence[tuple[Any, Layout]],
        needs: Any,
        work: Sequence[tuple[Box, int]],
        target: Layout,
        dtype: Any,
        combine: Any = None,
    ) -> Any:
        """A task per unit over the cuts of the held blocks it reads (made on the workers);
        partials combined by one more task (here, from checked partials, under
        ``verify=``)."""
        self.settle()
        dtype = np.dtype(dtype)
        if combine is None:  # (one unit per distinct box)
            work = list({box: (box, p) for box, p in work}.values())
        jobs = []
        for box, p in work:
            parts: list[Any] = []
            for (x, _), need in zip(operands, needs[p], strict=True):
                if need is None:
                    parts.append(None)
                elif isinstance(x, WorkerValue):
                    parts.append(x.part(need))
                else:  # a 0-d value held here, or an array not sent out
                    arr = np.asarray(x.array if isinstance(x, Inline) else x)
                    parts.append(arr[box_index(need, _whole(arr.shape))] if need else arr)
            jobs.append((block_task, (fn, parts, box)))
        if self.verified:
            futures = self._twice(jobs, defer=combine is None)
        else:
            futures = [self.client.submit(f, *a, pure=False) for f, a in jobs]
        whole = _whole(target.shape)
        if combine is not None:
            if self.verified:
                parts = self.client.gather(futures)
                self._count(sum(int(np.size(x)) for x in parts))
                return np.asarray(combine(parts), dtype=dtype)
            f = self.client.submit(combine_task, combine, futures, dtype, pure=False)
            return self._value(target.shape, dtype, {whole: f})
        blocks = {
            box: self.client.submit(as_dtype, f, dtype, pure=False)
            for (box, _), f in zip(work, futures, strict=True)
        }
        if not blocks:  # an empty result: one empty block
            blocks[whole] = self.client.submit(np.empty, target.shape, dtype, pure=False)
        return self._value(target.shape, dtype, blocks)

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
        """A task per distinct block of ``target`` over the operands' blocks of the
        processor holding it; each member's block picked from it, and a task per reduction
        adding the blocks' partial sums, all on the workers. Under ``verify=`` each block is
        computed on one trusted worker and again on another; the partial sums come here,
        checked, and are added here (a set without sums is not waited for: its verdicts are
        read at the next operation)."""
        self.settle()
        client = self.client
        where = [k for k, _, _ in operands]
        jobs = []
        for box, p in target.blocks:
            parts = [x.part(lay.boxes[p]) for _, x, lay in operands]
            jobs.append((box, (fn, nslots, where, parts, box_shape(box), list(elems))))
        checked: list[list[Any]] | None = None
        if self.verified:
            futures, checked = self._twice(
                [(held_tasks.fused_block, a) for _, a in jobs], partials=True, defer=not sums
            )
            results = {box: f for (box, _), f in zip(jobs, futures, strict=True)}
        else:
            results = {
                box: client.submit(held_tasks.fused_block, *a, pure=False) for box, a in jobs
            }
        members = []
        for j, d in enumerate(elems):
            blocks = {
                b: client.submit(held_tasks.fused_elem, r, j, pure=False)
                for b, r in results.items()
            }
            members.append(self._value(target.shape, d, blocks))
        if checked is None and self._unsettled and self._unsettled[-1].repair is None:
            boxes = list(results)

            def repair(n: int, good: Any) -> None:
                for j, value in enumerate(members):
                    value.blocks[boxes[n]] = client.submit(
                        held_tasks.fused_elem, good, j, pure=False
                    )
                    value._cuts.clear()

            self._unsettled[-1].repair = repair
            return members, [], False
        if checked is not None:
            totals = []
            for j, d in enumerate(sums):
                totals.append(added([part[j] for part in checked], d))
                self._count(len(checked))
            return members, totals, False
        ordered = (
            [client.submit(held_tasks.fused_partials, r, pure=False) for r in results.values()]
            if sums
            else []
        )
        totals = [
            self._value((), d, {(): client.submit(held_tasks.fused_sum, ordered, j, d, pure=False)})
            for j, d in enumerate(sums)
        ]
        return members, totals, False

    def scalar(self, fn: Any, args: Sequence[tuple[bool, Any]], dtype: Any) -> Any | None:
        """On a worker, from the operands' futures; here (None) under ``verify=`` (a
        worker's 0-d result would go unchecked: ``alpha = rs / pq`` steers every later
        iterate) or where no operand is on the workers."""
        if self.verified or not any(ref and isinstance(a, WorkerValue) for ref, a in args):
            return None
        parts = [
            a.part(()) if ref and isinstance(a, WorkerValue | Inline) else a for ref, a in args
        ]
        f = self.client.submit(held_tasks.host_op, fn, parts, dtype, pure=False)
        return self._value((), dtype, {(): f})

    # -- saving: the worker holding a block writes it -------------------------------------------

    def block_of(self, held: Any, layout: Layout | None, box: Box, p: int) -> Any:
        if isinstance(held, WorkerValue):
            return held.part(box)  # on the workers: the worker holding it writes it
        if isinstance(held, Inline):
            return held.array
        return read_block("kept value", held, box, np.dtype(getattr(held, "dtype", np.float64)))

    def save_blocks(
        self, store: Any, todo: Sequence[tuple[str, int, Any]], wanted: bool
    ) -> list[tuple[str, int, str, str | None]]:
        out: list[tuple[str, int, str, str | None]] = []
        here: list[tuple[str, int, np.ndarray]] = []
        remote = []
        for v, k, arr in todo:
            if not isinstance(arr, np.ndarray) and store.protocol == "memory":
                # memory:// is private to each process: fetched and written here (counted)
                arr = np.asarray(self.client.gather(arr))
                self._count(arr.size)
            if isinstance(arr, np.ndarray):
                here.append((v, k, arr))
            else:
                f = self.client.submit(
                    held_tasks.save_block, store, f"{v}.{k}", arr, wanted, pure=False
                )
                remote.append((v, k, f))
        digests = store.save_many([(f"{v}.{k}", a) for v, k, a in here])
        for (v, k, a), d in zip(here, digests, strict=True):
            out.append((v, k, d, content(a, wanted)))
        for v, k, f in remote:
            digest, digest_content = f.result()
            out.append((v, k, digest, digest_content))
        return out

    # -- verification: the decisions are Twice's (sans-IO), the tasks are submitted here ------

    def _checked_cut(self, func: Any, args: tuple) -> Any:
        """How a held value's cut is made under ``verify=`` (``WorkerValue.checked``)."""
        return self._twice([(func, args)], cuts=True)[0]

    def _pool_now(self) -> set[str]:
        """The pool's workers as the scheduler listed them at most ``POOL_FRESH`` seconds
        ago (asked of it directly: the client's cached copy may list none while it is being
        refreshed)."""
        from distal.runtime.elastic.driver import POOL_FRESH, workers

        now = time.monotonic()
        if self._pool_seen is None or now - self._pool_seen[0] > POOL_FRESH:
            self._pool_seen = (now, set(workers(self.client)))
        return self._pool_seen[1]

    def _twice(
        self,
        jobs: Sequence[tuple[Any, tuple]],
        partials: bool = False,
        cuts: bool = False,
        defer: bool = False,
    ) -> Any:
        """Each job ``func(*args)`` (a map block, a cut of held blocks, a fused set's block)
        computed on one trusted worker and again, and compared, on another; where the two
        disagree a third decides and the worker it contradicts is excluded (the decisions:
        :class:`~distal.runtime.elastic.twice.Twice`). Only the verdicts come to the driver;
        the results stay on the workers, as futures. ``partials``: the jobs are fused sets'
        blocks, and each one's checked partial sums come here too (``(futures, partials)``).
        ``defer`` (jobs with no partial sums): the verdicts are not waited for but read by
        :meth:`settle` at the next operation that reads the blocks."""
        client = self.client
        twice = Twice(self._pool_now(), self.excluded, self.trust)
        todo = twice.start(len(jobs))
        _raise_failed(todo, self.parsed.verify)
        futures: dict[int, Any] = {}
        for ins in todo:
            if isinstance(ins, Assign):
                func, args = jobs[ins.job]
                futures[ins.job] = client.submit(func, *args, **_on(ins.worker))
        check = held_tasks.recompute_partials if partials else held_tasks.recompute_agrees
        verdict_of: dict[int, tuple[Any, int]] = {}
        for ins in pairs_of(todo):  # one check task per pair of workers: job n is item i
            items = [(jobs[n][0], jobs[n][1], futures[n]) for n in ins.jobs]
            fb = client.submit(held_tasks.check_many, check, items, **_on(ins.worker))
            for i, n in enumerate(ins.jobs):
                verdict_of[n] = (fb, i)
        if cuts:
            self.cuts_checked += twice.checked
        else:
            self.maps_checked += twice.checked
        ordered = [futures[n] for n in range(len(jobs))]
        if defer:
            if verdict_of:
                self._unsettled.append(Unsettled(twice, list(jobs), futures, verdict_of, partials))
            return (ordered, None) if partials else ordered
        return self._verdicts(twice, list(jobs), futures, verdict_of, partials)

    def _verdicts(
        self,
        twice: Twice,
        jobs: list[tuple[Any, tuple]],
        futures: dict[int, Any],
        verdict_of: dict[int, tuple[Any, int]],
        partials: bool,
    ) -> Any:
        """Wait for the verdicts (and, with ``partials``, both workers' partial sums: the
        checker's are used only where they are the computing worker's too, so a lying
        checker cannot vouch for a correct block with wrong sums of its own)."""
        client = self.client
        held_by: dict[str, list[int]] = {}
        for n in range(len(jobs)):
            held_by.setdefault(twice.first[n], []).append(n)
        claimed = (
            [client.submit(held_tasks.partials_many, [futures[n] for n in ns], **_on(a))
             for a, ns in held_by.items()]
            if partials else []
        )  # fmt: skip
        checks = list({id(fb): fb for fb, _ in verdict_of.values()}.values())
        got_all = client.gather(checks + claimed)
        got = {fb.key: v for fb, v in zip(checks, got_all[: len(checks)], strict=True)}
        theirs: list[Any] = [None] * len(jobs)
        if partials:
            for ns, part in zip(held_by.values(), got_all[len(checks) :], strict=True):
                for n, sums_n in zip(ns, part, strict=True):
                    theirs[n] = sums_n
        out: list[Any] = []
        sums: list[Any] = []
        for n in range(len(jobs)):
            if n not in verdict_of:  # left unchecked (adaptive trust)
                out.append(futures[n])
                if partials:
                    sums.append(list(theirs[n]))
                continue
            fb, i = verdict_of[n]
            verdict = got[fb.key][i]
            ok = verdict
            if partials:
                ok = verdict[0] and held_tasks.same_result(([], list(theirs[n])), ([], verdict[1]))
            if ok:
                twice.handle(Verdict(n, True))
                out.append(futures[n])
                if partials:
                    sums.append(verdict[1])
                continue
            kept, fc, c = self._judge(twice, jobs, futures, n)
            out.append(kept)
            if partials:  # the judge's own partials (it agreed with the result kept)
                sums.append(list(client.submit(held_tasks.fused_partials, fc, **_on(c)).result()))
        return (out, sums) if partials else out

    def _judge(
        self, twice: Twice, jobs: list[tuple[Any, tuple]], futures: dict[int, Any], n: int
    ) -> tuple[Any, Any, str]:
        """Job ``n``'s two workers disagree: the judge ``Twice`` names computes it and
        compares; returns the result kept (the first worker's, or the judge's), the judge's
        own and the judge (the worker contradicted is excluded by ``Twice``)."""
        client = self.client
        todo = twice.handle(Verdict(n, False))
        _raise_failed(todo, self.parsed.verify)
        (judge,) = [i for i in todo if isinstance(i, Judge)]
        func, args = jobs[n]
        fc = client.submit(func, *args, **_on(judge.worker))
        same = client.submit(held_tasks.same_result, futures[n], fc, **_on(judge.worker)).result()
        (keep,) = [i for i in twice.handle(Judged(n, bool(same))) if isinstance(i, Keep)]
        return (futures[n] if keep.first else fc), fc, judge.worker

    def settle(self) -> bool:
        """Read the verdicts of the checks :meth:`_twice` left running. Where one failed a
        third worker decides, and a wrong block is replaced in the values made of it
        (``Unsettled.repair``). Returns whether a block was replaced: whatever read it since
        read a wrong block."""
        if not self._unsettled:
            return False
        pending = self._unsettled
        asked = list({id(f): f for u in pending for f, _ in u.verdict_of.values()}.values())
        # (if reading or deciding fails, they stay unsettled: the next operation tries
        # again, and nothing made of their blocks leaves the workers meanwhile)
        got = dict(zip((f.key for f in asked), self.client.gather(asked), strict=True))
        replaced = False
        for u in pending:
            for n, (fb, i) in sorted(u.verdict_of.items()):
                verdict = got[fb.key][i]
                if verdict[0] if u.partials else verdict:
                    u.twice.handle(Verdict(n, True))
                    continue
                kept, _, _ = self._judge(u.twice, u.jobs, u.futures, n)
                if kept is not u.futures[n]:
                    assert u.repair is not None
                    u.repair(n, kept)
                    replaced = True
        self._unsettled = []
        return replaced

    def reads_in_place(self, exe: Executable, inputs: Any) -> bool:
        """Whether a run of ``exe`` reads every value held on the workers as the blocks it
        is held in (no cut) and keeps a dense result: then checks left running may be read
        once it has finished (a repaired block changes in place, and the run is made
        again), not before it."""
        if not exe.output.is_dense:
            return False
        for t in exe.inputs:
            x = inputs.get(t.name)
            if isinstance(x, WorkerValue) and any(
                box not in x.blocks for box, _ in exe.layout(t.name).blocks
            ):
                return False
        return True


__all__ = ["HeldOnWorkers", "Inline", "Unsettled"]
