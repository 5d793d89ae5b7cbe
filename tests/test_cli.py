"""The ``distal`` command line as a shell user meets it: pipes, exit codes, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import distal as dl
from distal.cli import SIGPIPE_EXIT, main


def test_a_closed_pipe_ends_quietly_with_the_sigpipe_status(tmp_path):
    """``distal checkpoint --json | head``: the reader is gone before distal writes a byte."""
    read, write = os.pipe()
    os.close(read)  # the reader has gone: the first write is EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "distal", "checkpoint", str(tmp_path), "--json"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == SIGPIPE_EXIT == 141


LOOP = "power_iteration_long"  # longer than the 16 characters the listing once kept


@pytest.fixture(scope="module")
def loop_location(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A location holding a session loop after 11 iterations: 9 and 10 are kept."""
    where = tmp_path_factory.mktemp("ck")
    M = dl.Machine(2)
    i, io, ii = dl.index_vars("i io ii")
    X = dl.Tensor("X", (8,), dist="x -> x", machine=M)
    Y = dl.Tensor("Y", (8,), dist="x -> x", machine=M)
    Y[i] = X[i] * 0.5 + 1.0
    step = dl.compile(dl.schedule(Y).distribute([i], [io], [ii], M))
    sess = dl.Session(checkpoint=str(where))
    sess.put("X", np.zeros(8))
    for _ in sess.iterations(11, keep=["Y"], name=LOOP):
        sess.run(step)
    return where


def test_checkpoint_lists_session_iterations_by_their_full_names(loop_location, capsys):
    assert main(["checkpoint", str(loop_location)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    names = [row.split()[0] for row in rows]
    assert sorted(names) == [f"sessions/{LOOP}/10", f"sessions/{LOOP}/9"]


def test_checkpoint_verify_acts_on_the_named_iteration_only(loop_location, capsys):
    """``sessions/<loop>/1`` is a prefix of iteration 10's name: it must not verify 10."""
    assert main(["checkpoint", str(loop_location), "--verify", f"sessions/{LOOP}/1"]) == 2
    err = capsys.readouterr().err
    assert f"'sessions/{LOOP}/1' matches no run" in err
    assert f"sessions/{LOOP}/10" in err  # the runs there are listed in full
    assert main(["checkpoint", str(loop_location), "--verify", f"sessions/{LOOP}/10"]) == 0
    assert capsys.readouterr().out.startswith(f"sessions/{LOOP}/10  ")
    assert main(["checkpoint", str(loop_location), "--verify", "all"]) == 0
    checked = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert sorted(checked) == [f"sessions/{LOOP}/10", f"sessions/{LOOP}/9"]


def test_a_run_key_prefix_must_be_unambiguous(tmp_path):
    from distal.runtime import checkpoint_tools as ct

    for key in ("3b1c187010ec8be8", "3b1c99aa00000000"):
        (tmp_path / key).mkdir()
        (tmp_path / key / "block-0.ck").write_bytes(b"x")
    assert ct.find(tmp_path, "3b1c18").run == "3b1c187010ec8be8"
    with pytest.raises(dl.InputError, match=r"prefix of 2 runs.*3b1c187010ec8be8"):
        ct.find(tmp_path, "3b1c")
