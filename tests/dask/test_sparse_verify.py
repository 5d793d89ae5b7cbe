"""Sparse kernels on an untrusted pool: SpMV with a worker whose results are wrong half the
time (``DISTAL_FAULT_CORRUPT=0.5``, the dense runtime's hook), checked, outvoted, or not.

The pool is three single-threaded worker processes, one of them the liar. SpMV runs with
the row split and the non-zero split on 6 virtual processors: compute tasks go round-robin
over the workers, so the liar computes two of them per run, each wrong with probability
1/2; a run where it happens to be right everywhere is repeated (bounded) until it is caught.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from elastic_helpers import process_pool
from test_sparse_dask import entry_calls, unit_blocks

import distal as dl
from distal.runtime.checkpoint import CheckpointStore
from distal.runtime.elastic import check, tasks, units
from distal.runtime.elastic.tasks import Ctx, VerificationFailed

pytest.importorskip("distributed", reason="needs distributed (dask extra)")

pytestmark = [pytest.mark.dask, pytest.mark.timeout(90)]

FAULT = "DISTAL_FAULT_CORRUPT"
N, P = 120, 6
RUNS = 12  # runs until the liar is caught: each misses it with probability <= 1/4


@pytest.fixture(scope="module")
def liar_pool() -> Any:
    with process_pool([{FAULT: "0.5"}, {}, {}]) as c:
        yield c


def _liar(client: Any) -> str:
    """The address of the worker whose process has the fault hook set."""
    env = client.run(lambda: __import__("os").environ.get("DISTAL_FAULT_CORRUPT", ""))
    return next(a for a, q in env.items() if q)


def spmv(split: str, procs: int = P) -> Any:
    """``a = B c`` over ``procs`` virtual processors, cut by rows or by non-zeros."""
    M = dl.Machine(procs)
    i, j = dl.index_vars("i j")
    B = dl.Tensor("B", (N, N), format="csr", dist="xy -> x" if split == "row" else "xy -> (xy)",
                  machine=M)  # fmt: skip
    c = dl.Tensor("c", (N,), dist="x -> x", machine=M)
    a = dl.Tensor("a", (N,), dist="x -> x", machine=M)
    a[i] = B[i, j] * c[j]
    io, ii, f, fp, fo, fi = dl.index_vars("io ii f fp fo fi")
    s = dl.schedule(a)
    if split == "row":
        s, o = s.distribute([i], [io], [ii], M), io
    else:
        s, o = s.fuse(i, j, f).pos(f, fp, B).distribute([fp], [fo], [fi], M), fo
    return dl.compile(s.communicate([a, B, c], o))


def problem(split: str, seed: int = 0) -> tuple[Any, dict[str, Any], np.ndarray]:
    """(bound kernel, inputs, the local runtime's result)."""
    B = sp.csr_array(sp.random(N, N, density=0.08, random_state=seed, format="csr"))
    B.sort_indices()
    x = {"B": B, "c": np.random.default_rng(seed + 1).standard_normal(N)}
    bound = spmv(split).bind(x)
    return bound, x, bound.run(x).value


def _until_caught(bound: Any, x: Any, want: np.ndarray, client: Any, **opts: Any) -> Any:
    """Run until the liar is excluded; every run exact, only the liar ever blamed."""
    liar = _liar(client)
    for _ in range(RUNS):
        res = bound.run(x, runtime="dask", client=client, timeout=60, **opts)
        assert np.array_equal(res.value, want)
        s = res.extra["summary"]
        assert s.excluded_workers in ([], [liar]), str(s)
        assert all(r["worker"] == liar for r in s.rejections), s.rejections
        assert res.stats.as_dict() == bound.stats().as_dict()
        if s.excluded_workers:
            return res
    pytest.fail(f"the liar was never caught in {RUNS} runs")


@pytest.mark.parametrize("split", ["row", "nz"])
def test_check_catches_the_liar_excludes_it_and_recomputes_elsewhere(
    liar_pool: Any, split: str
) -> None:
    liar = _liar(liar_pool)
    bound, x, want = problem(split)
    res = _until_caught(bound, x, want, liar_pool, verify="check")
    s = res.extra["summary"]
    print(s)
    assert s.units_rejected + s.reductions_rejected >= 1
    # every rejected result was made again, on a worker other than the liar, and passed
    assert all(r.get("recomputed_on") not in (None, liar) for r in s.rejections)
    assert all(r["how"] == "check" and r["kind"] in ("unit", "reduction") for r in s.rejections)
    us = units.decompose(bound.plan)
    reduced = {i for u in us if len(u.pieces) > 1 for i, _ in u.pieces}
    assert s.checked == P == len(us)
    assert s.reductions_checked == len(reduced)
    assert s.recomputed >= len(s.rejections)
    assert "excluded workers: " + liar in str(s)


def test_a_corrupted_block_is_summed_again_elsewhere(liar_pool: Any) -> None:
    """The liar is usually caught on a compute result before any block is summed; runs are
    repeated until one of its reductions was rejected (about one run in three)."""
    liar = _liar(liar_pool)
    bound, x, want = problem("nz")
    for _ in range(30):
        res = _until_caught(bound, x, want, liar_pool, verify="check")
        s = res.extra["summary"]
        red = [r for r in s.rejections if r["kind"] == "reduction"]
        if red:
            break
    else:
        pytest.fail("the liar never had a block rejected in 30 runs")
    assert s.reductions_rejected == len({r["unit"] for r in red})
    assert all(r["unit"].startswith("block-") for r in red)
    assert all(r.get("recomputed_on") not in (None, liar) for r in red)
    us = units.decompose(bound.plan)
    assert s.reductions_checked == len({i for u in us if len(u.pieces) > 1 for i, _ in u.pieces})
    assert "reduction(s) recomputed elsewhere" in str(s)


@pytest.mark.parametrize("split", ["row", "nz"])
def test_three_copies_outvote_the_liar_and_exclude_it(liar_pool: Any, split: str) -> None:
    liar = _liar(liar_pool)
    bound, x, want = problem(split)
    res = _until_caught(bound, x, want, liar_pool, verify=3)
    s = res.extra["summary"]
    assert s.units_rejected + s.reductions_rejected >= 1
    assert all(r["how"].startswith("outvoted by ") for r in s.rejections)
    assert all(liar not in r["how"] for r in s.rejections)
    assert s.verified == s.tasks_total
    assert "excluded workers: " + liar in str(s)


def test_without_verification_the_corruption_gets_through(liar_pool: Any) -> None:
    """The hook is real: with verify=1 the liar's wrong results reach the output."""
    bound, x, want = problem("nz")
    for _ in range(20):
        res = bound.run(x, runtime="dask", client=liar_pool, timeout=60)
        s = res.extra["summary"]
        assert s.excluded_workers == []
        assert s.rejections == []
        if not np.array_equal(res.value, want):
            break
    else:
        pytest.fail("no corrupted result got through in 20 runs")
    # each corruption adds 1.0 to one element of a compute result or a block
    err = np.abs(res.value - want)
    assert err.max() >= 1.0 - 1e-9
    assert np.allclose(err, np.round(err), rtol=0, atol=1e-9)


def test_two_copies_that_disagree_fail_the_run(liar_pool: Any) -> None:
    """verify=2 has no majority when its copies differ: VerificationFailed."""
    bound, x, _ = problem("row")

    def runs() -> None:
        for _ in range(RUNS):  # the liar holds a copy of two tasks in three
            bound.run(x, runtime="dask", client=liar_pool, verify=2, timeout=60)

    with pytest.raises(VerificationFailed, match="disagrees between workers"):
        runs()


def test_three_copies_without_a_majority_fail_the_run() -> None:
    """Two liars that are always wrong (each in an element of its own choosing): no two
    copies agree, so verify=3 has no majority and fails."""
    bound, x, _ = problem("row")
    with process_pool([{FAULT: "1.0"}, {FAULT: "1.0"}, {}]) as c:
        with pytest.raises(VerificationFailed, match="no majority"):
            bound.run(x, runtime="dask", client=c, verify=3, timeout=60)


def test_a_checked_checkpoint_holds_only_right_entries(liar_pool: Any, tmp_path: Path) -> None:
    """Entries the liar wrote (as the checker of another's result) before it was caught are
    re-verified; a rerun loads every block and the result is exact."""
    bound, x, want = problem("nz")
    liar = _liar(liar_pool)
    for n in range(RUNS):
        ck = tmp_path / f"ck{n}"
        res = bound.run(
            x, runtime="dask", client=liar_pool, verify="check", checkpoint=ck, timeout=60
        )
        assert np.array_equal(res.value, want)
        s = res.extra["summary"]
        if s.excluded_workers == [liar] and s.rechecked:
            break
    else:
        pytest.fail(f"no run caught the liar after it had written an entry in {RUNS} runs")
    again = bound.run(x, runtime="dask", client=liar_pool, checkpoint=ck, timeout=60)
    assert again.tasks_executed == 0
    assert np.array_equal(again.value, want)


class _Worker:
    """What a task reads of a Dask worker: its address, name and event log."""

    address, name = "tcp://test:1", "test"

    def log_event(self, topic: str, msg: dict[str, Any]) -> None:
        pass


def test_rechecks_keep_a_sound_entry_and_rewrite_a_wrong_one(tmp_path: Path) -> None:
    """An excluded worker's entries are re-verified: a sound unit entry is kept, a wrong one
    recomputed and rewritten; so is a block, against its summands."""
    bound, x, _ = problem("nz")
    data = bound.check_inputs(x)
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


def test_spmv_is_checked_by_recomputing_within_the_rounding_bound() -> None:
    """One product per entry: no projection is cheaper than the SpMV, so the check computes
    it again; a result summed in another order passes, an error of 1e-9 does not."""
    rng = np.random.default_rng(2)
    for split in ("row", "nz"):
        bound, x, _ = problem(split)
        for u, blocks, ctx, _, y in entry_calls(bound, x):
            products, words, _, _ = tasks._costs(ctx, u, blocks)
            assert check.recompute_cheaper(products, words)
            v = tasks.verdict(ctx, u, blocks, y, 1, None)
            assert v.ok, v.describe()
            assert v.exact
            # the same sums in another order differ in the last bits: within the bound
            other = y * (1 + 4 * np.finfo(float).eps * rng.uniform(-1, 1, y.shape))
            v = tasks.verdict(ctx, u, blocks, other, 1, None)
            assert v.ok, v.describe()
            assert 0 < v.diff <= v.tol
            for _ in range(3):
                bad = y.copy()
                e = rng.integers(bad.size)
                bad[e] += 1e-9 * max(1.0, abs(bad[e]))
                assert not tasks.verdict(ctx, u, blocks, bad, 1, None).ok
            bad = y.copy()
            bad[0] = np.nan
            assert not tasks.verdict(ctx, u, blocks, bad, 1, None).ok
            assert not tasks.verdict(ctx, u, blocks, y[:-1], 1, None).ok


def test_a_wide_spmm_is_checked_by_projection() -> None:
    """``A = B C`` with 32 columns: 32 products per entry, more than the projection's passes."""
    M = dl.Machine(4)
    i, j, k = dl.index_vars("i j k")
    B = dl.Tensor("B", (N, N), format="csr", dist="xy -> x", machine=M)
    C = dl.Tensor("C", (N, 32), dist="jk -> j", machine=M)
    A = dl.Tensor("A", (N, 32), dist="ik -> i", machine=M)
    A[i, k] = B[i, j] * C[j, k]
    io, ii = dl.index_vars("io ii")
    s = dl.schedule(A).reorder([i, j, k]).distribute([i], [io], [ii], M)
    Bm = sp.csr_array(sp.random(N, N, density=0.08, random_state=4, format="csr"))
    Bm.sort_indices()
    x = {"B": Bm, "C": np.random.default_rng(5).standard_normal((N, 32))}
    bound = dl.compile(s.communicate([A, B, C], io)).bind(x)
    for u, blocks, ctx, _, y in entry_calls(bound, x):
        products, words, _, _ = tasks._costs(ctx, u, blocks)
        assert not check.recompute_cheaper(products, words)
        v = tasks.verdict(ctx, u, blocks, y, 1, None)
        assert v.ok, v.describe()
        assert not v.exact  # projected, not recomputed
        bad = y.copy()
        bad[1, 3] += 1e-7  # the projection's tolerance bounds all of M: ~1e-9 here
        assert not tasks.verdict(ctx, u, blocks, bad, 1, None).ok
