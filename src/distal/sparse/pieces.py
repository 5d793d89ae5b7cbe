"""Pieces of stored entries: the index arrays that travel with a piece of a sparse tensor.

A piece of a sparse tensor is some of its stored entries (their positions, sorted); it
travels as its values and, per storage level, the index arrays that level keeps for those
entries, rebased: what :func:`index_words` counts and :func:`piece_arrays` cuts. The
lowering counts them, the runtimes send them (a runtime imports this module, never the
lowering).
"""

from __future__ import annotations

import numpy as np

from distal.sparse.array import SparseArray
from distal.sparse.formats import LevelFormat


def level_positions(arr: SparseArray, k: int, cache: dict) -> np.ndarray:
    """The position at storage level ``k`` of every stored entry (cached per bind)."""
    key = (id(arr), "anc", k)
    if key not in cache:
        cache[key] = arr._ancestors(k) if k < arr.ndim - 1 else np.arange(arr.nnz, dtype=np.int64)
    return cache[key]


def piece_levels(
    arr: SparseArray, positions: np.ndarray, cache: dict
) -> list[tuple[LevelFormat, int, int]]:
    """Per storage level of a piece made of the stored entries ``positions`` (sorted):
    ``(level format, parent positions, own positions)`` in the piece. A piece of a level
    travels as its index arrays: ``pos`` (parents + 1 entries) where the level stores one,
    ``crd`` (one per own position) where it stores one."""
    out = []
    prev = 1
    for k, lv in enumerate(arr.levels):
        q = level_positions(arr, k, cache)[positions]
        own = int(np.count_nonzero(q[1:] != q[:-1]) + 1) if len(q) else 0
        out.append((lv.format, prev, own))
        prev = own
    return out


def index_words(arr: SparseArray, positions: np.ndarray, cache: dict) -> int:
    """Coordinates and positions a piece of these stored entries carries (see above)."""
    n = 0
    for lf, parents, own in piece_levels(arr, positions, cache):
        if lf.stores_pos:
            n += parents + 1 if own else 0
        if lf.stores_crd:
            n += own
    return n


def piece_arrays(arr: SparseArray, positions: np.ndarray, cache: dict) -> list[np.ndarray]:
    """The index arrays of a piece of stored entries (what :func:`index_words` counts):
    per compressed level its rebased ``pos`` and its ``crd``, per singleton level ``crd``."""
    out: list[np.ndarray] = []
    if not len(positions):
        return out
    parent = np.zeros(len(positions), np.int64)
    n_parent = 1
    for k, lv in enumerate(arr.levels):
        q = level_positions(arr, k, cache)[positions]
        new = np.r_[True, q[1:] != q[:-1]]
        first = np.flatnonzero(new)
        if lv.format.stores_pos:
            pos = np.zeros(n_parent + 1, np.int64)
            np.cumsum(np.bincount(parent[first], minlength=n_parent), out=pos[1:])
            out.append(pos)
        if lv.format.stores_crd:
            out.append(lv.crd[q[first]])
        parent = np.cumsum(new) - 1
        n_parent = len(first)
    return out


__all__ = ["index_words", "level_positions", "piece_arrays", "piece_levels"]
