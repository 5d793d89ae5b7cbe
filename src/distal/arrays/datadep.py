"""Functions whose result's shape depends on the values: ``nonzero`` and the array API's
``unique_*``.

A node's shape is known when it is recorded, so each of these first reads one number (how
many non-zero elements, how many distinct values): the program is flushed for it and one
word comes to this process. The values themselves are then computed on the processors:
each reduces its own block (its non-zero positions, its distinct values and their counts)
and the partials are combined in processor order (:mod:`distal.arrays.blocks`' partials
mode), the result held replicated -- it moves between processors, never to the driver.
NaNs are distinct values, as the array API says (numpy's ``equal_nan=False``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays.blocks import Block, Kind, register
from distal.arrays.darray import DArray
from distal.errors import InputError
from distal.typing import Box


def _row(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[1:], dtype=np.int64)) if shape else 1


# -- nonzero ---------------------------------------------------------------------------------------


def _flat_nonzero(spec: tuple, arrays: list[np.ndarray], box: Box) -> Any:
    _, shape = spec
    lo = box[0][0] if box else 0
    return np.flatnonzero(arrays[0]) + lo * _row(shape)


def _concat(spec: tuple, parts: list[Any]) -> Any:
    if not parts:
        return np.zeros(0, np.intp)
    return np.concatenate(parts).astype(np.intp, copy=False)


register("flat_nonzero", Kind(_flat_nonzero, _concat))


def nonzero(x: DArray) -> tuple[DArray, ...]:
    """numpy's ``nonzero``: the indices of the non-zero elements, one array per axis (their
    count read first)."""
    from distal.arrays import functions as F

    if x.ndim == 0:
        raise InputError("nonzero: a 0-d array has no axis (use atleast_1d first)")
    count = int(F.count_nonzero(x))
    flat = x._wrap(
        Block((count,), np.dtype(np.intp), ("flat_nonzero", x.shape), (x.node,), "partials"),
        new=True,
    )
    out = []
    stride = 1
    strides = []
    for n in reversed(x.shape):
        strides.append(stride)
        stride *= n
    for d, n in enumerate(x.shape):
        s = strides[x.ndim - 1 - d]
        got = F.elementwise("floordiv", flat, s) if s != 1 else flat
        out.append(F.elementwise("mod", got, n) if d else got)
    return tuple(out)


# -- unique ----------------------------------------------------------------------------------------


def _unique_block(spec: tuple, arrays: list[np.ndarray], box: Box) -> Any:
    _, _, shape = spec
    x = arrays[0].reshape(-1)
    lo = (box[0][0] if box else 0) * _row(shape)
    vals, first, counts = np.unique(x, return_index=True, return_counts=True, equal_nan=False)
    return vals, first + lo, counts


def _unique_combine(spec: tuple, parts: list[Any]) -> Any:
    _, what, _ = spec
    if parts:
        vals = np.concatenate([p[0] for p in parts])
        first = np.concatenate([p[1] for p in parts])
        counts = np.concatenate([p[2] for p in parts])
    else:
        vals, first, counts = np.zeros(0), np.zeros(0, np.intp), np.zeros(0, np.intp)
    u, inv = np.unique(vals, return_inverse=True, equal_nan=False)
    if what == "count":
        return np.asarray(u.shape[0], np.intp)
    if what == "values":
        return u
    if what == "counts":
        return np.bincount(inv, weights=counts, minlength=u.shape[0]).astype(np.intp)
    # what == "index": each distinct value's first position (the smallest over the blocks)
    got = np.full(u.shape[0], np.iinfo(np.intp).max, np.intp)
    np.minimum.at(got, inv, first)
    return got


register("unique", Kind(_unique_block, _unique_combine))


def _inverse(spec: tuple, arrays: list[np.ndarray], box: Box) -> Any:
    x, values = arrays
    return np.searchsorted(values, x).astype(np.intp)


register("unique_inverse", Kind(_inverse))


def unique(x: DArray, index: bool, inverse: bool, counts: bool) -> tuple[DArray, ...]:
    """The distinct values of ``x`` (sorted), and as asked each one's first flat index,
    the index of each element's value (``x``'s shape), and each one's count."""
    shape = x.shape

    def part(what: str, n: int | None, dtype: Any) -> DArray:
        out = () if n is None else (n,)
        spec = ("unique", what, shape)
        return x._wrap(Block(out, np.dtype(dtype), spec, (x.node,), "partials"), new=True)

    n = int(part("count", None, np.intp))
    values = part("values", n, x.dtype)
    got = [values]
    if index:
        got.append(part("index", n, np.intp))
    if inverse:
        node = Block(shape, np.dtype(np.intp), ("unique_inverse",), (x.node, values.node), "rows",
                     (True, False))  # fmt: skip
        got.append(x._wrap(node, new=True))
    if counts:
        got.append(part("counts", n, np.intp))
    return tuple(got)
