"""The current session of ``distal.numpy``: the innermost ``with dl.Session(...)`` block,
else a default local session made on first use.

The session layer registers how the default is made (:func:`set_default_factory`), so
this layer never imports it; ``Session.__enter__`` and ``__exit__`` push and pop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_LOCAL = threading.local()
_DEFAULT: list[Any] = []
_FACTORY: list[Callable[[], Any]] = []


def _stack() -> list[Any]:
    stack = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    return stack


def push(session: Any) -> None:
    """Make ``session`` current (``with session:``)."""
    _stack().append(session)


def pop(session: Any) -> None:
    """End ``session``'s ``with`` block (the innermost one it opened)."""
    stack = _stack()
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is session:
            del stack[i]
            return


def set_default_factory(factory: Callable[[], Any]) -> None:
    """How the default session is made (once, on first use)."""
    _FACTORY[:] = [factory]


def current() -> Any:
    """The current session: the innermost ``with`` block's in this thread, else the
    default one."""
    stack = _stack()
    if stack:
        return stack[-1]
    if not _DEFAULT:
        if not _FACTORY:
            from distal.errors import InternalError

            raise InternalError("no default session factory registered (import distal first)")
        _DEFAULT.append(_FACTORY[0]())
    return _DEFAULT[0]


def reset_default() -> None:
    """Forget the default session (the next use makes a new one)."""
    _DEFAULT.clear()
