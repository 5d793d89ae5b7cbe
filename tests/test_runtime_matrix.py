"""The runtime matrix: {dense, sparse} x {local, mpi, dask}, the same small kernels in every cell.

Dense: Cannon's GEMM on a 2 x 2 grid and a TTV whose every extent is ragged over its grid;
sparse: SpMV with a row cut and with a non-zero cut (``runtime_matrix_cases.py``). In every
cell each result equals numpy's or scipy's to 1e-12 (float64) and ``result.stats`` equals
the prediction (``kernel.stats()`` dense, ``kernel.bind(inputs).stats()`` sparse), but on
Dask ``peak_words``, which its workers measure and which is not the model's figure
(``runtime_matrix_cases.same_but_peak``). Only the
public API is used, so the matrix holds whatever executes the plans underneath.

MPI cells launch ``mpiexec -n 4`` (``mpi_jobs.run_job``: skipped without mpi4py or a
launcher, failed under CI); Dask cells use a loopback cluster like ``tests/dask``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mpi_jobs import run_job
from runtime_matrix_cases import CASES, P, check

SCRIPT = Path(__file__).resolve().parent / "runtime_matrix_cases.py"
KINDS = tuple(CASES)


@pytest.mark.parametrize("kind", KINDS)
def test_local(kind: str) -> None:
    for build in CASES[kind].values():
        kernel, inputs, reference, predicted = build()
        check(kernel.run(inputs), reference, predicted)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_mpi(kind: str) -> None:
    job = run_job(P, kind, script=SCRIPT)
    assert job.rc == 0, job
    lines = [d for d in job.lines() if "case" in d]
    failed = [d for d in lines if not d["ok"]]
    assert failed == [], job
    every = {(name, rank) for name in CASES[kind] for rank in range(P)}
    assert {(d["case"], d["rank"]) for d in lines} == every, job


@pytest.mark.dask
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_dask(kind: str, dask_client: Any) -> None:
    for build in CASES[kind].values():
        kernel, inputs, reference, predicted = build()
        result = kernel.run(inputs, runtime="dask", client=dask_client)
        plan = (kernel.bind(inputs) if kind == "sparse" else kernel).plan
        check(result, reference, predicted, plan)
        assert result.tasks_executed > 0
