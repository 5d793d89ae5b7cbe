"""Pool test fixtures: a pool directory with its NATS server on loopback, volunteer
processes, the coordinator's link. Skipped (with the reason) without the ``pool`` extra."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pool_kit import LocalPool, _have_pool, free_port, stop_all


@pytest.fixture
def local_pool(tmp_path: Path) -> Iterator[LocalPool]:
    why = _have_pool()
    if why:
        pytest.skip(why)
    from distal.runtime.pool.server import NatsServer, PoolDir

    port = free_port()
    pd = PoolDir.create(tmp_path / "pool", port=port)
    server = NatsServer(pd, tied=True).start()
    pool = LocalPool(pd, server, f"tls://127.0.0.1:{port}", tmp_path)
    try:
        yield pool
    finally:
        stop_all(pool.procs)
        server.stop()


@pytest.fixture
def link(local_pool: LocalPool) -> Iterator[Any]:
    from distal.runtime.pool.link import Link

    lk = Link(local_pool.dir.coordinator()).start()
    try:
        yield lk
    finally:
        lk.close()
