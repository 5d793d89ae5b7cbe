"""Generate docs/algorithms.md: the gallery of distal.algorithms.

For every algorithm: the three blocks (distribution, computation, schedule) as code, the
``kernel.explain()`` output of a small case, and the closed form; then one table of predicted
max words received per processor (``kernel.stats()``) against the closed form and against
the matrix-multiply lower bound where it applies.

    python docs/gen_algorithms.py            # rewrite docs/algorithms.md
    python docs/gen_algorithms.py --check    # exit 1 if the committed file is stale
    python docs/gen_algorithms.py --pictures # also redraw the library's pictures in docs/img
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import distal as dl
from distal import algorithms as al

OUT = Path(__file__).resolve().parent / "algorithms.md"


def _matmul_lower_bound(d1: float, d2: float, d3: float, P: float) -> float:
    """Al Daas et al. (SPAA 2022): words some processor must receive (fallback copy)."""
    d1, d2, d3 = sorted((d1, d2, d3), reverse=True)
    if P <= 1:
        return 0.0
    if P <= d1 / d2:
        return d2 * d3 * (1 - 1 / P)
    if P <= d1 * d2 / d3**2:
        return 2 * math.sqrt(d1 * d2 * d3**2 / P) - (d1 * d3 + d2 * d3) / P
    return 3 * (d1 * d2 * d3 / P) ** (2 / 3) - (d1 * d2 + d1 * d3 + d2 * d3) / P


def matmul_lower_bound(d1: float, d2: float, d3: float, P: float) -> float:
    """The tight matmul bound; ``distal.cost.bounds.matmul_bound`` when it exists."""
    try:
        from distal.cost.bounds import matmul_bound
    except ImportError:
        return _matmul_lower_bound(d1, d2, d3, P)
    return float(matmul_bound(d1, d2, d3, P))


@dataclass(frozen=True)
class Entry:
    """One gallery section."""

    title: str
    fn: Callable[..., al.Algorithm]
    small: Callable[[], al.Algorithm]
    computation: str
    show_explain: bool = True


def nested(nodes: tuple[int, ...], q: int) -> dl.Machine:
    return dl.Machine(*nodes).nest(dl.Machine(q))


MM = "A[i, j] = B[i, k] * C[k, j]"
ENTRIES = [
    Entry("1-D row", al.row_1d, lambda: al.row_1d(8, 4, 4, machine=dl.Machine(2)), MM),
    Entry("SUMMA", al.summa, lambda: al.summa(4, 6, 6, machine=dl.Machine(2, 3)), MM),
    Entry("Cannon", al.cannon, lambda: al.cannon(4, machine=dl.Machine(2, 2)), MM),
    Entry("PUMMA", al.pumma, lambda: al.pumma(6, 4, 6, machine=dl.Machine(3, 2)), MM),
    Entry(
        "Johnson's 3-D", al.johnson_3d, lambda: al.johnson_3d(4, machine=dl.Machine(2, 2, 2)), MM
    ),
    Entry(
        "Solomonik's 2.5-D",
        al.solomonik_25d,
        lambda: al.solomonik_25d(8, machine=dl.Machine(4, 4, 2)),
        MM,
        show_explain=False,
    ),
    Entry("COSMA-style", al.cosma, lambda: al.cosma(4, machine=8), MM),
    Entry(
        "Hierarchical SUMMA",
        al.hierarchical_summa,
        lambda: al.hierarchical_summa(4, machine=nested((2, 2), 2)),
        MM,
    ),
    Entry(
        "Hierarchical Cannon",
        al.hierarchical_cannon,
        lambda: al.hierarchical_cannon(4, machine=nested((2, 2), 2)),
        MM,
        show_explain=False,
    ),
    Entry(
        "TTV",
        al.ttv,
        lambda: al.ttv((4, 4, 3), machine=dl.Machine(2, 2)),
        "A[i, j] = B[i, j, k] * c[k]",
    ),
    Entry(
        "TTM / TTMC",
        al.ttm,
        lambda: al.ttm((4, 4, 3), 2, machine=dl.Machine(2, 2), factor="distributed"),
        "A[i, j, l] = B[i, j, k] * C[k, l]",
    ),
    Entry(
        "MTTKRP",
        al.mttkrp,
        lambda: al.mttkrp((4, 4, 4), 2, machine=dl.Machine(2, 2, 2)),
        "A[i, l] = B[i, j, k] * C[j, l] * D[k, l]",
    ),
    Entry(
        "Inner product",
        al.inner_product,
        lambda: al.inner_product((4, 4, 2), machine=dl.Machine(2, 2)),
        "a[()] = B[i, j, k] * C[i, j, k]",
    ),
    Entry(
        "4-D contraction",
        al.contraction_4d,
        lambda: al.contraction_4d(4, 4, 4, 2, 2, 2, machine=dl.Machine(2, 2)),
        "A[a, b, i, j] = B[a, c, i, k] * C[c, b, k, j]",
    ),
]


def machine_code(M: dl.Machine) -> str:
    return repr(M).replace("Machine(", "dl.Machine(")


def q(x: object) -> str:
    """Python literal with double quotes (as ruff format writes it)."""
    if isinstance(x, str):
        return '"' + x + '"'
    if isinstance(x, list | tuple):
        return "[" + ", ".join(q(v) for v in x) + "]"
    return repr(x)


def distribution_code(alg: al.Algorithm) -> str:
    lines = [f"M = {machine_code(alg.machine)}"]
    for name, t in alg.tensors.items():
        lines.append(f"{name} = dl.Tensor({q(name)}, {t.shape}, dist={q(t.dist)}, machine=M)")
    return "\n".join(lines)


def schedule_code(alg: al.Algorithm) -> str:
    """The schedule as the gallery shows it: the derived variables, then ``s = (...)``.

    ``repr(schedule)`` may begin with its own ``dl.index_vars`` line; the gallery writes
    that line itself (with the variables in order of introduction), so it is dropped."""
    lines = repr(alg.schedule).splitlines()
    if lines and "dl.index_vars(" in lines[0]:
        lines = lines[1:]
    text = "\n".join(lines)
    for lvl in {alg.machine, *(alg.machine.level(k) for k in range(len(alg.machine.levels)))}:
        text = text.replace(f", {lvl!r})", f", {machine_code(lvl)})")
    derived = [v.name for v in alg.schedule.extent if v not in alg.schedule.statement.variables]
    names = ", ".join(derived)
    body = text[1:-1] if text.startswith("(") and text.endswith(")") else text
    return f"{names} = dl.index_vars({q(' '.join(derived))})\ns = (\n    {body}\n)"


def docstring(fn: Callable[..., object]) -> str:
    return textwrap.dedent(inspect.getdoc(fn) or "").strip()


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    alg: al.Algorithm
    mnk: tuple[int, int, int] | None  # matrix-product view for the lower bound


def table_rows() -> list[Row]:
    n = 72  # divisible by every grid below, so the closed forms are the textbook ones
    rows = [Row("1-D row", al.row_1d(96, 12, 12, machine=dl.Machine(4)), (96, 12, 12))]
    for fn, name in ((al.summa, "SUMMA"), (al.cannon, "Cannon"), (al.pumma, "PUMMA")):
        for g in ((2, 2), (3, 3), (4, 4), (2, 3)):
            rows.append(Row(name, fn(n, machine=dl.Machine(*g)), (n, n, n)))
    for g in ((2, 2, 2), (3, 3, 3)):
        rows.append(Row("Johnson 3-D", al.johnson_3d(n, machine=dl.Machine(*g)), (n, n, n)))
    for g in ((2, 2, 2), (4, 4, 2), (4, 4, 4)):
        rows.append(Row("2.5-D", al.solomonik_25d(n, machine=dl.Machine(*g)), (n, n, n)))
    for mnk, P in (
        ((n, n, n), 8),
        ((n, n, n), 27),
        ((n, n, n), 4),
        ((n, n, n), 16),
        ((96, 12, 12), 4),
        ((48, 48, 12), 4),
        ((72, 36, 18), 12),
        ((16, 16, 128), 8),
    ):
        rows.append(Row("COSMA-style", al.cosma(*mnk, machine=P), mnk))
    for fn, name in (
        (al.hierarchical_summa, "hier. SUMMA"),
        (al.hierarchical_cannon, "hier. Cannon"),
    ):
        rows.append(Row(name, fn(n, machine=nested((2, 2), 2)), (n, n, n)))
    rows += [
        Row("TTV", al.ttv((24, 24, 24), machine=dl.Machine(2, 2)), None),
        Row("TTM (C replicated)", al.ttm((24, 24, 24), 8, machine=dl.Machine(2, 2)), None),
        Row(
            "TTM (C tiles)",
            al.ttm((24, 24, 24), 8, machine=dl.Machine(2, 2), factor="distributed"),
            None,
        ),
        Row("MTTKRP", al.mttkrp((24, 24, 24), 8, machine=dl.Machine(2, 2, 2)), None),
        Row("inner product", al.inner_product((24, 24, 24), machine=dl.Machine(2, 2)), None),
        Row(
            "4-D contraction",
            al.contraction_4d(12, 12, 12, 2, 2, 2, machine=dl.Machine(2, 2)),
            (24, 24, 24),
        ),
    ]
    return rows


def shape_text(alg: al.Algorithm) -> str:
    return ", ".join(f"{n} {'x'.join(map(str, t.shape)) or '()'}" for n, t in alg.tensors.items())


def table() -> str:
    out = [
        "| algorithm | shapes | grid | P | predicted max words | closed form max "
        "| lower bound | predicted / bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table_rows():
        alg = row.alg
        st = alg.compile().stats()
        pred = st.max_words_received
        closed = alg.max_words
        P = alg.machine.size
        grid = " x ".join(map(str, alg.machine.shape))
        if alg.machine.nlevels > 1:
            grid = " / ".join(" x ".join(map(str, lv)) for lv in alg.machine.levels)
        if row.mnk is not None:
            bound = matmul_lower_bound(*row.mnk, P)
            b_txt = f"{bound:.1f}"
            r_txt = f"{pred / bound:.3f}" if bound > 0 else "—"
        else:
            b_txt = r_txt = "—"
        mark = "" if list(st.words_received) == list(alg.words) else " (!)"
        out.append(
            f"| {row.label} | {shape_text(alg)} | {grid} | {P} | {pred} | {closed}{mark} "
            f"| {b_txt} | {r_txt} |"
        )
    return "\n".join(out)


def hierarchical_note() -> str:
    n = 72
    M = nested((2, 2), 2)
    lines = [
        "| algorithm | inner split | inter-node words per node | flat algorithm on the "
        "2 x 2 node grid, per processor | intra-node words per processor |",
        "|---|---|---|---|---|",
    ]
    for fn, flat in ((al.hierarchical_summa, al.summa), (al.hierarchical_cannon, al.cannon)):
        for inner in ("k", "rows"):
            st = fn(n, machine=M, inner=inner).compile().stats()
            inter = st.level_words_received[0]
            per_node = sorted({sum(inter[b * 2 : b * 2 + 2]) for b in range(4)})
            fl = sorted(set(flat(n, machine=M.level(0)).compile().stats().words_received))
            intra = sorted(set(st.level_words_received[1]))
            lines.append(f"| {fn.__name__} | `{inner}` | {per_node} | {fl} | {intra} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------

HEADER = """# Algorithm gallery

<!-- Generated by docs/gen_algorithms.py; do not edit by hand. -->

`distal.algorithms` gives the distributed algorithms of the literature as ready schedules.
Every one is built only from public commands (`dl.Tensor(dist=...)`, `dl.schedule`,
`.distribute`, `.divide`, `.reorder`, `.rotate`, `.communicate`); nothing in the compiler
knows their names. Each function returns an `Algorithm` with the tensors, the schedule and
the closed-form words each processor receives (`alg.words`), derived from the block rule of
the distribution notation, never from the plan:

```python
import distal as dl

alg = dl.algorithms.cannon(1024, machine=dl.Machine(4, 4))
kernel = alg.compile()
assert list(kernel.stats().words_received) == list(alg.words)
inputs = alg.inputs(rng=0)  # random B, C of the right shapes
res = kernel.run(inputs)  # local runtime
assert abs(res.value - alg.reference(inputs)).max() < 1e-8
```

Runnable versions with the code written out are in `examples/` (one file per algorithm).
The tests in `tests/algorithms/` check every algorithm against `numpy.einsum` on divisible
and ragged sizes and several grids, and its per-processor words against the closed forms.

Notation in closed forms: `I_x` is block `x` of the row extent over the grid's first
dimension (`|I_x| = m/gx` when divisible), `J_y` likewise for columns, `K^g_b` block `b` of
`k` cut into `g`; `P` is the number of processors.
"""


def section(e: Entry) -> str:
    alg = e.small()
    kernel = alg.compile()
    parts = [
        f"## {e.title}: `dl.algorithms.{e.fn.__name__}`",
        "",
        docstring(e.fn),
        "",
        "```python",
        "# distribution",
        distribution_code(alg),
        "",
        "# computation",
        f"{', '.join(v.name for v in alg.schedule.statement.variables)} = "
        f"dl.index_vars({q(' '.join(v.name for v in alg.schedule.statement.variables))})",
        e.computation,
        "",
        "# schedule",
        schedule_code(alg),
        "```",
        "",
        f"Closed form: `{alg.formula}`; here `{list(alg.words)}`, and `kernel.stats()` "
        f"predicts `{list(kernel.stats().words_received)}`.",
    ]
    if e.show_explain:
        parts += ["", "```text", kernel.explain().rstrip(), "```"]
    return "\n".join(parts)


def render() -> str:
    body = [HEADER]
    body.append("## Predicted traffic against closed forms and the lower bound\n")
    body.append(
        "Max words received by any processor: predicted by `kernel.stats()`, from the closed "
        "form, and the tight matrix-multiply lower bound (Al Daas et al., SPAA 2022; for "
        "`d1 >= d2 >= d3`: `d2*d3*(1-1/P)` if `P <= d1/d2`, "
        "`2*sqrt(d1*d2*d3**2/P) - (d1*d3+d2*d3)/P` if `P <= d1*d2/d3**2`, else "
        "`3*(d1*d2*d3/P)**(2/3) - (d1*d2+d1*d3+d2*d3)/P`) where it applies (the 4-D "
        "contraction is the product of `(a*i) x (c*k)` by `(c*k) x (b*j)`). `(!)` would mark "
        "a closed form that differs from the prediction on some processor.\n"
    )
    body.append(table())
    body.append(
        "\nFace-restricted 3-D algorithms (Johnson, 2.5-D) concentrate the partial sums on one "
        "face, so their maximum is well above the bound; COSMA-style joint distributions "
        "spread every matrix over the whole grid and meet the bound exactly whenever the "
        "grid fits the regime (cubes, squares, lines); otherwise integer grid shapes "
        "account for the gap.\n"
    )
    body.append("### Hierarchical machines: traffic per level\n")
    body.append(
        "`dl.Machine(2, 2).nest(dl.Machine(2))`, `n = 72`. Processors fetch straight from the "
        "owner, so with the node's processors splitting the k-chunks (`inner='k'`) a node "
        "receives from other nodes exactly what one processor of the flat algorithm on the "
        "node grid receives; DISTAL's row split (`inner='rows'`) fetches C once per "
        "processor of the node.\n"
    )
    body.append(hierarchical_note())
    for e in ENTRIES:
        body.append("\n" + section(e))
    return "\n".join(body).rstrip() + "\n"


IMG = Path(__file__).resolve().parent / "img"


def pictures(out: Path = IMG) -> list[Path]:
    """Redraw the pictures of library algorithms that docs/scaling.md shows.

    The local-runtime timeline is a real run, so it differs from run to run (and with the
    machine's load); every other picture depends only on the plan and the network model.
    """
    from distal.viz.timeline import time_unit

    out.mkdir(parents=True, exist_ok=True)
    done: list[Path] = []

    def keep(name: str) -> Path:
        done.append(out / name)
        return out / name

    johnson = al.johnson_3d(64, machine=dl.Machine(2, 2, 2)).compile()
    johnson.plot_distribution("B", keep("distribution-johnson-B.png"))
    johnson.plot_traffic(keep("traffic-johnson.png"))
    al.cosma(96, machine=dl.Machine(2, 2, 2)).compile().plot_distribution(
        "A", keep("distribution-cosma-A.png")
    )
    al.summa(1024, machine=dl.Machine(4, 4)).compile().plot_traffic(keep("traffic-summa-4x4.png"))
    cannon = al.cannon(1024, machine=dl.Machine(2, 2))
    kernel = cannon.compile()
    machine = kernel.plan.machine
    kernel.run(cannon.inputs()).plot_timeline(
        keep("timeline-cannon-local.png"),
        machine=machine,
        title="Cannon n=1024 on 2x2, local runtime (processors run one after another)",
    )
    sim = kernel.simulate("local")
    unit, scale = time_unit(sim.seconds)
    sim.plot(
        keep("timeline-cannon-simulated.png"),
        machine=machine,
        title=f"Cannon n=1024 on 2x2 simulated as 4 MPI ranks on one computer ('local' network): "
        f"{sim.seconds * scale:.4g} {unit}",
    )
    big = al.summa(131072, machine=dl.Machine(16, 16)).compile()
    sim = big.simulate("fat-tree-edr")
    unit, scale = time_unit(sim.seconds)
    sim.plot(
        keep("timeline-summa-256-edr.png"),
        machine=big.plan.machine,
        max_procs=32,
        title=f"SUMMA n=131072 on 16x16 simulated on fat-tree-edr: "
        f"{sim.seconds * scale:.4g} {unit}",
    )
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if algorithms.md is stale")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--pictures", action="store_true", help="also redraw docs/img pictures")
    args = parser.parse_args(argv)
    if args.pictures and not args.check:
        for path in pictures():
            print(f"wrote {path}")
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python docs/gen_algorithms.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
