"""Routing rewrites: tree broadcasts and tree reductions keep results and stats exact.

``dl.compile(s, routing="tree")`` routes every group of processors fetching one piece from
one owner (or sending partial sums of one box to one reducer) through a binomial tree. The
local runtime must still match numpy, its measured stats must equal the vectorised
prediction, and the enumerated plan's stats must equal it too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, note

import distal as dl
from distal import algorithms as al
from distal.plan.engine import summarize
from distal.plan.ir import FETCH, PARTIAL
from plan_oracle import plan_stats
from reference import Case, apply_schedule, assert_stats_equal, cases


@pytest.mark.parametrize("routing", ["broadcast", "tree"])
@given(case=cases())
def test_tree_routing_is_exact(routing: str, case: Case) -> None:
    note(case.code())
    built = case.build()
    sched = apply_schedule(dl.schedule(built.output), case.ops, built)
    kernel = dl.compile(sched, routing=routing)
    inputs = case.problem.random_inputs(np.random.default_rng(0))
    res = kernel.run(inputs)
    np.testing.assert_allclose(res.value, case.problem.expected(inputs), rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, kernel.stats())
    assert plan_stats(kernel.plan).as_dict() == summarize(sched, routing).stats.as_dict()


def test_reduction_tree_unloads_the_reducer() -> None:
    """Inner product on 8 processors: 7 partial sums reach the reducer directly, 3 by tree."""
    alg = al.inner_product((8, 8, 8), machine=dl.Machine(2, 2, 2))
    direct = dl.compile(alg.schedule, routing="direct")
    tree = dl.compile(alg.schedule, routing="tree")
    assert direct.stats().messages_received[0] == 7
    assert tree.stats().messages_received[0] == math.ceil(math.log2(8))
    inputs = alg.inputs(1)
    np.testing.assert_allclose(tree.run(inputs).value, alg.reference(inputs), rtol=1e-12)


def test_broadcast_tree_fans_out_by_doubling() -> None:
    """Each group of k receivers of one piece: the owner sends ceil(log2(k+1)) messages."""
    alg = al.row_1d(16, machine=dl.Machine(8))
    kernel = dl.compile(alg.schedule, routing="tree")
    per_group: dict[tuple, int] = {}
    for m in kernel.plan.messages:
        if m.kind == FETCH:
            per_group[m.step, m.tensor, m.box] = per_group.get((m.step, m.tensor, m.box), 0) + 1
    sent_by: dict[tuple, int] = {}
    for m in kernel.plan.messages:
        if m.kind == FETCH:
            key = (m.step, m.tensor, m.box, m.src)
            sent_by[key] = sent_by.get(key, 0) + 1
    for (step, tensor, box, _src), n in sent_by.items():
        k = per_group[step, tensor, box]
        assert n <= math.ceil(math.log2(k + 1))
    assert any(m.relay for m in kernel.plan.messages)


def test_routing_choice_and_errors() -> None:
    alg = al.johnson_3d(8, machine=dl.Machine(2, 2, 4))
    auto = dl.compile(alg.schedule)
    assert auto.routing in ("direct", "broadcast", "tree")
    assert dl.compile(alg.schedule, routing="direct").routing == "direct"
    with pytest.raises(dl.ScheduleError, match="'fastest'"):
        dl.compile(alg.schedule, routing="fastest")
    assert not any(
        m.kind == PARTIAL and m.relay for m in dl.compile(alg.schedule, "direct").plan.messages
    )
