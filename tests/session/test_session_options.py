"""A session's options and checkpoint location are checked when it is made, and a loop
that finds its saved iterations damaged says so.

``Session(gather="all")``, ``Session(foo=1)`` and an unusable checkpoint location (a
regular file, a path under one, a place that cannot be created) used to be accepted and fail
only at the first run or the first save, with an ``OSError`` many frames deep. A loop whose
every saved iteration was damaged started again from iteration 0 without a word.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import distal as dl
from distal.errors import DistalWarning
from distal.runtime.checkpoint import CheckpointStore, check_location
from distal.session.loops import iteration_dirs


def _kernel(n: int = 6) -> dl.Kernel:
    M = dl.Machine(2)
    i, io, ii = dl.index_vars("i io ii")
    X = dl.Tensor("X", (n,), dist="x -> x", machine=M)
    Y = dl.Tensor("Y", (n,), dist="x -> x", machine=M)
    Y[i] = X[i] * 0.5 + 1.0
    return dl.compile(dl.schedule(Y).distribute([i], [io], [ii], M))


def _loop(sess: dl.Session, n: int) -> list[int]:
    k = _kernel()
    ran = []
    for it in sess.iterations(n, keep=["X"], name="fix"):
        sess.run(k)
        sess.values["X"] = sess.values.pop("Y")
        ran.append(it)
    return ran


def _session(location: Path | None) -> dl.Session:
    sess = dl.Session(checkpoint=None if location is None else str(location))
    sess.put("X", np.arange(6.0))
    return sess


def _damage(location: Path, it: int) -> None:
    path = Path(CheckpointStore(location, f"sessions/fix/{it}").path("X.0"))
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # one flipped byte of the payload: its checksum fails
    path.write_bytes(bytes(raw))


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["local", "mpi", "dask"])
def test_gather_is_refused_when_the_session_is_made(runtime: str) -> None:
    with pytest.raises(dl.InputError, match="gather="):
        dl.Session(runtime, gather="all")


@pytest.mark.parametrize("runtime", ["local", "mpi", "dask"])
def test_an_unknown_option_is_refused_when_the_session_is_made(runtime: str) -> None:
    with pytest.raises(dl.InputError, match=f"unknown option.*'foo'.*{runtime}"):
        dl.Session(runtime, foo=1)


def test_a_bad_dask_option_value_is_refused_when_the_session_is_made() -> None:
    with pytest.raises(dl.InputError, match="granularity"):
        dl.Session("dask", granularity="sometimes")


def test_the_local_options_are_accepted() -> None:
    sess = dl.Session("local", progress=False, trace=True)
    sess.put("X", np.arange(6.0))
    res = sess.run(_kernel(), gather=True)
    np.testing.assert_allclose(res.value, np.arange(6.0) * 0.5 + 1.0)


# -- the checkpoint location -------------------------------------------------------------------


def test_a_regular_file_as_checkpoint_is_refused_when_the_session_is_made(tmp_path: Path) -> None:
    f = tmp_path / "ck"
    f.write_text("not a directory")
    with pytest.raises(dl.InputError, match=r"checkpoint '.*ck' is a file, not a directory"):
        dl.Session(checkpoint=str(f))
    with pytest.raises(dl.InputError, match="not a usable location"):
        dl.Session(checkpoint=str(f / "below"))
    assert f.read_text() == "not a directory"


def test_an_unwritable_checkpoint_is_refused_when_the_session_is_made() -> None:
    with pytest.raises(dl.InputError, match="'/proc/distal-ck/x' is not a usable location"):
        dl.Session(checkpoint="/proc/distal-ck/x")


def test_a_checkpoint_that_is_no_path_is_refused() -> None:
    with pytest.raises(dl.InputError, match="directory or URL, got 3"):
        dl.Session(checkpoint=3)


def test_a_missing_checkpoint_directory_is_made(tmp_path: Path) -> None:
    where = tmp_path / "new" / "ck"
    sess = _session(where)
    assert where.is_dir()
    assert list(where.iterdir()) == []  # the probe file is gone
    assert _loop(sess, 2) == [0, 1]
    assert iteration_dirs(str(where), "fix") == [0, 1]


def test_check_location_takes_urls_without_writing() -> None:
    check_location("memory://distal-session-options")
    with pytest.raises(dl.InputError, match="checkpoint URL"):
        check_location("nosuchprotocol://x")


# -- damaged saved iterations -------------------------------------------------------------------


def test_every_saved_iteration_damaged_warns_and_starts_again(tmp_path: Path) -> None:
    first = _session(tmp_path)
    assert _loop(first, 4) == [0, 1, 2, 3]
    saved = iteration_dirs(str(tmp_path), "fix")
    assert saved == [2, 3]
    for it in saved:
        _damage(tmp_path, it)
    again = _session(tmp_path)
    with pytest.warns(
        DistalWarning, match=r"iteration\(s\) \[3, 2\] are damaged.*from iteration 0"
    ):
        assert _loop(again, 4) == [0, 1, 2, 3]
    assert again.resumed_from is None
    assert again.discarded == [("fix", 3), ("fix", 2)]
    assert "loop 'fix': damaged saved iteration(s) [3, 2] not used" in again.summary()
    ref = _session(None)
    _loop(ref, 4)
    assert np.array_equal(again.get("X"), ref.get("X"))


def test_a_damaged_newest_iteration_warns_and_resumes_from_the_one_before(
    tmp_path: Path,
) -> None:
    _loop(_session(tmp_path), 4)
    _damage(tmp_path, 3)
    again = _session(tmp_path)
    with pytest.warns(DistalWarning, match=r"\[3\] are damaged.*resuming after iteration 2"):
        assert _loop(again, 4) == [3]
    assert again.resumed_from == 2
    assert again.discarded == [("fix", 3)]
    assert "resumed: after iteration 2" in again.summary()


def test_an_intact_checkpoint_resumes_without_a_warning(tmp_path: Path) -> None:
    _loop(_session(tmp_path), 3)
    again = _session(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DistalWarning)
        assert _loop(again, 4) == [3]
    assert again.discarded == []
    assert "damaged" not in again.summary()


def test_an_unfinished_iteration_is_not_reported_damaged(tmp_path: Path) -> None:
    _loop(_session(tmp_path), 3)
    (Path(CheckpointStore(tmp_path, "sessions/fix/2").root) / "manifest.json").unlink()
    again = _session(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DistalWarning)
        assert _loop(again, 3) == [2]  # a save cut short by a kill: not damage
    assert again.discarded == []
