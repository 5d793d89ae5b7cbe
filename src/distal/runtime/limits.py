"""Limits known before a run: its predicted peak memory against what each processor has.

A compiled kernel knows, before it runs, the most tensor elements each processor holds at
once (``Stats.peak_words``: its owned blocks of every tensor, the output's included, and
the fetch and partial-sum buffers alive at that moment). A run whose peak on some
processor is more than that processor's memory cannot finish: it would allocate until
numpy's ``MemoryError`` (or the kernel's OOM killer) stops it, possibly hours in, possibly
after the other processors' work. :func:`check_memory` refuses it first, with a
:class:`~distal.errors.ResourceError` giving both numbers.

The bytes a processor needs are ``peak_words`` times the widest itemsize among the
kernel's tensors (the cost model's convention, :mod:`distal.costmodel.seconds`). The
memory a processor has depends on where it runs:

* ``local`` (and any runtime running its processors in this process): this host's
  physical memory (the cgroup limit where one is set), shared evenly by the processors;
* ``mpi``: this host's memory shared by the ranks the launcher started on it (Hydra's
  ``MPI_LOCALNRANKS``, Open MPI's ``OMPI_COMM_WORLD_LOCAL_SIZE``, Slurm's
  ``SLURM_NTASKS_PER_NODE``; one rank when none is set); each rank checks its own
  processor;
* ``dask``: the largest ``memory_limit`` among the pool's workers (a processor's units run
  on one worker); this host's memory when the client does not say;
* other runtimes (the volunteer pool): not checked here (volunteers declare their own
  limits).

Physical memory, not what is free now: the caller's inputs are already in memory and
counted in the peak, so free memory would refuse runs that fit. The check is a floor, not
a promise: a run within it may still exhaust memory that other programs hold.

The run option ``memory_limit`` overrides it: a number of bytes per processor to check
against instead, or ``False`` to run without the check.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from distal.errors import InputError, ResourceError

#: the launchers' environment variables saying how many ranks share this host
LOCAL_RANKS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


@lru_cache(maxsize=1)
def host_memory() -> int | None:
    """This host's physical memory in bytes, or the cgroup's limit when smaller (a
    container's); None where neither can be read. Read once per process."""
    total: int | None = None
    try:
        total = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        total = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limit = int(text)
            if limit > 0 and (total is None or limit < total):
                total = limit
    return total if total and total > 0 else None


def local_ranks(environ: Mapping[str, str] | None = None) -> int:
    """The ranks the MPI launcher started on this host (1 when it does not say)."""
    env = os.environ if environ is None else environ
    for name in LOCAL_RANKS:
        text = env.get(name, "").split("(")[0].split(",")[0]
        if text.isdigit() and int(text) > 0:
            return int(text)
    return 1


def _dask_worker_memory(client: Any) -> int | None:
    """The largest ``memory_limit`` among a Dask client's workers (None: unknown or
    unlimited)."""
    if client is None or isinstance(client, str):
        return None
    try:
        workers = client.scheduler_info()["workers"].values()
        limits = [int(w.get("memory_limit") or 0) for w in workers]
    except Exception:  # (a client that cannot answer is not a reason to refuse a run)
        return None
    return max(limits) if limits and min(limits) > 0 else None


#: the kernels that passed, with the check they passed (a loop runs the same kernels)
_PASSED: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()


def itemsize_of(exe: Any) -> int:
    """The widest itemsize among the kernel's tensors (8 when it does not say)."""
    dtypes = getattr(exe, "dtypes", None) or {}
    sizes = [np.dtype(d).itemsize for d in dtypes.values() if d is not None]
    return max(sizes, default=8)


def check_memory(
    exe: Any,
    runtime: Any,
    memory_limit: Any = None,
    *,
    rank: int | None = None,
    client: Any = None,
) -> None:
    """Refuse a run whose predicted peak on some processor exceeds that processor's memory.

    Args:
        exe: what runs: anything with ``stats()`` (its predicted :class:`~distal.Stats`;
            ``peak_words`` per processor) and ``dtypes`` (tensor name to dtype): a
            ``Kernel``, a ``BoundKernel``, an ``Executable``. A ``stats()`` that cannot be
            given without inputs (an unbound sparse kernel) is not checked here.
        runtime: the runtime's name (how its processors share memory: module docstring),
            or a runtime object with ``.name`` (and ``.rank`` under MPI, ``.client`` on
            Dask, read from it in place of the arguments below).
        memory_limit: the run's option: None (detect), bytes per processor (check against
            that instead), or False (no check).
        rank: under MPI, this rank's processor number (it checks its own processor).
        client: under Dask, the client (its workers' ``memory_limit``).

    Raises:
        ResourceError: naming the processor, the bytes it needs at its peak and the bytes
            it has (``.needed``, ``.available``, ``.processor``).
        InputError: ``memory_limit`` is not None, False or a positive number.
    """
    if not isinstance(runtime, str):  # a Runtime object: its name, rank and pool
        rank = getattr(runtime, "rank", rank)
        client = getattr(runtime, "client", client)
        runtime = str(runtime.name)
    if memory_limit is False:
        return
    if memory_limit is not None and (
        isinstance(memory_limit, bool)
        or not isinstance(memory_limit, int | float | np.integer | np.floating)
        or not memory_limit > 0
    ):
        raise InputError(
            f"memory_limit must be bytes per processor (a positive number), None (use the "
            f"memory each processor has) or False (no check), got {memory_limit!r}"
        )
    key = (runtime, memory_limit, rank, id(client))
    try:
        if _PASSED.get(exe) == key:  # a kernel a loop runs again: checked already
            return
    except TypeError:  # (not weakly referable: checked every time)
        pass
    try:
        stats = exe.stats()
    except InputError:  # e.g. a sparse kernel before its patterns are bound
        return
    peaks = [int(w) for w in stats.peak_words]
    if not peaks:
        return
    nprocs = len(peaks)
    size = itemsize_of(exe)
    if memory_limit is not None:
        have, whose = int(memory_limit), "memory_limit="
    else:
        found = _available(runtime, nprocs, client)
        if found is None:
            return
        have, whose = found
    procs = [rank] if runtime == "mpi" and rank is not None and rank < nprocs else range(nprocs)
    worst = max(procs, key=lambda p: peaks[p])
    need = peaks[worst] * size
    if need <= have:
        with contextlib.suppress(TypeError):
            _PASSED[exe] = key
        return
    raise ResourceError(
        f"the run needs {_bytes(need)} on processor {worst} at its peak "
        f"(kernel.stats().peak_words[{worst}] = {peaks[worst]:,} elements of {size} bytes), "
        f"but a processor has {_bytes(have)} ({whose}); refused before allocating anything. "
        f"Use more processors or smaller blocks, or pass memory_limit=False to run anyway "
        f"(memory_limit=BYTES checks against BYTES per processor instead)",
        needed=need,
        available=have,
        processor=worst,
    )


def _available(runtime: str, nprocs: int, client: Any) -> tuple[int, str] | None:
    """The bytes a processor has on ``runtime``, and where that figure comes from."""
    host = host_memory()
    if runtime == "mpi":
        if host is None:
            return None
        ranks = local_ranks()
        return host // ranks, f"this host's {_bytes(host)} shared by {ranks} rank(s)"
    if runtime == "dask":
        worker = _dask_worker_memory(client)
        if worker is not None:
            return worker, "the largest memory_limit of the Dask workers"
        if host is None:
            return None
        return host, f"this host's {_bytes(host)}"
    if runtime in ("local", "sim"):
        if host is None:
            return None
        return host // max(nprocs, 1), (
            f"this host's {_bytes(host)} shared by the {nprocs} processor(s) of the run"
        )
    return None


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.3g} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{n} B"  # pragma: no cover


__all__ = ["check_memory", "host_memory", "local_ranks"]
