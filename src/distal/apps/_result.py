"""What a solver returns: the contract's value, and whether it converged.

Each application keeps the return shape the contract gives it (``cg -> (x, iterations)``,
``cp_als -> (weights, factors, fit)``, ``pagerank -> vector``) and adds, as attributes,
what scipy's ``info`` and PETSc's divergence reason say:

* ``info``: ``0`` converged; ``> 0`` the tolerance was not met within the iterations
  allowed (the number run, as scipy's ``cg``); ``< 0`` the recurrence broke down (a
  non-positive or non-finite ``p . A p``, a residual that is not finite, a recursive
  residual that left the true one behind: see each solver) and stopped there;
* ``converged``: ``info == 0``;
* ``iterations``: the iterations run in total (a resumed run's included);
* ``reason``: one sentence saying why it stopped.

A solver that did not converge warns (:class:`~distal.errors.ConvergenceWarning`, on MPI
rank 0 only, once per call) or, with ``strict=True``, raises
:class:`~distal.errors.ConvergenceError` carrying the result (``err.result``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from distal.errors import ConvergenceError, ConvergenceWarning

#: ``info`` of a recurrence that broke down
BREAKDOWN = -1


class _Report:
    """The convergence attributes every result carries (set by :func:`_fill`)."""

    info: int
    iterations: int
    reason: str

    @property
    def converged(self) -> bool:
        return self.info == 0


def _fill(obj: Any, fields: dict[str, Any]) -> None:
    for k, v in fields.items():
        setattr(obj, k, v)


class CGResult(tuple, _Report):
    """``(x, iterations)`` as :func:`distal.apps.cg` returns it; also ``.x``, ``.info``,
    ``.converged``, ``.reason`` and ``.residual``: ``||b - A x|| / ||b||`` of the
    returned ``x`` (computed from ``x``, not the recurrence's residual)."""

    x: np.ndarray
    residual: float

    def __new__(cls, x: np.ndarray, iterations: int, **fields: Any) -> CGResult:
        self = super().__new__(cls, (x, iterations))
        _fill(self, {"x": x, "iterations": iterations, **fields})
        return self

    def __reduce__(self) -> Any:
        return (_remake, (type(self), tuple(self), self.__dict__))

    def __repr__(self) -> str:
        return (
            f"CGResult(iterations={self.iterations}, info={self.info}, "
            f"residual={self.residual:.3g}, reason={self.reason!r})"
        )


class CPResult(tuple, _Report):
    """``(weights, factors, fit)`` as :func:`distal.apps.cp_als` returns it; also
    ``.info``, ``.converged``, ``.iterations``, ``.reason`` and ``.change``: how much the
    fit moved in the last iteration."""

    change: float

    def __new__(
        cls, weights: np.ndarray, factors: list[np.ndarray], fit: float, **fields: Any
    ) -> CPResult:
        self = super().__new__(cls, (weights, factors, fit))
        _fill(self, fields)
        return self

    @property
    def weights(self) -> np.ndarray:
        return self[0]

    @property
    def factors(self) -> list[np.ndarray]:
        return self[1]

    @property
    def fit(self) -> float:
        return self[2]

    def __reduce__(self) -> Any:
        return (_remake, (type(self), tuple(self), self.__dict__))

    def __repr__(self) -> str:
        return (
            f"CPResult(fit={self.fit:.6g}, iterations={self.iterations}, info={self.info}, "
            f"reason={self.reason!r})"
        )


class PageRankVector(np.ndarray, _Report):
    """The PageRank vector as :func:`distal.apps.pagerank` returns it (a numpy array),
    with ``.info``, ``.converged``, ``.iterations``, ``.reason`` and ``.error_bound``:
    the bound on its 1-norm distance to the exact vector when the iteration stopped.
    Arrays computed from it are plain arrays."""

    error_bound: float

    def __array_finalize__(self, obj: Any) -> None:
        # a view or slice of the vector keeps its report
        if obj is not None and hasattr(obj, "__dict__"):
            self.__dict__.update(obj.__dict__)

    def __array_wrap__(self, arr: Any, context: Any = None, return_scalar: bool = False) -> Any:
        # results of numpy operations on the vector are not the solver's report
        out = np.asarray(arr)
        return out[()] if return_scalar else out

    def __reduce__(self) -> Any:
        return (_remake_vector, (np.asarray(self), self.__dict__))


def _remake(cls: type, values: tuple, fields: dict[str, Any]) -> Any:
    out = tuple.__new__(cls, values)
    _fill(out, fields)
    return out


def _remake_vector(values: np.ndarray, fields: dict[str, Any]) -> PageRankVector:
    out = values.view(PageRankVector)
    _fill(out, fields)
    return out


def pagerank_vector(values: np.ndarray, **fields: Any) -> PageRankVector:
    out = np.asarray(values).view(PageRankVector)
    _fill(out, fields)
    return out


def report(result: Any, app: str, *, strict: bool, rank: int = 0) -> Any:
    """``result``, after saying it did not converge when it did not: a
    :class:`ConvergenceWarning` (rank 0 only), or with ``strict`` a
    :class:`ConvergenceError` carrying it (every rank)."""
    if result.converged:
        return result
    message = f"{app} did not converge (info={result.info}): {result.reason}"
    if strict:
        raise ConvergenceError(message, result)
    if rank == 0:
        warnings.warn(message, ConvergenceWarning, stacklevel=3)
    return result


def check_strict(strict: Any, app: str) -> bool:
    from distal.errors import InputError

    if not isinstance(strict, bool | np.bool_):
        raise InputError(f"{app}: strict must be True or False, got {strict!r}")
    return bool(strict)
