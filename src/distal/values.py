"""Values entering a computation: the rules an input must follow for its tensor.

Every place a value enters (``kernel.run``, bound sparse kernels, sessions, the apps) reads
dense inputs through :func:`dense_value` and sparse ones through :func:`sparse_value`, and
checks any other element type against a tensor with :func:`~distal.casting.check_cast`, so
one rule decides what is accepted and how it is converted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.casting import check_cast
from distal.errors import InputError, NotationError
from distal.sparse.array import as_sparse


def dense_value(name: str, x: Any, t: Any) -> np.ndarray:
    """Input ``name`` for dense tensor ``t``: a numeric array of its shape, in its dtype
    (converted only where :func:`check_cast` allows). A sparse array given for a dense
    tensor is refused by name (numpy would make it a 0-d array of objects)."""
    if is_sparse_input(x):
        kind = type(x).__module__.split(".")[0] + "." + type(x).__name__
        shape = "x".join(str(int(s)) for s in getattr(x, "shape", ()))
        dense = (
            "toarray()"
            if hasattr(x, "toarray")
            else ("to_dense()" if hasattr(x, "to_dense") else "todense()")
        )
        raise InputError(
            f"input {name!r} is a sparse array ({kind}, {shape}) but tensor {t.name!r} is "
            f"dense: pass {name}.{dense} to compute with it densely, or declare the tensor "
            f"sparse (dl.Tensor({t.name!r}, ..., format='csr'))"
        )
    try:
        arr = np.asarray(x)
    except Exception as e:
        raise InputError(f"input {name!r} cannot be read as an array: {e}") from e
    if arr.dtype.kind not in "biufc":
        raise InputError(f"input {name!r} has non-numeric dtype {arr.dtype}")
    check_cast(f"input {name!r}", arr.dtype, t)
    if arr.shape != t.shape:
        raise InputError(f"input {name!r} has shape {arr.shape}; tensor expects {t.shape}")
    return np.asarray(arr, dtype=t.dtype)


def is_sparse_input(x: Any) -> bool:
    """A scipy.sparse or pydata sparse array, or a ``dl.SparseArray``."""
    from distal.sparse.array import SparseArray, is_pydata_sparse, is_scipy_sparse

    return isinstance(x, SparseArray) or is_scipy_sparse(x) or is_pydata_sparse(x)


def sparse_value(name: str, x: Any, t: Any, copy: bool = True) -> Any:
    """Input ``name`` for sparse tensor ``t``: a ``SparseArray`` in its format and shape,
    whose values are in its dtype (converted only where :func:`check_cast` allows);
    ``copy=False`` for one run's inputs (a scipy matrix's values read in place)."""
    src = getattr(x, "dtype", None)  # SparseArray, scipy, pydata and numpy arrays have one
    try:
        if src is None:
            x = np.asarray(x)
            src = x.dtype
        src = np.dtype(src)
    except Exception as e:
        raise InputError(f"input {name!r} cannot be read as a {t.format} array: {e}") from e
    if src.kind in "biufc":  # a non-numeric one is refused by as_sparse, naming its dtype
        check_cast(f"input {name!r}", src, t)
    try:
        return as_sparse(x, t.format, t.shape, dtype=t.dtype, label=f"input {name!r}", copy=copy)
    except (InputError, NotationError) as e:
        raise type(e)(f"input {name!r}: {e}") from e
    except Exception as e:  # a shape or conversion failure names the input
        raise InputError(f"input {name!r} cannot be read as a {t.format} array: {e}") from e
