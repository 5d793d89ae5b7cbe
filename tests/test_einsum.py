"""dl.einsum is numpy-compatible."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl

CASES = [
    ("ij,jk->ik", [(4, 5), (5, 3)]),
    ("ij,jk", [(4, 5), (5, 3)]),  # implicit output: "ik"
    ("ji,jk", [(5, 4), (5, 3)]),  # implicit output: "ik"
    ("ba", [(3, 4)]),  # implicit output is sorted: a transpose
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("i,i->", [(7,), (7,)]),
    ("i,i", [(7,), (7,)]),
    ("i,j->ij", [(3,), (5,)]),
    ("ijk,k->ij", [(3, 4, 5), (5,)]),
    ("ijk,jl,kl->il", [(3, 4, 5), (4, 2), (5, 2)]),
    ("ijk,lk->ijl", [(2, 3, 4), (5, 4)]),  # TTM
    ("ij,ij->", [(5, 3), (5, 3)]),
    ("i,->i", [(4,), ()]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("ij, jk -> ik", [(4, 5), (5, 3)]),  # spaces are allowed, as in numpy
]

MACHINES = [None, (2, 2), (3,), (2, 1, 2)]


@pytest.mark.parametrize("mshape", MACHINES, ids=lambda m: "default" if m is None else str(m))
@pytest.mark.parametrize(("subscripts", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_numpy(subscripts: str, shapes: list, mshape: tuple | None) -> None:
    rng = np.random.default_rng(len(subscripts))
    operands = [rng.standard_normal(s) for s in shapes]
    expected = np.einsum(subscripts, *operands)
    machine = None if mshape is None else dl.Machine(*mshape)
    got = dl.einsum(subscripts, *operands, machine=machine)
    assert isinstance(got, np.ndarray | np.generic)
    got = np.asarray(got)
    assert got.shape == np.shape(expected)
    assert np.allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_einsum_ragged_sizes_on_grid(rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 9))
    got = dl.einsum("ij,jk->ik", a, b, machine=dl.Machine(2, 2))
    assert np.allclose(got, a @ b, rtol=1e-10, atol=1e-10)


def test_einsum_converts_dtypes() -> None:
    a = np.arange(6).reshape(2, 3)
    b = np.arange(3, dtype=np.float32)
    got = dl.einsum("ij,j->i", a, b, machine=dl.Machine(2))
    assert np.allclose(got, a @ b.astype(np.float64))


@pytest.mark.parametrize(
    ("subscripts", "shapes"),
    [
        ("ij,jk->ik", [(4, 5), (6, 3)]),  # j disagrees
        ("ij,jk->ik", [(4, 5)]),  # too few operands
        ("ij->ik", [(4, 5)]),  # output index not in any input
        ("ijk->ij", [(4, 5)]),  # wrong number of subscripts for the operand
    ],
)
def test_einsum_errors(subscripts: str, shapes: list) -> None:
    operands = [np.ones(s) for s in shapes]
    with pytest.raises(dl.DistalError):
        dl.einsum(subscripts, *operands, machine=dl.Machine(2, 2))


@pytest.mark.parametrize("schedule", ["owner", "auto", None])
def test_einsum_schedules_agree(schedule) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 6))
    got = dl.einsum("ij,jk->ik", a, b, machine=dl.Machine(2, 2), schedule=schedule)
    np.testing.assert_allclose(got, a @ b, rtol=1e-10, atol=1e-10)


def test_einsum_unknown_schedule_names_it() -> None:
    with pytest.raises(dl.ScheduleError, match="'fastest'"):
        dl.einsum("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)), schedule="fastest")
