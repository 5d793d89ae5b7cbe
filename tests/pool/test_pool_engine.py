"""The coordinator's run loop without a network (``fakes.FakeLink``): placing, caching,
refusing, verifying, excluding, reassigning, copying overdue units.

Inputs are small integers in float64, so every result is exact whatever volunteer
computed it and in whatever order: results are compared with ``np.array_equal``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import MALFORMED, FakeLink, FakeVolunteer, run_loop

import distal as dl
from distal.errors import RuntimeFailure
from distal.runtime.pool.driver import Job, PoolDriver
from distal.runtime.pool.engine import Engine, Options, VerificationFailed

pytestmark = pytest.mark.timeout(120)

N = 24


def _gemm(grid: tuple[int, int] = (2, 2)) -> tuple[Any, dict[str, np.ndarray]]:
    k = dl.algorithms.summa(N, machine=dl.Machine(*grid), steps=2).compile()
    rng = np.random.default_rng(5)
    x = {"B": rng.integers(-3, 4, (N, N)).astype(float),
         "C": rng.integers(-3, 4, (N, N)).astype(float)}  # fmt: skip
    return k, x


async def _runs(vols: list[FakeVolunteer], opts: Options, runs: int = 1,
                grid: tuple[int, int] = (2, 2)) -> tuple[FakeLink, list]:  # fmt: skip
    k, x = _gemm(grid)
    link = FakeLink()
    for v in vols:
        link.join(v)
    eng = Engine(link, opts)  # type: ignore[arg-type]
    await eng.gather(len(vols), 5.0)  # every volunteer in before the run is cut into runs
    out = []
    try:
        for _ in range(runs):
            drv = PoolDriver(Job(k.plan, k.kernels, k.dtypes), x)
            tasks, order, names = drv.prepare()
            delivered, summary = await eng.run(tasks, order, names, drv.reduce)
            value, stats = drv.finish(delivered)
            assert np.array_equal(value, x["B"] @ x["C"])
            assert stats.words_received == k.stats().words_received
            assert stats.iterations == k.stats().iterations
            out.append(summary)
    finally:
        link.stop()
    return link, out


def test_honest_volunteers_compute_the_product_and_cache_its_blocks() -> None:
    link, (s1, s2) = run_loop(_runs([FakeVolunteer("a"), FakeVolunteer("b")], Options(), 2))
    assert s1.volunteers == ["a", "b"]
    assert not s1.excluded_volunteers
    assert s1.checked == 4
    assert s1.false_accept_bound > 0
    assert not s1.units_rejected
    assert sum(s1.units_by_volunteer.values()) == 4
    assert len(s1.units_by_volunteer) == 2
    # the second run finds the blocks where it left them (a unit may go to the other
    # volunteer when the speeds measured on these tiny units say so: its program then
    # travels, its blocks mostly not)
    assert s1.bytes_sent > 0
    assert s2.bytes_sent <= s1.bytes_sent // 3
    assert {n for n, _ in link.sent} == {"a", "b"}


@pytest.mark.parametrize("kind", MALFORMED)
def test_a_malformed_reply_is_refused_and_its_sender_excluded(kind: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    vols = [FakeVolunteer("bad", kind, marker=marker), FakeVolunteer("ok", delay=0.05)]
    link, (s,) = run_loop(_runs(vols, Options()))
    assert [r["volunteer"] for r in s.replies_refused] == ["bad"]
    assert s.replies_refused[0]["code"] in ("unparsable", "dtype", "shape", "size")
    assert "bad" in s.excluded_volunteers
    assert link.kv["excluded.bad"]
    assert s.units_by_volunteer == {"ok": 4}
    assert any(n == "bad" for n, _ in link.controls)  # told to stop
    assert not marker.exists()


def test_a_volunteer_that_lies_with_good_numbers_is_caught_and_excluded() -> None:
    vols = [FakeVolunteer("liar", "liar"), FakeVolunteer("ok", delay=0.05)]
    link, (s,) = run_loop(_runs(vols, Options(verify="check")))
    assert {r["volunteer"] for r in s.units_rejected} == {"liar"}
    assert "liar" in s.excluded_volunteers
    assert s.units_by_volunteer == {"ok": 4}
    assert b'"streak": 0' in link.kv["trust.liar"]


def test_exclusion_outlives_the_run_and_the_engine() -> None:
    async def go() -> tuple:
        link, _ = await _runs([FakeVolunteer("liar", "liar"), FakeVolunteer("ok")], Options())
        # a new coordinator on the same KV bucket: the liar gets nothing
        again = FakeLink()
        again.kv = dict(link.kv)
        for v in (FakeVolunteer("liar", "liar"), FakeVolunteer("ok")):
            again.join(v)
        k, x = _gemm()
        drv = PoolDriver(Job(k.plan, k.kernels, k.dtypes), x)
        engine = Engine(again, Options())  # type: ignore[arg-type]
        _delivered, summary = await engine.run(*drv.prepare(), drv.reduce)
        again.stop()
        return again, summary

    again, s = run_loop(go())
    assert {n for n, _ in again.sent} == {"ok"}
    assert not s.units_rejected


def test_a_volunteer_that_goes_silent_has_its_units_placed_again() -> None:
    vols = [FakeVolunteer("gone", "silent"), FakeVolunteer("ok")]
    vols[0].beating = True

    async def go() -> tuple:
        async def vanish() -> None:
            import asyncio

            await asyncio.sleep(0.2)
            vols[0].beating = False

        import asyncio

        t = asyncio.ensure_future(vanish())
        res = await _runs(vols, Options(lost_after=0.5, speculate=False))
        t.cancel()
        return res

    _, (s,) = run_loop(go())
    assert s.reassigned >= 1
    assert s.units_by_volunteer == {"ok": 4}
    assert not s.excluded_volunteers


def test_an_overdue_unit_is_copied_to_another_volunteer() -> None:
    import distal.runtime.pool.engine as engine_mod

    vols = [FakeVolunteer("slow", delay=30.0), FakeVolunteer("fast")]
    old = engine_mod.policy.speculate.COLD_FLOOR
    engine_mod.policy.speculate.COLD_FLOOR = 0.3
    try:
        _, (s,) = run_loop(_runs(vols, Options()))
    finally:
        engine_mod.policy.speculate.COLD_FLOOR = old
    assert s.copies >= 1
    assert s.units_by_volunteer == {"fast": 4}


def test_a_refused_unit_goes_elsewhere_and_fails_only_when_no_one_can() -> None:
    _, (s,) = run_loop(_runs([FakeVolunteer("no", "refuse"), FakeVolunteer("ok")], Options()))
    assert s.units_by_volunteer == {"ok": 4}
    assert s.failed
    assert not s.excluded_volunteers
    with pytest.raises(RuntimeFailure, match="no volunteer can compute unit"):
        run_loop(_runs([FakeVolunteer("no", "refuse")], Options()))


def test_a_majority_of_three_outvotes_a_liar() -> None:
    vols = [FakeVolunteer("a"), FakeVolunteer("b"), FakeVolunteer("liar", "liar")]
    _, (s,) = run_loop(_runs(vols, Options(verify=3)))
    assert "liar" in s.excluded_volunteers
    assert all(r["detail"] == "outvoted" for r in s.units_rejected)


def test_adaptive_trust_is_earned_and_persisted() -> None:
    link, summaries = run_loop(_runs([FakeVolunteer("a")], Options(verify="adaptive"), runs=4,
                                     grid=(2, 2)))  # fmt: skip
    assert sum(s.checked for s in summaries) >= 10  # the warm-up: every result checked
    assert b'"streak"' in link.kv["trust.a"]


def test_a_majority_that_cannot_be_had_is_a_clear_failure_not_a_hang() -> None:
    vols = [FakeVolunteer("a"), FakeVolunteer("liar", "liar")]
    with pytest.raises(VerificationFailed, match="verify=3 needs at least 3"):
        run_loop(_runs(vols, Options(verify=3, wait=0.5)))


def test_no_volunteer_is_a_clear_failure_not_a_hang() -> None:
    with pytest.raises(VerificationFailed, match="no volunteer"):
        run_loop(_runs([], Options(wait=0.5)))


def test_four_volunteers_each_compute_a_square_of_the_output() -> None:
    """A 4 x 4 GEMM on four volunteers: each is given a 2 x 2 square of output blocks (its
    two row panels of B and two column panels of C: the fewest bytes a quarter can need).
    (A volunteer done first may still take one unit from a run that is behind: work
    stealing, timed here by the test machine's load.)"""
    vols = [FakeVolunteer(f"d{i}", delay=0.05) for i in range(4)]
    link, (s,) = run_loop(_runs(vols, Options(), grid=(4, 4)))
    assert s.copies == 0
    assert len(link.sent) == 16
    first: dict[str, list[tuple[int, int]]] = {}
    for name, unit in link.sent:
        i, j = (int(x) for x in unit.name.split("-")[1:])
        first.setdefault(name, []).append((i, j))
    squares = 0
    for cells in first.values():
        mine = set(cells[:4])  # what it was given first: its own run
        squares += len({i for i, _ in mine}) == 2 and len({j for _, j in mine}) == 2
        assert len(cells) <= 5
    assert squares >= 3, first
