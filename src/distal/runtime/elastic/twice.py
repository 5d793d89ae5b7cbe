"""Checking a session's small jobs by doing them twice: the decisions, without IO.

Under ``verify=`` a Dask session checks the jobs that do one operation per word they read
(an element-wise map's block, a cut of held blocks, a fused set's block with its partial
sums) by computing each on one trusted worker and again on another, which compares; where
the two disagree a third computes it and decides, and the worker it contradicts is
excluded. :class:`Twice` makes those decisions for one set of jobs -- who computes, who
checks (one check task per pair of workers: a task costs more than checking a block), who
judges, which result is kept, whom to exclude -- from events, as :class:`~.core.Core` does
for a run; the caller submits the tasks and reports their verdicts::

    t = Twice(pool, excluded, trust)
    todo = t.start(len(jobs))          # Assign, CheckOn (batched per pair), Keep, or Fail
    ...                                # run them; read each checked job's verdict
    todo = t.handle(Verdict(n, ok))    # Keep, or Judge (a third worker), or Fail
    todo = t.handle(Judged(n, same))   # Keep (the first result or the judge's), Exclude

Under ``verify="adaptive"`` a job goes to its checker only as ``trust`` draws for the
computing worker; every verdict lengthens or resets that worker's streak.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from distal.runtime.elastic.events import Fail

# -- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """The checking worker's verdict on job ``job``: it agrees with the first result."""

    job: int
    ok: bool


@dataclass(frozen=True, slots=True)
class Judged:
    """The judge's result of job ``job`` is the same as the first worker's (``same``)."""

    job: int
    same: bool


# -- instructions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assign:
    """Compute job ``job`` on ``worker`` (pinned)."""

    job: int
    worker: str


@dataclass(frozen=True, slots=True)
class CheckOn:
    """On ``worker``, compute ``jobs`` again and compare each with what ``of`` computed: one
    task, a verdict per job."""

    worker: str
    of: str
    jobs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Judge:
    """Job ``job``'s two results disagree: compute it on ``worker`` and compare with the
    first worker's (report :class:`Judged`)."""

    job: int
    worker: str


@dataclass(frozen=True, slots=True)
class Keep:
    """Job ``job``'s result is the first worker's (``first``) or the judge's."""

    job: int
    first: bool = True


@dataclass(frozen=True, slots=True)
class Exclude:
    """``worker`` made (or vouched for) a wrong result: no further task goes there."""

    worker: str


class Twice:
    """The decisions for one set of jobs checked by doing them twice (module docstring).

    ``pool``: the workers present; ``excluded``: those no longer trusted (a set the caller
    keeps for the session: :class:`Exclude` is also added to it); ``trust``: the session's
    :class:`~.trust.Trust` under ``verify="adaptive"``, else None.
    """

    def __init__(
        self,
        pool: Collection[str],
        excluded: set[str],
        trust: Any = None,
        what: str = "element-wise maps and cuts of held values",
    ) -> None:
        self.excluded, self.trust, self.what = excluded, trust, what
        self.pool: list[str] = sorted(set(pool) - excluded)
        self.first: dict[int, str] = {}  # job -> the worker computing it
        self.checker: dict[int, str] = {}  # job -> the worker checking it
        self.judge: dict[int, str] = {}
        self.checked = 0  # jobs sent to a check

    def start(self, count: int) -> list[Any]:
        """Assign ``count`` jobs round-robin over the trusted workers, each checked by the
        next one (as the trust draws); a failure when fewer than two are trusted."""
        pool = self.pool
        if len(pool) < 2:
            return [
                Fail(
                    "verification",
                    f"{self.what} are checked on a second worker, and {len(pool)} trusted "
                    "worker(s) are left",
                )
            ]
        out: list[Any] = []
        pairs: dict[tuple[str, str], list[int]] = {}
        for n in range(count):
            a, b = pool[n % len(pool)], pool[(n + 1) % len(pool)]
            self.first[n] = a
            out.append(Assign(n, a))
            if self.trust is None or self.trust.should_check(a):
                pairs.setdefault((a, b), []).append(n)
                self.checker[n] = b
        for (a, b), ns in pairs.items():
            out.append(CheckOn(b, a, tuple(ns)))
        self.checked = len(self.checker)
        out += [Keep(n) for n in range(count) if n not in self.checker]
        return out

    def handle(self, *events: Verdict | Judged) -> list[Any]:
        """The decisions that follow the verdicts and judgements in ``events``."""
        out: list[Any] = []
        for ev in events:
            if isinstance(ev, Verdict):
                out += self._verdict(ev)
            else:
                out += self._judged(ev)
        return out

    def _verdict(self, ev: Verdict) -> list[Any]:
        a, b = self.first[ev.job], self.checker[ev.job]
        if ev.ok:
            if self.trust is not None:
                self.trust.passed(a)
            return [Keep(ev.job)]
        judges = [w for w in self.pool if w not in (a, b) and w not in self.excluded]
        if not judges:
            return [
                Fail(
                    "verification",
                    f"workers {a} and {b} disagree on a block and no third trusted worker is "
                    "left to decide",
                )
            ]
        self.judge[ev.job] = judges[0]
        return [Judge(ev.job, judges[0])]

    def _judged(self, ev: Judged) -> list[Any]:
        a, b = self.first[ev.job], self.checker[ev.job]
        liar = b if ev.same else a  # the judge sides with the first result, or against it
        self.excluded.add(liar)
        if self.trust is not None:
            self.trust.failed(liar)
        return [Keep(ev.job, first=ev.same), Exclude(liar)]


def pairs_of(todo: Sequence[Any]) -> list[CheckOn]:
    """The check tasks among ``todo`` (one per pair of workers)."""
    return [i for i in todo if isinstance(i, CheckOn)]


__all__ = [
    "Assign",
    "CheckOn",
    "Exclude",
    "Judge",
    "Judged",
    "Keep",
    "Twice",
    "Verdict",
    "pairs_of",
]
