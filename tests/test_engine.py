"""The plan engine against an independent oracle, whole and per processor.

``distal.plan.engine`` evaluates the lowering's rules with arrays over processors; the
oracle (``plan_oracle``) walks one processor and one step at a time. For random problems,
distributions, schedules and every routing they must give the same messages and the same
instructions; ``kernel.stats()`` must equal the stats counted from either plan; and each
processor's own program (``kernel.program(p)``, built without the others) must equal its
part of the whole plan, instruction for instruction and message for message.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, note
from hypothesis import strategies as hst

import distal as dl
import plan_oracle
from distal.plan.engine import ROUTINGS, Engine, program, summarize
from distal.plan.ir import Plan
from plan_oracle import plan_stats
from reference import Case, apply_schedule, cases

_PHASES = ("Fetch", "Forward", "OpenOutput", "Compute", "Combine", "Flush", "Reduce")


def _by_phase(ops) -> Counter:
    """A program as a multiset of instructions: the order within one step and phase is free."""
    return Counter((getattr(op, "step", -1), type(op).__name__, repr(op)) for op in ops)


def _msg_key(m):
    return (m.step, m.kind, m.tensor, m.src, m.dst, m.box, m.hop, m.relay)


def assert_plans_agree(engine: Plan, oracle: Plan) -> None:
    assert engine.nsteps == oracle.nsteps
    assert engine.primary == oracle.primary
    assert sorted(map(_msg_key, engine.messages)) == sorted(map(_msg_key, oracle.messages))
    for p in range(engine.nprocs):
        assert _by_phase(engine.ops(p)) == _by_phase(oracle.programs[p]), f"processor {p}"


@given(case=cases(), routing=hst.sampled_from(ROUTINGS))
def test_engine_equals_the_oracle(case: Case, routing: str) -> None:
    note(case.code())
    built = case.build()
    sched = apply_schedule(dl.schedule(built.output), case.ops, built)
    whole = Engine(sched, routing).plan()
    oracle = plan_oracle.lower(sched, routing)
    assert_plans_agree(whole, oracle)
    predicted = summarize(sched, routing)
    assert predicted.stats.as_dict() == plan_stats(oracle).as_dict()
    assert predicted.stats.as_dict() == plan_stats(whole).as_dict()
    moved = Counter()
    for m in oracle.messages:
        moved[m.tensor, m.kind, "w"] += m.words
        moved[m.tensor, m.kind, "n"] += 1
    for (t, k), (w, n) in predicted.moved.items():
        assert (moved[t, k, "w"], moved[t, k, "n"]) == (w, n)
    for p in range(whole.nprocs):
        own = program(sched, p, routing)
        assert own.ops(p) == whole.ops(p), f"processor {p}"
        assert own.messages == whole.restrict(p).messages, f"processor {p}"


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
    exact = plan_stats(plan_oracle.lower(s, kernel.routing))
    assert kernel.stats().as_dict() == exact.as_dict()
    assert len(exact.level_words_received) == 2
    for p in range(m.size):
        assert kernel.program(p).ops(p) == kernel.plan.ops(p)


def test_program_names_a_missing_processor() -> None:
    alg = dl.algorithms.summa(8, machine=dl.Machine(2, 2))
    kernel = dl.compile(alg.schedule)
    with pytest.raises(dl.InputError, match="processor 4 does not exist"):
        kernel.program(4)
    with pytest.raises(dl.InputError, match="processor '0' does not exist"):
        kernel.program("0")
    own = kernel.program(3)
    assert own.procs == (3,)
    assert all(3 in (m.src, m.dst) for m in own.messages)
    with pytest.raises(dl.DistalError, match="not 2"):
        own.ops(2)


@given(case=cases())
def test_one_walk_counts_every_routing(case: Case) -> None:
    """``routing="auto"`` compares routings counted in one walk; each equals its own walk."""
    built = case.build()
    sched = apply_schedule(dl.schedule(built.output), case.ops, built)
    together = Engine(sched).summaries(ROUTINGS)
    for routing in ROUTINGS:
        alone = summarize(sched, routing)
        assert together[routing].stats.as_dict() == alone.stats.as_dict()
        assert together[routing].moved == alone.moved
        if alone.per_step is not None:
            assert (together[routing].per_step == alone.per_step).all()


@given(case=cases())
def test_totals_without_per_step_counts_agree(case: Case) -> None:
    """Large plans keep only totals (and count one-message-per-receiver batches in place)."""
    from unittest import mock

    from distal.plan import sinks

    built = case.build()
    sched = apply_schedule(dl.schedule(built.output), case.ops, built)
    kept = Engine(sched).summaries(ROUTINGS)
    with mock.patch.object(sinks, "PER_STEP_LIMIT", -1):
        lean = Engine(sched).summaries(ROUTINGS)
    for routing in ROUTINGS:
        assert lean[routing].per_step is None
        assert lean[routing].stats.as_dict() == kept[routing].stats.as_dict()
        assert lean[routing].moved == kept[routing].moved


def test_explain_lists_one_processors_program() -> None:
    kernel = dl.compile(dl.algorithms.cannon(8, machine=dl.Machine(2, 2)).schedule, "direct")
    text = kernel.explain(processor=1)
    assert text.startswith(kernel.explain())
    listing = text[len(kernel.explain()) :]
    own = kernel.program(1)
    assert "program of processor 1 (2 steps; sends 2 messages, 32 words" in listing
    assert listing.count("fetch ") == sum(type(op).__name__ == "Fetch" for op in own.ops(1))
    assert "[4:8, 4:8] from 3" in listing  # processor 1 gets C's block from processor 3


@pytest.mark.parametrize("ordered", [True, False])
def test_tree_links_are_binomial_trees(ordered: bool) -> None:
    """Every group's members, by processor number, form the binomial tree under its root."""
    import numpy as np

    from distal.plan.arrays import tree_links

    rng = np.random.default_rng(7)
    member = np.sort(rng.choice(100_000, size=6000, replace=False))
    group = rng.integers(0, 3, size=len(member))
    group[:4500] = 3  # one group larger than 4096
    if ordered:
        idx = np.argsort(group, kind="stable")
        member, group = member[idx], group[idx]
    else:
        idx = rng.permutation(len(member))
        member, group = member[idx], group[idx]
    root = -1 - group
    parent, pos, relay = tree_links(root, member, group)
    for g in np.unique(group):
        nodes = [int(-1 - g), *sorted(member[group == g].tolist())]
        for i in range(1, len(nodes)):
            k = np.nonzero(member == nodes[i])[0][0]
            up = i - (1 << (i.bit_length() - 1))
            assert parent[k] == nodes[up]
            assert pos[k] == i
            assert relay[k] == (up != 0)
    alone, no_pos, no_relay = tree_links(root, member, group, links=False)
    assert (alone == parent).all()
    assert no_pos is None
    assert no_relay is None
