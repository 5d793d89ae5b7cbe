"""Communication lower bounds: how few words some processor must receive.

Every bound here is about the **busiest** processor, so compare it with
``Stats.max_words_received``. Words are tensor elements, as in ``Stats``.

Sources (see ``docs/cost.md`` for the derivations):

* Memory-independent matrix product: Al Daas, Ballard, Grigori, Kumar, Rouse,
  "Tight memory-independent parallel matrix multiplication communication lower
  bounds", SPAA 2022 (arXiv 2205.13407). Assumes load-balanced work (each processor
  does ``m*n*k/P`` products) and one copy of every matrix, spread so each processor
  starts (A, B) or ends (C) with at most ``1/P`` of each.
* Memory-dependent matrix product: the sequential read bound of Smith, Lowery,
  Langou and van de Geijn ("A tight I/O lower bound for matrix multiplication",
  arXiv 1702.02017: ``Q >= 2*m*n*k/sqrt(M) - 2*M``) applied to the busiest
  processor, whose local memory of ``M`` words plays the fast memory and everything
  it must receive the slow memory. The parallel form is derived here, not quoted;
  its leading term ``2*m*n*k/(P*sqrt(M))`` agrees with COSMA (Kwasniewski et al.,
  SC'19, arXiv 1908.09606).
* MTTKRP: the HBL (Hoelder-Brascamp-Lieb) argument of Ballard, Knight and Rouse,
  "Communication lower bounds for matricized tensor times Khatri-Rao product",
  IPDPS 2018 (arXiv 1708.07401), solved with Al Daas et al.'s tight-constant method
  (minimise the data the busiest processor touches, subtract what it owns). The
  constants are our derivation; in the usual regime the result is the closed form
  ``N*R*(I/P)**(1/N) - R*sum(I_n)/P``, which the stationary-tensor algorithm attains
  (Ballard and Rouse, "General memory-independent lower bound for MTTKRP", 2020,
  state the bound in this regime). Treat it as derived, not quoted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distal.errors import DistalUserError

__all__ = [
    "BoundError",
    "ContractionShape",
    "StatementBound",
    "bound_ratio",
    "contraction_bound",
    "contraction_shape",
    "hbl_bound",
    "matmul_bound",
    "matmul_memory_bound",
    "matmul_regime",
    "mttkrp_bound",
    "statement_bound",
]


class BoundError(DistalUserError):
    """No lower bound is known for this computation (or its arguments are invalid)."""


def _positive(name: str, x: float) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float) or not x > 0:
        raise BoundError(f"{name} must be a positive number, got {x!r}")
    return float(x)


def matmul_regime(m: int, n: int, k: int, P: float) -> int:
    """Which case (1, 2 or 3) of Al Daas et al.'s bound applies."""
    d1, d2, d3 = sorted((float(m), float(n), float(k)), reverse=True)
    if P <= d1 / d2:
        return 1
    if P <= d1 * d2 / d3**2:
        return 2
    return 3


def matmul_bound(m: int, n: int, k: int, P: float, memory: float | None = None) -> float:
    """Words some processor must receive to multiply ``m x k`` by ``k x n`` on ``P`` processors.

    With ``d1 >= d2 >= d3`` the sorted dimensions (Al Daas et al., SPAA 2022)::

        P <= d1/d2          : d2*d3*(1 - 1/P)
        P <= d1*d2/d3**2    : 2*sqrt(d1*d2*d3**2/P) - (d1*d3 + d2*d3)/P
        otherwise           : 3*(d1*d2*d3/P)**(2/3) - (d1*d2 + d1*d3 + d2*d3)/P

    ``P`` may be fractional (batched contractions divide it by the batch). With a
    per-processor ``memory`` (words) the result is the larger of this and
    :func:`matmul_memory_bound`.
    """
    for name, x in (("m", m), ("n", n), ("k", k), ("P", P)):
        _positive(name, x)
    if P <= 1:
        w = 0.0
    else:
        d1, d2, d3 = sorted((float(m), float(n), float(k)), reverse=True)
        case = matmul_regime(m, n, k, P)
        if case == 1:
            w = d2 * d3 * (1 - 1 / P)
        elif case == 2:
            w = 2 * math.sqrt(d1 * d2 * d3**2 / P) - (d1 * d3 + d2 * d3) / P
        else:
            w = 3 * (d1 * d2 * d3 / P) ** (2 / 3) - (d1 * d2 + d1 * d3 + d2 * d3) / P
    if memory is not None:
        w = max(w, matmul_memory_bound(m, n, k, P, memory))
    return max(w, 0.0)


def matmul_memory_bound(m: int, n: int, k: int, P: float, memory: float) -> float:
    """Memory-dependent bound: ``max(0, 2*m*n*k/(P*sqrt(M)) - 2*M)`` words received.

    Derivation: the busiest processor does at least ``m*n*k/P`` products. Treat its
    ``M`` words of memory as the fast memory of a two-level machine and every other
    processor as the slow memory; each word it reads from slow memory is a word it
    receives (its own initial data, at most ``M`` words, is covered by the ``-2M``
    slack of the sequential bound). Smith et al.'s tight sequential bound
    ``2*m'*n'*k'/sqrt(M) - 2*M`` for ``m'*n'*k' = m*n*k/P`` products gives the formula.
    It matters only when memory is scarce (2-D / 2.5-D regime); otherwise the
    memory-independent bound is larger.
    """
    for name, x in (("m", m), ("n", n), ("k", k), ("P", P), ("memory", memory)):
        _positive(name, x)
    return max(0.0, 2 * m * n * k / (P * math.sqrt(memory)) - 2 * memory)


# -- general HBL minimisation (used for MTTKRP and to cross-check the matmul formula) ------


def _water_fill(target_log: float, lo: list[float], hi: list[float]) -> list[float] | None:
    """Minimise ``sum(a)`` subject to ``sum(log a) >= target_log`` and ``lo <= a <= hi``.

    The optimum sets every free ``a`` to one common level ``t`` (AM-GM), clamped to
    its bounds; ``t`` is found by bisection in log space. None if infeasible.
    """
    if sum(math.log(h) for h in hi) < target_log - 1e-12:
        return None
    if sum(math.log(x) for x in lo) >= target_log:
        return list(lo)
    a, b = min(math.log(x) for x in lo), max(math.log(x) for x in hi)
    for _ in range(200):
        mid = (a + b) / 2
        total = sum(math.log(min(max(math.exp(mid), x), h)) for x, h in zip(lo, hi, strict=True))
        a, b = (mid, b) if total < target_log else (a, mid)
    t = math.exp(b)
    return [min(max(t, x), h) for x, h in zip(lo, hi, strict=True)]


def hbl_bound(
    work: float,
    first: tuple[float, float, float],
    rest: Sequence[tuple[float, float]],
    share: float,
    owned: float,
) -> float:
    """``min(x + sum(a)) - owned`` subject to ``x**e * prod(a)**share >= work``.

    ``first = (e, lo, hi)`` is the HBL exponent and range of the data ``x`` one array
    contributes; ``rest`` are ``(lo, hi)`` of the other arrays, all with exponent
    ``share``. A processor doing ``work`` iterations touches at least this much data.
    Solved by ternary search over ``log x`` (the problem is convex in log variables).
    """
    e, xlo, xhi = first
    lo = [r[0] for r in rest]
    hi = [r[1] for r in rest]

    def cost(u: float) -> float:
        x = math.exp(u)
        need = (math.log(work) - e * u) / share
        a = _water_fill(need, lo, hi)
        return math.inf if a is None else x + sum(a)

    a, b = math.log(xlo), math.log(xhi)
    for _ in range(200):
        m1, m2 = a + (b - a) / 3, b - (b - a) / 3
        if cost(m1) <= cost(m2):
            b = m2
        else:
            a = m1
    return max(0.0, min(cost(a), cost(math.log(xlo)), cost(math.log(xhi))) - owned)


def mttkrp_bound(dims: Sequence[int], rank: int, P: float) -> float:
    """Words some processor must receive for an MTTKRP on ``P`` processors.

    The computation: ``M(i_mode, r) = sum X(i_1..i_N) * prod_{n != mode} A_n(i_n, r)``;
    ``dims`` are the tensor's extents ``I_1..I_N`` (which mode is the output does not
    matter for the bound), ``rank`` is ``R``. Iterations: ``I*R`` with ``I = prod(dims)``.

    Derivation (Ballard, Knight, Rouse, IPDPS 2018, with Al Daas et al.'s method for
    tight constants): the busiest processor does ``F >= I*R/P`` iterations. With ``x``
    tensor entries and ``a_n`` entries of the ``n``-th matrix it touches (the output is
    one of the N matrices), HBL with exponents ``1 - 1/N`` (tensor) and ``1/N`` (each
    matrix) gives ``F <= x**(1-1/N) * prod(a_n)**(1/N)``; also ``I/P <= x <= I`` and
    ``I_n*R/P <= a_n <= I_n*R`` (an entry feeds at most ``R``, resp. ``I/I_n``,
    iterations). Minimising ``x + sum(a_n)`` and subtracting the processor's ``1/P``
    share of every array bounds the words it receives. In the common regime (tensor
    much larger than the factors) the minimum has ``x = I/P`` and equal ``a_n``, which
    gives ``N*R*(I/P)**(1/N) - R*sum(I_n)/P``: the traffic of the stationary-tensor
    algorithm on a grid with ``I_n/P_n`` equal, so the bound is attained there.
    These constants are derived here; the papers state the asymptotic form.
    """
    dims = [int(_positive("dimension", d)) for d in dims]
    if len(dims) < 2:
        raise BoundError(f"MTTKRP needs a tensor of order >= 2, got dims {dims}")
    R = _positive("rank", rank)
    _positive("P", P)
    if P <= 1:
        return 0.0
    N = len(dims)
    total = float(math.prod(dims))
    work = total * R / P
    owned = (total + R * sum(dims)) / P
    mats = [(max(d * R / P, 1e-300), d * R) for d in dims]
    return hbl_bound(work, (1 - 1 / N, total / P, total), mats, 1 / N, owned)


# -- contractions that are matrix products after grouping indices ---------------------------


@dataclass(frozen=True)
class ContractionShape:
    """A binary contraction grouped into ``batch`` independent ``m x k`` by ``k x n`` products."""

    m: int
    n: int
    k: int
    batch: int = 1


def _letters_shape(spec: str, extents: Mapping[str, int]) -> ContractionShape:
    text = spec.replace(" ", "")
    left, arrow, out = text.partition("->")
    ins = left.split(",")
    if not arrow or len(ins) != 2:
        raise BoundError(
            f"contraction bound needs a two-operand einsum with '->', e.g. 'ik,kj->ij'; "
            f"got {spec!r}"
        )
    return _group(
        set(ins[0]), set(ins[1]), set(out), {c: int(extents[c]) for c in text if c.isalpha()}, spec
    )


def _group(a: set, b: set, o: set, ext: Mapping[Any, int], what: Any) -> ContractionShape:
    alone = (a ^ b) - o
    extra = o - (a | b)
    if alone or extra:
        bad = sorted(str(v) for v in alone | extra)
        raise BoundError(
            f"{what!s} is not a matrix product after grouping indices: {bad} appear in only "
            "one operand and not the output (or only in the output)"
        )
    size = lambda vs: math.prod(ext[v] for v in vs)  # noqa: E731
    return ContractionShape(
        m=size((a - b) & o), n=size((b - a) & o), k=size((a & b) - o), batch=size(a & b & o)
    )


def contraction_shape(what: Any, extents: Mapping[str, int] | None = None) -> ContractionShape:
    """Group a binary contraction's indices into ``(m, n, k, batch)``.

    ``what`` is an einsum string (then ``extents`` maps letters to extents) or a
    tensor / schedule / statement / kernel whose computation is one product of two
    accesses. ``m``: indices of the first operand and the output only; ``n``: of the
    second and the output; ``k``: summed indices of both operands; ``batch``: in
    both operands and the output.
    """
    if isinstance(what, str):
        if extents is None:
            raise BoundError(f"contraction_shape({what!r}) needs the extents of its letters")
        try:
            return _letters_shape(what, extents)
        except KeyError as e:
            raise BoundError(f"no extent given for index {e.args[0]!r} of {what!r}") from None
    st = _statement(what)
    if len(st.terms) != 1 or len(st.terms[0].factors) != 2:
        raise BoundError(f"{st.assignment!r} is not a product of two tensors")
    fa, fb = st.terms[0].factors
    return _group(set(fa.indices), set(fb.indices), set(st.lhs_vars), st.extent, st.assignment)


def contraction_bound(what: Any, extents: Mapping[str, int] | None = None, P: float = 1) -> float:
    """Tight memory-independent bound for a contraction that is a (batched) matrix product.

    Batch indices: ``b`` independent ``m x n x k`` products. When ``P <= b`` whole
    products fit on processors with no communication, so the bound is 0. Otherwise
    the busiest processor does ``b*m*n*k/P`` products; the least data it can touch
    for a given amount of work is a concave function of the work in one product, so
    concentrating its work in one product is its best case, and the bound is that of
    one product on ``P/b`` processors (``matmul_bound(m, n, k, P/b)``; the ``1/P``
    owned shares stay right because ``b*(mk+kn+mn)/P = (mk+kn+mn)/(P/b)``).
    """
    sh = contraction_shape(what, extents)
    _positive("P", P)
    if P <= sh.batch:
        return 0.0
    return matmul_bound(sh.m, sh.n, sh.k, P / sh.batch)


def _statement(what: Any) -> Any:
    from distal.lang.concrete import Statement, concretize
    from distal.lang.nodes import Tensor

    if isinstance(what, Statement):
        return what
    if isinstance(what, Tensor):
        if what.assignment is None:
            raise BoundError(f"tensor {what.name!r} has no computation")
        return concretize(what.assignment)
    for attr in ("statement", "schedule"):
        inner = getattr(what, attr, None)
        if inner is not None:
            return _statement(inner)
    raise BoundError(f"cannot find a computation in {what!r}")


@dataclass(frozen=True)
class StatementBound:
    """A lower bound on max words received for one statement on ``P`` processors."""

    words: float
    kind: str  # "matmul" | "mttkrp"
    detail: str


def _mttkrp_parts(st: Any) -> tuple[list[int], int] | None:
    """``(tensor dims, rank)`` when the statement is an MTTKRP, else None."""
    if len(st.terms) != 1:
        return None
    facs = st.terms[0].factors
    out = set(st.lhs_vars)
    if len(facs) < 2 or len(out) != 2:
        return None
    big = max(facs, key=lambda f: len(f.indices))
    mats = [f for f in facs if f is not big]
    if len(set(big.indices)) != len(big.indices) or len(big.indices) < 2:
        return None
    rs = set.intersection(*(set(f.indices) for f in mats)) - set(big.indices)
    if len(rs) != 1:
        return None
    (r,) = rs
    others = [next(iter(set(f.indices) - {r})) for f in mats if len(f.indices) == 2]
    if len(others) != len(mats) or r not in out:
        return None
    mode = next(iter(out - {r}))
    if sorted(map(id, [*others, mode])) != sorted(map(id, big.indices)):
        return None
    return [st.extent[v] for v in big.indices], st.extent[r]


def statement_bound(what: Any, P: float) -> StatementBound | None:
    """The bound that applies to a computation (matrix product or MTTKRP), or None."""
    st = _statement(what)
    try:
        sh = contraction_shape(st)
    except BoundError:
        sh = None
    if sh is not None:
        w = 0.0 if P <= sh.batch else matmul_bound(sh.m, sh.n, sh.k, P / sh.batch)
        case = matmul_regime(sh.m, sh.n, sh.k, max(P / sh.batch, 1.0))
        detail = f"matrix product m={sh.m} n={sh.n} k={sh.k} batch={sh.batch}, case {case}"
        return StatementBound(w, "matmul", detail)
    parts = _mttkrp_parts(st)
    if parts is not None:
        dims, rank = parts
        return StatementBound(mttkrp_bound(dims, rank, P), "mttkrp", f"MTTKRP dims={dims} R={rank}")
    return None


def bound_ratio(kernel: Any) -> float | None:
    """``max words received / lower bound`` of a compiled kernel (None: no bound known).

    ``inf`` when the bound is 0 but the kernel moves words; 1.0 when both are 0.
    """
    st = kernel.stats()
    b = statement_bound(kernel.schedule, st.nprocs)
    if b is None:
        return None
    w = st.max_words_received
    if b.words <= 0:
        return 1.0 if w == 0 else math.inf
    return w / b.words
