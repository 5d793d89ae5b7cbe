"""Untrusted pools: a worker that corrupts results, randomized checks, quorums, TLS.

The liar is a worker process with ``DISTAL_FAULT_CORRUPT`` set (wrong with probability q).
Each check runs on a dense kernel (GEMM, MTTKRP: integer data, exact) and on a sparse one
(SpMV cut by rows or by non-zeros on 6 virtual processors, checked against the local
runtime bit for bit). A dense run has tens of units, so one run catches the liar; SpMV
has six tasks, two on the liar, so its runs are repeated (bounded) until it is caught.
The rules that only sparse kernels meet (SpMV checked by recomputing, a result over
stored entries projected, checkpoint rechecks of a bound plan) close the file.
"""

from __future__ import annotations

import contextlib
import datetime
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import (
    Problem,
    assert_stats,
    bits,
    dense_of,
    entry_calls,
    gemm,
    gemm_inputs,
    gemm_problem,
    mttkrp,
    mttkrp_expected,
    mttkrp_inputs,
    mttkrp_problem,
    process_pool,
    sparse_problem,
    summed_blocks,
    unit_blocks,
)

import distal as dl
from distal.arrays.program import LARGE
from distal.runtime.checkpoint import CheckpointStore
from distal.runtime.dask import decompose
from distal.runtime.elastic import check, tasks, units
from distal.runtime.elastic.tasks import Ctx, VerificationFailed

pytestmark = [pytest.mark.dask, pytest.mark.timeout(90)]

FAULT = "DISTAL_FAULT_CORRUPT"
LIAR = {FAULT: "0.5"}
N, P = 120, 6  # the SpMV problems: 120 x 120, 6 virtual processors
RUNS = 12  # SpMV runs until the liar is caught: each misses it with probability <= 1/4


def _liar(client: Any) -> str:
    """The address of the worker whose process has the fault hook set."""
    env = client.run(lambda: __import__("os").environ.get("DISTAL_FAULT_CORRUPT", ""))
    return next(a for a, q in env.items() if q)


@pytest.fixture(scope="module")
def liar_pool() -> Any:
    with process_pool([LIAR, {}, {}]) as c:
        yield c


def spmv_problem(split: str, seed: int = 0) -> Problem:
    """SpMV ``a = B c``, 120 x 120 (density 0.08) over 6 processors, cut by rows or by
    non-zeros: compute tasks go round-robin over three workers, so the liar has two."""
    return sparse_problem("spmv", split, seed, n=N, procs=P, density=0.08)


def _case(name: str) -> tuple[Problem, dict[str, Any], int]:
    """A problem for the liar pool, the options it runs with and the runs it gets to catch
    the liar. GEMM and MTTKRP: 64 and 48 units (granularity="step"), the liar computes about
    a third of them, each wrong with probability 1/2, so one run misses it with odds ~2^-16;
    SpMV: ``RUNS`` runs."""
    if name == "gemm":
        return gemm_problem(), {"granularity": "step"}, 1
    if name == "mttkrp":
        return mttkrp_problem(24, (4, 4)), {"granularity": "step"}, 1
    return spmv_problem(name.split()[1]), {}, RUNS


def _liar_name(client: Any) -> Any:
    """The liar's worker name (what ``faults={"lie": ...}`` names)."""
    return client.scheduler_info()["workers"][_liar(client)]["name"]


def _until_caught(p: Problem, local: Any, client: Any, runs: int, **opts: Any) -> Any:
    """Run until the liar is excluded; every run exact, only the liar ever blamed, the
    stats the plan's."""
    liar, bound = _liar(client), p.bound
    for _ in range(runs):
        res = bound.run(p.inputs, runtime="dask", client=client, timeout=60, **opts)
        p.check(res.value, local.value)
        s = res.extra["summary"]
        assert s.excluded_workers in ([], [liar]), str(s)
        assert all(r["worker"] == liar for r in s.rejections), s.rejections
        assert_stats(res.stats, bound)
        if s.excluded_workers:
            return res
    pytest.fail(f"the liar was never caught in {runs} run(s)")


@pytest.mark.parametrize("verify", ["check", 3, "adaptive"])
@pytest.mark.parametrize("name", ["gemm", "mttkrp", "spmv row", "spmv nz"])
def test_a_lying_worker_is_caught_excluded_and_its_units_recomputed(
    liar_pool: Any, name: str, verify: Any
) -> None:
    """Every run exact while the liar is still in the pool, the liar caught and excluded.

    Under ``"adaptive"`` a worker's results are sampled once it has ``trust.WARMUP``
    verified results, so a liar right on its first ten may get a later wrong result
    accepted (the documented bound, ``trust.false_accept_bound``, not a per-result
    guarantee): the q=1/2 liar is right on its first ten with odds 2^-10, and then gets a
    wrong result through in about 3 runs of 10^4 (its GEMM run), so exactness is not what
    must hold for it. Here the liar is wrong on every result (``faults={"lie": ...}`` on
    top of the hook): it never passes a check, never leaves its warm-up, so each result it
    returns is checked and every run must be exact."""
    liar = _liar(liar_pool)
    p, opts, runs = _case(name)
    if verify == "adaptive":
        opts["faults"] = {"lie": {_liar_name(liar_pool)}}
    bound = p.bound
    res = _until_caught(p, p.local(), liar_pool, runs, verify=verify, **opts)
    s = res.extra["summary"]
    print(name, s, s.rejections)
    assert s.excluded_workers == [liar], (name, str(s))
    assert s.units_rejected + s.reductions_rejected >= 1
    if not p.sparse:
        assert s.units_rejected >= 1
    if verify in ("check", "adaptive"):
        # every rejected result was made again, on a worker other than the liar
        assert all(r.get("recomputed_on") not in (None, liar) for r in s.rejections)
    if verify == "check":
        assert all(r["how"] == "check" and r["kind"] in ("unit", "reduction") for r in s.rejections)
        granularity = opts.get("granularity", "flush")
        us = decompose(bound.plan, granularity)
        assert s.checked == len(us)
        assert s.reductions_checked == len(summed_blocks(bound.plan, granularity))
        if name == "mttkrp":
            assert s.reductions_checked == len(bound.plan.primary)
        if p.sparse:
            assert s.checked == P
        assert s.recomputed >= len(s.rejections)
    if verify == 3:
        assert all(r["how"].startswith("outvoted by ") for r in s.rejections)
        assert all(liar not in r["how"] for r in s.rejections)
        assert s.verified == s.tasks_total
    assert "excluded workers: " + liar in str(s)


@pytest.mark.parametrize("name", ["gemm", "spmv nz"])
def test_without_verification_the_corruption_gets_through(request: Any, name: str) -> None:
    """The hook is real: with verify=1 the liar's wrong results reach the output, each off
    by exactly 1.0 in one element. GEMM: q=1, every unit the liar returns is wrong, so the
    first run shows it; SpMV on the q=0.5 pool: up to 20 runs."""
    if name == "gemm":
        p, tries = gemm_problem(), 1
        pool: Any = process_pool([{FAULT: "1.0"}, {}, {}])
    else:
        p, tries = spmv_problem("nz"), 20
        pool = contextlib.nullcontext(request.getfixturevalue("liar_pool"))
    bound, local = p.bound, p.local()
    with pool as c:
        liar = _liar(c)
        for _ in range(tries):
            res = bound.run(p.inputs, runtime="dask", client=c, speculate=False, timeout=60)
            s = res.extra["summary"]
            assert s.excluded_workers == []
            assert s.rejections == []
            if not np.array_equal(bits(res.value), bits(local.value)):
                break
        else:
            pytest.fail(f"no corrupted result got through in {tries} run(s)")
    assert s.per_worker.get(liar, 0) >= 1
    assert not np.allclose(dense_of(res.value), p.want, rtol=1e-12)
    # each corruption adds 1.0 to one element of a compute result or a block
    err = np.abs(dense_of(res.value) - dense_of(local.value))
    assert err.max() >= 1.0 - 1e-9
    assert np.allclose(err, np.round(err), rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", ["mttkrp", "spmv nz"])
def test_a_lying_reducer_is_caught_and_its_block_summed_again(liar_pool: Any, name: str) -> None:
    """The liar (q=0.5, units and reductions alike) is usually caught on a unit before it
    sums a block, so the run is repeated until one of its reductions was rejected. MTTKRP on
    2x2 processors sums partials into 2 blocks: each run ~1/6, 80 runs miss with odds ~5e-7.
    SpMV by non-zeros: about one run in three that caught the liar, up to 30 of them, each
    within ``RUNS`` runs. Every run is exact and excludes only the liar."""
    liar = _liar(liar_pool)
    if name == "mttkrp":
        p, tries, caught_within = mttkrp_problem(), 80, 0
    else:
        p, tries, caught_within = spmv_problem("nz"), 30 * RUNS, RUNS
    bound, local = p.bound, p.local()
    blocks = summed_blocks(bound.plan)
    if name == "mttkrp":
        assert blocks == set(bound.plan.primary)
    uncaught = 0  # runs since the liar was last caught
    for _ in range(tries):
        res = bound.run(p.inputs, runtime="dask", client=liar_pool, verify="check", timeout=60)
        p.check(res.value, local.value)
        s = res.extra["summary"]
        assert s.excluded_workers in ([], [liar]), str(s)
        assert all(r["worker"] == liar for r in s.rejections)
        assert s.reductions_checked == len(blocks)
        assert_stats(res.stats, bound)
        red = [r for r in s.rejections if r["kind"] == "reduction"]
        if red:
            break
        uncaught = 0 if s.excluded_workers else uncaught + 1
        if caught_within and uncaught >= caught_within:
            pytest.fail(f"the liar was never caught in {caught_within} runs")
    else:
        pytest.fail(f"the liar never had a reduction rejected in {tries} runs")
    assert s.excluded_workers == [liar]
    assert s.reductions_rejected == len({r["unit"] for r in red}) >= 1
    assert all(r["unit"].startswith("block-") for r in red)
    assert all(r.get("recomputed_on") not in (None, liar) for r in red)
    assert "reduction(s) recomputed elsewhere" in str(s)


def _done_on(client: Any, worker: str) -> tuple[int, int]:
    """Units and reductions the last run computed on ``worker`` (from the event log)."""
    topics = {t: ev for t, ev in client.get_events().items() if str(t).startswith("distal-")}
    last = max(topics, key=lambda t: max(e[0] for e in topics[t]))
    done = [
        m
        for _, m in topics[last]
        if m["kind"] == "done" and m["worker"] == worker and m.get("status") == "computed"
    ]
    units = sum(1 for m in done if m.get("unit"))
    blocks = sum(1 for m in done if str(m["name"]).startswith("block-"))
    return units, blocks


def test_without_verification_a_corrupted_reduction_gets_through() -> None:
    """q=1: every unit and every reduction the liar returns is off by exactly 1.0 in one
    element (integer data: all sums exact), so with verify=1 the output's total error is
    the number of tasks it computed, reductions included."""
    with process_pool([{"DISTAL_FAULT_CORRUPT": "1.0"}, {}, {}]) as c:
        liar = _liar(c)
        k, x = mttkrp(n=24, grid=(4, 4)), mttkrp_inputs(n=24)
        want = mttkrp_expected(x)
        for _ in range(20):
            res = k.run(x, runtime="dask", client=c, speculate=False, timeout=60)
            units, blocks = _done_on(c, liar)
            assert float(np.sum(res.value - want)) == units + blocks
            if blocks:
                break
        else:
            pytest.fail("the liar summed no block in 20 runs")
        assert res.extra["summary"].excluded_workers == []


def test_the_reduction_check_accepts_correct_sums_and_rejects_any_single_change() -> None:
    """Random (non-integer) partials: the rounding of a correct sum is within the bound; an
    error far below the data's size is caught; inf/nan summands are summed again."""
    rng = np.random.default_rng(3)
    ctx = tasks.Ctx("t", (), np.dtype(np.float64), None, lambda: None)
    box = ((4, 20), (0, 9))
    # three partials: one covering the block, two covering parts of it (one beyond it)
    boxes = [((4, 20), (0, 9)), ((4, 12), (0, 9)), ((10, 24), (3, 9))]
    pieces = [((4, 20), (0, 9)), ((4, 12), (0, 9)), ((10, 20), (3, 9))]
    contribs = [
        (rng.standard_normal(tuple(hi - lo for lo, hi in b)) * 1e3, b, p, 0, -1)
        for b, p in zip(boxes, pieces, strict=True)
    ]
    block, _ = tasks._sum_block(ctx, box, contribs)
    for seed in range(20):
        v = tasks.reduction_verdict(ctx, box, contribs, block, seed, None)
        assert v.ok, v
        assert v.diff <= v.tol
        e = block.copy()
        e.reshape(-1)[(7 * seed) % e.size] += 1e-6  # relative 1e-9 of entries ~1e3
        assert not tasks.reduction_verdict(ctx, box, contribs, e, seed, None).ok
    # a wrong shape, or a nan in the claimed block, never passes
    assert not tasks.reduction_verdict(ctx, box, contribs, block[:-1], 0, None).ok
    bad = block.copy()
    bad[0, 0] = np.nan
    assert not tasks.reduction_verdict(ctx, box, contribs, bad, 0, None).ok
    # a summand with inf: checked by summing again (exact, nan for nan)
    arr = contribs[1][0].copy()
    arr[0, 0] = np.inf
    contribs[1] = (arr, *contribs[1][1:])
    block, _ = tasks._sum_block(ctx, box, contribs)
    v = tasks.reduction_verdict(ctx, box, contribs, block, 0, None)
    assert v.ok
    assert v.exact
    bad = block.copy()
    bad[3, 3] += 1.0
    assert not tasks.reduction_verdict(ctx, box, contribs, bad, 0, None).ok


def _calls(k: Any, x: dict[str, np.ndarray], unit: Any) -> tuple[Any, list[Any]]:
    ctx = tasks.Ctx("t", k.kernels, np.dtype(np.float64), None, lambda: None)
    blocks = []
    for t, idx in unit.needs:
        box = k.plan.placements[t].block_box(idx)
        blocks.append((t, box, x[t][tuple(slice(lo, hi) for lo, hi in box)]))
    return ctx, blocks


Verdict = Callable[[np.ndarray, int], Any]  # (a claimed result, a seed) -> the check's verdict


def _unit_checks(kind: str) -> list[tuple[Verdict, np.ndarray, list[int]]]:
    """Per unit of a problem with random (non-integer) data: its check, its correct result
    and the seeds to check it with. A dense unit is checked by ``tasks.verdict`` (the first
    4 units, seeds 0..4); a sparse unit's result over stored entries by
    ``check.project_entries`` (every unit with a result, the seed its processor)."""
    rng = np.random.default_rng(7)
    out: list[tuple[Verdict, np.ndarray, list[int]]] = []
    if kind in ("gemm", "mttkrp"):
        k = gemm(n=32) if kind == "gemm" else mttkrp()
        shapes = {t: k.plan.placements[t].shape for t in k.plan.inputs}
        x = {t: rng.standard_normal(s) for t, s in shapes.items()}
        for unit in decompose(k.plan)[:4]:
            ctx, blocks = _calls(k, x, unit)
            y, _, _ = tasks._compute(ctx, unit, blocks)

            def verdict(
                r: np.ndarray, seed: int, c: Any = ctx, u: Any = unit, b: Any = blocks
            ) -> Any:
                return tasks.verdict(c, u, b, r, seed, None)

            out.append((verdict, y, list(range(5))))
        return out
    what, split = kind.split()
    p = sparse_problem(what, split)
    for u, _, _, calls, y in entry_calls(p.bound, p.inputs):
        if y.size == 0:
            continue

        def project(r: np.ndarray, seed: int, c: Any = calls, shape: Any = y.shape) -> Any:
            return check.project_entries(r, c, shape, np.dtype(np.float64), seed=seed)

        out.append((project, y, [u.proc]))
    assert len(out) == 4  # every processor of the sparse problems has a result
    return out


@pytest.mark.parametrize("kind", ["gemm", "mttkrp", "spmv nz-rowB", "spmm nz", "sddmm nz"])
def test_the_check_accepts_correct_results_and_rejects_any_single_change(kind: str) -> None:
    """Random (non-integer) data: the rounding of a correct result is within the bound; an
    error far below the data's size (1e-9 on entries of size ~1, or relative 1e-9) is
    caught, and so are a non-finite result and one of the wrong shape."""
    rng = np.random.default_rng(5)
    sparse = kind not in ("gemm", "mttkrp")
    for verdict, y, seeds in _unit_checks(kind):
        for seed in seeds:
            v = verdict(y, seed)
            assert v.ok, v
            assert v.diff <= v.tol
            if sparse:
                assert not v.exact  # projected, not recomputed
                for _ in range(3):
                    bad = y.copy()
                    e = rng.integers(bad.size)
                    bad.reshape(-1)[e] += 1e-9 * max(1.0, abs(bad.reshape(-1)[e]))
                    assert not verdict(bad, seed).ok
            else:
                assert (v.reps, v.dims) == (1, 2)
                e = y.copy()
                e.reshape(-1)[seed % y.size] += 1e-9
                assert not verdict(e, seed).ok
            # a non-finite result, or one of the wrong shape, never passes
            bad = y.copy()
            bad.reshape(-1)[0] = np.nan
            assert not verdict(bad, seed).ok
            assert not verdict(y[:-1], seed).ok


def test_repetitions_and_the_false_accept_bound() -> None:
    assert check.default_repeats(2) == 1  # 2 / 2^21 = 2^-20
    assert check.default_repeats(3) == 2
    assert check.false_accept_bound(2, 1) <= 2.0**-20
    assert check.false_accept_bound(3, check.default_repeats(3)) <= 2.0**-20
    r = check.vectors(1, [5, 7], 3)
    assert [a.shape for a in r] == [(3, 5), (3, 7)]
    assert all(((np.abs(a) >= 1) & (np.abs(a) < 2)).all() for a in r)
    # an error that +-1 vectors miss 3/4 of the time (all ones on a 2x2 block) is caught by
    # every draw from the larger set: (r1 + r2)(s1 + s2) never vanishes for |r|, |s| in [1,2)
    # with equal signs, and vanishes only when r1 = -r2 or s1 = -s2 (probability 2^-20 each)
    caught = 0
    for seed in range(200):
        ri, rj = check.vectors(seed, [2, 2], 1)
        caught += abs(ri[0].sum() * rj[0].sum()) > 0
    assert caught == 200


def test_verify_options_are_checked(liar_pool: Any) -> None:
    k, x = gemm(n=8, grid=(2, 2)), gemm_inputs(8)
    with pytest.raises(dl.InputError, match="verify must be a positive integer, 'check' or"):
        k.run(x, runtime="dask", client=liar_pool, verify="freivalds")
    with pytest.raises(dl.InputError, match="verify_repeats"):
        k.run(x, runtime="dask", client=liar_pool, verify="check", verify_repeats=0)


@pytest.mark.parametrize("name", ["gemm 2x2", "spmv row"])
def test_two_copies_must_still_agree(liar_pool: Any, name: str) -> None:
    """verify=2 keeps its meaning: two copies, a disagreement fails the run (each copy on
    the liar is wrong with probability 1/2; it holds a copy of two tasks in three)."""
    if name == "gemm 2x2":
        p, opts, tries = gemm_problem(16, (2, 2)), {"granularity": "step"}, 6
    else:
        p, opts, tries = spmv_problem("row"), {"timeout": 60}, RUNS
    bound = p.bound

    def runs() -> None:
        for _ in range(tries):
            bound.run(p.inputs, runtime="dask", client=liar_pool, verify=2, **opts)

    with pytest.raises(VerificationFailed, match="disagrees between workers"):
        runs()


@pytest.mark.parametrize("name", ["mttkrp", "spmv nz"])
def test_checked_runs_checkpoint_only_checked_results(
    liar_pool: Any, tmp_path: Path, name: str
) -> None:
    """A checked run's checkpoint holds only checked results: a rerun without checks loads
    every block and is exact. SpMV: runs until one caught the liar after it had written an
    entry (as the checker of another's result), which was then re-verified."""
    liar = _liar(liar_pool)
    p = mttkrp_problem() if name == "mttkrp" else spmv_problem("nz")
    bound, local = p.bound, p.local()
    tries = RUNS if p.sparse else 1
    for n in range(tries):
        ck = tmp_path / f"ck{n}"
        res = bound.run(
            p.inputs, runtime="dask", client=liar_pool, verify="check", checkpoint=ck, timeout=60
        )
        p.check(res.value, local.value)
        s = res.extra["summary"]
        if not p.sparse or (s.excluded_workers == [liar] and s.rechecked):
            break
    else:
        pytest.fail(f"no run caught the liar after it had written an entry in {RUNS} runs")
    again = bound.run(p.inputs, runtime="dask", client=liar_pool, checkpoint=ck, timeout=60)
    assert again.tasks_executed == 0
    p.check(again.value, local.value)


@pytest.mark.timeout(120)
def test_three_copies_without_a_majority_fail_the_run() -> None:
    """Two liars that are always wrong (each in an element of its own choosing): no two
    copies agree, so verify=3 has no majority and fails.

    Under load the run can wait over 10 s for a result; the driver's poll back-off then
    overflowed (``2**spins``) and the run died with an ``OverflowError`` while tasks still
    ran, the pool's shutdown logging ``CommClosedError``s. The back-off is capped now, and
    the pool is closed once its workers have finished what the failed run left running."""
    p = spmv_problem("row")
    bound = p.bound
    with process_pool([{FAULT: "1.0"}, {FAULT: "1.0"}, {}]) as c:
        with pytest.raises(VerificationFailed, match="no majority"):
            bound.run(p.inputs, runtime="dask", client=c, verify=3, timeout=60)
        _quiesce(c)


def _quiesce(client: Any, seconds: float = 30) -> None:
    """Wait (up to ``seconds``) until no task of ``client``'s pool is running: a pool closed
    under running tasks logs its workers' broken connections to the scheduler."""
    deadline = time.monotonic() + seconds
    while any(client.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.05)


class _Worker:
    """What a task reads of a Dask worker: its address, name and event log."""

    address, name = "tcp://test:1", "test"

    def log_event(self, topic: str, msg: dict[str, Any]) -> None:
        pass


def test_copies_on_one_worker_count_once_in_the_vote() -> None:
    """Dask may run two copies of a unit on one worker: a lying worker's two copies must not
    outvote an honest one, nor one worker's two copies pass for an agreement of two."""
    logged: list[dict[str, Any]] = []

    class Worker(_Worker):
        def log_event(self, topic: str, msg: dict[str, Any]) -> None:
            logged.append(msg)

    ctx = Ctx("t", (), np.dtype(np.float64), None, Worker)
    good, bad = np.arange(4.0), np.arange(4.0) + 1.0
    liar, honest, other = "tcp://liar:1", "tcp://honest:1", "tcp://other:1"

    def copies(*runs: tuple[np.ndarray, str]) -> list[tuple[np.ndarray, str, dict[str, Any]]]:
        return [(a, w, {}) for a, w in runs]

    # verify=3, two copies on the liar: one vote each, no majority
    with pytest.raises(VerificationFailed, match=r"no majority.*2 distinct worker"):
        tasks.agree_block_task(ctx, "b", copies((bad, liar), (bad, liar), (good, honest)), 0, 0)
    # verify=2, both copies on one worker: no second worker agreed
    with pytest.raises(VerificationFailed, match=r"no majority.*1 distinct worker"):
        tasks.agree_block_task(ctx, "b", copies((bad, liar), (bad, liar)), 0, 0)
    assert not [m for m in logged if m["kind"] in ("done", "outvoted")]
    # two honest workers outvote the liar whichever of them ran two copies
    runs = copies((good, honest), (bad, liar), (good, other), (good, honest))
    out = tasks.agree_block_task(ctx, "b", runs, 0, 0)
    assert np.array_equal(out, good)
    (voted,) = [m for m in logged if m["kind"] == "outvoted"]
    assert voted["workers"] == [liar]
    assert voted["accepted"] == [honest, other]
    assert [m["distinct"] for m in logged if m["kind"] == "done"] == [3]
    # a worker whose own copies disagree votes for nothing and is outvoted
    logged.clear()
    runs = copies((good, liar), (bad, liar), (good, honest), (good, other))
    assert np.array_equal(tasks.agree_block_task(ctx, "b", runs, 0, 0), good)
    (voted,) = [m for m in logged if m["kind"] == "outvoted"]
    assert voted["workers"] == [liar]
    assert voted["accepted"] == [honest, other]
    with pytest.raises(VerificationFailed, match="no majority"):
        tasks.agree_block_task(ctx, "b", copies((good, liar), (bad, liar), (good, honest)), 0, 0)


def test_rechecks_keep_a_sound_entry_and_rewrite_a_wrong_one(tmp_path: Path) -> None:
    """An excluded worker's entries of a bound plan (SpMV by non-zeros) are re-verified: a
    sound unit entry is kept, a wrong one recomputed and rewritten; so is a block, against
    its summands (a sparse unit's pieces are cuts of its buffer, a block a processor's
    owned span)."""
    p = spmv_problem("nz")
    bound = p.bound
    data = bound.check_inputs(p.inputs)
    store = CheckpointStore(str(tmp_path), "run")
    ctx = Ctx("t", bound.kernels, np.dtype(np.float64), store, _Worker)
    us = units.decompose(bound.plan)
    ys = {}
    for u in us:
        blocks = unit_blocks(bound, data, u)
        ys[u.name], _, _ = y, _, _ = tasks._compute(ctx, u.task(), blocks)
        store.save(u.name, y)
        assert tasks.recheck_task(ctx, u.task(), blocks, 1, None)
        bad = y.copy()
        bad[0] += 1e-6
        store.save(u.name, bad)
        assert not tasks.recheck_task(ctx, u.task(), blocks, 1, None)
        assert np.array_equal(store.load(u.name)[0], y)
    owned = bound.plan.owned.get("a") or [bound.plan.owned_region("a", q) for q in range(P)]
    for q in range(P):
        contribs = [
            (ys[u.name], u.out_box if isinstance(pc, tuple) else None, pc, u.proc, -1)
            for u in sorted(us, key=lambda u: (u.proc != q, u.proc))
            for idx, pc in u.pieces
            if idx == (q,)
        ]
        region = owned[q]
        box = region if isinstance(region, tuple) else units.Span(region.shape)
        name = units.block_name((q,))
        block, _ = tasks._sum_block(ctx, box, contribs)
        store.save(name, block)
        assert tasks.recheck_block_task(ctx, name, box, contribs)
        store.save(name, block + 1.0)
        assert not tasks.recheck_block_task(ctx, name, box, contribs)
        assert np.array_equal(store.load(name)[0], block)


def test_spmv_is_checked_against_its_kept_checksum_within_the_rounding_bound() -> None:
    """One product per entry: no fresh projection is cheaper than the SpMV, so the check
    keeps the unit's checksum ``c = r^T A`` (made on its first check) and tests ``r . y ==
    c . x``: a result summed in another order passes, an error of 1e-9 in one element does
    not, and every check after the first reuses the checksum."""
    rng = np.random.default_rng(2)
    for split in ("row", "nz"):
        p = spmv_problem(split)
        for u, blocks, ctx, _, y in entry_calls(p.bound, p.inputs):
            products, words, _, _ = tasks._costs(ctx, u, blocks)
            assert check.recompute_cheaper(products, words)
            before = Counter(tasks.checksum_counts)
            v = tasks.verdict(ctx, u, blocks, y, 1, None)
            assert v.ok, v.describe()
            assert not v.exact
            # the same sums in another order differ in the last bits: within the bound
            other = y * (1 + 4 * np.finfo(float).eps * rng.uniform(-1, 1, y.shape))
            v = tasks.verdict(ctx, u, blocks, other, 1, None)
            assert v.ok, v.describe()
            assert v.diff <= v.tol
            for _ in range(3):
                bad = y.copy()
                e = rng.integers(bad.size)
                bad[e] += 1e-9 * max(1.0, abs(bad[e]))
                assert not tasks.verdict(ctx, u, blocks, bad, 1, None).ok
            bad = y.copy()
            bad[0] = np.nan
            assert not tasks.verdict(ctx, u, blocks, bad, 1, None).ok
            assert not tasks.verdict(ctx, u, blocks, y[:-1], 1, None).ok
            got = Counter(tasks.checksum_counts)
            got.subtract(before)
            assert got["made"] <= 1, got
            assert got["reused"] >= 5, got


def test_a_unit_the_driver_names_is_checked_without_hashing_its_indices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the driver's name for the plan (``Ctx.plan_key``, as the elastic driver hands
    it), an SpMV unit's checksum is keyed by that name and the unit's values: its indices
    are never pickled or hashed again, and its costs are worked out once; a wrong element
    is still rejected, and another plan's units get checksums of their own."""
    import dataclasses
    import pickle

    p = spmv_problem("row")
    assert tasks.plan_key(p.bound.plan) == tasks.plan_key(p.bound.plan)
    other = spmv_problem("nz")
    assert tasks.plan_key(other.bound.plan) != tasks.plan_key(p.bound.plan)
    costed: list[str] = []
    real_costs = tasks._unit_costs
    monkeypatch.setattr(
        tasks, "_unit_costs", lambda ctx, u, b: costed.append(u.name) or real_costs(ctx, u, b)
    )
    for problem in (p, other):
        calls = entry_calls(problem.bound, problem.inputs)
        key = tasks.plan_key(problem.bound.plan)
        for u, blocks, ctx, _, y in calls:
            named = dataclasses.replace(ctx, plan_key=key)
            assert tasks.verdict(named, u, blocks, y, 1, None).ok  # makes the checksum

        def no_pickle(*a: Any, **k: Any) -> Any:
            raise AssertionError("a named unit's structure was pickled")

        with monkeypatch.context() as m:
            m.setattr(pickle, "dumps", no_pickle)
            before = Counter(tasks.checksum_counts)
            costed.clear()
            for u, blocks, ctx, _, y in calls:
                named = dataclasses.replace(ctx, plan_key=key)
                assert tasks.verdict(named, u, blocks, y, 1, None).ok
                bad = y.copy()
                bad[bad.size // 2] += 1e-9 * max(1.0, abs(bad[bad.size // 2]))
                assert not tasks.verdict(named, u, blocks, bad, 1, None).ok
            got = Counter(tasks.checksum_counts)
            got.subtract(before)
            assert got["made"] == 0, got
            assert got["reused"] == 2 * len(calls), got
            assert costed == []  # costed on the first check of each unit only


@pytest.mark.parametrize("n", [1, 2, 3, 63, 64, 65, 1000, 4097])
def test_the_checksums_blocked_sum_is_within_its_stated_additions(n: int) -> None:
    """The checksum's sums add each summand at most ``depth`` times: the rounding bound it
    states, against the exact sum (``math.fsum``)."""
    import math

    rng = np.random.default_rng(n)
    p = rng.standard_normal((2, n)) * 10.0 ** rng.integers(-3, 4, (2, n))
    got, depth = check._blocked_sum(p)
    want_depth = (
        (7 + math.ceil(math.log2(math.ceil(n / 8)))) if n >= 64 else math.ceil(math.log2(n))
    )
    assert depth == want_depth
    for q in range(2):
        exact = math.fsum(p[q])
        bound = check._gamma(depth, check.U64) * float(np.abs(p[q]).sum())
        assert abs(got[q] - exact) <= bound


def test_without_checksums_an_spmv_unit_is_recomputed_at_every_check() -> None:
    """``verify_checksums=False``: the check computes the unit again (each element to its
    own rounding), so an error far below the checksum's bound is still caught."""
    import dataclasses

    p = sparse_problem("spmv", "row", 7, n=4000, procs=2, density=0.002)
    for u, blocks, ctx, _, y in entry_calls(p.bound, p.inputs):
        plain = dataclasses.replace(ctx, checksums=False)
        v = tasks.verdict(plain, u, blocks, y, 1, None)
        assert v.ok, v.describe()
        assert v.exact
        kept = tasks.verdict(ctx, u, blocks, y, 1, None)
        assert kept.ok, kept.describe()
        assert not kept.exact
        # an error between the two bounds: inside the checksum's, far outside each element's
        k = int(np.argmax(np.abs(y)))
        bad = y.copy()
        bad[k] += kept.tol / 4
        assert 1e-12 * abs(y[k]) < kept.tol / 4
        assert tasks.verdict(ctx, u, blocks, bad, 1, None).ok
        assert not tasks.verdict(plain, u, blocks, bad, 1, None).ok


def test_spmv_with_a_non_finite_vector_is_checked_by_recomputing() -> None:
    """An ``inf`` in the vector makes the checksum's magnitude bound meaningless: the unit is
    computed again, and then the bits must agree."""
    p = spmv_problem("row")
    inputs = dict(p.inputs)
    c = np.array(inputs["c"], dtype=float)
    c[3] = np.inf
    inputs["c"] = c
    for u, blocks, ctx, _, y in entry_calls(p.bound, inputs):
        v = tasks.verdict(ctx, u, blocks, y, 1, None)
        assert v.ok, v.describe()
        if not np.all(np.isfinite(y)):
            assert v.exact
            bad = y.copy()
            bad[np.isfinite(bad)] += 1.0
            assert not tasks.verdict(ctx, u, blocks, bad, 1, None).ok


def test_a_wide_spmm_is_checked_by_projection() -> None:
    """``A = B C`` with 32 columns: 32 products per entry, more than the projection's passes."""
    p = sparse_problem("spmm", "row", seed=4, n=N, procs=4, density=0.08, K=32)
    for u, blocks, ctx, _, y in entry_calls(p.bound, p.inputs):
        products, words, _, _ = tasks._costs(ctx, u, blocks)
        assert not check.recompute_cheaper(products, words)
        v = tasks.verdict(ctx, u, blocks, y, 1, None)
        assert v.ok, v.describe()
        assert not v.exact  # projected, not recomputed
        bad = y.copy()
        bad[1, 3] += 1e-7  # the projection's tolerance bounds all of M: ~1e-9 here
        assert not tasks.verdict(ctx, u, blocks, bad, 1, None).ok


# --- TLS -------------------------------------------------------------------------------


def _certificates(where: Path) -> tuple[str, str, str]:
    """A CA and one certificate it signed for 127.0.0.1 (ca file, cert file, key file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "distal test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    files = where / "ca.pem", where / "cert.pem", where / "key.pem"
    files[0].write_bytes(ca.public_bytes(pem))
    files[1].write_bytes(cert.public_bytes(pem))
    files[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tuple(str(f) for f in files)  # type: ignore[return-value]


def test_a_tls_pool_runs_and_refuses_a_worker_without_the_certificate(tmp_path: Path) -> None:
    from distributed.security import Security

    ca, cert, key = _certificates(tmp_path)
    sec = Security(
        tls_ca_file=ca,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        require_encryption=True,
    )
    with process_pool([{}, {}], security=sec) as c:
        addr = c.scheduler.address
        assert addr.startswith("tls://")
        k, x = gemm(), gemm_inputs()
        res = k.run(x, runtime="dask", client=c, verify="check", timeout=60)
        assert np.allclose(res.value, x["B"] @ x["C"], rtol=1e-12, atol=0)
        before = len(c.scheduler_info()["workers"])
        # a worker with no certificate (the CLI, as on another machine) cannot join
        intruder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                addr,
                "--nthreads",
                "1",
                "--no-nanny",
                "--death-timeout",
                "8",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, err = intruder.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            intruder.kill()
            _, err = intruder.communicate()
        time.sleep(0.5)
        assert len(c.scheduler_info()["workers"]) == before == 2
        assert intruder.returncode != 0, err[-2000:]
        # with the certificate the same command joins
        joined = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                addr,
                "--nthreads",
                "1",
                "--no-nanny",
                "--tls-ca-file",
                ca,
                "--tls-cert",
                cert,
                "--tls-key",
                key,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            c.wait_for_workers(3, timeout=30)
            assert len(c.scheduler_info()["workers"]) == 3
        finally:
            joined.terminate()
            joined.communicate(timeout=30)


@pytest.mark.parametrize("verify", ["check", "adaptive"])
def test_a_liar_in_a_cg_session_is_excluded_and_the_solution_exact(pool: Any, verify: str) -> None:
    """CG on the 12x12 Laplacian in a Dask session whose worker 0 returns a wrong result
    for every unit (``faults={"lie": {0}}``): the first run that hands it a unit catches
    and excludes it, the session keeps it out of every later run, and the iterates are,
    bit for bit, those of the same session without the liar (and scipy's to rounding)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(12, 12))
    A = (sp.kron(sp.eye(12), t) + sp.kron(t, sp.eye(12))).tocsr()
    b = np.ones(144)
    liar = next(a for a, w in pool.scheduler_info()["workers"].items() if w["name"] == 0)
    with dl.Session(
        "dask", client=pool, machine=4, progress=False, verify=verify, faults={"lie": {0}}
    ) as sess:
        x, its = dl.apps.cg(A, b, session=sess, maxiter=12, tol=0.0)
        assert sess.excluded_workers == {liar}
        assert "excluded workers: " + liar in sess.summary()
    # a verified session fuses as an unverified one does (each fused block computed twice)
    with dl.Session("dask", client=pool, machine=4, progress=False) as honest:
        want, _ = dl.apps.cg(A, b, session=honest, maxiter=12, tol=0.0)
        assert honest.excluded_workers == set()
    assert its == 12
    assert np.array_equal(x, want)
    ref, _ = spla.cg(A, b, x0=np.zeros(144), rtol=0, atol=0, maxiter=12)
    assert np.allclose(x, ref, rtol=1e-10, atol=1e-12)


def test_a_cg_session_checks_its_spmv_against_checksums_made_once(pool: Any) -> None:
    """In a CG session the matrix is the same every iteration: each SpMV unit's checksum
    ``c = r^T A`` is made on its first check and reused by the later ones, whose cost is
    then the unit's rows and columns; the solution is exact."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(12, 12))
    A = (sp.kron(sp.eye(12), t) + sp.kron(t, sp.eye(12))).tocsr()
    b = np.ones(144)
    before = Counter(tasks.checksum_counts)
    with dl.Session("dask", client=pool, machine=4, progress=False, verify="check") as sess:
        x, its = dl.apps.cg(A, b, session=sess, maxiter=10, tol=0.0)
        assert sess.excluded_workers == set()
    got = Counter(tasks.checksum_counts)
    got.subtract(before)
    # 4 SpMV units, 10 products: made at most once per unit and process (the pool's
    # workers share this test's process; an earlier test on the same matrix may have made
    # them already), reused by every later check
    assert got["made"] <= 4, got
    assert got["reused"] >= 4 * 10 - got["made"], got
    assert its == 10
    ref, _ = spla.cg(A, b, x0=np.zeros(144), rtol=0, atol=0, maxiter=10)
    np.testing.assert_allclose(x, ref, rtol=1e-10, atol=1e-12)


def test_a_verified_session_computes_0d_operations_on_the_driver(pool: Any) -> None:
    """``alpha = (v . v) / (v . w)`` is a 0-d operation outside the checked units: with
    ``verify=`` it is computed here from its two operands (2 words through the driver), not
    on a worker whose result nothing would check; the values agree with numpy."""
    rng = np.random.default_rng(3)
    v, w = rng.standard_normal(1000), rng.standard_normal(1000)
    words = {}
    for verify in (1, "check"):
        with dl.Session("dask", client=pool, machine=2, progress=False, verify=verify) as s:
            s["v"], s["w"] = v, w
            x, y = s["v"], s["w"]
            s["y"] = ((x @ x) / (x @ y)) * x
            got = s.get("y")
            words[verify] = s.driver_words
        assert np.allclose(got, (v @ v) / (v @ w) * v, rtol=1e-13, atol=0)
    assert words["check"] - words[1] == 2


def test_a_lying_worker_is_caught_on_element_wise_maps(liar_pool: Any) -> None:
    """``dl.sqrt``, ``dl.abs`` and a division are maps (numpy over each block, no plan):
    under ``verify="check"`` each block is computed on one worker and again on another,
    and a third decides where they disagree. The liar (q=0.5; the hook perturbs map
    blocks too) is caught and excluded, and every result equals numpy's bit for bit."""
    liar = _liar(liar_pool)
    rng = np.random.default_rng(11)
    with dl.Session("dask", client=liar_pool, machine=4, progress=False, verify="check") as s:
        for _ in range(6):
            v, w = rng.standard_normal(2000), rng.random(2000) + 0.5
            x, y = s.asarray(v), s.asarray(w)
            got = (dl.sqrt(dl.abs(x) + 1.0) / y).get()
            assert np.array_equal(got, np.sqrt(np.abs(v) + 1.0) / w)
        assert s.maps_checked >= 6 * 4
        assert s.excluded_workers == {liar}


def test_a_lying_worker_is_caught_in_fused_sets_and_their_sums(liar_pool: Any) -> None:
    """A fused set (``y = 2 v + w`` with ``v . y`` and ``y . y`` added in the same pass) on a
    verified session: each block is computed on one worker and again on another, the
    partial sums of both are compared and added on the driver. The liar (q=0.5; the hook
    perturbs fused members and partial sums too, by 1.0) is caught and excluded; the
    member is numpy's bit for bit and the sums numpy's to rounding."""
    liar = _liar(liar_pool)
    rng = np.random.default_rng(13)
    with dl.Session("dask", client=liar_pool, machine=4, progress=False, verify="check") as s:
        for _ in range(6):
            v, w = rng.standard_normal(3000), rng.standard_normal(3000)
            x, z = s.asarray(v), s.asarray(w)
            y = 2.0 * x + z
            vy, yy = x @ y, y @ y
            got_vy, got_yy = float(vy), float(yy)
            assert np.array_equal(y.get(), 2.0 * v + w)
            want = 2.0 * v + w
            np.testing.assert_allclose([got_vy, got_yy], [v @ want, want @ want], rtol=1e-12)
        assert s.maps_checked >= 6 * 4
        assert s.excluded_workers == {liar}


def test_map_results_agree_to_a_few_ulp_and_no_further() -> None:
    """The rule a map check applies: equal bits, or ``nan`` / infinities in the same
    places and finite values within ``MAP_ULPS`` ulp; a perturbation of 1.0 (the fault
    hook's) or a flipped sign is a disagreement."""
    from distal.runtime.elastic.held import MAP_ULPS, same_map_result

    a = np.array([1.0, -2.5, np.inf, np.nan, 0.0, 1e300])
    b = a.copy()
    b[0] = np.nextafter(1.0, 2.0)
    b[5] = a[5] * (1 + (MAP_ULPS - 1) * np.finfo(float).eps)
    assert same_map_result(a, b)
    for k, bad in [(0, 2.0), (1, 2.5), (2, -np.inf), (3, 0.0), (4, 1e-300)]:
        c = a.copy()
        c[k] = bad
        assert not same_map_result(a, c), k
    assert not same_map_result(a[:2], a[:2].astype(np.float32))
    assert same_map_result(np.arange(4), np.arange(4))
    assert not same_map_result(np.arange(4), np.arange(1, 5))


def test_a_lying_worker_is_caught_cutting_held_blocks(liar_pool: Any) -> None:
    """A dense ``A @ x`` reads ``x`` whole on every processor: cuts of its held blocks,
    made on the workers. Under ``verify="check"`` each cut is made twice on different
    workers and compared (a unit's check would read the same wrong input and pass), so the
    liar, which perturbs cuts too, is caught and every product is numpy's to rounding."""
    liar = _liar(liar_pool)
    rng = np.random.default_rng(12)
    A = rng.standard_normal((64, 64))
    with dl.Session("dask", client=liar_pool, machine=4, progress=False, verify="check") as s:
        a = s.asarray(A)
        for _ in range(6):
            v = rng.standard_normal(64)
            x = s.asarray(v) * 2.0  # computed: held in blocks of its rows, on the workers
            got = (a @ x).get()
            np.testing.assert_allclose(got, A @ (2.0 * v), rtol=1e-12, atol=1e-12)
        assert s.cuts_checked >= 6
        assert s.excluded_workers == {liar}


def test_a_map_check_read_after_the_kernel_reading_it_repairs_and_reruns_that_kernel(
    pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An element-wise block's check is not waited for: the next kernel run reads the
    block where it lies, and the verdict is read once that run has finished. Worker 0
    (in-process here) returns a wrong fused block; its check fails after the SpMV read it,
    a third worker decides, worker 0 is excluded, the block is replaced in its value and
    the SpMV is made again (``runs_redone``): the product is scipy's."""
    import distributed
    import scipy.sparse as sp

    from distal.runtime.elastic import held

    liar = next(a for a, w in pool.scheduler_info()["workers"].items() if w["name"] == 0)
    honest = held.fused_block

    def lying_block(*args: Any) -> Any:
        members, sums = honest(*args)
        if distributed.get_worker().name == 0:
            members = [m + 1.0 for m in members]
        return members, sums

    # the Dask runtime reads its worker-side functions from ``held`` when it submits them
    monkeypatch.setattr(held, "fused_block", lying_block)
    rng = np.random.default_rng(21)
    n = LARGE  # an element-wise array this large runs as a fused set even alone
    A = sp.diags([1.0, 3.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    v = rng.standard_normal(n)
    with dl.Session("dask", client=pool, machine=4, progress=False, verify="check") as s:
        a = s.asarray(A, "xy -> x")
        y = a @ s.asarray(v)  # held on the workers, in blocks of rows
        s["x"] = y + 2.0 * y  # a fused set with no sum: its checks are left running
        got = (a @ s["x"]).get()
        assert s.excluded_workers == {liar}
        assert s.runs_redone == 1
    want = A @ (3.0 * (A @ v))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
