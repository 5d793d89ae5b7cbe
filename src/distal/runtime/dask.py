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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from distributed import Client, LocalCluster, as_completed, get_worker

from distal.errors import InputError
from distal.runtime.elastic.driver import STATS_NOTE, Driver
from distal.runtime.elastic.options import Options
from distal.runtime.elastic.summary import Summary
from distal.runtime.elastic.tasks import VerificationFailed
from distal.runtime.elastic.units import GRANULARITIES, Unit, decompose


def _connect(opts: Options) -> tuple[Client, list[Any]]:
    """The client to use and what to close afterwards (only what this run started)."""
    c = opts.client
    if c is None:
        cluster = LocalCluster(
            n_workers=opts.n_workers,
            threads_per_worker=1,
            processes=opts.processes,
            dashboard_address="127.0.0.1:0",
            # loopback only; in-process workers talk over inproc:// (no sockets at all)
            **({"host": "127.0.0.1"} if opts.processes else {}),
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


@contextmanager
def connected(opts: Options) -> Iterator[Any]:
    """The client a run uses (``opts.client``'s, or a local cluster's), closing what this
    run started when it ends."""
    client, owned = _connect(opts)
    try:
        yield client
    finally:
        for thing in owned:
            try:
                thing.close()
            except Exception:  # pragma: no cover - best effort shutdown
                pass


def run(kernel: Any, data: dict[str, Any], **options: Any) -> Any:
    """Run ``kernel`` on Dask; see the module docstring and ``docs/elastic.md``."""
    opts = Options.parse(options)
    with connected(opts) as client:
        return Driver(kernel, data, opts, client, as_completed, get_worker).run()


__all__ = [
    "GRANULARITIES",
    "STATS_NOTE",
    "Summary",
    "Unit",
    "VerificationFailed",
    "decompose",
    "run",
]
