"""The options of ``runtime="dask"``, checked up front so a typo is an ``InputError``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from distal.errors import InputError
from distal.runtime.checkpoint_auth import check_key
from distal.runtime.elastic.trust import Trust
from distal.runtime.elastic.units import GRANULARITIES


@dataclass(frozen=True)
class Faults:
    """Faults a run injects on purpose, to show what the runtime does about them (tests,
    benchmarks, demonstrations; ``faults=`` of ``runtime="dask"``, a ``Faults`` or a dict
    of its fields):

    - ``delay``: seconds every unit waits after computing (a unit of known length);
    - ``slow``: ``{worker name: factor}``: that worker's units take ``factor`` times as long
      (their compute and their ``delay``): a slow or stuck machine;
    - ``trace``: a file every task appends ``start|done <task> <status>`` lines to;
    - ``lie``: worker names whose units and reductions come back with 1 added to every
      element and whose held unit descriptions have one byte changed: a lying worker.
    """

    delay: float = 0.0
    slow: Mapping[Any, float] = field(default_factory=dict)
    trace: str | None = None
    lie: frozenset[Any] = frozenset()

    @classmethod
    def of(cls, x: Any) -> Faults:
        """``faults=``'s value as a ``Faults`` (None: none); an unknown field or a wrong
        type is an ``InputError`` naming it."""
        if x is None:
            return cls()
        if isinstance(x, Faults):
            return x
        if not isinstance(x, Mapping):
            raise InputError(f"faults must be a Faults or a dict of its fields, got {x!r}")
        known = ("delay", "slow", "trace", "lie")
        for k in x:
            if k not in known:
                raise InputError(f"unknown field {k!r} of faults; fields are {list(known)}")
        delay = x.get("delay", 0.0)
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
            raise InputError(f"faults delay must be seconds >= 0, got {delay!r}")
        slow = x.get("slow", {})
        if not isinstance(slow, Mapping):
            raise InputError(f"faults slow must be a dict of worker name: factor, got {slow!r}")
        lie = x.get("lie", ())
        if isinstance(lie, str | bytes) or not isinstance(lie, Iterable):
            raise InputError(f"faults lie must be a collection of worker names, got {lie!r}")
        trace = x.get("trace")
        return cls(float(delay), dict(slow), None if trace is None else str(trace), frozenset(lie))


@dataclass
class Options:
    """Run options (``docs/elastic.md`` has the table); ``_``-prefixed ones are the Dask
    runtime's own (a session's held values, trust and exclusions), never a caller's."""

    client: Any = None
    checkpoint: Any = None
    checkpoint_key: bytes | None = field(default=None, repr=False)  # a secret: never printed
    granularity: str | int = "flush"
    verify: int | str = 1
    verify_repeats: int | None = None
    verify_rtol: float = 1e-9
    verify_atol: float = 0.0
    #: an SpMV unit's check against its kept checksum (``check.entry_checksum``); False
    #: recomputes it at every check (sensitive to each element's own rounding)
    verify_checksums: bool = True
    progress: bool | None = None
    n_workers: int = 2
    processes: bool = True
    timeout: float | None = None
    window: int | None = None
    keep_partials: bool = False
    fsync: bool = True
    speculate: bool = True
    faults: Any = None
    # a session's: output blocks stay on the workers (Result.value is a WorkerValue), and
    # input blocks made from this process's values are kept, per input, for the next run
    _hold: bool = False
    _placed: Mapping[str, dict] = field(default_factory=dict)
    # verify="adaptive": the workers' streaks of verified results (a session's, kept for
    # all its runs; a fresh one per run otherwise)
    _trust: Any = None
    # a session's: workers an earlier run of it excluded (they get no task of this one)
    _excluded: Any = frozenset()

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> Options:
        """Options from ``kernel.run``'s keywords; unknown or invalid ones name themselves."""
        known = cls.__dataclass_fields__
        for k in options:
            if k not in known:
                public = [n for n in known if not n.startswith("_")]
                raise InputError(f"unknown option {k!r} for runtime 'dask'; options are {public}")
        o = cls(**options)
        o.faults = Faults.of(o.faults)
        o.checkpoint_key = check_key(o.checkpoint_key)
        if o.checkpoint_key is not None and o.checkpoint is None:
            raise InputError(
                "checkpoint_key authenticates checkpoint entries, and this run has no "
                "checkpoint=: pass checkpoint= a directory or URL too, or drop checkpoint_key"
            )
        g = o.granularity
        if not (g in GRANULARITIES or (isinstance(g, int) and not isinstance(g, bool) and g > 0)):
            raise InputError(
                f"granularity {g!r} is not valid; use 'flush', 'step' or a positive integer"
            )
        if o.verify not in ("check", "adaptive") and (
            not isinstance(o.verify, int) or isinstance(o.verify, bool) or o.verify < 1
        ):
            raise InputError(
                f"verify must be a positive integer, 'check' or 'adaptive', got {o.verify!r}"
            )
        if o.verify == "adaptive" and o._trust is None:
            o._trust = Trust()
        r = o.verify_repeats
        if r is not None and (not isinstance(r, int) or isinstance(r, bool) or r < 1):
            raise InputError(f"verify_repeats must be a positive integer or None, got {r!r}")
        if o.window is not None and (not isinstance(o.window, int) or o.window < 1):
            raise InputError(f"window must be a positive integer or None, got {o.window!r}")
        if not isinstance(o.verify_checksums, bool):
            raise InputError(f"verify_checksums must be True or False, got {o.verify_checksums!r}")
        if not isinstance(o.speculate, bool):
            raise InputError(f"speculate must be True or False, got {o.speculate!r}")
        if o.n_workers < 1:
            raise InputError(f"n_workers must be positive, got {o.n_workers!r}")
        return o

    @property
    def check(self) -> bool:
        """``verify="check"``: every unit's result is checked on another worker (with
        ``"adaptive"``, every result the worker's trust draws for a check)."""
        return self.verify in ("check", "adaptive")

    @property
    def copies(self) -> int:
        """Copies of each unit computed (``verify=k``); 1 with ``"check"`` or no verify."""
        return 1 if isinstance(self.verify, str) else int(self.verify)


__all__ = ["Faults", "Options"]
