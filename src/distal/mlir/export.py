"""``kernel.to_mlir(p)``: processor ``p``'s leaf computation as MLIR in upstream dialects.

The text is one ``func.func``. Its arguments are the blocks of the inputs, in the
statement's order, then the initial value of the output block (each named after its
tensor: ``%B``, ``%C``, ``%A``); it returns the output block. Each term of the concrete
statement (:mod:`distal.lang.concrete`) is one ``linalg.generic`` that adds the term into
the running output value::

    A(i,j) = B(i,k) * C(k,j)          loops (d0, d1, d2) = (i, j, k)
      B  affine_map<(d0, d1, d2) -> (d0, d2)>      "parallel", "parallel", "reduction"
      C  affine_map<(d0, d1, d2) -> (d2, d1)>      body: %p = arith.mulf %b, %c
      A  affine_map<(d0, d1, d2) -> (d0, d1)>            %s = arith.addf %a, %p

A term's loops are the output's variables (``parallel``, in the output's order) and the
variables it sums (``reduction``); a coefficient ``-1`` subtracts (``subf`` / ``subi``),
any other is an ``arith.constant`` factor. Inputs of another element type than the
output are cast first (``extf``, ``sitofp``, ...), as the leaves compute in the output's
type.

Which blocks: what the plan's ``Compute`` instructions say processor ``p``'s leaves see.

* **Boxes** (a dense plan): the leaf runs once per box of the iteration space, adding into
  the output block, so the function is *one leaf call*, with the box's extents; a variable
  whose extent differs between ``p``'s boxes (ragged blocks) is dynamic (``?``). A comment
  lists the boxes. A term that does not depend on a summed variable runs only in the box
  that starts that variable at 0; when such a term runs in some of ``p``'s boxes and not in
  others, one function cannot say so and the export is ``NotSupportedYet``.
* **Stored entries** (a plan bound to sparse patterns): the leaf visits ``p``'s stored
  entries once, so the function covers all of them: each variable's extent is the hull of
  the coordinates ``p``'s regions (its entries, the rows of dense operands it gathers, the
  output rows it adds to) take along it, and the sparse operands' types carry their
  encodings (:func:`distal.mlir.types.encoding`).

A processor with no leaf work gets a function over empty blocks (every extent 0) that
returns its initial output.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.errors import NotSupportedYet
from distal.lang.concrete import Statement, Term
from distal.lang.nodes import IndexVar, accesses
from distal.mlir.types import element_type, encoding, is_float
from distal.plan.ir import Compute, Fetch, OpenOutput
from distal.plan.region import Entries, Rows

Extent = int | None  # None: dynamic (``?``)
Interval = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Operand:
    """One argument of the function: a tensor's block, its extents and element type."""

    name: str
    shape: tuple[Extent, ...]
    element: str
    encoding: str | None = None

    @property
    def type(self) -> str:
        """``tensor<4x?xf64, #enc>``."""
        dims = "".join(("?" if s is None else str(s)) + "x" for s in self.shape)
        enc = f", {self.encoding}" if self.encoding else ""
        return f"tensor<{dims}{self.element}{enc}>"


@dataclass(frozen=True, slots=True)
class Generic:
    """One term as a ``linalg.generic``: loops ``d0..`` are the output's variables (the
    first ``parallel``) then the summed ones; each factor reads input ``operand`` at loops
    ``dims``."""

    coeff: complex | float | int
    factors: tuple[tuple[int, tuple[int, ...]], ...]
    loops: int
    parallel: int
    #: several terms fused into one generic (an element-wise statement: every loop
    #: parallel): each term's coefficient and its number of factors, in order; empty for
    #: one term (``coeff`` times every factor)
    terms: tuple[tuple[complex | float | int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class LeafFunction:
    """A processor's leaf computation, ready to print (:meth:`text`)."""

    name: str
    inputs: tuple[Operand, ...]
    output: Operand
    generics: tuple[Generic, ...]
    notes: tuple[str, ...] = ()
    #: a sparse output: no initial-value argument, the first generic writes into a
    #: ``tensor.empty`` (what upstream's sparsifier lowers) and the caller adds the
    #: initial value
    fresh_output: bool = False

    def text(self) -> str:
        """The function as MLIR text (deterministic: the same kernel prints the same)."""
        return _Printer(self).text()


class _Printer:
    """Prints a :class:`LeafFunction`; values inside the function are numbered ``%0, %1,
    ...`` so they never meet the arguments, which are named after tensors (identifiers)."""

    def __init__(self, fn: LeafFunction) -> None:
        self.fn = fn
        self.count = 0
        self.lines: list[str] = [f"// {n}" for n in fn.notes]

    def fresh(self) -> str:
        self.count += 1
        return f"%{self.count - 1}"

    def text(self) -> str:
        fn = self.fn
        fresh = fn.fresh_output
        params = fn.inputs if fresh else (*fn.inputs, fn.output)
        args = ", ".join(f"%{o.name}: {o.type}" for o in params)
        self.lines.append(f"func.func @{fn.name}({args}) -> {fn.output.type} {{")
        acc = self.empty_output() if fresh else f"%{fn.output.name}"
        for n, g in enumerate(fn.generics):
            last = n == len(fn.generics) - 1
            acc = self.generic(g, acc, overwrite=fresh and n == 0, name=fresh and last)
        self.lines.append(f"  return {acc} : {fn.output.type}")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def empty_output(self) -> str:
        """A fresh output (``tensor.empty``), its dynamic extents read off an input that
        the output's loop indexes (the caller adds the initial value outside)."""
        fn = self.fn
        sizes = []
        for d, s in enumerate(fn.output.shape):
            if s is not None:
                continue
            for g in fn.generics:
                hit = next(((o, ds.index(d)) for o, ds in g.factors if d in ds), None)
                if hit is not None:
                    c = self.fresh()
                    self.lines.append(f"  {c} = arith.constant {hit[1]} : index")
                    v = self.fresh()
                    inp = fn.inputs[hit[0]]
                    self.lines.append(f"  {v} = tensor.dim %{inp.name}, {c} : {inp.type}")
                    sizes.append(v)
                    break
            else:
                raise NotSupportedYet(
                    f"output {fn.output.name!r}: its dimension {d} has a dynamic extent no input "
                    "gives"
                )
        v = self.fresh()
        self.lines.append(f"  {v} = tensor.empty({', '.join(sizes)}) : {fn.output.type}")
        return v

    def generic(self, g: Generic, acc: str, overwrite: bool = False, name: bool = False) -> str:
        """One generic adding ``g`` into ``acc``; ``overwrite``: into a fresh output, which
        an all-parallel body does not read; ``name``: the result is named after the output
        (a function without an output argument, read back by ``dl.from_mlir``)."""
        fn, out = self.fn, self.fn.output
        dims = ", ".join(f"d{k}" for k in range(g.loops))

        def amap(ds: Sequence[int]) -> str:
            return f"affine_map<({dims}) -> ({', '.join(f'd{d}' for d in ds)})>"

        maps = [amap(ds) for _, ds in g.factors] + [amap(range(g.parallel))]
        iters = ", ".join('"parallel"' if k < g.parallel else '"reduction"' for k in range(g.loops))
        res = f"%{out.name}" if name else self.fresh()
        head = f"  {res} = linalg.generic {{indexing_maps = [{', '.join(maps)}], "
        head += f"iterator_types = [{iters}]}}"
        if g.factors:
            reordered = fn.fresh_output and g.loops > g.parallel
            ops = [
                self.in_loop_order(o, ds)
                if reordered
                else (f"%{fn.inputs[o].name}", fn.inputs[o].type)
                for o, ds in g.factors
            ]
            names = ", ".join(v for v, _ in ops)
            types = ", ".join(t for _, t in ops)
            head += f" ins({names} : {types})"
        self.lines.append(f"{head} outs({acc} : {out.type}) {{")
        ins = [self.fresh() for _ in g.factors]
        o = self.fresh()
        elems = [fn.inputs[k].element for k, _ in g.factors]
        bargs = ", ".join(
            f"{v}: {e}" for v, e in zip([*ins, o], [*elems, out.element], strict=True)
        )
        self.lines.append(f"  ^bb0({bargs}):")
        skip = overwrite and g.loops == g.parallel
        self.lines.append(
            f"    linalg.yield {self.body(g, ins, elems, None if skip else o)} : {out.element}"
        )
        self.lines.append(f"  }} -> {out.type}")
        return res

    def in_loop_order(self, k: int, dims: Sequence[int]) -> tuple[str, str]:
        """Input ``k`` laid out with its dimensions in loop order: itself when they are, else
        a ``sparse_tensor.convert`` to an all-dense encoding in that order. A sparse output
        summing over a loop is built row by row only when no dense operand orders the loops
        otherwise (else the sparsifier expands the rows, which upstream's LLVM lowering of
        its ``i1`` flags rejects)."""
        op = self.fn.inputs[k]
        if op.encoding is not None or list(dims) == sorted(dims):
            return f"%{op.name}", op.type
        order = sorted(range(len(dims)), key=lambda n: dims[n])
        ds = ", ".join(f"d{n}" for n in range(len(dims)))
        levels = ", ".join(f"d{n} : dense" for n in order)
        enc = f"#sparse_tensor.encoding<{{ map = ({ds}) -> ({levels}) }}>"
        t = Operand(op.name, op.shape, op.element, enc).type
        v = self.fresh()
        self.lines.append(f"  {v} = sparse_tensor.convert %{op.name} : {op.type} to {t}")
        return v, t

    def op(self, text: str) -> str:
        v = self.fresh()
        self.lines.append(f"    {v} = {text}")
        return v

    def body(self, g: Generic, ins: list[str], elems: list[str], o: str | None) -> str:
        """``o + sum(coeff * prod(ins of the term))`` in arith, the inputs cast to the
        output's type (``o`` None: the sum alone)."""
        e = self.fn.output.element
        vals = [
            v if el == e else self.op(_cast(v, el, e)) for v, el in zip(ins, elems, strict=True)
        ]
        acc = o
        start = 0
        for coeff, n in g.terms or ((g.coeff, len(vals)),):
            acc = self.term(acc, coeff, vals[start : start + n])
            start += n
        return acc

    def term(self, acc: str | None, coeff: complex | float | int, vals: list[str]) -> str:
        """``acc + coeff * prod(vals)`` in arith (``acc`` None: ``coeff * prod(vals)``)."""
        e = self.fn.output.element
        f = is_float(e)
        vals = list(vals)
        if not vals or coeff not in (1, -1) or (acc is None and coeff == -1):
            vals.append(self.op(f"arith.constant {_number(coeff, e)} : {e}"))
            coeff = 1
        # the later factors first, then the first: IREE (3.13) vectorizes a three-input
        # contraction so associated (MTTKRP: B * (C * D)) and rejects ((B * C) * D)
        mul = "mulf" if f else "muli"
        prod = vals[-1]
        for v in reversed(vals[1:-1]):
            prod = self.op(f"arith.{mul} {v}, {prod} : {e}")
        if len(vals) > 1:
            prod = self.op(f"arith.{mul} {vals[0]}, {prod} : {e}")
        if acc is None:
            return prod
        kind = ("addf" if f else "addi") if coeff == 1 else ("subf" if f else "subi")
        return self.op(f"arith.{kind} {acc}, {prod} : {e}")


def _cast(v: str, src: str, dst: str) -> str:
    """The arith cast of ``v`` from element type ``src`` to ``dst`` (signed integers: the
    export refuses unsigned ones that need a cast)."""
    bits = int(src[1:]), int(dst[1:])
    if is_float(src) and is_float(dst):
        return f"arith.{'extf' if bits[0] < bits[1] else 'truncf'} {v} : {src} to {dst}"
    if is_float(dst):
        return f"arith.sitofp {v} : {src} to {dst}"
    return f"arith.{'extsi' if bits[0] < bits[1] else 'trunci'} {v} : {src} to {dst}"


def _number(c: complex | float | int, element: str) -> str:
    """An arith constant's literal: MLIR float literals need a decimal point."""
    if isinstance(c, complex):
        raise NotSupportedYet(f"the complex coefficient {c!r} has no arith constant")
    if not is_float(element):
        return str(int(c))
    x = float(c)
    if not math.isfinite(x):
        raise NotSupportedYet(f"the coefficient {c!r} is not a finite number")
    return f"{x:.17e}"


def _plain(st: Statement) -> None:
    """Refuse what the export does not write yet: shifted or scaled accesses (``u[i - 1]``)
    and terms restricted to a box of the iteration space (their maps and guards)."""
    for term in st.terms:
        if getattr(term, "domain", ()):
            raise NotSupportedYet(
                f"the term {_term_text(term)} runs on part of the iteration space only: the "
                "MLIR export does not write guarded bodies yet"
            )
        for acc in (st.assignment.lhs, *term.factors):
            if any(o != 0 for o in getattr(acc, "offsets", ())) or any(
                c != 1 for c in getattr(acc, "scales", ())
            ):
                raise NotSupportedYet(
                    f"the access {acc!r} is shifted or scaled: the MLIR export writes accesses "
                    "by plain index variables only"
                )


def leaf_function(
    st: Statement,
    tensors: Mapping[str, Any],
    extent: Mapping[IndexVar, Extent],
    terms: Sequence[tuple[Term, complex | float | int]],
    name: str,
    notes: Sequence[str] = (),
) -> LeafFunction:
    """The function computing ``terms`` (each with the coefficient it runs with) on blocks
    whose extent along each variable is ``extent[v]``.

    ``tensors`` maps names to :class:`distal.Tensor` (dtype and format of each operand).
    """
    _plain(st)
    inputs = st.inputs()
    index = {t.name: k for k, t in enumerate(inputs)}
    first: dict[str, tuple[IndexVar, ...]] = {}
    for acc in accesses(st.assignment.rhs):
        idx = first.setdefault(acc.tensor.name, acc.indices)
        if [extent[v] for v in idx] != [extent[v] for v in acc.indices]:
            raise NotSupportedYet(
                f"tensor {acc.tensor.name!r} is read as {acc!r} and with {list(idx)}, whose "
                "block extents differ: one function argument cannot have both shapes"
            )
    out_t = st.output
    out_elem = element_type(out_t.dtype, out_t.name)

    def operand(t: Any, indices: tuple[IndexVar, ...]) -> Operand:
        elem = element_type(t.dtype, t.name)
        if elem != out_elem and "u" in (np.dtype(t.dtype).kind, np.dtype(out_t.dtype).kind):
            raise NotSupportedYet(
                f"tensor {t.name!r} is {np.dtype(t.dtype)} and the output {out_t.name!r} "
                f"{np.dtype(out_t.dtype)}: arith integers are signless, so the export casts "
                "no unsigned values"
            )
        fmt = tensors[t.name].format
        return Operand(t.name, tuple(extent[v] for v in indices), elem, encoding(fmt))

    ins = tuple(operand(t, first.get(t.name, ())) for t in inputs)
    out = operand(out_t, st.lhs_vars)
    lhs = st.lhs_vars
    generics = []
    for term, coeff in terms:
        summed = [v for v in st.variables if v in term.summed and v in term.used()]
        loop = {v: k for k, v in enumerate((*lhs, *summed))}
        generics.append(
            Generic(
                coeff=coeff,
                factors=tuple(
                    (index[f.tensor.name], tuple(loop[v] for v in f.indices)) for f in term.factors
                ),
                loops=len(loop),
                parallel=len(lhs),
            )
        )
    if len(generics) > 1 and all(g.loops == g.parallel == len(lhs) for g in generics):
        # an element-wise statement (every term over the output's loops, nothing summed):
        # one generic whose body adds the terms, as a fused group of the arrays is one
        generics = [
            Generic(
                coeff=1,
                factors=tuple(f for g in generics for f in g.factors),
                loops=len(lhs),
                parallel=len(lhs),
                terms=tuple((g.coeff, len(g.factors)) for g in generics),
            )
        ]
    return LeafFunction(name, ins, out, tuple(generics), tuple(notes), out.encoding is not None)


# -- what processor p's leaves see, from its program ------------------------------------------


def to_mlir(kernel: Any, p: int) -> str:
    """Processor ``p``'s leaf computation as MLIR text (see the module docstring).

    ``kernel`` is a :class:`distal.Kernel` or :class:`distal.BoundKernel` with a plan (a
    sparse kernel bound to its patterns) and ``p`` a valid processor number: the
    kernel's ``to_mlir`` method checks both.
    """
    return leaf_of(kernel, p).text()


def leaf_of(kernel: Any, p: int) -> LeafFunction:
    """Processor ``p``'s leaf function (what :func:`to_mlir` prints)."""
    st = kernel.schedule.statement
    tensors = kernel.schedule.tensors()
    prog = kernel.program(p)
    ops = prog.ops(p)
    computes = [op for op in ops if isinstance(op, Compute)]
    name = f"{st.output.name}_leaf_p{p}"
    head = f"distal: processor {p} of {kernel.nprocs}: {st.assignment!r}"
    if any(c.work is not None for c in computes):
        extent, notes = _entry_extents(st, prog, ops, p)
        terms = [(t, t.coeff) for t in st.terms]
        return leaf_function(st, tensors, extent, terms, name, [head, *notes])
    boxes = [b for c in computes for b in c.boxes]
    extent, terms, notes = _box_leaf(st, boxes, p)
    return leaf_function(st, tensors, extent, terms, name, [head, *notes])


def _show_box(st: Statement, box: Sequence[Interval]) -> str:
    return " ".join(f"{v.name}[{lo},{hi})" for v, (lo, hi) in zip(st.variables, box, strict=True))


def _box_leaf(
    st: Statement, boxes: Sequence[Any], p: int
) -> tuple[dict[IndexVar, Extent], list[tuple[Term, Any]], list[str]]:
    """Extents, running terms and notes of the one leaf call ``p`` makes per box."""
    if not boxes:
        return (
            {v: 0 for v in st.variables},
            [],
            ["no leaf work on this processor: the function returns its initial output"],
        )
    pos = {v: n for n, v in enumerate(st.variables)}
    extent: dict[IndexVar, Extent] = {}
    for v, n in pos.items():
        sizes = {hi - lo for lo, hi in (b[n] for b in boxes)}
        extent[v] = sizes.pop() if len(sizes) == 1 else None
    terms = []
    lhs = set(st.lhs_vars)
    for term in st.terms:
        gates = [pos[v] for v in st.variables if v not in lhs and v not in term.summed]
        runs = [all(b[g][0] <= 0 < b[g][1] for g in gates) for b in boxes]
        if not any(runs):
            continue
        if not all(runs):
            raise NotSupportedYet(
                f"processor {p}: the term {_term_text(term)} runs in {sum(runs)} of its "
                f"{len(boxes)} leaf calls (where {', '.join(st.variables[g].name for g in gates)}"
                " starts at 0): one MLIR function per leaf call cannot say which"
            )
        coeff = term.coeff
        for v in term.summed - term.used():
            sizes = {b[pos[v]][1] - b[pos[v]][0] for b in boxes}
            if len(sizes) != 1:
                raise NotSupportedYet(
                    f"processor {p}: the term {_term_text(term)} sums {v.name} without using "
                    f"it, over {sorted(sizes)} points in different leaf calls"
                )
            coeff = coeff * sizes.pop()
        terms.append((term, coeff))
    shown = [_show_box(st, b) for b in boxes[:8]]
    more = [f"  ... and {len(boxes) - 8} more"] if len(boxes) > 8 else []
    notes = [
        f"one leaf call; this processor makes {len(boxes)}, over the boxes:",
        *(f"  {s}" for s in shown),
        *more,
    ]
    return extent, terms, notes


def _term_text(term: Term) -> str:
    return " * ".join(repr(f) for f in term.factors) or repr(term.coeff)


def _hull(region: Any, ndim: int, coords: Any) -> list[Interval] | None:
    """Per dimension, the coordinates ``region`` holds: a box, rows x box, or stored
    entries (their coordinates from ``coords()``, the tensor's pattern); None when empty."""
    if isinstance(region, Rows):
        if len(region.rows) == 0:
            return None
        out: list[Interval] = [(0, 0)] * ndim
        for k, d in enumerate(region.sdims):
            out[d] = (int(region.rows[:, k].min()), int(region.rows[:, k].max()) + 1)
        for k, d in enumerate(region.ddims):
            out[d] = tuple(region.box[k])  # type: ignore[assignment]
        return out
    if isinstance(region, Entries):
        if len(region.positions) == 0:
            return None
        c = coords()[:, region.positions]
        return [(int(c[d].min()), int(c[d].max()) + 1) for d in range(ndim)]
    box = [tuple(iv) for iv in region]
    return None if any(lo >= hi for lo, hi in box) else box  # type: ignore[return-value]


def _entry_extents(
    st: Statement, prog: Any, ops: Sequence[Any], p: int
) -> tuple[dict[IndexVar, Extent], list[str]]:
    """Each variable's extent over processor ``p``'s stored entries: the hull of the
    coordinates its regions take along it."""
    span, notes = entry_spans(st, prog, ops, p)
    extent: dict[IndexVar, Extent] = {
        v: span[v][1] - span[v][0] if v in span else 0 for v in st.variables
    }
    return extent, notes


def entry_spans(
    st: Statement, prog: Any, ops: Sequence[Any], p: int
) -> tuple[dict[IndexVar, Interval], list[str]]:
    """Each variable's span ``[lo, hi)`` over processor ``p``'s stored entries (the hull of
    the coordinates its regions take along it; a variable without any: absent) and a note."""
    regions: dict[str, list[Any]] = {}
    for f in (op for op in ops if isinstance(op, Fetch) and op.box is not None):
        regions.setdefault(f.tensor, []).append(f.box)
    for o in (op for op in ops if isinstance(op, OpenOutput)):
        regions.setdefault(st.output.name, []).append(o.box)
    for t in st.inputs():
        if t.name not in regions:
            own = prog.owned_region(t.name, p)
            regions[t.name] = [] if own is None else [own]
    span: dict[IndexVar, Interval] = {}
    accesses = [st.assignment.lhs, *(f for term in st.terms for f in term.factors)]
    for acc in accesses:
        t = acc.tensor
        pattern = prog.patterns.get(t.name)
        for region in regions.get(t.name, ()):
            hull = _hull(region, t.ndim, pattern.coordinates if pattern is not None else None)
            for v, (lo, hi) in zip(acc.indices, hull or (), strict=False):
                if v in span:
                    lo, hi = min(lo, span[v][0]), max(hi, span[v][1])
                span[v] = (lo, hi)
    entries = {
        t: sum(len(r.positions) for r in rs if isinstance(r, Entries)) for t, rs in regions.items()
    }
    stored = ", ".join(f"{n} {t}" for t, n in entries.items() if n)
    where = " ".join(f"{v.name}[{lo},{hi})" for v, (lo, hi) in span.items())
    notes = [f"this processor's stored entries ({stored or 'none'}), all steps, over {where}"]
    return span, notes
