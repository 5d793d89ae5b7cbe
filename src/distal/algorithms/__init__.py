"""The distributed algorithms of the literature, as ready schedules.

Each function returns an :class:`Algorithm`: the tensors with their distributions,
a :class:`~distal.Schedule` built from public commands only (``distribute``,
``divide``, ``reorder``, ``rotate``, ``communicate``), and the closed-form words
each processor receives. Nothing in the compiler knows these names.

>>> import distal as dl
>>> alg = dl.algorithms.cannon(8, machine=dl.Machine(2, 2))
>>> kernel = alg.compile()
>>> list(kernel.stats().words_received) == list(alg.words)
True
"""

from distal.algorithms.base import Algorithm
from distal.algorithms.hierarchical import hierarchical_cannon, hierarchical_summa
from distal.algorithms.matmul import (
    cannon,
    cosma,
    cosma_grid,
    cosma_words,
    johnson_3d,
    pumma,
    row_1d,
    solomonik_25d,
    summa,
)
from distal.algorithms.sparse import (
    SparseAlgorithm,
    sddmm,
    spadd3,
    spinnerprod,
    spmm,
    spmttkrp,
    spmv,
    spttv,
)
from distal.algorithms.tensor import contraction_4d, inner_product, mttkrp, ttm, ttv

__all__ = [
    "Algorithm",
    "SparseAlgorithm",
    "cannon",
    "contraction_4d",
    "cosma",
    "cosma_grid",
    "cosma_words",
    "hierarchical_cannon",
    "hierarchical_summa",
    "inner_product",
    "johnson_3d",
    "mttkrp",
    "pumma",
    "row_1d",
    "sddmm",
    "solomonik_25d",
    "spadd3",
    "spinnerprod",
    "spmm",
    "spmttkrp",
    "spmv",
    "spttv",
    "summa",
    "ttm",
    "ttv",
]
