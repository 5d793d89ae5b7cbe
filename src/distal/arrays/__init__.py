"""Whole programs written like numpy: distributed arrays, deferred and fused.

``sess[name]`` and ``sess.asarray(value)`` give :class:`DArray` handles; operations record
a program (:mod:`distal.arrays.graph`) that runs, fused into few kernels
(:mod:`distal.arrays.lower`), when a value is read (:mod:`distal.arrays.program`).
"""

from distal.arrays import methods as _methods  # noqa: F401  (attaches DArray's numpy methods)
from distal.arrays.darray import (
    DArray,
    absolute,
    einsum_arrays,
    exp,
    maximum,
    minimum,
    sqrt,
    where,
)
from distal.arrays.program import Program

__all__ = [
    "DArray",
    "Program",
    "absolute",
    "einsum_arrays",
    "exp",
    "maximum",
    "minimum",
    "sqrt",
    "where",
]
