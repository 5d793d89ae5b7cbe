"""Checkpointed session loops: saved per iteration, resumed after a kill, exact results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import distal as dl
from distal.runtime.checkpoint import CheckpointStore
from distal.session.loops import iteration_dirs, read_manifest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "_loop_script.py"
ENV = dict(
    os.environ,
    OMP_NUM_THREADS="1",
    OPENBLAS_NUM_THREADS="1",
    MKL_NUM_THREADS="1",
    PYTHONUNBUFFERED="1",
    DISTAL_PROGRESS="0",
)


def _kernels(n: int, scale: float = 0.1) -> tuple[dl.Kernel, dl.Kernel]:
    """``Y = A @ X`` (X replicated along rows) and ``X = scale * Y + 1`` on a 2 x 2 grid."""
    M = dl.Machine(2, 2)
    i, j, k = dl.index_vars("i j k")
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    A = dl.Tensor("A", (n, n), dist="xy -> xy", machine=M)
    X = dl.Tensor("X", (n, n), dist="xy -> x*", machine=M)
    Y = dl.Tensor("Y", (n, n), dist="xy -> xy", machine=M)
    Y[i, j] = A[i, k] * X[k, j]
    step = dl.compile(dl.schedule(Y).distribute([i, j], [io, jo], [ii, ji], M))
    Yr = dl.Tensor("Y", (n, n), dist="xy -> xy", machine=M)
    X2 = dl.Tensor("X", (n, n), dist="xy -> xy", machine=M)
    X2[i, j] = Yr[i, j] * scale + 1.0
    back = dl.compile(dl.schedule(X2).distribute([i, j], [io, jo], [ii, ji], M))
    return step, back


def _session(location: Path | None, n: int = 8) -> tuple[dl.Session, tuple]:
    sess = dl.Session(checkpoint=None if location is None else str(location))
    rng = np.random.default_rng(5)
    sess.put("A", rng.random((n, n)))
    sess.put("X", np.eye(n))
    return sess, _kernels(n)


def _loop(sess: dl.Session, kernels: tuple, n: int, stop: int | None = None) -> list[int]:
    ran = []
    for it in sess.iterations(n, keep=["X"], name="fix"):
        if stop is not None and it == stop:
            break
        for k in kernels:
            sess.run(k)
        ran.append(it)
    return ran


def test_saves_each_iteration_and_resumes_after_the_last(tmp_path: Path) -> None:
    sess, ks = _session(tmp_path)
    assert _loop(sess, ks, 5) == [0, 1, 2, 3, 4]
    assert sess.resumed_from is None
    assert iteration_dirs(tmp_path, "fix") == [3, 4]  # the last two complete ones stay
    man = read_manifest(tmp_path, "fix", 4)
    assert man is not None
    assert man["values"]["X"]["layout"]["dist"] == "xy -> xy"
    assert len(man["values"]["X"]["entries"]) == 4  # one entry per block of "xy -> xy"
    final = sess.get("X")
    again, ks2 = _session(tmp_path)
    assert _loop(again, ks2, 5) == []  # everything was done
    assert again.resumed_from == 4
    assert np.array_equal(again.get("X"), final)
    more, ks3 = _session(tmp_path)
    assert _loop(more, ks3, 7) == [5, 6]
    ref, ks4 = _session(None)
    assert _loop(ref, ks4, 7) == list(range(7))
    assert np.array_equal(more.get("X"), ref.get("X"))
    # X comes back as "xy -> xy" and the next step reads it as "xy -> x*": n*n words each
    assert more.moved_words == 2 * 8 * 8
    assert ref.moved_words == 6 * 8 * 8  # the first read of the put value is free
    assert more.layout("X") == ref.layout("X")


def test_break_saves_only_finished_iterations(tmp_path: Path) -> None:
    sess, ks = _session(tmp_path)
    assert _loop(sess, ks, 6, stop=3) == [0, 1, 2]
    assert max(iteration_dirs(tmp_path, "fix")) == 2
    again, ks2 = _session(tmp_path)
    assert _loop(again, ks2, 6) == [3, 4, 5]
    assert again.resumed_from == 2
    ref, ks3 = _session(None)
    _loop(ref, ks3, 6)
    assert np.array_equal(again.get("X"), ref.get("X"))


def test_a_damaged_newest_iteration_falls_back_to_the_one_before(tmp_path: Path) -> None:
    sess, ks = _session(tmp_path)
    _loop(sess, ks, 4)
    path = Path(CheckpointStore(tmp_path, "sessions/fix/3").path("X.1"))
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF  # one flipped byte in the payload: the checksum no longer matches
    path.write_bytes(bytes(raw))
    again, ks2 = _session(tmp_path)
    with pytest.warns(dl.errors.DistalWarning, match=r"\[3\] are damaged"):
        assert _loop(again, ks2, 4) == [3]
    assert again.resumed_from == 2
    assert np.array_equal(again.get("X"), sess.get("X"))


def test_an_iteration_without_its_manifest_is_not_complete(tmp_path: Path) -> None:
    sess, ks = _session(tmp_path)
    _loop(sess, ks, 3)
    os.unlink(Path(CheckpointStore(tmp_path, "sessions/fix/2").root) / "manifest.json")
    again, ks2 = _session(tmp_path)
    assert _loop(again, ks2, 3) == [2]
    assert again.resumed_from == 1


def test_loop_arguments_are_checked(tmp_path: Path) -> None:
    sess, ks = _session(tmp_path)
    with pytest.raises(dl.InputError, match="count"):
        sess.iterations(-1)
    with pytest.raises(dl.InputError, match="loop name"):
        sess.iterations(3, keep=["X"], name="../x")
    with pytest.raises(dl.InputError, match="'Z'"):
        for _ in sess.iterations(2, keep=["Z"]):
            pass
    _loop(sess, ks, 2)
    with pytest.raises(dl.InputError, match="not"):
        _session(tmp_path)[0].iterations(3, keep=["X", "A"], name="fix")


def test_without_a_checkpoint_iterations_just_count() -> None:
    sess, ks = _session(None)
    assert _loop(sess, ks, 3) == [0, 1, 2]
    assert sess.resumed_from is None


# -- killed and restarted -------------------------------------------------------------------


def _lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def launch(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**ENV, **(env or {})},
        start_new_session=True,
    )


def run_to_end(cmd: list[str], timeout: float = 120) -> list[dict]:
    proc = launch(cmd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} hung\n{out}\n{err}")
    assert proc.returncode == 0, f"{cmd}\n{out}\n{err}"
    return _lines(out)


def kill_after_start(
    cmd: list[str], start: int, timeout: float = 120, env: dict[str, str] | None = None
) -> list[dict]:
    """Run ``cmd`` until it reports it started iteration ``start`` (so ``start - 1`` is
    saved), then SIGKILL its whole process group."""
    proc = launch(cmd, env)
    deadline = time.monotonic() + timeout
    seen = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                seen.append(json.loads(line))
                if seen[-1].get("start") == start:
                    break
            if time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, seen)
    assert seen, "no line came"
    assert seen[-1].get("start") == start, seen
    return seen


def killed_and_resumed(
    prefix: list[str],
    tmp_path: Path,
    runtime: str,
    env: dict[str, str] | None = None,
    script: Path = SCRIPT,
) -> None:
    """``script`` (the loop of ``_loop_script.py``, or the same loop written otherwise) run
    to the end, then SIGKILLed in iteration 4 and restarted: it resumes after iteration 3
    and ends bit-identical to the uninterrupted run."""
    n, k = 8, 4
    ref = tmp_path / "ref.npz"
    done = run_to_end([*prefix, str(script), runtime, str(tmp_path / "ref-ck"), str(n), str(ref)])
    assert done[-1]["ran"] == list(range(n))
    assert done[-1]["resumed_from"] is None
    location = str(tmp_path / "ck")
    out = tmp_path / "out.npz"
    cmd = [*prefix, str(script), runtime, location, str(n), str(out), "0.5"]
    seen = kill_after_start(cmd, k, env=env)  # iteration k-1 is complete, k was running
    if env and "LOOP_KILL_WORKER_AT" in env:  # a worker really died in that run
        assert any("killed_worker" in d for d in seen), seen
    assert not out.exists()
    assert (
        max(i for i in iteration_dirs(location, "power") if read_manifest(location, "power", i))
        == k - 1
    )
    lines = run_to_end(cmd)
    assert [d["start"] for d in lines if "start" in d] == list(range(k, n))
    assert lines[-1]["resumed_from"] == k - 1
    assert lines[-1]["ran"] == list(range(k, n))
    a, b = np.load(ref), np.load(out)
    assert np.array_equal(a["X"], b["X"])
    assert np.array_equal(a["R"], b["R"])
    assert a["R"].shape == ()


def test_killed_loop_resumes_exactly_local(tmp_path: Path) -> None:
    killed_and_resumed([sys.executable], tmp_path, "local")


def test_killed_loop_resumes_exactly_dask_with_a_worker_killed(tmp_path: Path) -> None:
    """On Dask: one of the two worker processes is SIGKILLed in iteration 2 (the run
    finishes on the other), then the whole driver in iteration 4; the restart resumes after
    iteration 3 and ends equal to an uninterrupted run."""
    pytest.importorskip("distributed", reason="needs distributed (dask extra)")
    killed_and_resumed([sys.executable], tmp_path, "dask", {"LOOP_KILL_WORKER_AT": "2"})


def test_checkpoint_tools_list_and_verify_session_loops(tmp_path: Path) -> None:
    from distal.runtime import checkpoint_tools as tools

    sess, ks = _session(tmp_path)
    _loop(sess, ks, 3)
    infos = {r.run: r for r in tools.runs(tmp_path)}
    assert set(infos) == {"sessions/fix/1", "sessions/fix/2"}
    assert infos["sessions/fix/2"].complete
    assert infos["sessions/fix/2"].entries == 4
    assert "fix" in (infos["sessions/fix/2"].statement or "")
    assert tools.verify(tmp_path, "sessions/fix/2")["corrupt"] == []
    path = Path(CheckpointStore(tmp_path, "sessions/fix/2").path("X.0"))
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert tools.verify(tmp_path, "sessions/fix/2")["corrupt"] == ["X.0"]
