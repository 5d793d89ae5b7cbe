"""A sparse plan's unit descriptions held on the workers (``Driver.unit_arg``,
``units.HeldUnit``): a second run of the same plan sends each unit a future, not its
stored-entry structure; the workers keep the prepared leaves with it; the bits are the
local runtime's; under ``verify=`` every task still gets its description from the driver."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from elastic_helpers import problem, unit_blocks

from distal.runtime.dask import decompose
from distal.runtime.elastic import driver as drv
from distal.runtime.elastic import tasks
from distal.runtime.elastic.units import HeldUnit, carries_entries, unheld

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]


def _sparse_unit() -> Any:
    p = problem("spmv row")
    (u, *_) = [u for u in decompose(p.bound.plan) if carries_entries(u)]
    return p, u


def test_a_held_unit_travels_without_its_leaves() -> None:
    _, u = _sparse_unit()
    held = HeldUnit(u.task())
    held.leaves[(0, 0, "<f8")] = object()  # as a worker fills it
    back = pickle.loads(pickle.dumps(held))
    assert isinstance(back, HeldUnit)
    assert back.leaves == {}
    assert pickle.dumps(back.unit) == pickle.dumps(held.unit)
    assert unheld(back) == (back.unit, back.leaves)
    assert unheld(u) == (u, None)


def test_a_second_run_hands_units_their_held_description(client: Any, monkeypatch: Any) -> None:
    p = problem("spmv row")
    local = p.local()
    handed: list[Any] = []
    real = drv.Driver.unit_arg

    def spy(self: Any, u: Any, where: Any = None) -> Any:
        got = real(self, u, where)
        handed.append(got)
        return got

    monkeypatch.setattr(drv.Driver, "unit_arg", spy)
    first = p.bound.run(p.inputs, runtime="dask", client=client)
    made = list(handed)
    handed.clear()
    second = p.bound.run(p.inputs, runtime="dask", client=client)
    for res in (first, second):
        p.check(res.value, local.value)
        assert res.stats.as_dict() == p.bound.stats().as_dict()
    # every unit of the sparse plan was handed a future, the same one in both runs
    assert made
    assert all(type(f).__name__ == "Future" for f in made)
    assert {f.key for f in handed} == {f.key for f in made}
    # the workers hold each description once, with its leaves prepared by the first run
    keys = [f.key for f in made]

    def leaves(dask_worker: Any) -> dict[str, int]:
        return {
            k: len(dask_worker.data[k].leaves)
            for k in keys
            if k in dask_worker.data and isinstance(dask_worker.data[k], HeldUnit)
        }

    held = {}
    for got in client.run(leaves).values():
        held.update(got)
    assert set(held) == set(keys)
    assert all(n >= 1 for n in held.values())


def test_verified_runs_hand_every_task_the_drivers_description(pool: Any, monkeypatch: Any) -> None:
    p = problem("spmv row")
    local = p.local()
    handed: list[Any] = []
    real = drv.Driver.unit_arg

    def spy(self: Any, u: Any, where: Any = None) -> Any:
        got = real(self, u, where)
        handed.append(got)
        return got

    monkeypatch.setattr(drv.Driver, "unit_arg", spy)
    for verify in ("check", 2):
        handed.clear()
        res = p.bound.run(p.inputs, runtime="dask", client=pool, verify=verify)
        p.check(res.value, local.value)
        assert all(type(f).__name__ != "Future" for f in handed)


def test_compute_fills_and_reuses_the_prepared_leaves() -> None:
    p, u = _sparse_unit()
    ctx = tasks.Ctx(
        topic="t", kernels=p.bound.kernels, out_dtype=np.dtype(np.float64), store=None,
        worker=lambda: None,
    )  # fmt: skip
    blocks = unit_blocks(p.bound, p.bound.check_inputs(p.inputs), u)
    plain, _, n0 = tasks._compute(ctx, u, blocks)
    prepared: dict = {}
    a, _, n1 = tasks._compute(ctx, u, blocks, prepared=prepared)
    made = dict(prepared)
    b, _, n2 = tasks._compute(ctx, u, blocks, prepared=prepared)
    assert made
    assert all(prepared[k] is made[k] for k in made)  # reused, not made again
    assert plain.tobytes() == a.tobytes() == b.tobytes()
    assert n0 == n1 == n2
