"""numpy's own functions and ufuncs on DArrays (NEP 18 / NEP 13): run distributed and
return DArrays, or refuse by name -- never a silent gather."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
import distal.numpy as dnp


@pytest.fixture
def sess() -> dl.Session:
    with dl.Session("local", machine=2) as s:
        yield s


def test_numpy_functions_return_darrays(sess: dl.Session) -> None:
    a = np.arange(12.0).reshape(4, 3)
    x = dnp.asarray(a)
    cases = {
        "mean axis 0": (np.mean(x, axis=0), a.mean(axis=0)),
        "dot": (np.dot(x, x.T), a @ a.T),
        "concatenate": (np.concatenate([x, x]), np.concatenate([a, a])),
        "where": (np.where(x > 3, x, -x), np.where(a > 3, a, -a)),
        "einsum": (np.einsum("ij->j", x), a.sum(0)),
        "transpose": (np.transpose(x), a.T),
        "reshape": (np.reshape(x, (3, 4)), a.reshape(3, 4)),
        "outer": (np.outer(x[0], x[1]), np.outer(a[0], a[1])),
        "matmul": (np.matmul(x, x.T), a @ a.T),
        "sum": (np.sum(x, axis=1), a.sum(axis=1)),
        "max": (np.max(x, axis=0), a.max(axis=0)),
        "std": (np.std(x), a.std()),
        "linalg.norm": (np.linalg.norm(x, axis=1), np.linalg.norm(a, axis=1)),
        "tile": (np.tile(x, 2), np.tile(a, 2)),
        "cumsum": (np.cumsum(x, axis=0), np.cumsum(a, axis=0)),
        "clip": (np.clip(x, 2, 8), np.clip(a, 2, 8)),
        "stack": (np.stack([x, x]), np.stack([a, a])),
        "triu": (np.triu(x), np.triu(a)),
        "sort": (np.sort(x, axis=0), np.sort(a, axis=0)),
    }
    for what, (got, want) in cases.items():
        assert isinstance(got, dl.DArray), what
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, err_msg=what)


def test_ufunc_methods(sess: dl.Session) -> None:
    a = np.arange(1.0, 7.0).reshape(2, 3)
    x = dnp.asarray(a)
    np.testing.assert_allclose(np.asarray(np.add.reduce(x, axis=1)), np.add.reduce(a, axis=1))
    np.testing.assert_allclose(np.asarray(np.maximum.reduce(x)), np.maximum.reduce(a))
    np.testing.assert_allclose(np.asarray(np.multiply.accumulate(x)), np.multiply.accumulate(a))
    np.testing.assert_allclose(
        np.asarray(np.subtract.outer(x[0], x[1])), np.subtract.outer(a[0], a[1])
    )


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda x: np.interp(x, x[0], x[1]), r"numpy\.interp"),
        (lambda x: np.linalg.solve(x, x), r"numpy\.linalg\.solve"),
        (lambda x: np.linalg.cholesky(x), r"numpy\.linalg\.cholesky"),
        (lambda x: np.linalg.svd(x), r"numpy\.linalg\.svd"),
        (lambda x: np.linalg.qr(x), r"numpy\.linalg\.qr"),
        (lambda x: np.polyfit(x[0], x[1], 1), r"numpy\.polyfit"),
        (lambda x: np.kron(x, x), r"kron"),
        (lambda x: np.frexp(x), r"numpy\.frexp"),
        (lambda x: np.add.at(x, [0], 1.0), r"numpy\.add\.at"),
        (lambda x: np.percentile(x, 50), r"numpy\.percentile"),
        (lambda x: np.histogram(x), r"numpy\.histogram"),
    ],
)
def test_what_is_not_supported_is_refused_by_name(sess: dl.Session, call, name: str) -> None:
    x = dnp.asarray(np.eye(3) + 1.0)
    before = sess.driver_words
    with pytest.raises(dl.NotSupportedYet, match=name):
        call(x)
    assert sess.driver_words == before


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda x: np.var(x, where=np.eye(3, dtype=bool)), r"var with \['where'\]"),
        (lambda x: np.std(x, where=np.eye(3, dtype=bool)), r"std with \['where'\]"),
        (lambda x: np.sum(x, initial=5.0), r"sum with \['initial'\]"),
        (lambda x: dnp.sum(x, keepdim=True), r"sum with \['keepdim'\]"),
        (lambda x: np.mean(x, where=np.eye(3, dtype=bool)), r"mean with \['where'\]"),
        (lambda x: np.clip(x, 0.0, 1.5, dtype=np.float32), r"clip with \['dtype'\]"),
        (lambda x: np.exp(x, where=np.eye(3, dtype=bool)), r"exp with \['where'\]"),
        (lambda x: np.matmul(x, x, dtype=np.float32), r"matmul with \['dtype'\]"),
        (lambda x: x.sum(keepdim=True), r"sum with \['keepdim'\]"),
        (lambda x: x.max(where=np.eye(3, dtype=bool)), r"max with \['where'\]"),
    ],
)
def test_a_keyword_that_would_change_the_answer_is_refused(
    sess: dl.Session, call, name: str
) -> None:
    """numpy keywords distal.numpy does not implement are refused by name, never ignored
    (ignoring them would be a silent wrong answer); at numpy's defaults they change nothing."""
    a = np.eye(3) + 1.0
    x = dnp.asarray(a)
    with pytest.raises(dl.NotSupportedYet, match=name):
        call(x)
    assert float(np.var(x, where=True)) == np.var(a)
    assert float(np.sum(x, initial=None)) == np.sum(a)
    np.testing.assert_array_equal(
        np.asarray(np.clip(x, 0.0, 1.5, casting="same_kind")), np.clip(a, 0.0, 1.5)
    )


def test_reads_are_the_documented_ones(sess: dl.Session) -> None:
    x = dnp.asarray(np.arange(4.0))
    assert float(x.sum()) == 6.0
    np.testing.assert_array_equal(np.asarray(x), np.arange(4.0))
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert dnp.allclose(x, np.arange(4.0))


def test_current_session_and_default(sess: dl.Session) -> None:
    assert dnp.current_session() is sess
    x = dnp.zeros(3)
    assert x.session is sess
    with dl.Session("local", machine=3) as inner:
        assert dnp.ones(2).session is inner
        assert (x + 1.0).session is sess  # an operation follows its operands' session
    assert dnp.current_session() is sess


def test_a_device_other_than_the_current_session_is_refused(sess: dl.Session) -> None:
    """``device=`` another session would be ignored (the array made in the current one)."""
    assert dnp.zeros(3, device=sess).shape == dnp.zeros(3, device="cpu").shape == (3,)
    with dl.Session("local", machine=3) as other:
        pass
    with pytest.raises(dl.InputError, match="not the current session"):
        dnp.zeros(3, device=other)
    with pytest.raises(dl.InputError, match=r"a distal\.numpy device is a dl\.Session"):
        dnp.ones(3, device="gpu")


def test_a_reduction_method_and_function_take_numpy_s_positional_out(sess: dl.Session) -> None:
    """numpy's ``a.max(axis, out)`` and ``np.max(a, axis, out)``: the array after the axis
    is ``out`` (max, min, any, all take no dtype)."""
    a = np.arange(12.0).reshape(4, 3)
    x = dnp.asarray(a)
    o = dnp.zeros(3)
    assert x.max(0, o) is o
    np.testing.assert_array_equal(np.asarray(o), a.max(0))
    o = dnp.zeros(4)
    assert dnp.min(x, 1, o) is o
    np.testing.assert_array_equal(np.asarray(o), a.min(1))
