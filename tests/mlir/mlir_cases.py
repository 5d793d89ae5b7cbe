"""The kernels the MLIR tests export: every algorithm of ``dl.algorithms``, dense ones
compiled and sparse ones bound to small random patterns (shared by the tests of
``tests/mlir``)."""

from __future__ import annotations

import numpy as np

import distal as dl

al = dl.algorithms
M = dl.Machine


def _sparse_values(shape: tuple[int, ...], seed: int, density: float = 0.4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) * (rng.random(shape) < density)


DENSE = {
    "row_1d": lambda: al.row_1d(8, machine=M(2)),
    "summa": lambda: al.summa(8, machine=M(2, 2)),
    "cannon": lambda: al.cannon(8, machine=M(2, 2)),
    "pumma": lambda: al.pumma(8, machine=M(2, 2)),
    "johnson_3d": lambda: al.johnson_3d(8, machine=M(2, 2, 2)),
    "solomonik_25d": lambda: al.solomonik_25d(8, machine=M(2, 2, 2)),
    "cosma": lambda: al.cosma(8, machine=8),
    "hierarchical_summa": lambda: al.hierarchical_summa(8, machine=M(2, 2).nest(M(2))),
    "hierarchical_cannon": lambda: al.hierarchical_cannon(8, machine=M(2, 2).nest(M(2))),
    "ttv": lambda: al.ttv((4, 4, 4), machine=M(2)),
    "ttm": lambda: al.ttm((4, 4, 4), 4, machine=M(2)),
    "mttkrp": lambda: al.mttkrp((4, 4, 4), 4, machine=M(2, 2, 2)),
    "inner_product": lambda: al.inner_product((4, 4, 4), machine=M(2)),
    "contraction_4d": lambda: al.contraction_4d(4, 4, 4, 2, 2, 2, machine=M(2, 2)),
}
SPARSE = {
    "spmv": lambda: (al.spmv((8, 8), machine=M(2)), {"B": _sparse_values((8, 8), 1)}),
    "spmv_nonzeros": lambda: (
        al.spmv((8, 8), machine=M(3), split="nonzeros"),
        {"B": _sparse_values((8, 8), 1)},
    ),
    "spmm": lambda: (al.spmm((8, 8), 4, machine=M(2)), {"B": _sparse_values((8, 8), 2)}),
    "sddmm": lambda: (al.sddmm((8, 8), 4, machine=M(2)), {"B": _sparse_values((8, 8), 3)}),
    "spmttkrp": lambda: (
        al.spmttkrp((4, 4, 4), 3, machine=M(2)),
        {"B": _sparse_values((4, 4, 4), 4)},
    ),
    "spttv": lambda: (al.spttv((4, 4, 4), machine=M(2)), {"B": _sparse_values((4, 4, 4), 5)}),
    "spadd3": lambda: (
        al.spadd3((8, 8), machine=M(2)),
        {n: _sparse_values((8, 8), 6 + k) for k, n in enumerate("BCD")},
    ),
    "spinnerprod": lambda: (
        al.spinnerprod((4, 4, 4), machine=M(2)),
        {n: _sparse_values((4, 4, 4), 9 + k) for k, n in enumerate("BC")},
    ),
}


_BUILT: dict[str, dl.Kernel | dl.BoundKernel] = {}
_INPUTS: dict[str, dict[str, np.ndarray]] = {}


def kernel(name: str) -> dl.Kernel | dl.BoundKernel:
    """The compiled (dense) or bound (sparse) kernel of case ``name``, built once."""
    if name not in _BUILT:
        if name in DENSE:
            _BUILT[name] = DENSE[name]().compile()
        else:
            alg, inputs = SPARSE[name]()
            _INPUTS[name] = inputs
            _BUILT[name] = alg.compile().bind(inputs)
    return _BUILT[name]


def sparse_inputs(name: str) -> dict[str, np.ndarray]:
    """The sparse inputs case ``name`` is bound to."""
    kernel(name)
    return _INPUTS[name]
