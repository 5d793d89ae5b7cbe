"""A Jacobi sweep written with slices is one kernel an iteration whose plan fetches only
the halo rows (words counted here by hand from the block sizes), and the same stencil
program runs on every runtime (local, MPI, Dask) with numpy's result."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import distal as dl
from mpi_jobs import run_job

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _stencil_program import grid, run, sweeps  # noqa: E402


def halo(n: int, m: int, p: int) -> list[int]:
    """Words each processor receives for a sweep of an ``n x m`` grid in blocks of rows:
    the interior rows of its block, ``[max(lo, 1), min(hi, n - 1))``, read one row above
    and one below; those outside the block are its neighbours', whole rows of ``m``."""
    c = -(-n // p)
    out = []
    for b in range(p):
        lo, hi = min(b * c, n), min((b + 1) * c, n)
        a, z = max(lo, 1), min(hi, n - 1)
        out.append(0 if z <= a else m * ((a - 1 < lo) + (z + 1 > hi)))
    return out


@pytest.mark.parametrize(("n", "p"), [(12, 1), (12, 2), (13, 3), (10, 4), (9, 4)])
def test_sweep_is_one_kernel_moving_its_halo(n: int, p: int) -> None:
    m = 7
    sess = dl.Session("local", machine=p, check_stats=True)
    a = grid(n, m)
    u = sess.asarray(a)
    sweeps(u, 1)
    sess.flush()
    before = sess.kernels_run
    sweeps(u, 4)
    np.testing.assert_array_equal(u.get(), sweeps(a.copy(), 5))  # numpy's bits
    assert sess.kernels_run == before + 4
    assert sess.compiles == 1  # one key for every sweep
    assert sess.moved_words == 0  # every block read where it lies: only the halo moves
    (kernel,) = [k for key, k in sess.arrays_program().kernels.items() if key[0] == "region"]
    st = kernel.stats()
    assert st.words_received == halo(n, m, p)
    assert sum(st.words_sent) == sum(halo(n, m, p))
    assert sess.stats_checked == 5
    assert not sess.stats_differ  # measured == predicted on every run


def test_stencil_program_on_local() -> None:
    for p in (1, 2, 3):
        got = run(dl.Session("local", machine=p, check_stats=True))
        assert got["same"], got
        assert got["moved"] == 0, got


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_stencil_program_on_mpi_ranks(ranks: int) -> None:
    job = run_job(ranks, script=HERE / "_mpi_stencil.py", timeout=180)
    assert job.rc == 0, job
    lines = job.lines()
    assert sorted(d["rank"] for d in lines) == list(range(ranks)), job
    assert all(d["same"] for d in lines), lines
    assert all(d["differ"] == 0 and d["checked"] == d["kernels"] for d in lines), lines
    local = run(dl.Session("local", machine=ranks))
    assert all(d["kernels"] == local["kernels"] for d in lines), (lines, local)


def test_stencil_program_on_dask(dask_client: Any) -> None:
    sess = dl.Session("dask", client=dask_client, machine=2, check_stats=True)
    got = run(sess)
    assert got["same"], got
    assert not sess.stats_differ
    assert sess.driver_words == 7 * 8  # only the final read: u[::-2, 1:] of 13 x 9
    # verified: every unit's result checked by a projection of its terms (a restricted
    # term's operands zero outside its part), none rejected
    checked = dl.Session("dask", client=dask_client, machine=2, verify="check")
    got = run(checked)
    assert got["same"], got
    assert not checked.excluded_workers
