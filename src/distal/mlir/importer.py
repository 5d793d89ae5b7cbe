"""``dl.from_mlir(text)``: a ``func.func`` of ``linalg`` on tensors read back as index notation.

What is read (every other operation is a ``NotationError`` naming it):

* the function's arguments: ranked tensors of static shape, with an optional
  ``#sparse_tensor.encoding`` (read as a :class:`~distal.Format`); each is an input tensor
  named after the argument (``%B`` -> ``"B"``, ``arg0``, ``arg1``, ... for unnamed ones);
* ``tensor.empty``, ``arith.constant`` and ``linalg.fill`` of a constant: an output's
  initial value;
* ``linalg.generic`` and the named ops ``linalg.matmul``, ``linalg.matvec``,
  ``linalg.batch_matmul``, ``linalg.dot`` (and the element-wise ``linalg.add``,
  ``linalg.sub``, ``linalg.mul``): one contribution to the value in ``outs``. Its body
  (``arith`` ``mulf``/``addf``/``subf``/``negf``, their integer forms, constants and
  widening casts) must be ``out + (a sum of products of the inputs)``, or, with only
  ``parallel`` loops, the sum alone (which overwrites);
* ``func.return``: the outputs, in order.

Each returned value is one output tensor whose computation is the sum of the
contributions on its chain of ``outs`` (generics that accumulate into the previous one's
result), written as index notation: loops in the output map are the output's variables,
the others are summed. Summed loops of the same extent share one variable across the ops
of a chain (``sum_k f + sum_k' g == sum_k (f + g)`` when the ranges agree), so an
exported statement reads back as the statement it came from.

The initial value: distal's outputs start at zero (every leaf adds into a zeroed block),
so an output's ``outs`` chain starts at a ``tensor.empty``, a ``linalg.fill`` (a non-zero
constant is a term of its own) or a function argument, which is then the output's name
and not an input (what :func:`distal.mlir.export.to_mlir` writes: the output block's
initial value, zero when a plan runs it). An output tensor is named after that
argument, else after the returned value (``%C = linalg.matmul ...`` -> ``"C"``), else
``out0``, ``out1``, ...
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from distal.distribution.machine import Machine
from distal.errors import NotationError
from distal.lang.nodes import Access, Expr, IndexVar, Literal, Neg, Tensor
from distal.mlir.types import dtype_of, parse_encoding
from distal.sparse.formats import Format

#: linalg operations read as contributions (structured ops with maps and a body)
STRUCTURED = (
    "linalg.generic",
    "linalg.matmul",
    "linalg.matvec",
    "linalg.batch_matmul",
    "linalg.dot",
    "linalg.add",
    "linalg.sub",
    "linalg.mul",
)
#: arith operations a body may use; casts read as the value they cast (the leaves compute
#: in the output's type)
_ADD = ("arith.addf", "arith.addi")
_SUB = ("arith.subf", "arith.subi")
_MUL = ("arith.mulf", "arith.muli")
_CASTS = ("arith.extf", "arith.sitofp", "arith.uitofp", "arith.extsi", "arith.extui")


@dataclass(frozen=True, slots=True)
class Monomial:
    """``coeff * prod(operands)``: body arguments by number (the output's is ``-1``)."""

    coeff: complex | float | int
    operands: tuple[int, ...]


Poly = tuple[Monomial, ...]


@dataclass(frozen=True, slots=True)
class Contribution:
    """One term of an output: ``coeff * prod(factors)``, each factor an input argument's
    number and the chain variables it is indexed with."""

    coeff: complex | float | int
    factors: tuple[tuple[int, tuple[IndexVar, ...]], ...]


@dataclass(slots=True)
class Chain:
    """An output under construction: its shape and type, its variables, the terms so far."""

    shape: tuple[int, ...]
    element: str
    format: Format
    root: int | None  # the function argument that is its initial value, if any
    lhs: tuple[IndexVar, ...]
    terms: list[Contribution] = field(default_factory=list)
    summed: dict[int, list[IndexVar]] = field(default_factory=dict)  # extent -> variables


_OP_NAME = re.compile(r'(?:^[ \t]*|=[ \t]*)"?([A-Za-z_][\w$]*\.[\w$.]+)', re.M)


def _op_at(text: str, offset: int) -> str:
    """The operation being read at ``offset``: the last one named up to the end of its line
    (an error may point past the name, into the operands or the next line)."""
    end = text.find("\n", offset)
    names = _OP_NAME.findall(text, 0, end if end >= 0 else len(text))
    if names:
        return names[-1]
    start = text.rfind("\n", 0, offset) + 1
    return repr(text[start : end if end >= 0 else len(text)].strip()[:60])


def parse_or_refuse(text: str) -> Any:
    """The module of ``text``, or a ``NotationError`` naming the operation being read where
    xDSL (or the check before it) refused the text."""
    from distal.mlir import _xdsl

    try:
        return _xdsl.parse(text)
    except _xdsl.errors() as e:
        span = getattr(e, "span", None)
        line = getattr(e, "line", None)
        if span is not None:
            where = _op_at(text, span.start)
        elif line is not None:
            where = _op_at(text, sum(len(x) + 1 for x in text.split("\n")[: line - 1]))
        else:
            where = "the module"
        raise NotationError(f"cannot read MLIR at {where}: {getattr(e, 'msg', str(e))}") from e


def _name(op: Any) -> str:
    """An operation's name (an unregistered one's own, not ``builtin.unregistered``)."""
    if op.name == "builtin.unregistered":
        return op.op_name.data
    return op.name


def from_mlir(text: str, machine: Machine | None = None) -> list[Tensor]:
    """The output tensors of the one ``func.func`` in ``text``, each with its computation.

    Inputs are named after the function's arguments; with ``machine`` every tensor is
    ``dist="auto"`` on it (ready for ``dl.autoschedule``), else undistributed.

    Raises:
        NotationError: text xDSL cannot parse, or an operation, body, map or type this
            reader does not take; the message names the operation.
        NotSupportedYet: xDSL is not installed (``pip install 'distal[mlir]'``).
    """
    from distal.mlir import _xdsl

    if not isinstance(text, str):
        raise NotationError(f"from_mlir takes MLIR text (a str), got {type(text).__name__}")
    if machine is not None and not isinstance(machine, Machine):
        raise NotationError(f"from_mlir: machine must be a dl.Machine, got {machine!r}")
    _xdsl.context()  # a missing extra says so before anything is parsed
    module = parse_or_refuse(text)
    funcs = []
    for op in module.ops:
        if op.name != "func.func":
            raise NotationError(f"{_name(op)}: from_mlir reads a module of one func.func")
        funcs.append(op)
    if len(funcs) != 1:
        names = [f"@{f.sym_name.data}" for f in funcs]
        raise NotationError(f"func.func: from_mlir reads one function, the text has {names}")
    return _Reader(funcs[0], machine).outputs()


class _Reader:
    """Reads one function: values -> what they stand for, then the returned chains."""

    def __init__(self, fn: Any, machine: Machine | None) -> None:
        self.fn = fn
        self.machine = machine
        self.fname = f"@{fn.sym_name.data}"
        self.args = list(fn.body.block.args)
        self.names = [self._arg_name(k, a) for k, a in enumerate(self.args)]
        self.arg_types = [
            self._tensor_type(a.type, f"argument %{self.names[k]} of {self.fname}")
            for k, a in enumerate(self.args)
        ]
        self.chains: dict[Any, Chain] = {}  # SSA value -> the output chain it ends
        self.inits: set[Any] = set()  # SSA values of tensor.empty: zero initial values
        self.consts: dict[Any, complex | float | int] = {}
        self.read: set[int] = set()  # arguments read as inputs
        self.roots: set[int] = set()  # arguments used as an initial output value
        self.results: list[Any] = []
        self.root_named: set[str] = set()  # arguments already naming an output
        self.var_count = 0
        self.aliases: dict[Any, Any] = {}  # layout conversions of arguments

    @staticmethod
    def _arg_name(k: int, arg: Any) -> str:
        hint = arg.name_hint
        return hint if hint and hint.isidentifier() else f"arg{k}"

    def _tensor_type(self, t: Any, where: str) -> tuple[tuple[int, ...], str, Format]:
        from xdsl.dialects.builtin import NoneAttr, TensorType

        if not isinstance(t, TensorType):
            raise NotationError(f"{where} is {t}; from_mlir reads ranked tensors")
        shape = tuple(t.get_shape())
        if any(s < 0 for s in shape):
            raise NotationError(
                f"{where} has a dynamic extent ({t}); distal tensors have static shapes"
            )
        if any(s == 0 for s in shape):
            raise NotationError(f"{where} is empty ({t}); distal tensors have positive extents")
        elem = str(t.element_type)
        dtype_of(elem, where)
        fmt = Format("d" * len(shape))
        enc = t.encoding
        if not isinstance(enc, NoneAttr):
            name = getattr(getattr(enc, "attr_name", None), "data", None)
            if name != "sparse_tensor.encoding":
                raise NotationError(
                    f"{where} has encoding {enc}; from_mlir reads #sparse_tensor.encoding"
                )
            fmt = parse_encoding(enc.value.data, len(shape), where)
        return shape, elem, fmt

    def var(self, prefix: str) -> IndexVar:
        self.var_count += 1
        return IndexVar(f"{prefix}{self.var_count - 1}")

    # -- the function body ----------------------------------------------------------------

    def outputs(self) -> list[Tensor]:
        for op in self.fn.body.block.ops:
            self.visit(op)
        if not self.results:
            raise NotationError(f"func.return: {self.fname} returns nothing")
        both = self.read & self.roots
        if both:
            n = self.names[min(both)]
            raise NotationError(
                f"linalg: argument %{n} of {self.fname} is both read and accumulated into; "
                "an output's initial value is its zero block, never an input"
            )
        return self._tensors()

    def visit(self, op: Any) -> None:
        name = _name(op)
        if name == "arith.constant":
            self.consts[op.results[0]] = _constant(op)
        elif name == "tensor.empty":
            if op.operands:
                raise NotationError("tensor.empty: dynamic sizes are not read")
            value = op.results[0]
            self._tensor_type(value.type, f"%{value.name_hint or 'value'} of tensor.empty")
            self.inits.add(value)
        elif name == "linalg.fill":
            self._fill(op)
        elif name in STRUCTURED:
            self._structured(op)
        elif name == "sparse_tensor.convert":
            # a change of layout (what a sparse output's leaf does to a dense operand it
            # reads against the loop order): the same tensor
            self.aliases[op.results[0]] = op.operands[0]
        elif name == "func.return":
            self.results = list(op.operands)
        else:
            raise NotationError(
                f"{name}: from_mlir reads func.func bodies of {', '.join(STRUCTURED)}, "
                "linalg.fill, tensor.empty and arith.constant"
            )

    def _fresh_init(self, value: Any, root: int | None) -> Chain:
        """A chain starting at zero in ``value``'s type (each use its own variables)."""
        where = f"%{value.name_hint or 'value'}" if root is None else f"%{self.names[root]}"
        shape, elem, fmt = self._tensor_type(value.type, where)
        return Chain(shape, elem, fmt, root, tuple(self.var(_LHS) for _ in shape))

    def _init_of(self, value: Any, op: str) -> Chain:
        """The chain that ``value`` (an op's ``outs``) continues or starts; a value used by
        several ops starts or continues one chain for each (values are immutable)."""
        if value in self.chains:
            return _copy(self.chains[value])
        if value in self.inits:
            return self._fresh_init(value, None)
        for k, a in enumerate(self.args):
            if value is a:
                self.roots.add(k)
                return self._fresh_init(a, k)
        raise NotationError(
            f"{op}: its outs value is neither a function argument, a tensor.empty nor the "
            "result of an earlier linalg op it could add to"
        )

    def _fill(self, op: Any) -> None:
        value = op.inputs[0]
        if value not in self.consts:
            raise NotationError("linalg.fill: fills with an arith.constant only")
        chain = self._init_of(op.outputs[0], "linalg.fill")
        chain.terms.clear()
        c = self.consts[value]
        if c != 0:
            chain.terms.append(Contribution(c, ()))
        self.chains[op.results[0]] = chain

    def _input(self, value: Any, op: str) -> int:
        value = self.aliases.get(value, value)
        for k, a in enumerate(self.args):
            if value is a:
                self.read.add(k)
                return k
        raise NotationError(
            f"{op}: reads a value that is not a function argument; each output is one "
            "statement over the function's arguments (no intermediate tensors)"
        )

    def _structured(self, op: Any) -> None:
        name = op.name
        if len(op.outputs) != 1 or len(op.results) != 1:
            raise NotationError(f"{name}: one output tensor per operation (got {len(op.outputs)})")
        maps = [m.data for m in op.get_indexing_maps().data]
        # a scalar constant read as an input (a generalized fill) is its value in the body
        scalars = {k: self.consts[v] for k, v in enumerate(op.inputs) if v in self.consts}
        ins = [-1 if k in scalars else self._input(v, name) for k, v in enumerate(op.inputs)]
        chain = self._init_of(op.outputs[0], name)
        loops = maps[-1].num_dims
        dims = [_dims(m, name) for m in maps]
        out_dims = dims[-1]
        if len(set(out_dims)) != len(out_dims):
            raise NotationError(f"{name}: the output map {maps[-1]} repeats a loop")
        iters = [str(t.data) for t in op.get_iterator_types().data]
        iters = [t.rsplit(".", 1)[-1].lower() for t in iters]
        for d in range(loops):
            want = "parallel" if d in out_dims else "reduction"
            if iters[d] != want:
                raise NotationError(
                    f"{name}: loop d{d} is {iters[d]!r} but {'is' if d in out_dims else 'is not'}"
                    " in the output map; distal reads parallel output loops and summed "
                    "(reduction) others"
                )
        extent: dict[int, int] = {}
        shapes = [() if k < 0 else self.arg_types[k][0] for k in ins] + [chain.shape]
        for ds, shape in zip(dims, shapes, strict=True):
            if len(ds) != len(shape):
                raise NotationError(
                    f"{name}: an indexing map has {len(ds)} results for an operand of shape {shape}"
                )
            for d, s in zip(ds, shape, strict=True):
                if extent.setdefault(d, s) != s:
                    raise NotationError(f"{name}: loop d{d} has extents {extent[d]} and {s}")
        var: dict[int, IndexVar] = {d: chain.lhs[p] for p, d in enumerate(out_dims)}
        seen: dict[int, int] = {}
        for d in range(loops):
            if d in var:
                continue
            if d not in extent:
                raise NotationError(f"{name}: loop d{d} indexes no operand")
            pool = chain.summed.setdefault(extent[d], [])
            r = seen.get(extent[d], 0)
            seen[extent[d]] = r + 1
            if r == len(pool):
                pool.append(self.var(_SUM))
            var[d] = pool[r]
        poly = _body(op, len(ins), scalars, self.consts)
        outs = [m for m in poly if -1 in m.operands]
        rest = [m for m in poly if -1 not in m.operands]
        if outs and (len(outs) != 1 or outs[0].operands != (-1,) or outs[0].coeff != 1):
            raise NotationError(
                f"{name}: its body must add to the output value once (out + a sum of "
                "products of the inputs)"
            )
        if not outs:
            if any(it == "reduction" for it in iters):
                raise NotationError(
                    f"{name}: a body with reduction loops must add to the output value"
                )
            chain.terms.clear()  # all-parallel and not reading the output: overwrites
        reductions = [d for d in range(loops) if d not in out_dims]
        for m in rest:
            used = {d for k in m.operands for d in dims[k]}
            coeff = m.coeff
            for d in reductions:
                if d not in used:
                    coeff = coeff * extent[d]
            factors = tuple((ins[k], tuple(var[d] for d in dims[k])) for k in m.operands)
            chain.terms.append(Contribution(coeff, factors))
        self.chains[op.results[0]] = chain

    # -- the outputs --------------------------------------------------------------------

    def _tensors(self) -> list[Tensor]:
        dist = "auto" if self.machine is not None else None
        inputs: dict[int, Tensor] = {}

        def tensor(name: str, shape: tuple[int, ...], elem: str, fmt: Format) -> Tensor:
            return Tensor(
                name,
                shape,
                dist=dist,
                machine=self.machine,
                dtype=dtype_of(elem, f"%{name}"),
                format=fmt,
            )

        taken = set(self.names)
        outs: list[Tensor] = []
        for n, value in enumerate(self.results):
            if value not in self.chains:
                raise NotationError(
                    f"func.return: result {n} of {self.fname} is not computed by a linalg "
                    "operation (a function argument or an untouched initial value)"
                )
            chain = self.chains[value]
            name = self._out_name(chain, value, n, taken)
            taken.add(name)
            out = tensor(name, chain.shape, chain.element, chain.format)
            rhs: Expr | None = None
            for c in chain.terms:
                for k, _ in c.factors:
                    if k not in inputs:
                        shape, elem, fmt = self.arg_types[k]
                        inputs[k] = tensor(self.names[k], shape, elem, fmt)
                term = _term(c, inputs)
                rhs = term if rhs is None else rhs + term
            out[chain.lhs] = Literal(0) if rhs is None else rhs
            outs.append(out)
        return outs

    def _out_name(self, chain: Chain, value: Any, n: int, taken: set[str]) -> str:
        if chain.root is not None and self.names[chain.root] not in self.root_named:
            self.root_named.add(self.names[chain.root])
            return self.names[chain.root]
        hint = value.name_hint
        if hint and hint.isidentifier() and hint not in taken:
            return hint
        k = n
        while f"out{k}" in taken:
            k += 1
        return f"out{k}"


_LHS, _SUM = "i", "k"


def _copy(chain: Chain) -> Chain:
    return Chain(
        chain.shape,
        chain.element,
        chain.format,
        chain.root,
        chain.lhs,
        list(chain.terms),
        {e: list(v) for e, v in chain.summed.items()},
    )


def _term(c: Contribution, inputs: dict[int, Tensor]) -> Expr:
    prod: Expr | None = None
    for k, idx in c.factors:
        a = Access(inputs[k], idx)
        prod = a if prod is None else prod * a
    if prod is None:
        return Literal(c.coeff)
    if c.coeff == 1:
        return prod
    if c.coeff == -1:
        return Neg(prod)
    return Literal(c.coeff) * prod


def _dims(m: Any, op: str) -> tuple[int, ...]:
    from xdsl.ir.affine import AffineDimExpr

    out = []
    for r in m.results:
        if not isinstance(r, AffineDimExpr):
            raise NotationError(
                f"{op}: indexing map {m} has the result {r}; distal reads maps whose results "
                "are loop dimensions"
            )
        out.append(r.position)
    return tuple(out)


def _constant(op: Any) -> complex | float | int:
    from xdsl.dialects.builtin import FloatAttr, IntegerAttr

    v = op.value
    if isinstance(v, FloatAttr):
        return float(v.value.data)
    if isinstance(v, IntegerAttr):
        return int(v.value.data)
    raise NotationError(f"arith.constant: {v} is not a scalar number")


def _body(
    op: Any,
    nins: int,
    scalars: dict[int, complex | float | int] | None = None,
    consts: dict[Any, complex | float | int] | None = None,
) -> Poly:
    """The body of ``op`` as a polynomial in its block arguments (inputs ``0..nins-1``, the
    output ``-1``), or a ``NotationError`` naming the operation it cannot read. Inputs in
    ``scalars`` (a scalar constant passed as an input) and values in ``consts`` (constants
    of the function, hoisted out of the body) read as their numbers."""
    scalars = scalars or {}
    consts = consts or {}
    block = op.regions[0].block
    val: dict[Any, Poly] = {}
    for k, a in enumerate(block.args):
        if k in scalars:
            c = scalars[k]
            val[a] = (Monomial(c, ()),) if c != 0 else ()
        else:
            val[a] = (Monomial(1, (k if k < nins else -1,)),)

    def look(x: Any) -> Poly | None:
        if x in val:
            return val[x]
        if x in consts:
            c = consts[x]
            return (Monomial(c, ()),) if c != 0 else ()
        return None

    for b in block.ops:
        n = _name(b)
        if n == "linalg.yield":
            if len(b.operands) != 1:
                raise NotationError(f"{op.name}: its body yields {len(b.operands)} values")
            got = look(b.operands[0])
            if got is None:
                raise NotationError(
                    f"linalg.yield in the body of {op.name} yields a value from outside it"
                )
            return _collect(got)
        if n == "arith.constant":
            c = _constant(b)
            val[b.results[0]] = (Monomial(c, ()),) if c != 0 else ()
            continue
        args = [look(x) for x in b.operands]
        if any(a is None for a in args):
            raise NotationError(f"{n} in the body of {op.name} reads a value from outside it")
        if n in _ADD:
            r = args[0] + args[1]
        elif n in _SUB:
            r = args[0] + _scale(args[1], -1)
        elif n in _MUL:
            r = tuple(
                Monomial(x.coeff * y.coeff, tuple(sorted(x.operands + y.operands)))
                for x in args[0]
                for y in args[1]
            )
        elif n == "arith.negf":
            r = _scale(args[0], -1)
        elif n in _CASTS:
            r = args[0]
        else:
            raise NotationError(
                f"{n} in the body of {op.name}: bodies are sums of products "
                "(arith mulf/addf/subf/negf, muli/addi/subi, constants, widening casts)"
            )
        val[b.results[0]] = _collect(r)
    raise NotationError(f"{op.name}: its body has no linalg.yield")


def _scale(p: Poly, c: int) -> Poly:
    return tuple(Monomial(m.coeff * c, m.operands) for m in p)


def _collect(p: Sequence[Monomial]) -> Poly:
    """Like monomials added up (in order of first appearance); zeros dropped."""
    out: dict[tuple[int, ...], complex | float | int] = {}
    for m in p:
        out[m.operands] = out.get(m.operands, 0) + m.coeff
    return tuple(Monomial(c, ops) for ops, c in out.items() if c != 0)
