"""Element-wise passes as data: what a map or a fused set of the arrays front computes.

A :class:`Pass` is a kind (``"map"``: one element-wise expression over numbered slots;
``"fused"``: a fused set's steps, members and reductions) and its key, nested tuples of
operation names, slot numbers and constants. It is all a runtime needs to compute a pass on
its blocks, wherever they are: it pickles as its data (a Dask task's argument is a few
hundred bytes, not a function) and an executable's codec writes it, so a volunteer can be
sent one. Each process makes the function of a pass once (``Pass.function``), from the
evaluator registered for its kind by the arrays front (:mod:`distal.arrays.lower`, which
``import distal`` imports).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distal.errors import InternalError

#: the evaluator of each kind: ``maker(key)`` returns the pass's function
_MAKERS: dict[str, Callable[[Any], Callable[..., Any]]] = {}
#: this process's functions, by pass (made once, reused by every block and task)
_MADE: dict[tuple[str, Any], Callable[..., Any]] = {}
MADE_MAX = 1024


def register_pass(kind: str, maker: Callable[[Any], Callable[..., Any]]) -> None:
    """The evaluator making the functions of passes of ``kind`` (one per kind)."""
    _MAKERS[kind] = maker


@dataclass(frozen=True)
class Pass:
    """An element-wise pass: ``kind`` and ``key`` (see the module docstring). Calling it
    calls its function."""

    kind: str
    key: Any

    def function(self) -> Callable[..., Any]:
        """The pass's function, made once in this process."""
        got = self.__dict__.get("_fn")
        if got is not None:
            return got
        got = _MADE.get((self.kind, self.key))
        if got is None:
            maker = _MAKERS.get(self.kind)
            if maker is None:
                raise InternalError(
                    f"no evaluator for element-wise passes of kind {self.kind!r} "
                    f"(known: {sorted(_MAKERS)}); import distal first"
                )
            got = maker(self.key)
            if len(_MADE) < MADE_MAX:
                _MADE[(self.kind, self.key)] = got
        self.__dict__["_fn"] = got  # (not a field: equality and pickles stay the data's)
        return got

    def __getstate__(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key}

    def __call__(self, *args: Any) -> Any:
        return self.function()(*args)


__all__ = ["Pass", "register_pass"]
