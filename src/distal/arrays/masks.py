"""Boolean masks and integer arrays as indices of DArrays, without gathering the array.

* ``x[mask] = v`` (``mask`` a boolean DArray or numpy array of ``x``'s shape; ``v`` a
  number, a 0-d array, or a masked read under the same mask) is ``where(mask, v, x)``: one
  element-wise map, in place (every holder of ``x`` sees it).
* ``x[mask]`` is a :class:`Masked`: ``x`` and its mask kept in ``x``'s shape, since its
  length is known only once the mask is computed. Element-wise arithmetic on it stays
  masked (``x[m] = x[m] * 2 + 1`` is ``where(m, x * 2 + 1, x)``); ``.sum()``, ``.mean()``,
  ``len()``/``.size``/``.shape`` read the selection's sums (0-d values); ``.get()`` /
  ``np.asarray`` read the selected values (an explicit read, as ``x.get()`` is). Anything
  else is refused by name.
* ``x[idx]`` with ``idx`` a numpy array of integers (or a numpy boolean mask) of a 1-D
  ``x``: a gather, the product of a selection matrix (one 1 per row, built here from the
  indices: only they are on this process, never ``x``'s values) and ``x``, so its plan
  fetches exactly the selected entries from their owners (the sparse lowering's exact
  gathers); ``x[idx] = v`` scatters ``v`` the same way (its transpose, the last of repeated
  indices winning, as in numpy) and keeps ``x`` where no index points.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from distal.arrays import slicing
from distal.arrays.darray import DArray, where
from distal.errors import NotSupportedYet, ShapeError


def _is_mask(key: Any) -> bool:
    return (isinstance(key, DArray) or isinstance(key, np.ndarray)) and key.dtype == np.bool_


def _integers(key: Any) -> np.ndarray | None:
    """``key`` as a numpy array of integers where it is one (a list counts), else None."""
    if isinstance(key, DArray):
        return None
    if (
        isinstance(key, list | tuple)
        and key
        and all(isinstance(k, numbers.Integral) and not isinstance(k, bool) for k in key)
    ):
        return np.asarray(key, dtype=np.int64)
    if isinstance(key, np.ndarray) and key.dtype.kind in "iu" and key.ndim >= 1:
        return key.astype(np.int64, copy=False)
    return None


def _mask_of(a: DArray, key: Any) -> DArray:
    if key.shape != a.shape:
        raise ShapeError(
            f"boolean index of shape {key.shape} for an array of shape {a.shape}: a mask "
            "indexes the whole array (numpy's other mask forms are not supported yet)"
        )
    return key if isinstance(key, DArray) else a.session.asarray(key, machine=a.program.nprocs)


def _positions(a: DArray, idx: np.ndarray) -> np.ndarray:
    """``idx`` checked against ``a``'s one axis and made non-negative."""
    if a.ndim != 1:
        raise NotSupportedYet(
            f"an integer array index of a {a.ndim}-D DArray: gathers and scatters of a 1-D "
            "array are supported (index its rows one slice at a time)"
        )
    n = a.shape[0]
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        k = int(idx[np.argmax(bad)])
        raise slicing.IndexOutOfRange(f"index {k} is out of bounds for axis 0 with size {n}")
    return np.where(idx < 0, idx + n, idx).reshape(-1)


def _selection(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], dtype: Any) -> Any:
    import scipy.sparse as sp

    ones = np.ones(len(rows), dtype=dtype)
    return sp.csr_matrix((ones, (rows, cols)), shape=shape)


def getitem(a: DArray, key: Any) -> Any:
    """``a[mask]`` (a :class:`Masked`) or ``a[integers]`` (a gather); anything else of
    numpy's advanced indexing is refused by name."""
    if _is_mask(key):
        if isinstance(key, np.ndarray) and a.ndim == 1 and key.shape == a.shape:
            return getitem(a, np.nonzero(key)[0])
        return Masked(a, _mask_of(a, key))
    idx = _integers(key)
    if idx is None:
        raise NotSupportedYet(
            f"indexing a DArray with {type(key).__name__} {key!r}: basic indices (integers, "
            "slices, None, ...), boolean masks and numpy integer arrays of a 1-D array are "
            "supported"
        )
    if idx.ndim != 1:
        raise NotSupportedYet(f"an integer array index of shape {idx.shape}: 1-D ones only")
    pos = _positions(a, idx)
    if a.dtype.kind not in "iufc":
        raise NotSupportedYet(f"gathering a {a.dtype} array by integer indices")
    sel = _selection(np.arange(len(pos)), pos, (len(pos), a.shape[0]), a.dtype)
    return a.session.asarray(sel, machine=a.program.nprocs) @ a


def setitem(a: DArray, key: Any, value: Any) -> None:
    """``a[mask] = value`` and ``a[integers] = value``, in place (see the module docstring)."""
    from distal.arrays import views

    what = f"[{type(key).__name__}] = ..."
    if _is_mask(key):
        mask = _mask_of(a, key)
        if isinstance(value, Masked):
            if value.mask.node is not mask.node:
                raise NotSupportedYet(
                    f"{what}: a masked read under another mask (assign x[m] = y[m] with one "
                    "mask m, held in a variable)"
                )
            value = value.values
        elif not _scalar(value):
            if isinstance(key, np.ndarray) and a.ndim == 1:
                setitem(a, np.nonzero(key)[0], value)
                return
            raise NotSupportedYet(
                f"{what}: assigning an array under a boolean mask (a number, a 0-d array or "
                "y[mask] under the same mask are supported)"
            )
        new = where(mask, value, a)
        slicing.castable(new.node, a.dtype, what)
        views.update(a, new.node, what)
        return
    idx = _integers(key)
    if idx is None:
        raise NotSupportedYet(
            f"assigning to a DArray indexed with {type(key).__name__} {key!r}: basic indices, "
            "boolean masks and numpy integer arrays of a 1-D array are supported"
        )
    pos = _positions(a, idx)
    n = a.shape[0]
    # numpy: the last of repeated indices wins; k_u are the value positions kept
    rev = pos[::-1]
    uniq, first = np.unique(rev, return_index=True)
    keep = len(pos) - 1 - first
    hit = np.zeros(n, dtype=bool)
    hit[uniq] = True
    mask = a.session.asarray(hit, machine=a.program.nprocs)
    if _scalar(value):
        new = where(mask, value, a)
    else:
        v = value if isinstance(value, DArray) else np.asarray(value)
        if v.shape not in ((len(pos),), (1,)):
            raise ShapeError(
                f"{what}: shape mismatch: value array of shape {v.shape} could not be "
                f"broadcast to indexing result of shape {(len(pos),)}"
            )
        if v.shape == (1,):
            v = v[0]
            new = where(mask, v, a)
        else:
            dt = np.result_type(v.dtype, a.dtype)
            scatter = _selection(uniq, keep, (n, len(pos)), dt)
            spread = a.session.asarray(scatter, machine=a.program.nprocs) @ v
            new = where(mask, spread, a)
    slicing.castable(new.node, a.dtype, what)
    views.update(a, new.node, what)


def _scalar(v: Any) -> bool:
    if isinstance(v, DArray):
        return v.ndim == 0
    return isinstance(v, numbers.Number) or (
        isinstance(v, np.ndarray | np.generic) and np.ndim(v) == 0
    )


class Masked:
    """``x[mask]``: the selected elements of ``x``, kept as ``x`` (``values``) and the mask
    in ``x``'s shape until a reduction, an assignment under the same mask or a read needs
    them (see the module docstring)."""

    __slots__ = ("mask", "values")

    def __init__(self, values: DArray, mask: DArray) -> None:
        self.values = values
        self.mask = mask

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def ndim(self) -> int:
        return 1

    @property
    def size(self) -> int:
        """How many elements the mask selects (reads the mask's sum, a 0-d value)."""
        return int(self.mask.sum())

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    def __len__(self) -> int:
        return self.size

    def get(self) -> np.ndarray:
        """The selected elements, read (as ``x.get()`` reads ``x``)."""
        return np.asarray(self.values.get())[np.asarray(self.mask.get(), dtype=bool)]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self.get()
        return v if dtype is None else v.astype(dtype)

    def sum(self) -> DArray:
        """The selected elements' sum (0-d): ``where(mask, x, 0).sum()``."""
        return where(self.mask, self.values, self.values.dtype.type(0)).sum()

    def mean(self) -> DArray:
        """The selected elements' mean (0-d; ``nan`` for an empty selection, as numpy)."""
        return self.sum() / self.mask.sum()

    def _same(self, other: Any, what: str) -> Any:
        if isinstance(other, Masked):
            if other.mask.node is not self.mask.node:
                raise NotSupportedYet(f"{what} of masked reads under two masks")
            return other.values
        if isinstance(other, DArray) and other.ndim:
            raise NotSupportedYet(
                f"{what} of a masked read and an array: keep both in the array's shape "
                "(where(mask, ...)) or read the selection with .get()"
            )
        if isinstance(other, np.ndarray) and other.ndim:
            raise NotSupportedYet(f"{what} of a masked read and a numpy array")
        return other

    def _binary(self, f: Any, other: Any, what: str, right: bool = False) -> Masked:
        o = self._same(other, what)
        return Masked(f(o, self.values) if right else f(self.values, o), self.mask)

    def __add__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a + b, o, "+")

    def __radd__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a + b, o, "+", right=True)

    def __sub__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a - b, o, "-")

    def __rsub__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a - b, o, "-", right=True)

    def __mul__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a * b, o, "*")

    def __rmul__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a * b, o, "*", right=True)

    def __truediv__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a / b, o, "/")

    def __rtruediv__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a / b, o, "/", right=True)

    def __pow__(self, o: Any) -> Masked:
        return self._binary(lambda a, b: a**b, o, "**")

    def __neg__(self) -> Masked:
        return Masked(-self.values, self.mask)

    def __abs__(self) -> Masked:
        return Masked(abs(self.values), self.mask)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # (numpy's protocol probes: not there)
            raise AttributeError(name)
        raise NotSupportedYet(
            f"x[mask].{name}: a masked read supports element-wise arithmetic, .sum(), "
            ".mean(), len(), .get() and assignment under the same mask"
        )

    def __repr__(self) -> str:
        return f"DArray[mask](dtype={self.dtype}, deferred)"
