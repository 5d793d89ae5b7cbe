"""``distal.numpy`` as an array API namespace: hypothesis's own array-API strategies
(``hypothesis.extra.array_api``) build arrays through it, and a few of the standard's
functions are checked against numpy on them. The standard's full test suite
(data-apis/array-api-tests) is run as docs/arrays.md says; this is the small subset CI runs."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distal as dl
import distal.numpy as dnp

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from hypothesis.extra.array_api import make_strategies_namespace

    xps = make_strategies_namespace(dnp)

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _session() -> Any:
    with dl.Session("local", machine=2) as s:
        yield s


def test_namespace_basics() -> None:
    assert dnp.__array_api_version__ == "2024.12"
    x = dnp.asarray([1.0, 2.0])
    assert x.__array_namespace__() is dnp
    info = dnp.__array_namespace_info__()
    assert info.default_dtypes()["real floating"] == np.float64
    assert isinstance(dnp.finfo(dnp.float32).eps, float)
    assert dnp.isdtype(dnp.int8, "signed integer")


@pytest.mark.slow
@SETTINGS
@given(x=xps.arrays(dtype=xps.floating_dtypes(), shape=xps.array_shapes(min_dims=1, max_dims=3)))
def test_elementwise_and_reductions(x: Any) -> None:
    a = np.asarray(x)
    np.testing.assert_array_equal(np.asarray(dnp.abs(x)), np.abs(a))
    np.testing.assert_array_equal(np.asarray(dnp.isnan(x)), np.isnan(a))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.asarray(dnp.max(x, axis=0)), np.max(a, axis=0))
        np.testing.assert_array_equal(np.asarray(dnp.argmin(x, axis=-1)), np.argmin(a, axis=-1))
    assert dnp.sum(x, axis=0).shape == a.sum(axis=0).shape


@pytest.mark.slow
@SETTINGS
@given(
    x=xps.arrays(dtype=xps.integer_dtypes(), shape=xps.array_shapes(min_dims=1, max_dims=2)),
    data=st.data(),
)
def test_manipulation(x: Any, data: Any) -> None:
    a = np.asarray(x)
    np.testing.assert_array_equal(np.asarray(dnp.flip(x, axis=0)), np.flip(a, axis=0))
    np.testing.assert_array_equal(np.asarray(dnp.reshape(x, (-1,))), a.reshape(-1))
    np.testing.assert_array_equal(np.asarray(dnp.concat([x, x], axis=0)), np.concatenate([a, a]))
    np.testing.assert_array_equal(np.asarray(dnp.sort(x, axis=-1)), np.sort(a, axis=-1))
    k = data.draw(st.integers(-3, 3))
    np.testing.assert_array_equal(np.asarray(dnp.roll(x, k, axis=0)), np.roll(a, k, axis=0))
