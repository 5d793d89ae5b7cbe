"""``distal.numpy``'s functions against numpy's, on 1 to 4 processors (ragged blocks:
extents that do not divide), several dtypes; element-wise chains and reductions fused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import distal as dl
import distal.numpy as dnp

PROCS = [1, 2, 3, 4]


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.fixture(params=PROCS, ids=lambda p: f"P{p}")
def sess(request: Any) -> Any:
    with dl.Session("local", machine=request.param) as s:
        yield s


def same(got: Any, want: Any, rtol: float = 1e-12) -> None:
    assert isinstance(got, dl.DArray), type(got)
    arr = np.asarray(got)
    assert arr.shape == np.shape(want), (arr.shape, np.shape(want))
    assert arr.dtype == np.asarray(want).dtype, (arr.dtype, np.asarray(want).dtype)
    np.testing.assert_allclose(arr, want, rtol=rtol, atol=1e-12)


UNARY = (
    "sin cos tan arcsin arccos arctan sinh cosh tanh arcsinh exp exp2 expm1 log log2 log10 "
    "log1p sqrt cbrt floor ceil trunc rint square abs absolute sign isnan isinf isfinite "
    "negative positive reciprocal logical_not signbit deg2rad rad2deg"
).split()


@pytest.mark.parametrize("name", UNARY)
def test_unary_functions_as_numpy(sess: Any, name: str) -> None:
    a = rand(7, 3, seed=1) * 0.9
    if name in ("log", "log2", "log10", "sqrt", "arccosh"):
        a = np.abs(a) + 0.5
    x = dnp.asarray(a)
    same(getattr(dnp, name)(x), getattr(np, name)(a))
    same(getattr(np, name)(x), getattr(np, name)(a))  # numpy's ufunc on a DArray


BINARY = (
    "add subtract multiply divide power maximum minimum fmax fmin arctan2 hypot mod "
    "floor_divide remainder copysign logaddexp equal not_equal less greater_equal "
    "logical_and logical_or logical_xor"
).split()


@pytest.mark.parametrize("name", BINARY)
def test_binary_functions_broadcast_as_numpy(sess: Any, name: str) -> None:
    a, b = np.abs(rand(6, 4, seed=2)) + 0.1, np.abs(rand(4, seed=3)) + 0.1
    x, y = dnp.asarray(a), dnp.asarray(b)
    same(getattr(dnp, name)(x, y), getattr(np, name)(a, b))
    same(getattr(dnp, name)(x, 2.0), getattr(np, name)(a, 2.0))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float32, np.bool_])
def test_integer_and_bitwise_functions_keep_numpys_dtypes(sess: Any, dtype: Any) -> None:
    a = (np.arange(-10, 14) % 7).astype(dtype).reshape(6, 4)
    b = (np.arange(24) % 5 + 1).astype(dtype).reshape(6, 4)
    x, y = dnp.asarray(a), dnp.asarray(b)
    same(x + y, a + b)
    same(x * y, a * b)
    same(dnp.maximum(x, y), np.maximum(a, b))
    same(x == y, a == b)
    if np.dtype(dtype).kind in "iub":
        same(x & y, a & b)
        same(x | y, a | b)
        same(x ^ y, a ^ b)
        same(~x, ~a)
    same(x.astype(np.float64), a.astype(np.float64))
    same(dnp.sum(x, axis=0), np.sum(a, axis=0))
    same(x.max(axis=1), a.max(axis=1))


REDUCTIONS = ["sum", "prod", "max", "min", "mean", "std", "var", "any", "all"]


@pytest.mark.parametrize("procs", [1, 3])
@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_with_axis_and_keepdims(procs: int, op: str, axis: Any, keepdims: bool) -> None:
    a = rand(5, 3, 4, seed=4)
    with dl.Session("local", machine=procs):
        _reductions_as_numpy(a, op, axis, keepdims)


def _reductions_as_numpy(a: np.ndarray, op: str, axis: Any, keepdims: bool) -> None:
    x = dnp.asarray(a)
    same(
        getattr(dnp, op)(x, axis=axis, keepdims=keepdims),
        getattr(np, op)(a, axis=axis, keepdims=keepdims),
        rtol=1e-10,
    )
    # the method and numpy's own function record the same reduction
    same(
        getattr(x, op)(axis=axis, keepdims=keepdims),
        getattr(a, op)(axis=axis, keepdims=keepdims),
        rtol=1e-10,
    )
    same(
        getattr(np, op)(x, axis=axis, keepdims=keepdims),
        getattr(np, op)(a, axis=axis, keepdims=keepdims),
        rtol=1e-10,
    )


def test_reduction_dtypes_as_numpy(sess: Any) -> None:
    i8 = np.arange(-12, 12, dtype=np.int8).reshape(6, 4)
    x = dnp.asarray(i8)
    same(x.sum(axis=0), i8.sum(axis=0))  # int8 sums in the default integer
    same(x.sum(axis=1, dtype=np.int16), i8.sum(axis=1, dtype=np.int16))
    same(x.mean(axis=0), i8.mean(axis=0))  # float64
    f32 = rand(9, 2, seed=5).astype(np.float32)
    same(dnp.mean(dnp.asarray(f32), axis=0), f32.mean(axis=0), rtol=1e-5)
    same(dnp.asarray(i8 > 0).sum(), (i8 > 0).sum())


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_argmax_argmin_first_occurrence(sess: Any, axis: Any) -> None:
    a = np.array([[1.0, 5.0, 5.0], [7.0, 7.0, 0.0], [2.0, 7.0, 1.0], [7.0, 0.0, 5.0], [0, 1, 2]])
    x = dnp.asarray(a)
    same(dnp.argmax(x, axis=axis), np.argmax(a, axis=axis))
    same(dnp.argmin(x, axis=axis), np.argmin(a, axis=axis))
    b = a.copy()
    b[3, 1] = np.nan
    same(dnp.argmax(dnp.asarray(b), axis=axis), np.argmax(b, axis=axis))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_cumulative_sums(sess: Any, axis: Any) -> None:
    a = rand(7, 3, seed=6)
    x = dnp.asarray(a)
    same(dnp.cumsum(x, axis=axis), np.cumsum(a, axis=axis), rtol=1e-10)
    same(dnp.cumprod(x, axis=axis), np.cumprod(a, axis=axis), rtol=1e-10)


def test_creation_block_by_block(sess: Any) -> None:
    same(dnp.zeros((5, 3)), np.zeros((5, 3)))
    same(dnp.ones(7, dtype=np.int32), np.ones(7, dtype=np.int32))
    same(dnp.full((3, 4), 2.5), np.full((3, 4), 2.5))
    same(dnp.arange(11), np.arange(11))
    same(dnp.arange(1.0, 3.0, 0.25), np.arange(1.0, 3.0, 0.25))
    same(dnp.linspace(-1.0, 2.0, 9), np.linspace(-1.0, 2.0, 9))
    same(dnp.linspace(0.0, 1.0, 5, endpoint=False), np.linspace(0.0, 1.0, 5, endpoint=False))
    same(dnp.eye(6, 4, k=-1), np.eye(6, 4, k=-1))
    x = dnp.asarray(rand(4, 5))
    same(dnp.zeros_like(x), np.zeros((4, 5)))
    same(dnp.full_like(x, 7, dtype=np.int64), np.full((4, 5), 7, dtype=np.int64))
    X, Y = dnp.meshgrid(dnp.arange(3.0), dnp.linspace(0.0, 1.0, 5))
    Xn, Yn = np.meshgrid(np.arange(3.0), np.linspace(0.0, 1.0, 5))
    same(X, Xn)
    same(Y, Yn)
    I, J = dnp.meshgrid(dnp.arange(3.0), dnp.arange(4.0), indexing="ij")  # noqa: E741
    In, Jn = np.meshgrid(np.arange(3.0), np.arange(4.0), indexing="ij")
    same(I, In)
    same(J, Jn)


def test_random_values_do_not_depend_on_the_processor_count(sess: Any) -> None:
    got = np.asarray(dnp.random.default_rng(7).standard_normal((300, 3)))
    with dl.Session("local", machine=1):
        want = np.asarray(dnp.random.default_rng(7).standard_normal((300, 3)))
    np.testing.assert_array_equal(got, want)
    u = np.asarray(dnp.random.default_rng(7).random(1000))
    assert 0.0 <= u.min()
    assert u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.05
    r = dnp.random.default_rng(3)
    assert not np.array_equal(np.asarray(r.random(10)), np.asarray(r.random(10)))
    ints = np.asarray(r.integers(0, 5, size=200))
    assert ints.dtype == np.int64
    assert set(ints) <= set(range(5))
    dnp.random.seed(1)
    a = np.asarray(dnp.random.rand(4, 2))
    dnp.random.seed(1)
    np.testing.assert_array_equal(a, np.asarray(dnp.random.rand(4, 2)))


def test_shapes_as_numpy(sess: Any) -> None:
    a = rand(6, 4, seed=8)
    x = dnp.asarray(a)
    same(x.reshape(4, 6), a.reshape(4, 6))
    same(x.reshape(-1), a.reshape(-1))
    same(x.reshape(2, 3, 4), a.reshape(2, 3, 4))
    same(x.ravel(), a.ravel())
    same(x.flatten(), a.flatten())
    same(x.T, a.T)
    same(
        dnp.transpose(dnp.asarray(rand(2, 3, 4)), (2, 0, 1)), np.transpose(rand(2, 3, 4), (2, 0, 1))
    )
    same(dnp.expand_dims(x, 1), np.expand_dims(a, 1))
    same(dnp.squeeze(dnp.asarray(a.reshape(6, 1, 4))), a)
    same(dnp.concatenate([x, 2 * x], axis=0), np.concatenate([a, 2 * a], axis=0))
    same(dnp.concatenate([x, 2 * x], axis=1), np.concatenate([a, 2 * a], axis=1))
    same(dnp.stack([x, x + 1], axis=1), np.stack([a, a + 1], axis=1))
    same(dnp.hstack([x, x]), np.hstack([a, a]))
    same(dnp.vstack([x, x]), np.vstack([a, a]))
    same(dnp.tile(x, (2, 3)), np.tile(a, (2, 3)))
    same(dnp.tile(dnp.arange(5.0), 3), np.tile(np.arange(5.0), 3))
    same(dnp.repeat(x, 2, axis=0), np.repeat(a, 2, axis=0))
    same(dnp.flip(x, 0), np.flip(a, 0))
    same(dnp.roll(x, 2, axis=0), np.roll(a, 2, axis=0))
    same(dnp.roll(x, -1, axis=1), np.roll(a, -1, axis=1))
    same(dnp.diag(x), np.diag(a))
    same(dnp.diag(x, 1), np.diag(a, 1))
    same(dnp.diag(dnp.arange(4.0), -2), np.diag(np.arange(4.0), -2))
    same(dnp.triu(x, 1), np.triu(a, 1))
    same(dnp.tril(x), np.tril(a))
    same(dnp.broadcast_to(dnp.arange(4.0), (3, 4)), np.broadcast_to(np.arange(4.0), (3, 4)))
    same(dnp.diff(x, axis=0), np.diff(a, axis=0))
    same(dnp.diff(x, n=2), np.diff(a, n=2))
    same(dnp.sort(x, axis=0), np.sort(a, axis=0))
    same(dnp.sort(x), np.sort(a))
    same(dnp.argsort(x, axis=0), np.argsort(a, axis=0, kind="stable"))
    same(dnp.where(x > 0, x, 0.0), np.where(a > 0, a, 0.0))
    same(dnp.clip(x, -0.5, 0.5), np.clip(a, -0.5, 0.5))
    same(dnp.bincount(dnp.asarray(np.array([0, 3, 3, 1, 7]))), np.bincount([0, 3, 3, 1, 7]))


def test_products_as_numpy(sess: Any) -> None:
    a, b, v = rand(5, 4, seed=9), rand(4, 3, seed=10), rand(4, seed=11)
    x, y, w = dnp.asarray(a), dnp.asarray(b), dnp.asarray(v)
    same(dnp.dot(x, y), a @ b, rtol=1e-10)
    same(dnp.matmul(x, w), a @ v, rtol=1e-10)
    same(np.matmul(x, y), a @ b, rtol=1e-10)
    same(dnp.outer(w, w), np.outer(v, v))
    same(dnp.einsum("ij,jk->ik", x, y), a @ b, rtol=1e-10)
    same(dnp.tensordot(x, y, axes=1), np.tensordot(a, b, axes=1), rtol=1e-10)
    t = rand(2, 5, 4, seed=12)
    same(dnp.matmul(dnp.asarray(t), y), t @ b, rtol=1e-10)
    same(dnp.linalg.norm(x), np.linalg.norm(a), rtol=1e-10)
    same(dnp.linalg.norm(x, axis=0), np.linalg.norm(a, axis=0), rtol=1e-10)
    same(dnp.linalg.norm(w, ord=1), np.linalg.norm(v, ord=1), rtol=1e-10)
    same(dnp.linalg.norm(w, ord=np.inf), np.linalg.norm(v, ord=np.inf))
    same(dnp.linalg.norm(x, ord=1), np.linalg.norm(a, ord=1), rtol=1e-10)
    same(dnp.trace(dnp.asarray(rand(4, 4))), np.trace(rand(4, 4)), rtol=1e-10)


def test_cross_as_numpy(sess: Any) -> None:
    """numpy's bits: each component is the same difference of two products."""
    a, b, c = rand(7, 3, seed=13), rand(3, seed=14), rand(3, 2, 5, seed=15)
    x, y, z = dnp.asarray(a), dnp.asarray(b), dnp.asarray(c)
    same(dnp.cross(x, y), np.cross(a, b), rtol=0)
    same(np.cross(y, x), np.cross(b, a), rtol=0)  # (numpy's function on DArrays)
    same(dnp.cross(z, z[::-1], axis=0), np.cross(c, c[::-1], axis=0), rtol=0)
    f = rand(5, 3, seed=16)
    same(dnp.cross(dnp.asarray(f), z, axisb=0, axisc=0), np.cross(f, c, axisb=0, axisc=0), rtol=0)
    same(dnp.linalg.cross(x, x[::-1]), np.linalg.cross(a, a[::-1]), rtol=0)
    i = np.arange(12).reshape(4, 3)
    same(dnp.cross(dnp.asarray(i), dnp.asarray(i[::-1])), np.cross(i, i[::-1]), rtol=0)
    with pytest.raises(dl.NotSupportedYet, match="cross of 2-element vectors"):
        dnp.cross(x[:, :2], x[:, 1:])
    with pytest.raises(dl.ShapeError, match="axisa has 4 elements"):
        dnp.cross(dnp.asarray(rand(2, 4)), x)


def test_out_writes_into_the_array_every_holder_sees(sess: Any) -> None:
    a, b = rand(5, 3, seed=13), rand(3, 4, seed=14)
    c = dnp.zeros((5, 4))
    alias = c
    got = dnp.matmul(dnp.asarray(a), dnp.asarray(b), out=c)
    assert got is c
    np.testing.assert_allclose(np.asarray(alias), a @ b, rtol=1e-12)
    d = dnp.zeros((5, 3))
    np.exp(dnp.asarray(a), out=d)
    np.testing.assert_allclose(np.asarray(d), np.exp(a), rtol=1e-12)
    s = dnp.zeros(3)
    dnp.sum(dnp.asarray(a), axis=0, out=s)
    np.testing.assert_allclose(np.asarray(s), a.sum(axis=0), rtol=1e-12)
    with pytest.raises(dl.InputError):
        dnp.add(dnp.asarray(a), 1.5, out=dnp.zeros((5, 3), dtype=np.int64))  # same_kind


def test_element_wise_chain_and_its_reduction_are_one_pass(sess: Any) -> None:
    a = rand(40, 6, seed=15)
    x = dnp.asarray(a)
    x.get()
    before = sess.kernels_run
    m = dnp.max(dnp.exp(x) * 2.0 - dnp.sin(x), axis=1)
    np.testing.assert_allclose(np.asarray(m), np.max(np.exp(a) * 2.0 - np.sin(a), axis=1))
    assert sess.kernels_run == before + 1  # the chain is computed inside the reduction
    before = sess.kernels_run
    y = dnp.tanh(dnp.sqrt(dnp.abs(x)) + dnp.cos(x) / 3.0)
    np.testing.assert_allclose(np.asarray(y), np.tanh(np.sqrt(np.abs(a)) + np.cos(a) / 3.0))
    assert sess.kernels_run == before + 1


def test_empty_and_zero_d(sess: Any) -> None:
    e = dnp.zeros((0, 3))
    same(e.sum(axis=0), np.zeros(3))
    same(dnp.prod(e, axis=0), np.ones(3))
    with pytest.raises(dl.InputError, match="max"):
        dnp.max(e, axis=0)
    z = dnp.asarray(np.float64(2.5))
    same(dnp.sqrt(z), np.sqrt(2.5))
    same(z.sum(), np.float64(2.5))
    same(dnp.argmax(z), np.argmax(np.float64(2.5)))
