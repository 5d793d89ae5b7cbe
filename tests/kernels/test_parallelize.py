"""``Schedule.parallelize``: leaves cut over threads give the serial results and stats."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import distal as dl
from distal.kernels import leaf
from distal.kernels.leaf import parallel_positions, term_kernels


def compiled(sched: Any) -> Any:
    """The kernel with leaves built from the schedule (its parallelized loops included)."""
    kernel = dl.compile(sched)
    kernel.kernels = term_kernels(sched.statement, sched)
    return kernel


def problem(kind: str) -> tuple[Any, dict[str, Any], dict[str, np.ndarray]]:
    i, j, k, io, ii = dl.index_vars("i j k io ii")
    m = dl.Machine(2)
    rng = np.random.default_rng(11)
    n, kk = 64, 24
    if kind == "einsum3":
        A = dl.Tensor("A", (n, n), dist="ij -> i", machine=m)
        B = dl.Tensor("B", (n, n, kk), dist="ijk -> i", machine=m)
        C = dl.Tensor("C", (n, kk), dist="ik -> i", machine=m)
        D = dl.Tensor("D", (n, kk), dist="jk -> *", machine=m)
        A[i, j] = B[i, j, k] * C[i, k] * D[j, k] + 2.0 * C[i, k] * D[j, k]
        data = {"B": rng.random((n, n, kk)), "C": rng.random((n, kk)), "D": rng.random((n, kk))}
        ref = np.einsum("ijk,ik,jk->ij", data["B"], data["C"], data["D"]) + 2 * np.einsum(
            "ik,jk->ij", data["C"], data["D"]
        )
        tensors = {"A": A, "B": B, "C": C, "D": D}
    else:  # a GEMM whose output block is fetched in pieces: several leaf boxes per step
        A = dl.Tensor("A", (n, n), dist="ij -> i", machine=m)
        B = dl.Tensor("B", (n, kk), dist="ik -> i", machine=m)
        C = dl.Tensor("C", (kk, n), dist="kj -> j", machine=m)
        A[i, j] = B[i, k] * C[k, j]
        data = {"B": rng.random((n, kk)), "C": rng.random((kk, n))}
        ref = data["B"] @ data["C"]
        tensors = {"A": A, "B": B, "C": C}
    s = dl.schedule(A).distribute([i], [io], [ii], m).communicate(list(tensors.values()), io)
    return s, {"i": i, "j": j, "k": k, "io": io, "ii": ii, "ref": ref}, data


@pytest.mark.parametrize("kind", ["einsum3", "gemm"])
@pytest.mark.parametrize("var", ["j", "ii", "k"])
def test_parallelize_keeps_results_and_stats(
    kind: str, var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leaf, "PARALLEL_MIN_POINTS", 1)  # small problems split too
    s, v, data = problem(kind)
    par = s.parallelize(v[var])
    assert v[var] in par.parallel
    positions = parallel_positions(par.statement, par)
    names = [par.statement.variables[p].name for p in positions]
    assert names == {"j": ["j"], "ii": ["i"], "k": []}[var]  # k is summed: not cut
    calls: list[Any] = []
    real = leaf._run_chunks

    def spy(*args: Any) -> None:
        calls.append(args[3])
        real(*args)

    monkeypatch.setattr(leaf, "_run_chunks", spy)
    plain, threaded = compiled(s), compiled(par)
    r0, r1 = plain.run(data), threaded.run(data)
    np.testing.assert_allclose(np.asarray(r1.value), v["ref"], rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(r1.value), np.asarray(r0.value))
    assert r1.stats == r0.stats
    assert threaded.stats() == plain.stats()
    if var == "k" or leaf.cores() < 2:
        assert calls == []
    else:
        assert calls
        assert all(n >= 2 for n in calls)


def test_parallelize_rejects_unknown_loops() -> None:
    s, _, _ = problem("gemm")
    (z,) = dl.index_vars("z")
    with pytest.raises(dl.ScheduleError, match="parallelize"):
        s.parallelize(z)


def test_compile_carries_parallelized_loops_to_the_leaves() -> None:
    s, v, _ = problem("gemm")
    kernel = dl.compile(s.parallelize(v["j"]))
    assert all(tk.parallel for tk in kernel.kernels)
