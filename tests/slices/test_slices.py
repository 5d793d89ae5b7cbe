"""Basic slices of DArrays read and assigned as numpy's, on 1 to 4 processors (ragged
blocks included): integers, slices of any step (negative ones too), ``None`` and ``...``;
assignments with steps 1 and -1, broadcasting, and the refusals, by name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distal as dl
from distal.arrays.slicing import IndexOutOfRange
from distal.errors import InputError, NotSupportedYet, ShapeError

SESSIONS: dict[int, dl.Session] = {}


def session(p: int) -> dl.Session:
    """One local session per processor count for the module (kernels compile once)."""
    if p not in SESSIONS:
        SESSIONS[p] = dl.Session("local", machine=p, check_stats=True)
    return SESSIONS[p]


def _entry(n: int, unit: bool) -> Any:
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    steps = st.sampled_from([None, 1, -1] if unit else [None, 1, 2, 3, -1, -2])
    whole = st.builds(slice, bound, bound, steps)
    return st.one_of(st.integers(-n, n - 1), whole, whole)


@st.composite
def keys(draw: Any, shape: tuple[int, ...], unit: bool = False) -> Any:
    """A basic index of ``shape``: an entry per axis (some left off at the end), maybe an
    ellipsis instead of some, and maybe new axes."""
    used = draw(st.integers(0, len(shape)))
    entries: list[Any] = [draw(_entry(n, unit)) for n in shape[:used]]
    if used < len(shape) and draw(st.booleans()):
        rest = len(shape) - used
        entries += [Ellipsis, *(draw(_entry(n, unit)) for n in shape[len(shape) - rest + 1 :])]
    for _ in range(draw(st.integers(0, 2))):
        entries.insert(draw(st.integers(0, len(entries))), None)
    return tuple(entries)


SHAPES = [(7,), (9, 6), (5, 4, 3)]


@settings(max_examples=40)
@given(data=st.data(), p=st.integers(1, 4), s=st.sampled_from(SHAPES))
def test_reads_match_numpy(data: Any, p: int, s: tuple[int, ...]) -> None:
    a = np.arange(np.prod(s), dtype=np.float64).reshape(s) * 1.5 - 7.0
    key = data.draw(keys(s))
    want = a[key]
    got = session(p).asarray(a)[key]
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


@settings(max_examples=40)
@given(data=st.data(), p=st.integers(1, 4), s=st.sampled_from(SHAPES))
def test_assignments_match_numpy(data: Any, p: int, s: tuple[int, ...]) -> None:
    a = np.arange(np.prod(s), dtype=np.float64).reshape(s)
    key = data.draw(keys(s, unit=True))
    region = a[key].shape
    form = data.draw(st.sampled_from(["array", "scalar", "row", "darray"]))
    value: Any
    if form == "scalar":
        value = -3.25
    elif form == "row":
        value = -np.arange(region[-1], dtype=np.float64) if region else 2.0
    else:
        value = -np.arange(np.prod(region), dtype=np.float64).reshape(region) - 0.5
    sess = session(p)
    d = sess.asarray(a)
    if form == "darray":
        value = sess.asarray(value) if region else value
    want = a.copy()
    want[key] = np.asarray(value)
    d[key] = value
    np.testing.assert_array_equal(np.asarray(d), want)
    assert not sess.stats_differ


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_stencils_and_shifted_assignment(p: int, rng: np.random.Generator) -> None:
    a = rng.standard_normal((11, 6))
    sess = session(p)
    u = sess.asarray(a)
    before = sess.kernels_run
    u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    sess.flush()
    assert sess.kernels_run == before + 1  # the sweep is one kernel
    want = a.copy()
    want[1:-1, 1:-1] = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
    np.testing.assert_array_equal(u.get(), want)  # numpy's order: numpy's bits
    # an element-wise chain over slices is one kernel too (a difference, then a product)
    x = sess.asarray(a[:, 0])
    before = sess.kernels_run
    g = (x[2:] - x[:-2]) * 0.5 - x[1:-1]
    np.testing.assert_array_equal(g.get(), (a[2:, 0] - a[:-2, 0]) * 0.5 - a[1:-1, 0])
    assert sess.kernels_run == before + 1
    # reversed and shifted writes read the old values (numpy evaluates the right side first)
    x[1:] = x[:-1] * 1.0
    x[::-1] = x[:] + 0.0
    want = a[:, 0].copy()
    want[1:] = want[:-1] * 1.0
    want[::-1] = want[:] + 0.0
    np.testing.assert_array_equal(x.get(), want)
    # a map over slices (a function, a division by an array): the slices are made values
    y = dl.sqrt(dl.abs(x[1:] / (x[:-1] + 10.0)))
    np.testing.assert_allclose(y.get(), np.sqrt(np.abs(want[1:] / (want[:-1] + 10.0))))
    assert sess.moved_words == 0 or p > 1


@pytest.mark.parametrize("p", [1, 3])
def test_strided_assignment_of_a_vector(p: int) -> None:
    """Steps of 2 or more: a vector's are a scatter (its views' too); a matrix's refused."""
    want = np.arange(10.0)
    x = session(p).asarray(want)
    x[::3] = -1.0
    want[::3] = -1.0
    x[7:0:-2] = np.array([1.0, 2.0, 3.0, 4.0])
    want[7:0:-2] = [1.0, 2.0, 3.0, 4.0]
    v, w = x[1:], want[1:]
    v[::2][:4] = v[1::2] * 10.0
    w[::2][:4] = w[1::2] * 10.0
    np.testing.assert_array_equal(x.get(), want)


def test_integer_reads_are_values_and_iteration(rng: np.random.Generator) -> None:
    a = rng.standard_normal((4, 3))
    sess = session(2)
    d = sess.asarray(a)
    s = d[2, 1]
    d[2, 1] = 100.0
    assert float(s) == a[2, 1]  # numpy's scalar: taken when read, not a view
    rows = [r.get() for r in d]
    want = a.copy()
    want[2, 1] = 100.0
    np.testing.assert_array_equal(np.stack(rows), want)
    assert float(d[-1, -1]) == a[-1, -1]


def test_slice_errors_name_the_culprit() -> None:
    sess = session(2)
    d = sess.asarray(np.zeros((4, 3)))
    with pytest.raises(IndexOutOfRange, match="index 4 is out of bounds for axis 0 with size 4"):
        d[4]
    with pytest.raises(IndexError, match="too many indices"):
        d[0, 0, 0]
    with pytest.raises(InputError, match="single ellipsis"):
        d[..., ...]
    with pytest.raises(NotSupportedYet, match="step 2"):
        d[::2] = 1.0
    with pytest.raises(ShapeError, match=r"could not broadcast input array from shape \(2,\)"):
        d[1:3, :] = np.ones(2)
    with pytest.raises(InputError, match="cannot write float64 values into a int64"):
        sess.asarray(np.arange(5))[1:3] = np.array([0.5, 1.5])
    with pytest.raises(NotSupportedYet, match="integer array index of a 2-D"):
        d[[0, 2]]
    with pytest.raises(NotSupportedYet, match="indexing a DArray with str"):
        d["a"]
    with pytest.raises(NotSupportedYet, match="boolean"):
        d[True]
    # an integer Python float into an integer array is exact: accepted, as numpy takes it
    i = sess.asarray(np.arange(5))
    i[1] = 7.0
    assert i.get().tolist() == [0, 7, 2, 3, 4]
