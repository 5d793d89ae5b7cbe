"""From index notation to its concrete form: explicit sums, then a sum of products.

The summation rule (TACO): a variable absent from the left side is summed over
the smallest sub-expression holding all its uses. After placing the ``Sum``
nodes, the right side is expanded into *terms*, each a coefficient times a
product of accesses summed over a set of variables. Multiplication distributes
over sums, so this is exact; it is what lets a leaf kernel evaluate any
expression on any box of the iteration space:

* a term is summed over its own variables inside the box;
* a statement variable the term does not depend on at all (e.g. ``k`` for
  ``D`` in ``A[i,j] = B[i,k]*C[k,j] + D[i,j]``) contributes only at its first
  value, ``k == 0``, so ``D`` is added once however ``k`` is split;
* a summed variable of the term that none of its factors uses multiplies the
  term by the size of its range in the box;
* a term under a restriction (:func:`distal.lang.nodes.restrict`) has a *domain*: the
  box of left-side variables it is computed on (zero elsewhere), its restrictions
  intersected and cut to the variables' extents; a term whose domain is empty is dropped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from distal.lang.nodes import (
    Access,
    Add,
    Assignment,
    Expr,
    IndexVar,
    Literal,
    Mul,
    Neg,
    Restrict,
    Sum,
    Tensor,
)
from distal.lang.verify import accesses, extents


@dataclass(frozen=True, slots=True)
class Term:
    """``coeff * prod(factors)`` summed over ``summed``, computed where the left-side
    variables lie in ``domain`` (``((var, lo, hi), ...)``; empty: everywhere)."""

    coeff: complex | float | int
    factors: tuple[Access, ...]
    summed: frozenset[IndexVar]
    domain: tuple[tuple[IndexVar, int, int], ...] = ()

    def used(self) -> set[IndexVar]:
        """Variables the factors index with."""
        return {v for f in self.factors for v in f.indices}


@dataclass(frozen=True, slots=True)
class Statement:
    """The concrete statement: the output access, all variables with extents, the terms.

    ``variables`` is the default loop order: left-side variables, then the others
    in order of first appearance.
    """

    assignment: Assignment
    variables: tuple[IndexVar, ...]
    extent: dict[IndexVar, int]
    terms: tuple[Term, ...]
    concrete_rhs: Expr

    @property
    def output(self) -> Tensor:
        """The tensor being defined."""
        return self.assignment.lhs.tensor

    @property
    def lhs_vars(self) -> tuple[IndexVar, ...]:
        """The output's index variables."""
        return self.assignment.lhs.indices

    def inputs(self) -> tuple[Tensor, ...]:
        """Distinct input tensors in order of first appearance."""
        out: dict[int, Tensor] = {}
        for a in accesses(self.assignment.rhs):
            out.setdefault(id(a.tensor), a.tensor)
        return tuple(out.values())

    def __hash__(self) -> int:
        return id(self)


def _uses(e: Expr) -> Counter[IndexVar]:
    c: Counter[IndexVar] = Counter()
    for a in accesses(e):
        c.update(a.indices)
    return c


def place_sums(rhs: Expr, lhs_vars: tuple[IndexVar, ...]) -> Expr:
    """Insert ``Sum`` nodes by the summation rule."""
    total = _uses(rhs)
    free = {v for v in total if v not in lhs_vars}

    def complete(e: Expr) -> set[IndexVar]:
        u = _uses(e)
        return {v for v in free if u[v] == total[v]}

    def walk(e: Expr) -> Expr:
        if isinstance(e, Add | Mul):
            new: Expr = type(e)(walk(e.a), walk(e.b))
            done = complete(e.a) | complete(e.b)
        elif isinstance(e, Neg):
            new = Neg(walk(e.a))
            done = complete(e.a)
        elif isinstance(e, Restrict):
            new = Restrict(walk(e.a), e.box)
            done = complete(e.a)
        else:
            new, done = e, set()
        order = [v for v in total if v in complete(e) - done]
        for v in reversed(order):
            new = Sum(v, new)
        return new

    return walk(rhs)


def expand(e: Expr) -> list[Term]:
    """Sum-of-products form of an expression with explicit sums."""
    if isinstance(e, Access):
        return [Term(1, (e,), frozenset())]
    if isinstance(e, Literal):
        return [Term(e.value, (), frozenset())]
    if isinstance(e, Neg):
        return [Term(-t.coeff, t.factors, t.summed, t.domain) for t in expand(e.a)]
    if isinstance(e, Add):
        return expand(e.a) + expand(e.b)
    if isinstance(e, Mul):
        return [
            Term(
                x.coeff * y.coeff,
                x.factors + y.factors,
                x.summed | y.summed,
                _meet(x.domain, y.domain),
            )
            for x in expand(e.a)
            for y in expand(e.b)
        ]
    if isinstance(e, Sum):
        return [Term(t.coeff, t.factors, t.summed | {e.var}, t.domain) for t in expand(e.body)]
    if isinstance(e, Restrict):
        return [Term(t.coeff, t.factors, t.summed, _meet(t.domain, e.box)) for t in expand(e.a)]
    raise TypeError(f"unknown node {e!r}")


def _meet(
    a: tuple[tuple[IndexVar, int, int], ...], b: tuple[tuple[IndexVar, int, int], ...]
) -> tuple[tuple[IndexVar, int, int], ...]:
    """Two domains intersected (in order of first mention)."""
    if not a:
        return b
    if not b:
        return a
    out = {v: (lo, hi) for v, lo, hi in a}
    for v, lo, hi in b:
        x, y = out.get(v, (lo, hi))
        out[v] = (max(x, lo), min(y, hi))
    return tuple((v, lo, hi) for v, (lo, hi) in out.items())


def _clipped(t: Term, lhs: tuple[IndexVar, ...], ext: dict[IndexVar, int]) -> Term | None:
    """``t`` with its domain cut to the extents, in left-side order and without the ranges
    that are whole; None where it is empty."""
    if not t.domain:
        return t
    box = {v: (max(lo, 0), min(hi, ext[v])) for v, lo, hi in t.domain}
    if any(hi <= lo for lo, hi in box.values()):
        return None
    dom = tuple((v, *box[v]) for v in lhs if v in box and box[v] != (0, ext[v]))
    return Term(t.coeff, t.factors, t.summed, dom)


def concretize(a: Assignment) -> Statement:
    """The concrete statement of an assignment."""
    ext = extents(a)
    order: dict[IndexVar, None] = dict.fromkeys(a.lhs.indices)
    for acc in accesses(a.rhs):
        order.update(dict.fromkeys(v for v in acc.indices if v not in order))
    rhs = place_sums(a.rhs, a.lhs.indices)
    terms_all = expand(rhs)
    # a term with a zero coefficient adds nothing and is left out -- except where the
    # statement may be computed point by point as written (shifted accesses, restricted
    # terms: kernels.pointwise), where ``0.0 * u(i-1)`` still reads u, as numpy's does
    # (nan and inf times zero are nan), so the plan must fetch what the term reads
    written = any(f.shifted for t in terms_all for f in t.factors) or any(
        t.domain for t in terms_all
    )
    clipped = (_clipped(t, a.lhs.indices, ext) for t in terms_all if written or t.coeff != 0)
    terms = tuple(t for t in clipped if t is not None)
    return Statement(a, tuple(order), ext, terms, rhs)
