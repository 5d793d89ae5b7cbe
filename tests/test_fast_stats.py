"""The vectorised statistics (``kernel.stats()``) equal those of the enumerated plan.

``distal.plan.fast`` computes stats without building the plan; ``plan_stats`` counts the
enumerated plan's messages and replays its memory model. They must agree on every field,
per-level traffic included, for random problems, distributions and schedules.
"""

from __future__ import annotations

from hypothesis import given, note

import distal as dl
from distal.plan.fast import summarize
from distal.plan.stats import plan_stats
from reference import Case, apply_schedule, cases


@given(case=cases())
def test_vectorised_stats_equal_plan_stats(case: Case) -> None:
    note(case.code())
    built = case.build()
    sched = apply_schedule(dl.schedule(built.output), case.ops, built)
    kernel = dl.compile(sched)
    fast = summarize(sched)
    exact = plan_stats(kernel.plan)
    assert fast.stats.as_dict() == exact.as_dict()
    for m in kernel.plan.messages:
        fast.moved[m.tensor, m.kind][0] -= m.words
        fast.moved[m.tensor, m.kind][1] -= 1
    assert all(v == [0, 0] for v in fast.moved.values())


def test_hierarchical_levels_agree() -> None:
    n = 12
    m = dl.Machine(2, 2).nest(dl.Machine(2))
    i, j, k = dl.index_vars("i j k")
    a = dl.Tensor("A", (n, n), dist=["xy -> xy", "xy -> x"], machine=m)
    b = dl.Tensor("B", (n, n), dist=["xy -> xy", "xy -> y"], machine=m)
    c = dl.Tensor("C", (n, n), dist=["xy -> xy", "xy -> x"], machine=m)
    a[i, j] = b[i, k] * c[k, j]
    io, jo, ii, ji, ko, ki, kio, kii = dl.index_vars("io jo ii ji ko ki kio kii")
    s = (
        dl.schedule(a)
        .distribute([i, j], [io, jo], [ii, ji], m.level(0))
        .divide(k, ko, ki, 2)
        .reorder([ko, ii, ji])
        .communicate(a, jo)
        .communicate([b, c], ko)
        .distribute([ki], [kio], [kii], m.level(1))
    )
    kernel = dl.compile(s)
    exact = plan_stats(kernel.plan)
    assert kernel.stats().as_dict() == exact.as_dict()
    assert len(exact.level_words_received) == 2
