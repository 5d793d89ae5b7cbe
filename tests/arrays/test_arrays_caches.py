"""What the arrays front remembers between operations (result dtypes, map functions,
kernels by key) never mixes up operations that only look alike: ``2 == 2.0 == True`` and
``0.0 == -0.0`` in Python, but numpy gives them different results."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal.errors import InputError


@pytest.fixture
def sess() -> dl.Session:
    return dl.Session("local", machine=2, progress=False)


def test_zero_and_negative_zero_keep_their_signs(sess: dl.Session) -> None:
    v = np.array([1.0, -2.0, 3.0, 0.5])
    x = sess.asarray(v)

    def make(a, c):  # a map (numpy's order): numpy's signs of zero
        return ((a + 1.0) * a - a) * c

    pos, neg = make(x, 0.0).get(), make(x, -0.0).get()
    np.testing.assert_array_equal(np.signbit(pos), np.signbit(make(v, 0.0)))
    np.testing.assert_array_equal(np.signbit(neg), np.signbit(make(v, -0.0)))
    assert not np.array_equal(np.signbit(pos), np.signbit(neg))
    # a kernel adds its terms into a zeroed block, so its zeros are +0.0; the values agree
    np.testing.assert_array_equal((x * -0.0).get(), v * -0.0)


def test_integer_float_and_bool_numbers_are_told_apart(sess: dl.Session) -> None:
    v = np.arange(6, dtype=np.int64)
    x = sess.asarray(v)
    for c in (2, 2.0, True):
        for make in (lambda a, c=c: a * c, lambda a, c=c: ((a + c) * a - a) * c):
            got, want = make(x), make(v)
            assert got.dtype == want.dtype, c
            np.testing.assert_array_equal(got.get(), want)


def test_a_number_out_of_an_integer_dtypes_range_is_refused_every_time(sess: dl.Session) -> None:
    x = sess.asarray(np.arange(4, dtype=np.int8))
    np.testing.assert_array_equal((x + 3).get(), np.arange(4, dtype=np.int8) + 3)
    for _ in range(2):  # a remembered int8 + int does not let 300 through
        with pytest.raises(InputError, match="out of bounds for int8"):
            x + 300


def test_the_same_map_with_new_values_reads_the_new_values(sess: dl.Session) -> None:
    rng = np.random.default_rng(0)
    for _ in range(3):
        v, w = rng.standard_normal(10), rng.standard_normal(10)
        x, y = sess.asarray(v), sess.asarray(w)
        np.testing.assert_allclose(((x - y) * x + 1.5).get(), (v - w) * v + 1.5, rtol=1e-12)


def _exprs(x: object, y: object, s: object) -> list:
    """Element-wise trees over two vectors and a 0-d value: maps and kernels, shared
    subtrees, leaves met first on the right (renumbered), numbers of every kind."""
    u = x * 2.0 + 1.0
    return [
        (((x * 2.0 + 1.0) * x - x) * 0.5) + x,
        x * (y + (x * 3.0)),
        (y - x) * (x - y),
        u * u - u,
        dl.sqrt(dl.abs(x * y)) + s * x,
        dl.maximum(x, y) * 2 - dl.where(x < y, x, y),
        (x + y) * s,
        x * s + y * 2,
        -x + y / 3.0,
        x / y - (x @ y) * x,
        ((x * 2) * True) + 1,
    ]


def test_a_group_recorded_as_made_is_the_one_its_walk_finds(sess: dl.Session) -> None:
    from distal.arrays import graph
    from distal.arrays.lower import map_signature

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(8), rng.standard_normal(8) + 3.0
    x, y = sess.asarray(a), sess.asarray(b)
    s = sess.asarray(np.float64(0.5))
    program = x.program
    for got in _exprs(x, y, s):
        root = got.node
        fused = root.fused
        assert fused is not None
        assert fused[4] == graph.values_made()
        expr, leaves = map_signature(root, program._map_leaf)
        assert fused[2] == program._is_map(root)
        assert fused[0] == expr
        assert list(fused[1]) == leaves
    for got, want in zip(_exprs(x, y, s), _exprs(a, b, np.float64(0.5)), strict=True):
        np.testing.assert_allclose(got.get(), want, rtol=1e-12)


def test_a_group_whose_inner_node_became_a_value_reads_that_value(sess: dl.Session) -> None:
    v = np.arange(1.0, 9.0)
    x = sess.asarray(v)
    y = x * 2.0 + 1.0  # held: computed first, at the flush, in creation order
    z = (y - x) * x  # recorded with y inside it; z reads y's value, not y's recipe
    maps, kernels = sess.maps_run, sess.kernels_run
    sess["w"] = z  # recorded: computed at the next flush
    assert (sess.maps_run - maps, sess.kernels_run - kernels) == (0, 0)
    sess.flush()
    # y and z one fused set (a map): y computed once, z reading it back
    assert (sess.maps_run - maps, sess.kernels_run - kernels) == (1, 1)
    np.testing.assert_array_equal(sess.get("w"), ((v * 2.0 + 1.0) - v) * v)
    np.testing.assert_array_equal(y.get(), v * 2.0 + 1.0)


def test_a_group_reads_the_value_its_inner_node_became_outside_a_fused_set(
    sess: dl.Session,
) -> None:
    """As above, with a node of another shape made between y and z: they are not one
    fused set, so y is a kernel of its own and z's recorded group (y inside it) is looked
    up after y became a value: it must read that value."""
    v = np.arange(1.0, 9.0)
    x = sess.asarray(v)
    y = x * 2.0 + 1.0
    m = sess.asarray(np.ones((2, 2))) * 3.0  # another shape: ends the set y would start
    z = (y - x) * x
    maps, kernels = sess.maps_run, sess.kernels_run
    sess["w"] = z
    sess.flush()
    assert (sess.maps_run - maps, sess.kernels_run - kernels) == (1, 3)  # y, m kernels; z a map
    np.testing.assert_array_equal(sess.get("w"), ((v * 2.0 + 1.0) - v) * v)
    np.testing.assert_array_equal(m.get(), np.full((2, 2), 3.0))
