"""Property-based differential tests: random problems, machines, distributions and schedules.

Every result must equal numpy.einsum (float64, rtol 1e-10), the measured statistics must equal
the predicted ones field by field, and every point of the iteration space must run exactly
once.
"""

from __future__ import annotations

from typing import Any

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


# -- terms that skip a summed variable ---------------------------------------------------------
# ``A[i] = B[i,k]*C[k] + D[i]``: D's term has no k, so it must be added once however k is cut
# (the leaf adds it only where k == 0); ``A[i] = B[i] + C[i,k]``: one term sums over a variable
# the other lacks; two terms summing over different variables; a term that also lacks an
# output variable (broadcast). The generator above never makes these (both of its terms hold
# the same summed variables).

SKIP_FORMS: dict[str, tuple[str, tuple[tuple[tuple[str, str], ...], ...]]] = {
    # name: (output letters, terms as ((tensor, letters), ...))
    "bk*c+d": ("i", ((("B", "ik"), ("C", "k")), (("D", "i"),))),
    "b+ck": ("i", ((("B", "i"),), (("C", "ik"),))),
    "gemm+d": ("ij", ((("B", "ik"), ("C", "kj")), (("D", "ij"),))),
    "two-sums": ("i", ((("B", "ik"), ("C", "k")), (("E", "il"), ("F", "l")))),
    "broadcast": ("ij", ((("B", "ij"),), (("C", "ik"), ("D", "k")))),
    "d-first": ("i", ((("D", "i"),), (("B", "ikl"), ("C", "k"), ("F", "l")))),
}


@st.composite
def skip_cases(draw: st.DrawFn) -> dict:
    form = draw(st.sampled_from(sorted(SKIP_FORMS)))
    out, terms = SKIP_FORMS[form]
    letters = sorted({c for t in terms for _, idx in t for c in idx} | set(out))
    extent = {c: draw(st.integers(1, 7)) for c in letters}
    sched = draw(st.sampled_from(["default", "distribute", "split-k", "distribute-split-k"]))
    procs = draw(st.sampled_from([2, 3]))
    steps = draw(st.integers(1, 4))
    signs = draw(st.lists(st.sampled_from([1.0, -1.0, 2.5]), min_size=2, max_size=2))
    return {"form": form, "extent": extent, "schedule": sched, "procs": procs,
            "steps": steps, "coeffs": signs}  # fmt: skip


def build_skip_case(c: dict) -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    out, terms = SKIP_FORMS[c["form"]]
    ext = c["extent"]
    var = dict(zip(sorted(ext), dl.index_vars(" ".join(sorted(ext))), strict=True))
    distributed = c["schedule"].startswith("distribute")
    m = dl.Machine(c["procs"])

    def dist(idx: str) -> str:
        if not distributed:
            return None  # type: ignore[return-value]
        return f"{idx} -> {'x' if 'i' in idx else '*'}"

    names = {n: idx for t in terms for n, idx in t}
    tensors = {
        n: dl.Tensor(n, tuple(ext[ch] for ch in idx), dist=dist(idx), machine=m)
        for n, idx in names.items()
    }
    A = dl.Tensor("A", tuple(ext[ch] for ch in out), dist=dist(out), machine=m)
    exprs = []
    for coeff, t in zip(c["coeffs"], terms, strict=True):
        e = None
        for n, idx in t:
            acc = tensors[n][tuple(var[ch] for ch in idx)]
            e = acc if e is None else e * acc
        exprs.append(coeff * e)
    A[tuple(var[ch] for ch in out)] = exprs[0] + exprs[1]
    s = dl.schedule(A)
    if distributed:
        io, ii = dl.index_vars("io ii")
        s = s.distribute([var["i"]], [io], [ii], m)
    if c["schedule"].endswith("split-k") and "k" in var:
        ko, ki = dl.index_vars("ko ki")
        size = max(1, -(-ext["k"] // c["steps"]))
        s = s.split(var["k"], ko, ki, size)
        serial = [v for v in s.loops if v not in s.processor_loops]
        s = s.reorder([ko, *(v for v in serial if v is not ko)])  # k's pieces outermost
        if distributed:
            s = s.communicate([*tensors.values()], ko).communicate(A, io)
    elif distributed:
        s = s.communicate([A, *tensors.values()], s.loops[0])
    rng = np.random.default_rng(0)
    data = {n: rng.standard_normal(t.shape) for n, t in tensors.items()}
    want = np.zeros(A.shape)
    for coeff, t in zip(c["coeffs"], terms, strict=True):
        ins = ",".join(idx for _, idx in t)
        kept = "".join(ch for ch in out if ch in ins)
        r = coeff * np.einsum(f"{ins}->{kept}", *(data[n] for n, _ in t))
        for pos, ch in enumerate(out):
            if ch not in kept:
                r = np.expand_dims(r, pos)
        want = want + r
    return s, data, want


@given(skip_cases())
def test_terms_skipping_a_summed_variable_match_einsum(c: dict) -> None:
    note(repr(c))
    sched, data, want = build_skip_case(c)
    note(repr(sched))
    kernel = dl.compile(sched)
    predicted = kernel.stats()
    res = kernel.run(data)
    value = np.asarray(res.value)
    assert value.shape == want.shape
    assert np.allclose(value, want, rtol=1e-10, atol=1e-10), (value, want)
    assert_stats_equal(res.stats, predicted)
