"""The deferred program of the arrays front: nodes, each with the shape and dtype numpy
would give it, checked when the node is made.

A :class:`~distal.arrays.darray.DArray` is a handle on one node. Nodes only record; the
program (:mod:`distal.arrays.program`) decides later which of them become values in the
session and which are fused into the kernels that read them. Shapes and dtypes are worked
out here, at the line that makes the node, so a shape that does not broadcast or a dtype
numpy refuses is an error where the user wrote it, not at evaluation.

Nodes compare by identity (no ``__eq__``): two equal-looking expressions are two
computations, and a node holds what the program materialized for it (``as_value``).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from distal.arrays import ufuncs
from distal.errors import InputError, NotSupportedYet, ShapeError

_SEQ = itertools.count()

#: element-wise operations index notation computes (sums of products; a division by a
#: number is a product with its reciprocal)
KERNEL_OPS = ("add", "sub", "mul", "neg", "pos")
#: element-wise operations outside index notation's sums of products: computed by numpy,
#: on each process, over the blocks it holds (a *map*, see :mod:`distal.arrays.program`);
#: every other name of :data:`distal.arrays.ufuncs.TABLE`, and the parameterized ones (a cast)
MAP_OPS = tuple(n for n in ufuncs.TABLE if n not in KERNEL_OPS)
_KERNEL = frozenset(KERNEL_OPS)
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">"}
_SYMBOL.update(ge=">=", eq="==", ne="!=", pow="**", floordiv="//", mod="%")


class Node:
    """One value of the program: its shape and dtype (as numpy's), and a creation number
    that orders evaluation the same way on every MPI rank.

    Nodes are plain slotted classes, immutable by convention (frozen dataclasses set each
    field through ``object.__setattr__``, a good part of what recording an operation cost).
    ``dkey`` is what numpy's promotion reads of the node (see :func:`_dtype_key_of`). The one
    field set later is ``as_value``: the :class:`Value` the program materialized the node
    into (at a flush; ``None`` before), kept on the node so that it goes with it and is
    found without a dictionary lookup (a node belongs to one program: operands of another
    are refused when recorded)."""

    __slots__ = ("__weakref__", "as_value", "dkey", "dtype", "seq", "shape")
    _fields: tuple[str, ...] = ("shape", "dtype", "seq")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape = shape
        self.dtype = dtype
        self.dkey: Any = dtype
        self.seq = next(_SEQ)
        self.as_value: Value | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def args(self) -> tuple[Node, ...]:
        return ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({fields})"


class Value(Node):
    """A value the session holds under ``name``; ``sparse``: a sparse value (its format
    letters), read whole by the sparse lowering.

    ``drop``: where set, the session's values, from which ``name`` is popped when this node
    dies (an unnamed value lives as long as something reads it). A ``__del__`` rather than
    a ``weakref.finalize``: making a finalizer costs more than a microsecond, at every
    flush."""

    __slots__ = ("drop", "name", "sparse")
    _fields = (*Node._fields, "name", "sparse")

    def __init__(
        self, shape: tuple[int, ...], dtype: np.dtype, name: str = "", sparse: str | None = None
    ) -> None:
        # Node.__init__'s fields, set here (one call fewer at every value a flush makes)
        self.shape = shape
        self.dtype = dtype
        self.dkey = dtype
        self.seq = next(_SEQ)
        self.as_value = None
        self.name = name
        self.sparse = sparse
        self.drop: dict[str, Any] | None = None

    def __del__(self) -> None:
        drop = self.drop
        if drop is not None:
            drop.pop(self.name, None)


class Const(Node):
    """A Python or numpy scalar operand; ``expr``: its term in a map's expression (see
    :func:`distal.arrays.lower.map_signature`; repr and dtype, since 2 == 2.0 == True and
    0.0 == -0.0), made once."""

    __slots__ = ("expr", "value")
    _fields = (*Node._fields, "value")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, value: Any = 0) -> None:
        super().__init__(shape, dtype)
        self.value = value
        self.dkey = _dtype_key_of(value, dtype)
        self.expr = ("const", value, repr(value), dtype.str)


class Map(Node):
    """An element-wise operation with numpy's broadcasting (``op`` in :data:`KERNEL_OPS` or
    :data:`MAP_OPS`).

    ``fused``: the map group this node would be the root of, worked out from its operands'
    as the node is made (see :func:`_fused`), so a flush looks it up instead of walking
    the tree; ``None`` where it cannot be (the flush then walks)."""

    __slots__ = ("fused", "op", "operands")
    _fields = (*Node._fields, "op", "operands")

    def __init__(
        self, shape: tuple[int, ...], dtype: np.dtype, op: str, operands: tuple[Node, ...]
    ) -> None:
        # Node.__init__'s fields, set here: one call fewer per recorded operation
        self.shape = shape
        self.dtype = dtype
        self.dkey = dtype
        self.seq = next(_SEQ)
        self.as_value = None
        self.op = op
        self.operands = operands
        self.fused: Fused | None = _fused(op, operands) if shape else None

    def args(self) -> tuple[Node, ...]:
        return self.operands


class Transpose(Node):
    """``a.T`` (the axes reversed) or ``a.transpose(axes)``: result axis ``d`` is operand
    axis ``axes[d]``. A contraction reads it as its operand in another index order (no
    data moves); anything else reads it made a value first."""

    __slots__ = ("axes", "operand")
    _fields = (*Node._fields, "operand", "axes")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        operand: Node,
        axes: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(shape, dtype)
        self.operand = operand
        self.axes = tuple(reversed(range(operand.ndim))) if axes is None else axes

    def args(self) -> tuple[Node, ...]:
        return (self.operand,)


class Contract(Node):
    """An einsum: ``ins[n]`` labels operand ``n``'s axes, ``out`` the result's; a label not
    in ``out`` is summed. ``@``, ``.sum`` and ``dl.einsum`` make these."""

    __slots__ = ("ins", "operands", "out")
    _fields = (*Node._fields, "ins", "out", "operands")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        ins: tuple[str, ...],
        out: str,
        operands: tuple[Node, ...],
    ) -> None:
        super().__init__(shape, dtype)
        self.ins = ins
        self.out = out
        self.operands = operands

    def args(self) -> tuple[Node, ...]:
        return self.operands


# -- a map group, as its nodes are made ----------------------------------------------------------

#: ``(expression, leaves, is a map, is a map under a product, stamp, size)``: see :func:`_fused`
Fused = tuple[tuple, tuple[Node, ...], bool, bool, int, int]

_SUMS = frozenset(("add", "sub"))
#: element-wise nodes past which a group is not worked out as it is recorded (a node read
#: twice counts twice, as the flush's walk expands it)
FUSED_MAX = 64
#: how many nodes the programs have materialized so far (a one-element list: bumped by
#: :func:`made_value`); a group worked out when no more had been is still as recorded
_MADE = [0]


def made_value() -> None:
    """Count a node the program has just materialized: from now on the inner nodes of a
    group recorded before may be values, so its ``fused`` no longer holds."""
    _MADE[0] += 1


def values_made() -> int:
    """The count :func:`made_value` keeps (a group's ``fused`` holds while it is its stamp)."""
    return _MADE[0]


def _fused(op: str, xs: tuple[Node, ...]) -> Fused | None:
    """The map group rooted at a new ``op`` node over ``xs``, as the flush would walk it
    while none of its inner element-wise nodes is a value:

    * its expression and leaves, as :func:`distal.arrays.lower.map_signature` gives them
      (leaves numbered in the order a walk meets them);
    * whether it is a map (:meth:`distal.arrays.program.Program._is_map`: an operation
      outside index notation in it, or a sum under a product), and whether it would be one
      under a product;
    * its stamp, :func:`values_made` now: the inner nodes are not values now (a
      materialized operand is a leaf), so while no node has been materialized since, the
      flush finds the group as it is recorded here;
    * its size, the element-wise nodes the expression expands.

    ``None`` where a transpose is under it (whether the walk expands it depends on whether
    it is a value), an operand's does not hold, or it would expand over :data:`FUSED_MAX`
    nodes. Each node costs a few tuple operations, not a walk of the tree under it."""
    subs: list[tuple] = []
    leaves: tuple[Node, ...] = ()  # (a tuple, shared with the operand's where it can be)
    is_map = op not in _KERNEL
    under = is_map or op in _SUMS
    stamp = _MADE[0]
    size = 1
    for x in xs:
        t = type(x)
        if t is Const:
            subs.append(x.expr)  # type: ignore[attr-defined]
            continue
        if x.as_value is None:
            if t is Map and x.shape:
                f = x.fused  # type: ignore[attr-defined]
                if f is None or f[4] != stamp:
                    return None
                expr, its = f[0], f[1]
                if not leaves:
                    leaves = its  # its numbering is the group's
                elif leaves[: len(its)] != its:  # (nodes compare by identity)
                    more = list(leaves)
                    perm = []
                    for leaf in its:
                        if leaf not in more:
                            more.append(leaf)
                        perm.append(more.index(leaf))
                    leaves = tuple(more)
                    expr = _renumber(expr, perm)
                subs.append(expr)
                size += f[5]
                if size > FUSED_MAX:
                    return None
                is_map = is_map or f[3 if op == "mul" else 2]
                under = under or f[3]
                continue
            if t is Transpose:
                return None
        # a value, a contraction or a 0-d operation: a leaf (made a value first)
        if x in leaves:
            subs.append(("slot", leaves.index(x)))
        else:
            subs.append(("slot", len(leaves)))
            leaves = (*leaves, x)
    return (op, *subs), leaves, is_map, under, stamp, size


def _renumber(expr: tuple, perm: list[int]) -> tuple:
    """``expr`` with slot ``k`` as slot ``perm[k]``."""
    tag = expr[0]
    if tag == "slot":
        return ("slot", perm[expr[1]])
    if tag == "const":
        return expr
    return (tag, *[_renumber(e, perm) for e in expr[1:]])


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


#: constants already made, by type and value: a loop writes the same few numbers every
#: iteration, and a constant is only read (never a value, never a handle's node), so one
#: node serves them all. Python floats and ints only, and no zero: those are equal exactly
#: when their reprs are (0.0 == -0.0; complex(1, 0.0) == complex(1, -0.0))
_CONSTS: dict[tuple, Const] = {}
_CONSTS_MAX = 1024


def const(value: Any) -> Const:
    """A scalar operand (a Python number or a 0-d numpy value)."""
    t = type(value)
    if (t is float or t is int) and value:
        c = _CONSTS.get((t, value))
        if c is None:
            c = Const((), _PY_DTYPE[t], value)
            if len(_CONSTS) < _CONSTS_MAX:
                _CONSTS[(t, value)] = c
        return c
    dt = _PY_DTYPE.get(t)
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


def _dtype_key_of(value: Any, dtype: np.dtype) -> Any:
    """What numpy's promotion reads of a scalar operand: a Python scalar's type (weak, as
    in numpy 2) — with an integer's value, whose range numpy checks (an array's: its dtype,
    ``Node.dkey``)."""
    return (type(value), value) if type(value) is int else (type(value), dtype)


#: result dtypes already worked out, by ``(op, operands' dtype keys)``: numpy's promotion
#: costs microseconds a call, and a loop records the same few operations every iteration
_DTYPES: dict[tuple, np.dtype] = {}
_DTYPE_CACHE_MAX = 4096


def map_node(op: str, *xs: Node) -> Map:
    """``op`` over ``xs`` with numpy's broadcasting and promotion."""
    if len(xs) == 2:
        return binary(op, xs[0], xs[1])
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
        shape = _broadcast(op, xs)  # two shapes differ
        break
    key = (op, *[x.dkey for x in xs])
    dtype = _DTYPES.get(key)
    if dtype is None:
        dtype = _new_dtype(key, op, xs)
    return Map(shape, dtype, op, tuple(xs))


def binary(op: str, a: Node, b: Node) -> Map:
    """:func:`map_node` of two operands (what every arithmetic operator records), without
    its loops: recording is most of a small kernel's dispatch."""
    if (type(a) is Value and a.sparse is not None) or (type(b) is Value and b.sparse is not None):
        _refuse_sparse((a, b), _SYMBOL.get(op, op))
    sa, sb = a.shape, b.shape
    if not sb or sa == sb:
        shape = sa
    elif not sa:
        shape = sb
    else:
        shape = _broadcast(op, (a, b))
    key = (op, a.dkey, b.dkey)
    dtype = _DTYPES.get(key)
    if dtype is None:
        dtype = _new_dtype(key, op, (a, b))
    return Map(shape, dtype, op, (a, b))


def _broadcast(op: str, xs: tuple[Node, ...]) -> tuple[int, ...]:
    """The shape of ``xs`` broadcast together, as numpy decides (or its mismatch)."""
    try:
        return tuple(int(n) for n in np.broadcast_shapes(*(y.shape for y in xs)))
    except ValueError:
        name = _SYMBOL.get(op, op)
        shapes = [y.shape for y in xs]
        shown = f" {name} ".join(str(s) for s in shapes) if op in _SYMBOL else shapes
        raise ShapeError(f"operands could not be broadcast together: {shown}") from None


def _new_dtype(key: tuple, op: str, xs: tuple[Node, ...]) -> np.dtype:
    """:func:`_map_dtype`, remembered under ``key`` (or its error, raised)."""
    dtype = _map_dtype(op, xs)
    if len(_DTYPES) < _DTYPE_CACHE_MAX:
        _DTYPES[key] = dtype
    return dtype


def _probe(op: str, xs: tuple[Node, ...]) -> Any:
    """numpy's ``op`` on 0-d ones of the operands' dtypes (numbers as they are): its result
    dtype, or the error numpy raises for these operands."""
    probe = [np.ones((), x.dtype) if not isinstance(x, Const) else x.value for x in xs]
    with np.errstate(all="ignore"):
        return ufuncs.function(op)(*probe)


#: operations whose result dtype is the operands' promoted dtype (numpy's promotion alone)
_PROMOTING = frozenset(("add", "sub", "mul", "neg", "pos", "maximum", "minimum"))


def _map_dtype(op: str, xs: tuple[Node, ...]) -> np.dtype:
    """numpy's result dtype of ``op`` over ``xs``, or the error numpy would give."""
    name = _SYMBOL.get(op, op)
    python_int = any(isinstance(x, Const) and type(x.value) is int for x in xs)
    if python_int and not ufuncs.is_parameterized(op):
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
    elif op.startswith("astype|"):
        dtype = ufuncs.param_dtype(op)
    elif op in _PROMOTING:
        dtype = _dtype(list(xs), name)
        if op in ("neg", "sub") and dtype == np.dtype(bool):
            raise InputError(f"{name}: numpy does not negate or subtract booleans")
    else:
        # numpy's own rule for the function (true division and float functions make
        # integers float64; the absolute value of a complex number is real; predicates
        # are boolean; integer-only functions refuse floats)
        try:
            dtype = np.asarray(_probe(op, xs)).dtype
        except (TypeError, ValueError) as e:  # e.g. integers to a negative integer power
            raise InputError(f"{name}: numpy refuses these operands: {e}") from None
    if dtype.kind not in "biufc":
        raise InputError(f"{name}: result dtype {dtype} is not numeric")
    return dtype


def transpose(x: Node, axes: tuple[int, ...] | None = None) -> Node:
    """``x.T`` (``axes`` None) or numpy's ``x.transpose(axes)``; the identity order is
    ``x`` itself, and a transpose of a transpose one transpose."""
    _refuse_sparse([x], ".T")
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    if sorted(axes) != list(range(x.ndim)):
        raise InputError(f"transpose: axes {axes} are not a permutation of {x.ndim} axes")
    if axes == tuple(range(x.ndim)):
        return x  # numpy: .T of a vector or scalar is itself
    if type(x) is Transpose and x.as_value is None:
        inner = tuple(x.axes[a] for a in axes)
        return transpose(x.operand, inner)
    return Transpose(tuple(x.shape[a] for a in axes), x.dtype, x, axes)


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
    acc = _sum_dtype(x.dtype)
    if acc is not None:  # numpy accumulates booleans and narrow integers in the default int
        x = map_node("mul", x, const(acc.type(1)))
    if not axes:
        return x
    if (
        type(x) is Contract
        and x.as_value is None
        and not any(isinstance(o, Value) and o.sparse is not None for o in x.operands)
    ):
        # the sum of an einsum is one einsum, its summed axes left out of the output: the
        # product is never formed (``einsum("i,j->ij", x, x).sum()`` of 10^5 elements would
        # be 10^10 of them), and the leaf sums each operand over the letters it alone
        # carries first (distal.kernels.leaf._presummed)
        out = "".join(c for d, c in enumerate(x.out) if d not in axes)
        return contract(x.ins, out, x.operands, "sum")
    out = "".join(c for d, c in enumerate(letters) if d not in axes)
    return contract((letters,), out, (x,), "sum")


def _sum_dtype(dtype: np.dtype) -> np.dtype | None:
    """The dtype numpy's ``sum`` accumulates ``dtype`` in where it is not ``dtype`` itself:
    the platform integer for booleans and narrower signed integers, its unsigned twin for
    narrower unsigned ones (``np.array([True, True]).sum()`` is 2, not True)."""
    if dtype.kind == "b" or (dtype.kind == "i" and dtype.itemsize < np.dtype(np.int_).itemsize):
        return np.dtype(np.int_)
    if dtype.kind == "u" and dtype.itemsize < np.dtype(np.uint).itemsize:
        return np.dtype(np.uint)
    return None


def numpy_op(op: str) -> Any:
    """The numpy function an element-wise operation means."""
    return ufuncs.function(op)
