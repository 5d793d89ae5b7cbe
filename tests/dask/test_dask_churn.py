"""Churn: a checkpointed CG session on a pool of 4 worker processes while workers are
SIGKILLed one after another and replaced (each worker's nanny starts a new worker
process for each one killed, so the pool loses one and gains one each time). The session's values
live on the workers, so a kill loses blocks of held vectors as well as tasks in flight (3
of the 4 first workers are killed, each holding about a quarter of the blocks); the run must
still finish every iteration with the exact result."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from elastic_helpers import process_pool

import distal as dl

pytestmark = [pytest.mark.dask, pytest.mark.timeout(240)]

WORKERS, KILLS, ITERS = 4, 3, 20


def _laplacian(k: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(k, k))
    return sp.csr_matrix(sp.kron(sp.eye(k), t) + sp.kron(t, sp.eye(k)))


def test_cg_session_finishes_exact_while_workers_are_killed_and_replaced(tmp_path: Path) -> None:
    A = _laplacian(24)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    local = dl.Session("local", progress=False)
    want, its_want = dl.apps.cg(A, b, machine=4, tol=0.0, maxiter=ITERS, session=local)
    with process_pool([{}] * WORKERS) as c:
        out: dict[str, Any] = {}
        sess = dl.Session("dask", client=c, checkpoint=tmp_path / "ck", progress=False)

        def go() -> None:
            try:
                out["res"] = dl.apps.cg(A, b, machine=4, tol=0.0, maxiter=ITERS, session=sess)
            except BaseException as e:  # surfaced below
                out["err"] = e

        first = set(c.run(os.getpid))
        t = threading.Thread(target=go)
        t.start()
        killed: list[str] = []
        while len(killed) < KILLS:
            time.sleep(0.7)
            assert t.is_alive(), "the run ended before the churn did: make it longer"
            pids = c.run(os.getpid)
            # an original worker each time (a replacement's address may sort first: killing
            # it would replace a new worker, not lose another of the first pool's)
            victim = sorted(a for a in pids if a in first and a not in killed)[0]
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)
        t.join(180)
        assert not t.is_alive()
        c.wait_for_workers(WORKERS, timeout=60)
        now = set(c.run(os.getpid))
    assert "err" not in out, out.get("err")
    x, its = out["res"]
    assert its == its_want == ITERS
    np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-12)
    # every victim is gone and was replaced: the pool is 4 again, with new workers
    assert not set(killed) & now
    assert len(now) == WORKERS
    assert len(now - first) >= KILLS
