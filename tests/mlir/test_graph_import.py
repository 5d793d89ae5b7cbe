"""``dl.mlir_function(text)``: MLIR graphs (what JAX and ONNX lower to) run as arrays
programs, and ``dl.from_mlir`` on canonical forms.

The producers' own programs (``producers.py``: JAX through ``iree-opt``, ONNX through
IREE's torch-mlir pipelines) import, run on ``Machine(2)`` and ``Machine(2, 2)`` and equal
the producer's result at rtol 1e-12. Hand-written graphs cover what the producers write
(multi-result generics, hoisted constants, selects, transposes, unit reshapes), and text
the readers cannot take is a ``NotationError`` naming the operation, never another
exception (a small fuzz).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from producers import JAX_PROGRAMS, ONNX_PROGRAMS, jax_program, onnx_program

import distal as dl

pytest.importorskip("xdsl", reason="the MLIR import needs xDSL: pip install 'distal[mlir]'")

MACHINES = [dl.Machine(2), dl.Machine(2, 2)]


def _run(text: str, args: list[np.ndarray], machine: dl.Machine) -> np.ndarray:
    fn = dl.mlir_function(text)
    sess = dl.Session("local", machine=machine)
    try:
        out = fn(*args, session=sess)
    except dl.NotSupportedYet as e:
        if "distal.numpy" in str(e):  # an operation that waits for distal.numpy's function
            pytest.skip(str(e))
        raise
    assert isinstance(out, dl.DArray)
    return out.get()


@pytest.mark.slow
@pytest.mark.parametrize("name", JAX_PROGRAMS)
def test_jax_programs_import_and_equal_jax(name: str) -> None:
    text, args, want = jax_program(name)
    for machine in MACHINES:
        got = _run(text, args, machine)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", ONNX_PROGRAMS)
def test_onnx_models_import_and_equal_the_reference_evaluator(name: str) -> None:
    text, args, want = onnx_program(name)
    for machine in MACHINES:
        got = _run(text, args, machine)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# -- hand-written graphs ----------------------------------------------------------------------

RELU_BIAS = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @layer(%x: tensor<6x5xf64>, %w: tensor<5x4xf64>, %b: tensor<4xf64>) -> tensor<6x4xf64> {
  %zero = arith.constant 0.0 : f64
  %two = arith.constant 2.0 : f64
  %e = tensor.empty() : tensor<6x4xf64>
  %z = linalg.fill ins(%zero : f64) outs(%e : tensor<6x4xf64>) -> tensor<6x4xf64>
  %xw = linalg.matmul ins(%x, %w : tensor<6x5xf64>, tensor<5x4xf64>)
                      outs(%z : tensor<6x4xf64>) -> tensor<6x4xf64>
  %h = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%xw, %b : tensor<6x4xf64>, tensor<4xf64>) outs(%e : tensor<6x4xf64>) {
  ^bb0(%a: f64, %c: f64, %o: f64):
    %s = arith.addf %a, %c : f64
    %d = arith.mulf %two, %s : f64
    %pos = arith.cmpf ogt, %d, %zero : f64
    %r = arith.select %pos, %d, %zero : f64
    linalg.yield %r : f64
  } -> tensor<6x4xf64>
  return %h : tensor<6x4xf64>
}
"""


def test_hoisted_constants_selects_and_a_bias_broadcast() -> None:
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((6, 5)), rng.standard_normal((5, 4)), rng.standard_normal(4)
    got = dl.mlir_function(RELU_BIAS)(x, w, b, session=dl.Session("local", machine=dl.Machine(2)))
    np.testing.assert_allclose(got.get(), np.maximum(2 * (x @ w + b), 0), rtol=1e-12)


TWO_RESULTS = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>
#r = affine_map<(d0, d1) -> (d0)>
func.func @two(%x: tensor<4x3xf64>, %y: tensor<3x4xf64>) -> (tensor<4x3xf64>, tensor<4xf64>) {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<4x3xf64>
  %v = tensor.empty() : tensor<4xf64>
  %z = linalg.fill ins(%zero : f64) outs(%v : tensor<4xf64>) -> tensor<4xf64>
  %p:2 = linalg.generic {indexing_maps = [#id, #t, #id, #r],
                         iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<4x3xf64>, tensor<3x4xf64>) outs(%e, %v : tensor<4x3xf64>, tensor<4xf64>) {
  ^bb0(%a: f64, %b: f64, %o: f64, %q: f64):
    %m = arith.mulf %a, %b : f64
    %ex = math.exp %a : f64
    linalg.yield %m, %ex : f64, f64
  } -> (tensor<4x3xf64>, tensor<4xf64>)
  %s = linalg.generic {indexing_maps = [#id, #r], iterator_types = ["parallel", "reduction"]}
      ins(%p#0 : tensor<4x3xf64>) outs(%z : tensor<4xf64>) {
  ^bb0(%a: f64, %o: f64):
    %t = math.sqrt %a : f64
    %u = arith.addf %o, %t : f64
    linalg.yield %u : f64
  } -> tensor<4xf64>
  %tt = tensor.empty() : tensor<3x4xf64>
  %tr = linalg.transpose ins(%p#0 : tensor<4x3xf64>) outs(%tt : tensor<3x4xf64>)
                         permutation = [1, 0]
  %ex = tensor.expand_shape %s [[0, 1]] output_shape [4, 1] : tensor<4xf64> into tensor<4x1xf64>
  %co = tensor.collapse_shape %ex [[0, 1]] : tensor<4x1xf64> into tensor<4xf64>
  return %p#0, %co : tensor<4x3xf64>, tensor<4xf64>
}
"""


def test_multi_result_generics_transposes_and_unit_reshapes() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.random((4, 3)) + 0.5, rng.random((3, 4)) + 0.5
    prod, s = dl.mlir_function(TWO_RESULTS, name="two")(x, y)
    np.testing.assert_allclose(prod.get(), x * y.T, rtol=1e-12)
    np.testing.assert_allclose(s.get(), np.sqrt(x * y.T).sum(axis=1), rtol=1e-12)


def test_a_result_it_cannot_compute_is_refused_only_when_used() -> None:
    text = TWO_RESULTS.replace(
        "%ex = math.exp %a : f64",
        "%i = linalg.index 0 : index\n    %j = arith.index_cast %i : index to i64\n"
        "    %ex = arith.sitofp %j : i64 to f64",
    )
    x, y = np.full((4, 3), 2.0), np.full((3, 4), 2.0)
    _, s = dl.mlir_function(text)(x, y)  # the index result is computed but never read
    np.testing.assert_allclose(s.get(), np.full(4, 6.0), rtol=1e-12)
    used = text.replace(
        "return %p#0, %co : tensor<4x3xf64>, tensor<4xf64>",
        "return %p#1, %co : tensor<4xf64>, tensor<4xf64>",
    ).replace("-> (tensor<4x3xf64>, tensor<4xf64>) {", "-> (tensor<4xf64>, tensor<4xf64>) {")
    with pytest.raises(dl.NotSupportedYet, match=r"linalg\.index"):
        dl.mlir_function(used)(x, y)


def test_arguments_are_checked() -> None:
    fn = dl.mlir_function(RELU_BIAS)
    with pytest.raises(dl.InputError, match="takes 3 arguments"):
        fn(np.ones((6, 5)))
    with pytest.raises(dl.InputError, match=r"argument 1 .* shape"):
        fn(np.ones((6, 5)), np.ones((4, 4)), np.ones(4))
    with pytest.raises(dl.InputError, match="dtype"):
        fn(np.ones((6, 5), np.float32), np.ones((5, 4)), np.ones(4))


def test_several_functions_need_a_name() -> None:
    other = RELU_BIAS.replace("@layer", "@other").replace("#id", "#id2").replace("#row", "#row2")
    text = RELU_BIAS + other
    with pytest.raises(dl.NotationError, match="name="):
        dl.mlir_function(text)
    assert dl.mlir_function(text, name="other").name == "other"
    with pytest.raises(dl.NotationError, match="no function @nope"):
        dl.mlir_function(text, name="nope")


def test_an_operation_it_does_not_read_is_named() -> None:
    text = RELU_BIAS.replace(
        "%e = tensor.empty() : tensor<6x4xf64>", '%e = "my.op"() : () -> tensor<6x4xf64>'
    )
    with pytest.raises(dl.NotationError, match=r"my\.op"):
        dl.mlir_function(text)
    text = RELU_BIAS.replace("%d = arith.mulf %two, %s : f64", "%d = math.cos %s : f64")
    with pytest.raises(dl.NotationError, match=r"math\.cos"):
        dl.mlir_function(text)(np.ones((6, 5)), np.ones((5, 4)), np.ones(4))


# -- dl.from_mlir on canonical forms ----------------------------------------------------------

CANONICAL = """
#s = affine_map<(d0, d1) -> ()>
#id = affine_map<(d0, d1) -> (d0, d1)>
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @forward(%X: tensor<6x5xf64>, %W: tensor<5x4xf64>) -> tensor<6x4xf64> {
  %cst = arith.constant 1.5 : f64
  %0 = tensor.empty() : tensor<6x4xf64>
  %1 = linalg.generic {indexing_maps = [#s, #id], iterator_types = ["parallel", "parallel"]}
      ins(%cst : f64) outs(%0 : tensor<6x4xf64>) {
  ^bb0(%in: f64, %out: f64):
    linalg.yield %in : f64
  } -> tensor<6x4xf64>
  %2 = linalg.generic {indexing_maps = [#a, #b, #c],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%X, %W : tensor<6x5xf64>, tensor<5x4xf64>) outs(%1 : tensor<6x4xf64>) {
  ^bb0(%in: f64, %in_0: f64, %out: f64):
    %4 = arith.mulf %in, %in_0 : f64
    %5 = arith.addf %out, %4 : f64
    linalg.yield %5 : f64
  } -> tensor<6x4xf64>
  return %2 : tensor<6x4xf64>
}
"""


def test_from_mlir_reads_a_generalized_fill() -> None:
    (Y,) = dl.from_mlir(CANONICAL)
    assert re.fullmatch(
        r"\w+\(i0,i1\) = \(1\.5 \+ X\(i0,k2\) \* W\(k2,i1\)\)", repr(Y.assignment)
    ), Y.assignment
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal((5, 4))
    fn = dl.mlir_function(CANONICAL)
    np.testing.assert_allclose(fn(x, w).get(), 1.5 + x @ w, rtol=1e-12)


def test_from_mlir_a_yield_from_outside_the_body_is_a_notation_error() -> None:
    text = CANONICAL.replace("linalg.yield %in : f64", "linalg.yield %cst2 : f64").replace(
        "%cst = arith.constant 1.5 : f64",
        "%cst = arith.constant 1.5 : f64\n  %cst2 = arith.addf %cst, %cst : f64",
    )
    with pytest.raises(dl.NotationError):
        dl.from_mlir(text)


# -- a small fuzz: mutated text is read or refused with a DistalError ---------------------------

_SEEDS = [RELU_BIAS, TWO_RESULTS, CANONICAL]
_TOKENS = [
    "linalg.generic",
    "arith.addf",
    "math.exp",
    "tensor.empty",
    "%x",
    "%0",
    "f32",
    "6x4",
    "[1, 0]",
    "(d0)",
    "->",
    "}",
    "{",
    "0.0",
    "ins(",
    "outs(",
]


_FUZZ_SESSION: list[dl.Session] = []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(_SEEDS),
    cut=st.integers(0, 10_000),
    length=st.integers(0, 40),
    token=st.sampled_from(["", *_TOKENS]),
)
def test_fuzzed_text_is_read_or_a_distal_error(
    seed: str, cut: int, length: int, token: str
) -> None:
    k = cut % max(len(seed), 1)
    text = seed[:k] + token + seed[k + length :]
    if not _FUZZ_SESSION:
        _FUZZ_SESSION.append(dl.Session("local", machine=dl.Machine(2)))
    sess = _FUZZ_SESSION[0]
    for reader in (
        lambda t: dl.from_mlir(t),
        lambda t: dl.mlir_function(t)(*_args_for(t), session=sess),
    ):
        try:
            reader(text)
        except dl.DistalError:
            pass


def _args_for(text: str) -> list[np.ndarray]:
    """Arguments of the right shapes for the first function of ``text`` (ones)."""
    m = re.search(r"func\.func @\w+\(([^)]*)\)", text)
    if m is None:
        return []
    shapes = re.findall(r"tensor<((?:\d+x)*)f64>", m.group(1))
    return [np.ones(tuple(int(d) for d in s.split("x") if d)) for s in shapes]


@pytest.mark.slow
@pytest.mark.mpi
def test_a_jax_mlp_runs_on_mpi_ranks(tmp_path) -> None:
    from pathlib import Path

    from mpi_jobs import run_job

    text, args, want = jax_program("mlp")
    (tmp_path / "mlp.mlir").write_text(text)
    np.savez(tmp_path / "mlp.npz", want=want, **{f"arg{k}": a for k, a in enumerate(args)})
    job = run_job(
        2,
        str(tmp_path / "mlp.mlir"),
        str(tmp_path / "mlp.npz"),
        script=Path(__file__).parent / "_mlir_function_mpi_job.py",
        timeout=180,
    )
    assert job.rc == 0, job
    (line,) = job.lines()
    assert line["nprocs"] == 2
    assert line["rel_err"] <= 1e-12


def test_an_imported_graph_runs_on_dask_workers() -> None:
    distributed = pytest.importorskip("distributed", reason="needs distributed (dask extra)")
    rng = np.random.default_rng(4)
    x, w, b = rng.standard_normal((6, 5)), rng.standard_normal((5, 4)), rng.standard_normal(4)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        sess = dl.Session("dask", client=client, machine=dl.Machine(2), progress=False)
        got = dl.mlir_function(RELU_BIAS)(x, w, b, session=sess).get()
        sess.close()
    np.testing.assert_allclose(got, np.maximum(2 * (x @ w + b), 0), rtol=1e-12)
