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

#: Right-side entry kinds.
PART, REPL, RESTRICT = "part", "repl", "restrict"


@dataclass(frozen=True, slots=True)
class DimRule:
    """What one machine dimension does to a tensor.

    ``kind`` is ``"part"`` (``dim`` is the tensor dimension cut), ``"repl"``
    or ``"restrict"`` (``coord`` is the only machine coordinate holding data).
    """

    kind: str
    dim: int = -1
    coord: int = -1


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

    def __str__(self) -> str:
        return self.text


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
    rhs = _split_side(right, spaced)
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
        if tok == "*":
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
