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
worker it contradicts is excluded from the session's later work. A map's checks are left
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
from distal.runtime.elastic.held import (
    WorkerValue,
    check_many,
    fused_block,
    fused_elem,
    fused_partials,
    fused_sum,
    host_op,
    map_block,
    partials_many,
    recompute_agrees,
    recompute_partials,
    same_result,
    save_block,
)
from distal.runtime.elastic.tasks import VerificationFailed
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
    """Checks :meth:`HeldOnWorkers._twice` left running (``defer``): ``runs`` are its jobs
    ``(func, args, computing worker, checking worker, result future, (check task, item))``
    (the item of the check task's list that is this job's verdict; None: not checked),
    ``pool`` the trusted workers then, ``partials`` whether a verdict comes with partial
    sums; ``repair(n, future)`` puts the result kept for job ``n`` where the wrong one was
    (set by the operation that made values of the results)."""

    runs: list[tuple]
    pool: list[str]
    partials: bool
    repair: Any = None


def _on(worker: str) -> dict[str, Any]:
    """Submit keywords pinning a task to ``worker``."""
    return {"workers": [worker], "allow_other_workers": False, "pure": False}


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


def _verdict_futures(runs: Sequence[tuple]) -> list[Any]:
    """The distinct check tasks of :meth:`HeldOnWorkers._twice`'s ``runs``, in order."""
    seen: dict[str, Any] = {}
    for r in runs:
        if r[5] is not None:
            seen.setdefault(r[5][0].key, r[5][0])
    return list(seen.values())


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
            jobs.append((map_block, (fn, parts, box_shape(box), dtype)))
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
                [(fused_block, a) for _, a in jobs], partials=True, defer=not sums
            )
            results = {box: f for (box, _), f in zip(jobs, futures, strict=True)}
        else:
            results = {box: client.submit(fused_block, *a, pure=False) for box, a in jobs}
        members = []
        for j, d in enumerate(elems):
            blocks = {b: client.submit(fused_elem, r, j, pure=False) for b, r in results.items()}
            members.append(self._value(target.shape, d, blocks))
        if checked is None and self._unsettled and self._unsettled[-1].repair is None:
            boxes = list(results)

            def repair(n: int, good: Any) -> None:
                for j, value in enumerate(members):
                    value.blocks[boxes[n]] = client.submit(fused_elem, good, j, pure=False)
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
            [client.submit(fused_partials, r, pure=False) for r in results.values()] if sums else []
        )
        totals = [
            self._value((), d, {(): client.submit(fused_sum, ordered, j, d, pure=False)})
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
        f = self.client.submit(host_op, fn, parts, dtype, pure=False)
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
        remote = []
        for v, k, arr in todo:
            if not isinstance(arr, np.ndarray) and store.protocol == "memory":
                # memory:// is private to each process: fetched and written here (counted)
                arr = np.asarray(self.client.gather(arr))
                self._count(arr.size)
            if isinstance(arr, np.ndarray):
                out.append((v, k, store.save(f"{v}.{k}", arr), content(arr, wanted)))
            else:
                f = self.client.submit(save_block, store, f"{v}.{k}", arr, wanted, pure=False)
                remote.append((v, k, f))
        for v, k, f in remote:
            digest, digest_content = f.result()
            out.append((v, k, digest, digest_content))
        return out

    # -- verification ---------------------------------------------------------------------------

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
        computed on one trusted worker and computed again and compared on another
        (:func:`~distal.runtime.elastic.held.recompute_agrees`); where the two disagree a
        third computes it and decides (:meth:`_decide`). Only the verdicts (one boolean per
        job) come to the driver; the results stay on the workers, as futures.
        ``partials``: the jobs are fused sets' blocks, and each one's checked partial sums
        come to the driver too (``(futures, partials)``). Under ``verify="adaptive"`` a job
        goes to its second worker as :class:`~distal.runtime.elastic.trust.Trust` draws for
        the computing worker. ``defer`` (jobs with no partial sums): the verdicts are not
        waited for here but read by :meth:`settle` at the next operation."""
        client = self.client
        pool = sorted(self._pool_now() - self.excluded)
        if len(pool) < 2:
            raise VerificationFailed(
                f"verify={self.parsed.verify!r}: element-wise maps and cuts of held values "
                f"are checked on a second worker, and {len(pool)} trusted worker(s) are left"
            )
        runs: list[tuple] = []
        check = recompute_partials if partials else recompute_agrees
        trust = self.trust
        pairs: dict[tuple[str, str], list[int]] = {}  # the checked jobs, by (a, b)
        for n, (func, args) in enumerate(jobs):
            a, b = pool[n % len(pool)], pool[(n + 1) % len(pool)]
            fa = client.submit(func, *args, **_on(a))
            if trust is None or trust.should_check(a):
                pairs.setdefault((a, b), []).append(n)
            runs.append((func, args, a, b, fa, None))
        # the checks worker b makes of worker a's blocks: one task (per-task costs in the
        # scheduler and workers were most of what checking cost); job n's verdict is item i
        for (_, b), ns in pairs.items():
            items = [(runs[n][0], runs[n][1], runs[n][4]) for n in ns]
            fb = client.submit(check_many, check, items, **_on(b))
            for i, n in enumerate(ns):
                runs[n] = (*runs[n][:5], (fb, i))
        done = sum(len(ns) for ns in pairs.values())
        if cuts:
            self.cuts_checked += done
        else:
            self.maps_checked += done
        if defer:
            if done:
                self._unsettled.append(Unsettled(runs, pool, partials))
            futures = [r[4] for r in runs]
            return (futures, None) if partials else futures
        return self._verdicts(runs, pool, partials)

    def _verdicts(self, runs: list[tuple], pool: list[str], partials: bool) -> Any:
        """Wait for ``runs``' verdicts (and, with ``partials``, both workers' partial sums:
        the checker's are used only where they are the computing worker's too, so a lying
        checker cannot vouch for a correct block with wrong sums of its own)."""
        client = self.client
        trust = self.trust
        held_by: dict[str, list[int]] = {}
        for n, r in enumerate(runs):
            held_by.setdefault(r[2], []).append(n)
        claimed = (
            [client.submit(partials_many, [runs[n][4] for n in ns], **_on(a))
             for a, ns in held_by.items()]
            if partials else []
        )  # fmt: skip
        verdicts = _verdict_futures(runs)
        got_all = client.gather(verdicts + claimed)
        got_verdicts = dict(zip((f.key for f in verdicts), got_all[: len(verdicts)], strict=True))
        theirs: list[Any] = [None] * len(runs)
        if partials:
            for ns, part in zip(held_by.values(), got_all[len(verdicts) :], strict=True):
                for n, sums_n in zip(ns, part, strict=True):
                    theirs[n] = sums_n
        out: list[Any] = []
        sums: list[Any] = []
        for n, run in enumerate(runs):
            a, fa, fb = run[2], run[4], run[5]
            if fb is None:
                out.append(fa)
                if partials:
                    sums.append(list(theirs[n]))
                continue
            got = got_verdicts[fb[0].key][fb[1]]
            good = got
            if partials:
                good = got[0] and same_result(([], list(theirs[n])), ([], got[1]))
            if good:
                if trust is not None:
                    trust.passed(a)
                out.append(fa)
                if partials:
                    sums.append(got[1])
                continue
            kept, fc, c = self._decide(run, pool)
            out.append(kept)
            if partials:  # the judge's own partials (it agreed with the result kept)
                sums.append(list(client.submit(fused_partials, fc, **_on(c)).result()))
        return (out, sums) if partials else out

    def _decide(self, run: tuple, pool: Sequence[str]) -> tuple[Any, Any, str]:
        """Workers ``a`` and ``b`` of ``run`` disagree: a third trusted one computes the job
        and sides with one of them; the other is excluded. Returns the future of the result
        kept (``a``'s, or the judge's), the judge's own, and the judge."""
        func, args, a, b, fa, _ = run
        client = self.client
        judges = [w for w in pool if w not in (a, b) and w not in self.excluded]
        if not judges:
            raise VerificationFailed(
                f"workers {a} and {b} disagree on a block ({getattr(func, '__name__', func)}) "
                "and no third trusted worker is left to decide"
            )
        c = judges[0]
        fc = client.submit(func, *args, **_on(c))
        if client.submit(same_result, fa, fc, **_on(c)).result():
            liar, kept = b, fa  # its check contradicted a correct result
        else:
            liar, kept = a, fc
        self.excluded.add(liar)
        if self.trust is not None:
            self.trust.failed(liar)
        return kept, fc, c

    def settle(self) -> bool:
        """Read the verdicts of the checks :meth:`_twice` left running. Where one failed a
        third worker decides (:meth:`_decide`), and a wrong block is replaced in the values
        made of it (``Unsettled.repair``). Returns whether a block was replaced: whatever
        read it since read a wrong block."""
        if not self._unsettled:
            return False
        pending = self._unsettled
        asked = [f for u in pending for f in _verdict_futures(u.runs)]
        # (if reading or deciding fails, they stay unsettled: the next operation tries
        # again, and nothing made of their blocks leaves the workers meanwhile)
        got = dict(zip((f.key for f in asked), self.client.gather(asked), strict=True))
        replaced = False
        for u in pending:
            for n, run in enumerate(u.runs):
                if run[5] is None:
                    continue
                verdict = got[run[5][0].key][run[5][1]]
                if u.partials:
                    verdict = verdict[0]
                if verdict:
                    if self.trust is not None:
                        self.trust.passed(run[2])
                    continue
                kept, _, _ = self._decide(run, u.pool)
                if kept is not run[4]:
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
