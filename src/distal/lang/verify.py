"""Checks an assignment must pass before it becomes a tensor's computation.

They live here, beside :mod:`distal.lang.nodes` (whose walks they use); ``Tensor.__setitem__``
calls :func:`check_assignment` on every definition.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any

import numpy as np

from distal.errors import NotationError, ShapeError
from distal.lang.affine import image
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
    accesses,
    domained,
)

__all__ = ["accesses", "check_assignment", "check_kinds", "extents", "literals"]


def extents(a: Assignment) -> dict[IndexVar, int]:
    """Extent of every index variable, from the tensors it indexes plainly (first use
    wins); shifted accesses are checked to lie inside their tensors (see :class:`Access`).

    Raises:
        ShapeError: two plain uses with different extents, or a shifted access reaching
            outside its tensor over its variables' ranges (within their restrictions).
        NotationError: a variable used only in shifted accesses (its extent is unknown).
    """
    out: dict[IndexVar, int] = {}
    shifted: list[tuple[Access, dict[IndexVar, tuple[int, int]]]] = []
    for acc in [a.lhs, *accesses(a.rhs)]:  # declared extents first (a plain use must agree)
        for v in acc.indices:
            if v.extent is not None:
                out[v] = v.extent
    for acc, box in [(a.lhs, {}), *domained(a.rhs)]:
        if acc.shifted:
            shifted.append((acc, box))
            continue
        for d, v in enumerate(acc.indices):
            n = acc.tensor.shape[d]
            if v in out and out[v] != n:
                was = "is declared with" if v.extent is not None else "has"
                raise ShapeError(
                    f"index variable {v.name!r} {was} extent {out[v]} in one use but extent "
                    f"{n} as dimension {d} of tensor {acc.tensor.name!r}"
                )
            out.setdefault(v, n)
    for acc, box in shifted:
        for d, (v, scale, offset) in enumerate(acc.affine()):
            if v not in out:
                raise NotationError(
                    f"index variable {v.name!r} is used only in shifted accesses ({acc!r}), "
                    "which do not give it an extent: use it plainly somewhere (on the left "
                    "side, or T[i])"
                )
            lo, hi = box.get(v, (0, out[v]))
            lo, hi = max(lo, 0), min(hi, out[v])
            if hi <= lo:
                continue  # restricted to nothing: the access is never read
            first, last = image(lo, hi, scale, offset)
            n = acc.tensor.shape[d]
            if first < 0 or last > n:
                raise ShapeError(
                    f"{acc!r} reads dimension {d} of tensor {acc.tensor.name!r} (extent {n}) "
                    f"at {first}..{last - 1} for {v.name} in {lo}..{hi - 1}: outside the "
                    "tensor"
                )
    return out


def check_assignment(a: Assignment) -> Assignment:
    """Validate ``a`` and return it unchanged.

    Raises:
        NotationError: repeated left-side variables, or the output read on the right.
        ShapeError: a variable used with two different extents.
    """
    if a.lhs.shifted:
        raise NotationError(
            f"the left side {a.lhs!r} is indexed by affine expressions; index the output "
            "with plain variables and shift the right side's accesses instead"
        )
    seen: set[IndexVar] = set()
    for v in a.lhs.indices:
        if v in seen:
            raise NotationError(
                f"index variable {v.name!r} appears twice on the left side of {a.lhs!r}"
            )
        seen.add(v)
    names: dict[str, object] = {a.lhs.tensor.name: a.lhs.tensor}
    for acc in accesses(a.rhs):
        if acc.tensor is a.lhs.tensor:
            raise NotationError(
                f"output tensor {acc.tensor.name!r} also appears on the right side; "
                "an assignment overwrites its output, so read another tensor"
            )
        other = names.setdefault(acc.tensor.name, acc.tensor)
        if other is not acc.tensor:
            raise NotationError(f"two different tensors are named {acc.tensor.name!r}")
    lhs = set(a.lhs.indices)
    for v in _restricted(a.rhs):
        if v not in lhs:
            raise NotationError(
                f"{a!r} restricts {v.name!r}, which is not a left-side variable of {a.lhs!r}; "
                "only the output's variables may be restricted"
            )
    check_kinds(a)
    extents(a)
    return a


def _restricted(e: Expr) -> Iterator[IndexVar]:
    """The variables restrictions in ``e`` name."""
    if isinstance(e, Restrict):
        yield from (v for v, _, _ in e.box)
        yield from _restricted(e.a)
    elif isinstance(e, Add | Mul):
        yield from _restricted(e.a)
        yield from _restricted(e.b)
    elif isinstance(e, Neg):
        yield from _restricted(e.a)
    elif isinstance(e, Sum):
        yield from _restricted(e.body)


#: numpy's order of number kinds: a value of a later kind does not fit an earlier one
_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
_KIND_NAME = {"i": "an integer", "f": "a real (float)", "c": "a complex"}


def literals(e: Expr) -> Iterator[Literal]:
    """All literals of ``e``, left to right."""
    if isinstance(e, Literal):
        yield e
    elif isinstance(e, Add | Mul):
        yield from literals(e.a)
        yield from literals(e.b)
    elif isinstance(e, Neg | Restrict):
        yield from literals(e.a)
    elif isinstance(e, Sum):
        yield from literals(e.body)


def _literal_kind(v: Any) -> str:
    if isinstance(v, numbers.Integral):
        return "i"
    return "f" if isinstance(v, numbers.Real) else "c"


def check_kinds(a: Assignment) -> None:
    """Every operand of ``a`` fits its output's dtype by numpy's ``same_kind`` rule.

    A leaf computes in the output's dtype, so a complex scalar or tensor in a real
    statement would lose its imaginary part, and a float one in an integer statement would
    be truncated, without a word: both are refused (the input rule of
    :func:`distal.casting.check_cast`, applied to the statement itself).

    Raises:
        NotationError: naming the statement, the operand and the output tensor.
    """
    out = a.lhs.tensor
    rank = _KIND_RANK[out.dtype.kind]

    def refuse(what: str, dtype: np.dtype) -> NotationError:
        return NotationError(
            f"{a!r}: {what} but output tensor {out.name!r} is {out.dtype}, so the result "
            f"would be cut to {out.dtype}; give {out.name!r} dtype=np.{dtype.name} or leave "
            "the operand out"
        )

    for lit in literals(a.rhs):
        k = _literal_kind(lit.value)
        if _KIND_RANK[k] > rank:
            want = np.result_type(out.dtype, np.float64 if k == "f" else np.complex128)
            raise refuse(f"the number {lit.value!r} is {_KIND_NAME[k]} scalar", want)
    for acc in accesses(a.rhs):
        t = acc.tensor
        if not np.can_cast(t.dtype, out.dtype, "same_kind"):
            raise refuse(f"tensor {t.name!r} is {t.dtype}", np.result_type(t.dtype, out.dtype))
