"""Sparse test data with the structure real workloads have: power-law graphs, power-law row
lengths, bands, uniform scatter, heavy tensor slices and a deliberately imbalanced matrix.

A distributed sparse kernel is limited by how its non-zeros are spread: a uniform random
matrix splits evenly however it is cut, so it hides load imbalance. These generators give
the patterns that expose it (a few very heavy rows, empty rows, heavy slices), each
deterministic for a seed (a :class:`numpy.random.Generator`) and vectorised, so millions
of non-zeros are made in about a second.

Every generator returns a :class:`~distal.sparse.array.SparseArray` in the requested
format, with float64 values in ``(0, 1]`` (sums of such values where draws coincide, so
no stored value is zero).

=================  ==============================================  =======================
generator          structure                                       stored entries
=================  ==============================================  =======================
``rmat``           Graph500 R-MAT graph, unpermuted (low rows      fewer than the edges
                   heavy)                                          drawn (duplicates summed)
``zipf_rows``      row lengths ``~ 1 / rank**s``, heaviest first   exactly ``nnz``
``banded``         every ``(i, j)`` with ``|i - j| <= bw // 2``    the whole band
``uniform``        ``nnz`` distinct positions, uniform at random   exactly ``nnz``
``zipf_tensor``    3-tensor, Zipf-like marginals along each mode   exactly ``nnz``
``skewed``         empty rows plus one very dense row              exactly ``nnz``
``fem_stiffness``  3-D Q1 stiffness pattern, ``dofs`` per node,    up to ``27 * dofs`` a
                   symmetric positive definite                     row
``road_network``   planar grid streets, numbered by region tiles   about 2.8 a row
``web_graph``      sites of consecutive pages, power-law degrees   fewer than the links
                                                                   drawn
=================  ==============================================  =======================
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import numpy as np

from distal.errors import InputError, ShapeError
from distal.sparse.array import SparseArray
from distal.sparse.formats import Format, parse_format

__all__ = [
    "banded",
    "fem_stiffness",
    "rmat",
    "road_network",
    "skewed",
    "uniform",
    "web_graph",
    "zipf_rows",
    "zipf_tensor",
]

# rounds of extra draws when distinct coordinates are topped up to a requested count
_MAX_ROUNDS = 64


def _count(x: object, what: str, minimum: int = 0) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or int(x) < minimum:
        raise InputError(f"{what} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` float64 values uniform in ``(0, 1]``: never an explicit zero."""
    return 1.0 - rng.random(n)


def _unique_counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``keys`` (sorted) and how often each occurs."""
    keys = np.sort(keys)
    if len(keys) == 0:
        return keys, np.zeros(0, dtype=np.int64)
    new = np.empty(len(keys), dtype=bool)
    new[0] = True
    np.not_equal(keys[1:], keys[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, len(keys)))
    return keys[starts], counts


def _summed_values(rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
    """For entries drawn ``counts`` times each, the sum of one ``(0, 1]`` value per draw.

    The values are independent of the coordinates, so drawing them after the coordinates
    are sorted gives the same distribution as drawing one with each coordinate, without a
    sort that carries the values along."""
    draws = _values(rng, int(counts.sum()))
    if len(counts) == len(draws):
        return draws
    starts = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return np.add.reduceat(draws, starts) if len(counts) else draws


def _from_sorted_keys(
    keys: np.ndarray, vals: np.ndarray, shape: tuple[int, ...], format: str | Format
) -> SparseArray:
    """The array of entries at distinct, increasing row-major linear indices ``keys``.

    Formats in dimension order whose levels locate their coordinates or store each one once
    under a ``pos`` segment (dense or compressed: CSR, DCSR, CSF, DSS, DDS, ...) are
    assembled directly from the keys, which are already in their storage order; any other
    format goes through :meth:`SparseArray.from_coo`.
    """
    fmt = parse_format(format, len(shape))
    direct = all(lf.locate or (lf.stores_pos and lf.unique) for lf in fmt.level_formats)
    if fmt.order != tuple(range(len(shape))) or not direct:
        coords = np.array(np.unravel_index(keys, shape), dtype=np.int64).reshape(len(shape), -1)
        return SparseArray.from_coo(coords, vals, shape, fmt)
    below = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    pos: list[np.ndarray | None] = []
    crd: list[np.ndarray | None] = []
    parent = np.zeros(len(keys), dtype=np.int64)  # each entry's position one level up
    count = 1
    for k, lf in enumerate(fmt.level_formats):
        coord = (keys // below[k]) % shape[k]
        if lf.locate:
            parent = parent * shape[k] + coord
            count *= shape[k]
            pos.append(None)
            crd.append(None)
            continue
        prefix = keys // below[k]
        new = np.ones(len(keys), dtype=bool)
        np.not_equal(prefix[1:], prefix[:-1], out=new[1:])
        first = np.flatnonzero(new)
        p = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.bincount(parent[first], minlength=count), out=p[1:])
        pos.append(p)
        crd.append(coord[first])
        parent = np.cumsum(new, dtype=np.int64) - 1
        count = len(first)
    if count != len(keys):  # a dense last level stores every coordinate of its fibers
        full = np.zeros(count, dtype=vals.dtype)
        full[parent] = vals
        vals = full
    return SparseArray(shape, fmt, pos, crd, vals)


def _csr(
    n_rows: int,
    n_cols: int,
    pos: np.ndarray,
    crd: np.ndarray,
    vals: np.ndarray,
    format: str | Format,
) -> SparseArray:
    """The matrix of CSR arrays ``pos``/``crd`` (columns increasing within a row), in
    ``format``."""
    if isinstance(format, str) and format.lower() == "csr":
        return SparseArray((n_rows, n_cols), "csr", [None, pos], [None, crd], vals)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(pos))
    return _from_sorted_keys(rows * n_cols + crd, vals, (n_rows, n_cols), format)


def _matrix_from_draws(
    rng: np.random.Generator, keys: np.ndarray, n_rows: int, n_cols: int, format: str | Format
) -> SparseArray:
    """The matrix of entries drawn at row-major linear indices ``keys``, one ``(0, 1]``
    value per draw, duplicates summed."""
    keys, counts = _unique_counts(keys)
    return _from_sorted_keys(keys, _summed_values(rng, counts), (n_rows, n_cols), format)


def _stratified_columns(
    rng: np.random.Generator, lengths: np.ndarray, n_cols: int
) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``pos`` and ``crd`` for rows of the given lengths (each <= ``n_cols``): the
    ``k``-th column of a row of length ``L`` is uniform in the ``k``-th of ``L`` equal
    integer strata of ``[0, n_cols)``, so a row's columns are distinct, increasing and
    spread over the whole row, and every column is equally likely."""
    lengths = lengths.astype(np.int64)
    pos = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=pos[1:])
    nnz = int(pos[-1])
    length = np.repeat(lengths, lengths)
    k = np.arange(nnz, dtype=np.int64) - np.repeat(pos[:-1], lengths)
    lo = (k * n_cols) // np.maximum(length, 1)
    hi = ((k + 1) * n_cols) // np.maximum(length, 1)
    crd = lo + (rng.random(nnz) * (hi - lo)).astype(np.int64)
    return pos, np.minimum(crd, hi - 1)


def _power_law_lengths(n: int, total: int, s: float, cap: int) -> np.ndarray:
    """Integer lengths near ``min(cap, C / (r + 1)**s)`` for ranks ``r < n``, nonincreasing,
    none above ``cap``, summing to exactly ``total`` (needs ``total <= n * cap``).

    ``C`` is found by bisection (the capped sum is continuous and nondecreasing in ``C``);
    the real lengths are rounded down and the shortfall (fewer than ``n``) goes one each to
    the largest fractional parts, ties to the lower rank, which keeps them nonincreasing.
    """
    if total == 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    lo, hi = 0.0, float(total) / w[-1] + 1.0  # at hi every length is min(cap, total)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.minimum(cap, mid * w).sum() < total:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    real = np.minimum(float(cap), hi * w)
    base = np.floor(real).astype(np.int64)
    short = total - int(base.sum())
    if short > 0:
        frac = np.where(base < cap, real - base, -1.0)
        base[np.argsort(-frac, kind="stable")[:short]] += 1
    return base


# -- generators -------------------------------------------------------------------------------


def rmat(
    scale: int,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
    format: str | Format = "csr",
) -> SparseArray:
    """A Graph500 R-MAT graph: ``2**scale`` vertices, ``edge_factor * 2**scale`` directed
    edges drawn, as the ``2**scale x 2**scale`` adjacency matrix.

    Each edge picks one quadrant per bit of its row and column, top-left with probability
    ``a``, top-right ``b``, bottom-left ``c``, bottom-right ``1 - a - b - c`` (no noise
    on the probabilities). The vertices are *not* permuted, so the degrees fall with the
    vertex number: row 0 is the heaviest, which is what stresses a cut by row blocks.
    Self-loops are kept. Each drawn edge has a value uniform in ``(0, 1]``; edges drawn
    more than once are summed, so ``nnz`` is below the number of edges drawn (94% of it
    at the Graph500 parameters, scale 18 and edge factor 16).

    Raises:
        InputError: a scale outside ``[0, 31]``, a negative edge factor, or
            probabilities that are negative or sum above 1.
    """
    scale = _count(scale, "scale")
    if scale > 31:
        raise InputError(f"scale must be at most 31 (2**31 vertices), got {scale}")
    edge_factor = _count(edge_factor, "edge_factor")
    d = 1.0 - a - b - c
    if min(a, b, c) < 0 or d < -1e-12:
        raise InputError(f"R-MAT probabilities must be >= 0 and sum to <= 1, got {a, b, c}")
    parse_format(format, 2)
    rng = np.random.default_rng(seed)
    n = 1 << scale
    m = edge_factor * n
    rows = np.zeros(m, dtype=np.int64)
    cols = np.zeros(m, dtype=np.int64)
    # a draw r uniform in [0, 2**32) picks the quadrant: [0, ta) top-left, [ta, tab)
    # top-right, [tab, tabc) bottom-left, the rest bottom-right
    ta, tab, tabc = (np.uint32(min(round(p * 2**32), 2**32 - 1)) for p in (a, a + b, a + b + c))
    for bit in range(scale):  # one pass per bit, each over every edge
        r = rng.integers(0, 2**32, size=m, dtype=np.uint32)
        down = r >= tab
        right = (r >= tabc) | ((r >= ta) & ~down)
        np.bitwise_or(rows, np.left_shift(down, bit, dtype=np.int64), out=rows)
        np.bitwise_or(cols, np.left_shift(right, bit, dtype=np.int64), out=cols)
    return _matrix_from_draws(rng, rows * n + cols, n, n, format)


def zipf_rows(
    n_rows: int,
    n_cols: int,
    nnz: int,
    s: float = 1.2,
    seed: int = 0,
    sort_heaviest_first: bool = True,
    format: str | Format = "csr",
) -> SparseArray:
    """A matrix of exactly ``nnz`` entries whose row lengths follow a Zipf law: the row of
    rank ``r`` (0 the heaviest) has about ``min(n_cols, C / (r + 1)**s)`` entries.

    With ``s > 1`` the heaviest row holds a fixed fraction of all entries (at least
    ``1 / zeta(s)``, 18% at ``s = 1.2``) until it is full, so it can be far denser than
    ``nnz / P`` for a cut into ``P`` row blocks; a row longer than ``n_cols`` is capped at
    ``n_cols`` and the rest is spread over the other rows by the same law. Rows come
    heaviest first (row lengths nonincreasing) when ``sort_heaviest_first``, in random
    order otherwise. Each row's columns are distinct and increasing, one uniform draw in
    each of its ``length`` equal strata of the columns.

    Raises:
        InputError: negative sizes, ``s < 0``, or ``nnz > n_rows * n_cols``.
    """
    n_rows, n_cols = _count(n_rows, "n_rows"), _count(n_cols, "n_cols")
    nnz = _count(nnz, "nnz")
    if s < 0:
        raise InputError(f"the Zipf exponent s must be >= 0, got {s}")
    if nnz > n_rows * n_cols:
        raise InputError(f"nnz {nnz} is more than the {n_rows} x {n_cols} matrix holds")
    parse_format(format, 2)
    rng = np.random.default_rng(seed)
    lengths = _power_law_lengths(n_rows, nnz, s, n_cols)
    if not sort_heaviest_first:
        lengths = rng.permutation(lengths)
    pos, crd = _stratified_columns(rng, lengths, n_cols)
    return _csr(n_rows, n_cols, pos, crd, _values(rng, nnz), format)


def banded(n: int, bandwidth: int, seed: int = 0, format: str | Format = "csr") -> SparseArray:
    """The ``n x n`` matrix of every ``(i, j)`` with ``|i - j| <= bandwidth // 2``, values
    uniform in ``(0, 1]``: ``bandwidth // 2 * 2 + 1`` entries per row away from the
    corners (a stencil or finite-element operator; perfectly balanced by rows).

    Raises:
        InputError: a negative size or bandwidth.
    """
    n, bandwidth = _count(n, "n"), _count(bandwidth, "bandwidth")
    parse_format(format, 2)
    rng = np.random.default_rng(seed)
    half = bandwidth // 2
    i = np.arange(n, dtype=np.int64)
    first = np.maximum(i - half, 0)
    lengths = np.minimum(i + half, n - 1) - first + 1
    lengths = np.maximum(lengths, 0)
    pos = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=pos[1:])
    nnz = int(pos[-1])
    crd = np.repeat(first - pos[:-1], lengths) + np.arange(nnz, dtype=np.int64)
    return _csr(n, n, pos, crd, _values(rng, nnz), format)


def _distinct_draws(
    rng: np.random.Generator,
    total: int,
    nnz: int,
    draw: Callable[[np.random.Generator, int], np.ndarray],
    what: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Exactly ``nnz`` distinct linear indices below ``total`` (sorted) and how often each
    was drawn: ``draw(rng, k)`` gives ``k`` indices; rounds of draws are merged until
    ``nnz`` are distinct, then a uniform random ``nnz`` of them is kept."""
    if nnz > total:
        raise InputError(f"nnz {nnz} is more than the {what} holds ({total})")
    keys = np.zeros(0, dtype=np.int64)
    counts = np.zeros(0, dtype=np.int64)
    drawn = 0
    for _ in range(_MAX_ROUNDS):
        if len(keys) >= nnz:
            break
        # the distinct fraction so far, as a guess of how many draws the rest will take
        want = nnz if drawn == 0 else 2 * (nnz - len(keys)) * drawn // max(len(keys), 1)
        want = max(want, 1024)
        new, new_counts = _unique_counts(draw(rng, want))
        drawn += want
        at = np.searchsorted(keys, new)
        seen = at < len(keys)
        seen[seen] = keys[at[seen]] == new[seen]
        counts[at[seen]] += new_counts[seen]  # distinct targets: new keys are distinct
        keys = np.insert(keys, at[~seen], new[~seen])
        counts = np.insert(counts, at[~seen], new_counts[~seen])
    if len(keys) < nnz:
        raise InputError(
            f"{what}: {nnz} distinct coordinates not reached in {_MAX_ROUNDS} rounds of "
            f"draws ({len(keys)} so far); ask for fewer non-zeros or a flatter law"
        )
    if len(keys) > nnz:
        keep = np.sort(rng.choice(len(keys), size=nnz, replace=False, shuffle=False))
        keys, counts = keys[keep], counts[keep]
    return keys, counts


def uniform(
    n_rows: int, n_cols: int, nnz: int, seed: int = 0, format: str | Format = "csr"
) -> SparseArray:
    """``nnz`` distinct positions of an ``n_rows x n_cols`` matrix, uniform at random, with
    values uniform in ``(0, 1]``: the pattern that balances under any cut.

    Raises:
        InputError: negative sizes or ``nnz > n_rows * n_cols``.
    """
    n_rows, n_cols = _count(n_rows, "n_rows"), _count(n_cols, "n_cols")
    nnz = _count(nnz, "nnz")
    parse_format(format, 2)
    rng = np.random.default_rng(seed)
    total = n_rows * n_cols
    if nnz > total:
        raise InputError(f"nnz {nnz} is more than the {n_rows} x {n_cols} matrix holds")
    keys = rng.choice(total, size=nnz, replace=False, shuffle=False).astype(np.int64)
    return _matrix_from_draws(rng, keys, n_rows, n_cols, format)


class _ZipfSampler:
    """Draws ``k < n`` with ``P(k) ~ 1 / (k + 1)**s`` by inverting the cumulative
    distribution through a guide table (the first candidate for each of ``G`` equal cells
    of ``[0, 1)``, then a step or two forward): a binary search per draw costs several
    times more."""

    def __init__(self, n: int, s: float) -> None:
        cdf = np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64) ** s)
        self.cdf = cdf / cdf[-1]
        self.cdf[-1] = 1.0
        cells = int(min(max(4 * n, 1 << 16), 1 << 24))
        self.guide = np.searchsorted(self.cdf, np.arange(cells) / cells, side="right")

    def __call__(self, rng: np.random.Generator, k: int) -> np.ndarray:
        u = rng.random(k)
        idx = self.guide[(u * len(self.guide)).astype(np.int64)]
        todo = np.flatnonzero(self.cdf[idx] <= u)
        while len(todo):  # cdf[-1] == 1 > u ends every walk
            idx[todo] += 1
            todo = todo[self.cdf[idx[todo]] <= u[todo]]
        return idx


def zipf_tensor(
    shape: Sequence[int],
    nnz: int,
    s: float = 1.1,
    seed: int = 0,
    format: str | Format = "dss",
) -> SparseArray:
    """A 3-tensor of exactly ``nnz`` entries whose coordinate along each mode is drawn
    independently with ``P(k) ~ 1 / (k + 1)**s``: low-numbered slices, fibers and rows
    are heavy along every mode (unpermuted, as in :func:`rmat`).

    Coordinates are drawn in rounds until ``nnz`` are distinct (values of coordinates
    drawn more than once summed), and a uniform random ``nnz`` of them is kept. Near the
    head, where the law asks for more than one entry per coordinate, the marginals are
    flatter than the law.

    Raises:
        ShapeError: a shape that is not three nonnegative extents.
        InputError: ``nnz`` above the number of coordinates, ``s < 0``, or a law so steep
            that ``nnz`` distinct coordinates are not reached.
    """
    shp = tuple(_count(x, "an extent of shape") for x in shape)
    if len(shp) != 3:
        raise ShapeError(f"zipf_tensor makes 3-tensors; shape {shape!r} has {len(shp)} extents")
    nnz = _count(nnz, "nnz")
    if s < 0:
        raise InputError(f"the Zipf exponent s must be >= 0, got {s}")
    parse_format(format, 3)
    rng = np.random.default_rng(seed)
    total = math.prod(shp)
    if nnz == 0:
        return _from_sorted_keys(np.zeros(0, dtype=np.int64), np.zeros(0), shp, format)
    samplers = [_ZipfSampler(x, s) for x in shp]
    strides = (shp[1] * shp[2], shp[2], 1)

    def draw(g: np.random.Generator, k: int) -> np.ndarray:
        key = np.zeros(k, dtype=np.int64)
        for sample, stride in zip(samplers, strides, strict=True):
            key += sample(g, k) * stride
        return key

    keys, counts = _distinct_draws(rng, total, nnz, draw, f"the {shp} tensor")
    return _from_sorted_keys(keys, _summed_values(rng, counts), shp, format)


def skewed(
    n_rows: int,
    n_cols: int,
    nnz: int,
    dense_row_fraction: float = 0.3,
    empty_fraction: float = 0.25,
    seed: int = 0,
    dense_row: int | None = None,
    format: str | Format = "csr",
) -> SparseArray:
    """A matrix built to be imbalanced: exactly ``nnz`` entries, one row (``dense_row``,
    the middle row by default) holding ``round(dense_row_fraction * nnz)`` of them, a
    random ``round(empty_fraction * n_rows)`` of the other rows empty, and the rest spread
    evenly (lengths differing by at most one) over the remaining rows.

    At the defaults the dense row is heavier than ``nnz / P`` for every ``P >= 4``, so
    neither an even row cut nor a cut at row boundaries balances it, and the empty rows
    test pieces and row ranges without entries. Columns of each row are distinct and
    increasing (one uniform draw in each of the row's equal strata of the columns).

    Raises:
        InputError: fractions outside ``[0, 1]``, a dense row longer than ``n_cols``, a
            ``dense_row`` outside the matrix, or more entries than the non-empty rows hold.
    """
    n_rows, n_cols = _count(n_rows, "n_rows", 1), _count(n_cols, "n_cols")
    nnz = _count(nnz, "nnz")
    if not (0.0 <= dense_row_fraction <= 1.0 and 0.0 <= empty_fraction <= 1.0):
        raise InputError(
            f"dense_row_fraction and empty_fraction must be in [0, 1], got "
            f"{dense_row_fraction} and {empty_fraction}"
        )
    row = n_rows // 2 if dense_row is None else _count(dense_row, "dense_row")
    if row >= n_rows:
        raise InputError(f"dense_row {row} is outside the {n_rows} rows")
    parse_format(format, 2)
    rng = np.random.default_rng(seed)
    heavy = round(dense_row_fraction * nnz)
    if heavy > n_cols:
        raise InputError(f"the dense row would hold {heavy} entries; it has {n_cols} columns")
    others = np.delete(np.arange(n_rows, dtype=np.int64), row)
    n_empty = min(round(empty_fraction * n_rows), len(others))
    empty = rng.choice(others, size=n_empty, replace=False)
    filled = np.setdiff1d(others, empty)
    rest = nnz - heavy
    if rest and (len(filled) == 0 or rest > len(filled) * n_cols):
        raise InputError(
            f"{rest} entries do not fit in the {len(filled)} non-empty light rows of "
            f"{n_cols} columns"
        )
    lengths = np.zeros(n_rows, dtype=np.int64)
    lengths[row] = heavy
    if len(filled):
        each, extra = divmod(rest, len(filled))
        light = np.full(len(filled), each, dtype=np.int64)
        light[rng.permutation(len(filled))[:extra]] += 1
        lengths[filled] = light
    pos, crd = _stratified_columns(rng, lengths, n_cols)
    return _csr(n_rows, n_cols, pos, crd, _values(rng, nnz), format)


# -- matrices of the kinds users bring: a FEM operator, a road network, a web graph ----------


def _pair_values(seed: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """A value in ``(0, 1]`` for each unordered pair ``(lo, hi)`` (``lo <= hi``), the same
    wherever the pair appears: a symmetric pattern gets symmetric values without finding
    each entry's transpose. A SplitMix64 finaliser of the pair and the seed."""
    with np.errstate(over="ignore"):
        z = lo.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z ^= hi.astype(np.uint64) + np.uint64((seed * 0xD1B54A32D192ED03 + 1) % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return ((z >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53


def _symmetric(
    rows: np.ndarray, cols: np.ndarray, n: int, seed: int, format: str | Format
) -> SparseArray:
    """The ``n x n`` matrix of entries ``(rows, cols)`` and their transposes (duplicates
    once), values in ``(0, 1]`` by pair (:func:`_pair_values`)."""
    keys = np.unique(np.concatenate([rows * n + cols, cols * n + rows]))
    r, c = keys // n, keys % n
    vals = _pair_values(seed, np.minimum(r, c), np.maximum(r, c))
    return _from_sorted_keys(keys, vals, (n, n), format)


def fem_stiffness(
    n: int, dofs: int = 3, seed: int = 0, format: str | Format = "csr"
) -> SparseArray:
    """The stiffness-matrix pattern of trilinear (Q1) hexahedra on an ``n x n x n`` grid of
    nodes with ``dofs`` unknowns per node (3: elasticity), as SuiteSparse's 3-D structural
    matrices (audikw_1, Serena: 70-80 entries a row) have it: every unknown of a node
    coupled with every unknown of the 27 nodes of the 3 x 3 x 3 block around it, so up to
    ``27 * dofs`` entries a row, fewer on the boundary; nodes in natural (lexicographic)
    order, a node's unknowns consecutive.

    The values make it symmetric positive definite, as a stiffness matrix is: off the
    diagonal ``-u`` with ``u`` in ``(0, 1]`` the same for ``(i, j)`` and ``(j, i)``; on it
    one more than the row's absolute off-diagonal sum (strict diagonal dominance). CG
    converges on it.

    Raises:
        InputError: ``n`` or ``dofs`` below 1.
    """
    n, dofs = _count(n, "n", 1), _count(dofs, "dofs", 1)
    parse_format(format, 2)
    nodes = n**3
    x, y, z = (a.reshape(-1) for a in np.indices((n, n, n), dtype=np.int64))
    ids = np.arange(nodes, dtype=np.int64)
    # each node's neighbours (itself included), in increasing node number: offsets in
    # lexicographic order raise the number monotonically
    nbr = np.full((nodes, 27), -1, dtype=np.int64)
    k = 0
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            for dz in (-1, 0, 1):
                ok = (
                    (x + dx >= 0) & (x + dx < n) & (y + dy >= 0) & (y + dy < n)
                    & (z + dz >= 0) & (z + dz < n)
                )  # fmt: skip
                nbr[ok, k] = ids[ok] + (dx * n + dy) * n + dz
                k += 1
    deg = (nbr >= 0).sum(axis=1)
    node_cols = nbr[nbr >= 0]  # row-major: each node's neighbours, increasing
    node_pos = np.zeros(nodes + 1, dtype=np.int64)
    np.cumsum(deg, out=node_pos[1:])
    # a node's block of columns: each neighbour's unknowns, in order; every unknown of the
    # node (a row) has that same block
    block = (node_cols[:, None] * dofs + np.arange(dofs, dtype=np.int64)).reshape(-1)
    seg = np.repeat(node_pos[:-1] * dofs, dofs)
    lengths = np.repeat(deg * dofs, dofs)
    pos = np.zeros(nodes * dofs + 1, dtype=np.int64)
    np.cumsum(lengths, out=pos[1:])
    nnz = int(pos[-1])
    crd = block[np.repeat(seg - pos[:-1], lengths) + np.arange(nnz, dtype=np.int64)]
    rows = np.repeat(np.arange(nodes * dofs, dtype=np.int64), lengths)
    vals = -_pair_values(seed, np.minimum(rows, crd), np.maximum(rows, crd))
    diag = rows == crd
    vals[diag] = 0.0
    off = np.bincount(rows, -vals, nodes * dofs)
    vals[diag] = off[rows[diag]] + 1.0
    return _csr(nodes * dofs, nodes * dofs, pos, crd, vals, format)


def road_network(
    side: int, keep: float = 0.7, tile: int = 32, seed: int = 0, format: str | Format = "csr"
) -> SparseArray:
    """A road-network-like graph (SuiteSparse's roadNet-CA: 2.8 links a junction, planar,
    numbered by region) as its symmetric ``side**2 x side**2`` adjacency matrix: junctions
    on a ``side x side`` grid, each street to the right and downward kept with probability
    ``keep`` (2.8 links a junction on average at 0.7; some junctions are left with none),
    and the junctions numbered tile by tile (``tile x tile`` blocks in row-major order, in
    random order inside a tile), as data sets cut by region number them: most entries lie
    near the diagonal, the vector's rows a product reads are scattered within a tile's
    range. No self-loops; values in ``(0, 1]``, symmetric.

    Raises:
        InputError: ``side`` or ``tile`` below 1, or ``keep`` outside ``[0, 1]``.
    """
    side, tile = _count(side, "side"), _count(tile, "tile", 1)
    if not 0.0 <= keep <= 1.0:
        raise InputError(f"keep must be in [0, 1], got {keep}")
    parse_format(format, 2)
    rng = np.random.default_rng(seed)
    n = side * side
    r, c = np.divmod(np.arange(n, dtype=np.int64), side)
    tiles = -(-side // tile)
    order = np.lexsort((rng.random(n), (r // tile) * tiles + c // tile))
    number = np.empty(n, dtype=np.int64)
    number[order] = np.arange(n, dtype=np.int64)
    right = np.flatnonzero((c < side - 1) & (rng.random(n) < keep))
    down = np.flatnonzero((r < side - 1) & (rng.random(n) < keep))
    u = number[np.concatenate([right, down])]
    v = number[np.concatenate([right + 1, down + side])]
    return _symmetric(u, v, n, seed, format)


def web_graph(
    n: int,
    degree: int = 8,
    local: float = 0.75,
    site_pages: int = 64,
    seed: int = 0,
    format: str | Format = "csr",
) -> SparseArray:
    """A web-like directed graph (SuiteSparse's web-Google, webbase: power-law degrees,
    links mostly inside a site) as its ``n x n`` link matrix, row ``p`` the links of page
    ``p``: pages in sites of consecutive numbers (as a crawl ordered by URL numbers them;
    ``n / site_pages`` sites with sizes by a Zipf law, in random order), out-degrees by a
    Zipf law averaging ``degree`` (about ``n * degree`` links drawn), each link inside its
    page's site with probability ``local``, else to a page drawn by popularity (a Zipf law
    over the pages in random order: a few pages receive a large share). Links drawn twice
    are one entry, their values summed, so ``nnz`` is below the links drawn; values in
    ``(0, 1]`` per draw.

    Raises:
        InputError: ``n`` or ``site_pages`` below 1, a negative ``degree``, or ``local``
            outside ``[0, 1]``.
    """
    n, degree = _count(n, "n", 1), _count(degree, "degree")
    site_pages = _count(site_pages, "site_pages", 1)
    if not 0.0 <= local <= 1.0:
        raise InputError(f"local must be in [0, 1], got {local}")
    parse_format(format, 2)
    rng = np.random.default_rng(seed)
    sites = max(1, n // site_pages)
    sizes = rng.permutation(_power_law_lengths(sites, n, 1.1, n))
    start = np.zeros(sites + 1, dtype=np.int64)
    np.cumsum(sizes, out=start[1:])
    site = np.repeat(np.arange(sites, dtype=np.int64), sizes)
    out_deg = rng.permutation(_power_law_lengths(n, n * degree, 0.7, min(n, 4096)))
    src = np.repeat(np.arange(n, dtype=np.int64), out_deg)
    m = len(src)
    s = site[src]
    inside = start[s] + (rng.random(m) * sizes[s]).astype(np.int64)
    popular = rng.permutation(n)
    rank = np.minimum((float(n) ** rng.random(m)).astype(np.int64) - 1, n - 1)
    dst = np.where(rng.random(m) < local, np.minimum(inside, start[s + 1] - 1), popular[rank])
    return _matrix_from_draws(rng, src * n + dst, n, n, format)
