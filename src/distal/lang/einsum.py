"""numpy-style einsum strings parsed into the same index notation."""

from __future__ import annotations

from distal.errors import NotationError, NotSupportedYet
from distal.lang.nodes import IndexVar


def parse_einsum(subscripts: str, ndims: list[int]) -> tuple[list[str], str]:
    """Split ``"ij,jk->ik"`` into operand and output subscripts, checked against operand ranks.

    Without ``->`` the output is the letters used exactly once, sorted (numpy's rule).
    """
    if not isinstance(subscripts, str):
        raise NotationError(f"einsum subscripts must be a string, got {subscripts!r}")
    text = subscripts.replace(" ", "")
    if "." in text:
        raise NotSupportedYet(f"ellipsis in einsum subscripts {subscripts!r}")
    if text.count("->") > 1:
        raise NotationError(f"einsum subscripts {subscripts!r} have more than one '->'")
    left, arrow, out = text.partition("->")
    ins = left.split(",")
    if len(ins) != len(ndims):
        raise NotationError(
            f"einsum subscripts {subscripts!r} name {len(ins)} operands but {len(ndims)} were given"
        )
    for n, (spec, nd) in enumerate(zip(ins, ndims, strict=True)):
        bad = [c for c in spec if not c.isalpha()]
        if bad:
            raise NotationError(f"bad token {bad[0]!r} in einsum subscripts {subscripts!r}")
        if len(spec) != nd:
            raise NotationError(
                f"einsum operand {n} has {nd} dimensions but subscripts {spec!r} name {len(spec)}"
            )
    if not arrow:
        counts = {c: left.count(c) for c in set(left.replace(",", ""))}
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    for c in out:
        if not c.isalpha():
            raise NotationError(f"bad token {c!r} in einsum output of {subscripts!r}")
        if c not in left:
            raise NotationError(f"output index {c!r} of {subscripts!r} appears in no operand")
        if out.count(c) > 1:
            raise NotationError(f"output index {c!r} repeats in {subscripts!r}")
    return ins, out


def einsum_vars(ins: list[str], out: str) -> dict[str, IndexVar]:
    """One index variable per letter, output letters first."""
    letters = dict.fromkeys(out + "".join(ins))
    return {c: IndexVar(c) for c in letters}
