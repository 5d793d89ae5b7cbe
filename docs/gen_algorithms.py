"""Generate docs/algorithms.md: the gallery of distal.algorithms.

For every algorithm: the three blocks (distribution, computation, schedule) as code, the
``kernel.explain()`` output of a small case, and the closed form; then one table of predicted
max words received per processor (``kernel.stats()``) against the closed form and against
the matrix-multiply lower bound where it applies.

Then the sparse kernels (``distal.algorithms.sparse``), for every kernel and split: the
blocks as code, the pattern formula and ``kernel.bind(inputs).explain()`` of a small R-MAT
or Zipf pattern; a table of words and load balance on an R-MAT and a Zipf-rows matrix (and
a Zipf 3-tensor), with ``alg.words(inputs)`` asserted equal to ``kernel.stats(inputs)``;
and a table of SpMV's exact gather against SpDISTAL's hull fetch (``exact=False``).

    python docs/gen_algorithms.py            # rewrite docs/algorithms.md
    python docs/gen_algorithms.py --check    # exit 1 if the committed file is stale
    python docs/gen_algorithms.py --pictures # also redraw the library's pictures in docs/img
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import distal as dl
from distal import algorithms as al
from distal.algorithms.sparse import SparseAlgorithm
from distal.sparse import generate as gen

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
#: every gallery fragment starts with its imports, so it runs pasted on its own (the docs
#: test runs each block of algorithms.md in a fresh namespace)
FRAGMENT_IMPORTS = "import distal as dl"
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


def schedule_code(alg: al.Algorithm | SparseAlgorithm) -> str:
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
# Sparse kernels
# ---------------------------------------------------------------------------------------------

SPLIT_TEXT = {
    "rows": "A coordinate cut of the top storage level (SpDISTAL's *RowSplit*): rows in "
    "blocks of `ceil(N/P)`; an output cut by the same rows needs no partial sums; the load "
    "follows the row lengths.",
    "nonzeros": "`fuse` the sparse operand's levels, then `pos` (SpDISTAL's *PosSplit*): "
    "stored entries in blocks of `ceil(nnz/P)`, balanced by construction; the rows that "
    "straddle two processors send partial sums.",
    "fibers": "`fuse` the top two levels only, then `pos`: blocks of `ceil(fibers/P)` "
    "`(i, j)` fibers, each fiber whole.",
}

SMALL_MATRIX = (64, 64)
SMALL_TENSOR = (16, 12, 8)


@functools.cache
def small_matrix(seed: int = 0) -> dl.SparseArray:
    """The gallery's small matrix: R-MAT scale 6 (64 x 64), edge factor 4."""
    return gen.rmat(6, 4, seed=seed)


@functools.cache
def small_tensor(seed: int = 0, fmt: str = "dss") -> dl.SparseArray:
    """The gallery's small 3-tensor: 16 x 12 x 8, 150 entries, Zipf along every mode."""
    return gen.zipf_tensor(SMALL_TENSOR, 150, seed=seed, format=fmt)


Inputs = Mapping[str, dl.SparseArray]


@dataclass(frozen=True)
class SparseCase:
    """One split of a sparse gallery section, with the small pattern it is bound to."""

    label: str  # the heading, markdown
    alg: Callable[[], SparseAlgorithm]
    inputs: Callable[[], Inputs]
    note: str = ""


@dataclass(frozen=True)
class SparseEntry:
    """One sparse gallery section: a kernel and its splits."""

    title: str
    fn: Callable[..., SparseAlgorithm]
    computation: str
    cases: tuple[SparseCase, ...]


def _matrix() -> Inputs:
    return {"B": small_matrix()}


def _tensor() -> Inputs:
    return {"B": small_tensor()}


def _cases(
    make: Callable[[str], SparseAlgorithm], splits: tuple[str, ...], inputs: Callable[[], Inputs]
) -> tuple[SparseCase, ...]:
    return tuple(
        SparseCase(f'`split="{sp}"`', functools.partial(make, sp), inputs) for sp in splits
    )


M4 = dl.Machine(4)
SPARSE_ENTRIES = [
    SparseEntry(
        "SpMV",
        al.spmv,
        "a[i] = B[i, j] * c[j]",
        _cases(lambda sp: al.spmv(SMALL_MATRIX, M4, sp), ("rows", "nonzeros"), _matrix),
    ),
    SparseEntry(
        "SpMM",
        al.spmm,
        "A[i, k] = B[i, j] * C[j, k]",
        (
            *_cases(lambda sp: al.spmm(SMALL_MATRIX, 4, M4, sp), ("rows", "nonzeros"), _matrix),
            SparseCase(
                '`split="rows"` on a 2 x 2 machine',
                lambda: al.spmm(SMALL_MATRIX, 4, dl.Machine(2, 2), "rows"),
                _matrix,
                " The second machine dimension cuts the dense loop `k` (B is replicated "
                'along it, `"xy -> x*"`).',
            ),
        ),
    ),
    SparseEntry(
        "SDDMM",
        al.sddmm,
        "A[i, k] = B[i, k] * C[i, j] * D[j, k]",
        _cases(lambda sp: al.sddmm(SMALL_MATRIX, 4, M4, sp), ("rows", "nonzeros"), _matrix),
    ),
    SparseEntry(
        "SpMTTKRP",
        al.spmttkrp,
        "A[i, l] = B[i, j, k] * C[j, l] * D[k, l]",
        _cases(
            lambda sp: al.spmttkrp(SMALL_TENSOR, 4, M4, sp), ("rows", "nonzeros", "fibers"), _tensor
        ),
    ),
    SparseEntry(
        "SpTTV",
        al.spttv,
        "A[i, j] = B[i, j, k] * c[k]",
        _cases(lambda sp: al.spttv(SMALL_TENSOR, M4, sp), ("rows", "fibers"), _tensor),
    ),
    SparseEntry(
        "SpAdd3",
        al.spadd3,
        "A[i, j] = B[i, j] + C[i, j] + D[i, j]",
        (
            SparseCase(
                '`split="rows"`',
                lambda: al.spadd3(SMALL_MATRIX, M4),
                lambda: {x: small_matrix(seed) for seed, x in enumerate("BCD")},
            ),
        ),
    ),
    SparseEntry(
        "Sparse inner product",
        al.spinnerprod,
        "a[()] = B[i, j, k] * C[i, j, k]",
        (
            SparseCase(
                '`split="rows"`',
                lambda: al.spinnerprod(SMALL_TENSOR, M4),
                lambda: {"B": small_tensor(0, "csf"), "C": small_tensor(1, "csf")},
            ),
        ),
    ),
]


def sparse_distribution_code(alg: SparseAlgorithm) -> str:
    lines = [f"M = {machine_code(alg.machine)}"]
    for name, t in alg.tensors.items():
        fmt = "" if t.format.is_dense else f", format={q(str(t.format))}"
        lines.append(f"{name} = dl.Tensor({q(name)}, {t.shape}{fmt}, dist={q(t.dist)}, machine=M)")
    return "\n".join(lines)


def pattern_words(alg: SparseAlgorithm, inputs: Inputs) -> list[int] | None:
    """``alg.words(inputs)``, or None for a kernel without an independent count."""
    try:
        return list(alg.words(inputs))
    except dl.ScheduleError:
        return None


def checked_stats(alg: SparseAlgorithm, inputs: Inputs) -> tuple[dl.Stats, list[int] | None]:
    """``kernel.stats(inputs)`` and ``alg.words(inputs)``, asserted equal where defined."""
    st = alg.compile().stats(inputs)
    words = pattern_words(alg, inputs)
    if words is not None and words != list(st.words_received):
        raise AssertionError(
            f"{alg!r}: alg.words {words} != kernel.stats {list(st.words_received)}"
        )
    return st, words


def balance(st: dl.Stats) -> float:
    """Load balance: max / mean iterations per processor (1 is perfect)."""
    it = list(st.iterations)
    mean = sum(it) / len(it)
    return max(it) / mean if mean else 1.0


def pattern_text(inputs: Inputs) -> str:
    return ", ".join(
        f"{name} ({'x'.join(map(str, x.shape))}, {x.nnz} entries)" for name, x in inputs.items()
    )


def sparse_case(e: SparseEntry, case: SparseCase) -> str:
    alg = case.alg()
    inputs = case.inputs()
    st, words = checked_stats(alg, inputs)
    if words is not None:
        check = (
            f"here `alg.words(inputs)` is `{words}`, and `kernel.stats(inputs)` predicts "
            f"`{list(st.words_received)}`."
        )
    else:
        check = (
            "`alg.words` has no independent count for this kernel; `kernel.stats(inputs)` "
            f"predicts `{list(st.words_received)}`."
        )
    variables = [v.name for v in alg.schedule.statement.variables]
    return "\n".join(
        [
            f"### {case.label}",
            "",
            SPLIT_TEXT[alg.split] + case.note,
            "",
            "```python",
            FRAGMENT_IMPORTS,
            "",
            "# distribution",
            sparse_distribution_code(alg),
            "",
            "# computation",
            f"{', '.join(variables)} = dl.index_vars({q(' '.join(variables))})",
            e.computation,
            "",
            "# schedule",
            schedule_code(alg),
            "```",
            "",
            f"Formula: {alg.formula}. Bound to {pattern_text(inputs)}: {check}",
            "",
            "```text",
            alg.compile().bind(inputs).explain().rstrip(),
            "```",
        ]
    )


def sparse_section(e: SparseEntry) -> str:
    parts = [f"## {e.title}: `dl.algorithms.{e.fn.__name__}`", "", docstring(e.fn)]
    for case in e.cases:
        parts += ["", sparse_case(e, case)]
    return "\n".join(parts)


# the tables' data: 4096 x 4096 matrices of about 53.5k entries, and a Zipf 3-tensor
BIG_SCALE, BIG_EDGES = 12, 16
BIG_K = 16  # SpMM's columns, SDDMM's j, SpMTTKRP's rank
BIG_TENSOR = (1024, 1024, 1024)
BIG_TENSOR_NNZ = 65536


@functools.cache
def big_matrix(kind: str, seed: int = 0) -> dl.SparseArray:
    if kind == "R-MAT":
        return gen.rmat(BIG_SCALE, BIG_EDGES, seed=seed)
    n = 2**BIG_SCALE
    nnz = gen.rmat(BIG_SCALE, BIG_EDGES).nnz
    if kind == "Zipf rows":
        return gen.zipf_rows(n, n, nnz, seed=seed)
    if kind == "banded":
        return gen.banded(n, round(nnz / n), seed=seed)
    raise ValueError(kind)


@functools.cache
def big_tensor(seed: int = 0, fmt: str = "dss") -> dl.SparseArray:
    return gen.zipf_tensor(BIG_TENSOR, BIG_TENSOR_NNZ, seed=seed, format=fmt)


def data_text(x: dl.SparseArray) -> str:
    return f"{' x '.join(map(str, x.shape))}, {x.nnz} entries"


def sparse_table_rows() -> list[tuple[str, str, SparseAlgorithm, Inputs]]:
    """(data, kernel, algorithm, inputs) for the words-and-balance table."""
    rows: list[tuple[str, str, SparseAlgorithm, Inputs]] = []
    M22 = dl.Machine(2, 2)
    for kind in ("R-MAT", "Zipf rows"):
        B = big_matrix(kind)
        shp = B.shape
        for sp in ("rows", "nonzeros"):
            rows.append((kind, "SpMV", al.spmv(shp, M4, sp), {"B": B}))
        for sp in ("rows", "nonzeros"):
            rows.append((kind, f"SpMM, k = {BIG_K}", al.spmm(shp, BIG_K, M4, sp), {"B": B}))
        for sp in ("rows", "nonzeros"):
            rows.append((kind, f"SpMM, k = {BIG_K}", al.spmm(shp, BIG_K, M22, sp), {"B": B}))
        for sp in ("rows", "nonzeros"):
            rows.append((kind, f"SDDMM, j = {BIG_K}", al.sddmm(shp, BIG_K, M4, sp), {"B": B}))
        three = {x: big_matrix(kind, seed) for seed, x in enumerate("BCD")}
        rows.append((kind, "SpAdd3 (3 seeds)", al.spadd3(shp, M4), three))
    T = big_tensor()
    for sp in ("rows", "nonzeros", "fibers"):
        rows.append(("Zipf tensor", f"SpMTTKRP, l = {BIG_K}", al.spmttkrp(T.shape, BIG_K, M4, sp),
                     {"B": T}))  # fmt: skip
    for sp in ("rows", "fibers"):
        rows.append(("Zipf tensor", "SpTTV", al.spttv(T.shape, M4, sp), {"B": T}))
    pair = {"B": big_tensor(0, "csf"), "C": big_tensor(1, "csf")}
    rows.append(("Zipf tensor (2 seeds)", "inner product", al.spinnerprod(T.shape, M4), pair))
    return rows


def grid_text(M: dl.Machine) -> str:
    return " x ".join(map(str, M.shape))


def sparse_table() -> str:
    out = [
        "| data | kernel | split | grid | max words received (`kernel.stats`) "
        "| max `alg.words` | total words | max / mean iterations |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for data, label, alg, inputs in sparse_table_rows():
        st, words = checked_stats(alg, inputs)
        w_txt = str(max(words)) if words is not None else "—"
        out.append(
            f"| {data} | {label} | `{alg.split}` | {grid_text(alg.machine)} "
            f"| {st.max_words_received} | {w_txt} | {st.total_words} | {balance(st):.3f} |"
        )
    return "\n".join(out)


HULL_P = (2, 4, 16)
HULL_DATA = ("R-MAT", "Zipf rows", "banded")


def hull_figures() -> list[tuple[str, str, int, dl.Stats, dl.Stats]]:
    """(matrix, split, P, exact stats, hull stats) of SpMV, both asserted to ``alg.words``."""
    out = []
    for kind in HULL_DATA:
        B = big_matrix(kind)
        for sp in ("rows", "nonzeros"):
            for P in HULL_P:
                ex, _ = checked_stats(al.spmv(B.shape, dl.Machine(P), sp), {"B": B})
                hull, _ = checked_stats(al.spmv(B.shape, dl.Machine(P), sp, exact=False), {"B": B})
                out.append((kind, sp, P, ex, hull))
    return out


def hull_table(figures: list[tuple[str, str, int, dl.Stats, dl.Stats]]) -> str:
    out = [
        "| matrix | split | P | exact gather, total words | hull fetch, total words "
        "| hull / exact | exact moves less by | max words exact / hull |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, sp, P, ex, hull in figures:
        e, h = ex.total_words, hull.total_words
        ratio = f"{h / e:.2f}" if e else "—"
        less = f"{100 * (h - e) / h:.0f}%" if h else "—"
        out.append(
            f"| {kind} | `{sp}` | {P} | {e} | {h} | {ratio} | {less} "
            f"| {ex.max_words_received} / {hull.max_words_received} |"
        )
    return "\n".join(out)


def hull_note(figures: list[tuple[str, str, int, dl.Stats, dl.Stats]]) -> str:
    """The closing note: the measured range of the saving per matrix and split."""
    parts = []
    for kind in HULL_DATA:
        for sp in ("rows", "nonzeros"):
            ratios = [h.total_words / e.total_words for k, s, _, e, h in figures
                      if k == kind and s == sp and e.total_words]  # fmt: skip
            lo, hi = min(ratios), max(ratios)
            span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}x to {hi:.2f}x"
            parts.append(f"{kind} `{sp}`: {span}")
    return (
        "Across P = " + ", ".join(map(str, HULL_P)) + ", the hull fetch moves this many times "
        "the exact gather's words: " + "; ".join(parts) + ". The hull of a processor's "
        "columns is everything between its lowest and highest column: R-MAT's rows and "
        "the Zipf matrix's light rows reference few columns scattered over the whole range, "
        "so their hull is nearly all of `c` while the exact set is small, and the gap widens "
        "with P as each processor's own block of `c` shrinks. A processor holding a row "
        "that spans every column (the Zipf head, which the non-zero split spreads over "
        "several processors at small P) needs all of `c` either way, so there the two "
        "agree; on a band every processor's columns are already contiguous, so the hull is "
        "the exact set and nothing is saved."
    )


SPARSE_INTRO = """# Sparse kernels

`distal.algorithms.sparse` gives SpDISTAL's kernels as ready schedules, also built only from
public commands (`dl.Tensor(format=..., dist=...)`, `.distribute`, `.fuse`, `.pos`,
`.communicate`). Each function returns a `SparseAlgorithm` with the tensors, the schedule,
`alg.formula` and `alg.words(inputs)`: the words each processor receives, computed from the
pattern by the block rules and never from the plan (SpMTTKRP and SpTTV have no such count:
their `alg.words` raises). A sparse kernel's traffic depends on the pattern, so the stats
take the inputs (see [sparse.md](sparse.md) for the row split, the non-zero split and exact
gathers):

```python
import numpy as np
import distal as dl
from distal.sparse import generate

B = generate.rmat(12, 16)  # 4096 x 4096, unpermuted: low rows heavy
alg = dl.algorithms.spmv(B.shape, dl.Machine(4), split="nonzeros")
kernel = alg.compile()
inputs = {"B": B, "c": np.ones(B.shape[1])}
assert list(kernel.stats(inputs).words_received) == alg.words(inputs)
print(kernel.bind(inputs).explain())  # the plan for this pattern
res = kernel.run(inputs)
assert np.allclose(res.value, alg.reference(inputs))
```

Runnable versions: `examples/sparse_spmv.py` and `examples/sparse_mttkrp.py`; the tests in
`tests/algorithms/test_sparse_algorithms.py` check every kernel against scipy / numpy and
its words against `alg.words(inputs)`.
"""


def sparse_part() -> str:
    rmat, zipf = big_matrix("R-MAT"), big_matrix("Zipf rows")
    band, T = big_matrix("banded"), big_tensor()
    body = [SPARSE_INTRO]
    body.append("## Words and load balance on power-law patterns\n")
    body.append(
        f"`dl.Machine(4)` (and `dl.Machine(2, 2)` for SpMM's 2-D cut). Data: R-MAT "
        f"`generate.rmat({BIG_SCALE}, {BIG_EDGES})` ({data_text(rmat)}); Zipf rows "
        f"`generate.zipf_rows({zipf.shape[0]}, {zipf.shape[1]}, {zipf.nnz})` (as many entries, "
        f"row lengths `~ 1/rank**1.2`, heaviest first); SpAdd3 adds the matrices of seeds 0, "
        f"1, 2; the tensor kernels run on `generate.zipf_tensor({BIG_TENSOR}, "
        f"{BIG_TENSOR_NNZ})` ({data_text(T)}; the inner product against seed 1). Max words "
        "received comes from `kernel.stats(inputs)`, and `alg.words(inputs)` is asserted "
        "equal to it on every processor when the generator runs (`—`: no independent count). "
        "Balance is `max(iterations) / mean(iterations)` over the processors (1 is "
        "perfect).\n"
    )
    body.append(sparse_table())
    body.append(
        "\nThe row split leaves the power-law head on processor 0 (balance 2 to 4 on these "
        "patterns), the non-zero split balances the entries exactly and pays partial sums "
        "for the rows it cuts; whole fibers balance in between. SDDMM's row split moves "
        "nothing (C's rows are where B's are), nor does SpAdd3, and SpMTTKRP and SpTTV move "
        "only output entries computed away from their owner (their factors are "
        "replicated). On a 2 x 2 machine SpMM's rows are cut in two and `k` in two, so "
        "each processor fetches half the columns of C's rows it needs.\n"
    )
    body.append("## SpMV: exact gather against the hull fetch\n")
    body.append(
        "`communicate(c, loop, exact=True)` (the default) fetches exactly the entries of `c` "
        "a processor's stored columns reference and it does not own; `exact=False` fetches "
        "their hull, as SpDISTAL does. Total words over all processors for SpMV on the "
        f"R-MAT and Zipf matrices above and on `generate.banded({band.shape[0]}, "
        f"{round(rmat.nnz / band.shape[0])})` ({data_text(band)}); both columns asserted to "
        "`alg.words(inputs)`.\n"
    )
    figures = hull_figures()
    body.append(hull_table(figures))
    body.append("\n" + hull_note(figures))
    for e in SPARSE_ENTRIES:
        body.append("\n" + sparse_section(e))
    return "\n".join(body)


# ---------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------

HEADER = """# Algorithm gallery

<!-- Generated by docs/gen_algorithms.py; do not edit by hand. -->
<!-- doc-test: every block stands alone -->

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

The second part, [Sparse kernels](#sparse-kernels), does the same for the sparse kernels
(SpMV, SpMM, SDDMM, SpMTTKRP, SpTTV, SpAdd3, the sparse inner product) with each of their
splits, whose traffic depends on the pattern.

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
        FRAGMENT_IMPORTS,
        "",
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
    body.append("\n" + sparse_part())
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
