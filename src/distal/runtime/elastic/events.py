"""What the elastic core hears and what it says: frozen events in, frozen instructions out.

The core (:mod:`.core`) never calls Dask, NATS or the clock. A loop around it (the Dask
driver, :mod:`.driver`; the volunteer pool's NATS loop) turns what happens into the
events below, hands them to ``Core.handle``, and carries out the instructions it gets back.
Time enters only as the ``now`` of an event, in seconds on any monotonic clock the loop
chooses (the same clock for every event of a run).

Tasks are named by *keys* the core makes (``Submit*.key``); the loop keeps whatever handle
its transport gives for a key (a Dask future, a NATS request id) and reports on it by that
key. Workers are named by any string the transport uses (a Dask worker's address).
"""

from __future__ import annotations

from dataclasses import dataclass

# -- events: what the loop heard ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pool:
    """The workers present now, with their threads (``threads``: ``(worker, n)`` pairs),
    and those of them holding no data and running nothing (``empty``: a worker that just
    joined, or one whose blocks were all lost). Sent when the run starts and then every
    second or so: windows, restrictions and speculation read the last one."""

    now: float
    threads: tuple[tuple[str, int], ...]
    empty: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed with nothing else to tell (deadlines, speculation and the run's
    ``timeout`` are looked at on every event that carries a time)."""

    now: float


@dataclass(frozen=True, slots=True)
class Started:
    """Copy ``copy`` (0: the original; ``n``: speculative copy ``n``) of unit ``name``
    began computing on ``worker``: its inputs are in place. ``fetched`` bytes of them
    came over the network in ``fetch_seconds`` (what the unit's worker measured), which
    is how the core learns the links' rate. ``now``: when the loop heard it."""

    now: float
    name: str
    worker: str
    copy: int = 0
    fetched: int = 0
    fetch_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Computed:
    """A unit's execution ended on ``worker`` after ``seconds`` (``iterations``: what its
    leaves visited; ``reused``: it loaded its checkpoint entry instead). Timing only: the
    result itself is reported by :class:`Finished`."""

    name: str
    worker: str
    seconds: float
    iterations: int = 0
    copy: int = 0
    reused: bool = False


@dataclass(frozen=True, slots=True)
class Finished:
    """Task ``key`` completed on ``worker`` (``""``: not known); ``holders``: every worker
    holding its result now, as the transport says (a check is kept off all of them: one
    may hold a copy fetched by a task that reads it)."""

    key: str
    worker: str = ""
    holders: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Failed:
    """Task ``key`` failed. ``rejected``: it was a check, and the result it checked failed
    (the check's verdict, not a fault); anything else fails the run, unless the task was a
    speculative copy (the original still runs)."""

    key: str
    rejected: bool = False
    error: str = ""


@dataclass(frozen=True, slots=True)
class Queues:
    """The tasks each worker has been given and not finished (``processing``: ``(worker,
    keys)`` pairs), the answer to :class:`AskQueues`."""

    now: float
    processing: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True, slots=True)
class Outvoted:
    """``verify=k``: the copies of ``name`` made by ``workers`` disagreed with the majority
    (made by ``accepted``); ``block``: a reduction's copies."""

    name: str
    workers: tuple[str, ...]
    accepted: tuple[str, ...] = ()
    block: bool = False


@dataclass(frozen=True, slots=True)
class Wrote:
    """``worker`` reported checkpoint entry ``entry`` in place (``digest``: its content
    digest, on a store whose entries the driver seals). ``recheck``: a re-verification on a
    trusted worker vouched for it (or rewrote it)."""

    entry: str
    worker: str
    digest: str | None = None
    recheck: bool = False


@dataclass(frozen=True, slots=True)
class Refused:
    """A task found entry ``entry`` holding other bytes than its seal vouches for."""

    entry: str


@dataclass(frozen=True, slots=True)
class Received:
    """Output block ``block`` reached the loop; ``digest``: the content digest of what
    arrived (compared with the writer's report before the entry is sealed)."""

    block: str
    digest: str


Event = (
    Pool | Tick | Started | Computed | Finished | Failed | Queues | Outvoted | Wrote | Refused
    | Received
)  # fmt: skip

# -- instructions: what the loop is to do ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Where:
    """Which workers may take a task: any (``workers`` empty), or these; ``strict``: only
    these (else a preference the transport may override when they are gone)."""

    workers: tuple[str, ...] = ()
    strict: bool = False


ANYWHERE = Where()


@dataclass(frozen=True, slots=True)
class SubmitUnit:
    """Run unit ``name`` as task ``key``.

    ``load``: look for its checkpoint entry first; ``save``: write its entry; ``fresh``:
    the entry was not there when the run began (one found now was written by an earlier
    execution in this run). ``copy > 0``: speculative copy ``copy`` (logs under the unit's
    own name, hands the unit its description from the driver: the worker holding a held
    one may be the stuck one); ``redo > 0``: attempt ``redo`` after a rejected check."""

    key: str
    name: str
    where: Where = ANYWHERE
    load: bool = False
    save: bool = False
    fresh: bool = False
    copy: int = 0
    redo: int = 0


@dataclass(frozen=True, slots=True)
class SubmitAgreed:
    """``verify=k``: unit ``name`` as ``k`` copies (``copies``: ``(copy key, worker)``,
    pinned there, ``strict`` once a worker is excluded) and task ``key`` accepting the
    majority (run ``where``)."""

    key: str
    name: str
    copies: tuple[tuple[str, str], ...]
    strict: bool
    where: Where = ANYWHERE


@dataclass(frozen=True, slots=True)
class SubmitCheck:
    """Check task ``of``'s result of unit ``name`` (computed ``by`` that worker) as task
    ``key``, ``where`` (never on ``by``); ``save``: a passing check writes the entry.
    ``attempt`` numbers the unit's checks (each draws its own random vectors)."""

    key: str
    name: str
    of: str
    by: str
    attempt: int
    where: Where
    save: bool


@dataclass(frozen=True, slots=True)
class SubmitReduce:
    """Sum block ``block`` from ``parts`` (``(unit name, key of its accepted result)``, the
    loop puts them in the reducer's order) as task ``key``; ``save``: write its entry.
    With ``copies`` (``verify=k``) ``k`` pinned copies and an agreeing task ``key``."""

    key: str
    block: str
    parts: tuple[tuple[str, str], ...]
    where: Where = ANYWHERE
    save: bool = True
    copies: tuple[tuple[str, str], ...] = ()
    strict: bool = False


@dataclass(frozen=True, slots=True)
class SubmitReduceCheck:
    """Check reduction ``of`` (block ``block``, summed ``by`` that worker) from the same
    ``parts``, as task ``key``."""

    key: str
    block: str
    parts: tuple[tuple[str, str], ...]
    of: str
    by: str
    attempt: int
    where: Where
    save: bool


@dataclass(frozen=True, slots=True)
class SubmitRecheck:
    """Re-verify checkpoint entry ``entry`` (written by a worker since excluded) on a
    trusted worker, as task ``key``: a unit's entry (``parts`` empty) against its inputs,
    a block's against its checked summands ``parts``."""

    key: str
    entry: str
    parts: tuple[tuple[str, str], ...]
    where: Where


@dataclass(frozen=True, slots=True)
class Release:
    """The core no longer needs these tasks (losing copies, summed units): drop them, and
    stop them where they have not started."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Deliver:
    """Output block ``block`` is task ``key``'s result (``unit``: the unit that alone made
    it, whose sends the delivery counts; ``""`` for a reduction)."""

    block: str
    key: str
    unit: str = ""


@dataclass(frozen=True, slots=True)
class AskQueues:
    """Send a :class:`Queues` event (what each worker has been given): the core needs it
    to place a speculative copy."""


@dataclass(frozen=True, slots=True)
class Seal:
    """Seal checkpoint entry ``entry`` as holding ``digest`` (only the driver has the key)."""

    entry: str
    digest: str


@dataclass(frozen=True, slots=True)
class Unseal:
    """Withdraw entry ``entry``'s seal (its writer lost the run's trust, or its reports
    conflict): no later run loads it before it is sealed again."""

    entry: str


@dataclass(frozen=True, slots=True)
class Fail:
    """End the run with an error: ``kind`` ``"verification"`` (no agreement, no trusted
    worker left), ``"input"`` (the pool cannot do what the options ask), ``"timeout"``,
    ``"pool"`` (no workers for too long) or ``"task"`` (task ``key`` failed)."""

    kind: str
    message: str
    key: str = ""


Instruction = (
    SubmitUnit | SubmitAgreed | SubmitCheck | SubmitReduce | SubmitReduceCheck | SubmitRecheck
    | Release | Deliver | AskQueues | Seal | Unseal | Fail
)  # fmt: skip


__all__ = [
    "ANYWHERE",
    "AskQueues",
    "Computed",
    "Deliver",
    "Event",
    "Fail",
    "Failed",
    "Finished",
    "Instruction",
    "Outvoted",
    "Pool",
    "Queues",
    "Received",
    "Refused",
    "Release",
    "Seal",
    "Started",
    "SubmitAgreed",
    "SubmitCheck",
    "SubmitRecheck",
    "SubmitReduce",
    "SubmitReduceCheck",
    "SubmitUnit",
    "Tick",
    "Unseal",
    "Where",
    "Wrote",
]
