"""dl.apps on the Dask runtime (a small in-process cluster): dense and sparse inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import distal as dl

sps = pytest.importorskip("scipy.sparse", reason="needs scipy (sparse extra)")

from _problems import (  # noqa: E402
    cp_tensor,
    graph,
    numpy_pagerank,
    reconstruct,
    sparse_cp_tensor,
    sparse_spd,
    spd,
)


@pytest.fixture(scope="module")
def client(dask_client: Any) -> Any:
    """The shared two-worker loopback cluster (``tests/conftest.py``)."""
    return dask_client


def _session(client: Any) -> dl.Session:
    return dl.Session("dask", client=client, progress=False)


@pytest.mark.parametrize("sparse", [False, True])
def test_cp_als_on_dask(client: Any, sparse: bool) -> None:
    x = sparse_cp_tensor(shape=(14, 12, 10), seed=7) if sparse else cp_tensor(shape=(10, 9, 8))
    given: Any = x
    if sparse:
        import sparse as pydata

        given = pydata.COO.from_numpy(x)
    w, fs, fit = dl.apps.cp_als(given, 4, machine=2, iters=150, tol=1e-10, session=_session(client))
    true_fit = 1 - np.linalg.norm(x - reconstruct(w, fs)) / np.linalg.norm(x)
    assert fit >= 0.999
    assert true_fit >= 0.999


@pytest.mark.parametrize("sparse", [False, True])
def test_pagerank_on_dask(client: Any, sparse: bool) -> None:
    a = graph(n=60, dangling=6)
    pr = dl.apps.pagerank(sps.csr_array(a) if sparse else a, machine=2, session=_session(client))
    assert np.max(np.abs(pr - numpy_pagerank(a))) <= 1e-10


@pytest.mark.parametrize("sparse", [False, True])
def test_cg_on_dask(client: Any, sparse: bool) -> None:
    A, b = sparse_spd(n=60) if sparse else spd(n=40)
    x, _ = dl.apps.cg(sps.csr_array(A) if sparse else A, b, machine=2, session=_session(client))
    assert np.max(np.abs(x - np.linalg.solve(A, b))) <= 1e-8
