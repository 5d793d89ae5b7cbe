"""A plan as units of work and output blocks: what the elastic runtime hands to Dask.

Pure functions of the plan (no Dask), so they are unit-testable and the checkpoint names
they produce are stable across runs and machines.

A unit is made of the plan's regions (:mod:`distal.plan.region`), dense or bound to a
sparse pattern alike. Its input buffers are cut from the *owned blocks* of the inputs: a
placement's blocks for a tensor laid out by a placement, a processor's owned stored values
for a tensor whose ownership a pattern decides (its key is then ``(owner,)``). A box buffer
is cut from whichever blocks hold it; a buffer of rows or stored entries (a bound plan's
``Fetch``) is gathered piece by piece from the owned block of each piece's source, with the
indices worked out here (:class:`Gather`), so a unit carries its own instructions and the
indices of the regions it exchanges, never the plan, the pattern or another processor's
owned region.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from distal.errors import RuntimeFailure
from distal.plan.ir import FETCH, Compute, EntryWork, Fetch, Flush, OpenOutput, Plan
from distal.plan.region import Region, Rows, shape, words
from distal.plan.stats import ops_by_step
from distal.runtime.store import where
from distal.typing import Box

GRANULARITIES = ("flush", "step")

Key = tuple[int, ...]
"""An owned block of a tensor: a placement's block index, or ``(owner,)`` for a tensor whose
ownership a pattern decides."""


@dataclass(frozen=True, slots=True)
class Span:
    """The shape of a region a task fills but need not know (a buffer of rows or stored
    entries, an output block of stored entries): only its array's shape travels."""

    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Cut:
    """One piece of a region moved between two arrays: ``src`` (where it lies in the array it
    is read from: an owned block, or a unit's partial output) and ``dst`` (where it lies in
    the array it lands in: a fetch buffer, or an output block), as :func:`~distal.runtime.
    store.where` gives them. ``need``: the position, among the unit's ``needs``, of the block
    it is read from (-1 for an output piece); ``index_words``: what it carries besides its
    values (a piece of stored entries travels with its ``pos``/``crd``)."""

    need: int
    src: Any
    dst: Any
    index_words: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class Gather:
    """A fetch buffer of rows or stored entries: its shape and its pieces, each ``(source
    processor, cut)``, gathered from the owned blocks of their sources."""

    shape: tuple[int, ...]
    pieces: tuple[tuple[int, Cut], ...]


Buffer = Box | Gather
Piece = Box | Cut


@dataclass(frozen=True, slots=True)
class Cuts:
    """What a unit's task is told of an input block it is handed already cut (see
    :func:`gather_cuts`): not the block, but ``count`` pieces of it, one per cut."""

    count: int


def gather_cuts(unit: Unit) -> dict[int, list[Cut]]:
    """The cuts a unit's buffers of rows or stored entries read from each of its input
    blocks that it reads nothing else of, by the block's position among its ``needs``, in
    one order (its steps', then each gather's pieces'): such a block can be handed to the
    unit already cut where it lies, so that only the pieces travel (a row-split SpMV unit
    reads a few halo rows of its neighbour's block, not all of it)."""
    boxed = {t for bufs, _, _ in unit.steps for t, b in bufs if not isinstance(b, Gather)}
    out: dict[int, list[Cut]] = {}
    seen: set[int] = set()
    for bufs, _, _ in unit.steps:
        for t, b in bufs:
            if not isinstance(b, Gather) or t in boxed:
                continue
            for _, cut in b.pieces:
                if id(cut) not in seen:
                    seen.add(id(cut))
                    out.setdefault(cut.need, []).append(cut)
    return out


@dataclass(frozen=True, slots=True)
class Unit:
    """The work of virtual processor ``proc`` into one output buffer, over some steps.

    Attributes:
        name: checkpoint entry name, stable across runs (``part-p<proc>-s<first>-<last>``).
        proc: the plan's processor.
        out_box: the output buffer (the plan's ``OpenOutput`` box; a :class:`Span` for rows
            or stored entries).
        steps: per step: the input buffers ``(tensor, box | Gather)`` in use, the compute
            boxes, and the leaves over stored entries (a bound plan's ``EntryWork``).
        needs: the input blocks ``(tensor, key)`` the buffers are cut from.
        pieces: ``(output block key, piece)``: where the partial goes (a box, or a
            :class:`Cut` from the partial into the block).
        final: the unit alone computes the whole of one output block, so its result *is*
            that block (named ``block-...``; no separate reduction task or partial file).
        receives: the plan's fetches this unit is the first to use: ``(tensor, pieces)``,
            each piece ``(source processor, box | Cut)`` coming from another processor. The
            unit counts the elements of these pieces it actually cut from the blocks it
            was handed: that is the fetch traffic ``Result.stats`` reports.
        sends: the plan's ``Flush`` sends ``(destination, piece)`` of the output buffer,
            on the last unit of the buffer only (the processor sends its sum once); the
            task that receives the unit's partial counts them.
        direct: the plan adds this output buffer straight into the processor's owned
            block (its ``OpenOutput`` is direct), so it is no buffer of its own.
        own: the positions, among ``needs``, of blocks the processor owns: a buffer that
            is a view of one is no fetch buffer (the memory a unit reports).
    """

    name: str
    proc: int
    first: int
    out_box: Box | Span
    steps: tuple[tuple[tuple[tuple[str, Buffer], ...], tuple[Box, ...], tuple[EntryWork, ...]], ...]
    needs: tuple[tuple[str, Key], ...]
    pieces: tuple[tuple[Key, Piece], ...]
    final: bool = False
    receives: tuple[tuple[str, tuple[tuple[int, Piece], ...]], ...] = ()
    sends: tuple[tuple[int, Piece], ...] = ()
    direct: bool = False
    own: tuple[int, ...] = ()

    def task(self) -> Unit:
        """What a unit's own tasks are handed: everything but where its partial goes (the
        reductions' business)."""
        return replace(self, pieces=(), sends=())


class ForgedDescription(RuntimeFailure):
    """A held unit description whose bytes are not the ones the driver sent (a worker that
    held or relayed it changed them): the task refuses it before reading it."""


def description(unit: Unit) -> tuple[bytes, str]:
    """A unit's description as the bytes a :class:`HeldUnit` holds and their digest (BLAKE2b,
    256 bits: a worker cannot make other bytes with the same digest)."""
    blob = pickle.dumps(unit.task(), protocol=pickle.HIGHEST_PROTOCOL)
    return blob, hashlib.blake2b(blob, digest_size=32).hexdigest()


class HeldUnit:
    """A unit's description held on the workers as a Dask value, one per plan and unit (the
    driver's ``Driver.unit_arg``): a loop's runs of one sparse plan then send each unit's
    stored-entry structure (about 22 bytes an entry) to the workers once, not in every
    run's task (an SpMV unit of a 10^6-row Laplacian cut four ways is 20 MB).

    It holds the bytes the driver made (:func:`description`) and unpickles them on first use.
    Under ``verify=`` a task is handed the held value with the driver's digest and reads it
    only once the bytes hash to it (:func:`unheld`; a worker checks each copy it holds
    once), so a worker holding or relaying the value cannot make an honest worker compute,
    or a check test, another unit. A worker keeps the unit's prepared leaves over stored
    entries with it (``leaves``, by step, work and dtype: their segments and index arrays
    cost 22 ms a run for such a unit); they go when Dask drops the value and never travel
    (pickling sends the bytes alone)."""

    __slots__ = ("_unit", "blob", "leaves", "vouched")

    def __init__(self, blob: bytes) -> None:
        self.blob = blob
        self.leaves: dict[tuple[int, int, str], Any] = {}
        self.vouched = ""  # the digest these bytes were found to have
        self._unit: Unit | None = None

    @property
    def unit(self) -> Unit:
        if self._unit is None:
            self._unit = pickle.loads(self.blob)  # the driver's bytes (vouched under verify=)
        return self._unit

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (HeldUnit, (self.blob,))


#: what a task may be handed as its unit (see :func:`unheld`)
UnitArg = Unit | HeldUnit | tuple[HeldUnit, str]


def unheld(arg: UnitArg) -> tuple[Unit, dict[tuple[int, int, str], Any] | None]:
    """A task's unit argument as ``(unit, its worker-side leaves or None)``: a unit; a held
    description; or a held description and the digest the driver says its bytes have,
    refused (:class:`ForgedDescription`) when they do not."""
    if isinstance(arg, tuple):
        held, digest = arg
        if held.vouched != digest:
            got = hashlib.blake2b(held.blob, digest_size=32).hexdigest()
            if not hmac.compare_digest(got, digest):
                raise ForgedDescription(
                    f"a held unit description's bytes hash to {got[:16]}..., not to the "
                    f"driver's {digest[:16]}...: a worker that held or passed it on changed it"
                )
            held.vouched = digest
        return held.unit, held.leaves
    if isinstance(arg, HeldUnit):
        return arg.unit, arg.leaves
    return arg, None


def carries_entries(unit: Unit) -> bool:
    """Whether the unit's description carries stored-entry structure (leaves over a sparse
    operand's entries), which is what makes holding it on the workers worth a task."""
    return any(works for _, _, works in unit.steps)


def owner_key(plan: Plan, tensor: str, p: int) -> Key | None:
    """The key of the block of ``tensor`` that processor ``p`` owns (None: none)."""
    if tensor in plan.owned:
        return None if plan.owned[tensor][p] is None else (p,)
    pl = plan.placements[tensor]
    return pl.block_index(plan.coord_in(pl, p))


def holding_block(plan: Plan, tensor: str, piece: Rows) -> Key:
    """The block of a dense tensor that a piece of its rows lies in (the piece's bounding box
    lies in that block): where a relayed piece is cut from, its sender being a relay of a
    routing tree, not its owner."""
    pl = plan.placements[tensor]
    box: list[tuple[int, int]] = [(0, 0)] * len(pl.shape)
    for j, d in enumerate(piece.sdims):
        col = piece.rows[:, j]
        box[d] = (int(col.min()), int(col.max()) + 1)
    for (lo, hi), d in zip(piece.box, piece.ddims, strict=True):
        box[d] = (lo, hi)
    blocks = pl.split(tuple(box))
    assert len(blocks) == 1, (tensor, piece, blocks)
    return blocks[0][0]


def block_region(plan: Plan, tensor: str, key: Key) -> Region:
    """The region of ``tensor``'s owned block ``key``."""
    if tensor in plan.owned:
        region = plan.owned[tensor][key[0]]
        assert region is not None
        return region
    return plan.placements[tensor].block_box(key)


@dataclass
class _Segment:
    """One output buffer of a processor: its steps and the ``Flush`` that ends it."""

    out: OpenOutput
    steps: list[tuple[int, Any, tuple[Box, ...], tuple[EntryWork, ...], Any]] = field(
        default_factory=list
    )
    flush: Flush | None = None


def _chunks(items: list[Any], granularity: str | int) -> list[list[Any]]:
    if granularity == "flush":
        return [items] if items else []
    size = 1 if granularity == "step" else int(granularity)
    return [items[i : i + size] for i in range(0, len(items), size)]


class _Cutter:
    """Buffers and pieces of one processor's units, with the indices their tasks use."""

    def __init__(self, plan: Plan, p: int, relayed: frozenset[int] = frozenset()) -> None:
        self.plan, self.p = plan, p
        self.relayed = relayed  # ids of the fetched pieces a relay passes on (routing)
        self.needs: dict[tuple[str, Key], int] = {}
        self.gathers: dict[int, Gather] = {}  # id(Fetch) -> its buffer

    def need(self, tensor: str, key: Key) -> int:
        return self.needs.setdefault((tensor, key), len(self.needs))

    def buffer(self, op: Fetch) -> Buffer:
        """A fetch's buffer: its box (cut from the blocks holding it), or a :class:`Gather`."""
        assert op.box is not None
        if isinstance(op.box, tuple):
            for idx, _ in self.plan.placements[op.tensor].split(op.box):
                self.need(op.tensor, idx)
            return op.box
        got = self.gathers.get(id(op))
        if got is None:
            pieces = []
            for src, piece in op.pieces:
                if id(piece) in self.relayed:
                    assert isinstance(piece, Rows)
                    key = holding_block(self.plan, op.tensor, piece)
                else:
                    key = owner_key(self.plan, op.tensor, src)
                assert key is not None
                holder = block_region(self.plan, op.tensor, key)
                cut = Cut(
                    self.need(op.tensor, key),
                    where(piece, holder),
                    where(piece, op.box),
                    getattr(piece, "index_words", 0),
                )
                pieces.append((src, cut))
            got = self.gathers[id(op)] = Gather(shape(op.box), tuple(pieces))
        return got

    def received(self, op: Fetch) -> tuple[tuple[int, Piece], ...]:
        """The pieces of ``op`` that come from other processors, as the unit counts them."""
        if isinstance(op.box, tuple):
            return tuple((src, b) for src, b in op.pieces if src != self.p)
        g = self.buffer(op)
        assert isinstance(g, Gather)
        return tuple(
            (src, cut)
            for (src, cut), (_, piece) in zip(g.pieces, op.pieces, strict=True)
            if src != self.p and (words(piece) or getattr(piece, "index_words", 0))
        )

    def out_pieces(self, seg: _Segment) -> tuple[tuple[tuple[Key, Piece], ...], tuple]:
        """Where a segment's partial goes, and the ``Flush`` sends among those pieces.

        A box buffer is split by the output's placement (its ``Flush`` pieces only say
        whom each piece is counted to, which routing may change); a buffer added straight
        into the owned block is that block; a buffer of rows or stored entries goes where
        its ``Flush`` says, each piece to the block its destination owns.
        """
        plan, out = self.plan, self.plan.output
        box = seg.out.box
        sends = seg.flush.sends if seg.flush is not None else ()
        if seg.out.direct:
            key = owner_key(plan, out, self.p)
            assert key is not None
            if isinstance(box, tuple):
                return ((key, box),), sends
            return ((key, Cut(-1, (slice(None),), (slice(None),))),), ()
        if isinstance(box, tuple):
            return tuple(plan.placements[out].split(box)), sends
        assert seg.flush is not None
        pieces, cut_sends = [], []
        for dst, part in [*((self.p, x) for x in seg.flush.local), *seg.flush.sends]:
            key = owner_key(plan, out, dst)
            assert key is not None
            cut = Cut(-1, where(part, box), where(part, block_region(plan, out, key)))
            pieces.append((key, cut))
            if dst != self.p:
                cut_sends.append((dst, cut))
        return tuple(pieces), tuple(cut_sends)


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
    units: list[Unit] = []
    relayed = frozenset(id(m.box) for m in plan.messages if m.kind == FETCH and m.relay)
    for p in range(plan.nprocs):
        cutter = _Cutter(plan, p, relayed)
        buffers: dict[str, Buffer | None] = {}
        # fetches not yet used by a Compute: the first unit using one receives it
        unclaimed: dict[str, tuple[tuple[int, Piece], ...]] = {}
        segments: list[_Segment] = []
        for s, ops in enumerate(ops_by_step(plan, p)[: plan.nsteps]):
            for op in ops:
                if isinstance(op, Fetch) and op.tensor in plan.inputs:
                    buffers[op.tensor] = None if op.box is None else cutter.buffer(op)
                    remote = () if op.box is None else cutter.received(op)
                    if not remote:
                        unclaimed.pop(op.tensor, None)
                    else:
                        unclaimed[op.tensor] = remote
                elif isinstance(op, OpenOutput):
                    segments.append(_Segment(op))
                elif isinstance(op, Compute) and segments:
                    bufs = tuple(
                        sorted(
                            ((t, b) for t, b in buffers.items() if b is not None),
                            key=lambda tb: tb[0],
                        )
                    )
                    recv = tuple(sorted(unclaimed.items()))
                    unclaimed.clear()
                    works = (op.work,) if op.work is not None else ()
                    segments[-1].steps.append((s, bufs, op.boxes, works, recv))
                elif isinstance(op, Flush) and segments:
                    segments[-1].flush = op
        for seg in segments:
            pieces, sends = cutter.out_pieces(seg)
            out_box = seg.out.box if isinstance(seg.out.box, tuple) else Span(shape(seg.out.box))
            chunks = _chunks(seg.steps, granularity)
            for n, chunk in enumerate(chunks):
                needs: set[tuple[str, Key]] = set()
                for _, bufs, _, _, _ in chunk:
                    for t, b in bufs:
                        if isinstance(b, tuple):
                            needs.update((t, idx) for idx, _ in plan.placements[t].split(b))
                        else:
                            needs.update(k for k, i in cutter.needs.items() if k[0] == t)
                ordered = _ordered(needs, cutter)
                own = tuple(n for n, (t, k) in enumerate(ordered) if k == owner_key(plan, t, p))
                units.append(
                    Unit(
                        name=f"part-p{p}-s{chunk[0][0]}-{chunk[-1][0]}",
                        proc=p,
                        first=chunk[0][0],
                        out_box=out_box,
                        steps=tuple((bufs, boxes, works) for _, bufs, boxes, works, _ in chunk),
                        needs=ordered,
                        pieces=pieces,
                        receives=tuple(r for _, _, _, _, recv in chunk for r in recv),
                        sends=sends if n == len(chunks) - 1 else (),
                        direct=seg.out.direct,
                        own=own,
                    )
                )
    return units


def _ordered(needs: set[tuple[str, Key]], cutter: _Cutter) -> tuple[tuple[str, Key], ...]:
    """A unit's needs: sorted, except that a gathered buffer's blocks keep the positions
    its cuts name (they are the processor's first needs when it gathers any)."""
    if not cutter.gathers:
        return tuple(sorted(needs))
    order = sorted(cutter.needs.items(), key=lambda kv: kv[1])
    return tuple(k for k, _ in order)


def fuse(units: list[Unit], blocks: Mapping[Key, Region]) -> list[Unit]:
    """Mark units that alone make a whole output block (e.g. a GEMM owner's direct sum).

    Such a unit's result is the finished block: it is checkpointed under the block's name
    and needs no reduction task, which halves the tasks and files of owner-computes plans.
    """
    contributors: dict[Key, list[Unit]] = defaultdict(list)
    for u in units:
        for idx, _ in u.pieces:
            contributors[idx].append(u)
    out = []
    for u in units:
        if len(u.pieces) == 1:
            idx, piece = u.pieces[0]
            if idx in blocks and len(contributors[idx]) == 1 and _whole(piece, u, blocks[idx]):
                u = replace(u, name=block_name(idx), final=True)
        out.append(u)
    return out


def _whole(piece: Piece, u: Unit, block: Region) -> bool:
    """Whether ``piece`` of ``u``'s buffer is the whole buffer and the whole ``block``."""
    if isinstance(piece, tuple):
        return piece == u.out_box == block
    full = (slice(None),)
    return (
        isinstance(u.out_box, Span)
        and piece.src == full
        and piece.dst == full
        and u.out_box.shape == shape(block)
    )


def block_name(idx: tuple[int, ...]) -> str:
    """Checkpoint entry name of output block ``idx``."""
    return "block-" + "-".join(str(i) for i in idx) if idx else "block"


__all__ = [
    "GRANULARITIES",
    "Cut",
    "Cuts",
    "Gather",
    "Span",
    "Unit",
    "block_name",
    "block_region",
    "decompose",
    "fuse",
    "gather_cuts",
    "owner_key",
]
