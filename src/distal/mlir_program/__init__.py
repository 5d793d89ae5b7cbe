"""MLIR programs as arrays programs: ``dl.mlir_function(text)``.

A ``func.func`` of ``linalg`` / ``tensor`` / ``arith`` / ``math`` operations (what JAX and
ONNX lower to) read with :mod:`distal.mlir`'s parser and run as DArray operations on a
session: :mod:`~distal.mlir_program.function` (the function and its operations),
:mod:`~distal.mlir_program.structured` (a structured op's result),
:mod:`~distal.mlir_program.body` (bodies and indexing maps), :mod:`~distal.mlir_program.ops`
(the array operations, ``distal.numpy``'s where it has them). Built on the arrays front and
the session, so it sits beside them, above :mod:`distal.mlir`.
"""

from distal.mlir_program.function import MlirFunction, mlir_function

__all__ = ["MlirFunction", "mlir_function"]
