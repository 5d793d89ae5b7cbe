"""One structured ``linalg`` operation of an imported graph as array operations.

A ``linalg.generic`` (and a named structured op, which is one with its default maps and a
hidden body) loops over ``d0 .. dn-1``; each operand is read through its indexing map. It
is recorded in one of two ways:

* **a contraction** (the yielded value is ``out + a sum of products of the inputs``, and the
  op sums over some loop): one ``einsum`` per product over the operands as they are, plus
  the initial value: the arrays front makes a kernel of it (matmul, MTTKRP);
* **element-wise over the loop space**: each input is brought into loop order (its
  axes permuted, a unit dimension indexed away where its map reads constant 0, ``None``
  where it does not read a loop), the body's ``arith`` / ``math`` operations become
  element-wise array operations (broadcasting), and a reduction (``out = combine(out,
  f(inputs))`` with ``combine`` an add, max or min) reduces ``f`` over the summed loops and
  combines the result with the initial value.

The result is then laid out by the output's map (axes permuted to the output's order, a
unit dimension where the map reads constant 0). A result an array does not span in every
dimension (a broadcast) stays as it is and is broadcast where it is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.errors import NotationError, NotSupportedYet
from distal.mlir_program import ops

#: a map result: ("dim", k) reads loop k, ("const", c) reads the constant index c
MapResult = tuple[str, int]


def map_results(m: Any, what: str) -> list[MapResult]:
    from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr

    out: list[MapResult] = []
    for r in m.results:
        if isinstance(r, AffineDimExpr):
            out.append(("dim", r.position))
        elif isinstance(r, AffineConstantExpr) and r.value == 0:
            out.append(("const", 0))
        else:
            raise NotationError(
                f"{what}: indexing map {m} has the result {r}; mlir_function reads maps of "
                "loop dimensions and constant 0 (a unit dimension)"
            )
    dims = [k for kind, k in out if kind == "dim"]
    if len(set(dims)) != len(dims):
        raise NotationError(f"{what}: indexing map {m} reads a loop twice (a diagonal)")
    return out


@dataclass
class Val:
    """A tensor value of the graph: an array (whose extents may be 1 where the value is
    broadcast along a dimension), a constant fill, or undefined contents (``tensor.empty``)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    arr: Any = None
    fill: Any = None
    empty: bool = False


def to_loop_space(x: Any, results: list[MapResult], n: int, what: str) -> Any:
    """``x`` (an array, or a scalar) with its axes moved to loop order over ``n`` loops."""
    if not hasattr(x, "shape") or isinstance(x, np.generic):
        return x
    if any(kind == "const" for kind, _ in results):
        x = ops.drop_axes(x, [i for i, (kind, _) in enumerate(results) if kind == "const"], what)
    ks = [k for kind, k in results if kind == "dim"]
    order = sorted(range(len(ks)), key=lambda i: ks[i])
    x = ops.transpose(x, tuple(order), what)
    present = set(ks)
    if len(present) < n:
        x = ops.insert_axes(x, [k for k in range(n) if k not in present], n, what)
    return x


def from_loop_space(x: Any, loops: list[int], results: list[MapResult], what: str) -> Any:
    """``x``, whose axes are the loops ``loops`` (ascending), laid out by an output map."""
    if not hasattr(x, "shape") or isinstance(x, np.generic):
        return x
    ks = [k for kind, k in results if kind == "dim"]
    if sorted(ks) != sorted(loops):
        raise NotationError(f"{what}: the output map does not read every parallel loop once")
    perm = tuple(loops.index(k) for k in ks)
    x = ops.transpose(x, perm, what)
    if any(kind == "const" for kind, _ in results):
        consts = [i for i, (kind, _) in enumerate(results) if kind == "const"]
        x = ops.insert_axes(x, consts, len(results), what)
    return x


_COMBINE = {
    "arith.addf": "sum",
    "arith.addi": "sum",
    "arith.maximumf": "max",
    "arith.maxnumf": "max",
    "arith.maxsi": "max",
    "arith.minimumf": "min",
    "arith.minnumf": "min",
    "arith.minsi": "min",
}
_CMP = {
    "ogt": "gt",
    "ugt": "gt",
    "sgt": "gt",
    "oge": "ge",
    "uge": "ge",
    "sge": "ge",
    "olt": "lt",
    "ult": "lt",
    "slt": "lt",
    "ole": "le",
    "ule": "le",
    "sle": "le",
    "oeq": "eq",
    "ueq": "eq",
    "eq": "eq",
    "one": "ne",
    "une": "ne",
    "ne": "ne",
}


def _name(op: Any) -> str:
    return op.op_name.data if op.name == "builtin.unregistered" else op.name


def yielded(op: Any) -> list[Any]:
    block = op.regions[0].block
    last = block.last_op
    if last is None or _name(last) != "linalg.yield":
        raise NotationError(f"{op.name}: its body has no linalg.yield")
    return list(last.operands)


def depends_on(value: Any, targets: set[Any]) -> bool:
    """Whether body value ``value`` is computed from any of ``targets``."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v in targets:
            return True
        owner = getattr(v, "owner", None)
        if owner is None or id(owner) in seen or not hasattr(owner, "operands"):
            continue
        seen.add(id(owner))
        stack.extend(owner.operands)
    return False


class BodyEval:
    """Evaluates body values as array operations, given the block arguments' arrays and the
    function's scalar constants (constants hoisted out of the body)."""

    def __init__(self, op: Any, args: dict[Any, Any], consts: dict[Any, Any], what: str) -> None:
        self.op, self.args, self.consts, self.what = op, args, consts, what
        self.memo: dict[Any, Any] = {}

    def __call__(self, v: Any) -> Any:
        if v in self.args:
            return self.args[v]
        if v in self.consts:
            return self.consts[v]
        if v in self.memo:
            return self.memo[v]
        owner = getattr(v, "owner", None)
        if owner is None or not hasattr(owner, "operands"):
            raise NotationError(f"{self.what}: its body reads a value defined outside it")
        r = self._op(owner)
        self.memo[v] = r
        return r

    def _op(self, b: Any) -> Any:
        n = _name(b)
        where = f"{n} in the body of {self.what}"
        if n == "arith.constant":
            from distal.mlir_program.function import scalar_constant

            return scalar_constant(b)
        xs = [self(x) for x in b.operands]
        f = _SCALAR.get(n)
        if f is not None:
            return f(xs, b, where)
        raise NotationError(
            f"{where}: mlir_function reads bodies of arith add/sub/mul/div/neg, max/min, "
            "cmpf/cmpi, select, casts, constants and math exp/log/sqrt/rsqrt/tanh/abs"
        )


def _cmp(xs: list[Any], b: Any, where: str) -> Any:
    pred = str(b.predicate.value.data) if hasattr(b, "predicate") else ""
    names = {
        0: "false",
        1: "oeq",
        2: "ogt",
        3: "oge",
        4: "olt",
        5: "ole",
        6: "one",
        7: "ord",
        8: "ueq",
        9: "ugt",
        10: "uge",
        11: "ult",
        12: "ule",
        13: "une",
        14: "uno",
        15: "true",
    }
    if b.name == "arith.cmpi":
        names = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge"}
    key = names.get(int(pred)) if pred.lstrip("-").isdigit() else pred
    op = _CMP.get(key or "")
    if op is None:
        raise NotSupportedYet(f"{where}: the predicate {key!r}")
    a, c = xs
    return {
        "gt": lambda: a > c,
        "ge": lambda: a >= c,
        "lt": lambda: a < c,
        "le": lambda: a <= c,
        "eq": lambda: a == c,
        "ne": lambda: a != c,
    }[op]()


def _cast(xs: list[Any], b: Any, where: str) -> Any:
    from distal.mlir.types import dtype_of

    return ops.astype(xs[0], dtype_of(str(b.results[0].type), where), where)


_SCALAR: dict[str, Callable[[list[Any], Any, str], Any]] = {
    "arith.addf": lambda xs, b, w: xs[0] + xs[1],
    "arith.addi": lambda xs, b, w: xs[0] + xs[1],
    "arith.subf": lambda xs, b, w: xs[0] - xs[1],
    "arith.subi": lambda xs, b, w: xs[0] - xs[1],
    "arith.mulf": lambda xs, b, w: xs[0] * xs[1],
    "arith.muli": lambda xs, b, w: xs[0] * xs[1],
    "arith.divf": lambda xs, b, w: xs[0] / xs[1],
    "arith.negf": lambda xs, b, w: -xs[0],
    "arith.maximumf": lambda xs, b, w: ops.binary("maximum", xs[0], xs[1], w),
    "arith.maxnumf": lambda xs, b, w: ops.binary("maximum", xs[0], xs[1], w),
    "arith.maxsi": lambda xs, b, w: ops.binary("maximum", xs[0], xs[1], w),
    "arith.minimumf": lambda xs, b, w: ops.binary("minimum", xs[0], xs[1], w),
    "arith.minnumf": lambda xs, b, w: ops.binary("minimum", xs[0], xs[1], w),
    "arith.minsi": lambda xs, b, w: ops.binary("minimum", xs[0], xs[1], w),
    "arith.select": lambda xs, b, w: ops.where(xs[0], xs[1], xs[2], w),
    "arith.cmpf": _cmp,
    "arith.cmpi": _cmp,
    "arith.extf": _cast,
    "arith.truncf": _cast,
    "arith.sitofp": _cast,
    "arith.fptosi": _cast,
    "arith.extsi": _cast,
    "arith.trunci": _cast,
    "math.exp": lambda xs, b, w: ops.unary("exp", xs[0], w),
    "math.log": lambda xs, b, w: ops.unary("log", xs[0], w),
    "math.sqrt": lambda xs, b, w: ops.unary("sqrt", xs[0], w),
    "math.rsqrt": lambda xs, b, w: 1.0 / ops.unary("sqrt", xs[0], w),
    "math.tanh": lambda xs, b, w: ops.unary("tanh", xs[0], w),
    "math.absf": lambda xs, b, w: ops.unary("abs", xs[0], w),
}
