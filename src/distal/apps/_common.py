"""What the applications share: inputs, the machine, the session, kernels, progress."""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.casting import check_cast
from distal.distribution.machine import Machine
from distal.errors import InputError, ScheduleError
from distal.kernel import Kernel, compile
from distal.lang.nodes import Tensor, index_vars
from distal.progress import Progress
from distal.schedule.api import schedule as default_schedule
from distal.session import Session, session_machine
from distal.sparse import SparseArray

#: schedules: ``"owner"`` (owner computes, dense); for sparse inputs ``"rows"`` (the sparse
#: operand cut by rows) or ``"nonzeros"`` (by stored entries: balanced); ``"auto"`` takes
#: ``"owner"`` for dense inputs and ``"nonzeros"`` for sparse ones
SCHEDULES = ("auto", "owner", "rows", "nonzeros")


def is_sparse(x: Any) -> bool:
    """A ``dl.SparseArray``, scipy.sparse or pydata sparse input."""
    from distal.sparse.array import is_pydata_sparse, is_scipy_sparse

    return isinstance(x, SparseArray) or is_scipy_sparse(x) or is_pydata_sparse(x)


def sparse_input(x: Any, name: str, format: str, order: int) -> SparseArray:
    """``x`` as a float64 ``dl.SparseArray`` of ``format`` (values checked finite; values
    float64 cannot hold, e.g. complex ones, refused by the input rule
    :func:`~distal.casting.check_cast`: the applications compute in real float64)."""
    from distal.sparse.array import as_sparse

    try:
        arr = as_sparse(x, format)
    except Exception as e:
        raise InputError(f"input {name!r} cannot be read as a sparse array: {e}") from e
    if arr.ndim != order:
        raise InputError(f"input {name!r} must have order {order}, got shape {arr.shape}")
    check_cast(f"input {name!r}", arr.dtype, np.float64)
    if not np.all(np.isfinite(arr.vals)):
        raise InputError(f"input {name!r} has non-finite values")
    if arr.dtype != np.float64:
        arr = arr.with_values(arr.vals.astype(np.float64))
    return arr


def dense_input(x: Any, name: str, order: int | None = None) -> np.ndarray:
    """``x`` as a float64 numpy array (a sparse input is made dense; values float64 cannot
    hold, e.g. complex ones, refused as in :func:`sparse_input`)."""
    if is_sparse(x):
        x = (
            x.to_dense()
            if isinstance(x, SparseArray)
            else x.toarray()
            if hasattr(x, "toarray")
            else x.todense()
        )
    try:
        arr = np.asarray(x)
        if arr.dtype.kind in "biufc":
            check_cast(f"input {name!r}", arr.dtype, np.float64)
        arr = np.array(arr, dtype=np.float64)
    except (TypeError, ValueError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"input {name!r} cannot be read as a float64 array: {e}") from e
    if order is not None and arr.ndim != order:
        raise InputError(f"input {name!r} must have order {order}, got shape {arr.shape}")
    if arr.size == 0:
        raise InputError(f"input {name!r} is empty (shape {arr.shape})")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"input {name!r} has non-finite values")
    return arr


def session_for(session: Session | None) -> Session:
    """The caller's session, or a new local one whose kernel runs draw no bar of their own
    (the application draws one per iteration)."""
    if session is None:
        return Session("local", progress=False)
    if not isinstance(session, Session):
        raise InputError(f"session must be a dl.Session, got {session!r}")
    return session


def machine_for(sess: Session, machine: Machine | int | None) -> Machine:
    """The 1-D machine the application runs on: ``machine``, else the session's own (see
    :func:`distal.session.session_machine`)."""
    return sess.machine if machine is None else session_machine(sess, machine)


def check_schedule(schedule: str, app: str, sparse: bool = False) -> str:
    """The schedule to use: ``"owner"`` for dense inputs; ``"rows"`` or ``"nonzeros"``
    (the default) for sparse ones."""
    if schedule not in SCHEDULES:
        raise ScheduleError(f"{app}: schedule must be one of {list(SCHEDULES)}, got {schedule!r}")
    if not sparse:
        if schedule in ("rows", "nonzeros"):
            raise ScheduleError(f"{app}: schedule {schedule!r} is for sparse inputs")
        return "owner"
    if schedule == "owner":
        raise ScheduleError(f"{app}: a sparse input takes schedule 'rows' or 'nonzeros'")
    return "nonzeros" if schedule == "auto" else schedule


def owner(out: Tensor, var: Any, machine: Machine) -> Kernel:
    """Owner-computes over a line of processors: ``var`` cut into ``machine.size`` parts,
    every tensor fetched once per processor."""
    (vo, vi) = index_vars("po pi")
    return compile(default_schedule(out).distribute([var], [vo], [vi], machine))


def scalar(name: str, machine: Machine, where: str = "0") -> Tensor:
    """A 0-d tensor on processor 0 (``where="0"``) or on every processor (``"*"``)."""
    return Tensor(name, (), dist=f"-> {where}", machine=machine)


def progress(sess: Session, total: int, label: str) -> Progress:
    """The runtime's progress bar, one row counting iterations; on a terminal only, and
    only on rank 0 under MPI."""
    return Progress(total, 1, enabled=False if sess.rank != 0 else None, label=label)
