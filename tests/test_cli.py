"""The ``distal`` command line as a shell user meets it: pipes, exit codes, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

from distal.cli import SIGPIPE_EXIT


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
