"""Adaptive trust (``verify="adaptive"``): check a worker's results less often the longer
its run of verified results, as BOINC's adaptive replication does.

Under ``verify="check"`` every unit and reduction is checked on another worker, which in a
loop of short kernels costs about as many tasks again as the work. ``verify="adaptive"``
checks a result computed on worker ``w`` with probability

    ``p(n) = 1``                                  while ``n < WARMUP``,
    ``p(n) = max(FLOOR, DECAY ** (n - WARMUP + 1))`` after,

where ``n`` is ``w``'s streak: its results that passed a check since it joined (or since its
last failure). Only checked results lengthen a streak, so trust is earned at the rate
checks happen: from ``WARMUP`` on, the ``k``-th further passed check takes about
``DECAY^-k`` results, and the floor is reached after about 100 results of the worker (the
``WARMUP`` first, all checked, then some 86 of which 13 are checked). A failed check resets
the streak to 0 and excludes the worker from the run, as under ``"check"``; the streak
lives as long as the :class:`Trust` (a session keeps one for all its runs, so trust earned
in one iteration of a loop carries to the next). The draw uses the operating system's
randomness (:class:`secrets.SystemRandom`): a worker cannot tell which of its results will
be checked, so it cannot lie only on the unchecked ones.

**What it guarantees.** Each result of a worker is checked with probability at least
``FLOOR``, independently of the others, whatever the worker did before. A worker that
returns wrong results therefore has each of them caught with probability at least
``FLOOR`` (times the check's own detection probability, ``1 - 2^-20`` by default), so the
number of wrong results it gets accepted before its first is caught is at most ``k`` with
probability at least ``1 - (1 - FLOOR)^(k+1)``; its expected number is at most
``(1 - FLOOR) / FLOOR`` (19 with ``FLOOR = 1/20``). That is the trade: ``"check"`` accepts
a wrong result with probability at most ``2^-20``; ``"adaptive"`` bounds how many a liar
slips through before it is caught and excluded, not whether one does. Results loaded from
a checkpoint are always checked (their writer is not the worker that loaded them), and so
is every result of a worker still in its warm-up.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

WARMUP = 10
"""Verified results a worker needs before any of its results goes unchecked."""

FLOOR = 1 / 20
"""The least probability with which any one result is checked."""

DECAY = 0.8
"""How much less likely each further passed check makes the next check."""


def check_probability(streak: int) -> float:
    """``p(n)``: how likely a result of a worker with ``streak`` verified results is checked."""
    if streak < WARMUP:
        return 1.0
    return max(FLOOR, DECAY ** (streak - WARMUP + 1))


def false_accept_bound(k: int) -> float:
    """The most probability with which a lying worker gets more than ``k`` wrong results
    accepted before one is caught: ``(1 - FLOOR)^(k+1)``."""
    return (1.0 - FLOOR) ** (k + 1)


@dataclass
class Trust:
    """Every worker's streak of verified results, and what the sampling did."""

    streaks: dict[str, int] = field(default_factory=dict)
    checked: int = 0  # results sent to a check
    unchecked: int = 0  # results accepted without one
    failures: int = 0
    _rng: secrets.SystemRandom = field(default_factory=secrets.SystemRandom, repr=False)

    def should_check(self, worker: str) -> bool:
        """Draw whether the result ``worker`` just computed is checked (and count it)."""
        return self.decide(self._rng.random(), worker)

    def draw(self, pool: Iterable[str]) -> float | None:
        """The draw for a result made by one of ``pool``'s workers, before asking which:
        None (counted unchecked) when it is at least every one of their probabilities, so
        no worker's result would be checked with it; else the draw, for :meth:`decide`
        once the worker is known. Asking the scheduler which worker holds a result is a
        round trip, and at the floor 19 of 20 results need no answer.

        A worker that joined after ``pool`` was looked at may have a result skipped in its
        warm-up this way; never with a probability above ``1 - FLOOR``, as the draw is
        compared with at least ``FLOOR``.
        """
        u = self._rng.random()
        top = max((check_probability(self.streaks.get(w, 0)) for w in pool), default=1.0)
        if u >= top:
            self.unchecked += 1
            return None
        return u

    def decide(self, u: float, worker: str) -> bool:
        """Whether draw ``u`` checks the result ``worker`` computed (and count it)."""
        if u < check_probability(self.streaks.get(worker, 0)):
            self.checked += 1
            return True
        self.unchecked += 1
        return False

    def passed(self, worker: str) -> None:
        """A result of ``worker`` passed its check: its streak grows."""
        self.streaks[worker] = self.streaks.get(worker, 0) + 1

    def failed(self, worker: str) -> None:
        """A result of ``worker`` failed its check: its trust starts again from nothing."""
        self.streaks[worker] = 0
        self.failures += 1

    def as_dict(self) -> dict[str, Any]:
        """Plain data (streaks and counts), to keep the trust where a pool keeps its state."""
        return {
            "streaks": dict(self.streaks),
            "checked": self.checked,
            "unchecked": self.unchecked,
            "failures": self.failures,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trust:
        """The trust :meth:`as_dict` wrote (a fresh draw: the randomness is never kept)."""
        streaks = {str(w): int(n) for w, n in dict(d.get("streaks", {})).items()}
        return cls(
            streaks,
            int(d.get("checked", 0)),
            int(d.get("unchecked", 0)),
            int(d.get("failures", 0)),
        )


__all__ = ["DECAY", "FLOOR", "WARMUP", "Trust", "check_probability", "false_accept_bound"]
