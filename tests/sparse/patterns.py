"""Small sparse patterns for the sparse-kernel tests, built here with numpy and scipy only.

Each builder is deterministic for its seed and returns a ``scipy.sparse.csr_array`` of
float64 values (normal draws, so sums of products cancel nothing on purpose), sorted
indices and no duplicates. The shapes are small (tens to a few hundred rows) and usually
not divisible by the processor counts the tests use, so the last blocks are short or empty.

* :func:`uniform` -- positions uniform at random;
* :func:`banded` -- every ``(i, j)`` with ``|i - j| <= half``;
* :func:`rmat` -- an R-MAT graph (unpermuted: low rows heavy) cut to ``n`` rows/columns;
* :func:`zipf_rows` -- row lengths ``~ 1 / (rank + 1)**s``, heaviest rows first;
* :func:`skewed` -- a quarter of the rows empty and one row holding a third of the entries.

:func:`tensor3` gives a random sparse 3-tensor as coordinates and values.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _csr(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], seed: int) -> sp.csr_array:
    """The matrix with an entry at each distinct ``(rows, cols)``, normal random values."""
    keys = np.unique(rows.astype(np.int64) * shape[1] + cols.astype(np.int64))
    r, c = np.divmod(keys, shape[1])
    vals = np.random.default_rng(seed + 7919).standard_normal(len(keys))
    m = sp.csr_array((vals, (r, c)), shape=shape)
    m.sort_indices()
    return m


def uniform(n: int, m: int | None = None, density: float = 0.1, seed: int = 0) -> sp.csr_array:
    """About ``density * n * m`` distinct positions uniform at random."""
    m = n if m is None else m
    rng = np.random.default_rng(seed)
    k = max(1, round(density * n * m))
    keys = rng.choice(n * m, size=k, replace=False)
    return _csr(keys // m, keys % m, (n, m), seed)


def banded(n: int, half: int = 2, seed: int = 0) -> sp.csr_array:
    """Every ``(i, j)`` of the ``n x n`` matrix with ``|i - j| <= half``."""
    i, j = np.meshgrid(np.arange(n), np.arange(-half, half + 1), indexing="ij")
    j = i + j
    keep = (j >= 0) & (j < n)
    return _csr(i[keep], j[keep], (n, n), seed)


def rmat(n: int, edge_factor: int = 8, seed: int = 0, abc=(0.57, 0.19, 0.19)) -> sp.csr_array:
    """R-MAT edges on ``2**ceil(log2 n)`` vertices (unpermuted), those inside ``n x n`` kept."""
    scale = max(1, int(np.ceil(np.log2(n))))
    rng = np.random.default_rng(seed)
    m = edge_factor * (1 << scale)
    a, b, c = abc
    rows = np.zeros(m, np.int64)
    cols = np.zeros(m, np.int64)
    for bit in range(scale):
        r = rng.random(m)
        down = r >= a + b
        right = (r >= a + b + c) | ((r >= a) & (r < a + b))
        rows |= down.astype(np.int64) << bit
        cols |= right.astype(np.int64) << bit
    keep = (rows < n) & (cols < n)
    return _csr(rows[keep], cols[keep], (n, n), seed)


def zipf_rows(n: int, m: int, nnz: int, s: float = 1.2, seed: int = 0) -> sp.csr_array:
    """About ``nnz`` entries, row ``r`` holding ``~ C / (r + 1)**s`` of them (capped at ``m``),
    columns distinct and uniform within each row; row 0 is the heaviest."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, n + 1) ** s
    lengths = np.minimum(m, np.maximum(0, np.round(nnz * w / w.sum()))).astype(np.int64)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.concatenate([rng.choice(m, size=k, replace=False) for k in lengths] or [[]])
    return _csr(rows, cols.astype(np.int64), (n, m), seed)


def skewed(n: int, m: int | None = None, nnz: int = 400, heavy: int | None = None, seed: int = 0):
    """``nnz`` entries: one row (``heavy``, default the middle one) holds a third of them,
    a random quarter of the other rows is empty, the rest share the remainder evenly."""
    m = n if m is None else m
    rng = np.random.default_rng(seed)
    heavy = n // 2 if heavy is None else heavy
    n_heavy = min(m, nnz // 3)
    others = np.delete(np.arange(n), heavy)
    empty = rng.choice(others, size=len(others) // 4, replace=False)
    filled = np.setdiff1d(others, empty)
    lengths = np.zeros(n, np.int64)
    lengths[heavy] = n_heavy
    each, extra = divmod(nnz - n_heavy, len(filled))
    lengths[filled] = min(each, m)
    lengths[filled[:extra]] = min(each + 1, m)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.concatenate([rng.choice(m, size=k, replace=False) for k in lengths])
    return _csr(rows, cols.astype(np.int64), (n, m), seed)


def tensor3(
    shape: tuple[int, int, int], nnz: int, seed: int = 0, skew: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(coords (3, k), values)`` of ``k <= nnz`` distinct random coordinates, sorted
    lexicographically; with ``skew > 0`` low slices are heavier (``P(i) ~ 1/(i+1)**skew``)."""
    rng = np.random.default_rng(seed)
    cols = []
    for ext in shape:
        p = 1.0 / np.arange(1, ext + 1) ** skew
        cols.append(rng.choice(ext, size=nnz, p=p / p.sum()))
    keys = np.unique(np.ravel_multi_index(tuple(cols), shape))
    coords = np.stack(np.unravel_index(keys, shape)).astype(np.int64)
    vals = np.random.default_rng(seed + 104729).standard_normal(len(keys))
    return coords, vals


def matrices(n: int, seed: int = 0) -> dict[str, sp.csr_array]:
    """One matrix of each kind, ``n x n``; the skewed one's heavy row (``2n/3`` of ``2n``
    entries) is denser than ``nnz / P`` for ``P >= 4``."""
    return {
        "uniform": uniform(n, density=0.08, seed=seed),
        "banded": banded(n, 2, seed=seed),
        "rmat": rmat(n, 8, seed=seed),
        "zipf": zipf_rows(n, n, 6 * n, seed=seed),
        "skewed": skewed(n, nnz=2 * n, seed=seed),
    }
