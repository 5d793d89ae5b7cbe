"""distal and MLIR: leaf computations out as ``linalg`` on tensors, ``linalg`` in as index
notation.

* :func:`distal.mlir.export.to_mlir` (``kernel.to_mlir(p)``): processor ``p``'s leaves as a
  ``func.func`` of ``linalg.generic`` ops with ``arith`` bodies; sparse operands carry a
  ``#sparse_tensor.encoding`` built from their format. Plain text, no dependency.
* :func:`distal.mlir.importer.from_mlir` (``dl.from_mlir(text)``): a ``func.func`` of
  ``linalg.generic`` and named contractions read back as tensors with their computations.
  Parsing uses xDSL (``pip install 'distal[mlir]'``), imported only when called.
* ``kernel.to_mlir(distributed=True)`` (:mod:`distal.mlir.distributed`): the whole
  distributed program as ``shard`` SPMD code.

This package takes kernels as arguments and never imports :mod:`distal.kernel`. Whole
programs read as arrays programs (``dl.mlir_function``) are :mod:`distal.mlir_program`,
a layer above (it records DArray operations).
"""

from distal.mlir.export import to_mlir
from distal.mlir.importer import from_mlir

__all__ = ["from_mlir", "to_mlir"]
