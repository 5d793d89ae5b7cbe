"""Every algorithm of ``dl.algorithms`` as an executable case, on a machine of ``P`` processors.

``CASES`` maps a name to a builder returning a :class:`Case`: the inputs, the reference and
``planned()``, the kernel (dense) or bound kernel (sparse) whose executable is the case. The
dense cases are the algorithms of ``_mpi_cases.library_cases`` (reference: ``numpy.einsum``),
the sparse ones those of ``_mpi_cases.sparse_library_cases`` (reference: scipy / numpy).
Building a case lowers no plan (a dense one compiles nothing, a sparse one binds nothing)
until ``planned()`` is called; inputs are seeded, so every MPI rank builds the same.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
for _p in (HERE.parent / "mpi", HERE.parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from _mpi_cases import library_cases, sparse_library_cases  # noqa: E402

P = 4


@dataclass
class Case:
    inputs: dict[str, Any]
    reference: Any
    planned: Callable[[], Any]


def _dense(build: Callable[[], Any]) -> Callable[[], Case]:
    def make() -> Case:
        alg = build()
        inputs = alg.inputs(0)
        return Case(inputs, alg.reference(inputs), lambda: alg.compile(routing="auto"))

    return make


def _sparse(build: Callable[[], Any]) -> Callable[[], Case]:
    def make() -> Case:
        kernel, inputs, reference = build()
        return Case(inputs, reference, lambda: kernel.bind(inputs))

    return make


CASES: dict[str, Callable[[], Case]] = {
    **{f"dense {n}": _dense(b) for n, b in library_cases(P).items()},
    **{f"sparse {n}": _sparse(b) for n, b in sparse_library_cases(P).items()},
}


def dense_value(x: Any) -> np.ndarray:
    """A result or reference as a dense numpy array (sparse ones expanded)."""
    if hasattr(x, "to_dense"):
        return np.asarray(x.to_dense())
    if hasattr(x, "toarray"):
        return np.asarray(x.toarray())
    return np.asarray(x)


def close(value: Any, reference: Any, rtol: float = 1e-10) -> bool:
    """``value`` equals the numpy / scipy reference to ``rtol`` (scaled near zero)."""
    got, want = dense_value(value), dense_value(reference)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=rtol * scale))
