"""``distal.numpy.linalg``: norms and products, distributed; dense factorizations
(``solve``, ``inv``, ``cholesky``, ``qr``, ``svd``, ``eig``, ...) are not in this version
and raise ``NotSupportedYet`` naming the function."""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays import functions as F
from distal.arrays import products as P
from distal.errors import InputError, NotSupportedYet


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """numpy's ``linalg.norm``: vector norms (any ``ord``) and the matrix norms that need
    no decomposition (``'fro'``, 1, -1, inf, -inf); ``'nuc'`` and 2 are refused by name."""
    x = F.asdarray(x)
    if axis is None:
        if ord is None:
            return _two(x, None, keepdims)
        if x.ndim == 1:
            return vector_norm(x, None, keepdims, ord)
        if x.ndim == 2:
            return matrix_norm(x, keepdims=keepdims, ord=ord)
        raise InputError("norm: ord= needs a 1-D or 2-D array when axis is None")
    axes = axis if isinstance(axis, tuple | list) else (axis,)
    if len(axes) == 1:
        return vector_norm(x, axes[0], keepdims, 2 if ord is None else ord)
    if len(axes) == 2:
        return _matrix(x, tuple(axes), keepdims, "fro" if ord is None else ord)
    raise InputError("norm: axis must be an int or a pair")


def _abs(x: Any) -> Any:
    return F.elementwise("abs", x)


def _two(x: Any, axis: Any, keepdims: bool) -> Any:
    if x.dtype.kind == "c":
        a = _abs(x)
        return F.elementwise("sqrt", F.sum_(a * a, axis, None, keepdims))
    if x.dtype.kind != "f":
        x = F.astype(x, np.float64)
    return F.elementwise("sqrt", F.sum_(x * x, axis, None, keepdims))


def vector_norm(x: Any, /, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
    x = F.asdarray(x)
    if x.dtype.kind in "biu":
        x = F.astype(x, np.float64)
    if ord in (2, None, 2.0):
        return _two(x, axis, keepdims)
    a = _abs(x)
    if ord == np.inf:
        return F.reduce(a, "max", axis, keepdims)
    if ord == -np.inf:
        return F.reduce(a, "min", axis, keepdims)
    if ord == 0:
        return F.astype(F.count_nonzero(a, axis, keepdims), a.dtype)
    if ord == 1:
        return F.sum_(a, axis, None, keepdims)
    p = float(ord)
    s = F.sum_(F.elementwise("pow", a, p), axis, None, keepdims)
    return F.elementwise("pow", s, 1.0 / p)


def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:
    x = F.asdarray(x)
    return _matrix(x, (-2, -1), keepdims, ord)


def _matrix(x: Any, axes: tuple, keepdims: bool, ord: Any) -> Any:
    r, c = (int(a) % x.ndim for a in axes)
    if ord in ("fro", None):
        return _two(x, (r, c), keepdims)
    a = _abs(x if x.dtype.kind in "fc" else F.astype(x, np.float64))
    if ord in (1, -1):
        s = F.sum_(a, r, None, True)
        got = F.reduce(s, "max" if ord == 1 else "min", c, True)
    elif ord in (np.inf, -np.inf):
        s = F.sum_(a, c, None, True)
        got = F.reduce(s, "max" if ord == np.inf else "min", r, True)
    else:
        raise NotSupportedYet(f"linalg.norm(ord={ord!r}): it needs a singular value decomposition")
    if not keepdims:
        got = F.squeeze(got, (r, c))
    return got


matmul = P.matmul
tensordot = P.tensordot
outer = P.outer


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    return P.vecdot(x1, x2, axis)


def matrix_transpose(x: Any, /) -> Any:
    return F.asdarray(x).mT


def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Any:
    got = P.trace(x, offset)
    return got if dtype is None else F.astype(got, dtype, copy=False)


def diagonal(x: Any, /, *, offset: int = 0) -> Any:
    return F.diagonal(x, offset)


def _refused(name: str) -> NotSupportedYet:
    return NotSupportedYet(
        f"numpy.linalg.{name}: dense factorizations are not in this version of distal.numpy "
        "(gather the matrix with np.asarray if it fits on one process)"
    )


def solve(a: Any, b: Any, /) -> Any:
    raise _refused("solve")


def inv(a: Any, /) -> Any:
    raise _refused("inv")


def pinv(x: Any, /, *, rtol: Any = None, **kw: Any) -> Any:
    raise _refused("pinv")


def cholesky(x: Any, /, *, upper: bool = False) -> Any:
    raise _refused("cholesky")


def qr(x: Any, /, *, mode: str = "reduced") -> Any:
    raise _refused("qr")


def svd(x: Any, /, *, full_matrices: bool = True, **kw: Any) -> Any:
    raise _refused("svd")


def svdvals(x: Any, /) -> Any:
    raise _refused("svdvals")


def eig(a: Any, /) -> Any:
    raise _refused("eig")


def eigh(x: Any, /, UPLO: str = "L") -> Any:
    raise _refused("eigh")


def eigvals(a: Any, /) -> Any:
    raise _refused("eigvals")


def eigvalsh(x: Any, /, UPLO: str = "L") -> Any:
    raise _refused("eigvalsh")


def det(x: Any, /) -> Any:
    raise _refused("det")


def slogdet(x: Any, /) -> Any:
    raise _refused("slogdet")


def lstsq(a: Any, b: Any, /, rcond: Any = None) -> Any:
    raise _refused("lstsq")


def matrix_rank(x: Any, /, *, rtol: Any = None, **kw: Any) -> Any:
    raise _refused("matrix_rank")


def matrix_power(x: Any, n: int, /) -> Any:
    raise _refused("matrix_power")


def cond(x: Any, p: Any = None) -> Any:
    raise _refused("cond")


def tensorsolve(a: Any, b: Any, axes: Any = None) -> Any:
    raise _refused("tensorsolve")


def tensorinv(a: Any, ind: int = 2) -> Any:
    raise _refused("tensorinv")


def multi_dot(arrays: Any, *, out: Any = None) -> Any:
    raise _refused("multi_dot")


def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """The array API's cross product of 3-element vectors along ``axis`` (numpy's)."""
    from distal.numpy._functions import cross as cross_

    return cross_(x1, x2, axis=axis)


_REFUSED = tuple(
    [
        "solve",
        "inv",
        "pinv",
        "cholesky",
        "qr",
        "svd",
        "svdvals",
        "eig",
        "eigh",
        "eigvals",
        "eigvalsh",
        "det",
        "slogdet",
        "lstsq",
        "matrix_rank",
        "matrix_power",
        "cond",
        "tensorsolve",
        "tensorinv",
        "multi_dot",
    ]
)

LinAlgError = np.linalg.LinAlgError
