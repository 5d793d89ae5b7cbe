"""The nested cut ``"xy -> x(xy)"``: rows by blocks over machine dimension 0, the stored
entries inside each row block by positions over dimension 1."""

from __future__ import annotations

import numpy as np

import distal as dl
from distal.sparse import generate as gen


def test_nested_cut_owns_position_halves_of_each_row_block_and_runs_exactly() -> None:
    B = gen.rmat(7, 8, seed=2)
    n = B.shape[0]
    M = dl.Machine(2, 2)
    i, j, k, io, ii, ko, ki = dl.index_vars("i j k io ii ko ki")
    Bt = dl.Tensor("B", (n, n), format="csr", dist="xy -> x(xy)", machine=M)
    C = dl.Tensor("C", (n, 6), dist="jk -> jk", machine=M)
    A = dl.Tensor("A", (n, 6), dist="ik -> ik", machine=M)
    A[i, k] = Bt[i, j] * C[j, k]
    s = dl.schedule(A).reorder([i, j, k]).distribute([i, k], [io, ko], [ii, ki], M)
    kernel = dl.compile(s.communicate([A, Bt, C], ko))
    bound = kernel.bind({"B": B})
    # the oracle: row block r holds positions pos[r*h] .. pos[(r+1)*h], cut in two halves
    pos = B.levels[1].pos
    h = -(-n // 2)
    want = []
    for r in range(2):
        lo, hi = int(pos[min(r * h, n)]), int(pos[min((r + 1) * h, n)])
        c = -(-(hi - lo) // 2)
        for q in range(2):
            want.append(np.arange(lo + min(q * c, hi - lo), lo + min((q + 1) * c, hi - lo)))
    for p in range(4):
        assert np.array_equal(bound.binding.owned["B"][p], want[p])
    Cv = np.random.default_rng(0).standard_normal((n, 6))
    res = kernel.run({"B": B, "C": Cv})
    np.testing.assert_allclose(res.value, B.to_scipy() @ Cv, rtol=1e-12, atol=1e-12)
    assert res.stats == bound.stats()
    # the schedule cuts rows over both dimensions' processors alike: entries travel
    assert sum(res.stats.index_words_received) > 0
