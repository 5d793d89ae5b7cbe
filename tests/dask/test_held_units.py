"""A sparse plan's unit descriptions held on the workers (``Submitter.unit_arg``,
``units.HeldUnit``): a second run of the same plan sends each unit a future, not its
stored-entry structure; the workers keep the prepared leaves with it; the bits are the
local runtime's; under ``verify=`` every task still gets its description from the driver."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from elastic_helpers import assert_stats, problem, unit_blocks

from distal.runtime.dask import decompose
from distal.runtime.elastic import core, submit, tasks
from distal.runtime.elastic import driver as drv
from distal.runtime.elastic.events import Where
from distal.runtime.elastic.units import (
    ForgedDescription,
    HeldUnit,
    carries_entries,
    description,
    unheld,
)

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]


def _sparse_unit() -> Any:
    p = problem("spmv row")
    (u, *_) = [u for u in decompose(p.bound.plan) if carries_entries(u)]
    return p, u


def test_a_held_unit_travels_as_its_bytes_and_is_read_only_with_their_digest() -> None:
    _, u = _sparse_unit()
    blob, digest = description(u)
    held = HeldUnit(blob)
    held.leaves[(0, 0, "<f8")] = object()  # as a worker fills it
    back = pickle.loads(pickle.dumps(held))
    assert isinstance(back, HeldUnit)
    assert back.leaves == {}
    assert back.blob == blob
    assert pickle.dumps(back.unit) == pickle.dumps(u.task())
    assert unheld(back) == (back.unit, back.leaves)
    assert unheld(u) == (u, None)
    assert unheld((back, digest))[0] is back.unit
    assert back.vouched == digest
    k = len(blob) // 2
    forged = HeldUnit(blob[:k] + bytes([blob[k] ^ 1]) + blob[k + 1 :])
    with pytest.raises(ForgedDescription, match="changed it"):
        unheld((forged, digest))
    assert forged._unit is None  # refused before it was read


def _spy_unit_args(monkeypatch: Any) -> list[tuple[Any, Any]]:
    """Every ``(unit, what its task is handed)`` the driver gives out from now on."""
    handed: list[tuple[Any, Any]] = []
    real = submit.Submitter.unit_arg

    def spy(self: Any, u: Any, where: Any = None) -> Any:
        got = real(self, u, where)
        handed.append((u, got))
        return got

    monkeypatch.setattr(submit.Submitter, "unit_arg", spy)
    return handed


def test_a_second_run_hands_units_their_held_description(client: Any, monkeypatch: Any) -> None:
    p = problem("spmv row")
    local = p.local()
    handed = _spy_unit_args(monkeypatch)
    first = p.bound.run(p.inputs, runtime="dask", client=client)
    made = [got for _, got in handed]
    handed.clear()
    second = p.bound.run(p.inputs, runtime="dask", client=client)
    for res in (first, second):
        p.check(res.value, local.value)
        assert_stats(res.stats, p.bound)
    # every unit of the sparse plan was handed a future, the same one in both runs
    assert made
    assert all(type(f).__name__ == "Future" for f in made)
    assert {f.key for _, f in handed} == {f.key for f in made}
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


def test_verified_runs_hand_held_descriptions_with_the_drivers_digest(
    pool: Any, monkeypatch: Any
) -> None:
    p = problem("spmv row")
    local = p.local()
    handed = _spy_unit_args(monkeypatch)
    for verify in ("check", 2):
        handed.clear()
        res = p.bound.run(p.inputs, runtime="dask", client=pool, verify=verify)
        p.check(res.value, local.value)
        assert handed
        for u, (f, digest) in handed:
            assert type(f).__name__ == "Future"
            assert digest == description(u)[1]


def test_a_forged_held_description_is_refused_and_the_run_made_again(
    pool: Any, monkeypatch: Any
) -> None:
    """Worker 0 holds other bytes than the driver sent (``faults={"lie": {0}}``): a task handed them
    refuses them, and the run is made again with the descriptions sent by the driver;
    the result is the local runtime's bits, and the plan's held descriptions are dropped."""
    p = problem("spmv row")
    local = p.local()
    attempts: list[int] = []
    real = drv.Driver._run

    def counted(self: Any) -> Any:
        attempts.append(1)
        return real(self)

    monkeypatch.setattr(drv.Driver, "_run", counted)
    # every unit and its held description go to worker 0 first (the spread's first worker)
    zero = next(a for a, w in pool.scheduler_info()["workers"].items() if w["name"] == 0)
    monkeypatch.setattr(
        core.Core,
        "_spread",
        lambda self, n, out: self.restrict(out) if self.excluded else Where((zero,), False),
    )
    res = p.bound.run(p.inputs, runtime="dask", client=pool, verify="check", faults={"lie": {0}})
    p.check(res.value, local.value)
    assert len(attempts) == 2
    got = submit.HELD.get(p.bound.plan)
    assert got is not None
    assert got.forged
    assert got.futures == {}


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
