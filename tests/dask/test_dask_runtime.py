"""The Dask runtime on a small in-process pool: exactness, checkpoints, verify, joins."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import gemm, gemm_inputs, ints, mttkrp, mttkrp_expected, mttkrp_inputs

import distal as dl
from conftest import trace_lines
from distal.plan.ir import Fetch, Flush
from distal.runtime import checkpoint as ck
from distal.runtime.dask import decompose
from distal.runtime.elastic import tasks
from distal.typing import box_intersect, box_is_empty, box_volume

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]


def test_gemm_exact_with_measured_stats(client: Any) -> None:
    k, x = gemm(), gemm_inputs()
    res = k.run(x, runtime="dask", client=client)
    assert np.array_equal(res.value, x["B"] @ x["C"])
    assert np.array_equal(res.value, k.run(x).value)
    # counted by the tasks from what they received, equal to the prediction
    assert res.stats.as_dict() == k.stats().as_dict()
    assert res.stats.words_received == k.run(x).stats.words_received
    s = res.extra["summary"]
    # every Cannon unit alone makes one whole block: 16 tasks, each a finished block
    assert res.tasks_executed == s.tasks_total == len(decompose(k.plan)) == 16
    assert res.tasks_reused == 0
    assert sum(s.per_worker.values()) == s.tasks_total
    assert "counted by the tasks" in res.extra["stats_note"]
    # Dask's own worker-to-worker bytes: two workers share 16 units reading 32 blocks, so
    # some unit always reads a block the other worker produced
    assert isinstance(res.extra["dask_transfer_bytes"], int)
    assert res.extra["dask_transfer_bytes"] > 0


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
            return dst, src, box_volume(piece)
    raise AssertionError(f"no remote {kind.__name__} in the plan")


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
    assert intact.stats.as_dict() == predicted.as_dict()
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


@pytest.mark.parametrize("granularity", ["flush", "step", 2])
def test_mttkrp_partial_sums(client: Any, granularity: Any) -> None:
    k, x = mttkrp(), mttkrp_inputs()
    res = k.run(x, runtime="dask", client=client, granularity=granularity)
    assert np.array_equal(res.value, mttkrp_expected(x))
    # a processor's split output buffer is still one partial sum per piece
    assert res.stats.as_dict() == k.stats().as_dict()


def test_scalar_output_and_replicated_output(client: Any) -> None:
    M = dl.Machine(2)
    i, j = dl.index_vars("i j")
    a = dl.Tensor("a", (), dist=None)
    b = dl.Tensor("b", (10,), dist="i -> i", machine=M)
    c = dl.Tensor("c", (10,), dist="i -> i", machine=M)
    a[()] = b[i] * c[i]
    io, ii = dl.index_vars("io ii")
    k = dl.compile(dl.schedule(a).distribute([i], [io], [ii], M))
    x = {"b": ints((10,), 1), "c": ints((10,), 2)}
    r = k.run(x, runtime="dask", client=client)
    assert np.array_equal(r.value, x["b"] @ x["c"])
    assert r.stats.as_dict() == k.stats().as_dict()

    M2 = dl.Machine(2, 2)
    A = dl.Tensor("A", (6, 6), dist="ij -> i*", machine=M2)
    B = dl.Tensor("B", (6, 6), dist="ij -> ij", machine=M2)
    A[i, j] = B[i, j] * 2
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    k2 = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M2))
    xb = {"B": ints((6, 6), 3)}
    r2 = k2.run(xb, runtime="dask", client=client)
    assert np.array_equal(r2.value, 2 * xb["B"])
    assert r2.stats.as_dict() == k2.stats().as_dict()


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
def test_checkpoint_rerun_reuses_everything(client: Any, tmp_path: Path, url: str) -> None:
    loc = {"dir": str(tmp_path), "file": f"file://{tmp_path}", "memory": "memory://distal-t"}[url]
    k, x = gemm(), gemm_inputs()
    r1 = k.run(x, runtime="dask", client=client, checkpoint=loc)
    assert r1.tasks_reused == 0
    assert r1.stats.as_dict() == k.stats().as_dict()
    r2 = k.run(x, runtime="dask", client=client, checkpoint=loc)
    assert r2.tasks_executed == 0
    assert r2.tasks_reused == r1.tasks_executed
    # nothing moved in a run that loaded every block
    assert r2.stats.total_words == sum(r2.stats.messages_received) == 0
    assert sum(r2.stats.iterations) == 0
    assert np.array_equal(r2.value, x["B"] @ x["C"])
    store = ck.CheckpointStore(loc, Path(r1.extra["checkpoint"]).name)
    manifest = store.read_manifest()
    assert manifest is not None
    assert manifest["complete"]
    assert manifest["distributions"]["B"] == "ik -> ik"  # B's tiles as dl.algorithms writes them


def test_changed_input_or_schedule_never_reuses(client: Any, tmp_path: Path) -> None:
    k, x = gemm(), gemm_inputs()
    k.run(x, runtime="dask", client=client, checkpoint=tmp_path)
    y = dict(x, C=x["C"].copy())
    y["C"][3, 4] += 1
    r = k.run(y, runtime="dask", client=client, checkpoint=tmp_path)
    assert r.tasks_reused == 0
    assert np.array_equal(r.value, y["B"] @ y["C"])
    r = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, granularity="step")
    assert r.tasks_reused == 0
    summa = gemm(algorithm="summa")
    r = summa.run(x, runtime="dask", client=client, checkpoint=tmp_path)
    assert r.tasks_reused == 0
    assert np.array_equal(r.value, x["B"] @ x["C"])
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 4


def test_corrupt_checkpoint_is_detected_and_recomputed(client: Any, tmp_path: Path) -> None:
    k, x = mttkrp(), mttkrp_inputs()
    want = mttkrp_expected(x)
    r1 = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, keep_partials=True)
    run = Path(r1.extra["checkpoint"])
    # A truncated finished block: its units are loaded from their partials, it is re-reduced.
    blk = run / "block-0-0.ck"
    blk.write_bytes(blk.read_bytes()[:-7])
    r2 = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, keep_partials=True)
    assert np.array_equal(r2.value, want)
    assert r2.extra["summary"].corrupt == 1
    assert r2.tasks_executed == 1  # the block; its two partials came from the checkpoint
    # A flipped bit in a partial, whose block is gone: the partial is recomputed.
    part = run / "part-p0-s0-2.ck"
    raw = bytearray(part.read_bytes())
    raw[-3] ^= 0x10
    part.write_bytes(bytes(raw))
    blk.unlink()
    r3 = k.run(x, runtime="dask", client=client, checkpoint=tmp_path)
    assert np.array_equal(r3.value, want)
    assert r3.extra["summary"].corrupt == 1
    assert r3.tasks_executed == 2  # the partial and the block
    assert ck.CheckpointStore(tmp_path, run.name).load("block-0-0")[1] == ck.OK


def test_verify_accepts_agreement_and_rejects_a_lying_worker(client: Any) -> None:
    k, x = gemm(n=16, grid=(2, 2)), gemm_inputs(16)
    r = k.run(x, runtime="dask", client=client, verify=2)
    assert np.array_equal(r.value, x["B"] @ x["C"])
    assert r.extra["summary"].verified == 4
    assert r.stats.as_dict() == k.stats().as_dict()  # two copies, one delivery counted
    liar = next(iter(client.scheduler_info()["workers"].values()))["name"]
    with pytest.raises(dl.RuntimeFailure, match="disagrees between workers"):
        k.run(x, runtime="dask", client=client, verify=2, _lie=[liar])
    with pytest.raises(dl.InputError, match="verify=3 needs at least 3 workers"):
        k.run(x, runtime="dask", client=client, verify=3)


def test_bad_options_name_the_culprit(client: Any) -> None:
    k, x = gemm(n=8, grid=(2, 2)), gemm_inputs(8)
    with pytest.raises(dl.InputError, match="'chekpoint'"):
        k.run(x, runtime="dask", client=client, chekpoint="x")
    with pytest.raises(dl.InputError, match="granularity"):
        k.run(x, runtime="dask", client=client, granularity="block")
    with pytest.raises(dl.InputError, match="client"):
        k.run(x, runtime="dask", client=42)
    with pytest.raises(dl.RuntimeFailure, match="boom"):
        k.run({"B": Exploding((8, 8)), "C": x["C"]}, runtime="dask", client=client)


class Exploding:
    shape = (8, 8)

    def __init__(self, shape: tuple[int, int]) -> None:
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
            out["res"] = k.run(x, runtime="dask", client=c, _delay=0.15, _trace=str(trace))

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
    assert res.stats.as_dict() == k.stats().as_dict()
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
