"""Leaf kernels: one term of the statement over one box, on local numpy blocks.

Each term compiles once to an einsum specification and a contraction routine:
a BLAS matrix product (with the transposes folded into the operands' strides)
when the term is one, otherwise an opt_einsum contraction path, which reaches
BLAS through ``tensordot`` for pairwise contractions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import opt_einsum as oe

from distal.lang.concrete import Statement
from distal.typing import Box

Contraction = Callable[[Sequence[np.ndarray], np.ndarray, complex | float, bool], None]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _matmul(xa: str, ya: str, out: str) -> Contraction | None:
    """A BLAS fast path when ``xa,ya->out`` is a matrix product, else None."""
    if len(xa) != 2 or len(ya) != 2 or len(out) != 2 or len(set(xa + ya)) != 3:
        return None
    shared = set(xa) & set(ya)
    if len(shared) != 1:
        return None
    (k,) = shared
    if k in out or len(set(xa)) != 2 or len(set(ya)) != 2:
        return None
    x = xa.replace(k, "")
    y = ya.replace(k, "")
    if {x, y} != set(out):
        return None
    tx, ty, tout = xa != x + k, ya != k + y, out != x + y

    def run(ops: Sequence[np.ndarray], dst: np.ndarray, alpha: complex, fresh: bool) -> None:
        a = ops[0].T if tx else ops[0]
        b = ops[1].T if ty else ops[1]
        if fresh and alpha == 1 and dst.dtype == np.result_type(a, b):
            # first write: BLAS stores straight into the output, no temporary
            np.matmul(b.T, a.T, out=dst) if tout else np.matmul(a, b, out=dst)
            return
        r = a @ b
        if alpha != 1:
            r *= alpha
        dst += r.T if tout else r

    return run


@lru_cache(maxsize=4096)
def contraction(spec: str) -> Contraction:
    """The routine computing ``dst += alpha * einsum(spec, *ops)``.

    With ``fresh`` the destination is known to be zero, so the routine may store
    instead of adding. Output letters that no operand carries (a term that does
    not depend on an output variable) are broadcast.
    """
    ins, out = spec.split("->")
    parts = ins.split(",") if ins else []
    if len(parts) == 2:
        fast = _matmul(parts[0], parts[1], out)
        if fast is not None:
            return fast
    kept = "".join(c for c in out if c in ins)
    missing = tuple(n for n, c in enumerate(out) if c not in ins)
    inner = f"{ins}->{kept}"

    def run(ops: Sequence[np.ndarray], dst: np.ndarray, alpha: complex, fresh: bool) -> None:
        if not ops:
            dst += alpha
            return
        r = oe.contract(inner, *ops) if len(ops) > 1 else np.einsum(inner, ops[0])
        if alpha != 1:
            r = r * alpha
        if missing:
            r = np.expand_dims(r, missing)
        if fresh:
            dst[...] = r
        else:
            dst += r

    return run


@dataclass(frozen=True, slots=True)
class TermKernel:
    """One term, ready to run on boxes of the iteration space."""

    coeff: complex | float | int
    spec: str
    factors: tuple[tuple[str, tuple[int, ...]], ...]  # (tensor, statement-variable positions)
    gates: tuple[int, ...]  # variables the term only sees at 0
    multipliers: tuple[int, ...]  # summed variables no factor uses
    out: tuple[int, ...]  # output variable positions


def term_kernels(st: Statement) -> tuple[TermKernel, ...]:
    """Compile every term of a statement."""
    pos = {v: n for n, v in enumerate(st.variables)}
    letter = {v: _LETTERS[n] for n, v in enumerate(st.variables)}
    lhs = set(st.lhs_vars)
    out = []
    for t in st.terms:
        used = t.used()
        ins = ",".join("".join(letter[v] for v in f.indices) for f in t.factors)
        spec = f"{ins}->{''.join(letter[v] for v in st.lhs_vars)}"
        out.append(
            TermKernel(
                coeff=t.coeff,
                spec=spec,
                factors=tuple((f.tensor.name, tuple(pos[v] for v in f.indices)) for f in t.factors),
                gates=tuple(pos[v] for v in st.variables if v not in lhs and v not in t.summed),
                multipliers=tuple(pos[v] for v in t.summed if v not in used),
                out=tuple(pos[v] for v in st.lhs_vars),
            )
        )
    return tuple(out)


def _view(arr: np.ndarray, box: Box, origin: Box) -> np.ndarray:
    if not box:
        return arr
    return arr[tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin, strict=True))]


def run_leaf(
    kernels: Sequence[TermKernel],
    box: Box,
    operands: dict[str, tuple[np.ndarray, Box]],
    out: np.ndarray,
    out_origin: Box,
    fresh: bool = False,
) -> None:
    """Add every term's contribution over iteration ``box`` into ``out`` (holding ``out_origin``).

    ``operands`` maps tensor names to ``(array, box it holds)``. ``fresh`` says the
    output region is still all zeros, so the first contributing term may store.
    """
    for tk in kernels:
        if any(not box[g][0] <= 0 < box[g][1] for g in tk.gates):
            continue
        alpha = tk.coeff * math.prod(box[m][1] - box[m][0] for m in tk.multipliers)
        ops = []
        for name, idx in tk.factors:
            arr, origin = operands[name]
            ops.append(_view(arr, tuple(box[i] for i in idx), origin))
        dst = _view(out, tuple(box[i] for i in tk.out), out_origin)
        contraction(tk.spec)(ops, dst, alpha, fresh)
        fresh = False
