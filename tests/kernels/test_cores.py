"""How many cores a process takes (``distal.kernels.cores``) and how BLAS's threads are
lowered to it (``blas.share_threads``), from the launchers' environment variables."""

from __future__ import annotations

import pytest

from distal.kernels import blas, cores

ALL_VARS = (*cores.LOCAL_SIZE_VARS, "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID")


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for v in ALL_VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def test_no_launcher_is_one_rank_with_the_whole_mask(clean: pytest.MonkeyPatch) -> None:
    clean.setattr(cores, "affinity", lambda: 8)
    clean.setattr(cores.os, "cpu_count", lambda: 8)
    assert cores.local_ranks() == 1
    assert cores.cores() == 8


@pytest.mark.parametrize("var", cores.LOCAL_SIZE_VARS)
def test_each_launchers_variable_divides_an_unbound_mask(
    clean: pytest.MonkeyPatch, var: str
) -> None:
    clean.setattr(cores, "affinity", lambda: 8)
    clean.setattr(cores.os, "cpu_count", lambda: 8)
    clean.setenv(var, "3")
    assert cores.local_ranks() == 3
    assert cores.cores() == 2  # 8 // 3
    clean.setenv(var, "16")
    assert cores.cores() == 1  # never below one


def test_a_rank_the_launcher_bound_keeps_its_own_mask(clean: pytest.MonkeyPatch) -> None:
    clean.setattr(cores, "affinity", lambda: 2)
    clean.setattr(cores.os, "cpu_count", lambda: 8)
    clean.setenv("MPI_LOCALNRANKS", "4")
    assert cores.cores() == 2


@pytest.mark.parametrize(
    ("spec", "node", "want"),
    [("4", "0", 4), ("2(x3),1", "2", 2), ("2(x3),1", "3", 1), ("3,5", "1", 5), ("bad", "0", 1)],
)
def test_slurm_tasks_per_node(clean: pytest.MonkeyPatch, spec: str, node: str, want: int) -> None:
    clean.setenv("SLURM_STEP_TASKS_PER_NODE", spec)
    clean.setenv("SLURM_NODEID", node)
    assert cores.local_ranks() == want


def test_a_bad_count_is_ignored(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("MPI_LOCALNRANKS", "zero")
    clean.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    assert cores.local_ranks() == 2


def test_share_threads_leaves_a_count_the_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for v in blas.THREAD_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    before = blas.threads()
    assert blas.share_threads(1) == "BLAS threads left as OMP_NUM_THREADS=3 sets them"
    assert blas.threads() == before


@pytest.mark.skipif(
    blas._LIB is None or blas._LIB.set_global is None, reason="no BLAS thread setter bound"
)
def test_share_threads_lowers_the_count_and_a_region_restores_the_lowered_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for v in blas.THREAD_VARS:
        monkeypatch.delenv(v, raising=False)
    before = blas.threads()
    blas._LIB.set_global(2)
    try:
        assert blas.threads() == 2
        assert blas.share_threads(1).startswith("BLAS threads: 2 -> 1")
        assert blas.threads() == 1
        assert blas.share_threads(1).startswith("BLAS threads: 1 (at most 1")
        blas._LIB.set_global(2)
        with blas.one_thread_each():  # a region open: the count it restores is lowered
            assert blas.share_threads(1).startswith("BLAS threads: 2 -> 1")
        assert blas.threads() == 1
    finally:
        blas._LIB.set_global(before)
