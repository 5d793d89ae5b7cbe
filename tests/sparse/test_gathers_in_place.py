"""On the local runtime, a one-step plan's leaves over stored entries read a gathered
dense input (SpMV's ``x``, SpMM's rows of ``C``) where the caller's whole array holds it, by
global rows, instead of copying the rows into a buffer: the same values as scipy's, and the
same stats as the plan predicts (the message is counted, and the buffer it stands for
counts in the memory model as before)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from routing_cases import spmm_streamed

import distal as dl
from distal import algorithms as al
from distal.runtime import local

WIDTH = 8


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The processors of each run whose leaves read in the caller's arrays."""
    seen: list[Any] = []
    orig = local.LocalRuntime._fetch_all

    def spy(self: Any, q: Any, *a: Any, **k: Any) -> None:
        orig(self, q, *a, **k)
        seen.append((q.p, q.p in self.whole_now))

    monkeypatch.setattr(local.LocalRuntime, "_fetch_all", spy)
    return seen


def _matrix(n: int, seed: int) -> sp.csr_matrix:
    return sp.random(n, n, density=6.0 / n, format="csr", random_state=seed)


@pytest.mark.parametrize("split", ["rows", "nonzeros"])
@pytest.mark.parametrize("procs", [2, 3])
def test_spmv_and_spmm_read_their_dense_operand_in_place(
    split: str, procs: int, reads: list[Any]
) -> None:
    n = 3000
    A = _matrix(n, 1)
    B = dl.SparseArray.from_scipy(A)
    rng = np.random.default_rng(2)
    c, C = rng.standard_normal(n), rng.standard_normal((n, WIDTH))
    for bound, inputs, want in (
        (al.spmv((n, n), dl.Machine(procs), split).compile().bind({"B": B}), {"B": B, "c": c},
         A @ c),
        (al.spmm((n, n), WIDTH, dl.Machine(procs), split).compile().bind({"B": B}),
         {"B": B, "C": C}, A @ C),
    ):  # fmt: skip
        reads.clear()
        res = bound.run(inputs)
        np.testing.assert_allclose(res.value, want, rtol=1e-12, atol=1e-12)
        assert res.stats == bound.stats()
        assert any(whole for _, whole in reads), reads  # (the path this file is about)
        # given a strided view of the operand, the kernel copies the rows as before: the
        # same values (bit for bit) and stats
        reads.clear()
        name = "c" if "c" in inputs else "C"
        strided = np.repeat(inputs[name], 2, axis=0)[::2]
        res2 = bound.run(dict(inputs, **{name: strided}))
        assert not any(whole for _, whole in reads), reads
        np.testing.assert_array_equal(res2.value, res.value)
        assert res2.stats == bound.stats()


def test_a_streamed_plan_keeps_its_buffers(reads: list[Any]) -> None:
    """A plan of several steps (SpMM with ``C`` streamed in column chunks) may read a
    buffer over its steps: it fetches as before, with scipy's values and the plan's stats."""
    kernel, inputs, want = spmm_streamed(2, "direct")
    bound = kernel.bind(inputs)
    res = bound.run(inputs)
    np.testing.assert_allclose(res.value, want, rtol=1e-12, atol=1e-12)
    assert res.stats == bound.stats()
    assert reads
    assert not any(whole for _, whole in reads)
