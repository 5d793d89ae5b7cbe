"""distal and MLIR: leaf computations out as ``linalg`` on tensors, ``linalg`` in as index
notation.

* :func:`distal.mlir.export.to_mlir` (``kernel.to_mlir(p)``): processor ``p``'s leaves as a
  ``func.func`` of ``linalg.generic`` ops with ``arith`` bodies; sparse operands carry a
  ``#sparse_tensor.encoding`` built from their format. Plain text, no dependency.
* :func:`distal.mlir.importer.from_mlir` (``dl.from_mlir(text)``): a ``func.func`` of
  ``linalg.generic`` and named contractions read back as tensors with their computations.
  Parsing uses xDSL (``pip install 'distal[mlir]'``), imported only when called.
* :func:`distal.mlir.graph_import.mlir_function` (``dl.mlir_function(text)``): a function of
  linalg / tensor / arith / math operations (what JAX and ONNX lower to) as a callable
  recording an arrays program on DArrays.
* ``kernel.to_mlir(distributed=True)`` (:mod:`distal.mlir.distributed`): the whole
  distributed program as ``shard`` SPMD code.

This package takes kernels as arguments and never imports :mod:`distal.kernel`.
"""

from distal.mlir.export import to_mlir
from distal.mlir.graph_import import mlir_function
from distal.mlir.importer import from_mlir

__all__ = ["from_mlir", "mlir_function", "to_mlir"]
