"""What index notation can say, and a ``NotationError`` for what it cannot.

Users write ``B[i] / 2`` and ``B[i] ** 2``: a division by a number is a coefficient and a
positive integer power is repeated factors, so both compute (checked against numpy, and on
the sparse lowering against scipy). Everything else a Python operator could mean — a
division by a tensor, ``abs``, negative or fractional powers, ``//``, ``%``, ``@``,
comparisons — is a ``NotationError`` saying what the notation supports, not a bare
``TypeError``. Index variable names are distinct Python identifiers, because
``repr(schedule)`` prints them as code.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distal as dl
from distal.lang.nodes import Mul

N = 6
RNG = np.random.default_rng(11)
B_VAL, C_VAL = RNG.random(N), RNG.random(N)


def _run(build: object) -> np.ndarray:
    (i,) = dl.index_vars("i")
    A, B, C = (dl.Tensor(n, (N,)) for n in "ABC")
    A[i] = build(B[i], C[i])  # type: ignore[operator]
    inputs = {"B": B_VAL, "C": C_VAL}
    need = {t.name for t in dl.schedule(A).statement.inputs()}
    return dl.compile(dl.schedule(A)).run({k: v for k, v in inputs.items() if k in need}).value


# -- what computes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "ref"),
    [
        (lambda b, c: b / 4, B_VAL / 4),
        (lambda b, c: (b + c) / 3, (B_VAL + C_VAL) / 3),
        (lambda b, c: b * c / np.float32(2.5), B_VAL * C_VAL / 2.5),
        (lambda b, c: b / np.array(8.0), B_VAL / 8),
        (lambda b, c: b**2, B_VAL**2),
        (lambda b, c: b**1, B_VAL),
        (lambda b, c: c * b ** np.int64(3), C_VAL * B_VAL**3),
        (lambda b, c: (b + c) ** 3 / 2 - b, (B_VAL + C_VAL) ** 3 / 2 - B_VAL),
        (lambda b, c: -(b**2), -(B_VAL**2)),
    ],
    ids=["div", "sum-div", "np-scalar", "0d-array", "square", "first", "cube", "poly", "neg"],
)
def test_division_by_a_number_and_integer_powers_match_numpy(build: object, ref: object) -> None:
    np.testing.assert_allclose(_run(build), ref, rtol=1e-12)


def test_a_power_is_repeated_factors() -> None:
    (i,) = dl.index_vars("i")
    b = dl.Tensor("B", (N,))[i]
    e = b**3
    assert isinstance(e, Mul)
    assert [a.tensor.name for a in dl.lang.verify.accesses(e)] == ["B"] * 3


def test_a_power_of_a_sparse_access_matches_scipy() -> None:
    i, j = dl.index_vars("i j")
    m = sp.random(N, N, density=0.5, random_state=3, format="csr")
    x = RNG.random(N)
    A = dl.Tensor("A", (N, N), format="csr")
    xt, y = dl.Tensor("x", (N,)), dl.Tensor("y", (N,))
    y[i] = A[i, j] ** 2 * xt[j] ** 3 / 4
    got = dl.compile(dl.schedule(y)).run({"A": m, "x": x}).value
    np.testing.assert_allclose(got, (m.multiply(m) @ x**3) / 4, rtol=1e-12)


def test_the_sparse_lowering_refuses_what_it_cannot_read() -> None:
    i, j = dl.index_vars("i j")
    A = dl.Tensor("A", (N, N), format="csr")
    xt, y = dl.Tensor("x", (N,)), dl.Tensor("y", (N,))
    y[i] = A[i, j] ** 2 * xt[j] + xt[i]  # x read through two accesses
    with pytest.raises(dl.errors.NotSupportedYet, match=r"'x'.*one access"):
        dl.compile(dl.schedule(y)).run({"A": sp.eye(N, format="csr"), "x": np.ones(N)})


# -- what does not -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "what"),
    [
        (lambda b, c: b / c, "division by a tensor"),
        (lambda b, c: 2 / b, "division by a tensor"),
        (lambda b, c: abs(b), r"abs\(\)"),
        (lambda b, c: b**-1, "not a positive integer"),
        (lambda b, c: b**0, "not a positive integer"),
        (lambda b, c: b**0.5, "not a positive integer"),
        (lambda b, c: b**2.0, "not a positive integer"),
        (lambda b, c: b**True, "not a positive integer"),
        (lambda b, c: b**c, "not a positive integer"),
        (lambda b, c: 2**b, "exponent"),
        (lambda b, c: b // 2, "floor division"),
        (lambda b, c: 7 // b, "floor division"),
        (lambda b, c: b % 2, "%"),
        (lambda b, c: b @ c, "@"),
        (lambda b, c: b < c, "comparisons"),
        (lambda b, c: b >= 1, "comparisons"),
    ],
)
def test_unsupported_operators_say_what_the_notation_supports(build: object, what: str) -> None:
    (i,) = dl.index_vars("i")
    b, c = dl.Tensor("B", (N,))[i], dl.Tensor("C", (N,))[i]
    with pytest.raises(dl.NotationError, match=what) as err:
        build(b, c)  # type: ignore[operator]
    assert "division by a number and positive integer powers" in str(err.value)


def test_division_by_zero_is_refused() -> None:
    (i,) = dl.index_vars("i")
    with pytest.raises(dl.NotationError, match="divides by zero"):
        dl.Tensor("B", (N,))[i] / 0


def test_a_power_that_expands_too_far_is_refused() -> None:
    (i,) = dl.index_vars("i")
    b, c = dl.Tensor("B", (N,))[i], dl.Tensor("C", (N,))[i]
    assert isinstance((b + c) ** 10, Mul)  # 1024 products: still expanded
    with pytest.raises(dl.NotationError, match=r"2\^11 products.*tensor first"):
        (b + c) ** 11
    with pytest.raises(dl.NotationError, match="64 factors"):
        b**65


# -- index variable names ------------------------------------------------------------------------


@pytest.mark.parametrize("names", ["i i", "i j i", "a,b,a"])
def test_index_vars_refuses_a_name_given_twice(names: str) -> None:
    with pytest.raises(dl.NotationError, match="more than once"):
        dl.index_vars(names)


@pytest.mark.parametrize(("names", "bad"), [("1x ?", "1x"), ("i ?", r"\?"), ("i-o", "i-o")])
def test_index_vars_refuses_names_that_are_not_identifiers(names: str, bad: str) -> None:
    with pytest.raises(dl.NotationError, match=f"'{bad}' is not a Python identifier"):
        dl.index_vars(names)


def test_index_vars_refuses_keywords() -> None:
    with pytest.raises(dl.NotationError, match="'if' is a Python keyword"):
        dl.index_vars("i if")


def test_an_index_variable_made_directly_needs_an_identifier() -> None:
    with pytest.raises(dl.NotationError, match="'1x' is not a Python identifier"):
        dl.IndexVar("1x")
