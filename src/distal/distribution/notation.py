"""Tensor distribution notation: ``"xy -> xy0"``.

The left side names the tensor's dimensions, the right side says what each
machine dimension does: cut a named tensor dimension into contiguous blocks,
replicate (``*`` or a name absent from the left), or restrict the data to one
coordinate (an integer). The full grammar is in ``docs/api.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from distal.errors import NotationError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Right-side entry kinds. ``GROUP`` is a parenthesised group of dimensions, ``(xy)``: a
#: *non-zero cut* of a sparse tensor's stored entries (see ``docs/sparse.md``).
PART, REPL, RESTRICT, GROUP = "part", "repl", "restrict", "group"


@dataclass(frozen=True, slots=True)
class DimRule:
    """What one machine dimension does to a tensor.

    ``kind`` is ``"part"`` (``dim`` is the tensor dimension cut), ``"repl"``,
    ``"restrict"`` (``coord`` is the only machine coordinate holding data) or ``"group"``
    (``dims`` are the fused dimensions whose stored entries are cut by position).
    """

    kind: str
    dim: int = -1
    coord: int = -1
    dims: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Distribution:
    """A parsed distribution statement for one tensor on one machine grid."""

    text: str
    lhs: tuple[str, ...]
    rules: tuple[DimRule, ...]

    def cuts(self, order: int) -> tuple[tuple[int, ...], ...]:
        """For each tensor dimension, the machine dimensions cutting it (first most significant)."""
        out: list[list[int]] = [[] for _ in range(order)]
        for m, r in enumerate(self.rules):
            if r.kind == PART:
                out[r.dim].append(m)
        return tuple(tuple(c) for c in out)

    @property
    def groups(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """``(machine dimension, fused tensor dimensions)`` of every non-zero cut."""
        return tuple((m, r.dims) for m, r in enumerate(self.rules) if r.kind == GROUP)

    def __str__(self) -> str:
        return self.text


def _split_right(side: str, spaced: bool, text: str, tensor: str) -> list[str | list[str]]:
    """Right-side tokens; a parenthesised group becomes the list of its names."""
    out: list[str | list[str]] = []
    rest = side
    while rest.strip():
        rest = rest.lstrip()
        if rest[0] == "(":
            close = rest.find(")")
            if close < 0:
                raise NotationError(
                    f"unclosed '(' on the right of distribution {text!r} of tensor {tensor!r}"
                )
            out.append(_split_side(rest[1:close], spaced))
            rest = rest[close + 1 :]
            continue
        if rest[0] == ")":
            raise NotationError(
                f"unmatched ')' on the right of distribution {text!r} of tensor {tensor!r}"
            )
        cut = len(rest)
        for stop in (" ", "("):
            k = rest.find(stop)
            if 0 <= k < cut:
                cut = k
        head, rest = rest[:cut], rest[cut:]
        out.extend(_split_side(head, spaced))
    return out


def _split_side(side: str, spaced: bool) -> list[str]:
    return side.split() if spaced else [c for c in side if not c.isspace()]


def parse_distribution(
    text: str, tensor: str, order: int, machine_shape: tuple[int, ...]
) -> Distribution:
    """Parse ``text`` for tensor ``tensor`` of the given order on a grid of ``machine_shape``.

    Raises:
        NotationError: naming the tensor and the offending token.
    """
    if not isinstance(text, str):
        raise NotationError(f"distribution of tensor {tensor!r} must be a string, got {text!r}")
    if text.count("->") != 1:
        raise NotationError(
            f"distribution {text!r} of tensor {tensor!r} needs exactly one '->', as in 'xy -> xy'"
        )
    left, right = (s.strip() for s in text.split("->"))
    spaced = " " in left or " " in right
    lhs = _split_side(left, spaced)
    rhs = _split_right(right, spaced, text, tensor)
    for name in lhs:
        if not _NAME.match(name):
            raise NotationError(
                f"bad token {name!r} on the left of distribution {text!r} of tensor {tensor!r}: "
                "the left side names tensor dimensions"
            )
    if len(lhs) != order:
        raise NotationError(
            f"distribution {text!r} of tensor {tensor!r} names {len(lhs)} dimensions on its "
            f"left, but the tensor has order {order}"
        )
    seen: set[str] = set()
    for name in lhs:
        if name in seen:
            raise NotationError(
                f"name {name!r} appears twice on the left of distribution {text!r} "
                f"of tensor {tensor!r}"
            )
        seen.add(name)
    if len(rhs) != len(machine_shape):
        raise NotationError(
            f"distribution {text!r} of tensor {tensor!r} has {len(rhs)} entries on its right, "
            f"but the machine has {len(machine_shape)} dimensions {machine_shape}"
        )
    rules = []
    for m, tok in enumerate(rhs):
        if isinstance(tok, list):
            rules.append(_group_rule(tok, lhs, text, tensor))
        elif tok == "*":
            rules.append(DimRule(REPL))
        elif tok.isdigit() or (tok.startswith("-") and tok[1:].isdigit()):
            c = int(tok)
            if not 0 <= c < machine_shape[m]:
                raise NotationError(
                    f"restriction {tok!r} at machine dimension {m} in distribution {text!r} of "
                    f"tensor {tensor!r} is outside 0..{machine_shape[m] - 1}"
                )
            rules.append(DimRule(RESTRICT, coord=c))
        elif _NAME.match(tok):
            rules.append(DimRule(PART, dim=lhs.index(tok)) if tok in lhs else DimRule(REPL))
        else:
            raise NotationError(
                f"bad token {tok!r} on the right of distribution {text!r} of tensor {tensor!r}: "
                "expected a dimension name, '*' or an integer"
            )
    return Distribution(text, tuple(lhs), tuple(rules))


def _group_rule(names: list[str], lhs: list[str], text: str, tensor: str) -> DimRule:
    """``(xy)``: the named dimensions, fused, cut by stored-entry position."""
    if not names:
        raise NotationError(f"empty group '()' in distribution {text!r} of tensor {tensor!r}")
    for n in names:
        if n not in lhs:
            raise NotationError(
                f"group ({''.join(names)}) in distribution {text!r} of tensor {tensor!r} names "
                f"{n!r}, which is not a dimension on the left"
            )
    if len(set(names)) != len(names):
        raise NotationError(
            f"group ({''.join(names)}) in distribution {text!r} of tensor {tensor!r} names a "
            "dimension twice"
        )
    return DimRule(GROUP, dims=tuple(lhs.index(n) for n in names))


def whole_on_processor0(order: int, machine_shape: tuple[int, ...]) -> Distribution:
    """The placement of a tensor without a distribution: all of it on processor 0."""
    lhs = tuple(f"d{n}" for n in range(order))
    text = f"{' '.join(lhs) or '_'} -> {' '.join('0' for _ in machine_shape)}"
    return Distribution(text, lhs, tuple(DimRule(RESTRICT, coord=0) for _ in machine_shape))


def parse_layout(
    dist: str | list[str] | tuple[str, ...], tensor: str, order: int, machine: object
) -> Distribution | tuple[Distribution, ...]:
    """Parse a tensor's distribution on a (possibly hierarchical) machine.

    A string describes the whole grid (all levels' dimensions, outer level first);
    a list gives one statement per machine level, each applied to the piece the
    previous level gave.
    """
    levels: tuple[tuple[int, ...], ...] = machine.levels  # type: ignore[attr-defined]
    shape: tuple[int, ...] = machine.shape  # type: ignore[attr-defined]
    if isinstance(dist, str):
        return parse_distribution(dist, tensor, order, shape)
    if not isinstance(dist, list | tuple) or not all(isinstance(d, str) for d in dist):
        raise NotationError(
            f"distribution of tensor {tensor!r} must be a string or a list of strings, got {dist!r}"
        )
    if len(dist) != len(levels):
        raise NotationError(
            f"tensor {tensor!r} has {len(dist)} distribution statements but its machine has "
            f"{len(levels)} levels {list(levels)}; give one per level"
        )
    return tuple(
        parse_distribution(d, tensor, order, lv) for d, lv in zip(dist, levels, strict=True)
    )
