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
