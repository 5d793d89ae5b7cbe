"""Communication lower bounds, under their public name: ``distal.cost.bounds``.

They live in :mod:`distal.costmodel.bounds`, below :mod:`distal.kernel` (whose
``explain()`` prints the lower-bound line); this module re-exports them.
"""

from distal.costmodel.bounds import (
    BoundError,
    ContractionShape,
    StatementBound,
    bound_ratio,
    contraction_bound,
    contraction_shape,
    hbl_bound,
    matmul_bound,
    matmul_memory_bound,
    matmul_regime,
    mttkrp_bound,
    statement_bound,
)

__all__ = [
    "BoundError",
    "ContractionShape",
    "StatementBound",
    "bound_ratio",
    "contraction_bound",
    "contraction_shape",
    "hbl_bound",
    "matmul_bound",
    "matmul_memory_bound",
    "matmul_regime",
    "mttkrp_bound",
    "statement_bound",
]
