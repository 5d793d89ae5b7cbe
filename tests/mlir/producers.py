"""Real MLIR producers for the import tests: JAX and ONNX programs lowered to ``linalg`` on
tensors through IREE's tools, the routes ``docs/mlir.md`` documents (the ``mlir-producers``
extra: jax, jaxlib, onnx, iree-base-compiler[onnx]).

* JAX: ``jax.jit(f).lower(*args).compiler_ir("stablehlo")``, then ``iree-opt
  --chlo-legalize-to-stablehlo --iree-stablehlo-to-iree-input``;
* ONNX: ``iree-import-onnx model.onnx`` (torch-mlir's ONNX importer), then ``iree-opt
  --torch-onnx-to-torch-backend-pipeline --torch-backend-to-linalg-on-tensors-backend-pipeline``.

Each program comes with the producer's own result (JAX's, and onnx's reference evaluator's)
on float64 inputs, what the imported function must equal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

EXTRA = "pip install 'distal[mlir-producers]'"


def _need(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is missing under CI: {EXTRA}")
        pytest.skip(f"{module} is not installed: {EXTRA}")


def tool(name: str) -> str:
    """An IREE command beside this Python, else on PATH (skipped where missing)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing under CI: pip install 'distal[mlir]'")
        pytest.skip(f"{name} is not installed: pip install 'distal[mlir]'")
    return found


def _run(args: list[str], text: str | None = None) -> str:
    r = subprocess.run(args, input=text, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(args[:2])} failed:\n{r.stderr[-3000:]}"
    return r.stdout


# -- JAX ------------------------------------------------------------------------------------


def _jax_programs() -> dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]]:
    import jax.numpy as jnp

    def mlp(x, w1, b1, w2, b2):
        h = jnp.maximum(x @ w1 + b1, 0.0)
        return h @ w2 + b2

    def softmax(x):
        e = jnp.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def layernorm(x, g, b):
        m = x.mean(axis=1, keepdims=True)
        v = ((x - m) ** 2).mean(axis=1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * g + b

    return {
        "matmul_chain": (lambda a, b, c: (a @ b) @ c, [(6, 5), (5, 4), (4, 3)]),
        "residual": (lambda a, b, r: a @ b - r, [(6, 5), (5, 4), (6, 4)]),
        "mlp": (mlp, [(6, 5), (5, 4), (4,), (4, 3), (3,)]),
        "softmax": (softmax, [(6, 5)]),
        "layernorm": (layernorm, [(6, 5), (5,), (5,)]),
        "mean": (lambda x: x.mean(axis=0), [(6, 5)]),
        "mttkrp": (
            lambda B, C, D: jnp.einsum("ijk,jl,kl->il", B, C, D),
            [(4, 5, 6), (5, 3), (6, 3)],
        ),
    }


JAX_PROGRAMS = ["matmul_chain", "residual", "mlp", "softmax", "layernorm", "mean", "mttkrp"]


def jax_program(name: str, seed: int = 0) -> tuple[str, list[np.ndarray], np.ndarray]:
    """Program ``name`` as linalg text, float64 inputs and JAX's result."""
    jax = _need("jax")
    jax.config.update("jax_enable_x64", True)
    f, shapes = _jax_programs()[name]
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s) for s in shapes]
    stablehlo = str(jax.jit(f).lower(*args).compiler_ir("stablehlo"))
    text = _run(
        [tool("iree-opt"), "--chlo-legalize-to-stablehlo", "--iree-stablehlo-to-iree-input", "-"],
        stablehlo,
    )
    return text, args, np.asarray(jax.jit(f)(*args))


# -- ONNX -----------------------------------------------------------------------------------


def _onnx_models() -> dict[str, Any]:
    onnx = _need("onnx")
    from onnx import TensorProto, helper

    def model(name: str, nodes: list, inputs: list, outputs: list) -> Any:
        vi = helper.make_tensor_value_info
        g = helper.make_graph(
            nodes,
            name,
            [vi(n, TensorProto.DOUBLE, s) for n, s in inputs],
            [vi(n, TensorProto.DOUBLE, s) for n, s in outputs],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(m)
        return m

    node = helper.make_node
    return {
        "matmul_chain": model(
            "matmul_chain",
            [node("MatMul", ["a", "b"], ["ab"]), node("MatMul", ["ab", "c"], ["y"])],
            [("a", [6, 5]), ("b", [5, 4]), ("c", [4, 3])],
            [("y", [6, 3])],
        ),
        "mlp": model(
            "mlp",
            [
                node("MatMul", ["x", "w1"], ["h0"]),
                node("Add", ["h0", "b1"], ["h1"]),
                node("Relu", ["h1"], ["h"]),
                node("MatMul", ["h", "w2"], ["y0"]),
                node("Add", ["y0", "b2"], ["y"]),
            ],
            [("x", [6, 5]), ("w1", [5, 4]), ("b1", [4]), ("w2", [4, 3]), ("b2", [3])],
            [("y", [6, 3])],
        ),
        "softmax": model(
            "softmax", [node("Softmax", ["x"], ["y"], axis=1)], [("x", [6, 5])], [("y", [6, 5])]
        ),
        # layernorm as the primitive operations exporters write (the fused
        # LayerNormalization of opset 17 takes its statistics in float32 by default, and the
        # reference evaluator computes no other stash type)
        "layernorm": model(
            "layernorm",
            [
                node("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1),
                node("Sub", ["x", "m"], ["d"]),
                node("Mul", ["d", "d"], ["d2"]),
                node("ReduceMean", ["d2"], ["v"], axes=[1], keepdims=1),
                node("Add", ["v", "eps"], ["ve"]),
                node("Sqrt", ["ve"], ["s"]),
                node("Div", ["d", "s"], ["n"]),
                node("Mul", ["n", "g"], ["ng"]),
                node("Add", ["ng", "b"], ["y"]),
            ],
            [("x", [6, 5]), ("g", [5]), ("b", [5]), ("eps", [1])],
            [("y", [6, 5])],
        ),
        "mean": model(
            "mean",
            [node("ReduceMean", ["x"], ["y"], keepdims=0, axes=[0])],
            [("x", [6, 5])],
            [("y", [5])],
        ),
        "mttkrp": model(
            "mttkrp",
            [node("Einsum", ["B", "C", "D"], ["y"], equation="ijk,jl,kl->il")],
            [("B", [4, 5, 6]), ("C", [5, 3]), ("D", [6, 3])],
            [("y", [4, 3])],
        ),
    }


ONNX_PROGRAMS = ["matmul_chain", "mlp", "softmax", "layernorm", "mean", "mttkrp"]


def onnx_program(name: str, seed: int = 0) -> tuple[str, list[np.ndarray], np.ndarray]:
    """Model ``name`` as linalg text, float64 inputs and onnx's reference result."""
    onnx = _need("onnx")
    from onnx.reference import ReferenceEvaluator

    m = _onnx_models()[name]
    rng = np.random.default_rng(seed)
    names = [i.name for i in m.graph.input]
    shapes = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input]
    args = [rng.standard_normal(s) for s in shapes]
    if "eps" in names:
        args[names.index("eps")] = np.array([1e-5])
    want = ReferenceEvaluator(m).run(None, dict(zip(names, args, strict=True)))[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save(m, path)
        torch = _run([tool("iree-import-onnx"), str(path), "-o", "-"])
    text = _run(
        [
            tool("iree-opt"),
            "--torch-onnx-to-torch-backend-pipeline",
            "--torch-backend-to-linalg-on-tensors-backend-pipeline",
            "-",
        ],
        torch,
    )
    return text, args, np.asarray(want)
