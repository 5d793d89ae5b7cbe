"""``kernel.to_mlir(distributed=True)``: the whole distributed program as one module in
upstream dialects (``shard``, ``scf``, ``tensor``, ``linalg``, ``arith``, ``func``).

The module holds:

* ``shard.grid @grid``: the machine (a hierarchical one flattened, :mod:`distal.mlir.shard`);
* ``func.func private @<out>_leaf``: the leaf computation on blocks, the per-processor export's
  function with a static extent where every leaf call of every processor agrees and ``?``
  elsewhere;
* ``func.func @<out>_spmd``: the program every processor runs on its own blocks (one
  argument per input: the processor's block, or its stored entries of a sparse input),
  returning its block of the output. It opens with each tensor's ``shard.sharding`` and the
  processor's index, then runs the plan's steps (an ``scf.for`` over the steps whose data
  movement has one form, a peeled first step where it differs, as Cannon's skew): per step
  each input's collective (``shard.broadcast``, ``shard.shift``, ``shard.all_gather``) or its
  point-to-point sends and receives, the leaf calls, and the partial sums leaving
  (``shard.reduce``, ``shard.all_reduce``, or point to point), then the final copies to
  replicas. :mod:`distal.mlir.spmd_plan` says which collective each step's movement is.

``form="global"`` writes instead the statement on whole tensors with each tensor's sharding
(``shard.shard``), the input of upstream's own partitioner (``--shard-partition``): for
row splits and reduction splits it derives distal's leaves (and the ``all_reduce``); a
DISTAL schedule such as SUMMA's is what it cannot infer, so the SPMD form is the one that
carries the schedule.
"""

from __future__ import annotations

from typing import Any

from distal.errors import InputError, NotSupportedYet
from distal.lang.concrete import Statement
from distal.lang.nodes import IndexVar
from distal.mlir.export import _box_leaf, entry_spans, leaf_function
from distal.mlir.shard import Sharding, grid_text, placement_of, sharding_of
from distal.mlir.spmd_emit import Emitter, Program, TType, ttype_of
from distal.mlir.spmd_plan import Box, LeafCall, analyze, coords, inside
from distal.mlir.spmd_steps import Steps
from distal.mlir.types import element_type, encoding
from distal.plan.ir import Compute

FORMS = ("spmd", "global")


def to_mlir_distributed(kernel: Any, form: str = "spmd") -> str:
    """The distributed program of ``kernel`` as one module (see the module docstring)."""
    if form not in FORMS:
        raise InputError(f"to_mlir(form={form!r}): the forms are {list(FORMS)}")
    st: Statement = kernel.schedule.statement
    plan = kernel.plan
    machine = plan.machine
    if machine is None:
        raise NotSupportedYet("a plan without a machine has no grid to export")
    tensors = kernel.schedule.tensors()
    names = [st.output.name, *(t.name for t in st.inputs())]
    pls = {n: placement_of(kernel.schedule, n, plan.placements) for n in names}
    shardings = {n: sharding_of(n, pls[n]) for n in names}
    if form == "global":
        from distal.mlir.global_form import global_module

        return global_module(st, tensors, machine, shardings)
    return _spmd_module(kernel, st, tensors, machine, pls, shardings)


def _spmd_module(
    kernel: Any,
    st: Statement,
    tensors: dict,
    machine: Any,
    pls: dict,
    shardings: dict[str, Sharding],
) -> str:
    plan = kernel.plan
    P = plan.nprocs
    grid = machine.shape
    out = st.output
    inputs = [t.name for t in st.inputs()]
    first: dict[str, tuple[IndexVar, ...]] = {}
    for term in st.terms:
        for f in term.factors:
            first.setdefault(f.tensor.name, f.indices)
    sparse = {n for n in inputs if not tensors[n].format.is_dense}
    out_sparse = not tensors[out.name].format.is_dense
    own: dict[str, tuple[Box | None, ...]] = {}
    for n in [out.name, *inputs]:
        pl = pls[n]
        if n in sparse or pl is None:
            own[n] = (None,) * P
            continue
        own[n] = tuple(pl.owned_box(coords(p, pl.grid)) for p in range(P))
    # the leaf: every call's extents, one set of terms
    pos = {v: k for k, v in enumerate(st.variables)}
    seen: dict[IndexVar, set[int]] = {v: set() for v in st.variables}
    terms_of: set[tuple] = set()
    terms: list = []
    spans: dict[int, dict[IndexVar, tuple[int, int]]] = {}
    bound = any(c.work is not None for p in range(P) for c in plan.ops(p) if isinstance(c, Compute))
    for p in range(P):
        ops = plan.ops(p)
        comps = [c for c in ops if isinstance(c, Compute)]
        if not comps:
            continue
        if bound:
            span, _ = entry_spans(st, kernel.program(p), kernel.program(p).ops(p), p)
            spans[p] = span
            for v in st.variables:
                lo, hi = span.get(v, (0, 0))
                seen[v].add(hi - lo)
            ts = [(t, t.coeff) for t in st.terms]
        else:
            boxes = [b for c in comps for b in c.boxes]
            for b in boxes:
                for v, n in pos.items():
                    seen[v].add(b[n][1] - b[n][0])
            _, ts, _ = _box_leaf(st, boxes, p)
        key = tuple((id(t), c) for t, c in ts)
        terms_of.add(key)
        terms = ts
    if len(terms_of) > 1:
        raise NotSupportedYet(
            "the processors' leaves run different terms (a term gated to the blocks where a "
            "summed variable starts at 0): one SPMD leaf cannot say which"
        )
    extent = {v: (next(iter(s)) if len(s) == 1 else None) for v, s in seen.items()}
    leaf_name = f"{out.name}_leaf"
    fn = leaf_function(st, tensors, extent, terms, leaf_name)
    leaf_text = fn.text().replace(f"func.func @{leaf_name}", f"func.func private @{leaf_name}", 1)

    def call_boxes(p: int, c: Compute) -> list[LeafCall]:
        if c.work is not None:
            span = spans[p]
            sp = lambda idx: tuple(span.get(v, (0, 0)) for v in idx)  # noqa: E731
            return [
                LeafCall(
                    tuple(None if n in sparse else sp(first.get(n, ())) for n in inputs),
                    sp(st.lhs_vars),
                )
            ]
        calls = []
        for b in c.boxes:
            ins = tuple(tuple(b[pos[v]] for v in first.get(n, ())) for n in inputs)
            calls.append(LeafCall(ins, tuple(b[pos[v]] for v in st.lhs_vars)))
        return calls

    a = analyze(plan, own, inputs, call_boxes, sparse)
    for s, step in enumerate(a.steps):
        for ex in step.exchanges:
            k = inputs.index(ex.tensor)
            for p, calls in enumerate(step.calls):
                for c in calls:
                    hb, ob = ex.buffers[p], c.inputs[k]
                    if ob is not None and (hb is None or not inside(ob, hb)):
                        raise NotSupportedYet(
                            f"processor {p} reads {ex.tensor}{list(ob)} at step {s} outside the "
                            f"buffer it holds ({hb})"
                        )
    elem = {n: element_type(tensors[n].dtype, n) for n in [out.name, *inputs]}
    ndim = {n: tensors[n].ndim for n in [out.name, *inputs]}
    own_type: dict[str, TType] = {}
    for n in [out.name, *inputs]:
        if n in sparse:
            own_type[n] = TType(
                fn.inputs[inputs.index(n)].shape, elem[n], encoding(tensors[n].format)
            )
        elif n == out.name and out_sparse:
            own_type[n] = TType(fn.output.shape, elem[n], fn.output.encoding)
        else:
            own_type[n] = ttype_of(own[n], elem[n], ndim[n])
    leaf_in = tuple(TType(o.shape, o.element, o.encoding) for o in fn.inputs)
    leaf_out = TType(fn.output.shape, fn.output.element, fn.output.encoding)
    prog = Program(
        name=f"{out.name}_spmd",
        leaf=leaf_name,
        inputs=tuple(inputs),
        output=out.name,
        ndim=ndim,
        elem=elem,
        own_type=own_type,
        leaf_in=leaf_in,
        leaf_out=leaf_out,
        sparse=frozenset(sparse),
        sharding_names={},
        output_sparse=out_sparse,
    )
    e = Emitter(grid)
    for n, sh in shardings.items():
        if sh.split_axes:
            e.head.append(f"  %sharding_{n} = {sh.text()}")
    uniq = list(dict.fromkeys(inputs))
    args = {n: f"%{n}" for n in uniq}
    result = Steps(e, a, prog, args).run()
    e.emit(f"return {result} : {own_type[out.name].text}")
    sig = ", ".join(f"%{n}: {own_type[n].text}" for n in uniq)
    notes = _notes(st, kernel, machine, shardings, sparse, a)
    body = "\n".join(e.body())
    lines = [
        *(f"// {n}" for n in notes),
        "module {",
        f"  {grid_text(machine)}",
        *("  " + ln if ln else ln for ln in leaf_text.rstrip("\n").split("\n")),
        f"  func.func @{prog.name}({sig}) -> {own_type[out.name].text} {{",
        *("  " + ln for ln in body.split("\n")),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _notes(
    st: Statement,
    kernel: Any,
    machine: Any,
    shardings: dict[str, Sharding],
    sparse: set[str],
    a: Any,
) -> list[str]:
    plan = kernel.plan
    out = [
        f"distal: {st.assignment!r} on {machine!r}: {plan.nprocs} processors, {plan.nsteps} "
        f"step{'s' if plan.nsteps != 1 else ''}",
        f"@{st.output.name}_spmd runs on every processor of @grid: its arguments are the "
        "processor's blocks (sparse inputs: its stored entries), its result its block of "
        f"{st.output.name}",
    ]
    if machine.nlevels > 1:
        out.append(
            f"the hierarchical machine {machine!r} is one grid of all its dimensions, outer "
            "level first"
        )
    for s, step in enumerate(a.steps):
        moves = [f"{ex.tensor}: {ex.kind}" for ex in step.exchanges if ex.kind not in ("keep",)]
        if step.output.kind != "none":
            moves.append(f"{st.output.name} partial sums: {step.output.kind}")
        out.append(f"step {s}: " + (", ".join(moves) or "no data movement"))
    out.extend(sh.note for sh in shardings.values() if sh.note)
    return out
