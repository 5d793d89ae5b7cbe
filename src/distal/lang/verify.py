"""Checks an assignment must pass before it becomes a tensor's computation."""

from __future__ import annotations

from collections.abc import Iterator

from distal.errors import NotationError, ShapeError
from distal.lang.nodes import Access, Add, Assignment, Expr, IndexVar, Literal, Mul, Neg, Sum


def accesses(e: Expr) -> Iterator[Access]:
    """All accesses of ``e``, left to right."""
    if isinstance(e, Access):
        yield e
    elif isinstance(e, Add | Mul):
        yield from accesses(e.a)
        yield from accesses(e.b)
    elif isinstance(e, Neg):
        yield from accesses(e.a)
    elif isinstance(e, Sum):
        yield from accesses(e.body)
    elif not isinstance(e, Literal):
        raise NotationError(f"unknown expression node {e!r}")


def extents(a: Assignment) -> dict[IndexVar, int]:
    """Extent of every index variable, from the tensors it indexes (first use wins)."""
    out: dict[IndexVar, int] = {}
    for acc in [a.lhs, *accesses(a.rhs)]:
        for d, v in enumerate(acc.indices):
            n = acc.tensor.shape[d]
            if v in out and out[v] != n:
                raise ShapeError(
                    f"index variable {v.name!r} has extent {out[v]} in one use but extent {n} "
                    f"as dimension {d} of tensor {acc.tensor.name!r}"
                )
            out.setdefault(v, n)
    return out


def check_assignment(a: Assignment) -> Assignment:
    """Validate ``a`` and return it unchanged.

    Raises:
        NotationError: repeated left-side variables, or the output read on the right.
        ShapeError: a variable used with two different extents.
    """
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
    extents(a)
    return a
