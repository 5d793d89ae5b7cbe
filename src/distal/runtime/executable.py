"""``Executable``: a compiled kernel as plain data, everything a runtime needs and no more.

``kernel.executable()`` and ``bound.executable()`` end compiling: the result holds the plan
(every processor's program, or the programs of some processors only: what one MPI rank or
one volunteer executes), the leaf specs of the dense computations (:class:`TermKernel`:
an einsum spec per term, nothing compiled), every tensor's name, shape, dtype, format and
layout (:class:`TensorSpec`, which is also what a run's inputs are checked against), the
predicted :class:`~distal.plan.stats.Stats`, a key that names what the plan is a function
of, and the schedule as code (for people and checkpoint manifests).

A runtime receives an ``Executable`` and nothing else: it never imports the kernel, the
lowering or the session, and nothing it runs calls back into the compiler. An executable
is immutable, compares equal to another holding the same data, and writes itself in a
versioned format without pickle (:mod:`distal.runtime.codec`, ``docs/executable.md``), so
it can cross a process, a machine or a trust boundary and be read back equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from distal.distribution.layout import Layout, dist_key
from distal.distribution.machine import Machine
from distal.errors import InputError
from distal.kernels.leaf import TermKernel
from distal.plan.ir import Compute, Op, Plan
from distal.plan.stats import Stats
from distal.runtime import codec
from distal.runtime.result import Result
from distal.runtime.source import check_source, is_block_source
from distal.sparse.formats import Format
from distal.values import dense_value, sparse_value


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor as a run sees it: its name, shape, element type, storage format and where
    it lives (``dist``, a distribution string, one per machine level, or None for "all on
    processor 0", over ``machine``). ``pattern`` is a bound sparse input's pattern
    fingerprint: a run's input must have that pattern (its values may differ)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    format: Format
    dist: str | tuple[str, ...] | None
    machine: Machine
    pattern: str | None = None

    @property
    def is_dense(self) -> bool:
        return self.format.is_dense

    @property
    def layout(self) -> Layout:
        """Where the tensor lives (its blocks by processor)."""
        return Layout(self.shape, self.dist, self.machine)

    @staticmethod
    def of(tensor: Any, dist: Any, machine: Machine, pattern: str | None = None) -> TensorSpec:
        """The spec of a ``dl.Tensor`` laid out as ``dist`` over ``machine``."""
        return TensorSpec(
            tensor.name,
            tuple(tensor.shape),
            np.dtype(tensor.dtype),
            tensor.format,
            dist_key(dist),
            machine,
            pattern,
        )


@dataclass(frozen=True, eq=False)
class Executable:
    """A compiled kernel as data (see the module docstring).

    Attributes:
        plan: the plan: every processor's program, or those of ``plan.procs`` only.
        leaves: the dense leaves' specs, one per term (empty for a plan over stored
            entries, whose ``Compute`` instructions carry their own work).
        tensors: every tensor, the output first, then the inputs in ``plan.inputs`` order.
        predicted: the predicted stats of the whole kernel; None only in a part of a kernel
            bound to sparse patterns, whose stats are counted from its whole plan.
        key: names what the plan is a function of (machine size, schedule, routing, tensors,
            patterns): equal on every process that compiled the same kernel.
        source: the schedule as code.
    """

    plan: Plan
    leaves: tuple[TermKernel, ...]
    tensors: tuple[TensorSpec, ...]
    predicted: Stats | None
    key: str
    source: str = ""
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # -- what it is -----------------------------------------------------------------------------

    @property
    def nprocs(self) -> int:
        """Processors of the machine the plan runs on."""
        return self.plan.nprocs

    @property
    def processors(self) -> tuple[int, ...]:
        """The processors whose programs this executable holds."""
        return self.plan.procs or tuple(range(self.plan.nprocs))

    @property
    def whole(self) -> bool:
        """Whether it holds every processor's program."""
        return not self.plan.procs or len(set(self.plan.procs)) == self.plan.nprocs

    @property
    def kernels(self) -> tuple[TermKernel, ...]:
        """The leaves, by the name a kernel gives them (``kernel.kernels``)."""
        return self.leaves

    @cached_property
    def spec(self) -> dict[str, TensorSpec]:
        """Every tensor's spec by name."""
        return {t.name: t for t in self.tensors}

    @cached_property
    def dtypes(self) -> dict[str, np.dtype]:
        """Every tensor's element type by name."""
        return {t.name: t.dtype for t in self.tensors}

    @property
    def output(self) -> TensorSpec:
        return self.tensors[0]

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.tensors[1:]

    def layout(self, name: str) -> Layout:
        """Where tensor ``name`` lives.

        Raises:
            InputError: no tensor of that name.
        """
        return self._spec(name).layout

    def _spec(self, name: str) -> TensorSpec:
        try:
            return self.spec[name]
        except KeyError:
            raise InputError(
                f"tensor {name!r} is not in this executable; its tensors are {list(self.spec)}"
            ) from None

    def stats(self) -> Stats:
        """The predicted traffic, work and memory per processor (a fresh copy).

        Raises:
            InputError: a part of a kernel bound to sparse patterns (its stats are the whole
                kernel's, counted from the whole plan: ``bound.executable().stats()``).
        """
        if self.predicted is None:
            raise InputError(
                f"this executable holds the programs of processors {list(self.processors)} of "
                "a kernel bound to sparse patterns; its stats are counted from the whole plan: "
                "use bound.executable().stats()"
            )
        return Stats(**self.predicted.as_dict())

    def program(self, p: int) -> Plan:
        """Processor ``p``'s own part of the plan (its instructions and every message it
        sends or receives), cut from what this executable holds.

        Raises:
            InputError: ``p`` is not a processor whose program it holds.
        """
        if not isinstance(p, int | np.integer) or isinstance(p, bool) or p not in self._held():
            raise InputError(
                f"processor {p!r}: this executable holds the programs of processors "
                f"{_spans(self.processors)} of a machine of {self.nprocs}"
            )
        p = int(p)
        if self.plan.procs == (p,):
            return self.plan
        parts = self._cache.setdefault("programs", {})
        got = parts.get(p)
        if got is None:
            got = parts[p] = self.plan.restrict(p)
        return got

    def _held(self) -> frozenset[int] | range:
        return frozenset(self.plan.procs) if self.plan.procs else range(self.plan.nprocs)

    def part(self, processors: Iterable[int]) -> Executable:
        """The executable of some processors only: their programs and the messages they send
        or receive (what one MPI rank, or one unit of a volunteer pool, executes). Its
        stats are the whole kernel's.

        Raises:
            InputError: a processor whose program this executable does not hold.
        """
        procs = tuple(sorted({int(p) for p in processors}))
        for p in procs:
            self.program(p)  # (checks it)
        if procs == self.processors:
            return self
        return dataclasses.replace(self, plan=restrict(self.plan, procs))

    # -- inputs ---------------------------------------------------------------------------------

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """A run's inputs checked against the tensors: dense ones as arrays of the tensors'
        shapes and dtypes (converted where the cast rule allows) or block sources, sparse
        ones as ``SparseArray``s in the tensors' formats with the bound patterns.

        Raises:
            InputError: a missing, unknown or ill-shaped input, the output given as an input,
                a dtype the cast rule refuses, or a sparse input with another pattern.
        """
        return check_values(self.inputs, self.output.name, inputs, self.plan.patterns)

    # -- running --------------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, Any], runtime: str = "local", **options: Any) -> Result:
        """Run on a registered runtime (``dl.runtimes()``), as ``kernel.run`` does: the same
        result and stats, on every runtime."""
        from distal.runtime.base import get_runtime

        with get_runtime(runtime, **options) as rt:
            return rt.run(self, inputs)

    # -- serialization --------------------------------------------------------------------------

    def dumps(self) -> bytes:
        """The executable in the versioned format of :mod:`distal.runtime.codec` (no pickle)."""
        got = self._cache.get("bytes")
        if got is None:
            got = self._cache["bytes"] = codec.dumps(self)
        return got

    @staticmethod
    def loads(data: bytes) -> Executable:
        """An executable read back from :meth:`dumps`'s bytes (equal to the one written).

        Raises:
            InputError: not such bytes, an unknown version, or a malformed document.
        """
        exe = codec.loads(data)
        if not isinstance(exe, Executable):
            raise InputError(f"these bytes hold a {type(exe).__name__}, not an executable")
        try:
            exe.validate()
        except InputError as e:
            raise InputError(f"a malformed executable: {e}") from None
        return exe

    def validate(self) -> None:
        """Check that the parts fit together (what :meth:`loads` checks of bytes read).

        Raises:
            InputError: naming what does not fit.
        """
        plan = self.plan
        if not isinstance(plan, Plan) or type(plan.nprocs) is not int or plan.nprocs < 1:
            raise InputError("no plan, or a plan for no processors")
        n = plan.nprocs
        if not all(isinstance(t, TensorSpec) for t in self.tensors) or not self.tensors:
            raise InputError("tensors that are not tensor specs")
        names = [t.name for t in self.tensors]
        if names[0] != plan.output or tuple(names[1:]) != tuple(plan.inputs):
            raise InputError(
                f"tensors {names} do not match the plan's {plan.output!r}, {plan.inputs}"
            )
        if not all(isinstance(tk, TermKernel) for tk in self.leaves):
            raise InputError("leaves that are not term kernels")
        if self.predicted is not None and (
            not isinstance(self.predicted, Stats) or self.predicted.nprocs != n
        ):
            raise InputError("predicted stats for another machine")
        for p in plan.procs:
            if type(p) is not int or not 0 <= p < n:
                raise InputError(f"processor {p!r} outside the machine of {n}")
        held = plan.procs or range(n)
        if len(plan.programs) != len(held) or (
            isinstance(plan.programs, dict) and set(plan.programs) != set(held)
        ):
            raise InputError("programs that do not match the processors held")
        for p in held:
            for op in plan.ops(p):
                if not isinstance(op, Op):
                    raise InputError(f"processor {p}'s program holds a {type(op).__name__}")
                if isinstance(op, Compute) and op.work is None and not self.leaves:
                    raise InputError(f"processor {p} computes boxes and there are no leaves")
        for m in plan.messages:
            if not (0 <= m.src < n and 0 <= m.dst < n):
                raise InputError(f"a message between processors {m.src} and {m.dst} of {n}")

    def __eq__(self, other: object) -> bool:
        """Equal when they hold the same data (compared as written: the plan's regions and
        leaves compare by identity in memory)."""
        if not isinstance(other, Executable):
            return NotImplemented
        if self is other:
            return True
        return self.key == other.key and self.dumps() == other.dumps()

    def __hash__(self) -> int:
        return hash((self.key, self.processors))

    def __repr__(self) -> str:
        part = "" if self.whole else f", processors {_spans(self.processors)}"
        return (
            f"Executable({self.output.name} from {[t.name for t in self.inputs]}, "
            f"{self.nprocs} processors{part}, key={self.key[:12]})"
        )


def restrict(plan: Plan, procs: tuple[int, ...]) -> Plan:
    """``plan``'s part for processors ``procs``: their programs, and every message one of
    them sends or receives."""
    if len(procs) == 1:
        return plan.restrict(procs[0])
    keep = set(procs)
    return dataclasses.replace(
        plan,
        programs={p: plan.ops(p) for p in procs},
        messages=tuple(m for m in plan.messages if m.src in keep or m.dst in keep),
        procs=procs,
    )


def _spans(procs: tuple[int, ...]) -> str:
    if len(procs) > 2 and procs == tuple(range(procs[0], procs[-1] + 1)):
        return f"{procs[0]}..{procs[-1]}"
    return str(list(procs))


# -- the one input rule -------------------------------------------------------------------------


def check_values(
    specs: tuple[TensorSpec, ...],
    output: str,
    inputs: Mapping[str, Any],
    bound: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every input of ``specs`` checked (see :meth:`Executable.check_inputs`); ``bound``:
    the arrays a sparse kernel was bound to (an input that is one of them is its pattern)."""
    if not isinstance(inputs, Mapping):
        raise InputError(f"inputs must map tensor names to arrays, got {type(inputs).__name__}")
    need = [t.name for t in specs]
    for name in inputs:
        if name not in need:
            role = "the output" if name == output else "not a tensor of this kernel"
            raise InputError(f"input {name!r} is {role}; inputs are {need}")
    out: dict[str, Any] = {}
    for t in specs:
        name = t.name
        if name not in inputs:
            raise InputError(f"input {name!r} is missing; inputs are {need}")
        x = inputs[name]
        if not t.is_dense:
            arr = sparse_value(name, x, t, copy=False)
            if t.pattern is not None and (bound is None or arr is not bound.get(name)):
                if arr.pattern_fingerprint() != t.pattern:
                    raise InputError(
                        f"input {name!r} has another pattern than the one this kernel was "
                        "bound to (values may change, the pattern may not): bind again"
                    )
            out[name] = arr
        elif type(x) is np.ndarray and x.dtype == t.dtype and x.shape == t.shape:
            out[name] = x  # (already what the rule makes of it: a session's held array)
        elif is_block_source(x):  # read one owned block at a time
            out[name] = check_source(name, x, t.shape)
        else:
            out[name] = dense_value(name, x, t)
    return out


# -- the format's records -----------------------------------------------------------------------

codec.register(
    codec.Kind(
        64,
        TensorSpec,
        False,
        lambda t: (t.name, t.shape, t.dtype, t.format, t.dist, t.machine, t.pattern),
        lambda name, shape, dtype, fmt, dist, machine, pattern: TensorSpec(
            str(name), tuple(int(n) for n in shape), np.dtype(dtype), fmt, dist, machine, pattern
        ),
    )
)
codec.register(
    codec.Kind(
        65,
        Executable,
        False,
        lambda e: (e.plan, e.leaves, e.tensors, e.predicted, e.key, e.source),
        Executable,
    )
)

__all__ = ["Executable", "TensorSpec", "check_values", "restrict"]
