"""The elastic core's policy without a pool: events in, instructions out.

No Dask, no network, no clock, no sleeps: every test builds a :class:`Core`, hands it the
events a run would produce (times inside them) and reads the instructions it returns. The
Dask driver and a volunteer pool's loop are thin transports around this core.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from distal.runtime.elastic import speculate
from distal.runtime.elastic.core import Core, Policy, RunSpec, Work
from distal.runtime.elastic.events import (
    AskQueues,
    Computed,
    Deliver,
    Fail,
    Failed,
    Finished,
    Outvoted,
    Pool,
    Queues,
    Received,
    Release,
    Seal,
    Started,
    SubmitAgreed,
    SubmitCheck,
    SubmitRecheck,
    SubmitReduce,
    SubmitReduceCheck,
    SubmitUnit,
    Tick,
    Unseal,
    Where,
    Wrote,
)
from distal.runtime.elastic.trust import Trust
from distal.runtime.elastic.twice import (
    Assign,
    CheckOn,
    Exclude,
    Judge,
    Judged,
    Keep,
    Twice,
    Verdict,
)

MB = 1_000_000


def finals(n: int, size: int = 10**6, in_bytes: int = 1000) -> list[Work]:
    """``n`` units, each alone making its block (a GEMM's owners)."""
    return [Work(f"block-{i}", (f"block-{i}",), True, size, in_bytes) for i in range(n)]


def core(
    work: list[Work], blocks: list[str] | None = None, trust: Any = None, **policy: Any
) -> Core:
    spec = RunSpec(
        tuple(work),
        tuple(blocks if blocks is not None else [w.name for w in work if w.final]),
        "n",
        present=frozenset(policy.pop("present", ())),
        sealed=tuple(policy.pop("seals", ())),
        writable=frozenset(policy.pop("writable", ())),
    )
    return Core(spec, Policy(**policy), trust)


def pool(now: float, *workers: str, empty: tuple[str, ...] = ()) -> Pool:
    return Pool(now, tuple((w, 1) for w in workers), frozenset(empty))


def of(kind: type, todo: list[Any]) -> list[Any]:
    return [i for i in todo if isinstance(i, kind)]


def units(todo: list[Any]) -> list[SubmitUnit]:
    return of(SubmitUnit, todo)


def finish(c: Core, key: str, worker: str = "", now: float | None = None) -> list[Any]:
    evs: list[Any] = [Finished(key, worker)]
    if now is not None:
        evs.append(Tick(now))
    return c.handle(*evs)


def run_through(c: Core, todo: list[Any], worker: str = "a", now: float = 1.0) -> None:
    """Finish every task the core hands out until it is done (each on ``worker``)."""
    live = [i.key for i in todo if hasattr(i, "key") and not isinstance(i, Deliver)]
    while live and not c.done:
        key = live.pop(0)
        got = finish(c, key, worker, now)
        live += [i.key for i in got if hasattr(i, "key") and not isinstance(i, Deliver)]


# -- handing out units ----------------------------------------------------------------------


def test_a_window_of_units_then_one_more_per_result_and_every_block_delivered() -> None:
    c = core(finals(6))
    todo = c.handle(pool(0.0, "a", "b"))  # window: twice the pool's threads
    first = units(todo)
    assert [u.name for u in first] == ["block-0", "block-1", "block-2", "block-3"]
    assert all(u.save is False and u.load is False for u in first)
    got = finish(c, first[0].key, "a", 0.5)
    assert of(Deliver, got) == [Deliver("block-0", first[0].key, "block-0")]
    assert [u.name for u in units(got)] == ["block-4"]
    run_through(c, first[1:] + units(got))
    assert c.done
    assert c.completed == 6
    assert c.delivered == {f"block-{i}" for i in range(6)}


def test_a_reduction_waits_for_every_unit_and_sums_the_copies_that_won() -> None:
    work = [Work("part-0", ("block-0",), size=10), Work("part-1", ("block-0",), size=10)]
    c = core(work, ["block-0"])
    todo = units(c.handle(pool(0.0, "a", "b")))
    assert len(todo) == 2
    got = finish(c, todo[0].key, "a")
    assert not of(SubmitReduce, got)
    got = finish(c, todo[1].key, "b")
    (r,) = of(SubmitReduce, got)
    assert r.parts == (("part-0", todo[0].key), ("part-1", todo[1].key))
    assert r.save is False  # no checkpoint
    # the summed units are released once their reduction holds them
    assert of(Release, got) == [Release((todo[0].key, todo[1].key))]
    assert of(Deliver, finish(c, r.key, "a")) == [Deliver("block-0", r.key, "")]
    assert c.done


def test_a_block_no_unit_adds_to_is_summed_from_nothing() -> None:
    """An output block whose processor has nothing to compute (its rows of a sparse
    operand are empty) is still made: a reduction of no summands, handed out at once."""
    work = [Work("part-0", ("block-0",)), Work("block-2", ("block-2",), True)]
    c = core(work, ["block-0", "block-1", "block-2"])
    todo = c.handle(pool(0.0, "a", "b"))
    (r,) = of(SubmitReduce, todo)
    assert (r.block, r.parts) == ("block-1", ())
    run_through(c, todo)
    assert c.done
    assert c.delivered == {"block-0", "block-1", "block-2"}


def test_a_checkpoint_hit_loads_and_a_miss_computes_and_saves() -> None:
    c = core(finals(2), present={"block-0"}, checkpoint=True)
    todo = units(c.handle(pool(0.0, "a", "b")))
    hit, miss = todo
    assert (hit.load, hit.save, hit.fresh) == (True, True, False)
    assert (miss.load, miss.save, miss.fresh) == (True, True, True)


def test_a_worker_lost_shrinks_the_window_and_a_rerun_unit_is_timed_anew() -> None:
    """Dask re-runs a lost worker's units by itself: the core only hands out fewer units
    at once, and a unit started again elsewhere is timed from its new start."""
    c = core(finals(8, size=10**6))
    todo = units(c.handle(pool(0.0, "a", "b")))
    assert len(todo) == 4
    c.handle(Computed("x", "b", 0.1, 10**6))  # b runs 10^7 iterations a second
    c.handle(Started(0.1, "block-0", "a"))
    got = c.handle(pool(1.0, "b"))  # a is gone
    assert not units(got)  # window 2, four out
    c.handle(Started(1.5, "block-0", "b"))  # Dask runs it again on b
    assert not units(c.handle(Tick(1.9)))  # its deadline counts from 1.5: not late
    assert c.n_overdue == 0


# -- speculation and deadlines ----------------------------------------------------------------


def test_a_late_unit_is_copied_to_another_worker_and_no_longer_fills_the_window() -> None:
    c = core(finals(5, size=10**6), window=2)
    todo = units(c.handle(pool(0.0, "a", "b")))
    c.handle(Computed("warm", "b", 0.1, 10**6))  # 10^7 iterations a second: 0.1 s a unit
    c.handle(Started(0.1, todo[0].name, "a"))
    c.handle(Started(0.1, todo[1].name, "b"))
    (third,) = units(finish(c, todo[1].key, "b", 0.5))
    assert not of(AskQueues, c.handle(Tick(0.9)))  # 0.8 s: under the 1 s floor
    got = c.handle(Tick(1.2))
    assert of(AskQueues, got)
    got = c.handle(Queues(1.2, (("a", (todo[0].key,)), ("b", (third.key,)))))
    (copy,) = [u for u in units(got) if u.copy]
    assert (copy.name, copy.where, copy.copy) == (todo[0].name, Where(("b",), True), 1)
    assert c.n_overdue == 1
    assert "a" in c.stalled_workers
    # the overdue unit stops counting against the window: the next unit goes out, not to a
    assert [(u.name, u.where) for u in units(got) if not u.copy] == [
        ("block-3", Where(("b",), False))
    ]
    # the copy wins: the original is released, the block delivered once
    got = finish(c, copy.key, "b")
    assert of(Release, got) == [Release((todo[0].key,))]
    assert of(Deliver, got) == [Deliver(todo[0].name, copy.key, todo[0].name)]
    assert todo[0].name in c.won
    assert finish(c, todo[0].key, "a") == []  # the loser reports: ignored


def test_a_unit_waiting_for_its_inputs_on_a_slow_link_is_not_late() -> None:
    """The chaos run's GEMM: units reading 8 MB of inputs over 5 MB/s links were taken for
    overdue while their inputs travelled, and copied (52-72 copies of 64 units). A unit
    not started is timed from its hand-out with its inputs' bytes at the observed link
    rate; one reading little is late as before."""
    heavy = [Work(f"block-{i}", (f"block-{i}",), True, 10**6, 8 * MB) for i in range(4)]
    c = core(heavy, window=4)
    todo = units(c.handle(pool(0.0, "a", "b")))
    c.handle(Computed("warm", "b", 0.1, 10**6))
    c.handle(Started(0.2, "warm2", "b", fetched=5 * MB, fetch_seconds=1.0))  # 5 MB/s
    for t in (3.0, 5.0, 7.0):  # nothing started: 8 MB take 1.6 s at 5 MB/s, per unit
        got = c.handle(Tick(t))
        if of(AskQueues, got):  # (a straggler in the tail, were a worker idle)
            busy = (("a", (todo[0].key, todo[1].key)), ("b", (todo[2].key, todo[3].key)))
            got = c.handle(Queues(t, busy))
        assert not units(got)
    assert c.n_overdue == c.n_dups == 0
    # the same units reading 1 kB are late by then
    light = core(finals(4, in_bytes=1000), window=4)
    todo = units(light.handle(pool(0.0, "a", "b")))
    light.handle(Computed("warm", "b", 0.1, 10**6))
    light.handle(Started(0.2, "warm2", "b", fetched=5 * MB, fetch_seconds=1.0))
    assert of(AskQueues, light.handle(Tick(3.0)))
    got = light.handle(Queues(3.0, (("a", (todo[0].key, todo[1].key)), ("b", ()))))
    assert [u.name for u in units(got) if u.copy] == [todo[0].name, todo[1].name]
    assert speculate.waiting_deadline(10**6, 8 * MB, 1.0, {"b": 1e7}, 5e6) == pytest.approx(
        speculate.LATE * (1.6 + 2 * 0.1)
    )


def test_a_one_worker_pool_never_copies() -> None:
    """A copy needs another worker: on a one-worker pool the chaos run made 21-25 copies of
    64 units, all onto the worker the originals waited on."""
    c = core(finals(4, in_bytes=1000))
    todo = units(c.handle(pool(0.0, "a")))
    c.handle(Computed("warm", "a", 0.1, 10**6))
    c.handle(Started(0.1, todo[0].name, "a"))
    for t in (2.0, 5.0, 30.0, 100.0):
        got = c.handle(Tick(t))
        assert not of(AskQueues, got)
        assert not [u for u in units(got) if u.copy]
    assert c.n_dups == 0


def test_a_unit_the_scheduler_has_not_placed_is_not_copied() -> None:
    c = core(finals(2, in_bytes=1000))
    c.handle(pool(0.0, "a", "b"))
    c.handle(Computed("warm", "b", 0.1, 10**6))
    assert of(AskQueues, c.handle(Tick(6.0)))
    got = c.handle(Queues(6.0, (("a", ()), ("b", ()))))  # neither unit is on a worker yet
    assert not units(got)
    assert c.n_dups == 0


def test_a_straggler_in_the_tail_is_copied_to_an_idle_fast_worker() -> None:
    c = core(finals(2))
    todo = units(c.handle(pool(0.0, "a", "b", "slow")))
    for _ in range(3):
        c.handle(Computed("x", "a", 0.3, 10**7))
    c.handle(Computed("y", "slow", 1.2, 10**7))
    c.handle(Started(0.1, todo[0].name, "slow"))
    c.handle(Started(0.1, todo[1].name, "b"))
    got = c.handle(Tick(0.3))  # younger than the fast workers' median (0.3 s)
    assert not of(AskQueues, got)
    assert of(AskQueues, c.handle(Tick(0.6)))
    busy = (("a", ()), ("b", (todo[1].key,)), ("slow", (todo[0].key,)))
    got = c.handle(Queues(0.6, busy))
    assert [(u.name, u.where.workers, u.copy) for u in units(got)] == [(todo[0].name, ("a",), 1)]
    assert c.n_overdue == 0
    assert c.n_dups == 1


def test_a_straggler_whose_copy_would_fetch_for_longer_is_not_copied() -> None:
    """On a slow link a copy first fetches the unit's inputs (8 MB at 5 MB/s: 1.6 s): a
    unit that has run 0.6 s, twice the median, is not copied until it has run longer than
    that fetch and the median together."""
    work = [Work(f"block-{i}", (f"block-{i}",), True, 2 * 10**7, 8 * MB) for i in range(2)]
    c = core(work)
    todo = units(c.handle(pool(0.0, "a", "b", "c")))
    for _ in range(3):  # 0.3 s a unit of 10^7 iterations: this one's 0.6 s, late after 2.4
        c.handle(Computed("x", "a", 0.3, 10**7))
    c.handle(Started(0.1, "warm", "c", fetched=5 * MB, fetch_seconds=1.0))
    c.handle(Started(0.1, todo[0].name, "b"))
    c.handle(Started(0.1, todo[1].name, "c"))
    assert not of(AskQueues, c.handle(Tick(0.7)))
    assert not of(AskQueues, c.handle(Tick(1.8)))
    assert of(AskQueues, c.handle(Tick(2.1)))
    assert c.n_overdue == 0


def test_no_speculation_when_asked_for_none_or_with_copies() -> None:
    for policy in ({"speculate": False}, {"verify": 2}):
        c = core(finals(1), **policy)
        c.handle(pool(0.0, "a", "b"))
        c.handle(Computed("x", "a", 0.1, 10**6))
        c.handle(Started(0.1, "block-0", "a"))
        assert not of(AskQueues, c.handle(Tick(50.0)))


def test_the_policy_arithmetic() -> None:
    times = {"slow": [1.2, 1.3], "a": [0.3, 0.31, 0.29], "b": [0.32]}
    assert speculate.reference(times) == pytest.approx(0.305)
    assert speculate.reference({}) is None
    cands = [("u1", "slow", 1.0), ("u3", "b", 0.2)]
    # the oldest straggler gets the fastest idle worker; never its own, never a slow one
    assert speculate.pair(cands, ["b", "a"], times) == [("u1", "a")]
    assert speculate.pair(cands, ["b", "slow"], times) == [("u1", "b")]
    assert speculate.pair(cands, ["new", "a"], times) == [("u1", "a"), ("u3", "new")]
    busy = {"slow": ["k1", "k4"], "a": ["k3"], "b": []}
    waiting = {"u4": ("k4", 0.5), "u3": ("k3", 0.5), "u5": ("k5", 0.5)}
    # u4 waits behind k1 on "slow"; u3 is alone on "a" (about to start); u5 is not placed
    assert speculate.queued(waiting, busy) == [("u4", "slow", 0.5)]
    rates = {"a": 2e6, "slow": 5e5}
    assert speculate.deadline(4_000_000, "a", rates) == pytest.approx(speculate.LATE * 2.0)
    assert speculate.deadline(4_000_000, "slow", rates) == pytest.approx(speculate.LATE * 8.0)
    assert speculate.deadline(4_000_000, "new", rates) == pytest.approx(speculate.LATE * 2.0)
    assert speculate.deadline(10, "a", rates) == speculate.WARM_FLOOR
    assert speculate.deadline(10, "", {}) == speculate.COLD_FLOOR
    big = int(10 * speculate.COLD_RATE)
    assert speculate.deadline(big, "", {}) == pytest.approx(speculate.LATE * 10)
    busy2 = {"stuck": ["k1", "k2", "k3"], "a": ["k4"], "b": []}
    late = [("u1", "stuck", 9.0), ("u2", "stuck", 7.0), ("u3", "stuck", 6.0)]
    assert speculate.pair_overdue(late, busy2, {"stuck"}, {}) == [
        ("u1", "b"),
        ("u2", "a"),
        ("u3", "b"),
    ]
    assert speculate.pair_overdue(late, {"stuck": ["k1"]}, {"stuck"}, {}) == []


# -- a worker that joins ------------------------------------------------------------------------


def test_a_worker_that_joins_empty_gets_the_next_unit() -> None:
    """A session's work follows its held blocks, so Dask never sends a unit to a worker
    holding none: one that joined mid-loop got no task at all in 2 of 5 runs. A worker
    the pool reports empty gets the next unit handed out (a preference: it may be gone)."""
    c = core(finals(3))
    todo = units(c.handle(pool(0.0, "a", "b", "new", empty=("new",))))
    assert [u.where for u in todo] == [Where(("new",), False), Where(), Where()]
    # one unit per empty worker and run, and none once it holds something
    c2 = core(finals(3))
    todo = units(c2.handle(pool(0.0, "a", "b")))
    assert all(u.where == Where() for u in todo)


def test_an_empty_worker_joining_mid_run_gets_a_unit() -> None:
    c = core(finals(6), window=2)
    todo = units(c.handle(pool(0.0, "a", "b")))
    c.handle(pool(1.0, "a", "b", "new", empty=("new",)))
    got = units(finish(c, todo[0].key, "a"))
    assert [u.where for u in got] == [Where(("new",), False)]


# -- verification ---------------------------------------------------------------------------------


def test_a_failed_check_excludes_the_worker_and_recomputes_elsewhere() -> None:
    c = core(finals(2), verify="check", checkpoint=True)
    todo = c.handle(pool(0.0, "a", "b", "c"))
    us = units(todo)
    # spread round-robin so every worker's results meet a check, saved by the check only;
    # each check handed out with its unit, away from the worker the unit is meant for
    assert [u.where for u in us] == [Where(("a",), False), Where(("b",), False)]
    assert all(not u.save for u in us)
    chk, chk_b = of(SubmitCheck, todo)
    assert (chk.of, chk.by, chk.where) == (us[0].key, "a", Where(("b", "c"), True))
    assert (chk_b.of, chk_b.by) == (us[1].key, "b")
    c.handle(Wrote("block-9", "a"))  # an entry a wrote earlier in the run
    assert finish(c, us[0].key, "a") == []  # its check is on its way already
    got = c.handle(Failed(chk.key, rejected=True))
    assert c.excluded == {"a"}
    (redo,) = units(got)
    assert (redo.name, redo.redo, redo.where) == (us[0].name, 1, Where(("b", "c"), True))
    # what a wrote is re-verified on a trusted worker
    assert not of(SubmitRecheck, got)  # block-9 is not an entry of this run's units
    assert c.rejections == [{"unit": us[0].name, "worker": "a", "how": "check", "kind": "unit"}]
    (chk2,) = of(SubmitCheck, finish(c, redo.key, "b"))
    assert chk2.by == "b"
    assert chk2.where == Where(("c",), True)
    assert c.rejections[0]["recomputed_on"] == "b"
    got = finish(c, chk2.key, "c")
    assert of(Deliver, got) == [Deliver(us[0].name, chk2.key, us[0].name)]


def test_a_check_handed_out_early_is_replaced_when_its_unit_ran_elsewhere() -> None:
    """A unit meant for worker a that Dask ran on b (a was gone): the check handed out with
    it may run on b, the worker it checks; it is dropped and one away from b goes out."""
    c = core(finals(1), verify="check")
    todo = c.handle(pool(0.0, "a", "b", "c"))
    (u,) = units(todo)
    (early,) = of(SubmitCheck, todo)
    got = finish(c, u.key, "b")
    assert Release((early.key,)) in got
    (chk,) = of(SubmitCheck, got)
    assert (chk.by, chk.where) == ("b", Where(("a", "c"), True))
    assert chk.key != early.key
    assert of(Deliver, finish(c, chk.key, "c")) == [Deliver(u.name, chk.key, u.name)]
    assert c.done


def test_a_check_is_kept_off_every_worker_holding_the_result() -> None:
    """The scheduler names where a result lies, not who computed it: a task reading it may
    have fetched a copy. A check goes to none of the holders; a unit that ran where it was
    meant to keeps the check handed out with it."""
    c = core(finals(2), verify="check")
    todo = c.handle(pool(0.0, "a", "b", "c", "d"))
    us, early = units(todo), of(SubmitCheck, todo)
    assert c.expected(us[0].key) == "a"
    assert c.handle(Finished(us[0].key, "a", ("a", early[0].where.workers[0]))) == []
    got = c.handle(Finished(us[1].key, "", ("a", "c")))  # meant for b: ran elsewhere
    (chk,) = of(SubmitCheck, got)
    assert chk.where == Where(("b", "d"), True)


def test_entries_a_caught_worker_wrote_are_rechecked_and_lose_their_seals() -> None:
    c = core(finals(2), verify="check", checkpoint=True, sealed=True, writable={"block-0"})
    todo = c.handle(pool(0.0, "a", "b", "c"))
    us, (chk0, chk1) = units(todo), of(SubmitCheck, todo)
    finish(c, us[0].key, "a")
    c.handle(Wrote("block-0", "b", "d0"))  # the check on b wrote the entry
    finish(c, chk0.key, "b")
    finish(c, us[1].key, "b")
    got = c.handle(Failed(chk1.key, rejected=True))  # b's own unit was wrong
    assert Unseal("block-0") in got
    (re,) = of(SubmitRecheck, got)
    assert (re.entry, re.parts, re.where) == ("block-0", (), Where(("a", "c"), True))
    assert c.rechecked == 1
    assert not c.done  # the recheck is waited for
    finish(c, re.key, "c")


def test_an_excluded_worker_gets_no_further_task() -> None:
    c = core(finals(3), excluded=frozenset({"liar"}))
    todo = units(c.handle(pool(0.0, "a", "liar")))
    assert all(u.where == Where(("a",), True) for u in todo)
    c2 = core(finals(1), verify="check", excluded=frozenset({"liar"}))
    got = c2.handle(pool(0.0, "a", "liar"))
    assert of(Fail, got)[0].kind == "input"  # a check needs a second trusted worker


def test_a_majority_of_k_copies_outvotes_a_worker_and_later_copies_avoid_it() -> None:
    c = core(finals(3), verify=3)
    todo = of(SubmitAgreed, c.handle(pool(0.0, "a", "b", "c", "d")))
    assert [len({w for _, w in t.copies}) for t in todo] == [3, 3, 3]
    assert not any(t.strict for t in todo)
    c.handle(Outvoted("block-0", ("b",), ("a", "c")))
    assert c.excluded == {"b"}
    assert c.rejections[0]["how"] == "outvoted by a, c"
    got = of(SubmitAgreed, finish(c, todo[0].key, "a"))
    assert got == []  # all three handed out already
    c3 = core(finals(1), verify=3)
    c3.handle(Outvoted("x", ("b",)))
    (t,) = of(SubmitAgreed, c3.handle(pool(0.0, "a", "b", "c", "d")))
    assert t.strict
    assert "b" not in {w for _, w in t.copies}
    # too few workers for k copies
    (f,) = of(Fail, core(finals(1), verify=3).handle(pool(0.0, "a", "b")))
    assert f.kind == "input"


def test_reductions_are_checked_and_a_wrong_sum_is_made_again_elsewhere() -> None:
    work = [Work("part-0", ("block-0",)), Work("part-1", ("block-0",))]
    c = core(work, ["block-0"], verify="check")
    todo = c.handle(pool(0.0, "a", "b", "c"))
    keys = []
    for u, chk, w in zip(units(todo), of(SubmitCheck, todo), ("a", "b"), strict=True):
        assert finish(c, u.key, w) == []
        got = finish(c, chk.key, "c")
        keys.append(chk.key)
    (red,) = of(SubmitReduce, got)
    assert red.parts == (("part-0", keys[0]), ("part-1", keys[1]))
    assert not of(Release, got)  # kept: a wrong sum is summed again from them
    (rc,) = of(SubmitReduceCheck, finish(c, red.key, "b"))
    assert (rc.by, rc.where) == ("b", Where(("a", "c"), True))
    (again,) = of(SubmitReduce, c.handle(Failed(rc.key, rejected=True)))
    assert again.where == Where(("a", "c"), True)
    assert again.parts == red.parts
    assert c.rejections[0]["kind"] == "reduction"
    (rc2,) = of(SubmitReduceCheck, finish(c, again.key, "a"))
    assert of(Deliver, finish(c, rc2.key, "c")) == [Deliver("block-0", rc2.key, "")]


def test_adaptive_trust_accepts_some_results_of_a_trusted_worker_unchecked() -> None:
    t = Trust(streaks={"a": 10**6, "b": 10**6})
    t._rng = random.Random(1)  # type: ignore[assignment]
    c = core(finals(200), trust=t, verify="adaptive", window=200)
    todo = units(c.handle(pool(0.0, "a", "b")))
    checks = asked = 0
    for u in todo:
        asked += c.wants_worker(u.key)  # the loop asks where a result lies only for a check
        got = finish(c, u.key, "a")
        checks += len(of(SubmitCheck, got))
    assert 0 < checks < 40  # ~ 1 in 20
    assert asked == checks
    assert c.n_unchecked == 200 - checks
    assert t.checked == checks  # one draw per result
    assert not core(finals(1)).wants_worker("distal-unit-n-0")
    # a result loaded from the checkpoint is always checked
    c2 = core(finals(1), trust=t, verify="adaptive", present={"block-0"})
    (u,) = units(c2.handle(pool(0.0, "a", "b")))
    assert of(SubmitCheck, finish(c2, u.key, "a"))


def test_a_failed_task_fails_the_run_but_a_failed_copy_does_not() -> None:
    c = core(finals(2))
    todo = units(c.handle(pool(0.0, "a", "b")))
    got = c.handle(Failed(todo[0].key, error="boom"))
    assert got == [Fail("task", "boom", todo[0].key)]
    assert c.done


# -- seals, time, the pool ----------------------------------------------------------------


def test_seals_need_one_digest_and_for_blocks_what_reached_the_driver() -> None:
    work = [Work("part-0", ("block-0",)), Work("part-1", ("block-0",))]
    c = core(work, ["block-0"], checkpoint=True, sealed=True,
             writable={"part-0", "part-1", "block-0"})  # fmt: skip
    c.handle(pool(0.0, "a", "b"))
    assert Seal("part-0", "d0") in c.handle(Wrote("part-0", "a", "d0"))
    # a forged report beside the honest one: no seal at all
    c.handle(Wrote("part-1", "a", "d1"))
    got = c.handle(Wrote("part-1", "b", "forged"))
    assert Unseal("part-1") in got
    assert "part-1" not in c.sealed
    # a block waits for what reached the driver, and is sealed only if it is the same
    assert not of(Seal, c.handle(Wrote("block-0", "a", "db")))
    assert of(Seal, c.handle(Received("block-0", "db"))) == [Seal("block-0", "db")]
    assert not of(Seal, c.handle(Wrote("block-9", "a", "x")))  # not this run's entry


def test_timeout_and_a_pool_gone_fail_the_run() -> None:
    c = core(finals(2), timeout=5.0)
    c.handle(pool(0.0, "a"))
    assert not of(Fail, c.handle(Tick(4.0)))
    assert of(Fail, c.handle(Tick(6.0)))[0].kind == "timeout"
    c = core(finals(2))
    c.handle(pool(0.0))
    assert not of(Fail, c.handle(Tick(100.0)))
    assert of(Fail, c.handle(Tick(121.0)))[0].kind == "pool"


def test_the_driver_polls_back_off_to_ten_milliseconds_and_stay_there() -> None:
    """A run waiting long for its one result: the back-off's exponent once grew with every
    empty poll until, after ~1024 of them, ``time.sleep`` raised ``OverflowError``."""
    from distal.runtime.elastic.driver import backoff

    assert backoff(0) == 0.0005
    assert [backoff(n) for n in range(6)] == sorted(backoff(n) for n in range(6))
    assert backoff(5) == backoff(10**6) == 0.01


# -- a session's small jobs checked by doing them twice ------------------------------------------


def test_jobs_done_twice_are_checked_one_task_per_pair_and_a_judge_decides() -> None:
    excluded: set[str] = set()
    t = Twice(["a", "b", "c"], excluded)
    todo = t.start(5)
    assert [(i.job, i.worker) for i in of(Assign, todo)] == list(enumerate("abcab"))
    assert of(CheckOn, todo) == [
        CheckOn("b", "a", (0, 3)),
        CheckOn("c", "b", (1, 4)),
        CheckOn("a", "c", (2,)),
    ]
    assert t.handle(Verdict(0, True)) == [Keep(0)]
    # b contradicts a on job 3: c decides; siding with a, it excludes b
    assert t.handle(Verdict(3, False)) == [Judge(3, "c")]
    assert t.handle(Judged(3, True)) == [Keep(3, first=True), Exclude("b")]
    assert excluded == {"b"}
    # against a: a's result goes, the judge's is kept
    t2 = Twice(["a", "b", "c"], set())
    t2.start(1)
    t2.handle(Verdict(0, False))
    assert t2.handle(Judged(0, False)) == [Keep(0, first=False), Exclude("a")]


def test_jobs_done_twice_need_two_trusted_workers_and_a_third_to_decide() -> None:
    (f,) = Twice(["a", "b"], {"b"}).start(2)
    assert isinstance(f, Fail)
    assert f.kind == "verification"
    t = Twice(["a", "b"], set())
    t.start(1)
    (f,) = t.handle(Verdict(0, False))
    assert isinstance(f, Fail)
    assert "no third trusted worker" in f.message


def test_adaptive_jobs_done_twice_check_as_the_trust_draws() -> None:
    t = Trust(streaks={"a": 10**6, "b": 10**6})
    t._rng = random.Random(3)  # type: ignore[assignment]
    tw = Twice(["a", "b"], set(), t)
    todo = tw.start(400)
    checked = sum(len(c.jobs) for c in of(CheckOn, todo))
    assert tw.checked == checked
    assert 0 < checked < 60  # ~ 1 in 20
    assert len(of(Keep, todo)) == 400 - checked
    n = of(CheckOn, todo)[0].jobs[0]
    tw.handle(Verdict(n, True))
    assert t.streaks[tw.first[n]] == 10**6 + 1


def test_trust_travels_as_plain_data() -> None:
    t = Trust(streaks={"a": 12}, checked=3, unchecked=9, failures=1)
    back = Trust.from_dict(t.as_dict())
    assert back.as_dict() == {"streaks": {"a": 12}, "checked": 3, "unchecked": 9, "failures": 1}
    assert back is not t
