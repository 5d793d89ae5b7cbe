"""Checkpoint entries on disk: direct (page-cache bypassing) writes, write-behind, failures."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import gemm, gemm_inputs

import distal as dl
from distal.runtime import checkpoint as ck
from distal.runtime import direct_io


def _direct_or_skip(tmp_path: Path) -> None:
    probe = np.ones(10)
    got = direct_io.write(
        str(tmp_path / "probe"),
        memoryview(probe.view(np.uint8)),
        lambda d: b"h" * 4096,
        4096,
        False,
    )
    if got is None:
        pytest.skip(f"the filesystem of {tmp_path} refuses O_DIRECT (the fallback is tested)")


@pytest.mark.parametrize(
    "nbytes",
    [
        1,
        4095,
        4096,
        4097,
        direct_io.CHUNK - 1,
        direct_io.CHUNK,
        direct_io.CHUNK + 1,
        2 * direct_io.CHUNK + 5,
    ],
)
def test_direct_writes_any_length_exactly(tmp_path: Path, nbytes: int) -> None:
    xxhash = pytest.importorskip("xxhash", reason="needs xxhash (dask extra) for the digest")
    _direct_or_skip(tmp_path)
    payload = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    path = str(tmp_path / "entry")
    digest = direct_io.write(
        path, memoryview(payload), lambda d: d.encode().ljust(4096, b"#"), 4096, True
    )
    want = xxhash.xxh3_128(payload.tobytes()).hexdigest()
    assert digest == want
    raw = Path(path).read_bytes()
    assert len(raw) == 4096 + nbytes
    assert raw[:4096] == want.encode().ljust(4096, b"#")
    assert raw[4096:] == payload.tobytes()


def test_large_entries_are_block_aligned_and_checked(tmp_path: Path) -> None:
    _direct_or_skip(tmp_path)
    store = ck.CheckpointStore(tmp_path, "run")
    a = np.random.default_rng(0).random((700, 600))[:, ::2]  # 1.6 MiB, not contiguous
    store.save("blk", a)
    raw = Path(store.path("blk")).read_bytes()
    assert raw.index(b"\n") == 4095  # header padded to 4 KiB: the payload starts aligned
    got, status = store.load("blk")
    assert status == ck.OK
    assert np.array_equal(got, a)
    damaged = bytearray(raw)
    damaged[4096 + 12345] ^= 0x40
    Path(store.path("blk")).write_bytes(bytes(damaged))
    assert store.load("blk") == (None, ck.CORRUPT)


def test_filesystems_refusing_direct_io_get_ordinary_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def no_direct(path: Any, flags: int, *a: Any) -> int:
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", no_direct)
    store = ck.CheckpointStore(tmp_path, "run")
    a = np.arange(300_000.0).reshape(600, 500)
    store.save("blk", a)
    assert store._direct is False
    got, status = store.load("blk")
    assert status == ck.OK
    assert np.array_equal(got, a)
    assert sorted(os.listdir(store.root)) == ["blk.ck"]  # no temporaries left behind


def test_a_failing_direct_write_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _direct_or_skip(tmp_path)

    def full(*a: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    store = ck.CheckpointStore(tmp_path, "run")
    with pytest.raises(OSError, match="No space"):
        store.save("blk", np.ones((512, 512)))
    assert os.listdir(store.root) == []


def test_save_soon_reports_done_only_once_the_entry_is_in_place(tmp_path: Path) -> None:
    store = ck.CheckpointStore(tmp_path, "run")
    seen: list[bool] = []
    store.save_soon("a", np.ones(4), lambda d: seen.append(os.path.exists(store.path("a"))))
    ck.drain(store.root)
    assert seen == [True]


def test_each_thread_has_at_most_one_entry_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ck.CheckpointStore(tmp_path, "run")
    gate = threading.Event()
    real = ck.CheckpointStore.save

    def slow(self: Any, name: str, arr: np.ndarray) -> str:
        gate.wait(10)
        return real(self, name, arr)

    monkeypatch.setattr(ck.CheckpointStore, "save", slow)
    done: list[str] = []

    def task() -> None:
        store.save_soon("a", np.ones(4), lambda d: done.append("a"))
        store.save_soon("b", np.ones(4), lambda d: done.append("b"))  # waits for "a"
        done.append("returned")

    t = threading.Thread(target=task)
    t.start()
    time.sleep(0.3)
    assert done == []  # the second call is held back while the first entry is unwritten
    gate.set()
    t.join(10)
    ck.drain(store.root)
    assert done == ["a", "returned", "b"]


def test_write_failures_surface_for_their_own_run_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, name: str, arr: np.ndarray) -> str:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(ck.CheckpointStore, "save", broken)
    mine, other = ck.CheckpointStore(tmp_path, "mine"), ck.CheckpointStore(tmp_path, "other")
    mine.save_soon("x", np.ones(3), lambda d: None)
    with pytest.raises(ck.WriteFailed, match=r"'x' could not be written under .*mine"):
        ck.drain(mine.root)
    other.save_soon("y", np.ones(3), lambda d: None)
    ck.drain(mine.root)  # another run's failure is not this run's to report
    assert isinstance(ck.WriteFailed("m"), dl.RuntimeFailure)


def test_a_run_whose_checkpoint_cannot_be_written_fails_naming_the_entry(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, name: str, arr: np.ndarray) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck.CheckpointStore, "save", broken)  # workers run in this process
    with pytest.raises(ck.WriteFailed, match=r"could not be written.*No space"):
        gemm().run(gemm_inputs(), runtime="dask", client=client, checkpoint=tmp_path / "ck")


def test_large_blocks_round_trip_through_a_checkpointed_run(client: Any, tmp_path: Path) -> None:
    n = 1024  # 2 MiB output blocks on 2x2: the direct-write path
    k = dl.algorithms.cannon(n, machine=dl.Machine(2, 2)).compile()
    rng = np.random.default_rng(3)
    x = {
        "B": rng.integers(-3, 4, (n, n)).astype(np.float64),
        "C": rng.integers(-3, 4, (n, n)).astype(np.float64),
    }
    want = x["B"] @ x["C"]
    first = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, progress=False)
    assert np.array_equal(first.value, want)
    again = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, progress=False)
    assert np.array_equal(again.value, want)
    assert again.tasks_executed == 0
    assert again.tasks_reused == first.tasks_executed


def test_writer_threads_of_finished_task_threads_are_released(tmp_path: Path) -> None:
    store = ck.CheckpointStore(tmp_path, "run")

    def task(i: int) -> None:
        store.save_soon(f"e{i}", np.ones(4), lambda d: None)

    for i in range(5):
        t = threading.Thread(target=task, args=(i,))
        t.start()
        t.join()
        ck.drain(store.root)
    task(99)  # a new lane prunes the lanes of the threads that are gone
    ck.drain(store.root)
    assert len([x for x in ck._lanes if not x.owner.is_alive()]) <= 1
    assert store.names() >= {f"e{i}" for i in range(5)} | {"e99"}


def test_an_unusable_checkpoint_location_is_an_input_error(client: Any, tmp_path: Path) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a directory")
    for where in (in_the_way, in_the_way / "below"):
        with pytest.raises(dl.InputError, match="not a usable location"):
            gemm().run(gemm_inputs(), runtime="dask", client=client, checkpoint=where)


@pytest.mark.parametrize("where", ["dir", "memory"])
def test_distal_checkpoint_lists_verifies_and_removes_runs(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    from distal.cli import main
    from distal.runtime import checkpoint_tools as ct

    loc = str(tmp_path / "ck") if where == "dir" else f"memory://distal-cli-{tmp_path.name}"
    x = gemm_inputs()
    gemm().run(x, runtime="dask", client=client, checkpoint=loc, progress=False)
    y = {"B": x["B"] + 1, "C": x["C"]}
    gemm().run(y, runtime="dask", client=client, checkpoint=loc, progress=False)
    found = ct.runs(loc)
    assert len(found) == 2
    assert all(r.complete and r.blocks == 16 and r.entries == 16 for r in found)
    assert found[0].statement == "A(i,j) = B(i,k) * C(k,j)"
    assert main(["checkpoint", loc]) == 0
    out = capsys.readouterr().out
    assert found[0].run[:16] in out
    assert found[1].run[:16] in out

    victim = found[0]
    store = ck.CheckpointStore(loc, victim.run)
    raw = store._read(store.path("block-1-2"))
    assert raw is not None
    store._write(store.path("block-1-2"), [raw[:-3]])  # truncated
    assert main(["checkpoint", loc, "--verify", victim.run[:8]]) == 1
    assert "15 entries ok, 1 corrupt: block-1-2" in capsys.readouterr().out
    assert main(["checkpoint", loc, "--verify", found[1].run]) == 0

    assert main(["checkpoint", loc, "--remove", victim.run[:10]]) == 0
    assert [r.run for r in ct.runs(loc)] == [found[1].run]
    assert main(["checkpoint", loc, "--remove", "zzz"]) == 2
    assert "matches no run" in capsys.readouterr().err


def test_half_written_entries_are_listed_and_cleaned_when_old(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from distal.cli import main
    from distal.runtime import checkpoint_tools as ct

    loc = tmp_path / "ck"
    gemm().run(gemm_inputs(), runtime="dask", client=client, checkpoint=loc, progress=False)
    (run,) = ct.runs(loc)
    old = Path(run.root) / "part-p0-s0-0.ck.tmp-0123abcd"  # a writer killed mid-write
    old.write_bytes(b"DISTALCK\x02{")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    young = Path(run.root) / "block-0-0.ck.tmp-4567ef01"  # maybe still being written
    young.write_bytes(b"DISTALCK")
    assert ct.runs(loc)[0].temporaries == 2
    assert ct.runs(loc)[0].entries == run.entries  # never counted as entries
    assert main(["checkpoint", str(loc)]) == 0
    assert "2 half-written entries" in capsys.readouterr().out
    assert main(["checkpoint", str(loc), "--clean", "all"]) == 0
    assert "removed 1 half-written entry" in capsys.readouterr().out
    assert not old.exists()
    assert young.exists()


def test_a_failing_report_after_a_write_is_nobody_elses_failure(tmp_path: Path) -> None:
    store = ck.CheckpointStore(tmp_path, "run")

    def closed(_digest: str) -> None:
        raise RuntimeError("the worker's event loop is closed")

    store.save_soon("e", np.ones(3), closed)
    ck.drain()  # no root: every failure would be raised
    assert store.load("e")[1] == ck.OK


def test_a_scalar_entry_keeps_its_shape(tmp_path) -> None:
    """0-d arrays (scalars a kernel produced) come back 0-d."""
    import numpy as np

    from distal.runtime.checkpoint import CheckpointStore

    store = CheckpointStore(str(tmp_path), "run")
    store.save("s", np.array(2.5))
    back, state = store.load("s")
    assert state == "ok"
    assert back.shape == ()
    assert back == 2.5
