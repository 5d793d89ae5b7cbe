"""The elastic runtime: a plan's work as Dask tasks over a pool of unequal, unreliable workers.

The plan's processors are *virtual*: compile for more processors than the pool has workers
(over-decomposition) and Dask spreads the pieces, so faster workers take more of them. The
runtime never schedules, sends or retries anything itself; Dask does placement, work stealing
and recovery from lost workers. A plan becomes three kinds of tasks:

- **input blocks**: one per distinct block of each input's placement. An array's block is
  carried in the task itself (so Dask can rebuild it after losing the worker that held it);
  a block source is read inside the task, on a worker.
- **units**: the computation of one processor into one output buffer (``OpenOutput`` up to
  its ``Flush``), or a slice of its steps (``granularity``). A unit rebuilds, from the input
  blocks, exactly the fetch boxes the plan gives that processor at each step, runs the same
  leaf kernels over the same ``Compute`` boxes, and returns its partial output box.
- **blocks**: one per output block: the sum of the pieces of every unit partial that the
  plan sends (or adds locally) to that block's reducer, in a fixed order (so a run is
  deterministic whatever the completion order).

With ``checkpoint=``, every unit partial and every finished block is written by the worker
that made it (see :mod:`distal.runtime.checkpoint`); a rerun loads finished blocks on the
driver, submits only the units that unfinished blocks still need, and those load their
partial when it is there. ``verify=k`` runs each unit on ``k`` different workers and accepts
it only when the copies agree.

``Result.stats`` are counted by the tasks from what they received, between the plan's
virtual processors: a unit counts the elements of its fetch pieces found in the input blocks
it was handed, a reduction the pieces of the partials it adds, the driver the replica copies
of each finished block (``STATS_NOTE``). Dask's own transfers, whole blocks and partials
moved between workers wherever it placed the tasks, are ``Result.extra["dask_transfer_bytes"]``
(from the workers' transfer logs).

This module is the only one that imports ``distributed`` (ruff's TID251 enforces it): it
connects to (or starts) the pool and hands the client, ``as_completed`` and ``get_worker``
to the parts in :mod:`distal.runtime.elastic`, which do the work.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import dask.config
import numpy as np
from distributed import Client, LocalCluster, as_completed, get_worker
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError

from distal.errors import DistalWarning, InputError, RuntimeFailure
from distal.runtime.base import Runtime
from distal.runtime.dask_values import HeldOnWorkers
from distal.runtime.elastic.driver import STATS_NOTE, Driver
from distal.runtime.elastic.options import Options
from distal.runtime.elastic.summary import Summary
from distal.runtime.elastic.tasks import VerificationFailed
from distal.runtime.elastic.units import GRANULARITIES, Unit, decompose
from distal.runtime.executable import Executable
from distal.runtime.result import Result


def is_main_guard(stmt: ast.stmt) -> bool:
    """``stmt`` is ``if __name__ == "__main__":`` (either operand order)."""
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    t = stmt.test
    if len(t.ops) != 1 or not isinstance(t.ops[0], ast.Eq):
        return False
    sides = [t.left, t.comparators[0]]
    names = [x.id for x in sides if isinstance(x, ast.Name)]
    consts = [x.value for x in sides if isinstance(x, ast.Constant)]
    return names == ["__name__"] and consts == ["__main__"]


def unguarded_line(source: str, line: int) -> bool:
    """Whether line ``line`` of a script is top-level code outside the body of an
    ``if __name__ == "__main__":`` block (code a spawned worker process runs again)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False  # cannot tell: let the run go ahead
    for stmt in tree.body:
        if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            if not is_main_guard(stmt):
                return True
            assert isinstance(stmt, ast.If)
            return not any(b.lineno <= line <= (b.end_lineno or b.lineno) for b in stmt.body)
    return False


def _script_line() -> tuple[str, int] | None:
    """(path, line) of the user's script's top-level statement that led to this call, if it
    is unguarded; else None. Found from the stack: the frame running ``__main__``'s own
    module code (``python script.py`` or ``python -m pkg.mod``; not a REPL or notebook,
    whose ``__main__`` has no file and is never re-run)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path:
        return None
    frame = sys._getframe(1)
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)
    ):
        frame = frame.f_back
    if frame is None:
        return None
    try:
        source = Path(frame.f_code.co_filename).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return (
        (frame.f_code.co_filename, frame.f_lineno)
        if unguarded_line(source, frame.f_lineno)
        else None
    )


def _check_main_guard(opts: Options) -> None:
    """Refuse to start a process pool from unguarded script code, before Dask starts one.

    Dask starts worker processes with multiprocessing's ``spawn`` method (``forkserver``
    does the same), which imports the script again in every new process; without an
    ``if __name__ == "__main__":`` guard that re-runs the ``kernel.run`` call, each worker
    tries to start a cluster of its own while it is being bootstrapped, and the run ends in
    hundreds of lines of "Nanny failed to start". A worker process in that state is caught
    too (multiprocessing's own ``_inheriting`` flag, the one its "bootstrapping phase"
    check reads), in case the script's source could not be read.
    """
    method = dask.config.get("distributed.worker.multiprocessing-method", "spawn")
    if not opts.processes or method == "fork":
        return
    fix = (
        'put the script\'s work under `if __name__ == "__main__":`, or pass client= (a '
        "running distributed.Client or a scheduler address) or processes=False"
    )
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise InputError(
            "runtime='dask' was asked to start a LocalCluster inside a Dask worker process "
            f"that is re-importing the main script ({method!r} start method): {fix}"
        )
    where = _script_line()
    if where is not None:
        path, line = where
        raise InputError(
            f"runtime='dask' without client= starts worker processes, and line {line} of "
            f'{path} runs outside an `if __name__ == "__main__":` block: Dask\'s {method!r} '
            "start method re-runs the script's top-level code in every worker, so each would "
            f"start a cluster of its own; {fix}"
        )


def _main_can_be_spawned() -> bool:
    """Whether worker processes can start from this program: Dask's ``spawn`` (and
    ``forkserver``) start method runs the main script's file again in each, so a script
    read from standard input (``python - < script.py``: ``__file__`` is ``'<stdin>'``) or
    from a file since removed cannot; each worker would fail ("Nanny failed to start").
    There the local pool runs its workers in this process (``processes=False``), and a
    :class:`~distal.errors.DistalWarning` says so."""
    method = dask.config.get("distributed.worker.multiprocessing-method", "spawn")
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if method == "fork" or path is None or os.path.isfile(path):
        return True
    warnings.warn(
        f"the main script ({path!r}) is not a file Dask's worker processes can run again "
        f"({method!r} start method), so the local Dask pool runs its workers in this process "
        "(processes=False); run the script from a file to have worker processes, or pass "
        "processes=False to say so",
        DistalWarning,
        stacklevel=4,
    )
    return False


def _connect(opts: Options) -> tuple[Client, list[Any]]:
    """The client to use and what to close afterwards (only what this run started)."""
    c = opts.client
    if c is None:
        processes = opts.processes and _main_can_be_spawned()
        if processes:
            _check_main_guard(opts)
        cluster = LocalCluster(
            n_workers=opts.n_workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address="127.0.0.1:0",
            # loopback only; in-process workers talk over inproc:// (no sockets at all)
            **({"host": "127.0.0.1"} if processes else {}),
        )
        client = Client(cluster)
        return client, [client, cluster]
    if isinstance(c, str):
        try:
            client = Client(c, timeout=30)
        except OSError as e:
            raise InputError(f"cannot reach the Dask scheduler at {c!r}: {e}") from e
        return client, [client]
    if isinstance(c, Client):
        return c, []
    raise InputError(
        f"client must be a distributed.Client, a scheduler address or None, not {type(c).__name__}"
    )


class PoolLost(RuntimeFailure):
    """The connection to the Dask scheduler broke (it died, or the network to it did).

    What the pool held (a session's values on the workers, results in flight) is gone with
    it; a checkpointed session loop started again in a new session, on a live pool, resumes
    from its last saved iteration."""


@contextmanager
def pool_errors(client: Any) -> Iterator[None]:
    """Turn a broken connection to ``client``'s scheduler, which ``distributed`` raises from
    deep inside its comms (``CommClosedError``, a refused or reset connection), into a
    :class:`PoolLost` naming the scheduler."""
    try:
        yield
    except (CommClosedError, OSError, TimeoutError) as e:
        if not isinstance(e, CommClosedError | ConnectionError) and _connected(client):
            raise  # a file's error, say: not the pool's
        raise _lost(client, e) from e
    except FutureCancelledError as e:
        # distal never cancels a future it still reads (it releases what it drops), so a
        # cancelled one is the pool's doing: the client cancels every future it holds when
        # its scheduler goes away (its reason "scheduler-connection-lost", or "unknown"
        # when the client was already reconnecting)
        raise _lost(client, e) from e


def _lost(client: Any, e: BaseException) -> PoolLost:
    try:
        where = str(client.scheduler.address)
    except Exception:  # pragma: no cover - a client too broken to say
        where = "(unknown address)"
    return PoolLost(
        f"lost the connection to the Dask scheduler at {where} "
        f"({type(e).__name__}: {e}); the values and results the pool held are gone: "
        "with checkpoint=, run the session again on a live pool to resume from its "
        "last saved iteration"
    )


def _connected(client: Any) -> bool:
    return getattr(client, "status", "running") == "running"


class DaskRuntime(HeldOnWorkers, Runtime):
    """The ``"dask"`` runtime: an executable's work as Dask tasks over a pool of workers
    (see the module docstring and ``docs/elastic.md``; the options are ``Options``'s), and
    a session's values held on the workers (:mod:`distal.runtime.dask_values`).

    A runtime object keeps its pool (``client``: ``client=``'s, or a local cluster started
    on first use and closed with it), and what its runs learn about the workers: those a
    check or a majority caught (``excluded``: later runs give them no task) and, under
    ``verify="adaptive"``, their streaks of verified results (``trust``)."""

    name = "dask"
    extra = "dask"
    models_memory = False  # (a unit holds its own buffers: the workers measure them)
    options: ClassVar[tuple[str, ...]] = tuple(
        n for n in Options.__dataclass_fields__ if not n.startswith("_")
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.parsed = Options.parse(self.opts)
        self.trust = self.parsed._trust
        self.excluded: set[str] = set()
        self._client: Any = None
        self._owned: list[Any] = []
        #: sparse values this runtime ran on, by identity, with the input blocks made of
        #: them on the workers: the next runs read those there (the most recent few kept)
        self._placed: dict[int, tuple[Any, dict]] = {}
        self._start_values()

    @property
    def client(self) -> Any:
        """The pool's ``distributed.Client`` (started on first use when not given)."""
        if self._client is None:
            self._client, self._owned = _connect(self.parsed)
        return self._client

    def errors(self) -> Any:
        if self._client is None:  # no pool yet: none to lose
            return super().errors()
        return pool_errors(self._client)

    def execute(
        self,
        exe: Executable,
        inputs: Mapping[str, Any],
        *,
        keep: bool = False,
        dot_with: str | None = None,
    ) -> Result:
        later = bool(self._unsettled) and self.reads_in_place(exe, inputs)
        if not later:
            self.settle()
        data = exe.check_inputs(inputs)
        client = self.client
        opts = replace(
            self.parsed,
            client=client,
            _hold=keep,
            _placed=self._placed_caches(exe, data),
            _trust=self.trust,
            _excluded=frozenset(self.excluded),
        )
        with pool_errors(client):
            res = Driver(exe, data, opts, client, as_completed, get_worker).run()
        if self.verified:  # (an unverified run excludes nobody: no wait for its summary)
            self.excluded.update(res.extra["summary"].excluded_workers)
        if later and self.settle():  # it read a block that failed its check: again
            self.runs_redone += 1
            return self.execute(exe, inputs, keep=keep, dot_with=dot_with)
        if keep:
            if exe.output.is_dense:
                res.value = self.adopt(res.value)
            else:  # a sparse result comes back whole
                self._count(np.asarray(getattr(res.value, "vals", ())).size)
        return res

    def _placed_caches(self, exe: Executable, data: Mapping[str, Any]) -> dict[str, dict]:
        """The caches of input blocks placed from the run's sparse inputs (by identity)."""
        out = {}
        for t in exe.inputs:
            x = data[t.name]
            if t.is_dense:
                continue
            got = self._placed.get(id(x))
            if got is None or got[0] is not x:
                while len(self._placed) >= PLACED_VALUES:
                    self._placed.pop(next(iter(self._placed)))
                got = self._placed[id(x)] = (x, {})
            out[t.name] = got[1]
        return out

    def placed_blocks(self, value: Any) -> dict:
        """The input blocks placed on the workers from sparse value ``value`` (empty when
        none), by region and dtype."""
        got = self._placed.get(id(value))
        return {} if got is None or got[0] is not value else dict(got[1])

    def close(self) -> None:
        self._unsettled = []
        self._placed.clear()
        owned, self._owned, self._client = self._owned, [], None
        for thing in owned:
            try:
                thing.close()
            except Exception:  # pragma: no cover - best effort shutdown
                pass


#: sparse values whose placed input blocks a Dask runtime keeps (the most recent)
PLACED_VALUES = 16


__all__ = [
    "GRANULARITIES",
    "STATS_NOTE",
    "DaskRuntime",
    "PoolLost",
    "Summary",
    "Unit",
    "VerificationFailed",
    "decompose",
]
