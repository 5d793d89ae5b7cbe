"""Arithmetic corners where the arrays front follows numpy's rules exactly: the absolute
value of a complex array is real, a division by a zero scalar gives numpy's inf and nan
(as a division by an array of zeros does), integer arithmetic wraps, and a complex 0-d
value refuses ``float()`` with a distal error."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import distal as dl


@pytest.fixture
def sess() -> dl.Session:
    return dl.Session("local", machine=2)


def test_abs_of_a_complex_array_is_real(sess: dl.Session) -> None:
    z = np.array([1 + 2j, 3 - 4j, 0.5j, -2.0, 0j])
    d = sess.asarray(z)
    for got in (abs(d), dl.abs(d), np.abs(d)):
        assert got.dtype == np.float64  # recorded with numpy's dtype
        out = np.asarray(got)
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, np.abs(z))
    # composed: |z| * 2 + 1 stays real
    np.testing.assert_array_equal(np.asarray(abs(d) * 2.0 + 1.0), np.abs(z) * 2.0 + 1.0)
    f = sess.asarray(z.astype(np.complex64))
    assert np.asarray(abs(f)).dtype == np.abs(z.astype(np.complex64)).dtype == np.float32


@pytest.mark.parametrize("zero", [0.0, -0.0, 0, np.float32(0.0), np.float64(0.0)])
def test_division_by_a_zero_scalar_is_numpys(sess: dl.Session, zero: object) -> None:
    x = np.array([1.0, -1.0, 0.0, 2.5])
    d = sess.asarray(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = x / zero
        got = np.asarray(d / zero)
        by_array = np.asarray(d / np.full(4, zero))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # inf, -inf, nan: equal as numpy's
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, by_array)  # one rule for scalar and array divisors


def test_integer_division_by_zero_and_a_zero_0d_divisor(sess: dl.Session) -> None:
    i = np.array([3, -3, 0], dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(np.asarray(sess.asarray(i) / 0), i / 0)
        zero = sess.asarray(np.array(0.0))
        x = np.array([1.0, -2.0, 0.0])
        np.testing.assert_array_equal(np.asarray(sess.asarray(x) / zero), x / 0.0)


def test_unsigned_subtraction_wraps_as_numpy(sess: dl.Session) -> None:
    u = np.array([1, 5, 0], dtype=np.uint64)
    d = sess.asarray(u)
    for f in [
        lambda a: a - 2,
        lambda a: 2 - a,
        lambda a: -a,
        lambda a: a - 2 + a * 3 - 7,
        lambda a: (a - 2).sum(),
    ]:
        out, want = np.asarray(f(d)), f(u)  # each read alone: a kernel of its own
        assert out.dtype == want.dtype == np.uint64
        np.testing.assert_array_equal(out, want)
    one = sess.asarray(np.array([1], dtype=np.uint64))  # the case
    np.testing.assert_array_equal(np.asarray(one - 2), np.array([1], dtype=np.uint64) - 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_array_equal(np.asarray(d - np.uint64(2)), u - np.uint64(2))
    # small signed integers: a sum of products expands into a coefficient out of range
    i8 = np.array([100, -7, 3], dtype=np.int8)
    e = sess.asarray(i8)
    with np.errstate(over="ignore"):
        want8 = i8 * 100 + i8 * 100
    np.testing.assert_array_equal(np.asarray(e * 100 + e * 100), want8)
    # numpy refuses -1 for a uint64 operand; so does the arrays front, on the line
    with pytest.raises(dl.InputError, match="out of bounds"):
        d * -1


def test_float_of_a_complex_value_is_a_distal_error(sess: dl.Session) -> None:
    c = sess.asarray(np.array(1 + 2j))
    with pytest.raises(dl.InputError, match=r"float\(\) of a complex value.*complex\(d\)"):
        float(c)
    with pytest.raises(dl.InputError, match=r"int\(\) of a complex value"):
        int(c)
    assert complex(c) == 1 + 2j
    assert float(sess.asarray(np.array(2.5))) == 2.5
