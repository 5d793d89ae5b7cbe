"""Sparse levels by capability: what each level of a format is and can do.

* Every named format's levels answer as TACO's mode formats do (``taco/format.cpp``: CSR is
  ``{Dense, Sparse}``, COO is ``Compressed(NOT_UNIQUE)``, ``Singleton(NOT_UNIQUE)``...,
  ``Singleton(UNIQUE)``, a 1-D COO one unique ``Compressed``), the table written out here.
* The capabilities describe the arrays a stored level really has: which index arrays it
  holds, how its positions follow from its parent's (located, a ``pos`` segment, the same
  position), and whether its coordinates increase and repeat within a parent.
* The MLIR level types are read back as the same letters.
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from distal.errors import InputError
from distal.sparse import Level, SparseArray
from distal.sparse.formats import Format, LevelFormat, level_letter, named_format

_PROPS = (
    "full ordered unique branchless compact iterate_coordinates iterate_positions locate "
    "insert append"
).split()


def _dense() -> dict:
    """TACO's ``DenseModeFormat``: full, ordered, unique, compact; coordinate-value
    iteration, locate and insert."""
    return dict(
        kind="dense", full=True, ordered=True, unique=True, branchless=False, compact=True,
        iterate_coordinates=True, iterate_positions=False, locate=True, insert=True,
        append=False,
    )  # fmt: skip


def _compressed(unique: bool = True) -> dict:
    """TACO's ``CompressedModeFormat``: coordinate-position iteration and append."""
    return dict(
        kind="compressed", full=False, ordered=True, unique=unique, branchless=False,
        compact=True, iterate_coordinates=False, iterate_positions=True, locate=False,
        insert=False, append=True,
    )  # fmt: skip


def _singleton(unique: bool = True) -> dict:
    """TACO's ``SingletonModeFormat``: branchless, position iteration and append."""
    return dict(
        kind="singleton", full=False, ordered=True, unique=unique, branchless=True,
        compact=True, iterate_coordinates=False, iterate_positions=True, locate=False,
        insert=False, append=True,
    )  # fmt: skip


def _coo(n: int) -> list[dict]:
    if n == 1:
        return [_compressed(unique=True)]
    return [_compressed(False)] + [_singleton(False)] * (n - 2) + [_singleton(True)]


TACO = {
    ("dense", 1): [_dense()],
    ("dense", 3): [_dense()] * 3,
    ("csr", 2): [_dense(), _compressed()],
    ("csc", 2): [_dense(), _compressed()],
    ("dcsr", 2): [_compressed(), _compressed()],
    ("dcsc", 2): [_compressed(), _compressed()],
    ("csf", 3): [_compressed()] * 3,
    ("dss", 3): [_dense(), _compressed(), _compressed()],
    ("dds", 3): [_dense(), _dense(), _compressed()],
    ("coo", 1): _coo(1),
    ("coo", 2): _coo(2),
    ("coo", 3): _coo(3),
    ("coo", 4): _coo(4),
}


@pytest.mark.parametrize("key", list(TACO), ids=lambda k: f"{k[0]}{k[1]}")
def test_named_formats_levels_answer_as_tacos(key: tuple[str, int]) -> None:
    fmt = named_format(*key)
    got = [
        {f.name: getattr(lf, f.name) for f in dataclasses.fields(LevelFormat) if f.name != "letter"}
        for lf in fmt.level_formats
    ]
    assert got == TACO[key]
    assert [fmt.level(k) for k in range(fmt.ndim)] == list(fmt.level_formats)


def _example(fmt: Format, shape: tuple[int, ...], seed: int = 0) -> SparseArray:
    """A random array whose top coordinates repeat (so a ``q`` level shows a repeat)."""
    rng = np.random.default_rng(seed)
    n = 40
    coords = np.array([rng.integers(0, s, n) for s in shape])
    coords[:, 1] = coords[:, 0]  # two entries share every coordinate but the last
    coords[-1, 1] = (coords[-1, 0] + 1) % shape[-1]
    return SparseArray.from_coo(coords, rng.standard_normal(n), shape, fmt)


@pytest.mark.parametrize("key", list(TACO), ids=lambda k: f"{k[0]}{k[1]}")
def test_capabilities_describe_the_stored_arrays(key: tuple[str, int]) -> None:
    """Per level: the arrays it holds, how its positions follow from its parent's, and
    its coordinates' order, read off a stored array (not off the format)."""
    fmt = named_format(*key)
    shape = (5, 6, 7, 4)[: fmt.ndim]
    arr = _example(fmt, shape)
    coords = arr.coordinates()
    parent = np.zeros(arr.nnz, np.int64)  # each entry's position one level up
    nparent = 1
    for k, lv in enumerate(arr.levels):
        lf = lv.format
        assert lv.kind == lf.letter
        assert lf is fmt.level(k)
        assert (lv.pos is not None) == lf.stores_pos
        assert (lv.crd is not None) == lf.stores_crd
        assert lf.arrays == ("pos",) * lf.stores_pos + ("crd",) * lf.stores_crd
        here = arr.fiber_of_position(k + 1)  # each entry's position at this level
        c = coords[fmt.order[k]]
        if lf.locate:  # found without a search: parent * size + coordinate
            assert np.array_equal(here, parent * lv.size + c)
        if lf.full:  # every coordinate under every parent position (counted below)
            npos = nparent * lv.size
        else:
            npos = len(lv.crd)
            assert np.array_equal(lv.crd[here], c)
        if lf.branchless:  # one child per parent position, at the same position
            assert len(lv.crd) == nparent
            assert np.array_equal(here, parent)
        if lf.stores_pos:  # a parent's children are the positions pos[p]..pos[p+1]-1
            assert np.all((lv.pos[parent] <= here) & (here < lv.pos[parent + 1]))
            same = np.repeat(np.arange(nparent), np.diff(lv.pos))
            steps = np.diff(lv.crd)[same[1:] == same[:-1]]
            assert np.all(steps >= 0) == lf.ordered
            if lf.unique:
                assert np.all(steps > 0)
            else:  # the example repeats a coordinate here
                assert np.any(steps == 0)
        parent, nparent = here, npos
    assert len(arr.vals) == nparent  # the last level's positions, a full one's included


def test_uniqueness_is_checked_where_a_level_claims_it() -> None:
    """A level that is unique refuses a repeated coordinate within a parent; a ``q`` level
    with singletons below takes one (its entries differ below)."""
    with pytest.raises(InputError, match="strictly increasing"):
        SparseArray((4,), "coo", [[0, 2]], [[1, 1]], [1.0, 2.0])  # 1-D COO: unique
    with pytest.raises(InputError, match="strictly increasing"):
        SparseArray((2, 4), "csr", [None, [0, 2, 2]], [None, [1, 1]], [1.0, 2.0])
    a = SparseArray((4, 4), "coo", [[0, 2], None], [[1, 1], [0, 3]], [1.0, 2.0])
    assert a.to_dense()[1].tolist() == [1.0, 0.0, 0.0, 2.0]


def test_level_types_read_back_as_the_same_letters() -> None:
    for levels in ("d", "dc", "cc", "q", "qs", "qss", "qsss", "dcc", "ddc", "cdc"):
        fmt = Format(levels)
        types = [lf.level_type for lf in fmt.level_formats]
        back = [level_letter(t.split("(")[0], "(nonunique)" not in t) for t in types]
        assert "".join(back) == levels, types
    assert [lf.level_type for lf in Format("qss").level_formats] == [
        "compressed(nonunique)",
        "singleton(nonunique)",
        "singleton",
    ]
    with pytest.raises(KeyError):
        level_letter("hashed")


def test_a_level_takes_its_level_format_not_a_letter() -> None:
    with pytest.raises(InputError, match="LevelFormat"):
        Level("d", 3)
    assert Level(Format("dc").level(0), 3).kind == "d"


def test_stored_levels_keep_their_formats_through_pickling_and_cuts() -> None:
    arr = _example(named_format("coo", 3), (5, 6, 7))
    back = pickle.loads(pickle.dumps(arr))
    assert [lv.format for lv in back.levels] == list(arr.format.level_formats)
    piece = arr.piece(3, 20)
    assert [lv.format for lv in piece.levels] == list(arr.format.level_formats)
    rows = named_format("csr", 2)
    csr = _example(rows, (6, 5)).rows_piece(1, 4)
    assert [lv.format for lv in csr.levels] == list(rows.level_formats)
