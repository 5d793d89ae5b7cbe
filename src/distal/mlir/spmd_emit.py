"""Printing the SPMD function of ``kernel.to_mlir(distributed=True)`` from the analysis of
:mod:`distal.mlir.spmd_plan`.

Every processor runs the function on its own blocks. Values that are the same on every
processor (collectives, the leaf call on whole buffers) are plain code; what differs between
processors or steps is read from constant tables indexed by the step and the processor's
linear index, or, for point-to-point data movement and leaf calls on parts of buffers, is one
case per (step, processor) of an ``scf.index_switch`` whose code is static. Types carry a
static extent where every processor and step agree, ``?`` elsewhere (``tensor.cast`` meets
the two).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from distal.mlir.shard import GRID
from distal.mlir.spmd_plan import Analysis, Box, Exchange, LeafCall, Step, coords, extents

Extent = int | None


@dataclass(frozen=True, slots=True)
class TType:
    """A ranked tensor type."""

    shape: tuple[Extent, ...]
    elem: str
    enc: str | None = None

    @property
    def text(self) -> str:
        dims = "".join(("?" if s is None else str(s)) + "x" for s in self.shape)
        return f"tensor<{dims}{self.elem}{', ' + self.enc if self.enc else ''}>"

    def union(self, other: TType) -> TType:
        shape = tuple(a if a == b else None for a, b in zip(self.shape, other.shape, strict=True))
        return TType(shape, self.elem, self.enc)


def ttype_of(boxes: Sequence[Box | None], elem: str, ndim: int) -> TType:
    """The type holding every box (None: an empty one)."""
    shape: list[Extent] | None = None
    for b in boxes:
        ext = extents(b) if b is not None else (0,) * ndim
        if shape is None:
            shape = list(ext)
        else:
            shape = [a if a == e else None for a, e in zip(shape, ext, strict=True)]
    return TType(tuple(shape if shape is not None else [0] * ndim), elem)


class Emitter:
    """Lines of one function body, with fresh names, index constants and tables."""

    def __init__(self, grid: tuple[int, ...]) -> None:
        self.grid = grid
        self.nprocs = 1
        for g in grid:
            self.nprocs *= g
        self.count = 0
        self.lines: list[str] = []
        self.consts: dict[int, str] = {}
        self.head: list[str] = []
        self.indent = 2

    def body(self) -> list[str]:
        """The head (constants, tables) and the lines, without the pure definitions nothing
        reads (a table or a key the steps turned out not to need)."""
        lines = [*self.head, *self.lines]
        pure = re.compile(r"^\s*(%[\w]+) = (arith\.|tensor\.empty|tensor\.extract )")
        while True:
            text = "\n".join(lines)
            dead = set()
            for ln in lines:
                m = pure.match(ln)
                if m and len(re.findall(re.escape(m.group(1)) + r"\b", text)) == 1:
                    dead.add(ln)
            if not dead:
                return lines
            lines = [ln for ln in lines if ln not in dead]

    def fresh(self, hint: str = "v") -> str:
        self.count += 1
        return f"%{hint}{self.count}"

    def emit(self, text: str) -> None:
        self.lines.append(" " * self.indent + text)

    def op(self, text: str, hint: str = "v") -> str:
        v = self.fresh(hint)
        self.emit(f"{v} = {text}")
        return v

    def idx(self, n: int) -> str:
        if n not in self.consts:
            name = f"%c{n}" if n >= 0 else f"%cm{-n}"
            self.consts[n] = name
            self.head.append(f"  {name} = arith.constant {n} : index")
        return self.consts[n]

    def table(self, data: list, hint: str) -> tuple[str, str]:
        """A constant ``index`` tensor (nested lists of ints): its name and type."""
        shape: list[int] = []
        x = data
        while isinstance(x, list):
            shape.append(len(x))
            x = x[0] if x else 0
        t = f"tensor<{'x'.join(map(str, shape))}xindex>"
        v = f"%{hint}{len(self.head)}"
        self.head.append(f"  {v} = arith.constant dense<{data}> : {t}")
        return v, t

    def lookup(self, table: tuple[str, str], *ix: str) -> str:
        return self.op(f"tensor.extract {table[0]}[{', '.join(ix)}] : {table[1]}", "t")

    def cast(self, v: str, src: TType, dst: TType) -> str:
        if src == dst:
            return v
        return self.op(f"tensor.cast {v} : {src.text} to {dst.text}", "cast")

    def zeros(self, t: TType, sizes: Sequence[int] | None = None) -> str:
        """A zero tensor of type ``t``; its dynamic extents from ``sizes`` (static code)."""
        dyn = [self.idx(sizes[d]) for d, s in enumerate(t.shape) if s is None] if sizes else []
        if sizes is None and any(s is None for s in t.shape):
            dyn = [self.idx(0) for s in t.shape if s is None]
        e = self.op(f"tensor.empty({', '.join(dyn)}) : {t.text}", "empty")
        z = self.zero_scalar(t.elem)
        return self.op(f"linalg.fill ins({z} : {t.elem}) outs({e} : {t.text}) -> {t.text}", "zero")

    def zero_scalar(self, elem: str) -> str:
        lit = "0.0" if elem.startswith("f") else "0"
        return self.op(f"arith.constant {lit} : {elem}", "z")

    def slice(self, v: str, vt: TType, lo: Sequence[int], size: Sequence[int]) -> tuple[str, TType]:
        """The static slice ``v[lo : lo + size]``."""
        rt = TType(tuple(size), vt.elem)
        if vt.shape == tuple(size) and not any(lo):
            return v, vt
        if not vt.shape:
            return v, vt
        one = ", ".join("1" for _ in size)
        r = self.op(
            f"tensor.extract_slice {v}[{', '.join(map(str, lo))}] [{', '.join(map(str, size))}] "
            f"[{one}] : {vt.text} to {rt.text}",
            "slice",
        )
        return r, rt

    def insert(self, part: str, pt: TType, into: str, it: TType, lo: Sequence[int]) -> str:
        if not it.shape:
            return part if pt == it else self.cast(part, pt, it)
        one = ", ".join("1" for _ in lo)
        size = ", ".join(str(s) for s in pt.shape)
        return self.op(
            f"tensor.insert_slice {part} into {into}[{', '.join(map(str, lo))}] [{size}] [{one}] "
            f": {pt.text} into {it.text}",
            "ins",
        )

    def add(self, a: str, b: str, t: TType) -> str:
        """``a + b`` element-wise (both of type ``t``), written into ``a``."""
        return self.op(
            f"linalg.add ins({a}, {b} : {t.text}, {t.text}) outs({a} : {t.text}) -> {t.text}", "sum"
        )

    def yield_case(self, label: str, value: str, ty: str) -> None:
        """One region of an ``scf.index_switch`` that yields ``value``."""
        pad = " " * self.indent
        self.lines.append(f"{pad}{label} {{\n{pad}  scf.yield {value} : {ty}\n{pad}}}")

    # -- point to point, in a case's static code ---------------------------------------

    def axes_all(self) -> str:
        return ", ".join(str(m) for m in range(len(self.grid)))

    def send(self, v: str, vt: TType, dst: int) -> None:
        v, vt = self._rank1(v, vt)
        where = ", ".join(map(str, coords(dst, self.grid)))
        self.op(
            f"shard.send {v} on @{GRID} grid_axes = [{self.axes_all()}] destination = [{where}] "
            f": ({vt.text}) -> {vt.text}",
            "sent",
        )

    def recv(self, t: TType, src: int) -> str:
        one = TType((1,), t.elem) if not t.shape else t
        e = self.op(f"tensor.empty() : {one.text}", "empty")
        where = ", ".join(map(str, coords(src, self.grid)))
        r = self.op(
            f"shard.recv {e} on @{GRID} grid_axes = [{self.axes_all()}] source = [{where}] "
            f": ({one.text}) -> {one.text}",
            "recv",
        )
        if not t.shape:
            r = self.op(f"tensor.collapse_shape {r} [] : {one.text} into {t.text}", "scalar")
        return r

    def _rank1(self, v: str, vt: TType) -> tuple[str, TType]:
        """0-d values travel as one-element vectors (send and recv take ranked tensors of
        rank 1 or more)."""
        if vt.shape:
            return v, vt
        t = TType((1,), vt.elem)
        return self.op(
            f"tensor.expand_shape {v} [] output_shape [1] : {vt.text} into {t.text}", "vec"
        ), t


@dataclass
class Program:
    """What the SPMD printer needs besides the analysis."""

    name: str
    leaf: str
    inputs: tuple[str, ...]  # the leaf's inputs, in order
    output: str
    ndim: dict[str, int]
    elem: dict[str, str]
    own_type: dict[str, TType]  # the function arguments (and the output's own block)
    leaf_in: tuple[TType, ...]
    leaf_out: TType
    sparse: frozenset[str]
    sharding_names: dict[str, str]
    output_sparse: bool = False


def step_groups(steps: Sequence[Step]) -> list[tuple[int, int]]:
    """Ranges of steps ``[a, b)`` sharing one loop body: step 0 on its own when it differs
    from the others (Cannon's skew), the rest together when they agree."""
    n = len(steps)
    if n <= 1:
        return [(0, n)] if n else []

    def sig(s: Step) -> tuple:
        return (*(e.signature() for e in s.exchanges), s.output.kind, s.output.axes)

    rest = {sig(s) for s in steps[1:]}
    if len(rest) != 1:
        return [(k, k + 1) for k in range(n)]
    if sig(steps[0]) == next(iter(rest)):
        return [(0, n)]
    return [(0, 1), (1, n)]


def direct_calls(a: Analysis, prog: Program, lo: int, hi: int, buffers: dict[str, list]) -> bool:
    """Whether every processor makes exactly one leaf call per step of ``[lo, hi)`` on its
    whole buffers (then the call is plain code)."""
    for s in range(lo, hi):
        st = a.steps[s]
        for p in range(len(st.calls)):
            cs = st.calls[p]
            if len(cs) != 1:
                return False
            c: LeafCall = cs[0]
            for k, t in enumerate(prog.inputs):
                if t in prog.sparse:
                    continue
                if c.inputs[k] != buffers[t][s][p]:
                    return False
            if c.output != a.output_acc[s][p]:  # type: ignore[attr-defined]
                return False
    return True


def exchange_type(ex: Exchange, prog: Program) -> TType:
    return ttype_of(ex.buffers, prog.elem[ex.tensor], prog.ndim[ex.tensor])
