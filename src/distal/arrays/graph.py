"""The deferred program of the arrays front: nodes, each with the shape and dtype numpy
would give it, checked when the node is made.

A :class:`~distal.arrays.darray.DArray` is a handle on one node. Nodes only record; the
program (:mod:`distal.arrays.program`) decides later which of them become values in the
session and which are fused into the kernels that read them. Shapes and dtypes are worked
out here, at the line that makes the node, so a shape that does not broadcast or a dtype
numpy refuses is an error where the user wrote it, not at evaluation.

Nodes compare by identity (``eq=False``): two equal-looking expressions are two
computations, and a node is the key of what the program materialized for it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.errors import InputError, NotSupportedYet, ShapeError

_SEQ = itertools.count()

#: element-wise operations index notation computes (sums of products; a division by a
#: number is a product with its reciprocal)
KERNEL_OPS = ("add", "sub", "mul", "neg", "pos")
#: element-wise operations outside index notation's sums of products: computed by numpy,
#: on each process, over the blocks it holds (a *map*, see :mod:`distal.arrays.program`)
MAP_OPS = (
    "div",
    "sqrt",
    "abs",
    "exp",
    "maximum",
    "minimum",
    "where",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "pow",
    "floordiv",
    "mod",
)
_NUMPY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "neg": np.negative,
    "pos": np.positive,
    "div": np.true_divide,
    "sqrt": np.sqrt,
    "abs": np.abs,
    "exp": np.exp,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "where": np.where,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "pow": np.power,
    "floordiv": np.floor_divide,
    "mod": np.remainder,
}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">"}
_SYMBOL.update(ge=">=", eq="==", ne="!=", pow="**", floordiv="//", mod="%")


@dataclass(frozen=True, eq=False)
class Node:
    """One value of the program: its shape and dtype (as numpy's), and a creation number
    that orders evaluation the same way on every MPI rank."""

    shape: tuple[int, ...]
    dtype: np.dtype
    seq: int = field(default_factory=lambda: next(_SEQ), init=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def args(self) -> tuple[Node, ...]:
        return ()


@dataclass(frozen=True, eq=False)
class Value(Node):
    """A value the session holds under ``name``; ``sparse``: a sparse value (its format
    letters), read whole by the sparse lowering."""

    name: str = ""
    sparse: str | None = None


@dataclass(frozen=True, eq=False)
class Const(Node):
    """A Python or numpy scalar operand."""

    value: Any = 0


@dataclass(frozen=True, eq=False)
class Map(Node):
    """An element-wise operation with numpy's broadcasting (``op`` in :data:`KERNEL_OPS` or
    :data:`MAP_OPS`)."""

    op: str = "add"
    operands: tuple[Node, ...] = ()

    def args(self) -> tuple[Node, ...]:
        return self.operands


@dataclass(frozen=True, eq=False)
class Transpose(Node):
    """``a.T``: the axes reversed."""

    operand: Node | None = None

    def args(self) -> tuple[Node, ...]:
        assert self.operand is not None
        return (self.operand,)


@dataclass(frozen=True, eq=False)
class Contract(Node):
    """An einsum: ``ins[n]`` labels operand ``n``'s axes, ``out`` the result's; a label not
    in ``out`` is summed. ``@``, ``.sum`` and ``dl.einsum`` make these."""

    ins: tuple[str, ...] = ()
    out: str = ""
    operands: tuple[Node, ...] = ()

    def args(self) -> tuple[Node, ...]:
        return self.operands


# -- making nodes (shapes and dtypes checked here) ---------------------------------------------


def _dtype(xs: list[Node | Any], what: str) -> np.dtype:
    """numpy's result dtype of ``xs`` (Python scalars weak, as in numpy)."""
    if all(not isinstance(x, Const) and x.dtype == xs[0].dtype for x in xs):
        return xs[0].dtype  # one dtype: itself (the common case, without numpy's call)
    try:
        return np.result_type(*[x.value if isinstance(x, Const) else x.dtype for x in xs])
    except TypeError as e:
        raise InputError(f"{what}: numpy refuses these dtypes: {e}") from None


#: numpy's dtype of a Python scalar, by its type (numpy 2: the type alone decides)
_PY_DTYPE = {bool: np.dtype(bool), int: np.dtype(int), float: np.dtype(float)}
_PY_DTYPE[complex] = np.dtype(complex)


def const(value: Any) -> Const:
    """A scalar operand (a Python number or a 0-d numpy value)."""
    dt = _PY_DTYPE.get(type(value))
    if dt is not None:  # the common case: a plain Python number
        return Const((), dt, value)
    v = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
    if isinstance(v, np.generic):
        return Const((), np.dtype(v.dtype), v)
    if isinstance(v, bool | int | float | complex):
        return Const((), np.result_type(v), v)
    raise InputError(f"{value!r} is not an array operand (a DArray, numpy array or number)")


def _refuse_sparse(xs: tuple[Node, ...] | list[Node], what: str) -> None:
    if any(isinstance(x, Value) and x.sparse is not None for x in xs):
        raise NotSupportedYet(
            f"{what} with a sparse array: the arrays front runs a sparse matrix only as "
            "A @ x with x a dense vector (SpMV); compile other sparse kernels with dl.compile"
        )


def is_spmv(ins: tuple[str, ...], out: str, xs: tuple[Node, ...]) -> bool:
    """The one sparse contraction of the arrays front: a sparse matrix times a dense
    vector, ``ab,b->a``."""
    return (
        ins == ("ab", "b")
        and out == "a"
        and isinstance(xs[0], Value)
        and xs[0].sparse is not None
        and not (isinstance(xs[1], Value) and xs[1].sparse is not None)
    )


def _dtype_key(x: Node) -> Any:
    """What numpy's promotion reads of an operand: an array's dtype, or a Python scalar's
    type (weak, as in numpy 2) — with an integer's value, whose range numpy checks."""
    if isinstance(x, Const):
        v = x.value
        return (type(v), v) if type(v) is int else (type(v), x.dtype)
    return x.dtype


#: result dtypes already worked out, by ``(op, operands' dtype keys)``: numpy's promotion
#: costs microseconds a call, and a loop records the same few operations every iteration
_DTYPES: dict[tuple, np.dtype] = {}
_DTYPE_CACHE_MAX = 4096


def map_node(op: str, *xs: Node) -> Map:
    """``op`` over ``xs`` with numpy's broadcasting and promotion."""
    for x in xs:
        if type(x) is Value and x.sparse is not None:
            _refuse_sparse(xs, _SYMBOL.get(op, op))
    shape: tuple[int, ...] = ()
    for x in xs:  # 0-d operands (numbers) broadcast to anything: no call to numpy for them
        if not x.shape or x.shape == shape:
            continue
        if not shape:
            shape = x.shape
            continue
        # two shapes differ: broadcasting (or a mismatch), as numpy decides
        try:
            shape = tuple(int(n) for n in np.broadcast_shapes(*(y.shape for y in xs)))
        except ValueError:
            name = _SYMBOL.get(op, op)
            shapes = [y.shape for y in xs]
            shown = f" {name} ".join(str(s) for s in shapes) if op in _SYMBOL else shapes
            raise ShapeError(f"operands could not be broadcast together: {shown}") from None
        break
    key = (op, *(_dtype_key(x) for x in xs))
    dtype = _DTYPES.get(key)
    if dtype is None:
        dtype = _map_dtype(op, xs)
        if len(_DTYPES) < _DTYPE_CACHE_MAX:
            _DTYPES[key] = dtype
    return Map(shape, dtype, op, tuple(xs))


def _probe(op: str, xs: tuple[Node, ...]) -> Any:
    """numpy's ``op`` on 0-d ones of the operands' dtypes (numbers as they are): its result
    dtype, or the error numpy raises for these operands."""
    probe = [np.ones((), x.dtype) if not isinstance(x, Const) else x.value for x in xs]
    with np.errstate(all="ignore"):
        return _NUMPY[op](*probe)


def _map_dtype(op: str, xs: tuple[Node, ...]) -> np.dtype:
    """numpy's result dtype of ``op`` over ``xs``, or the error numpy would give."""
    name = _SYMBOL.get(op, op)
    if any(isinstance(x, Const) and type(x.value) is int for x in xs) and op in _NUMPY:
        # a Python integer takes the other operand's integer dtype: numpy refuses one out of
        # its range (int8 + 300) when the operation runs; here, on the line that wrote it
        try:
            _probe(op, xs)
        except OverflowError as e:
            raise InputError(f"{name}: {e}") from None
        except (TypeError, ValueError):
            pass  # the rules below say it in distal's words
    if op in ("lt", "le", "gt", "ge", "eq", "ne"):
        _dtype(list(xs), name)
        dtype = np.dtype(bool)
    elif op == "where":
        if xs[0].dtype != np.dtype(bool):
            raise InputError(f"where: the condition must be boolean, got {xs[0].dtype}")
        dtype = _dtype(list(xs[1:]), "where")
    elif op in ("div", "sqrt", "exp", "pow", "floordiv", "mod"):
        # numpy's true division and float functions: integers become float64
        try:
            dtype = np.asarray(_probe(op, xs)).dtype
        except (TypeError, ValueError) as e:  # e.g. integers to a negative integer power
            raise InputError(f"{name}: numpy refuses these operands: {e}") from None
    else:
        dtype = _dtype(list(xs), name)
        if op in ("neg", "sub") and dtype == np.dtype(bool):
            raise InputError(f"{name}: numpy does not negate or subtract booleans")
    if dtype.kind not in "biufc":
        raise InputError(f"{name}: result dtype {dtype} is not numeric")
    return dtype


def transpose(x: Node) -> Node:
    _refuse_sparse([x], ".T")
    if x.ndim < 2:
        return x  # numpy: .T of a vector or scalar is itself
    return Transpose(tuple(reversed(x.shape)), x.dtype, x)


def contract(ins: tuple[str, ...], out: str, xs: tuple[Node, ...], what: str) -> Contract:
    """An einsum node: every label's extent agrees across operands (no size-1 broadcasting
    and no repeated label within one operand: both are refused by name)."""
    extent: dict[str, int] = {}
    for n, (spec, x) in enumerate(zip(ins, xs, strict=True)):
        if len(spec) != x.ndim:
            raise ShapeError(f"{what}: operand {n} has {x.ndim} axes, its subscripts {spec!r}")
        if len(set(spec)) != len(spec):
            raise NotSupportedYet(
                f"{what}: label repeated within operand {n} ({spec!r}): take the diagonal "
                "with numpy first"
            )
        for c, size in zip(spec, x.shape, strict=True):
            if extent.setdefault(c, size) != size:
                raise ShapeError(
                    f"{what}: label {c!r} has extents {extent[c]} and {size} (operand {n}); "
                    "they must agree"
                )
    if not is_spmv(ins, out, xs):
        _refuse_sparse(xs, what)
    if any(c not in extent for c in out):
        raise ShapeError(f"{what}: output label not in any operand: {out!r}")
    dtype = _dtype(list(xs), what)
    return Contract(tuple(extent[c] for c in out), dtype, ins, out, xs)


def matmul(a: Node, b: Node) -> Contract:
    """numpy's ``a @ b`` for 1-D and 2-D operands."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: an operand is 0-d (use * for scalars)")
    if a.ndim > 2 or b.ndim > 2:
        raise NotSupportedYet(
            f"matmul of {a.ndim}-D by {b.ndim}-D operands: write the batch with dl.einsum"
        )
    ka, kb = a.shape[-1], b.shape[0]
    if ka != kb:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not align ({ka} != {kb})")
    ins = ("ab" if a.ndim == 2 else "b", "bc" if b.ndim == 2 else "b")
    out = ("a" if a.ndim == 2 else "") + ("c" if b.ndim == 2 else "")
    return contract(ins, out, (a, b), "matmul")


def reduce_sum(x: Node, axis: Any) -> Node:
    """``x.sum(axis)`` with numpy's ``axis`` (None, an int or a tuple; negative allowed)."""
    letters = "abcdefghijklmnopqrstuvwxyz"[: x.ndim]
    if axis is None:
        axes = set(range(x.ndim))
    else:
        raw = axis if isinstance(axis, tuple) else (axis,)
        axes = set()
        for a in raw:
            if (
                isinstance(a, bool)
                or not isinstance(a, int | np.integer)
                or not (-x.ndim <= a < x.ndim)
            ):
                raise InputError(f"sum: axis {a!r} is out of range for a {x.ndim}-D array")
            axes.add(int(a) % x.ndim)
    if not axes:
        return x
    out = "".join(c for d, c in enumerate(letters) if d not in axes)
    return contract((letters,), out, (x,), "sum")


def numpy_op(op: str) -> Any:
    """The numpy function an element-wise operation means."""
    return _NUMPY[op]
