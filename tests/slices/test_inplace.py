"""In place means in place: ``+=`` and friends, slice assignment and views update the
array every holder of it sees; what was recorded before a write keeps the old values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distal as dl
from distal.arrays import views
from distal.errors import InputError, ShapeError


@pytest.fixture
def sess() -> dl.Session:
    return dl.Session("local", machine=3, check_stats=True)


def step(x1: dl.DArray, A: dl.DArray, y1: dl.DArray) -> None:
    """The issue's program: an update of the caller's array inside a function."""
    x1 += A @ y1


def test_update_is_seen_by_every_holder(sess: dl.Session, rng: np.random.Generator) -> None:
    a, m, y = rng.standard_normal(5), rng.standard_normal((5, 5)), rng.standard_normal(5)
    x = sess.asarray(a)
    other = x  # a second handle on the same array
    step(x, sess.asarray(m), sess.asarray(y))
    np.testing.assert_allclose(other.get(), a + m @ y, rtol=1e-12)
    for op, f in [("-=", np.subtract), ("*=", np.multiply), ("/=", np.true_divide)]:
        want = f(other.get(), 3.0)
        if op == "-=":
            x -= 3.0
        elif op == "*=":
            x *= 3.0
        else:
            x /= 3.0
        np.testing.assert_allclose(other.get(), want, rtol=1e-15)
    x[...] = 4.0
    np.testing.assert_array_equal(other.get(), np.full(5, 4.0))
    assert not sess.stats_differ


def test_views_write_through_both_ways(sess: dl.Session, rng: np.random.Generator) -> None:
    a = rng.standard_normal((6, 4))
    want = a.copy()
    u = sess.asarray(a)
    inner, w_inner = u[1:-1, 1:], want[1:-1, 1:]
    row, w_row = inner[::-1][0], w_inner[::-1][0]  # a view of a view: a view of u
    row *= 10.0
    w_row *= 10.0
    np.testing.assert_array_equal(u.get(), want)
    u[4, 3] = -1.0  # a write to the base is seen through the views
    want[4, 3] = -1.0
    np.testing.assert_array_equal(row.get(), w_row)
    np.testing.assert_array_equal(inner.get(), w_inner)
    inner[:, 0] = inner[:, 1] + inner[:, 2]
    w_inner[:, 0] = w_inner[:, 1] + w_inner[:, 2]
    np.testing.assert_array_equal(u.get(), want)
    col = u[:, None, 2]  # a new axis: a view of shape (6, 1)
    col += 1.0
    want[:, None, 2] += 1.0
    np.testing.assert_array_equal(u.get(), want)
    assert col.shape == (6, 1)


def test_deferred_reads_see_the_old_values(sess: dl.Session, rng: np.random.Generator) -> None:
    a = rng.standard_normal(8)
    x = sess.asarray(a)
    before_sum = (x * x).sum()  # recorded, not run
    head = x[:3] * 1.0
    view = x[2:5]  # a view is not a snapshot: it follows x
    x[1:4] = 0.0
    x += 1.0
    want = a.copy()
    want[1:4] = 0.0
    want += 1.0
    assert float(before_sum) == pytest.approx(float(a @ a), rel=1e-14)
    np.testing.assert_array_equal(head.get(), a[:3])
    np.testing.assert_array_equal(view.get(), want[2:5])
    np.testing.assert_array_equal(x.get(), want)


def test_inplace_dtype_and_shape_rules(sess: dl.Session) -> None:
    i = sess.asarray(np.arange(4))
    with pytest.raises(InputError, match="cannot cast the result from float64 to int64"):
        i += 0.5
    with pytest.raises(InputError, match="cannot cast"):
        i /= 2
    i32 = sess.asarray(np.arange(4, dtype=np.int32))
    i32 += np.arange(4, dtype=np.int64)  # int64 -> int32 is same_kind: cast, as numpy's
    assert i32.dtype == np.int32
    assert i32.get().tolist() == [0, 2, 4, 6]
    v = sess.asarray(np.ones(3))
    with pytest.raises(ShapeError, match="non-broadcastable output operand with shape"):
        v += np.ones((2, 3))
    v += np.arange(3.0)[None, :][0]  # broadcasting the other operand is fine
    assert v.get().tolist() == [1.0, 2.0, 3.0]


def test_update_for_out_arguments(sess: dl.Session) -> None:
    """``views.update(c, node)`` is what an ``out=`` does: ``c`` holds the result, cast and
    broadcast as numpy's ``out=`` (here a float32 ``c`` taking a float64 sum)."""
    a = sess.asarray(np.arange(6.0).reshape(2, 3))
    c = sess.asarray(np.zeros((2, 3), dtype=np.float32))
    alias = c
    views.update(c, (a + 1.0).node)
    assert alias.dtype == np.float32
    np.testing.assert_array_equal(alias.get(), np.arange(6.0).reshape(2, 3) + 1.0)
    views.update(c[1], (a[0] * 2.0).node)  # into a view: its base's row
    np.testing.assert_array_equal(alias.get()[1], np.arange(3.0) * 2.0)


@st.composite
def programs(draw: Any, n: int = 12) -> list[tuple]:
    """A few writes and deferred reads of a vector: shifted assignments between slices of
    one length (steps 1 and -1), in-place updates of slices, reads recorded in between."""

    def window(length: int) -> slice:
        start = draw(st.integers(0, n - length))
        if draw(st.booleans()):
            return slice(start, start + length)
        stop = start - 1
        return slice(start + length - 1, None if stop < 0 else stop, -1)

    out = []
    for _ in range(draw(st.integers(1, 6))):
        length = draw(st.integers(1, n))
        kind = draw(st.sampled_from(["shift", "iadd", "read"]))
        out.append((kind, window(length), window(length), draw(st.integers(-3, 3)) * 0.5))
    return out


@settings(max_examples=30)
@given(prog=programs(), p=st.integers(1, 4))
def test_reads_and_writes_keep_numpys_order(prog: list[tuple], p: int) -> None:
    a = np.arange(12.0) * 1.25 - 3.0
    sess = dl.Session("local", machine=p)
    x = sess.asarray(a)
    reads, wants = [], []
    for kind, s1, s2, c in prog:
        if kind == "shift":
            x[s1] = x[s2] * c + 1.0
            a[s1] = a[s2] * c + 1.0
        elif kind == "iadd":
            view = x[s1]
            view += c
            a[s1] += c
        else:
            reads.append(x[s1] * 1.0)  # deferred: computed at the end, from these values
            wants.append(a[s1] * 1.0)
    np.testing.assert_array_equal(x.get(), a)
    for got, want in zip(reads, wants, strict=True):
        np.testing.assert_array_equal(got.get(), want)
