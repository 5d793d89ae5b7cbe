"""The kernels of the runtime matrix (``test_runtime_matrix.py``), written with the public API.

Each case builds ``(kernel, inputs, reference, predicted)``: the reference comes from numpy or
scipy, ``predicted`` is ``kernel.stats()`` (dense) or ``kernel.bind(inputs).stats()``
(sparse). Inputs are seeded, so every MPI rank builds the same ones. Every case runs on a
machine of :data:`P` processors.

Under ``mpiexec -n 4``, ``python runtime_matrix_cases.py KIND`` runs the cases of KIND
(``dense`` or ``sparse``) on the MPI runtime and checks them on every rank; each rank prints
one JSON line per case, ``{"case", "rank", "ok"}`` plus ``"error"`` when a check failed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

import distal as dl

P = 4
RTOL = 1e-12
Case = tuple[Any, dict[str, Any], np.ndarray, Any]


def gemm() -> Case:
    """Cannon's GEMM (``dl.algorithms``) of 12 x 12 matrices on a 2 x 2 grid."""
    rng = np.random.default_rng(11)
    b, c = rng.standard_normal((12, 12)), rng.standard_normal((12, 12))
    kernel = dl.algorithms.cannon(12, machine=dl.Machine(2, 2)).compile()
    return kernel, {"B": b, "C": c}, b @ c, kernel.stats()


def ttv() -> Case:
    """``A(i,j) = B(i,j,k) * c(k)`` on a 2 x 2 grid, every extent ragged over it: B in
    (i, j) tiles, c cut over the grid's rows (every processor fetches what it lacks)."""
    M = dl.Machine(2, 2)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (5, 7), dist="ij -> ij", machine=M)
    B = dl.Tensor("B", (5, 7, 3), dist="ijk -> ij", machine=M)
    c = dl.Tensor("c", (3,), dist="k -> k*", machine=M)
    A[i, j] = B[i, j, k] * c[k]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    s = dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M).communicate([A, B, c], jo)
    kernel = dl.compile(s)
    rng = np.random.default_rng(12)
    bv, cv = rng.standard_normal((5, 7, 3)), rng.standard_normal(3)
    return kernel, {"B": bv, "c": cv}, np.einsum("ijk,k->ij", bv, cv), kernel.stats()


def _matrix(n: int, seed: int) -> sp.csr_array:
    """A random CSR matrix with an empty row and a full one (uneven pieces either way)."""
    rng = np.random.default_rng(seed)
    b = sp.random_array((n, n), density=0.15, rng=rng, format="lil")
    b[n // 3, :] = rng.random(n)
    b[n // 2, :] = 0
    return sp.csr_array(b)


def _spmv(split: str) -> Case:
    """``dl.algorithms.spmv`` of a 30 x 30 CSR matrix on 4 processors."""
    B = _matrix(30, 13)
    x = np.random.default_rng(14).standard_normal(30)
    kernel = dl.algorithms.spmv((30, 30), machine=dl.Machine(P), split=split).compile()
    inputs = {"B": B, "c": x}
    return kernel, inputs, B @ x, kernel.bind(inputs).stats()


def spmv_rows() -> Case:
    """SpMV with B's rows cut into blocks."""
    return _spmv("rows")


def spmv_nonzeros() -> Case:
    """SpMV with B's stored entries cut into equal ranges (rows straddle processors)."""
    return _spmv("nonzeros")


CASES: dict[str, dict[str, Callable[[], Case]]] = {
    "dense": {"gemm 2x2": gemm, "ttv ragged": ttv},
    "sparse": {"spmv rows": spmv_rows, "spmv nonzeros": spmv_nonzeros},
}


def check(result: Any, reference: np.ndarray, predicted: Any, plan: Any = None) -> None:
    """The value equals the reference to ``RTOL`` (scaled for entries near zero) and the
    measured stats equal the prediction exactly (a prediction in which words move). With
    ``plan`` (Dask), ``peak_words`` is checked as :func:`same_but_peak` says."""
    assert sum(predicted.words_received) > 0, predicted
    value = result.value
    if isinstance(value, dl.SparseArray):  # pragma: no cover - every output here is dense
        value = value.to_dense()
    value = np.asarray(value)
    assert value.shape == reference.shape, (value.shape, reference.shape)
    scale = max(1.0, float(np.abs(reference).max(initial=0.0)))
    np.testing.assert_allclose(value, reference, rtol=RTOL, atol=RTOL * scale)
    if plan is None:
        assert result.stats == predicted, (result.stats, predicted)
    else:
        same_but_peak(result.stats, predicted, plan)


def same_but_peak(measured: Any, predicted: Any, plan: Any) -> None:
    """A Dask run's stats: every count equal to the prediction but ``peak_words``, which the
    workers measure (a unit holds its own buffers, not the plan's steps: it is not the
    model's figure: a unit holding one step's buffers holds less, one copying gathered rows
    more), so it is checked for what it must be: at least a processor's owned blocks
    wherever one of its tasks ran."""
    got, want = measured.as_dict(), predicted.as_dict()
    peak = got.pop("peak_words")
    want.pop("peak_words")
    assert got == want, (got, want)
    owned = [plan.owned_words(p) for p in range(plan.nprocs)]
    ran = [p for p, n in enumerate(measured.iterations) if n]
    assert ran
    assert all(peak[p] >= owned[p] for p in ran), (peak, owned)


def _mpi_main(kind: str) -> None:
    from distal.runtime.mpi import world

    rank, _ = world()
    for name, build in CASES[kind].items():
        kernel, inputs, reference, predicted = build()
        line: dict[str, Any] = {"case": name, "rank": rank}
        try:
            check(kernel.run(inputs, runtime="mpi"), reference, predicted)
        except AssertionError as e:
            line |= {"ok": False, "error": str(e)[:2000]}
        else:
            line["ok"] = True
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    _mpi_main(sys.argv[1])
