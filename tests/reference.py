"""Reference helpers for the distal test-suite.

Nothing here looks at distal's internals. A problem is plain data; its expected value comes
from ``numpy.einsum`` in float64; distal objects are built only through the public API
(``import distal as dl``). Every generated case can print itself as a standalone reproducer
script (``Case.code()``), which hypothesis shows on failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

import distal as dl

INDEX_NAMES = "ijklm"
TENSOR_NAMES = "BCDEFGH"
OUTPUT_NAME = "A"
STAT_FIELDS = ("words_received", "words_sent", "messages_received", "iterations", "peak_words")
MAX_SERIAL_STEPS = 64


def uniform(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], drawn uniformly (st.integers favours small values); shrinks to lo."""
    return st.sampled_from(range(lo, hi + 1))


# --------------------------------------------------------------------------------------------
# Problems: what to compute
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    name: str
    indices: tuple[str, ...]


@dataclass(frozen=True)
class Term:
    """``coefficient * prod(operands)``; ``style`` says how the coefficient is written."""

    operands: tuple[Operand, ...]
    coefficient: float = 1.0
    style: str = "left"  # "left": c * e, "right": e * c, "numpy": np.float64(c) * e


@dataclass(frozen=True)
class Problem:
    """``A[output] = term0 (+|-) term1``; all variables absent from ``output`` are summed.

    When there are two terms, both hold exactly the same summed variables, so summing over the
    whole right-hand side equals summing each term on its own.
    """

    extents: tuple[tuple[str, int], ...]
    output: tuple[str, ...]
    terms: tuple[Term, ...]
    combine: str = "+"

    @property
    def extent(self) -> dict[str, int]:
        return dict(self.extents)

    def operands(self) -> list[Operand]:
        return [op for t in self.terms for op in t.operands]

    def shape(self, indices: tuple[str, ...]) -> tuple[int, ...]:
        ext = self.extent
        return tuple(ext[v] for v in indices)

    def statement_vars(self) -> tuple[str, ...]:
        """Default loop order: left-side variables, then others by first appearance."""
        order = list(self.output)
        for op in self.operands():
            for v in op.indices:
                if v not in order:
                    order.append(v)
        return tuple(order)

    def iteration_points(self) -> int:
        return math.prod(self.extent[v] for v in self.statement_vars())

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {
            op.name: np.asarray(rng.standard_normal(self.shape(op.indices)), dtype=np.float64)
            for op in self.operands()
        }

    def expected(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        out_shape = self.shape(self.output)
        total = np.zeros(out_shape, dtype=np.float64)
        for n, term in enumerate(self.terms):
            value = term_value(term, self.output, self.extent, inputs)
            sign = -1.0 if (n > 0 and self.combine == "-") else 1.0
            total = total + sign * value
        return total

    def einsum_string(self, term: Term) -> str:
        present = [v for v in self.output if any(v in op.indices for op in term.operands)]
        return ",".join("".join(op.indices) for op in term.operands) + "->" + "".join(present)

    def statement_code(self) -> str:
        """The assignment as distal code (for reproducers)."""
        parts = []
        for term in self.terms:
            e = " * ".join(f"{op.name}[{_idx_code(op.indices)}]" for op in term.operands)
            c = term.coefficient
            if c == 1:
                parts.append(e)
            elif c == -1:
                parts.append(f"-({e})")
            elif term.style == "right":
                parts.append(f"({e}) * {c!r}")
            elif term.style == "numpy":
                parts.append(f"np.float64({c!r}) * ({e})")
            else:
                parts.append(f"{c!r} * ({e})")
        rhs = f" {self.combine} ".join(parts)
        return f"{OUTPUT_NAME}[{_idx_code(self.output)}] = {rhs}"


def term_value(
    term: Term, output: tuple[str, ...], extent: dict[str, int], inputs: dict[str, np.ndarray]
) -> np.ndarray:
    """numpy value of one product, broadcast to the output's full shape."""
    present = [v for v in output if any(v in op.indices for op in term.operands)]
    subs = ",".join("".join(op.indices) for op in term.operands) + "->" + "".join(present)
    arrays = [np.asarray(inputs[op.name], dtype=np.float64) for op in term.operands]
    value = np.asarray(np.einsum(subs, *arrays), dtype=np.float64)
    view = value.reshape([extent[v] if v in present else 1 for v in output])
    full = np.broadcast_to(view, [extent[v] for v in output])
    return float(term.coefficient) * full


def _idx_code(indices: tuple[str, ...]) -> str:
    if not indices:
        return "()"
    return ", ".join(indices)


# --------------------------------------------------------------------------------------------
# Building distal objects through the public API
# --------------------------------------------------------------------------------------------


class VarPool(dict):
    """name -> IndexVar, created on first use through ``dl.index_vars``."""

    def __missing__(self, name: str) -> Any:
        (v,) = dl.index_vars(name)
        self[name] = v
        return v


def access(tensor: Any, indices: tuple[Any, ...]) -> Any:
    if len(indices) == 0:
        return tensor[()]
    if len(indices) == 1:
        return tensor[indices[0]]
    return tensor[tuple(indices)]


def assign(tensor: Any, indices: tuple[Any, ...], expr: Any) -> None:
    if len(indices) == 0:
        tensor[()] = expr
    elif len(indices) == 1:
        tensor[indices[0]] = expr
    else:
        tensor[tuple(indices)] = expr


@dataclass
class Built:
    output: Any
    tensors: dict[str, Any]
    vars: VarPool
    machine: Any


def build(
    problem: Problem,
    machine: Any = None,
    dists: dict[str, str | None] | None = None,
    attach: dict[str, bool] | None = None,
) -> Built:
    """Create the tensors and the assignment. ``attach[name]``: pass ``machine`` even when
    the tensor's dist is None."""
    dists = dists or {}
    attach = attach or {}
    pool = VarPool()
    for v in problem.statement_vars():
        pool[v] = dl.index_vars(v)[0]

    def make(name: str, indices: tuple[str, ...]) -> Any:
        dist = dists.get(name)
        m = machine if (dist is not None or attach.get(name, False)) else None
        return dl.Tensor(name, problem.shape(indices), dist=dist, machine=m)

    tensors: dict[str, Any] = {OUTPUT_NAME: make(OUTPUT_NAME, problem.output)}
    for op in problem.operands():
        tensors[op.name] = make(op.name, op.indices)

    exprs = []
    for term in problem.terms:
        e = None
        for op in term.operands:
            a = access(tensors[op.name], tuple(pool[v] for v in op.indices))
            e = a if e is None else e * a
        c = term.coefficient
        if c == 1:
            pass
        elif c == -1:
            e = -e
        elif term.style == "right":
            e = e * c
        elif term.style == "numpy":
            e = np.float64(c) * e
        else:
            e = c * e
        exprs.append(e)
    rhs = exprs[0]
    for e in exprs[1:]:
        rhs = rhs + e if problem.combine == "+" else rhs - e
    assign(tensors[OUTPUT_NAME], tuple(pool[v] for v in problem.output), rhs)
    return Built(tensors[OUTPUT_NAME], tensors, pool, machine)


def apply_schedule(sched: Any, ops: list[tuple], built: Built) -> Any:
    """Apply schedule commands given as plain data (see ``schedule_ops``)."""
    pool = built.vars
    for op in ops:
        kind = op[0]
        if kind == "distribute":
            _, vs, outs, ins = op
            sched = sched.distribute(
                [pool[v] for v in vs],
                [pool[v] for v in outs],
                [pool[v] for v in ins],
                built.machine,
            )
        elif kind in ("divide", "split"):
            _, v, o, i, amount = op
            sched = getattr(sched, kind)(pool[v], pool[o], pool[i], amount)
        elif kind == "reorder":
            sched = sched.reorder([pool[v] for v in op[1]])
        elif kind == "rotate":
            _, t, by, r = op
            sched = sched.rotate(pool[t], [pool[b] for b in by], pool[r])
        elif kind == "communicate":
            _, names, v = op
            if len(names) == 1:
                sched = sched.communicate(built.tensors[names[0]], pool[v])
            else:
                sched = sched.communicate([built.tensors[n] for n in names], pool[v])
        elif kind == "parallelize":
            sched = sched.parallelize(pool[op[1]])
        else:  # pragma: no cover - generator bug
            raise ValueError(kind)
    return sched


def ops_code(ops: list[tuple]) -> list[str]:
    lines = []
    for op in ops:
        kind = op[0]
        if kind == "distribute":
            _, vs, outs, ins = op
            lines.append(
                f".distribute([{', '.join(vs)}], [{', '.join(outs)}], [{', '.join(ins)}], M)"
            )
        elif kind in ("divide", "split"):
            _, v, o, i, amount = op
            lines.append(f".{kind}({v}, {o}, {i}, {amount})")
        elif kind == "reorder":
            lines.append(f".reorder([{', '.join(op[1])}])")
        elif kind == "rotate":
            _, t, by, r = op
            lines.append(f".rotate({t}, [{', '.join(by)}], {r})")
        elif kind == "communicate":
            _, names, v = op
            arg = names[0] if len(names) == 1 else f"[{', '.join(names)}]"
            lines.append(f".communicate({arg}, {v})")
        elif kind == "parallelize":
            lines.append(f".parallelize({op[1]})")
    return lines


# --------------------------------------------------------------------------------------------
# Stats helpers
# --------------------------------------------------------------------------------------------


def stats_fields(stats: Any) -> dict[str, list[int]]:
    return {f: [int(x) for x in getattr(stats, f)] for f in STAT_FIELDS}


def assert_stats_equal(measured: Any, predicted: Any) -> None:
    m, p = stats_fields(measured), stats_fields(predicted)
    for f in STAT_FIELDS:
        assert m[f] == p[f], f"measured {f} {m[f]} != predicted {p[f]}"


def assert_stats_sane(stats: Any, iteration_points: int | None = None) -> None:
    s = stats_fields(stats)
    n = len(s["iterations"])
    for f in STAT_FIELDS:
        assert len(s[f]) == n, f"{f} has {len(s[f])} entries, iterations has {n}"
        assert all(x >= 0 for x in s[f]), f"negative {f}: {s[f]}"
    assert sum(s["words_sent"]) == sum(s["words_received"])
    assert stats.total_words == sum(s["words_received"])
    assert stats.max_words_received == max(s["words_received"], default=0)
    # a message carries at least one word
    assert all(m <= w for m, w in zip(s["messages_received"], s["words_received"], strict=True))
    if iteration_points is not None:
        assert sum(s["iterations"]) == iteration_points


# --------------------------------------------------------------------------------------------
# Hypothesis strategies
# --------------------------------------------------------------------------------------------


@st.composite
def problems(draw: Any, max_vars: int = 5, max_extent: int = 7, allow_sum: bool = True) -> Problem:
    nvars = draw(st.sampled_from([0, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5][: 2 * max_vars + 1]))
    names = list(INDEX_NAMES[:nvars])
    extent = {v: draw(uniform(1, max_extent)) for v in names}
    tensor_names = iter(TENSOR_NAMES)

    def operand(pool: list[str]) -> Operand:
        order = draw(uniform(0, min(4, len(pool))))
        idx = tuple(draw(st.permutations(pool))[:order]) if order else ()
        return Operand(next(tensor_names), idx)

    def coefficient() -> tuple[float, str]:
        c = draw(st.sampled_from([1.0, 1.0, 1.0, 2.0, -1.0, 0.5, 3]))
        return c, draw(st.sampled_from(["left", "left", "right", "numpy"]))

    ops1 = [operand(names) for _ in range(draw(uniform(1, 3)))]
    used: list[str] = []
    for op in ops1:
        used.extend(v for v in op.indices if v not in used)
    out_order = draw(uniform(0, min(4, len(used))))
    output = tuple(draw(st.permutations(used))[:out_order]) if out_order else ()
    summed = [v for v in used if v not in output]
    c1, s1 = coefficient()
    terms = [Term(tuple(ops1), c1, s1)]
    combine = "+"
    if allow_sum and draw(st.booleans()):
        pool = list(output) + summed
        ops2 = [operand(pool) for _ in range(draw(uniform(1, 2)))]
        have = {v for op in ops2 for v in op.indices}
        missing = [v for v in summed if v not in have]
        while missing:
            ops2.append(Operand(next(tensor_names), tuple(missing[:4])))
            missing = missing[4:]
        c2, s2 = coefficient()
        terms.append(Term(tuple(ops2), c2, s2))
        combine = draw(st.sampled_from(["+", "-"]))
    extents = tuple((v, extent[v]) for v in used)
    return Problem(extents, output, tuple(terms), combine)


@st.composite
def machine_shapes(draw: Any, max_ndim: int = 3, max_size: int = 12) -> tuple[int, ...]:
    ndim = draw(uniform(1, max_ndim))
    shape: list[int] = []
    for _ in range(ndim):
        budget = max_size // math.prod(shape) if shape else max_size
        shape.append(draw(uniform(1, min(4, budget))))
    return tuple(shape)


_COMPACT_NAMES = "abcdefghpqrstuvwxyz"
_WORD_NAMES = ["row", "col", "dep", "ax", "b2", "t", "w", "lay", "ch"]


@st.composite
def distributions(draw: Any, order: int, machine_shape: tuple[int, ...]) -> str:
    """A random legal distribution string for a tensor of ``order`` over ``machine_shape``."""
    ndim = len(machine_shape)
    spaced = draw(st.booleans()) and (order >= 2 or ndim >= 2)
    pool = list(_WORD_NAMES) if spaced else list(_COMPACT_NAMES)
    names = draw(st.permutations(pool))
    lhs, spare = names[:order], names[order:]
    kinds = ["star", "int", "free"] + (["dim", "dim", "dim"] if order else [])
    rhs = []
    for g in machine_shape:
        kind = draw(st.sampled_from(kinds))
        if kind == "dim":
            rhs.append(draw(st.sampled_from(lhs)))
        elif kind == "star":
            rhs.append("*")
        elif kind == "int":
            rhs.append(str(draw(uniform(0, g - 1))))
        else:
            rhs.append(draw(st.sampled_from(spare)))
    if spaced:
        return f"{' '.join(lhs)} -> {' '.join(rhs)}".strip()
    arrow = draw(st.sampled_from(["->", " -> "]))
    return f"{''.join(lhs)}{arrow}{''.join(rhs)}".strip()


@dataclass
class _Loop:
    name: str
    extent: int
    proc: bool


@st.composite
def schedule_ops(
    draw: Any,
    problem: Problem,
    machine_shape: tuple[int, ...],
    allow_distribute: bool = True,
    eager: bool = False,
) -> list[tuple]:
    """A random legal sequence of schedule commands, as plain data.

    ``eager``: always distribute when possible, and reorder / rotate more often.
    Tracks the loop nest: split/divide replace v by (outer, inner) in place; distribute puts
    outers, then inners, then the remaining loops; reorder permutes a subset of serial loops
    within the positions they occupy; rotate replaces its target by the result.
    """
    tensor_names = [OUTPUT_NAME] + [op.name for op in problem.operands()]
    nest = [_Loop(v, problem.extent[v], False) for v in problem.statement_vars()]
    ops: list[tuple] = []
    outers: list[str] = []
    ndim = len(machine_shape)

    yes = uniform(0, 3).map(bool) if eager else st.booleans()
    if allow_distribute and len(nest) >= ndim and (eager or draw(uniform(0, 4)) > 0):
        chosen = list(draw(st.permutations([lp.name for lp in nest]))[:ndim])
        outs = [f"{v}o" for v in chosen]
        ins = [f"{v}i" for v in chosen]
        ext = {lp.name: lp.extent for lp in nest}
        ops.append(("distribute", chosen, outs, ins))
        new = [_Loop(o, g, True) for o, g in zip(outs, machine_shape, strict=True)]
        new += [
            _Loop(i, -(-ext[v] // g), False)
            for v, i, g in zip(chosen, ins, machine_shape, strict=True)
        ]
        new += [lp for lp in nest if lp.name not in chosen]
        nest, outers = new, outs

    def serial() -> list[_Loop]:
        return [lp for lp in nest if not lp.proc]

    for _ in range(draw(uniform(0, 2))):
        if not serial():
            break
        target = draw(st.sampled_from(serial()))
        kind = draw(st.sampled_from(["divide", "split"]))
        amount = draw(uniform(1, 3))
        o, i = f"{target.name}o", f"{target.name}i"
        if kind == "divide":
            eo, ei = amount, -(-target.extent // amount)
        else:
            eo, ei = -(-target.extent // amount), amount
        ops.append((kind, target.name, o, i, amount))
        pos = nest.index(target)
        nest[pos : pos + 1] = [_Loop(o, eo, False), _Loop(i, ei, False)]

    if len(serial()) >= 2 and draw(yes):
        names = [lp.name for lp in serial()]
        count = draw(uniform(1, len(names)))
        subset = list(draw(st.permutations(names))[:count])
        by_name = {lp.name: lp for lp in nest}
        positions = sorted(k for k, lp in enumerate(nest) if lp.name in subset)
        for pos, name in zip(positions, subset, strict=True):
            nest[pos] = by_name[name]
        ops.append(("reorder", subset))

    if outers and serial() and draw(yes):
        target = draw(st.sampled_from(serial()))
        k = draw(uniform(1, len(outers)))
        by = list(draw(st.permutations(outers))[:k])
        result = f"{target.name}r"
        ops.append(("rotate", target.name, by, result))
        nest[nest.index(target)] = _Loop(result, target.extent, False)

    if serial() and draw(uniform(0, 5)) == 0:
        ops.append(("parallelize", draw(st.sampled_from(serial())).name))

    # communicate: processor loops, or serial loops with few serial steps down to them
    candidates: list[str] = []
    steps = 1
    for lp in nest:
        if lp.proc:
            candidates.append(lp.name)
        else:
            steps *= lp.extent
            if steps <= MAX_SERIAL_STEPS:
                candidates.append(lp.name)
    if candidates:
        placed: dict[str, list[str]] = {}
        for name in tensor_names:
            if draw(yes):
                placed.setdefault(draw(st.sampled_from(candidates)), []).append(name)
        for loop_name, names in placed.items():
            if len(names) > 1 and draw(st.booleans()):
                ops.append(("communicate", names, loop_name))
            else:
                ops.extend(("communicate", [n], loop_name) for n in names)
    return ops


@dataclass
class Case:
    problem: Problem
    machine_shape: tuple[int, ...]
    dists: dict[str, str | None]
    attach: dict[str, bool]
    ops: list[tuple] = field(default_factory=list)

    def build(self) -> Built:
        return build(self.problem, dl.Machine(*self.machine_shape), self.dists, self.attach)

    def code(self) -> str:
        """A standalone reproducer script."""
        p = self.problem
        lines = ["import numpy as np", "import distal as dl", ""]
        lines.append(f"M = dl.Machine{self.machine_shape!r}")
        svars = p.statement_vars()
        if svars:
            lines.append(f"{', '.join(svars)}, = dl.index_vars({' '.join(svars)!r})")
        fresh = []
        for op in self.ops:
            for x in op[1:]:
                for name in x if isinstance(x, list) else [x]:
                    if (
                        isinstance(name, str)
                        and name not in svars
                        and name not in fresh
                        and name != OUTPUT_NAME
                        and name not in TENSOR_NAMES
                    ):
                        fresh.append(name)
        if fresh:
            lines.append(f"{', '.join(fresh)}, = dl.index_vars({' '.join(fresh)!r})")
        for name, idx in [(OUTPUT_NAME, p.output)] + [(o.name, o.indices) for o in p.operands()]:
            d = self.dists.get(name)
            m = "M" if (d is not None or self.attach.get(name)) else "None"
            lines.append(f"{name} = dl.Tensor({name!r}, {p.shape(idx)!r}, dist={d!r}, machine={m})")
        lines.append(p.statement_code())
        lines.append("s = (dl.schedule(A)")
        lines.extend(f"     {x}" for x in ops_code(self.ops))
        lines.append("     )")
        lines.append("k = dl.compile(s)")
        lines.append("rng = np.random.default_rng(0)")
        ins = ", ".join(
            f"{o.name!r}: rng.standard_normal({p.shape(o.indices)!r})" for o in p.operands()
        )
        lines.append(f"res = k.run({{{ins}}})")
        for t in p.terms:
            lines.append(f"# term: np.einsum({p.einsum_string(t)!r}, ...) * {t.coefficient}")
        lines.append("print(res.value, res.stats, k.stats())")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return "Case(\n" + self.code() + "\n)"


@st.composite
def cases(
    draw: Any,
    with_schedule: bool = True,
    max_vars: int = 5,
    allow_sum: bool = True,
    eager: bool = False,
) -> Case:
    problem = draw(problems(max_vars=max_vars, allow_sum=allow_sum))
    if eager:
        # enough variables to distribute over
        assume(len(problem.statement_vars()) >= 2)
    # machines of rank <= the number of statement variables can be distributed over
    nvars = len(problem.statement_vars())
    mshape = draw(machine_shapes(max_ndim=draw(uniform(max(1, min(3, nvars)), 3))))
    dists: dict[str, str | None] = {}
    attach: dict[str, bool] = {}
    names = [(OUTPUT_NAME, problem.output)] + [(o.name, o.indices) for o in problem.operands()]
    for name, idx in names:
        if draw(uniform(0, 4)) == 0:
            dists[name] = None
            attach[name] = draw(st.booleans())
        else:
            dists[name] = draw(distributions(len(idx), mshape))
            attach[name] = True
    ops = draw(schedule_ops(problem, mshape, eager=eager)) if with_schedule else []
    return Case(problem, mshape, dists, attach, ops)
