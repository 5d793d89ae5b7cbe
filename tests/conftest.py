"""Shared pytest configuration: hypothesis profiles and common fixtures."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# Make an in-tree checkout importable when distal is not installed.
_SRC = Path(__file__).resolve().parent.parent / "src"
if importlib.util.find_spec("distal") is None and _SRC.is_dir():
    sys.path.insert(0, str(_SRC))

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=_QUIET,
)
settings.register_profile(
    "dev",
    max_examples=500,
    deadline=None,
    print_blob=True,
    suppress_health_check=_QUIET,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """Two in-process workers, one thread each, for one test module (as
    ``tests/dask/conftest.py``'s ``client``): the runtime matrices' Dask cells."""
    distributed = pytest.importorskip("distributed", reason="needs distributed (dask extra)")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c
