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


def trace_lines(path: Any) -> list[tuple[str, str, str]]:
    """(event, task, status) lines a run's ``_trace`` hook wrote."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) >= 2:
            out.append((parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    return out
