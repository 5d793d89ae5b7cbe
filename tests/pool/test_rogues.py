"""Misbehaving volunteer processes against the coordinator over a real (loopback) pool:
each kind of malformed reply refused by name, a liar caught by the check, a flood of
unexpected replies; all excluded, nothing they sent run, the coordinator's memory bounded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import MALFORMED
from pool_kit import LocalPool, wait_for

import distal as dl
from distal.runtime.pool.driver import Job, PoolDriver
from distal.runtime.pool.engine import Engine, Options

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def test_rogue_volunteers_are_refused_by_name_excluded_and_never_run(
    local_pool: LocalPool, link: Any, tmp_path: Path
) -> None:
    psutil = pytest.importorskip("psutil")
    marker = tmp_path / "ran"
    os.environ["DISTAL_ROGUE_MARKER"] = str(marker)
    try:
        rogues = {f"bad-{k}": f"malformed:{k}" for k in MALFORMED}
        rogues |= {"liar": "liar", "flood": "flood"}
        local_pool.rogues(rogues)
        local_pool.volunteer("honest")
        wait_for(lambda: local_pool.log("rogues").count("connected") == len(rogues)
                 and "connected" in local_pool.log("honest"), 120,
                 "every volunteer to connect")  # fmt: skip
    finally:
        os.environ.pop("DISTAL_ROGUE_MARKER", None)
    n = 64
    k = dl.algorithms.summa(n, machine=dl.Machine(4, 4), steps=2).compile()
    rng = np.random.default_rng(3)
    x = {"B": rng.integers(-3, 4, (n, n)) * 1.0, "C": rng.integers(-3, 4, (n, n)) * 1.0}
    engine = Engine(link, Options())
    me = psutil.Process()
    rss0 = me.memory_info().rss
    summaries = []
    for _ in range(2):  # the second run: the rogues are excluded from the start
        drv = PoolDriver(Job(k.plan, k.kernels, k.dtypes), x)
        value, _stats, s = drv.run(engine, lambda c: link.call(c, 240))
        assert np.array_equal(value, x["B"] @ x["C"])
        summaries.append(s)
    grown = me.memory_info().rss - rss0
    s = summaries[0]
    refused = {r["volunteer"]: r["code"] for r in s.replies_refused}
    assert refused["bad-pickle"] in ("unparsable", "envelope")
    assert refused["bad-object-dtype"] == "dtype"
    assert refused["bad-huge-shape"] == "shape"
    assert refused["bad-truncated"] == "size"
    assert refused["bad-garbage"] == "unparsable"
    assert refused.get("flood") in (None, "unexpected")
    assert {r["volunteer"] for r in s.units_rejected} <= {"liar"}
    excluded = set(s.excluded_volunteers) | set(summaries[1].excluded_volunteers)
    assert {*(f"bad-{k}" for k in MALFORMED), "liar"} <= excluded
    assert set(summaries[1].units_by_volunteer) <= {"honest", "flood"}
    assert not marker.exists()
    # the run's own arrays are a few MB; a refused reply of 10^6 times the unit is never made
    assert grown < 200 << 20, grown
