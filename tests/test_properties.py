"""Property-based differential tests: random problems, machines, distributions and schedules.

Every result must equal numpy.einsum (float64, rtol 1e-10), the measured statistics must equal
the predicted ones field by field, and every point of the iteration space must run exactly
once.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

import distal as dl
from reference import (
    Case,
    apply_schedule,
    assert_stats_equal,
    assert_stats_sane,
    cases,
    distributions,
    machine_shapes,
)


def check_case(case: Case, seed: int = 0) -> None:
    note(case.code())
    built = case.build()
    sched = apply_schedule(dl.schedule(built.output), case.ops, built)
    kernel = dl.compile(sched)
    predicted = kernel.stats()
    points = case.problem.iteration_points()
    assert_stats_sane(predicted, points)
    if any(op[0] == "distribute" for op in case.ops):
        assert len(predicted.iterations) == built.machine.size
    elif all(d is None for d in case.dists.values()):
        # everything lives and runs on processor 0: nothing moves
        assert sum(predicted.words_received) == 0
    if built.machine.size == 1:
        assert sum(predicted.words_received) == 0

    inputs = case.problem.random_inputs(np.random.default_rng(seed))
    expected = case.problem.expected(inputs)
    res = kernel.run(inputs)
    value = np.asarray(res.value)
    assert value.shape == expected.shape
    assert np.allclose(value, expected, rtol=1e-10, atol=1e-10), (value, expected)
    assert_stats_equal(res.stats, predicted)
    # stats() is a pure function of the plan: asking again gives the same answer
    assert_stats_equal(kernel.stats(), predicted)


@given(cases(with_schedule=False))
def test_default_schedule_matches_einsum(case: Case) -> None:
    check_case(case)


@given(cases(with_schedule=True))
def test_random_schedule_matches_einsum(case: Case) -> None:
    check_case(case)


@given(cases(with_schedule=True, eager=True))
def test_random_distributed_schedule_matches_einsum(case: Case) -> None:
    """Always distributed, with reorder / rotate / communicate more often."""
    check_case(case)


@given(cases(with_schedule=True, max_vars=3, allow_sum=False), st.integers(0, 2**16))
def test_random_schedule_small_products(case: Case, seed: int) -> None:
    check_case(case, seed)


@given(cases(with_schedule=True))
def test_rerun_is_deterministic(case: Case) -> None:
    """Running a kernel twice gives the same value and the same measured stats."""
    note(case.code())
    built = case.build()
    kernel = dl.compile(apply_schedule(dl.schedule(built.output), case.ops, built))
    inputs = case.problem.random_inputs(np.random.default_rng(1))
    r1 = kernel.run(inputs)
    r2 = kernel.run(inputs)
    assert np.allclose(np.asarray(r1.value), np.asarray(r2.value), rtol=1e-12, atol=1e-12)
    assert_stats_equal(r1.stats, r2.stats)
    # the caller's arrays are not modified
    again = case.problem.random_inputs(np.random.default_rng(1))
    for name, arr in inputs.items():
        assert np.array_equal(arr, again[name]), name


@given(
    st.integers(0, 4).flatmap(
        lambda order: st.tuples(st.just(order), machine_shapes()).flatmap(
            lambda t: st.tuples(st.just(t[0]), st.just(t[1]), distributions(t[0], t[1]))
        )
    )
)
def test_legal_distribution_strings_are_accepted(args: tuple) -> None:
    order, mshape, dist = args
    note(f"order={order} machine={mshape} dist={dist!r}")
    m = dl.Machine(*mshape)
    t = dl.Tensor("T", (3,) * order, dist=dist, machine=m)
    assert t.shape == (3,) * order
    assert t.ndim == order
    assert t.machine is m or t.machine == m
