"""What every algorithm of the library returns, and the interval arithmetic of closed forms.

An :class:`Algorithm` is plain data: the tensors (with their distributions), the
schedule built from public commands only, and the closed-form number of words
each processor receives. The closed forms are written independently of the
compiler (block extents and interval intersections, never the plan), so
comparing them with ``kernel.stats()`` checks the compiler, not itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.distribution.machine import Machine
from distal.errors import ScheduleError
from distal.kernel import Kernel, Result, compile
from distal.lang.nodes import Tensor
from distal.schedule.api import Schedule

Interval = tuple[int, int]


@dataclass(frozen=True, eq=False)
class Algorithm:
    """A named distributed algorithm: distributions + schedule + its closed-form traffic.

    Attributes:
        name: short name, e.g. ``"cannon"``.
        tensors: every tensor by name, the output first (distributions attached).
        schedule: the complete schedule (public commands only; ``repr`` is the code).
        output: name of the output tensor.
        subscripts: ``numpy.einsum`` subscripts over ``inputs`` in order, e.g. ``"ik,kj->ij"``.
        machine: the processor grid the schedule runs on.
        words: closed-form words received per processor (indexed by processor number).
        formula: the closed form in words, for documentation.
        params: the algorithm's choices (grid, steps, ...).
        level_words: on a hierarchical machine, the closed-form words received per
            processor across each machine level (``[0]``: between nodes), else None.
    """

    name: str
    tensors: Mapping[str, Tensor]
    schedule: Schedule
    output: str
    subscripts: str
    machine: Machine
    words: tuple[int, ...]
    formula: str
    params: Mapping[str, Any] = field(default_factory=dict)
    level_words: tuple[tuple[int, ...], ...] | None = None

    @property
    def input_names(self) -> tuple[str, ...]:
        """Input tensor names, in the order of ``subscripts``."""
        return tuple(n for n in self.tensors if n != self.output)

    @property
    def max_words(self) -> int:
        """Closed-form largest number of words any processor receives."""
        return max(self.words, default=0)

    def compile(self, routing: str = "direct") -> Kernel:
        """Compile the schedule (``dl.compile``).

        Direct routing by default: the closed forms in ``words`` count each piece from its
        owner and each partial sum straight to its reducer, as the textbooks do. Pass
        ``routing="auto"`` or ``"tree"`` for the routed plan.
        """
        return compile(self.schedule, routing=routing)

    def inputs(self, rng: np.random.Generator | int | None = 0) -> dict[str, np.ndarray]:
        """Random standard-normal inputs of the right shapes (reproducible from ``rng``)."""
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        return {n: gen.standard_normal(self.tensors[n].shape) for n in self.input_names}

    def reference(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The expected output, from ``numpy.einsum`` on the whole arrays."""
        return np.asarray(np.einsum(self.subscripts, *(inputs[n] for n in self.input_names)))

    def run(self, inputs: Mapping[str, np.ndarray] | None = None, **options: Any) -> Result:
        """Compile and run (local runtime unless ``runtime=`` says otherwise)."""
        return self.compile().run(self.inputs() if inputs is None else inputs, **options)

    def __repr__(self) -> str:
        return f"Algorithm({self.name!r}, machine={self.machine!r}, params={dict(self.params)})"


# ---------------------------------------------------------------------------------------------
# Parameter checks: a ScheduleError naming the culprit
# ---------------------------------------------------------------------------------------------


def check_machine(machine: Any, ndim: int, algorithm: str) -> Machine:
    """``machine`` as a flat Machine of rank ``ndim`` (else ScheduleError naming it)."""
    if not isinstance(machine, Machine):
        raise ScheduleError(f"{algorithm}: machine {machine!r} is not a dl.Machine")
    if machine.ndim != ndim:
        raise ScheduleError(
            f"{algorithm}: needs a {ndim}-D machine, got {machine!r} of rank {machine.ndim}"
        )
    return machine


def check_extent(value: Any, what: str, algorithm: str) -> int:
    """A positive integer extent (else ScheduleError naming ``what``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ScheduleError(f"{algorithm}: extent {what} must be a positive integer, got {value!r}")
    return int(value)


def check_steps(value: Any, algorithm: str) -> int:
    """A positive number of serial steps (else ScheduleError naming ``steps``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ScheduleError(f"{algorithm}: steps must be a positive integer, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------------------------
# Interval arithmetic for closed forms (the distribution notation's block rule)
# ---------------------------------------------------------------------------------------------


def block(n: int, g: int, b: int) -> Interval:
    """Block ``b`` of an extent ``n`` cut into ``g`` pieces: ``[b*c, min((b+1)*c, n))``."""
    c = -(-n // g)
    return (min(b * c, n), min((b + 1) * c, n))


def size(iv: Interval) -> int:
    """Number of points of a half-open interval (0 when empty)."""
    return max(0, iv[1] - iv[0])


def meet(a: Interval, b: Interval) -> int:
    """Number of points two half-open intervals share."""
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def lcm(*xs: int) -> int:
    """Least common multiple."""
    return math.lcm(*xs)


def sub_chunks(n: int, steps: int, parts: int, z: int) -> list[Interval]:
    """The ``k`` points of ``divide(k, ks, kr, steps)`` then ``kr`` cut into ``parts``, piece ``z``.

    One interval per serial step ``ks``: ``ks*c1 + [z*c2, min((z+1)*c2, c1))``, clipped to
    ``[0, n)``, with ``c1 = ceil(n/steps)`` and ``c2 = ceil(c1/parts)``.
    """
    c1 = -(-n // steps)
    c2 = -(-c1 // parts)
    out = []
    for ks in range(steps):
        lo = ks * c1 + min(z * c2, c1)
        hi = ks * c1 + min((z + 1) * c2, c1)
        out.append((min(lo, n), min(hi, n)))
    return out
