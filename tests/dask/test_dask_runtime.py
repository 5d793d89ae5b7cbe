"""The Dask runtime on a small in-process pool: exactness, checkpoints, verify, joins.

Where a dense and a sparse kernel mean the same check, one test runs both (the
``Problem``s of ``elastic_helpers.py``): GEMM or MTTKRP with integer data, exact; SpMV, SpMM
and SDDMM cut by rows or by non-zeros, with the local runtime's bits and scipy's value to
1e-12. A sparse input laid out against the cut (``nz-rowB``) moves stored entries with
their ``pos``/``crd`` words.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import (
    SPARSE,
    Problem,
    assert_stats,
    gemm,
    gemm_inputs,
    gemm_problem,
    ints,
    mttkrp,
    mttkrp_expected,
    mttkrp_inputs,
    problem,
    sparse_matrix,
    sparse_problem,
    spmv,
    summed_blocks,
    trace_lines,
)

import distal as dl
from distal.plan.ir import Fetch, Flush
from distal.runtime import checkpoint as ck
from distal.runtime import checkpoint_tools
from distal.runtime.dask import decompose
from distal.runtime.elastic import tasks, units
from distal.typing import box_intersect, box_is_empty, box_volume

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]


@pytest.mark.parametrize("name", ["gemm", *SPARSE])
def test_exact_with_measured_stats(client: Any, name: str) -> None:
    p = problem(name)
    bound = p.bound
    local = p.local()
    res = bound.run(p.inputs, runtime="dask", client=client)
    p.check(res.value, local.value)
    # counted by the tasks from what they received, equal to the prediction
    assert_stats(res.stats, bound)
    assert res.stats.words_received == local.stats.words_received
    s = res.extra["summary"]
    # one task per unit, and one per block the units' pieces are summed into
    us = decompose(bound.plan)
    assert res.tasks_executed == s.tasks_total == len(us) + len(summed_blocks(bound.plan))
    assert res.tasks_reused == 0
    assert sum(s.per_worker.values()) == s.tasks_total
    assert "counted by the tasks" in res.extra["stats_note"]
    assert isinstance(res.extra["dask_transfer_bytes"], int)
    if name == "gemm":
        # every Cannon unit alone makes one whole block: 16 tasks, each a finished block
        assert res.tasks_executed == len(us) == 16
        # Dask's own worker-to-worker bytes: two workers share 16 units reading 32 blocks,
        # so some unit always reads a block the other worker produced
        assert res.extra["dask_transfer_bytes"] > 0
    else:
        assert res.extra["dask_transfer_bytes"] >= 0
    if name.startswith("sddmm"):  # a CSR output on B's pattern
        out = res.value.to_scipy()
        assert np.array_equal(out.indptr, p.inputs["B"].indptr)
        assert np.array_equal(out.indices, p.inputs["B"].indices)
    if name.endswith("nz-rowB"):  # stored entries moved, with their index arrays
        assert sum(res.stats.index_words_received) > 0
    if not p.sparse:
        assert sum(res.stats.index_words_received) == 0


def _drop_a_message(k: Any, kind: type) -> tuple[int, int, int]:
    """Remove one remote piece from one ``Fetch``, or one send from one ``Flush``, of the
    kernel's plan. The computation stays whole (a buffer is still cut from its blocks, a
    reduction still adds every unit's partial); ``(receiver, sender, words)`` of the
    dropped message."""
    plan = k.plan
    for p, prog in enumerate(plan.programs):
        for n, op in enumerate(prog):
            if kind is Fetch and isinstance(op, Fetch) and op.tensor in plan.inputs:
                remote = [(src, b) for src, b in op.pieces if src != p]
                if not remote or op.view:
                    continue
                src, piece = remote[0]
                new = dataclasses.replace(op, pieces=tuple(x for x in op.pieces if x != remote[0]))
                dst = p
            elif kind is Flush and isinstance(op, Flush) and op.sends:
                (dst, piece), src = op.sends[0], p
                new = dataclasses.replace(op, sends=op.sends[1:])
            else:
                continue
            prog = (*prog[:n], new, *prog[n + 1 :])
            programs = (*plan.programs[:p], prog, *plan.programs[p + 1 :])
            k.__dict__["plan"] = dataclasses.replace(plan, programs=programs)
            k.__dict__.pop("_executables", None)  # (made from the plan: made again)
            return dst, src, box_volume(piece)
    raise AssertionError(f"no remote {kind.__name__} in the plan")


def test_a_neighbours_block_is_cut_where_it_lies_and_only_its_rows_travel(
    client: Any, monkeypatch: Any
) -> None:
    """A row-split SpMV on a banded matrix: each unit reads three rows of its neighbour's
    block of the vector (2^17 elements). The unit is handed those rows, cut where the block
    lies (``units.Cuts``), not the block; the result is the local runtime's bits and the
    stats the prediction's (the rows counted as they arrived)."""
    import scipy.sparse as sp

    from distal.runtime.elastic import submit
    from distal.runtime.elastic.units import Cuts
    from distal.sparse import SparseArray

    n = 1 << 18
    band = sp.diags([1.0, 2.0, 1.0], [-3, 0, 3], shape=(n, n), format="csr")
    x = {"B": SparseArray.from_scipy(band), "c": np.arange(n, dtype=np.float64) % 7}
    bound = spmv("row", n=n, procs=2).bind(x)
    handed: list[Any] = []
    real = submit.Submitter.blocks

    def spy(self: Any, u: Any, worker: Any = None) -> Any:
        got = real(self, u, worker)
        handed.append([(t, h) for t, h, _ in got])
        return got

    monkeypatch.setattr(submit.Submitter, "blocks", spy)
    res = bound.run(x, runtime="dask", client=client)
    want = bound.run(x)
    assert res.value.tobytes() == want.value.tobytes()
    assert_stats(res.stats, bound)
    assert res.stats.total_words == 2 * 3  # three halo rows each way
    cut = [[h for t, h in unit if isinstance(h, Cuts)] for unit in handed]
    assert len(handed) == 2
    assert all(len(c) == 1 for c in cut)  # each unit: its neighbour's block of c, cut


def test_peak_words_are_measured_on_the_workers(client: Any) -> None:
    """``peak_words`` on Dask: a processor's owned blocks plus the most one of its tasks
    held. A Cannon GEMM unit holds one step's two fetch buffers at a time and adds into
    the owned block (the local runtime also holds the next step's, prefetched): owned
    words plus two blocks. An MTTKRP holds what the model counts, step for step, and the
    reducer its received partial sums: the prediction exactly."""
    k, x = gemm(n=32, grid=(4, 4)), gemm_inputs(32)
    res = k.run(x, runtime="dask", client=client)
    block = (32 // 4) ** 2
    owned = [k.plan.owned_words(p) for p in range(16)]
    assert owned == [3 * block] * 16  # A, B and C
    assert res.stats.peak_words == [o + 2 * block for o in owned]
    assert k.stats().peak_words == k.run(x).stats.peak_words  # local: the model's
    assert max(k.stats().peak_words) > max(res.stats.peak_words)  # it prefetches
    m, xm = mttkrp(), mttkrp_inputs()
    got = m.run(xm, runtime="dask", client=client, granularity="step").stats.peak_words
    assert got == m.stats().peak_words == m.run(xm).stats.peak_words


@pytest.mark.parametrize("kind", ["gemm", "mttkrp"])
def test_stats_are_counted_so_a_dropped_message_shows(client: Any, kind: str) -> None:
    """The words come from what the tasks received, not from the prediction: a plan with
    one message fewer (a GEMM fetch piece, an MTTKRP partial sum) still computes but
    reports exactly that message fewer."""
    if kind == "gemm":
        k, x = gemm(), gemm_inputs()
        want, op = x["B"] @ x["C"], Fetch
    else:
        k, x = mttkrp(), mttkrp_inputs()
        want, op = mttkrp_expected(x), Flush
    predicted = k.stats()
    intact = k.run(x, runtime="dask", client=client, granularity="step")
    assert_stats(intact.stats, k)
    dst, src, words = _drop_a_message(k, op)
    res = k.run(x, runtime="dask", client=client, granularity="step")
    assert np.array_equal(res.value, want)
    got = res.stats
    assert got.words_received[dst] == predicted.words_received[dst] - words
    assert got.messages_received[dst] == predicted.messages_received[dst] - 1
    assert got.words_sent[src] == predicted.words_sent[src] - words
    others = [p for p in range(predicted.nprocs) if p != dst]
    assert [got.words_received[p] for p in others] == [predicted.words_received[p] for p in others]
    assert got.iterations == predicted.iterations


def test_a_unit_missing_an_input_block_fails_instead_of_guessing() -> None:
    """A block a unit was not handed (a dropped message) is a failure naming the unit."""
    k = gemm(n=8, grid=(2, 2))
    unit = next(u for u in decompose(k.plan) if u.receives)
    ctx = tasks.Ctx("t", k.kernels, np.dtype(np.float64), None, lambda: None)
    x = gemm_inputs(8)
    blocks = []
    for t, idx in unit.needs:
        box = k.plan.placements[t].block_box(idx)
        blocks.append((t, box, x[t][tuple(slice(lo, hi) for lo, hi in box)]))
    _, traffic, iterations = tasks._compute(ctx, unit, blocks)
    assert iterations == sum(box_volume(b) for _, boxes, _ in unit.steps for b in boxes) > 0
    want = [(src, unit.proc, box_volume(b), 0) for _, ps in unit.receives for src, b in ps]
    assert sorted(traffic) == sorted(want)
    # the one block that holds a received piece goes missing
    t, pieces = unit.receives[0]
    lost = next(
        b for b in blocks if b[0] == t and not box_is_empty(box_intersect(b[1], pieces[0][1]))
    )
    short = [b for b in blocks if b is not lost]
    with pytest.raises(dl.RuntimeFailure, match=f"unit {unit.name}.*handed"):
        tasks._compute(ctx, unit, short)


OPTIONS = [
    {"granularity": "flush"},
    {"granularity": "step"},
    {"granularity": 2},
    {"speculate": True},
    {"speculate": False},
]


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("name", ["mttkrp", "spmv nz"])
def test_granularity_and_speculation_keep_value_and_stats(
    client: Any, name: str, opts: dict[str, Any]
) -> None:
    """The one driver serves dense and bound sparse plans with every option: partial sums
    (MTTKRP's, SpMV's non-zero cut) at any granularity, with or without speculation."""
    p = problem(name)
    bound = p.bound
    res = bound.run(p.inputs, runtime="dask", client=client, **opts)
    p.check(res.value, p.local().value)
    # a processor's split output buffer is still one partial sum per piece
    assert_stats(res.stats, bound)


def _streamed_spmm(steps: int, out_each_step: bool) -> tuple[Any, Any, np.ndarray]:
    """SpMM with C streamed in ``steps`` column chunks (``tests/test_one_plan.py``'s)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_one_plan import _streamed_spmm as build

    return build(steps, out_each_step)


def _output_case(case: str) -> Problem:
    """A kernel whose output is a scalar, replicated (dense or sparse kernel: reduced on one
    replica, then sent to all), or streamed over several steps (a multi-step bound plan)."""
    M = dl.Machine(2)
    i, j = dl.index_vars("i j")
    io, ii = dl.index_vars("io ii")
    if case == "scalar":
        a = dl.Tensor("a", (), dist=None)
        b = dl.Tensor("b", (10,), dist="i -> i", machine=M)
        c = dl.Tensor("c", (10,), dist="i -> i", machine=M)
        a[()] = b[i] * c[i]
        x = {"b": ints((10,), 1), "c": ints((10,), 2)}
        k = dl.compile(dl.schedule(a).distribute([i], [io], [ii], M))
        return Problem(case, k, x, x["b"] @ x["c"], True, False)
    if case == "replicated":
        M2 = dl.Machine(2, 2)
        A = dl.Tensor("A", (6, 6), dist="ij -> i*", machine=M2)
        B = dl.Tensor("B", (6, 6), dist="ij -> ij", machine=M2)
        A[i, j] = B[i, j] * 2
        jo, ji = dl.index_vars("jo ji")
        k = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M2))
        xb = {"B": ints((6, 6), 3)}
        return Problem(case, k, xb, 2 * xb["B"], True, False)
    if case == "sparse replicated":
        n, M4 = 50, dl.Machine(4)
        Bt = dl.Tensor("B", (n, n), format="csr", dist="xy -> x", machine=M4)
        ct = dl.Tensor("c", (n,), dist="x -> x", machine=M4)
        at = dl.Tensor("a", (n,), dist="x -> *", machine=M4)
        at[i] = Bt[i, j] * ct[j]
        s = dl.schedule(at).distribute([i], [io], [ii], M4).communicate([at, Bt, ct], io)
        x = {"B": sparse_matrix(1), "c": np.random.default_rng(2).standard_normal(n)}
        return Problem(case, dl.compile(s), x, x["B"] @ x["c"], False, True)
    k, B, C = _streamed_spmm(3, True)
    return Problem(case, k, {"B": B, "C": C}, B @ C, False, True)


@pytest.mark.parametrize("case", ["scalar", "replicated", "sparse replicated", "sparse streamed"])
def test_scalar_replicated_and_streamed_outputs(client: Any, case: str) -> None:
    """Outputs of other shapes than an owned block per processor run through the one driver
    with the local runtime's bits and the plan's stats: a scalar, a replicated output (its
    final broadcast), SpMM with C streamed in column chunks (a plan of several steps)."""
    p = _output_case(case)
    bound = p.bound
    res = bound.run(p.inputs, runtime="dask", client=client)
    p.check(res.value, p.local().value)
    assert_stats(res.stats, bound)
    if case == "sparse replicated":
        assert any(m.kind == "final" for m in bound.plan.messages)
    if case == "sparse streamed":
        assert bound.plan.nsteps == 3


def test_a_sparse_output_held_over_several_steps_is_refused_by_name(client: Any) -> None:
    """SpMM with A communicated outside the chunk loop: the output buffer is held over
    every step, which this runtime does not run yet (the local and MPI ones do)."""
    k, B, C = _streamed_spmm(4, False)
    with pytest.raises(dl.NotSupportedYet, match="held over several steps"):
        k.bind({"B": B}).run({"B": B, "C": C}, runtime="dask", client=client)


class Source:
    """A block source: any box of a deterministic tensor, on demand."""

    def __init__(self, shape: tuple[int, ...], seed: int, fp: bool) -> None:
        self.shape, self.seed, self.full = shape, seed, ints(shape, seed)
        if fp:
            self.fingerprint = lambda: f"src-{seed}"

    def read_block(self, box: Any) -> np.ndarray:
        return self.full[tuple(slice(lo, hi) for lo, hi in box)]


@pytest.mark.parametrize("fp", [True, False])
def test_block_sources_and_their_fingerprints(client: Any, tmp_path: Path, fp: bool) -> None:
    k, x = gemm(n=16, grid=(2, 2)), gemm_inputs(16)
    src = {"B": Source((16, 16), 0, fp), "C": x["C"]}
    r1 = k.run(src, runtime="dask", client=client, checkpoint=tmp_path)
    assert np.array_equal(r1.value, x["B"] @ x["C"])
    r2 = k.run(src, runtime="dask", client=client, checkpoint=tmp_path)
    assert (r2.tasks_executed, r2.tasks_reused) == (0, r1.tasks_executed)
    other = {"B": Source((16, 16), 5, fp), "C": x["C"]}
    r3 = k.run(other, runtime="dask", client=client, checkpoint=tmp_path)
    assert r3.tasks_reused == 0
    assert np.array_equal(r3.value, ints((16, 16), 5) @ x["C"])


@pytest.mark.parametrize("url", ["dir", "file", "memory"])
@pytest.mark.parametrize("name", ["gemm", "spmm nz"])
def test_checkpoint_rerun_reuses_everything(
    client: Any, tmp_path: Path, url: str, name: str
) -> None:
    loc = {"dir": str(tmp_path), "file": f"file://{tmp_path}", "memory": "memory://distal-t"}[url]
    if url == "memory":
        loc += f"-{name.replace(' ', '-')}"  # one store per problem: each run starts empty
    p = problem(name)
    bound = p.bound
    r1 = bound.run(p.inputs, runtime="dask", client=client, checkpoint=loc)
    total = r1.extra["summary"].tasks_total
    assert (r1.tasks_executed, r1.tasks_reused) == (total, 0)
    assert_stats(r1.stats, bound)
    r2 = bound.run(p.inputs, runtime="dask", client=client, checkpoint=loc)
    assert (r2.tasks_executed, r2.tasks_reused) == (0, total)
    # nothing moved in a run that loaded every block
    assert r2.stats.total_words == sum(r2.stats.messages_received) == 0
    assert sum(r2.stats.words_received) == 0
    assert sum(r2.stats.iterations) == 0
    assert np.array_equal(r2.value, r1.value)
    p.check(r2.value)
    store = ck.CheckpointStore(loc, Path(r1.extra["checkpoint"]).name)
    manifest = store.read_manifest()
    assert manifest is not None
    assert manifest["complete"]
    # B's tiles as dl.algorithms writes them; a sparse B by non-zeros
    assert manifest["distributions"]["B"] == ("xy -> (xy)" if p.sparse else "ik -> ik")
    if url != "memory":  # the tools read a checkpoint folder
        [info] = checkpoint_tools.runs(tmp_path)
        assert info.complete
        statement = "A(i,k) = B(i,j) * C(j,k)" if p.sparse else "A(i,j) = B(i,k) * C(k,j)"
        assert info.statement == statement
        owned = bound.binding.owned["A"] if p.sparse else bound.plan.primary
        assert info.blocks == sum(o is not None for o in owned)
        assert not checkpoint_tools.verify(tmp_path, info.run)["corrupt"]


@pytest.mark.parametrize("name", ["gemm", "spmv row"])
def test_changed_input_or_schedule_never_reuses(client: Any, tmp_path: Path, name: str) -> None:
    """A checkpoint is keyed by the kernel, the options and every input: changed dense
    values, another schedule or granularity, a sparse input's other values on the same
    pattern or another pattern (a new bind) each start a run of their own; the first inputs
    still find their finished run."""
    p = problem(name)
    bound = p.bound
    first = bound.run(p.inputs, runtime="dask", client=client, checkpoint=tmp_path)
    variants: list[tuple[str, Problem, dict[str, Any]]] = []
    if p.sparse:
        B2 = p.inputs["B"].copy()
        B2.data = B2.data * 2.0 + 1.0  # the same pattern, other values
        x2 = {"B": B2, "c": p.inputs["c"]}
        variants.append(("values", dataclasses.replace(p, inputs=x2, want=B2 @ x2["c"]), {}))
        x3 = {"B": p.inputs["B"], "c": p.inputs["c"] + 1.0}  # the dense input changed
        variants.append(("dense", dataclasses.replace(p, inputs=x3, want=x3["B"] @ x3["c"]), {}))
        x4 = {"B": sparse_matrix(seed=9), "c": p.inputs["c"]}  # another pattern
        variants.append(("pattern", dataclasses.replace(p, inputs=x4, want=x4["B"] @ x4["c"]), {}))
    else:
        y = dict(p.inputs, C=p.inputs["C"].copy())
        y["C"][3, 4] += 1
        variants.append(("input", dataclasses.replace(p, inputs=y, want=y["B"] @ y["C"]), {}))
        variants.append(("granularity", p, {"granularity": "step"}))
        variants.append(("schedule", dataclasses.replace(p, kernel=gemm(algorithm="summa")), {}))
    for what, q, opts in variants:
        r = q.bound.run(q.inputs, runtime="dask", client=client, checkpoint=tmp_path, **opts)
        assert r.tasks_reused == 0, what
        q.check(r.value, q.local().value)
    assert len([d for d in tmp_path.iterdir() if d.is_dir()]) == 4
    assert len(checkpoint_tools.runs(tmp_path)) == 4
    again = bound.run(p.inputs, runtime="dask", client=client, checkpoint=tmp_path)
    assert again.tasks_executed == 0
    assert again.tasks_reused == first.tasks_executed
    p.check(again.value, first.value)


def _flip(entry: Path, at: int = -1, bit: int = 1) -> None:
    """One flipped bit in a checkpoint entry: its checksum fails."""
    raw = bytearray(entry.read_bytes())
    raw[at] ^= bit
    entry.write_bytes(bytes(raw))


@pytest.mark.parametrize("name", ["mttkrp", "spmv nz"])
def test_corrupt_checkpoint_is_detected_and_recomputed(
    client: Any, tmp_path: Path, name: str
) -> None:
    """Partial sums kept in the checkpoint (MTTKRP's, SpMV's by non-zeros): a damaged entry
    is found and redone, and nothing else is."""
    p = problem(name)
    bound = p.bound
    us = decompose(bound.plan)
    red = sorted(summed_blocks(bound.plan))
    assert len(red) >= 2

    def rerun(**opts: Any) -> Any:
        r = bound.run(p.inputs, runtime="dask", client=client, checkpoint=tmp_path, **opts)
        p.check(r.value)
        return r

    def work(u: Any) -> int:
        """Iterations unit ``u`` does: its boxes' volume, its stored entries visited."""
        boxes = sum(box_volume(b) for _, bs, _ in u.steps for b in bs)
        return boxes + sum(w.iterations for _, _, ws in u.steps for w in ws)

    r1 = bound.run(p.inputs, runtime="dask", client=client, checkpoint=tmp_path, keep_partials=True)
    run = Path(r1.extra["checkpoint"])
    total = r1.extra["summary"].tasks_total
    # A truncated finished block: its units are loaded from their partials, it is re-reduced.
    blk = run / f"{units.block_name(red[0])}.ck"
    blk.write_bytes(blk.read_bytes()[:-7])
    r2 = rerun(keep_partials=True)
    assert r2.extra["summary"].corrupt == 1
    assert r2.tasks_executed == 1  # the block; its partials came from the checkpoint
    # A flipped bit in a partial, whose block is gone: the partial is recomputed.
    bad = next(u for u in us if red[0] in {i for i, _ in u.pieces})
    _flip(run / f"{bad.name}.ck", -3, 0x10)
    blk.unlink()
    r3 = rerun(keep_partials=True)
    assert r3.extra["summary"].corrupt == 1
    assert r3.tasks_executed == 2  # the partial and the block
    assert sum(r3.stats.iterations) == work(bad) > 0
    assert ck.CheckpointStore(tmp_path, run.name).load(units.block_name(red[0]))[1] == ck.OK
    # One block lost, another damaged (a bad checksum), and a partial they need flipped.
    lost, damaged = red[1:3] if len(red) > 2 else red[:2]
    (run / f"{units.block_name(lost)}.ck").unlink()
    (run / f"{units.block_name(damaged)}.ck").write_bytes(b"DISTALCK\x02 damaged")
    needed = [u for u in us if {i for i, _ in u.pieces} & {lost, damaged}]
    assert len(needed) > 1
    bad = needed[0]
    _flip(run / f"{bad.name}.ck")
    r4 = rerun()
    s = r4.extra["summary"]
    assert s.corrupt == 2, str(s)  # the damaged block and the flipped partial
    # both blocks summed again, the flipped partial redone, the others loaded
    assert r4.tasks_executed == 3, str(s)
    assert r4.tasks_reused == total - 3
    assert sum(r4.stats.iterations) == work(bad) > 0
    if p.sparse:  # a non-zero cut: every unit that feeds these blocks feeds another too
        assert all(len(u.pieces) > 1 for u in needed)


def _worker_named(client: Any, name: Any) -> str:
    """The address of the pool's worker called ``name`` (``faults={"lie": ...}`` names workers): the
    pool's three workers are awaited first, so a client just (re)connected has their list."""
    client.wait_for_workers(3, timeout=30)
    return next(a for a, w in client.scheduler_info()["workers"].items() if w["name"] == name)


@pytest.mark.parametrize("verify", [2, 3, "check"])
@pytest.mark.parametrize("name", ["gemm 2x2", "spmm nz", "sddmm row"])
def test_verify_accepts_agreement_and_rejects_a_lying_worker(
    pool: Any, name: str, verify: Any
) -> None:
    """``faults={"lie": {0}}`` makes worker 0 wrong on every result. ``verify=2``: two
    agreeing copies are accepted, a disagreement fails the run. ``verify=3`` outvotes the
    liar and ``"check"`` catches it, on its first result: it is excluded, and what it made
    is made again elsewhere (``test_dask_verify.py`` has the fault hook of real worker
    processes)."""
    p = gemm_problem(16, (2, 2)) if name == "gemm 2x2" else problem(name)
    bound = p.bound
    local = p.local()
    liar = _worker_named(pool, 0)
    if verify == 2:
        r = bound.run(p.inputs, runtime="dask", client=pool, verify=2)
        p.check(r.value, local.value)
        s = r.extra["summary"]
        assert s.verified == s.tasks_total
        if name == "gemm 2x2":
            assert s.verified == 4
        assert_stats(r.stats, bound)  # two copies, one delivery counted
        with pytest.raises(dl.RuntimeFailure, match="disagrees between workers"):
            bound.run(p.inputs, runtime="dask", client=pool, verify=2, faults={"lie": [0]})
        return
    res = bound.run(p.inputs, runtime="dask", client=pool, verify=verify, faults={"lie": {0}})
    p.check(res.value, local.value)
    assert_stats(res.stats, bound)
    s = res.extra["summary"]
    assert s.units_rejected + s.reductions_rejected >= 1, str(s)
    assert s.excluded_workers == [liar], str(s)
    assert all(r["worker"] == liar for r in s.rejections)
    if verify == "check":
        # every result, the recomputations of rejected ones included, passed in the end
        us = units.decompose(bound.plan)
        reduced = summed_blocks(bound.plan)
        assert s.checked == len(us)
        assert s.reductions_checked == len(reduced)
        assert s.tasks_total == len(us) + len(reduced)
        assert all(r["recomputed_on"] not in (None, liar) for r in s.rejections)


@pytest.mark.parametrize("split", ["row", "nz"])
def test_an_excluded_worker_gets_no_further_task(pool: Any, split: str) -> None:
    """24 processors on 3 workers: round-robin would hand the liar 8 compute tasks. It is
    excluded when its first result fails, so it makes only what it was handed before (the
    first window's), and every result it made was rejected and made again elsewhere."""
    liar, procs = _worker_named(pool, 0), 24
    p = sparse_problem("spmv", split, seed=6, n=480, procs=procs, density=0.05)
    bound = p.bound
    res = bound.run(p.inputs, runtime="dask", client=pool, verify="check", faults={"lie": {0}})
    p.check(res.value, p.local().value)
    s = res.extra["summary"]
    assert s.excluded_workers == [liar]
    assert 1 <= s.units_rejected < procs // 3, str(s)
    assert s.per_worker[liar] == s.units_rejected + s.reductions_rejected, str(s)
    assert s.checked == sum(bool(pp.out.pieces) for pp in bound.binding.procs)


@pytest.mark.parametrize("name", ["gemm 2x2", "spmv row"])
def test_bad_options_name_the_culprit(client: Any, name: str) -> None:
    p = gemm_problem(8, (2, 2)) if name == "gemm 2x2" else problem(name)
    bound, x = p.bound, p.inputs
    nworkers = len(client.scheduler_info()["workers"])
    with pytest.raises(dl.InputError, match=r"unknown option.*'chekpoint'"):
        bound.run(x, runtime="dask", client=client, chekpoint="x")
    for granularity in ("block", "rows"):
        with pytest.raises(dl.InputError, match="granularity"):
            bound.run(x, runtime="dask", client=client, granularity=granularity)
    with pytest.raises(dl.InputError, match="verify"):
        bound.run(x, runtime="dask", client=client, verify=0)
    more = nworkers + 1
    with pytest.raises(dl.InputError, match=f"verify={more} needs at least {more} workers"):
        bound.run(x, runtime="dask", client=client, verify=more)
    with pytest.raises(dl.InputError, match="client"):
        bound.run(x, runtime="dask", client=42)
    # a dense input's block source that fails: the run fails with its error
    dense = "C" if name == "gemm 2x2" else "c"
    broken = dict(x, **{dense: Exploding(np.shape(x[dense]))})
    with pytest.raises(dl.RuntimeFailure, match="boom"):
        bound.run(broken, runtime="dask", client=client)


class Exploding:
    """A block source whose disk is gone."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def read_block(self, box: Any) -> np.ndarray:
        raise OSError("boom: disk gone")


def test_checkpoint_entries_roundtrip_and_detect_damage() -> None:
    a = np.arange(12.0).reshape(3, 4)
    head, payload, _ = ck.encode("x", a)
    raw = head + bytes(payload)
    assert np.array_equal(ck.decode("x", raw), a)
    assert ck.decode("y", raw) is None  # another entry's file
    assert ck.decode("x", raw[:-1]) is None
    assert ck.decode("x", raw[:5]) is None
    flipped = bytearray(raw)
    flipped[-1] ^= 1
    assert ck.decode("x", bytes(flipped)) is None
    assert ck.decode("x", ck.encode("x", np.zeros((0, 3)))[0]).shape == (0, 3)


@pytest.mark.timeout(90)
def test_workers_joining_mid_run_get_tasks(tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    k, x = gemm(), gemm_inputs()
    trace = tmp_path / "trace"
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as c,
    ):
        out: dict[str, Any] = {}

        def go() -> None:
            faults = {"delay": 0.15, "trace": str(trace)}
            out["res"] = k.run(x, runtime="dask", client=c, faults=faults)

        t = threading.Thread(target=go)
        t.start()
        deadline = time.monotonic() + 30
        while sum(e == "done" for e, _, _ in trace_lines(trace)) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        first = set(c.scheduler_info()["workers"])
        cluster.scale(3)
        t.join(60)
        assert not t.is_alive()
    res = out["res"]
    assert np.array_equal(res.value, x["B"] @ x["C"])
    s = res.extra["summary"]
    joined = [w for w in s.per_worker if w not in first]
    assert joined
    assert s.workers_joined
    assert sum(s.per_worker[w] for w in joined) >= 2


@pytest.mark.parametrize("kind", ["summa", "mttkrp"])
def test_tree_routed_plans_run_unchanged(client: Any, kind: str) -> None:
    """Routing (Forward / Combine, relay messages) is how processors talk; units ignore it."""
    from distal.plan.ir import Combine, Forward

    if kind == "summa":
        k, x = gemm(algorithm="summa", routing="tree"), gemm_inputs()
        want = x["B"] @ x["C"]
        direct = gemm(algorithm="summa", routing="direct")
        routed_op = Forward
    else:
        k, x = mttkrp(grid=(2, 4), routing="tree"), mttkrp_inputs()
        want = mttkrp_expected(x)
        direct = mttkrp(grid=(2, 4), routing="direct")
        routed_op = Combine
    assert any(isinstance(op, routed_op) for prog in k.plan.programs for op in prog)
    assert any(m.relay for m in k.plan.messages)

    # the same work; only the processors each piece is counted from differ
    def work(plan: Any) -> list[Any]:
        return [dataclasses.replace(u, receives=(), sends=()) for u in decompose(plan)]

    assert work(k.plan) == work(direct.plan)
    assert decompose(k.plan) != decompose(direct.plan)
    res = k.run(x, runtime="dask", client=client, granularity="step")
    assert np.array_equal(res.value, want)
    assert_stats(res.stats, k)
    assert res.stats.as_dict() != direct.stats().as_dict()


def test_the_task_progress_bar_draws_with_rich_or_as_a_text_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The elastic runtime's bar is the runtimes' one, in its one-row (tasks) use."""
    import io

    from distal import progress

    out = io.StringIO()
    with progress.Progress(4, enabled=True, stream=out, label="tasks") as bar:
        bar.update(2, "checkpointed 1, recomputed 0", force=True)
        assert bar.active
        assert bar.done == [2]
    assert not bar.active
    monkeypatch.setattr(progress, "_has_rich", lambda: False)
    out = io.StringIO()
    bar = progress.Progress(4, enabled=True, stream=out, label="tasks")
    bar.update(3, "checkpointed 0, recomputed 1", force=True)
    bar.close()
    text = out.getvalue()
    assert text.endswith("\n")
    assert set(text.rstrip("\n").split("\r")[1:]) == {"tasks (checkpointed 0, recomputed 1): 3/4"}
    assert progress.Progress(4, stream=io.StringIO()).enabled is False  # not a terminal
