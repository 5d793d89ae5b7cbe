"""The Dask side of the core's instructions: each ``Submit*`` becomes ``client.submit`` calls.

:class:`Submitter` keeps what the instructions name by key -- a Dask future per task key --
and what they need but do not carry: the input blocks (submitted once per run and shared by
every unit reading them), a unit's description (held on the workers for units carrying
stored-entry structure), the reducer's order of a block's summands, and the checks'
secret. It decides nothing: where a task goes is the instruction's ``Where``.
"""

from __future__ import annotations

import hashlib
import secrets
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from distal.plan.ir import Plan
from distal.plan.region import Entries, Region, shape, words
from distal.runtime.elastic.events import (
    SubmitAgreed,
    SubmitCheck,
    SubmitRecheck,
    SubmitReduce,
    SubmitReduceCheck,
    SubmitUnit,
    Where,
)
from distal.runtime.elastic.held import WorkerValue
from distal.runtime.elastic.options import Options
from distal.runtime.elastic.tasks import (
    Ctx,
    agree_block_task,
    agree_task,
    check_reduce_task,
    check_task,
    cut_block,
    hold_unit,
    input_block,
    plan_key,
    recheck_block_task,
    recheck_task,
    reduce_task,
    source_block,
    unit_task,
)
from distal.runtime.elastic.units import (
    Cuts,
    Key,
    Span,
    Unit,
    block_region,
    carries_entries,
    description,
    gather_cuts,
)
from distal.runtime.source import is_block_source
from distal.runtime.weakcache import WeakCache
from distal.typing import box_index

#: plans whose units' held descriptions are kept (:meth:`Submitter.unit_arg`), the most
#: recently used; each entry (a :class:`Held`) goes with its plan
HELD_PLANS = 16
HELD = WeakCache(HELD_PLANS)

PLACED_KEPT = 1024
"""Input blocks a session value keeps placed on the workers (per value), oldest dropped."""

CUT_WORDS = 1 << 16
"""Input blocks of at least this many elements are cut where they lie when a unit only
gathers pieces of them (:meth:`Submitter.blocks`); smaller ones travel whole (a task more
would cost more than the bytes saved)."""


@dataclass
class Held:
    """A plan's held unit descriptions on one client: by unit name, the future and the
    digest of its bytes; ``forged``: one was found forged, so the driver sends them."""

    client: Any
    futures: dict[str, tuple[Any, str]] = field(default_factory=dict)
    forged: bool = False


def release(futures: list[Any]) -> None:
    """Drop the run's hold on ``futures`` now, as their garbage collection would: the
    scheduler forgets what nobody else wants (and stops it where it has not started)."""
    for f in futures:
        f.release()


def on(where: Where) -> dict[str, Any]:
    """``client.submit``'s keywords for ``where``."""
    if not where.workers:
        return {}
    return {"workers": list(where.workers), "allow_other_workers": not where.strict}


def _placed_key(region: Region, dtype: np.dtype) -> tuple:
    """What identifies an input block placed from this process across runs: its box, or
    the array of stored positions it holds (by identity: a bound plan, reused for every run
    on the same pattern, keeps the same arrays; the cache keeps that array alive, so its id
    is not reused), and its dtype."""
    if isinstance(region, Entries):
        return ("entries", id(region.positions), dtype.str)
    return ("box", region, dtype.str)


def sent_to(u: Unit, piece: Any) -> int:
    """Where the plan's ``Flush`` of ``u`` sends ``piece``; -1 when it is not sent."""
    return next((dst for dst, box in u.sends if box is piece or box == piece), -1)


class Submitter:
    """Carries out a run's ``Submit*`` instructions on a Dask ``client`` (see the module
    docstring); ``futures`` holds every task the run still needs, by key."""

    def __init__(
        self,
        plan: Plan,
        dtypes: Mapping[str, Any],
        data: dict[str, Any],
        opts: Options,
        client: Any,
        nonce: str,
    ) -> None:
        self.plan, self.dtypes, self.data, self.opts = plan, dtypes, data, opts
        self.client, self.nonce = client, nonce
        # set by :meth:`setup` once the run's store is open (fingerprinting a block source
        # reads input blocks before that)
        self.ctx: Ctx | None = None
        self.units: dict[str, Unit] = {}
        self.contrib: dict[str, list[tuple[Unit, Any]]] = {}
        self.shapes: dict[str, Any] = {}
        self.owners: dict[str, int] = {}
        self.futures: dict[str, Any] = {}
        self.inputs_f: dict[tuple[str, Key], Any] = {}
        self.shared: set[str] = set()  # keys of input futures that outlive the run
        self.pinned: dict[tuple[str, Key, str], Any] = {}
        # the checks' random vectors derive from a secret only the check tasks carry
        self.secret = secrets.token_bytes(16)
        self.sealed: Mapping[str, str] = {}  # the core's: entry -> digest its seal vouches for

    def setup(
        self,
        ctx: Ctx,
        units: dict[str, Unit],
        contrib: dict[str, list[tuple[Unit, Any]]],
        shapes: dict[str, Any],
        owners: dict[str, int],
    ) -> None:
        """What the tasks need: their context, the units by name, each block's summands in
        the reducer's order, what a reduction is told of its block and who reduces it."""
        self.ctx, self.units, self.contrib, self.shapes = ctx, units, contrib, shapes
        self.owners = owners

    # -- input blocks ------------------------------------------------------------------------

    def prefetch(self, units: list[Unit]) -> None:
        """Submit the input blocks of ``units`` (in order) before any unit.

        An input-block task is cheap, so Dask never steals it, and Dask places it by its
        estimate of each worker's occupancy, which does not know a worker is slow: submitted
        together with the first unit that needs it, it can land behind a slow worker's long
        unit and stall every unit that reads it while other workers idle. Submitted up
        front -- as the MPI runtime places all inputs before it runs -- the blocks are read
        while every worker is free.
        """
        for u in units:
            for t, idx in u.needs:
                self.block_future(t, idx)

    def block_future(self, t: str, idx: Key) -> Any:
        """Input block ``(t, idx)``, submitted once and shared by every unit reading it: a
        held value's block (or a cut of its blocks made on the workers), a block a session
        placed in an earlier run, or a task carrying (or reading) it."""
        key = (t, idx)
        if key in self.inputs_f:
            return self.inputs_f[key]
        box = block_region(self.plan, t, idx)
        dtype = np.dtype(self.dtypes[t])
        x = self.data[t]
        if isinstance(x, WorkerValue) and isinstance(box, tuple):
            f = self.inputs_f[key] = x.part(box, dtype)
            self.shared.add(f.key)
            return f
        cache = self.opts._placed.get(t)
        ckey = _placed_key(box, dtype) if cache is not None else None
        if cache is not None and ckey in cache:
            f = self.inputs_f[key] = cache[ckey][1]
            self.shared.add(f.key)
            return f
        name = f"distal-in-{self.nonce}-{t}-{'.'.join(map(str, idx))}"
        f = self.inputs_f[key] = self._submit_block(t, box, dtype, name)
        if cache is not None and not is_block_source(x):
            # placed: the session's next run reads it there (the positions kept with it,
            # so the key's id stays theirs)
            while len(cache) >= PLACED_KEPT:
                cache.pop(next(iter(cache)))  # the oldest: a plan no longer used, likely
            cache[ckey] = (getattr(box, "positions", None), f)
            self.shared.add(f.key)
        return f

    def _submit_block(self, t: str, box: Region, dtype: np.dtype, key: str, **where: Any) -> Any:
        """The task making input block ``box`` of ``t`` from this process's value (its data
        in the task), or reading it from a block source on the worker."""
        x = self.data[t]
        if isinstance(box, Entries):  # a sparse input: the values of its owned entries
            block = np.asarray(x.vals, dtype=dtype)[box.positions]
        elif is_block_source(x):
            return self.client.submit(source_block, t, x, box, dtype, key=key, pure=False, **where)
        else:
            # np.array, not ascontiguousarray: that makes a 0-d block (a scalar) 1-d
            block = np.array(x[box_index(box, ((0, 0),) * len(box))], dtype=dtype, order="C")
        with warnings.catch_warnings():
            # "large graph": the block travels in its task on purpose (see input_block)
            warnings.filterwarnings("ignore", message="Sending large graph")
            return self.client.submit(input_block, block, key=key, pure=False, **where)

    def _block_on(self, t: str, idx: Key, worker: str) -> Any:
        """Input block ``(t, idx)`` for a copy pinned to ``worker``: the run's own future
        once it has finished; before that, a copy of its task on ``worker`` (the original
        may be queued behind a stuck unit on the worker holding it)."""
        f = self.block_future(t, idx)
        if f.status != "pending" or isinstance(self.data[t], WorkerValue):
            return f
        key = (t, idx, worker)
        if key not in self.pinned:
            box = block_region(self.plan, t, idx)
            dtype = np.dtype(self.dtypes[t])
            name = f"distal-in-{self.nonce}-{t}-{'.'.join(map(str, idx))}-on-{len(self.pinned)}"
            self.pinned[key] = self._submit_block(
                t, box, dtype, name, workers=[worker], allow_other_workers=False
            )
        return self.pinned[key]

    def blocks(self, u: Unit, worker: str | None = None) -> list[tuple[str, Any, Any]]:
        """The input blocks a unit's tasks are handed, in the order of its ``needs``: a box
        with its block, or only the shape of a processor's owned stored values
        (``worker``: for a copy pinned there). A large block of another processor that the
        unit only gathers rows or entries of is handed already cut (:meth:`_cut`)."""
        cuts = gather_cuts(u) if worker is None and self.opts.verify == 1 else {}
        out = []
        for n, (t, idx) in enumerate(u.needs):
            region = block_region(self.plan, t, idx)
            if n in cuts and n not in u.own and words(region) >= CUT_WORDS:
                out.append((t, Cuts(len(cuts[n])), self._cut(u, n, cuts[n])))
                continue
            holder = region if isinstance(region, tuple) else Span(shape(region))
            f = self.block_future(t, idx) if worker is None else self._block_on(t, idx, worker)
            out.append((t, holder, f))
        return out

    def _cut(self, u: Unit, n: int, cuts: list[Any]) -> Any:
        """A task cutting, where input block ``u.needs[n]`` lies, the pieces ``cuts`` of it
        that unit ``u`` gathers: only they travel to the unit (a row-split SpMV's unit reads
        a few halo rows of its neighbour's block of the vector). Not under ``verify=``: a
        worker's cut of a block would go unchecked."""
        t, idx = u.needs[n]
        block = self.block_future(t, idx)
        key = f"distal-cut-{self.nonce}-{u.name}-{n}"
        return self.client.submit(cut_block, block, [c.src for c in cuts], key=key, pure=False)

    def release_inputs(self) -> None:
        """Drop the run's input blocks (those a session keeps placed stay)."""
        release([f for f in self.inputs_f.values() if f.key not in self.shared])
        release(list(self.pinned.values()))
        self.inputs_f.clear()
        self.pinned.clear()

    # -- unit descriptions -------------------------------------------------------------------

    def unit_arg(self, u: Unit, where: Where | None = None) -> Any:
        """What a task of unit ``u`` is handed as its unit: for a unit carrying stored-entry
        structure, the future of its description held on the workers (made once per plan,
        client and unit and placed as ``where`` says the unit's own task is); under
        ``verify=`` with the digest of the bytes the driver made, which the task checks
        before it reads them. Otherwise, and once a held description was found forged in
        this plan, the description itself."""
        if not carries_entries(u):
            return u.task()
        held = self.held()
        if held.forged:
            return u.task()
        f, digest = held.futures.get(u.name, (None, ""))
        if f is None or f.status in ("error", "cancelled"):
            blob, digest = description(u)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "large graph": the structure travels once
                f = self.client.submit(
                    hold_unit,
                    self.ctx,
                    blob,
                    key=f"distal-held-{plan_key(self.plan)}-{u.name}",
                    pure=False,
                    **on(where or Where()),
                )
            held.futures[u.name] = (f, digest)
        return f if self.opts.verify == 1 else (f, digest)

    def held(self) -> Held:
        """This plan's held descriptions on this client (made empty on first use)."""
        held = HELD.get(self.plan)
        if held is None or held.client is not self.client:
            held = Held(self.client)
            HELD.put(self.plan, held)
        return held

    def forged(self) -> None:
        """A task found a held description forged: this plan's units get their descriptions
        from the driver from now on (the held ones are dropped)."""
        held = self.held()
        release([f for f, _ in held.futures.values()])
        held.futures.clear()
        held.forged = True

    # -- the instructions ----------------------------------------------------------------------

    def seed(self, name: str, attempt: int) -> int:
        h = hashlib.blake2b(self.secret + f"{name}#{attempt}".encode(), digest_size=8)
        return int.from_bytes(h.digest(), "little")

    def submit(self, fn: Any, *args: Any, key: str, where: Where, **kw: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "large graph": array blocks travel in their tasks
            f = self.client.submit(fn, *args, key=key, pure=False, **kw, **on(where))
        self.futures[key] = f
        return f

    def unit(self, i: SubmitUnit) -> Any:
        """A unit's task: the original, a speculative copy (pinned, with the description
        from the driver and its inputs made again on its worker where they are still
        queued elsewhere) or a recomputation after a rejected check."""
        u = self.units[i.name]
        if i.copy:
            pinned = i.where.workers[0]
            arg, blocks = u.task(), self.blocks(u, pinned)
        else:
            arg = u.task() if i.redo else self.unit_arg(u, i.where)
            blocks = self.blocks(u)
        expect = self.sealed.get(i.name) if not i.redo else None
        return self.submit(
            unit_task, self.ctx, arg, blocks, i.load, i.save, None, i.copy, i.fresh, i.redo,
            expect, key=i.key, where=i.where,
        )  # fmt: skip

    def agreed(self, i: SubmitAgreed) -> Any:
        """``verify=k``: the unit's pinned copies and the task accepting their majority."""
        u = self.units[i.name]
        blocks = self.blocks(u)
        arg = self.unit_arg(u)
        copies = []
        for r, (key, w) in enumerate(i.copies):
            at = Where((w,), i.strict)
            args = (self.ctx, arg, blocks, False, False, r)
            copies.append(self.submit(unit_task, *args, key=key, where=at))
        for key, _ in i.copies:
            del self.futures[key]  # held by the agreement
        o = self.opts
        what = replace(u.task(), steps=(), receives=())  # it reads the name and processor
        return self.submit(
            agree_task, self.ctx, what, copies, o.verify_rtol, o.verify_atol,
            key=i.key, where=i.where,
        )  # fmt: skip

    def check(self, i: SubmitCheck) -> Any:
        u = self.units[i.name]
        return self.submit(
            check_task, self.ctx, self.unit_arg(u), self.blocks(u), self.futures[i.of],
            self.seed(i.name, i.attempt), self.opts.verify_repeats, i.by, i.save,
            key=i.key, where=i.where,
        )  # fmt: skip

    def contribs(self, block: str, parts: tuple[tuple[str, str], ...]) -> list[Any]:
        """A reduction's summands in the reducer's order, each unit's accepted result."""
        got = dict(parts)
        return [
            (
                self.futures[got[u.name]],
                u.out_box if isinstance(piece, tuple) else None,
                piece,
                u.proc,
                sent_to(u, piece),
            )
            for u, piece in self.contrib.get(block, ())
        ]

    def reduce(self, i: SubmitReduce) -> Any:
        """A block's reduction; with ``copies`` (``verify=k``) pinned copies and their
        agreement."""
        contribs = self.contribs(i.block, i.parts)
        box = self.shapes[i.block]
        owner = self.owners.get(i.block, -1)
        if not i.copies:
            args = (self.ctx, i.block, box, contribs, i.save, None, owner)
            return self.submit(reduce_task, *args, key=i.key, where=i.where)
        copies = []
        for r, (key, w) in enumerate(i.copies):
            at = Where((w,), i.strict)
            args = (self.ctx, i.block, box, contribs, False, r, owner)
            copies.append(self.submit(reduce_task, *args, key=key, where=at))
        for key, _ in i.copies:
            del self.futures[key]
        o = self.opts
        return self.submit(
            agree_block_task, self.ctx, i.block, copies, o.verify_rtol, o.verify_atol,
            key=i.key, where=i.where,
        )  # fmt: skip

    def reduce_check(self, i: SubmitReduceCheck) -> Any:
        contribs = self.contribs(i.block, i.parts)
        return self.submit(
            check_reduce_task, self.ctx, i.block, self.shapes[i.block], contribs,
            self.futures[i.of], self.seed(i.block, i.attempt), self.opts.verify_repeats,
            i.by, i.save, key=i.key, where=i.where,
        )  # fmt: skip

    def recheck(self, i: SubmitRecheck) -> Any:
        """Re-verify an entry an excluded worker wrote: a unit's against its inputs, a
        block's against its checked summands."""
        if not i.parts:
            u = self.units[i.entry]
            return self.submit(
                recheck_task, self.ctx, u.task(), self.blocks(u), self.seed(i.entry, -1),
                self.opts.verify_repeats, key=i.key, where=i.where,
            )  # fmt: skip
        contribs = self.contribs(i.entry, i.parts)
        return self.submit(
            recheck_block_task, self.ctx, i.entry, self.shapes[i.entry], contribs,
            key=i.key, where=i.where,
        )  # fmt: skip


__all__ = ["HELD", "HELD_PLANS", "PLACED_KEPT", "Held", "Submitter", "on", "release", "sent_to"]
