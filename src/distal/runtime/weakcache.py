"""What runs derive from a plan (or a region of one), dropped with it.

A runtime prepares once what every run of a plan shares: leaves with their index arrays,
recycled result buffers, where a region lies in a buffer. Kept in a module-level table by
the plan's identity, that work outlived the plan: a table holds the plan, and with it the
plan's arrays, long after the user dropped the kernel (a sparse suite of a dozen data sets
of 4 M entries each held gigabytes of plans it was done with). Here each entry holds its
key object weakly, so an entry goes when its object does; ``keep`` still bounds how many
live objects are kept. An object that cannot be weakly referenced (a slotted plan on
Python 3.10) is kept strongly, as before, within ``keep``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any


class WeakCache:
    """Values by object identity, each kept while its object lives (and for at most
    ``keep`` objects, the most recently stored). A value must not hold its object: the
    entry would keep it alive (it is then dropped only by ``keep``)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._items: dict[int, tuple[Any, Any]] = {}  # id -> (weakref or object, value)
        self._lock = threading.Lock()

    def get(self, obj: Any) -> Any:
        """The value stored for ``obj``, or None."""
        got = self._items.get(id(obj))
        if got is None:
            return None
        ref, value = got
        held = ref() if isinstance(ref, weakref.ref) else ref
        return value if held is obj else None

    def put(self, obj: Any, value: Any) -> None:
        """Store ``value`` for ``obj`` (the oldest entries go beyond ``keep``)."""
        key = id(obj)
        items = self._items

        def gone(ref: Any, key: int = key) -> None:  # (run by the collector: no lock)
            cur = items.get(key)
            if cur is not None and cur[0] is ref:
                items.pop(key, None)

        try:
            ref: Any = weakref.ref(obj, gone)
        except TypeError:
            ref = obj
        with self._lock:
            items.pop(key, None)
            while len(items) >= self.keep:
                try:
                    items.pop(next(iter(items)))
                except (StopIteration, KeyError, RuntimeError):  # emptied meanwhile
                    break
            items[key] = (ref, value)

    def __len__(self) -> int:
        return len(self._items)


__all__ = ["WeakCache"]
