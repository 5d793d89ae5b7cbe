"""One interpreter of the plan IR: a handler per instruction type, checked complete.

Everything that reads a plan's programs (the local runtime, the MPI rank, the simulator's
cost model, the printer and the sinks' memory model) is a subclass of :class:`Interpreter`
that names, with :func:`impl`, the method carrying out each instruction type (as xDSL's
``@impl``), and lists in ``ignores`` the types it leaves alone on purpose (the MPI rank's
``Forward``: its forwards follow the messages). :meth:`Interpreter.visit` looks the handler
up by the instruction's type in one table, so no reader walks an ``isinstance`` chain.

A subclass whose table misses an instruction type of :data:`INSTRUCTIONS` is refused where
it is defined (:class:`~distal.errors.InternalError` at import), so an instruction added to
:mod:`distal.plan.ir` cannot be skipped silently by one of the interpreters; every one
defined is kept in :data:`INTERPRETERS` for the test that checks them all.

A handler may name a *phase* (``@impl(Reduce, phase="post")``): a runtime that carries out a
step's instructions in several passes (the MPI rank posts its receives before it computes;
the local runtime copies the fetches of a step ahead of the others) splits a step's
instructions by phase with :meth:`Interpreter.split`, in program order within each phase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, get_args

from distal.errors import InternalError
from distal.plan.ir import Op

#: every instruction type of the plan IR (``distal.plan.ir.Op``), in its order
INSTRUCTIONS: tuple[type, ...] = get_args(Op)

#: every interpreter class defined (the completeness test walks them)
INTERPRETERS: list[type[Interpreter]] = []

_MARK = "__distal_impl__"


def impl(*types: type, phase: str = "run") -> Callable[[Callable], Callable]:
    """Mark a method as the handler of instructions of ``types`` (in ``phase``)."""
    for t in types:
        if t not in INSTRUCTIONS:
            raise InternalError(f"{t!r} is not an instruction of the plan IR")
    if not phase:
        raise InternalError("a handler's phase is a non-empty name")

    def mark(f: Callable) -> Callable:
        setattr(f, _MARK, (types, phase))
        return f

    return mark


def _nothing(self: Any, op: Any, *args: Any) -> None:
    """The handler of an ignored instruction type."""


class Interpreter:
    """Base of every reader of plan programs: a dispatch table by instruction type.

    Subclasses mark handler methods with :func:`impl` and list the instruction types they
    leave alone in ``ignores``; pass ``abstract=True`` in the class statement for a base that
    other interpreters complete. ``table`` and ``phases`` are built once per class.
    """

    #: instruction types this interpreter has nothing to do for (on purpose)
    ignores: ClassVar[tuple[type, ...]] = ()
    #: instruction type -> handler (an unbound function taking ``self, op, *args``)
    table: ClassVar[dict[type, Callable[..., Any]]] = {}
    #: instruction type -> the phase its handler runs in (ignored types: absent)
    phases: ClassVar[dict[type, str]] = {}

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type, Callable[..., Any]] = {}
        phases: dict[type, str] = {}
        for klass in reversed(cls.__mro__):
            for t in vars(klass).get("ignores", ()):
                table[t] = _nothing
                phases.pop(t, None)
            for f in vars(klass).values():
                mark = getattr(f, _MARK, None)
                if mark is None:
                    continue
                types, phase = mark
                for t in types:
                    table[t] = f
                    phases[t] = phase
        cls.table, cls.phases = table, phases
        if abstract:
            return
        missing = [t.__name__ for t in INSTRUCTIONS if t not in table]
        if missing:
            raise InternalError(
                f"interpreter {cls.__qualname__} has no handler for {missing}: mark one with "
                "@impl or list the type in its ignores"
            )
        INTERPRETERS.append(cls)

    def visit(self, op: Any, *args: Any) -> Any:
        """Carry out ``op`` by its type's handler."""
        return self.table[type(op)](self, op, *args)

    @classmethod
    def split(cls, ops: Iterable[Any]) -> dict[str, list[Any]]:
        """``ops`` by the phase of their handlers, in order within each phase; ignored
        instructions are left out. Every phase this interpreter names has a list."""
        out: dict[str, list[Any]] = {ph: [] for ph in cls.phases.values()}
        phases = cls.phases
        for op in ops:
            ph = phases.get(type(op))
            if ph is not None:
                out[ph].append(op)
        return out


__all__ = ["INSTRUCTIONS", "INTERPRETERS", "Interpreter", "impl"]
