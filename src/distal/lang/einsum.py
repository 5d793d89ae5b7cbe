"""numpy-style einsum strings parsed into the same index notation.

Everything ``numpy.einsum`` accepts in a subscripts string is accepted here: explicit
(``"ij,jk->ik"``) and implicit (``"ij,jk"``) outputs, spaces, the labels ``a-z`` and
``A-Z``, repeated labels within one operand (``"ii->i"``) and the ellipsis ``"..."``.
:func:`parse_einsum` expands each ellipsis into fresh labels (right-aligned across
operands, as numpy broadcasts them), so the rest of the compiler only sees letters;
size-1 broadcasting and diagonals are the front end's business (``distal.einsum``),
because they need the operands' shapes and values.
"""

from __future__ import annotations

from collections.abc import Sequence
from string import ascii_letters
from typing import Any

from distal.errors import NotationError
from distal.lang.nodes import IndexVar

ELLIPSIS = "..."


def _check_spec(spec: str, what: str, subscripts: str) -> None:
    """Labels must be ASCII letters; ``.`` only inside one ``...``."""
    rest = spec.replace(ELLIPSIS, "", 1)
    for c in rest:
        if c == ".":
            raise NotationError(
                f"einsum subscripts {subscripts!r}: {what} has a '.' that is not part of "
                "one ellipsis '...'"
            )
        if c not in ascii_letters:
            raise NotationError(f"bad token {c!r} in einsum subscripts {subscripts!r}")


def parse_einsum(subscripts: str, ndims: Sequence[int]) -> tuple[list[str], str]:
    """Split ``"ij,jk->ik"`` into operand and output subscripts, checked against operand ranks.

    Without ``->`` the output is numpy's: the ellipsis dimensions first, then the labels
    used exactly once, sorted (``A-Z`` before ``a-z``). Each ellipsis is replaced by
    fresh labels, one per dimension it covers; an operand whose ellipsis covers fewer
    dimensions gets the last ones (numpy aligns broadcast dimensions on the right).
    """
    if not isinstance(subscripts, str):
        raise NotationError(f"einsum subscripts must be a string, got {subscripts!r}")
    text = "".join(subscripts.split())
    if text.count("->") > 1:
        raise NotationError(f"einsum subscripts {subscripts!r} have more than one '->'")
    left, arrow, out = text.partition("->")
    if "-" in left + out or ">" in left + out:
        raise NotationError(f"einsum subscripts {subscripts!r}: '-' and '>' only as '->'")
    ins = left.split(",")
    if len(ins) != len(ndims):
        raise NotationError(
            f"einsum subscripts {subscripts!r} name {len(ins)} operands but {len(ndims)} were given"
        )
    ell: list[int] = []
    for n, (spec, nd) in enumerate(zip(ins, ndims, strict=True)):
        _check_spec(spec, f"operand {n}", subscripts)
        named = len(spec) - (len(ELLIPSIS) if ELLIPSIS in spec else 0)
        if ELLIPSIS in spec and nd >= named:
            ell.append(nd - named)
            continue
        if ELLIPSIS not in spec and nd == named:
            ell.append(0)
            continue
        raise NotationError(
            f"einsum operand {n} has {nd} dimensions but subscripts {spec!r} name {named}"
        )
    if arrow:
        _check_spec(out, "the output", subscripts)
    used = set(left + out)
    fresh = [c for c in ascii_letters if c not in used]
    width = max(ell, default=0)
    if width > len(fresh):
        raise NotationError(
            f"einsum subscripts {subscripts!r}: {width} ellipsis dimensions do not fit in the "
            f"{len(fresh)} unused labels of a-z, A-Z"
        )
    dots = "".join(fresh[:width])
    counts = {c: left.count(c) for c in set(left) - set(",.")}
    ins = [spec.replace(ELLIPSIS, dots[width - e :]) for spec, e in zip(ins, ell, strict=True)]
    if not arrow:
        out = dots + "".join(sorted(c for c, k in counts.items() if k == 1))
    elif ELLIPSIS in out:
        out = out.replace(ELLIPSIS, dots)
    elif width:
        raise NotationError(
            f"einsum subscripts {subscripts!r}: the operands' '...' cover {width} dimensions "
            "but the output has no '...' to keep them (numpy refuses this too)"
        )
    labels = set("".join(ins))
    for c in out:
        if c not in labels:
            raise NotationError(f"output index {c!r} of {subscripts!r} appears in no operand")
        if out.count(c) > 1:
            raise NotationError(f"output index {c!r} repeats in {subscripts!r}")
    return ins, out


def _label(x: Any, subscripts: Any) -> str:
    if x is Ellipsis:
        return ELLIPSIS
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < len(ascii_letters):
        raise NotationError(
            f"einsum sublist {subscripts!r}: labels are integers 0..51 or Ellipsis, got {x!r}"
        )
    # numpy's order: 0..25 sort before 26..51, as A-Z before a-z
    return ascii_letters[26 + x] if x < 26 else ascii_letters[x - 26]


def interleaved_subscripts(args: Sequence[Any]) -> tuple[str, list[Any]]:
    """numpy's other calling form ``einsum(op0, sublist0, op1, sublist1, ..., [out])``
    as a subscripts string and the operands."""
    ops = list(args[0::2][: len(args) // 2])
    subs = list(args[1::2][: len(args) // 2])
    out = args[-1] if len(args) % 2 else None
    try:
        spec = ",".join("".join(_label(x, s) for x in s) for s in subs)
        if out is not None:
            spec += "->" + "".join(_label(x, out) for x in out)
    except TypeError:
        raise NotationError(
            "einsum takes a subscripts string, or operands each followed by a list of "
            f"integer labels; got {args!r}"
        ) from None
    return spec, ops


def einsum_vars(ins: list[str], out: str) -> dict[str, IndexVar]:
    """One index variable per letter, output letters first."""
    letters = dict.fromkeys(out + "".join(ins))
    return {c: IndexVar(c) for c in letters}
