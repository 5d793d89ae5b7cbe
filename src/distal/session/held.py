"""What a session keeps per value: its shape, dtype and layout, and the runtime's data.

``Held.data`` is what the session's runtime holds (:mod:`distal.runtime.base`: numpy arrays
in this process, one block per MPI rank, futures on Dask workers), or, while ``layout`` is
None, the value as it was given (an array, a block source, a sparse array), placed by the
first kernel that reads it.
"""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.distribution.layout import Layout
from distal.distribution.machine import Machine
from distal.errors import InputError, NotSupportedYet


@dataclass
class Held:
    """A value in the session: its layout (``None``: as given, not placed yet) and its
    data (see the module docstring)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    layout: Layout | None
    data: Any
    #: a sparse value's transpose, made on first use by the arrays front (``A.T``)
    transposed: Any = None
    #: a sparse value: how ``A @ x`` cuts it when no one said, by processor count
    splits: dict = field(default_factory=dict)


#: the names the arrays program gives the values behind unnamed DArrays
INTERNAL = re.compile(r"_[acv]\d+")

_KERNEL_INPUTS: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()


def inputs_of(kernel: Any) -> tuple:
    """The input tensors of ``kernel``'s statement (worked out once per kernel: a loop runs
    the same kernels again and again)."""
    try:
        got = _KERNEL_INPUTS.get(kernel)
    except TypeError:  # not weakly referenceable
        return kernel.schedule.statement.inputs()
    if got is None:
        got = _KERNEL_INPUTS[kernel] = kernel.schedule.statement.inputs()
    return got


def session_machine(sess: Any, machine: Any) -> Machine:
    """The line of processors a session's arrays (and ``dl.apps``) spread over:
    ``machine`` (a ``dl.Machine`` of any shape is used as a line of its ``size``
    processors, an int is a count); by default as the runtime says (one processor per MPI
    rank; one per core, at most 8, elsewhere).

    Raises:
        InputError: not a machine or a positive count, or one the runtime cannot run (MPI:
            not one processor per rank).
    """
    if machine is None:
        p = None
    elif isinstance(machine, Machine):
        p = machine.size
    elif isinstance(machine, int | np.integer) and not isinstance(machine, bool) and machine > 0:
        p = int(machine)
    else:
        raise InputError(f"machine must be a dl.Machine or a processor count, got {machine!r}")
    return Machine(sess.rt.machine_size(p))


def sparse_split(dist: str | None) -> str | None:
    """How ``A @ x`` cuts a sparse matrix, from its distribution string (None: not said)."""
    if dist is None or dist == "auto":
        return None  # the cost model chooses, at the first use
    key = "".join(str(dist).split())
    if key in ("xy->x", "ij->i"):
        return "rows"
    if key in ("xy->(xy)", "ij->(ij)"):
        return "nonzeros"
    raise NotSupportedYet(
        f"a sparse array distributed as {dist!r}: the arrays front cuts a sparse matrix by "
        "rows ('xy -> x') or by stored entries ('xy -> (xy)')"
    )


def as_held_sparse(x: Any) -> Any:
    """A scipy / pydata sparse array as the ``dl.SparseArray`` (CSR) the arrays' kernels
    read, converted once when bound rather than on every run; anything else as it is."""
    from distal.sparse.array import SparseArray, as_sparse

    if is_sparse(x) and not isinstance(x, SparseArray):
        return as_sparse(x, "csr", label="the sparse array")
    return x


def is_sparse(x: Any) -> bool:
    """A sparse value (a ``dl.SparseArray``, scipy.sparse or pydata sparse array)."""
    from distal.sparse.array import SparseArray, is_pydata_sparse, is_scipy_sparse

    return isinstance(x, SparseArray) or is_scipy_sparse(x) or is_pydata_sparse(x)


def trace_default() -> bool:
    """A session's runs record no trace unless asked (``trace=True``, ``DISTAL_TRACE=1``)."""
    return os.environ.get("DISTAL_TRACE", "0") == "1"


__all__ = ["INTERNAL", "Held", "as_held_sparse", "inputs_of", "is_sparse", "session_machine"]
