"""Cost: communication lower bounds, a cost model over plans, and the auto-scheduler."""

from distal.cost.bounds import (
    BoundError,
    bound_ratio,
    contraction_bound,
    contraction_shape,
    matmul_bound,
    matmul_memory_bound,
    mttkrp_bound,
    statement_bound,
)

__all__ = [
    "BoundError",
    "bound_ratio",
    "contraction_bound",
    "contraction_shape",
    "matmul_bound",
    "matmul_memory_bound",
    "mttkrp_bound",
    "statement_bound",
]
