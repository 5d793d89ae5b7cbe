"""``dl.mlir_function(text, name=None)``: a ``func.func`` of ``linalg`` / ``tensor`` /
``arith`` / ``math`` operations run as an arrays program.

What JAX (``jax.jit(f).lower(...).compiler_ir("stablehlo")`` through ``iree-opt
--chlo-legalize-to-stablehlo --iree-stablehlo-to-iree-input``) and ONNX (``iree-import-onnx``
then ``iree-opt --torch-onnx-to-torch-backend-pipeline
--torch-backend-to-linalg-on-tensors-backend-pipeline``) give is a graph: each operation
reads the results of earlier ones. Calling the function records one array operation per
graph operation on the session's DArrays (:mod:`distal.mlir_program.body`,
:mod:`distal.mlir_program.ops`): the arrays front fuses the element-wise chains, makes
kernels of the contractions, and holds the intermediates as distributed temporaries; the
results are DArrays, computed when read.

Read: ``linalg.generic`` (one or several results; bodies of ``arith`` and ``math``,
constants inside the body or hoisted out of it), the named structured ops (``matmul``,
``batch_matmul``, ``matvec``, ``dot``, the element-wise ``add``/``sub``/``mul``/...),
``linalg.fill``, ``linalg.transpose``, ``linalg.broadcast``, ``linalg.reduce``,
``tensor.empty``, ``tensor.expand_shape`` / ``tensor.collapse_shape`` (unit dimensions; other
reshapes through ``distal.numpy.reshape``), ``tensor.cast``, ``arith.constant`` (scalars and
dense tensors) and ``func.return``. Anything else is a ``NotationError`` naming the
operation; a result whose computation needs what this version cannot record (an index
read by ``linalg.index``, a product reduction) is a ``NotSupportedYet`` naming it, raised
only when that result is used (an ONNX ``argmax`` beside a ``max`` costs nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distal.errors import InputError, NotationError, NotSupportedYet
from distal.mlir.types import dtype_of
from distal.mlir_program import ops
from distal.mlir_program.body import (
    _COMBINE,
    BodyEval,
    Val,
    yielded,
)


def scalar_constant(op: Any) -> Any:
    """The number an ``arith.constant`` holds (NotationError for anything else)."""
    from xdsl.dialects.builtin import FloatAttr, IntegerAttr

    v = op.value
    if isinstance(v, FloatAttr):
        return float(v.value.data)
    if isinstance(v, IntegerAttr):
        return int(v.value.data)
    raise NotationError(f"arith.constant: {v} is not a scalar number")


def _op_name(op: Any) -> str:
    return op.op_name.data if op.name == "builtin.unregistered" else op.name


def _tensor_type(t: Any, where: str) -> tuple[tuple[int, ...], np.dtype]:
    from xdsl.dialects.builtin import NoneAttr, TensorType

    if not isinstance(t, TensorType):
        raise NotationError(f"{where} is {t}; mlir_function reads ranked tensors")
    shape = tuple(t.get_shape())
    if any(s < 0 for s in shape):
        raise NotationError(
            f"{where} has a dynamic extent ({t}); mlir_function reads static shapes"
        )
    if not isinstance(t.encoding, NoneAttr):
        raise NotationError(
            f"{where} has the encoding {t.encoding}; mlir_function reads dense tensors"
        )
    return shape, dtype_of(str(t.element_type), where)


class MlirFunction:
    """A ``func.func`` of MLIR as a callable over DArrays (see the module docstring)."""

    def __init__(self, fn: Any, text_name: str) -> None:
        self.fn = fn
        self.name = text_name
        args = list(fn.body.block.args)
        self.params = [
            _tensor_type(a.type, f"argument {k} of @{text_name}") for k, a in enumerate(args)
        ]
        self._check_ops()

    def _check_ops(self) -> None:
        """Every operation is one this reader takes: the error comes at ``mlir_function``,
        not at the call."""
        for op in self.fn.body.block.ops:
            n = _op_name(op)
            if n not in _HANDLERS:
                raise NotationError(
                    f"{n}: mlir_function reads func.func bodies of linalg (generic, named "
                    "structured ops, fill, transpose, broadcast, reduce), tensor (empty, "
                    "expand_shape, collapse_shape, cast), arith.constant and func.return"
                )

    def __repr__(self) -> str:
        return f"dl.mlir_function(@{self.name}: {len(self.params)} arguments)"

    def __call__(self, *args: Any, session: Any = None) -> Any:
        """The function's results on ``args`` (DArrays, or arrays placed in ``session``), as
        DArrays of that session: one, or a tuple for several results."""
        if len(args) != len(self.params):
            raise InputError(f"@{self.name} takes {len(self.params)} arguments, got {len(args)}")
        session = _session_of(args, session)
        values = []
        for k, (a, (shape, dtype)) in enumerate(zip(args, self.params, strict=True)):
            arr = _place(a, session, k, self.name)
            if tuple(arr.shape) != shape:
                raise InputError(
                    f"argument {k} of @{self.name} has shape {tuple(arr.shape)}, the function "
                    f"takes {shape}"
                )
            if np.dtype(arr.dtype) != dtype:
                raise InputError(
                    f"argument {k} of @{self.name} has dtype {np.dtype(arr.dtype)}, the "
                    f"function takes {dtype} (no silent cast)"
                )
            values.append(Val(shape, dtype, arr=arr))
        run = _Run(self.fn, session, values, self.name)
        outs = run.results()
        return outs[0] if len(outs) == 1 else tuple(outs)


def _session_of(args: tuple[Any, ...], session: Any) -> Any:
    from distal.arrays.darray import DArray

    held = {id(a.session): a.session for a in args if isinstance(a, DArray)}
    if session is not None:
        if any(s is not session for s in held.values()):
            raise InputError("mlir_function: a DArray argument of another session")
        return session
    if len(held) > 1:
        raise InputError("mlir_function: DArray arguments of different sessions")
    if held:
        return next(iter(held.values()))
    dnp = ops._dnp()
    if dnp is not None and hasattr(dnp, "current_session"):
        return dnp.current_session()
    from distal.session import Session

    return Session("local")


def _place(a: Any, session: Any, k: int, name: str) -> Any:
    from distal.arrays.darray import DArray

    if isinstance(a, DArray):
        return a
    try:
        arr = np.asarray(a)
    except Exception as e:
        raise InputError(f"argument {k} of @{name} is not an array ({type(a).__name__})") from e
    return session.asarray(arr)


class _Run:
    """One call: the function's operations recorded in order on the session's arrays."""

    def __init__(self, fn: Any, session: Any, args: list[Val], name: str) -> None:
        self.session = session
        self.name = name
        self.vals: dict[Any, Val | Callable[[], Val]] = {}
        self.consts: dict[Any, Any] = {}
        for a, v in zip(fn.body.block.args, args, strict=True):
            self.vals[a] = v
        self.returned: list[Any] = []
        for op in fn.body.block.ops:
            _HANDLERS[_op_name(op)](self, op)

    def get(self, v: Any, what: str) -> Val:
        got = self.vals.get(v)
        if got is None:
            if v in self.consts:
                raise NotationError(f"{what}: reads a scalar where a tensor is expected")
            raise NotationError(f"{what}: reads a value this reader did not make")
        if callable(got):  # a result computed when first used
            got = got()
            self.vals[v] = got
        return got

    def array(self, v: Val, what: str) -> Any:
        """``v`` as a DArray of its full shape."""
        if v.empty:
            raise NotationError(f"{what}: reads a tensor.empty, whose contents are undefined")
        if v.fill is not None:
            return ops.full(v.shape, v.fill, v.dtype, self.session)
        return ops.broadcast_to(v.arr, v.shape, self.session, what)

    def operand(self, v: Val, what: str) -> Any:
        """``v`` for an element-wise operation: an array (maybe broadcast) or a scalar."""
        if v.empty:
            raise NotationError(f"{what}: reads a tensor.empty, whose contents are undefined")
        return v.fill if v.fill is not None else v.arr

    def results(self) -> list[Any]:
        out = []
        for k, v in enumerate(self.returned):
            val = self.get(v, f"func.return (result {k})")
            out.append(self.array(val, f"func.return (result {k})"))
        return out


# -- the operations -----------------------------------------------------------------------


def _constant(run: _Run, op: Any) -> None:
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, IntegerAttr

    v = op.value
    if isinstance(v, FloatAttr | IntegerAttr):
        run.consts[op.results[0]] = scalar_constant(op)
        return
    if isinstance(v, DenseIntOrFPElementsAttr):
        shape, dtype = _tensor_type(op.results[0].type, "arith.constant")
        data = np.array([x.value.data if hasattr(x, "value") else x for x in v.get_values()])
        data = np.asarray(data, dtype=dtype)
        if data.size == 1 and int(np.prod(shape)) != 1:
            run.vals[op.results[0]] = Val(shape, dtype, fill=data.reshape(-1)[0].item())
        else:
            run.vals[op.results[0]] = Val(
                shape, dtype, arr=run.session.asarray(data.reshape(shape))
            )
        return
    raise NotationError(f"arith.constant: {v} is neither a number nor a dense tensor")


def _empty(run: _Run, op: Any) -> None:
    if op.operands:
        raise NotationError("tensor.empty: dynamic sizes are not read")
    shape, dtype = _tensor_type(op.results[0].type, "tensor.empty")
    run.vals[op.results[0]] = Val(shape, dtype, empty=True)


def _fill(run: _Run, op: Any) -> None:
    c = op.inputs[0]
    if c not in run.consts:
        raise NotationError("linalg.fill: fills with an arith.constant only")
    shape, dtype = _tensor_type(op.results[0].type, "linalg.fill")
    run.vals[op.results[0]] = Val(shape, dtype, fill=dtype.type(run.consts[c]).item())


def _cast_op(run: _Run, op: Any) -> None:
    v = run.get(op.operands[0], "tensor.cast")
    shape, dtype = _tensor_type(op.results[0].type, "tensor.cast")
    run.vals[op.results[0]] = Val(shape, dtype, v.arr, v.fill, v.empty)


def _reshape(run: _Run, op: Any) -> None:
    """``expand_shape`` / ``collapse_shape``: a unit dimension added or dropped is an index
    (``x[:, None]``, ``x[:, 0]``); any other regrouping is ``distal.numpy.reshape``."""
    name = _op_name(op)
    v = run.get(op.operands[0], name)
    shape, dtype = _tensor_type(op.results[0].type, name)
    if v.fill is not None or v.empty:
        run.vals[op.results[0]] = Val(shape, dtype, fill=v.fill, empty=v.empty)
        return
    src = v.shape
    big, small = (shape, src) if len(shape) >= len(src) else (src, shape)
    # the same non-unit extents in the same order: only unit dimensions move
    if [s for s in big if s != 1] == [s for s in small if s != 1]:
        arr = v.arr
        if arr is not None and tuple(arr.shape) != src:
            arr = run.array(v, name)
        arr = ops.drop_axes(arr, [k for k, s in enumerate(src) if s == 1], name)
        arr = ops.insert_axes(arr, [k for k, s in enumerate(shape) if s == 1], len(shape), name)
        run.vals[op.results[0]] = Val(shape, dtype, arr=arr)
        return
    f = ops._need("reshape", name)
    run.vals[op.results[0]] = Val(shape, dtype, arr=f(run.array(v, name), shape))


def _transpose(run: _Run, op: Any) -> None:
    v = run.get(op.inputs[0], "linalg.transpose")
    shape, dtype = _tensor_type(op.results[0].type, "linalg.transpose")
    perm = tuple(int(p) for p in op.permutation.get_values())
    x = run.operand(v, "linalg.transpose")
    if hasattr(x, "shape") and not isinstance(x, np.generic):
        x = ops.transpose(run.array(v, "linalg.transpose"), perm, "linalg.transpose")
    run.vals[op.results[0]] = Val(
        shape,
        dtype,
        arr=x if hasattr(x, "shape") else None,
        fill=None if hasattr(x, "shape") else x,
    )


def _broadcast(run: _Run, op: Any) -> None:
    v = run.get(op.inputs[0], "linalg.broadcast")
    shape, dtype = _tensor_type(op.results[0].type, "linalg.broadcast")
    added = sorted(int(d) for d in op.dimensions.get_values())
    x = run.operand(v, "linalg.broadcast")
    if hasattr(x, "shape") and not isinstance(x, np.generic):
        x = ops.insert_axes(x, added, len(shape), "linalg.broadcast")
        run.vals[op.results[0]] = Val(shape, dtype, arr=x)
    else:
        run.vals[op.results[0]] = Val(shape, dtype, fill=x)


def _reduce(run: _Run, op: Any) -> None:
    """``linalg.reduce ins(x) outs(init) dimensions = [...]``: a reduction generic."""
    what = "linalg.reduce"
    x = run.get(op.inputs[0], what)
    init = run.get(op.outputs[0], what)
    dims = tuple(int(d) for d in op.dimensions.get_values())
    shape, dtype = _tensor_type(op.results[0].type, what)
    block = op.regions[0].block
    (y,) = yielded(op)
    kind = _combine_kind(y, block.args[1], what)
    body = BodyEval(op, {block.args[0]: run.operand(x, what)}, run.consts, what)
    e = _other_operand(y, block.args[1])
    r = ops.reduce(kind, body(e), dims, what)
    run.vals[op.results[0]] = Val(shape, dtype, arr=_combine_init(run, kind, r, init, what))


def _return(run: _Run, op: Any) -> None:
    run.returned = list(op.operands)


def _combine_kind(y: Any, out: Any, what: str) -> str:
    owner = getattr(y, "owner", None)
    name = _op_name(owner) if owner is not None and hasattr(owner, "operands") else ""
    kind = _COMBINE.get(name)
    if kind is None or out not in list(owner.operands):
        raise NotSupportedYet(
            f"{what}: a reduction whose body is not out = add/max/min(out, f(inputs))"
        )
    return kind


def _other_operand(y: Any, out: Any) -> Any:
    a, b = y.owner.operands
    return b if a is out else a


def _combine_init(run: _Run, kind: str, r: Any, init: Val, what: str) -> Any:
    """The reduction ``r`` combined with the output's initial value."""
    if init.empty:
        return r
    if init.fill is not None:
        c = init.fill
        if (
            (kind == "sum" and c == 0)
            or (kind == "max" and c == -np.inf)
            or (kind == "min" and c == np.inf)
        ):
            return r
        return (
            r + c
            if kind == "sum"
            else ops.binary("maximum" if kind == "max" else "minimum", r, c, what)
        )
    a = init.arr
    return (
        a + r
        if kind == "sum"
        else ops.binary("maximum" if kind == "max" else "minimum", a, r, what)
    )


def _structured(run: _Run, op: Any) -> None:
    """A generic or named structured op: each result recorded when first used."""
    from distal.mlir_program.structured import record

    for j, res in enumerate(op.results):
        run.vals[res] = lambda j=j: record(run, op, j)


_HANDLERS: dict[str, Callable[[_Run, Any], None]] = {
    "arith.constant": _constant,
    "tensor.empty": _empty,
    "tensor.cast": _cast_op,
    "tensor.expand_shape": _reshape,
    "tensor.collapse_shape": _reshape,
    "linalg.fill": _fill,
    "linalg.transpose": _transpose,
    "linalg.broadcast": _broadcast,
    "linalg.reduce": _reduce,
    "func.return": _return,
    **{
        n: _structured
        for n in (
            "linalg.generic",
            "linalg.matmul",
            "linalg.matvec",
            "linalg.batch_matmul",
            "linalg.dot",
            "linalg.add",
            "linalg.sub",
            "linalg.mul",
            "linalg.div",
            "linalg.exp",
            "linalg.log",
            "linalg.sqrt",
            "linalg.max",
            "linalg.min",
        )
    },
}


def mlir_function(text: str, name: str | None = None) -> MlirFunction:
    """The ``func.func`` of ``text`` named ``name`` (the only one, when None; a ``main``
    when there are several) as a callable over DArrays.

    Raises:
        NotationError: text xDSL cannot parse, no such function, or an operation, map or
            body this reader does not take (named).
        NotSupportedYet: xDSL is not installed (``pip install 'distal[mlir]'``).
    """
    from distal.mlir import _xdsl
    from distal.mlir.importer import parse_or_refuse

    if not isinstance(text, str):
        raise NotationError(f"mlir_function takes MLIR text (a str), got {type(text).__name__}")
    _xdsl.context()
    module = parse_or_refuse(text)
    funcs = _functions(module)
    if not funcs:
        raise NotationError("func.func: the text has no function")
    if name is None:
        if len(funcs) == 1:
            name = next(iter(funcs))
        elif "main" in funcs:
            name = "main"
        else:
            raise NotationError(f"func.func: the text has {sorted(funcs)}; say which with name=")
    name = name.lstrip("@")
    if name not in funcs:
        raise NotationError(f"func.func: no function @{name} in the text (it has {sorted(funcs)})")
    return MlirFunction(funcs[name], name)


def _functions(module: Any) -> dict[str, Any]:
    """The module's functions by name (modules nested as JAX writes them included)."""
    out: dict[str, Any] = {}
    stack = [module]
    while stack:
        m = stack.pop()
        for op in m.ops:
            n = _op_name(op)
            if n == "func.func":
                out[op.sym_name.data] = op
            elif n == "builtin.module":
                stack.append(op)
            else:
                raise NotationError(f"{n}: mlir_function reads modules of func.func")
    return out
