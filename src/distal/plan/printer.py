"""Human-readable reports: the scheduled loop nest, data movement and per-processor table."""

from __future__ import annotations

from collections import defaultdict

from distal.lang.nodes import IndexVar
from distal.plan.engine import loop_roles
from distal.plan.ir import (
    FETCH,
    FINAL,
    PARTIAL,
    Combine,
    Compute,
    Fetch,
    Flush,
    Forward,
    OpenOutput,
    Plan,
    RecvFinal,
    Reduce,
    SendFinal,
)
from distal.plan.region import describe
from distal.plan.sinks import PlanSummary
from distal.plan.stats import Stats
from distal.plan.visit import Interpreter, impl
from distal.schedule.api import Schedule
from distal.schedule.relations import Divide, Fuse, Pos, Relation, Rotate
from distal.text import plural


def relation_text(r: Relation, extent: dict[IndexVar, int]) -> str:
    """One relation as its equation."""
    if isinstance(r, Fuse):
        return f"{r.fused} = {r.outer}*{extent[r.inner]} + {r.inner}   (fused)"
    if isinstance(r, Pos):
        names = ", ".join(c.name for c in r.coords)
        return f"{r.position} = stored position of ({names}) in {r.tensor}"
    if isinstance(r, Rotate):
        by = " + ".join(b.name for b in r.by)
        return f"{r.target} = ({r.result} + {by}) mod {extent[r.target]}"
    stride = extent[r.inner] if isinstance(r, Divide) else r.size
    return f"{r.parent} = {r.outer}*{stride} + {r.inner}   ({r.parent} < {extent[r.parent]})"


def loop_nest(s: Schedule) -> list[str]:
    """The scheduled loop nest, one line per loop, with processor / step / leaf roles."""
    procs = s.processor_loops
    comm: dict[IndexVar, list[str]] = defaultdict(list)
    once = []
    for name in s.tensors():
        v = s.comm_var(name)
        if v is None:
            once.append(name)
        else:
            comm[v].append(name)
    _, steps = loop_roles(s)
    lines = []
    for depth, v in enumerate(s.loops):
        if v in procs:
            d = procs.index(v)
            role = f"processor dim {d}"
        elif v in steps:
            role = "step"
        else:
            role = "leaf"
        if v in s.parallel:
            role += ", threads"
        notes = f"  communicate {', '.join(comm[v])}" if comm.get(v) else ""
        lines.append(
            f"{'  ' * depth}for {v} in 0..{s.extent[v] - 1}:".ljust(40) + f"# {role}{notes}"
        )
    body = f"{s.statement.assignment.lhs!r} = {s.statement.concrete_rhs!r}"
    lines.append("  " * len(s.loops) + body)
    if once:
        lines.append(f"(fetched once per processor: {', '.join(once)})")
    return lines


def traffic_table(st: Stats) -> list[str]:
    """Per-processor words in/out, messages, iterations and peak words.

    On a hierarchical machine, ``in@L`` columns split the words received by the
    machine level they cross (``in@0``: between top-level nodes).
    """
    levels = st.level_words_received if st.level_words_received else []
    levels = levels if len(levels) > 1 else []
    cols = [
        ("words in", st.words_received),
        *((f"in@{k}", lw) for k, lw in enumerate(levels)),
        ("words out", st.words_sent),
        ("msgs in", st.messages_received),
        *(
            [("index in", st.index_words_received)]
            if any(st.index_words_received) or any(st.index_words_sent)
            else []
        ),
        ("iterations", st.iterations),
        ("peak words", st.peak_words),
    ]
    width = [max(len(name), 8) + 2 for name, _ in cols]
    head = f"{'proc':>5}" + "".join(
        f"{name:>{w}}" for (name, _), w in zip(cols, width, strict=True)
    )
    lines = [head, "-" * len(head)]
    for p in range(st.nprocs):
        lines.append(
            f"{p:>5}" + "".join(f"{v[p]:>{w}}" for (_, v), w in zip(cols, width, strict=True))
        )
    lines.append("-" * len(head))
    lines.append(
        f"{'max':>5}" + "".join(f"{max(v):>{w}}" for (_, v), w in zip(cols, width, strict=True))
    )
    lines.append(f"total words moved: {st.total_words}")
    return lines


def movement(s: Schedule, moved: dict[tuple[str, str], list[int]]) -> list[str]:
    """Where each tensor lives and moves."""
    layouts = s.layouts()
    out_name = s.statement.output.name
    lines = []
    for name, t in s.tensors().items():
        dist, m = layouts[name]
        where = f"{dist!r} on {m!r}" if dist is not None and m is not None else "all on processor 0"
        v = s.comm_var(name)
        at = f"at each iteration of {v}" if v is not None else "once per processor"
        role = "output" if name == out_name else "input"
        lines.append(f"{name} ({role}, {t.shape}): {where}; communicated {at}")
        kinds = (PARTIAL, FINAL) if name == out_name else (FETCH,)
        for k in kinds:
            words, msgs = moved.get((name, k), (0, 0))
            if msgs:
                what = {
                    FETCH: "fetched",
                    PARTIAL: "partial sums sent to reducers",
                    FINAL: "final blocks sent to replicas",
                }[k]
                lines.append(f"    {what}: {plural(words, 'word')} in {plural(msgs, 'message')}")
    return lines


_ROUTING_TEXT = {
    "direct": "direct (each piece from its owner, each partial sum straight to its reducer)",
    "broadcast": "broadcast (binomial-tree broadcasts of shared pieces; partial sums direct)",
    "tree": "tree (binomial-tree broadcasts of shared pieces and reductions of partial sums)",
}


def _box(box) -> str:
    return describe(box)


class _OpText(Interpreter):
    """One instruction of processor ``p``, as a line."""

    @impl(Fetch)
    def fetch(self, op: Fetch, p: int) -> str:
        if op.box is None:
            return f"fetch {op.tensor}: nothing (buffer released)"
        if op.view:
            return f"fetch {op.tensor}{_box(op.box)}: view of the own block"
        parts = ", ".join(
            f"{_box(piece)} {'own' if src == p else f'from {src}'}" for src, piece in op.pieces
        )
        return f"fetch {op.tensor}{_box(op.box)}: {parts}"

    @impl(Forward)
    def forward(self, op: Forward, p: int) -> str:
        return f"forward {op.tensor}{_box(op.piece)} to {op.dst} (once it has arrived)"

    @impl(OpenOutput)
    def open_output(self, op: OpenOutput, p: int) -> str:
        how = "into the own block" if op.direct else "in a partial buffer"
        return f"open output {_box(op.box)} {how}"

    @impl(Compute)
    def compute(self, op: Compute, p: int) -> str:
        if op.work is not None:
            w = op.work
            return f"compute {w.entries} stored entries x {w.width} ({len(w.terms)} term(s))"
        return "compute " + " + ".join(_box(b) for b in op.boxes)

    @impl(Combine)
    def combine(self, op: Combine, p: int) -> str:
        return f"combine partial {_box(op.box)} from {op.src}"

    @impl(Flush)
    def flush(self, op: Flush, p: int) -> str:
        sends = [f"{_box(b)} to {d}" for d, b in op.sends] + [f"{_box(b)} own" for b in op.local]
        return f"flush partial {_box(op.box)}: " + ", ".join(sends)

    @impl(Reduce)
    def reduce(self, op: Reduce, p: int) -> str:
        return f"reduce partial {_box(op.box)} from {op.src}"

    @impl(SendFinal)
    def send_final(self, op: SendFinal, p: int) -> str:
        return f"send final {_box(op.box)} to {op.dst}"

    @impl(RecvFinal)
    def recv_final(self, op: RecvFinal, p: int) -> str:
        return f"receive final {_box(op.box)} from {op.src}"


_OP_TEXT = _OpText()


def program_text(plan: Plan, p: int) -> list[str]:
    """Processor ``p``'s instructions, step by step, and how many messages it exchanges."""
    sent = [m for m in plan.messages if m.src == p]
    got = [m for m in plan.messages if m.dst == p]
    out = [
        f"program of processor {p} ({plural(plan.nsteps, 'step')}; "
        f"sends {plural(len(sent), 'message')}, {plural(sum(m.words for m in sent), 'word')}; "
        f"receives {plural(len(got), 'message')}, {plural(sum(m.words for m in got), 'word')}):"
    ]
    step = None
    for op in plan.ops(p):
        at = getattr(op, "step", plan.nsteps)
        if at != step:
            step = at
            out.append(f"  step {at}:" if at < plan.nsteps else "  after the last step:")
        out.append("    " + _OP_TEXT.visit(op, p))
    return out


def explain(
    s: Schedule, summary: PlanSummary, routing: str = "direct", notes: list[str] = ()
) -> str:
    """The full report of ``Kernel.explain()``; ``notes`` end it (the kernel adds how the
    traffic compares with the communication lower bound, which the cost model knows)."""
    out = [
        f"computation: {s.statement.assignment!r}",
        f"machine: {s.machine!r}",
        f"routing: {_ROUTING_TEXT.get(routing, routing)}",
        "schedule:",
        *("  " + line for line in repr(s).splitlines()),
        "",
        "loop nest:",
    ]
    out += ["  " + x for x in loop_nest(s)]
    if s.relations:
        out += ["", "where:"] + ["  " + relation_text(r, s.extent) for r in s.relations]
    out += ["", f"data ({plural(summary.nsteps, 'step')} per processor):"]
    out += ["  " + x for x in movement(s, summary.moved)]
    out += ["", "per processor:"] + ["  " + x for x in traffic_table(summary.stats)]
    out += list(notes)
    return "\n".join(out)
