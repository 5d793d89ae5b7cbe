"""Dask test fixtures: tiny loopback clusters (the CI machine has two shared cores)."""

from __future__ import annotations

from typing import Any

import pytest

distributed = pytest.importorskip("distributed", reason="needs distributed (dask extra)")


@pytest.fixture(scope="module")
def client(dask_client: Any) -> Any:
    """Two in-process workers, one thread each: fast to start, enough for most tests (the
    shared fixture of ``tests/conftest.py``)."""
    return dask_client


@pytest.fixture(scope="module")
def pool() -> Any:
    """Three in-process workers, one thread each, named 0, 1, 2: enough for ``verify=3``,
    and ``faults={"lie": {0}}`` names worker 0."""
    with (
        distributed.LocalCluster(
            n_workers=3, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c
