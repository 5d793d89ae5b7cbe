"""``explain()`` of sparse kernels: the loop nest, how the pattern is cut, what moves."""

from __future__ import annotations

import numpy as np

from distal.plan.printer import relation_text, traffic_table
from distal.plan.sinks import PlanSummary
from distal.plan.sparse import COORD, DENSE, FUSED, Analysis, SparsePlan


def _cut_text(a: Analysis) -> list[str]:
    out = []
    for m, c in enumerate(a.cuts):
        names = ", ".join(v.name for v in c.vars)
        what = {
            DENSE: f"dense loop {names}: blocks of ceil(N/{c.parts})",
            COORD: f"coordinate {names} of the pattern: blocks of ceil(N/{c.parts}) coordinates",
            FUSED: f"fused ({names}): blocks of ceil(N/{c.parts}) pair numbers",
        }.get(c.kind, f"stored positions of ({names}) in {a.driver}: blocks of ceil(nnz/{c.parts})")
        out.append(f"  machine dimension {m}: {what}")
    return out


def explain_unbound(a: Analysis, plan: SparsePlan | None = None) -> str:
    """What a sparse kernel does before it knows the pattern (with ``plan``: the bound
    extents of its ``pos`` loops)."""
    s = a.schedule
    lines = [
        f"computation: {s.statement.assignment!r}",
        f"machine: {s.machine!r}",
        "schedule:",
        *("  " + x for x in repr(s).splitlines()),
        "",
        f"iteration: the stored entries of ({', '.join(v.name for v in a.svars)}) "
        f"(driver {a.driver}), times the dense loops "
        f"({', '.join(v.name for v in a.dvars) or 'none'})",
        *_cut_text(a),
    ]
    if s.relations:
        lines += ["where:"] + ["  " + relation_text(r, s.extent) for r in s.relations]
        if a.pos is not None:
            what = f"nnz of {a.driver} at its first {len(a.pos.coords)} level(s)"
            bound = ""
            if plan is not None:
                arr = plan.arrays[a.driver]
                k = len(a.pos.coords) - 1
                lv = arr.levels[k]
                npos = len(lv.crd) if lv.crd is not None else arr.nnz
                bound = f" = {npos} for the bound pattern"
            lines.append(
                f"  ({a.pos.position} runs over the {what}{bound}; the extents above are the "
                "dense upper bound)"
            )
    lines += [
        "",
        "tensors:",
        *(
            f"  {n}: {t.format.describe()}, dist {s.layouts()[n][0]!r}"
            + ("  (hull fetch)" if n in a.hull else "")
            for n, t in a.tensors.items()
        ),
        "",
        f"traffic depends on the pattern of {list(a.sparse_inputs)}: bind(inputs).explain()",
    ]
    return "\n".join(lines)


def explain_bound(plan: SparsePlan, summary: PlanSummary) -> str:
    """The unbound text, then the bound pattern's cut and the traffic of the plan written
    from it (``summary``: its stats and per-tensor totals)."""
    a = plan.analysis
    lines = [explain_unbound(a, plan).rsplit("\n", 1)[0]]
    sizes = [len(pp.entries) for pp in plan.procs]
    mean = float(np.mean(sizes)) if sizes else 0.0
    lines += [
        f"bound pattern: {plan.pattern.shape[1]} entries; per processor min {min(sizes)}, "
        f"max {max(sizes)}, max/mean {max(sizes) / mean if mean else 1.0:.3f}",
        "data moved (values; index words counted apart):",
    ]
    for name in a.tensors:
        w = sum(words for (t, _), (words, _) in summary.moved.items() if t == name)
        role = "partial sums" if name == a.output.name else "fetched"
        lines.append(f"  {name}: {w} words {role}")
    lines += ["", "per processor:", *("  " + x for x in traffic_table(summary.stats))]
    return "\n".join(lines)
