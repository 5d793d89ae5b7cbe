"""Stats of tiny problems on big machines, where most processors own nothing.

``kernel.stats()`` (the plan engine's summary walk) keeps as active only the processors
that run an iteration at some step, and the cost model applies to all processors at once:
``n = 8`` on ``Machine(1000, 1000)`` spent minutes on a million idle processors. These
tests check the narrowed walk against the whole plan, counted message by message.
"""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal.cost.model import MachineParams, stats_cost
from distal.plan.engine import ROUTINGS, Engine, lower
from distal.plan.sinks import count_plan


def _schedules():
    yield "cannon", dl.algorithms.cannon(8, machine=dl.Machine(12, 12)).schedule
    yield "summa", dl.algorithms.summa(8, machine=dl.Machine(12, 12)).schedule
    yield "johnson_3d", dl.algorithms.johnson_3d(6, machine=dl.Machine(4, 4, 4)).schedule
    yield "ragged summa", dl.algorithms.summa(9, 5, 7, machine=dl.Machine(8, 6)).schedule


@pytest.mark.parametrize(("name", "sched"), list(_schedules()), ids=[n for n, _ in _schedules()])
def test_summary_of_idle_processors_equals_the_whole_plan(name, sched):
    """Every routing's stats equal the enumerated plan's, and the walk keeps only the
    processors that compute (the others are counted as idle, not walked step by step)."""
    engine = Engine(sched, "direct")
    summaries = engine.summaries(ROUTINGS)
    for routing in ROUTINGS:
        whole = count_plan(lower(sched, routing)).stats
        assert summaries[routing].stats.as_dict() == whole.as_dict(), (name, routing)
    busy = int(np.count_nonzero(summaries["direct"].stats.iterations))
    assert busy < sched.machine.size  # the case has idle processors
    assert engine.A == busy


def test_cost_of_many_processors_is_the_per_processor_formula():
    """``stats_cost`` over arrays equals the model written per processor, slowest first."""
    params = MachineParams(alpha=2e-6, beta=1e-9, gamma=1e-12)
    stats = dl.compile(dl.algorithms.summa(8, machine=dl.Machine(12, 12)).schedule).stats()
    cost = stats_cost(stats, 2, params)
    per = [
        params.alpha * max(mr, ms) + params.beta * max(wr, ws) + params.gamma * 2 * it
        for mr, ms, wr, ws, it in zip(
            stats.messages_received,
            stats.messages_sent,
            stats.words_received,
            stats.words_sent,
            stats.iterations,
            strict=True,
        )
    ]
    assert cost.per_processor == tuple(per)
    assert cost.seconds == max(per)
    assert cost.max_words == max(stats.words_received)
    assert cost.peak_words == max(stats.peak_words)
