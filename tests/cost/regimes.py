"""The matrix-product regime table: shapes per regime, and the auto schedule's traffic vs the bound.

Used by ``tests/cost/test_regimes.py`` (which checks the ratios) and run as a script to
print the table of ``docs/cost.md``::

    .venv/bin/python tests/cost/regimes.py                  # P = 4..4096, 6, 12, 24, 96, 1000
    .venv/bin/python tests/cost/regimes.py --detail --regime "fixed (262144, 512, 512)"

Each cell is ``max words received / bound`` of the compiled plan, with the bound's case
(1, 2 or 3) in parentheses; ``!`` would mark a tensor that is not held in one copy.

Regimes are those of the tight bound (``distal.cost.bounds.matmul_regime``), with
``d1 >= d2 >= d3`` the sorted extents: 1 for ``P <= d1/d2``, 2 for ``P <= d1*d2/d3**2``,
3 beyond. Shapes are functions of ``P`` so each row stays in its regime (or on its
boundary) for every ``P``; the two fixed shapes cross regimes as ``P`` grows. Plans are
compiled for their exact stats only, never run, so extents cost nothing.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import distal as dl
from distal.cost import matmul_bound
from distal.cost.autoschedule import search
from distal.cost.bounds import matmul_regime
from distal.cost.model import MachineParams
from distal.distribution.notation import parse_distribution
from distal.distribution.partition import Placement


def _near_square(P: int) -> tuple[int, int]:
    """``(a, b)`` with ``a * b == P``, ``a >= b`` and ``a / b`` as small as possible."""
    b = max(d for d in range(1, math.isqrt(P) + 1) if P % d == 0)
    return P // b, b


def _boundary23(P: int) -> tuple[int, int, int]:
    a, b = _near_square(P)
    return 256 * a, 256 * b, 256  # d1*d2/d3**2 == P, d1/d2 as small as P allows


REGIMES: dict[str, Callable[[int], tuple[int, int, int]]] = {
    "square": lambda P: (4096, 4096, 4096),
    "one large": lambda P: (4 * P * 256, 256, 256),
    "boundary 1/2": lambda P: (P * 256, 256, 256),
    "two large": lambda P: (1 << 18, 1 << 18, 512),
    "boundary 2/3": _boundary23,
    "fixed (262144, 512, 512)": lambda P: (262144, 512, 512),
    "fixed (16384, 16384, 256)": lambda P: (16384, 16384, 256),
}

POWERS_OF_TWO = [1 << e for e in range(2, 13)]
OTHERS = [6, 12, 24, 96, 1000]


@dataclass(frozen=True)
class Row:
    """The auto schedule of one (regime, P): its plan's exact traffic against the bound."""

    regime: str
    P: int
    shape: tuple[int, int, int]
    case: int
    chosen: str
    dists: dict[str, str]
    max_words: int
    bound: float
    one_copy: bool
    seconds: float

    @property
    def ratio(self) -> float:
        return self.max_words / self.bound if self.bound > 0 else 1.0


def matmul(m: int, n: int, k: int, P: int) -> tuple[dl.Tensor, dl.Machine]:
    """``A[i,j] = B[i,k] * C[k,j]`` with every tensor ``dist="auto"`` on ``Machine(P)``."""
    M = dl.Machine(P)
    i, j, kk = dl.index_vars("i j k")
    A = dl.Tensor("A", (m, n), dist="auto", machine=M)
    B = dl.Tensor("B", (m, k), dist="auto", machine=M)
    C = dl.Tensor("C", (k, n), dist="auto", machine=M)
    A[i, j] = B[i, kk] * C[kk, j]
    return A, M


def copies_of_every_element(schedule: dl.Schedule, name: str) -> bool:
    """Whether the processors' owned blocks of ``name`` add up to exactly its size (blocks
    of one distribution never overlap, so this means one copy of every element)."""
    dist, machine = schedule.layouts()[name]
    shape = schedule.tensors()[name].shape
    grid = machine.shape
    p = Placement(shape, parse_distribution(dist, name, len(shape), grid), grid)
    owned = 0
    for c in machine.coords():
        box = p.owned_box(c)
        if box is not None:
            owned += math.prod(max(0, hi - lo) for lo, hi in box)
    return owned == math.prod(shape)


def measure(regime: str, P: int, params: MachineParams | None = None) -> Row:
    """Auto-schedule one row and compile the chosen schedule for its exact stats."""
    m, n, k = REGIMES[regime](P)
    A, M = matmul(m, n, k, P)
    t0 = time.perf_counter()
    best = search(A, M, params=params if params is not None else MachineParams())[0]
    kernel = dl.compile(best.schedule)
    words = kernel.stats().max_words_received
    one = all(copies_of_every_element(best.schedule, x) for x in "ABC")
    return Row(
        regime,
        P,
        (m, n, k),
        matmul_regime(m, n, k, P),
        best.candidate.describe(),
        dict(best.schedule.distributions),
        words,
        matmul_bound(m, n, k, P),
        one,
        time.perf_counter() - t0,
    )


def markdown(rows: list[Row]) -> str:
    """The ratio table of ``docs/cost.md``: one line per ``P``, one column per regime."""
    regimes = list(dict.fromkeys(r.regime for r in rows))
    cell = {(r.P, r.regime): r for r in rows}
    out = [
        "| P | " + " | ".join(regimes) + " |",
        "|---|" + "---|" * len(regimes),
    ]
    for P in dict.fromkeys(r.P for r in rows):
        vals = []
        for g in regimes:
            r = cell.get((P, g))
            mark = "" if r is None or r.one_copy else " !"
            vals.append("" if r is None else f"{r.ratio:.4f} ({r.case}){mark}")
        out.append(f"| {P} | " + " | ".join(vals) + " |")
    return "\n".join(out)


def detail(rows: list[Row]) -> str:
    """Every row with its chosen schedule and distributions."""
    out = [
        "| P | regime | (m, n, k) | case | chosen | A, B, C | max words | bound | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = ", ".join(f"`{r.dists[x]}`" for x in "ABC")
        out.append(
            f"| {r.P} | {r.regime} | {r.shape} | {r.case} | {r.chosen} | {d} | {r.max_words} "
            f"| {r.bound:.0f} | {r.ratio:.4f} |"
        )
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """``[--detail] [--regime NAME] [P ...]``: the ratio table (or every row's schedule)."""
    full = "--detail" in argv
    argv = [a for a in argv if a != "--detail"]
    names = list(REGIMES)
    if "--regime" in argv:
        at = argv.index("--regime")
        names = [argv[at + 1]]
        del argv[at : at + 2]
    Ps = [int(x) for x in argv] or POWERS_OF_TWO + OTHERS
    rows = []
    t0 = time.perf_counter()
    for P in Ps:
        for regime in names:
            r = measure(regime, P)
            rows.append(r)
            print(
                f"{r.P} {r.regime}: {r.ratio:.4f} one copy {r.one_copy} ({r.seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    print(detail(rows) if full else markdown(rows))
    print(f"{len(rows)} rows in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
