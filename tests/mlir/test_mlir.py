"""MLIR out and in: ``kernel.to_mlir(p)`` and ``dl.from_mlir(text)``.

Every algorithm of the library exports for every processor as text xDSL parses and
verifies, and reads back as the statement it came from (terms, coefficients, tensors, index
patterns and formats, modulo the variables' names); the block shapes are what the plan's
``Compute`` instructions give the processor. A hand-written linalg file runs distributed
and equals numpy; text the reader does not take is a ``NotationError`` naming the operation.
``dl.compile(s, leaf="iree")`` runs the dense leaves as IREE-compiled modules, one per leaf
shape, equal to the default leaves (those tests skip where IREE is not installed).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from mlir_cases import DENSE, SPARSE

import distal as dl
from distal.lang.concrete import Statement, concretize
from distal.mlir import _xdsl
from distal.mlir.types import encoding, parse_encoding
from reference import apply_schedule, cases

if not os.environ.get("CI"):  # under CI the mlir extra is installed: a missing xDSL fails
    pytest.importorskip("xdsl", reason="the MLIR import needs xDSL: pip install 'distal[mlir]'")

al = dl.algorithms
M = dl.Machine
DATA = Path(__file__).parent.parent / "data"


def _kernels() -> dict[str, dl.Kernel | dl.BoundKernel]:
    out: dict[str, dl.Kernel | dl.BoundKernel] = {n: f().compile() for n, f in DENSE.items()}
    for n, f in SPARSE.items():
        alg, inputs = f()
        out[n] = alg.compile().bind(inputs)
    return out


KERNELS = _kernels()


def shape_of(st: Statement) -> tuple:
    """A statement's structure modulo the variables' names: per term its coefficient and
    each factor's tensor, dtype, format and index pattern (output variables by position,
    summed ones by first use in the term)."""
    lhs = {v: f"o{n}" for n, v in enumerate(st.lhs_vars)}
    terms = []
    for t in st.terms:
        names = dict(lhs)
        factors = []
        for f in t.factors:
            for v in f.indices:
                names.setdefault(v, f"s{len(names) - len(lhs)}")
            fmt = f.tensor.format
            factors.append(
                (
                    f.tensor.name,
                    str(f.tensor.dtype),
                    fmt.levels,
                    fmt.order,
                    tuple(names[v] for v in f.indices),
                )
            )
        terms.append((t.coeff, tuple(factors)))
    out = st.output
    return (out.name, str(out.dtype), out.format.levels, len(st.lhs_vars), tuple(terms))


def _read_back(text: str) -> Statement:
    (out,) = dl.from_mlir(text)
    assert out.assignment is not None
    return concretize(out.assignment)


# -- export --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KERNELS))
def test_every_algorithm_exports_for_every_processor_as_verified_mlir(name: str) -> None:
    kernel = KERNELS[name]
    for p in range(kernel.nprocs):
        text = kernel.to_mlir(p)
        module = _xdsl.parse(text)
        module.verify()
        (fn,) = module.ops
        st = kernel.schedule.statement
        # a sparse output is written into a tensor.empty: no initial-value argument
        fresh = not st.output.format.is_dense
        want = [t.name for t in st.inputs()] + ([] if fresh else [st.output.name])
        assert [a.name_hint for a in fn.body.block.args] == want
        generics = [op for op in fn.body.block.ops if op.name == "linalg.generic"]
        works = any(op.__class__.__name__ == "Compute" for op in kernel.program(p).ops(p))
        # an element-wise statement (nothing summed) is one generic adding its terms
        elementwise = all(not (t.summed & t.used()) for t in st.terms)
        assert len(generics) == ((1 if elementwise else len(st.terms)) if works else 0)


@pytest.mark.parametrize("name", list(KERNELS))
def test_every_algorithm_reads_back_as_its_statement(name: str) -> None:
    kernel = KERNELS[name]
    assert shape_of(_read_back(kernel.to_mlir(0))) == shape_of(kernel.schedule.statement)


def test_summa_leaf_is_one_box_with_the_block_shapes_of_its_compute() -> None:
    """SUMMA on 2 x 2 with 8 x 8 matrices: processor 3 computes A[4:8, 4:8] in two steps
    over k; each leaf call sees 4 x 4 blocks of B and C."""
    text = KERNELS["summa"].to_mlir(3)
    assert (
        "func.func @A_leaf_p3(%B: tensor<4x4xf64>, %C: tensor<4x4xf64>, %A: tensor<4x4xf64>)"
        in text
    )
    assert "this processor makes 2, over the boxes:" in text
    assert "//   i[4,8) j[4,8) k[0,4)\n//   i[4,8) j[4,8) k[4,8)" in text
    assert (
        "indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> "
        '(d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", '
        '"parallel", "reduction"]'
    ) in text
    assert "arith.mulf" in text
    assert "arith.addf" in text


def test_row_1d_leaf_sees_one_row_block_and_a_chunk_of_c() -> None:
    """row_1d(12 x 6 x 9) on 3 processors, k in 3 steps: processor 1's leaf is rows 4:8 of
    B and A, one 3-row chunk of C per step."""
    k = al.row_1d(12, 6, 9, machine=M(3)).compile()
    text = k.to_mlir(1)
    assert "(%B: tensor<4x3xf64>, %C: tensor<3x6xf64>, %A: tensor<4x6xf64>)" in text


def test_ragged_leaf_boxes_give_dynamic_extents() -> None:
    """k = 10 in 3 steps: chunks of 4, 4 and 2, so k is dynamic; i and j are not."""
    k = al.summa(10, machine=M(2, 2), steps=3).compile()
    text = k.to_mlir(0)
    assert "(%B: tensor<5x?xf64>, %C: tensor<?x5xf64>, %A: tensor<5x5xf64>)" in text
    _xdsl.parse(text).verify()
    with pytest.raises(dl.NotationError, match="dynamic extent"):
        dl.from_mlir(text)


def test_processor_without_work_returns_its_initial_output() -> None:
    """Rows of 3 over 4 processors: processor 3 has no rows."""
    k = al.row_1d(3, 4, 4, machine=M(4)).compile()
    text = k.to_mlir(3)
    assert "linalg" not in text
    assert "return %A : tensor<0x0xf64>" in text
    assert "no leaf work" in text
    _xdsl.parse(text).verify()


def test_spmv_block_is_the_hull_of_the_processors_entries_with_the_csr_encoding() -> None:
    dense = np.zeros((6, 5))
    dense[0, 1], dense[1, 3], dense[4, 0], dense[5, 2] = 1.0, 2.0, 3.0, 4.0
    k = al.spmv((6, 5), machine=M(2)).compile().bind({"B": dense})
    csr = "#sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>"
    # processor 0 owns rows 0..2 and touches rows 0, 1 (columns 1 and 3); processor 1 owns
    # rows 3..5 and touches rows 4, 5 (columns 0 and 2); each writes its owned rows in
    # place (a row without entries as a zero), so its output block is the row hull
    sig = f"(%B: tensor<3x3xf64, {csr}>, %c: tensor<3xf64>, %a: tensor<3xf64>)"
    assert sig in k.to_mlir(0)
    assert sig in k.to_mlir(1)
    assert "entries (2 B), all steps, over i[0,3) j[1,4)" in k.to_mlir(0)
    assert "entries (2 B), all steps, over i[3,6) j[0,3)" in k.to_mlir(1)


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        (dl.Format("dc"), "(d0, d1) -> (d0 : dense, d1 : compressed)"),
        (dl.Format("dc", order=(1, 0)), "(d0, d1) -> (d1 : dense, d0 : compressed)"),
        (dl.Format("cc"), "(d0, d1) -> (d0 : compressed, d1 : compressed)"),
        (dl.Format("qs"), "(d0, d1) -> (d0 : compressed(nonunique), d1 : singleton)"),
        (
            dl.Format("qss"),
            "(d0, d1, d2) -> (d0 : compressed(nonunique), d1 : singleton(nonunique), "
            "d2 : singleton)",
        ),
        (dl.Format("dcc"), "(d0, d1, d2) -> (d0 : dense, d1 : compressed, d2 : compressed)"),
        (dl.Format("dd", order=(1, 0)), "(d0, d1) -> (d1 : dense, d0 : dense)"),
    ],
)
def test_formats_map_to_encodings_and_back(fmt: dl.Format, text: str) -> None:
    enc = encoding(fmt)
    assert enc == f"#sparse_tensor.encoding<{{ map = {text} }}>"
    assert parse_encoding(f"{{ map = {text} }}", fmt.ndim, "t") == fmt
    assert encoding(dl.Format("dd")) is None


def test_encodings_distal_has_no_format_for_are_refused() -> None:
    with pytest.raises(dl.NotationError, match="loose_compressed"):
        parse_encoding("{ map = (d0, d1) -> (d0 : dense, d1 : loose_compressed) }", 2, "%B")
    with pytest.raises(dl.NotationError, match="block and affine"):
        parse_encoding("{ map = (d0, d1) -> (d0 floordiv 2 : dense, d1 : compressed) }", 2, "%B")
    with pytest.raises(dl.NotationError, match="nonordered"):
        parse_encoding("{ map = (d0, d1) -> (d0 : dense, d1 : compressed(nonordered)) }", 2, "x")


def _one_processor(assign: str, dtype: type = np.float64, idtype: type | None = None):
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (3, 4), dtype=dtype)
    B = dl.Tensor("B", (3, 5), dtype=idtype or dtype)
    C = dl.Tensor("C", (5, 4), dtype=idtype or dtype)
    D = dl.Tensor("D", (3, 4), dtype=idtype or dtype)
    env = {"A": A, "B": B, "C": C, "D": D, "i": i, "j": j, "k": k}
    exec(assign, env)
    return A


def test_coefficients_subtraction_and_terms_without_a_summed_variable() -> None:
    A = _one_processor("A[i, j] = B[i, k] * C[k, j] - 2 * D[i, j] - D[i, j] * D[i, j]")
    k = dl.compile(dl.schedule(A))
    text = k.to_mlir(0)
    assert text.count("linalg.generic") == 3
    assert "arith.subf" in text
    assert "arith.constant -2.00000000000000000e+00 : f64" in text
    assert shape_of(_read_back(text)) == shape_of(k.schedule.statement)


def test_integer_statements_use_integer_arith_and_inputs_are_cast_to_the_output_type() -> None:
    A = _one_processor("A[i, j] = B[i, k] * C[k, j]", dtype=np.int64)
    text = dl.compile(dl.schedule(A)).to_mlir(0)
    assert "arith.muli" in text
    assert "arith.addi" in text
    assert "i64" in text
    assert shape_of(_read_back(text)) == shape_of(concretize(A.assignment))
    A = _one_processor("A[i, j] = B[i, k] * C[k, j]", dtype=np.float64, idtype=np.float32)
    text = dl.compile(dl.schedule(A)).to_mlir(0)
    assert text.count("arith.extf") == 2
    assert "%B: tensor<3x5xf32>" in text
    _xdsl.parse(text).verify()


def test_a_term_that_runs_in_some_leaf_calls_only_is_not_exported() -> None:
    """``D`` does not depend on ``k``: it is added in the step whose k-chunk starts at 0."""
    m = M(1)
    i, j, k, ko, ki = dl.index_vars("i j k ko ki")
    A = dl.Tensor("A", (3, 4), dist="ij -> 0", machine=m)
    B = dl.Tensor("B", (3, 6), dist="ik -> 0", machine=m)
    C = dl.Tensor("C", (6, 4), dist="kj -> 0", machine=m)
    D = dl.Tensor("D", (3, 4), dist="ij -> 0", machine=m)
    A[i, j] = B[i, k] * C[k, j] + D[i, j]
    s = dl.schedule(A).divide(k, ko, ki, 2).reorder([ko, i, j]).communicate([A, B, C, D], ko)
    with pytest.raises(dl.NotSupportedYet, match=r"D\(i,j\) runs in 1 of its 2 leaf calls"):
        dl.compile(s).to_mlir(0)


def test_bad_processor_and_unbound_sparse_kernel() -> None:
    with pytest.raises(dl.InputError, match="processor 4 does not exist"):
        KERNELS["summa"].to_mlir(4)
    with pytest.raises(dl.InputError, match=r"sparse input\(s\) \['B'\]: bind them first"):
        al.spmv((8, 8), machine=M(2)).compile().to_mlir(0)


# -- import --------------------------------------------------------------------------------


def test_a_hand_written_linalg_file_runs_distributed_and_equals_numpy() -> None:
    machine = M(2)
    Y, u, PQ = dl.from_mlir((DATA / "linalg_ops.mlir").read_text(), machine=machine)
    assert [t.name for t in (Y, u, PQ)] == ["Y", "u", "PQ"]
    rng = np.random.default_rng(7)
    x = {
        n: rng.standard_normal(s)
        for n, s in [
            ("X", (6, 5)),
            ("W", (5, 4)),
            ("R", (6, 4)),
            ("arg3", (6, 5)),
            ("v", (5,)),
            ("P", (3, 4, 2)),
            ("Q", (3, 2, 5)),
        ]
    }
    want = {
        "Y": x["X"] @ x["W"] + 0.5 * x["R"] - x["R"] * x["R"],
        "u": x["arg3"] @ x["v"],
        "PQ": np.einsum("bik,bkj->bij", x["P"], x["Q"]),
    }
    for out in (Y, u, PQ):
        assert out.dist == "auto"
        assert out.machine is machine
        kernel = dl.compile(dl.autoschedule(out, machine))
        names = [t.name for t in kernel.schedule.statement.inputs()]
        res = kernel.run({n: x[n] for n in names})
        np.testing.assert_allclose(res.value, want[out.name], rtol=1e-12, atol=0)
        assert kernel.nprocs == 2


def test_an_exported_kernel_reimported_runs_to_the_same_numbers() -> None:
    """Processor 0 of SUMMA on 2 x 2: its leaf, read back, is a 4 x 4 x 4 matrix product."""
    (A,) = dl.from_mlir(KERNELS["summa"].to_mlir(0))
    B, C = (t for t in concretize(A.assignment).inputs())
    assert (A.shape, B.shape, C.shape) == ((4, 4), (4, 4), (4, 4))
    rng = np.random.default_rng(3)
    b, c = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    got = dl.compile(dl.schedule(A)).run({"B": b, "C": c}).value
    np.testing.assert_allclose(got, b @ c, rtol=1e-12)


def test_unnamed_arguments_are_arg0_arg1_and_named_ops_read_as_contractions() -> None:
    text = """
    func.func @f(%0: tensor<3x4xf32>, %1: tensor<4xf32>) -> tensor<3xf32> {
      %e = tensor.empty() : tensor<3xf32>
      %r = linalg.matvec ins(%0, %1 : tensor<3x4xf32>, tensor<4xf32>)
                         outs(%e : tensor<3xf32>) -> tensor<3xf32>
      return %r : tensor<3xf32>
    }"""
    (r,) = dl.from_mlir(text)
    st = concretize(r.assignment)
    assert [t.name for t in st.inputs()] == ["arg0", "arg1"]
    assert r.dtype == np.float32
    assert r.dist is None
    assert repr(r.assignment) == "r(i0) = arg0(i0,k1) * arg1(k1)"


def test_a_fill_with_a_constant_and_an_output_argument_as_initial_value() -> None:
    text = """
    func.func @f(%B: tensor<2x3xf64>, %C: tensor<3x2xf64>, %A: tensor<2x2xf64>)
        -> (tensor<2x2xf64>, tensor<2x2xf64>) {
      %c = arith.constant 1.5 : f64
      %e = tensor.empty() : tensor<2x2xf64>
      %f = linalg.fill ins(%c : f64) outs(%e : tensor<2x2xf64>) -> tensor<2x2xf64>
      %D = linalg.matmul ins(%B, %C : tensor<2x3xf64>, tensor<3x2xf64>)
                         outs(%f : tensor<2x2xf64>) -> tensor<2x2xf64>
      %m = linalg.matmul ins(%B, %C : tensor<2x3xf64>, tensor<3x2xf64>)
                         outs(%A : tensor<2x2xf64>) -> tensor<2x2xf64>
      return %D, %m : tensor<2x2xf64>, tensor<2x2xf64>
    }"""
    D, A = dl.from_mlir(text)
    assert repr(D.assignment) == "D(i0,i1) = (1.5 + B(i0,k2) * C(k2,i1))"
    assert A.name == "A"
    assert repr(A.assignment) == "A(i3,i4) = B(i3,k5) * C(k5,i4)"


def test_one_initial_value_for_several_ops_and_elementwise_named_ops() -> None:
    """Values are immutable: two ops on one ``tensor.empty`` are two outputs; ``linalg.add``
    overwrites its ``outs`` (its body does not read it); ``linalg.dot`` sums into a 0-d."""
    text = """
    func.func @f(%a: tensor<3x4xf64>, %b: tensor<3x4xf64>, %x: tensor<5xf64>, %y: tensor<5xf64>)
        -> (tensor<3x4xf64>, tensor<3x4xf64>, tensor<f64>, tensor<3x4xf64>) {
      %e = tensor.empty() : tensor<3x4xf64>
      %s = linalg.sub ins(%a, %b : tensor<3x4xf64>, tensor<3x4xf64>)
                          outs(%e : tensor<3x4xf64>) -> tensor<3x4xf64>
      %m = linalg.mul ins(%a, %b : tensor<3x4xf64>, tensor<3x4xf64>)
                          outs(%e : tensor<3x4xf64>) -> tensor<3x4xf64>
      %e0 = tensor.empty() : tensor<f64>
      %d = linalg.dot ins(%x, %y : tensor<5xf64>, tensor<5xf64>)
                      outs(%e0 : tensor<f64>) -> tensor<f64>
      %p = linalg.add ins(%a, %b : tensor<3x4xf64>, tensor<3x4xf64>)
                          outs(%s : tensor<3x4xf64>) -> tensor<3x4xf64>
      return %s, %m, %d, %p : tensor<3x4xf64>, tensor<3x4xf64>, tensor<f64>, tensor<3x4xf64>
    }"""
    got = [repr(t.assignment) for t in dl.from_mlir(text)]
    assert got == [
        "s(i0,i1) = (a(i0,i1) + -b(i0,i1))",
        "m(i2,i3) = a(i2,i3) * b(i2,i3)",
        "d() = x(k4) * y(k4)",
        "p(i0,i1) = (a(i0,i1) + b(i0,i1))",
    ]


def test_sparse_encodings_read_as_formats() -> None:
    text = """
    #CSC = #sparse_tensor.encoding<{ map = (d0, d1) -> (d1 : dense, d0 : compressed) }>
    func.func @f(%B: tensor<4x5xf64, #CSC>, %c: tensor<5xf64>) -> tensor<4xf64> {
      %e = tensor.empty() : tensor<4xf64>
      %r = linalg.matvec ins(%B, %c : tensor<4x5xf64, #CSC>, tensor<5xf64>)
                         outs(%e : tensor<4xf64>) -> tensor<4xf64>
      return %r : tensor<4xf64>
    }"""
    (r,) = dl.from_mlir(text)
    B = concretize(r.assignment).inputs()[0]
    assert B.format == dl.Format("dc", order=(1, 0))


def _wrap(body: str, args: str = "%B: tensor<4x4xf64>, %C: tensor<4x4xf64>") -> str:
    return f"""
    func.func @f({args}) -> tensor<4x4xf64> {{
      %e = tensor.empty() : tensor<4x4xf64>
      {body}
      return %r : tensor<4x4xf64>
    }}"""


_GENERIC = """%r = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> ({m})>,
          affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}}
          ins(%B : tensor<4x4xf64>) outs(%e : tensor<4x4xf64>) {{
        ^bb0(%b: f64, %o: f64):
          {body}
          linalg.yield %s : f64
      }} -> tensor<4x4xf64>"""


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (_wrap('%r = "foo.bar"(%B) : (tensor<4x4xf64>) -> tensor<4x4xf64>'), "foo.bar"),
        (
            _wrap(
                "%r = linalg.transpose ins(%B : tensor<4x4xf64>) outs(%e : tensor<4x4xf64>) "
                "permutation = [1, 0]"
            ),
            "linalg.transpose",
        ),
        (
            _wrap(_GENERIC.format(m="d0, d1", body="%s = arith.divf %o, %b : f64")),
            r"arith\.divf in the body of linalg\.generic",
        ),
        (
            _wrap(
                _GENERIC.format(
                    m="d0, d1", body="%t = math.exp %b : f64\n%s = arith.addf %o, %t : f64"
                )
            ),
            r"math\.exp",
        ),
        (
            _wrap(_GENERIC.format(m="d0 + d1, d1", body="%s = arith.addf %o, %b : f64")),
            r"linalg\.generic: indexing map .* has the result \(d0 \+ d1\)",
        ),
        (
            _wrap(_GENERIC.format(m="d0, d1", body="%s = arith.mulf %o, %b : f64")),
            r"linalg\.generic: its body must add to the output value once",
        ),
        (
            _wrap(
                "%m = linalg.matmul ins(%B, %C : tensor<4x4xf64>, tensor<4x4xf64>) "
                "outs(%e : tensor<4x4xf64>) -> tensor<4x4xf64>\n"
                "%r = linalg.matmul ins(%m, %C : tensor<4x4xf64>, tensor<4x4xf64>) "
                "outs(%e : tensor<4x4xf64>) -> tensor<4x4xf64>"
            ),
            r"linalg\.matmul: reads a value that is not a function argument",
        ),
        (
            _wrap(
                "%r = linalg.matmul ins(%B, %C : tensor<?x4xf64>, tensor<4x4xf64>) "
                "outs(%e : tensor<4x4xf64>) -> tensor<4x4xf64>",
                args="%B: tensor<?x4xf64>, %C: tensor<4x4xf64>",
            ),
            r"argument %B of @f has a dynamic extent",
        ),
        (_wrap("%r = linalg.matmul ins(%B, %C : tensor<4x4xf64>"), r"linalg\.matmul"),
        ("func.func @f() { \n  %x = arith.addf 1 2\n}", r"arith\.addf"),
        ("this is not MLIR", "cannot read MLIR"),
        (
            _wrap(
                "%r = linalg.matmul ins(%B, %C : tensor<4x4xf64>, tensor<4x4xf64>) "
                "outs(%B : tensor<4x4xf64>) -> tensor<4x4xf64>"
            ),
            r"argument %B of @f is both read and accumulated into",
        ),
    ],
)
def test_text_it_cannot_read_is_a_notation_error_naming_the_operation(
    text: str, match: str
) -> None:
    with pytest.raises(dl.NotationError, match=match):
        dl.from_mlir(text)


def test_without_xdsl_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _xdsl.context.cache_clear()
    monkeypatch.setitem(sys.modules, "xdsl", None)
    try:
        with pytest.raises(dl.NotSupportedYet, match=r"pip install 'distal\[mlir\]'"):
            dl.from_mlir(_wrap(""))
    finally:
        monkeypatch.undo()
        _xdsl.context.cache_clear()


# -- IREE leaves -----------------------------------------------------------------------------


def _iree() -> None:
    """Skip without IREE, except under CI (``CI`` set), where the ``mlir`` extra is part of
    the test install: there a missing or broken IREE fails."""
    if os.environ.get("CI"):
        import iree.compiler
        import iree.runtime  # noqa: F401

        return
    pytest.importorskip("iree.compiler", reason="IREE leaves need iree-base-compiler")
    pytest.importorskip("iree.runtime", reason="IREE leaves need iree-base-runtime")


@pytest.mark.parametrize(
    "make",
    [
        lambda: al.summa(24, machine=M(2, 2)),
        lambda: al.ttm((6, 5, 4), 3, machine=M(2)),
        lambda: al.mttkrp((4, 4, 4), 3, machine=M(2, 1, 1)),
        lambda: al.inner_product((5, 4, 3), machine=M(2)),
        lambda: al.contraction_4d(4, 4, 2, 2, 3, 2, machine=M(2, 2)),
    ],
    ids=["summa", "ttm", "mttkrp", "inner_product", "contraction_4d"],
)
def test_iree_leaves_equal_the_default_leaves(make) -> None:
    _iree()
    alg = make()
    inputs = alg.inputs(1)
    kernel = dl.compile(alg.schedule, leaf="iree")
    assert kernel.leaf == "iree"
    got = kernel.run(inputs)
    want = dl.compile(alg.schedule).run(inputs)
    np.testing.assert_allclose(got.value, want.value, rtol=1e-12, atol=0)
    np.testing.assert_allclose(got.value, alg.reference(inputs), rtol=1e-12, atol=1e-13)
    assert got.stats == kernel.stats()


def test_iree_leaves_compile_once_per_leaf_shape() -> None:
    """SUMMA 2 x 2 on 16 x 16 with k in 2 steps: eight leaf calls of one shape (8x8x8)."""
    _iree()
    from distal.kernels import iree

    iree.clear_cache()
    alg = al.summa(16, machine=M(2, 2))
    kernel = dl.compile(alg.schedule, leaf="iree")
    inputs = alg.inputs(2)
    kernel.run(inputs)
    assert iree.cache_info() == iree.CacheInfo(compiled=1, hits=7)
    kernel.run(inputs)
    assert iree.cache_info() == iree.CacheInfo(compiled=1, hits=15)
    ragged = dl.compile(al.summa(10, machine=M(2, 2), steps=3).schedule, leaf="iree")
    ragged.run(al.summa(10, machine=M(2, 2), steps=3).inputs(0))
    assert iree.cache_info().compiled == 3  # k-chunks of 4 and of 2, i and j blocks of 5


def test_iree_leaves_of_a_statement_with_coefficients_and_a_gated_term() -> None:
    """``D`` is added in the k-step that starts at 0 only; float32 and int64 statements."""
    _iree()
    m = M(2)
    i, j, k, io, ii, ko, ki = dl.index_vars("i j k io ii ko ki")
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5), (np.int64, 0)):
        A = dl.Tensor("A", (6, 4), dist="ij -> i", machine=m, dtype=dtype)
        B = dl.Tensor("B", (6, 8), dist="ik -> i", machine=m, dtype=dtype)
        C = dl.Tensor("C", (8, 4), dist="kj -> k", machine=m, dtype=dtype)
        D = dl.Tensor("D", (6, 4), dist="ij -> i", machine=m, dtype=dtype)
        A[i, j] = 3 * B[i, k] * C[k, j] - D[i, j]
        s = (
            dl.schedule(A)
            .distribute([i], [io], [ii], m)
            .divide(k, ko, ki, 2)
            .reorder([ko, ii, j])
            .communicate([A, D], io)
            .communicate([B, C], ko)
        )
        rng = np.random.default_rng(5)
        x = {
            n: rng.integers(-4, 5, t.shape).astype(dtype) for n, t in [("B", B), ("C", C), ("D", D)]
        }
        got = dl.compile(s, leaf="iree").run(x).value
        want = 3 * x["B"] @ x["C"] - x["D"]
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=0)


def test_iree_leaf_errors() -> None:
    leaves = r"\['default', 'iree', 'iree-cuda'\]"
    with pytest.raises(dl.ScheduleError, match=rf"leaf 'tvm' is not one of {leaves}"):
        dl.compile(al.summa(8, machine=M(2, 2)).schedule, leaf="tvm")
    with pytest.raises(dl.NotSupportedYet, match="leaf='iree' compiles dense leaves"):
        dl.compile(al.spmv((8, 8), machine=M(2)).schedule, leaf="iree")


def test_without_iree_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "iree.compiler", None)
    with pytest.raises(dl.NotSupportedYet, match=r"leaf='iree' needs IREE .*distal\[mlir\]"):
        dl.compile(al.summa(8, machine=M(2, 2)).schedule, leaf="iree")


def test_a_fused_group_of_the_arrays_exports_as_one_generic() -> None:
    """An arrays program's fused element-wise chain is one statement of several terms, and
    one ``linalg.generic`` whose body adds them; it reads back as the same statement."""
    sess = dl.Session("local", machine=2)
    a, b = np.arange(6.0), np.linspace(0.0, 1.0, 6)
    x, y = sess.asarray(a), sess.asarray(b)
    z = x * 2.0 + y * x - 3.0 * y + 0.5
    np.testing.assert_allclose(z.get(), a * 2.0 + b * a - 3.0 * b + 0.5, rtol=1e-12)
    (kernel,) = sess.arrays_program().kernels.values()
    st = kernel.schedule.statement
    assert len(st.terms) == 4
    text = kernel.to_mlir(0)
    module = _xdsl.parse(text)
    module.verify()
    (fn,) = module.ops
    assert [op.name for op in fn.body.block.ops].count("linalg.generic") == 1
    assert shape_of(_read_back(text)) == shape_of(st)


def test_iree_cuda_leaves_compile_for_cuda_and_run_where_a_device_is() -> None:
    """``leaf="iree-cuda"``: the same leaf modules compiled for CUDA (no device needed to
    compile: checked here on every machine); running them needs a device, so without one
    compiling a kernel with it is a NotSupportedYet saying so, and with one the results
    equal the default leaves'."""
    _iree()
    import iree.runtime as ireert

    from distal.kernels import iree as ik

    text = ik.leaf_text("ab,bc->ac", ((4, 3), (3, 5)), ("f64", "f64"), (4, 5), "f64", 1)
    assert len(ik.compile_leaf(text, "iree-cuda")) > 0
    alg = al.summa(16, machine=M(2, 2))
    if not ik.cuda_devices(ireert):
        with pytest.raises(dl.NotSupportedYet, match="CUDA device"):
            dl.compile(alg.schedule, leaf="iree-cuda")
        pytest.skip("no CUDA device here: leaf='iree-cuda' compiled its module but cannot run")
    inputs = alg.inputs(2)
    got = dl.compile(alg.schedule, leaf="iree-cuda").run(inputs)
    want = dl.compile(alg.schedule).run(inputs)
    np.testing.assert_allclose(got.value, want.value, rtol=1e-12, atol=0)


@settings(max_examples=12, deadline=None)
@given(cases(with_schedule=True))
def test_iree_leaves_equal_the_default_leaves_on_the_differential_cases(case: Any) -> None:
    """The differential suite's random problems, machines, distributions and schedules
    (``tests/test_properties.py``), with IREE leaves: the same values as the default
    leaves (float64, rtol 1e-12) and the same measured stats. Few examples: each leaf shape
    is one IREE compile (about a second)."""
    _iree()
    built = case.build()
    sched = apply_schedule(dl.schedule(built.output), case.ops, built)
    if any(np.dtype(t.dtype).kind in "cb" for t in sched.tensors().values()):
        return  # complex and boolean leaves are not IREE's (a NotSupportedYet, tested above)
    inputs = case.problem.random_inputs(np.random.default_rng(0))
    want = dl.compile(sched).run(inputs)
    iree_kernel = dl.compile(sched, leaf="iree")
    got = iree_kernel.run(inputs)
    np.testing.assert_allclose(got.value, want.value, rtol=1e-12, atol=1e-12)
    assert got.stats.as_dict() == want.stats.as_dict()


@pytest.mark.mpi
def test_iree_leaves_run_on_mpi_ranks() -> None:
    _iree()
    from mpi_jobs import run_job

    job = run_job(2, script=Path(__file__).parent.parent / "mpi" / "_iree_job.py", timeout=180)
    assert job.rc == 0, job
    (line,) = job.lines()
    assert line["rel_err"] <= 1e-12
    assert line["same_stats"]


def test_iree_leaves_run_on_dask_workers() -> None:
    _iree()
    distributed = pytest.importorskip("distributed", reason="needs distributed (dask extra)")
    alg = al.summa(16, machine=M(2, 1))
    inputs = alg.inputs(3)
    kernel = dl.compile(alg.schedule, leaf="iree")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        got = kernel.run(inputs, runtime="dask", client=client, progress=False)
    want = dl.compile(alg.schedule).run(inputs)
    np.testing.assert_allclose(got.value, want.value, rtol=1e-12, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DENSE))
def test_every_dense_export_compiles_in_iree(name: str) -> None:
    """Each distinct leaf of every processor (the same text once the processor's number is
    taken out) compiles for IREE's CPU target, MTTKRP's three-input contraction included."""
    _iree()
    from distal.kernels.iree import compile_leaf

    kernel = KERNELS[name]
    seen = set()
    for p in range(kernel.nprocs):
        text = kernel.to_mlir(p)
        body = "\n".join(ln for ln in text.split("\n") if not ln.startswith("//"))
        body = body.replace(f"_leaf_p{p}(", "_leaf(")
        if body not in seen:
            seen.add(body)
            assert compile_leaf(text)


def _unnamed(st: Statement) -> tuple:
    """:func:`shape_of` with each input named by its place among the inputs."""
    place = {t.name: f"#{k}" for k, t in enumerate(st.inputs())}
    _, dtype, levels, nlhs, terms = shape_of(st)
    terms = tuple((c, tuple((place[f[0]], *f[1:]) for f in factors)) for c, factors in terms)
    return (dtype, levels, nlhs, terms)


@pytest.mark.parametrize("name", list(KERNELS))
def test_every_export_reads_back_after_upstream_canonicalization(name: str) -> None:
    """``mlir-opt --linalg-generalize-named-ops --canonicalize --cse`` of every export (names
    lost, fills generalized, constants hoisted) reads back as the kernel's statement."""
    from upstream import mlir_opt

    kernel = KERNELS[name]
    text = mlir_opt(kernel.to_mlir(0), "--linalg-generalize-named-ops", "--canonicalize", "--cse")
    assert "%B" not in text  # upstream renamed the arguments
    assert _unnamed(_read_back(text)) == _unnamed(kernel.schedule.statement)
