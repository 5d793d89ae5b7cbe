"""The coordinator killed with SIGKILL mid-loop and started again resumes from the last
checkpoint (entries sealed with the session's key, kept by the coordinator), and ends
exactly where a run that was never killed ends; the volunteers carry on in between."""

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
from pool_kit import HERE, LocalPool, child_env, wait_for

from distal.session.loops import iteration_dirs, read_manifest

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def _saved(location: Path) -> int:
    done = [it for it in iteration_dirs(location, "cg") if read_manifest(location, "cg", it)]
    return max(done, default=-1)


def _run(args: list[str]) -> str:
    got = subprocess.run(args, env=child_env(), capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stdout + got.stderr[-3000:]
    return got.stdout


def test_a_coordinator_killed_mid_loop_resumes_exactly(local_pool: LocalPool,
                                                       tmp_path: Path) -> None:  # fmt: skip
    pytest.importorskip("scipy.sparse")
    for name in ("v1", "v2"):
        local_pool.volunteer(name)
    wait_for(lambda: all("connected" in local_pool.log(n) for n in ("v1", "v2")), 120,
             "the volunteers to connect")  # fmt: skip
    creds = str(local_pool.dir.path / "coordinator.creds")
    script = [sys.executable, str(HERE / "_coordinator.py"), creds]
    ck = tmp_path / "ck"
    proc = subprocess.Popen([*script, str(ck), str(tmp_path / "killed.npz"), "0.05"],
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    t0 = time.monotonic()
    while _saved(ck) < 3 and proc.poll() is None and time.monotonic() - t0 < 300:
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    os.killpg(proc.pid, signal.SIGKILL)  # the coordinator's process, mid-loop
    proc.communicate()
    killed_at = _saved(ck)
    assert killed_at >= 3
    assert not (tmp_path / "killed.npz").exists()
    out = _run([*script, str(ck), str(tmp_path / "resumed.npz"), "0"])
    assert json.loads(out.strip().splitlines()[-1])["resumed_from"] == killed_at
    _run([*script, "-", str(tmp_path / "whole.npz"), "0"])
    resumed, whole = np.load(tmp_path / "resumed.npz"), np.load(tmp_path / "whole.npz")
    assert int(resumed["iterations"]) == int(whole["iterations"])
    assert np.array_equal(resumed["x"], whole["x"])
    # the volunteers lived through it
    assert all(local_pool.procs[n].poll() is None for n in ("v1", "v2"))
