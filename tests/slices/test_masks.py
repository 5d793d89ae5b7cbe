"""Boolean masks and integer arrays as numpy's, without bringing the array to the driver:
assignment under a mask is an element-wise map, a masked read stays in the array's shape
until a reduction or a read, integer gathers and scatters fetch only what they touch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import distal as dl
from distal.arrays.masks import Masked
from distal.arrays.slicing import IndexOutOfRange
from distal.errors import InputError, NotSupportedYet, ShapeError


@pytest.mark.parametrize("p", [1, 2, 4])
def test_assignment_under_a_mask(p: int, rng: np.random.Generator) -> None:
    a = rng.standard_normal((7, 5))
    want = a.copy()
    sess = dl.Session("local", machine=p, check_stats=True)
    x = sess.asarray(a)
    alias = x
    x[x > 0] = 0
    want[want > 0] = 0
    m = x < -0.5
    x[m] = x[m] * 2.0 + 1.0
    wm = want < -0.5
    want[wm] = want[wm] * 2.0 + 1.0
    x[m] = sess.asarray(np.float64(-9.0))  # a 0-d array
    want[wm] = -9.0
    np.testing.assert_array_equal(alias.get(), want)
    # a numpy mask is placed like any operand
    x[want < -1] = 3.0
    want[want < -1] = 3.0
    np.testing.assert_array_equal(alias.get(), want)
    assert not sess.stats_differ


def test_masked_reads_reduce_and_read(rng: np.random.Generator) -> None:
    a = rng.standard_normal(50)
    sess = dl.Session("local", machine=3)
    x = sess.asarray(a)
    sel = x[x > 0.25]
    assert isinstance(sel, Masked)
    w = a[a > 0.25]
    assert len(sel) == len(w)
    assert sel.shape == w.shape
    assert float(sel.sum()) == pytest.approx(w.sum(), rel=1e-14)
    assert float(sel.mean()) == pytest.approx(w.mean(), rel=1e-14)
    np.testing.assert_array_equal(np.asarray(sel), w)
    np.testing.assert_array_equal((abs(-sel) * 2.0).get(), np.abs(-w) * 2.0)
    with pytest.raises(NotSupportedYet, match=r"x\[mask\].cumsum"):
        sel.cumsum()
    with pytest.raises(NotSupportedYet, match="under two masks"):
        sel + x[x < 0]
    with pytest.raises(NotSupportedYet, match="masked read and an array"):
        sel + x


@pytest.mark.parametrize("p", [1, 2, 3])
def test_integer_gathers_and_scatters(p: int, rng: np.random.Generator) -> None:
    a = rng.standard_normal(11)
    want = a.copy()
    sess = dl.Session("local", machine=p, check_stats=True)
    x = sess.asarray(a)
    idx = np.array([3, 1, 10, -1, 3, 0])
    np.testing.assert_array_equal(x[idx].get(), a[idx])
    np.testing.assert_array_equal(x[[2, 2, 5]].get(), a[[2, 2, 5]])
    vals = np.arange(6.0) + 100
    x[idx] = vals  # repeated indices: the last wins, as numpy's
    want[idx] = vals
    np.testing.assert_array_equal(x.get(), want)
    x[[0, 4]] = -1.0
    want[[0, 4]] = -1.0
    x[np.array([5])] = np.array([7.0])
    want[np.array([5])] = np.array([7.0])
    np.testing.assert_array_equal(x.get(), want)
    nm = want > 0
    np.testing.assert_array_equal(x[nm].get(), want[nm])
    x[nm] = np.arange(nm.sum()) * 0.5
    want[nm] = np.arange(nm.sum()) * 0.5
    np.testing.assert_array_equal(x.get(), want)
    assert not sess.stats_differ
    with pytest.raises(IndexOutOfRange, match="index 11 is out of bounds"):
        x[[0, 11]]
    with pytest.raises(ShapeError, match="could not be broadcast"):
        x[[0, 1]] = np.ones(3)
    with pytest.raises(InputError, match="cannot write float64"):
        sess.asarray(np.arange(4))[[1]] = 0.5
    with pytest.raises(NotSupportedYet, match="integer array index of a 2-D"):
        sess.asarray(np.ones((3, 3)))[[0, 1]]


def test_masks_gather_nothing_on_a_pool(dask_client: Any, rng: np.random.Generator) -> None:
    a = rng.standard_normal(40)
    sess = dl.Session("dask", client=dask_client, machine=2)
    x = sess.asarray(a)
    x[x > 0] = 0.0
    x[[1, 2]] = np.array([5.0, 6.0])
    total = float(x[x < 1.0].sum())
    want = a.copy()
    want[want > 0] = 0.0
    want[[1, 2]] = [5.0, 6.0]
    assert total == pytest.approx(want[want < 1.0].sum(), rel=1e-14)
    assert sess.driver_words == 1  # the one number read
