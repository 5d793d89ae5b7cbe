"""SparseArray: a tensor stored level by level (TACO's level formats), its conversions and
the pattern queries a lowering needs.

Storage, for a :class:`~distal.sparse.formats.Format` with levels ``L0 L1 ... Ln-1`` in
storage order (level ``k`` stores dimension ``format.order[k]``, of extent ``size``):

* a dense level stores only its size; its positions are ``parent * size + coordinate``;
* a compressed level (``c``, or ``q`` that may repeat a coordinate) has ``pos`` (int64,
  one entry more than its parent level has positions) and ``crd`` (int64): the children of
  parent position ``p`` are positions ``pos[p]..pos[p+1]-1``, with coordinates
  ``crd[pos[p]:pos[p+1]]`` (increasing; strictly for ``c``);
* a singleton level has only ``crd``, one coordinate per parent position;
* ``vals`` holds one value per position of the last level.

The root has one position, so a compressed top level has ``pos == [0, len(crd)]``. Every
stored entry has distinct coordinates: constructors sum duplicates. A stored entry stays
stored when its value is zero (an explicit zero of a scipy matrix, duplicates that cancel);
an array made from a dense one stores its non-zeros.

Pattern queries are vectorised (numpy, no Python loop over entries). "Position" without a
level means a position of the last level, i.e. an index into ``vals``; "row" means a
coordinate of the top storage level (a row of CSR, DCSR and COO matrices, a column of CSC
and DCSC ones).

===================  ===========================================================
query                formats
===================  ===========================================================
coordinates          every format
row_of_position      every format of order >= 1
fiber_of_position    every format; ``levels`` top levels fused
positions_of_rows    every format of order >= 1
split_positions      every format
rows_piece           every format of order >= 1
piece                formats whose levels below the top are ``c``, ``q`` or ``s``
                     (a dense level below the top cannot be cut mid-fiber:
                     NotSupportedYet)
===================  ===========================================================

scipy (``to_scipy``, ``from_scipy``) and pydata ``sparse`` (``to_pydata``,
``from_pydata``) are imported only when used: ``pip install 'distal[sparse]'``.
"""

from __future__ import annotations

import hashlib
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.errors import InputError, NotSupportedYet, ShapeError
from distal.sparse.formats import Format, LevelFormat, named_format, parse_format

_EXTRA = "pip install 'distal[sparse]'"


def _scipy_sparse() -> Any:
    try:
        import scipy.sparse as sp
    except ImportError as e:  # pragma: no cover - scipy is in the test extra
        raise InputError(f"scipy.sparse conversions need scipy: {_EXTRA}") from e
    return sp


def _pydata_sparse() -> Any:
    try:
        import sparse
    except ImportError as e:  # pragma: no cover - sparse is in the test extra
        raise InputError(f"pydata sparse conversions need the 'sparse' package: {_EXTRA}") from e
    return sparse


def is_scipy_sparse(x: Any) -> bool:
    """``x`` is a scipy.sparse array or matrix (by its type's module: scipy is not imported)."""
    mod = type(x).__module__ or ""
    return mod == "scipy.sparse" or mod.startswith("scipy.sparse.")


def is_pydata_sparse(x: Any) -> bool:
    """``x`` is a pydata ``sparse`` array (COO, GCXS, DOK; by its type's module)."""
    return (type(x).__module__ or "").split(".")[0] == "sparse"


@dataclass(frozen=True, eq=False)
class Level:
    """One stored level: what it is and can do (its :class:`LevelFormat` in the array's
    format), the extent of the dimension it stores, its arrays.

    ``pos`` exists where ``format.stores_pos`` (``c`` and ``q`` levels), ``crd`` where
    ``format.stores_crd`` (``c``, ``q`` and ``s`` levels); both are read-only int64 arrays
    (None where the level has none).
    """

    format: LevelFormat
    size: int
    pos: np.ndarray | None = None
    crd: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.format, LevelFormat):  # (a letter has no place: see LevelFormat)
            raise InputError(
                f"a Level takes its LevelFormat (Format.level(k)), got {self.format!r}"
            )

    @property
    def kind(self) -> str:
        """The level's letter (``d``, ``c``, ``q`` or ``s``)."""
        return self.format.letter


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _shape_of(shape: Any, what: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        items = tuple(shape)
    except TypeError:
        raise ShapeError(f"{what} must be a tuple of ints, got {shape!r}") from None
    for d, s in enumerate(items):
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise ShapeError(f"dimension {d} of {what} {items!r} is {s!r}; need an int")
        if s < 0:
            raise ShapeError(f"dimension {d} of {what} {items!r} is negative")
    return tuple(int(s) for s in items)


def _numeric(a: np.ndarray, what: str) -> np.ndarray:
    if a.dtype.kind not in "biufc":
        raise InputError(f"{what} must be numeric, got dtype {a.dtype}")
    return a


def _index_array(a: Any, what: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{what} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


class SparseArray:
    """A tensor stored in a :class:`Format` (see the module docstring for the layout).

    Args:
        shape: the extents, in dimension (not storage) order.
        format: a format name (``"csr"``, ...) or a :class:`Format` with ``len(shape)``
            levels.
        pos: one entry per level: the level's ``pos`` array (``c``/``q`` levels) or None.
        crd: one entry per level: the level's ``crd`` array (``c``/``q``/``s``) or None.
        vals: one value per position of the last level.
        offset: where this array's origin sits in a larger tensor it was cut from (what
            :meth:`piece` and :meth:`rows_piece` set); zeros by default. Conversions
            (:meth:`to_dense`, :meth:`to_scipy`) give the array itself, without the offset.

    The arrays are copied (indices as int64) and checked; all arrays of a SparseArray are
    read-only, so its pattern and fingerprint never change.

    Raises:
        NotationError: a bad format.
        ShapeError: a bad shape.
        InputError: arrays that do not form that format (wrong lengths, ``pos`` not
            starting at 0 or decreasing, coordinates out of range or out of order, a
            level given an array it does not have).
    """

    __slots__ = ("_cache", "_crd32", "format", "levels", "offset", "shape", "vals")

    shape: tuple[int, ...]
    format: Format
    levels: tuple[Level, ...]
    vals: np.ndarray
    offset: tuple[int, ...]

    def __init__(
        self,
        shape: Sequence[int] | int,
        format: str | Format,
        pos: Sequence[Any],
        crd: Sequence[Any],
        vals: Any,
        *,
        offset: Sequence[int] | None = None,
    ) -> None:
        shp = _shape_of(shape)
        fmt = parse_format(format, len(shp))
        n = fmt.ndim
        if len(pos) != n or len(crd) != n:
            raise InputError(
                f"a {fmt} array takes one pos and one crd entry per level ({n}), got "
                f"{len(pos)} pos and {len(crd)} crd entries"
            )
        levels = []
        count = 1  # positions of the parent level (the root has one)
        for k, lf in enumerate(fmt.level_formats):
            size = shp[fmt.order[k]]
            p, c = pos[k], crd[k]
            if not lf.arrays:
                if p is not None or c is not None:
                    raise InputError(f"level {k} of a {fmt} array is {lf.kind}: it has no pos/crd")
                levels.append(Level(lf, size))
                count *= size
                continue
            if not lf.stores_pos and p is not None:
                raise InputError(f"level {k} of a {fmt} array is a {lf.kind}: it has no pos")
            if c is None or (lf.stores_pos and p is None):
                need = " and ".join(lf.arrays)
                raise InputError(f"level {k} ({lf.letter}) of a {fmt} array needs {need}")
            c = _index_array(c, f"crd of level {k}").ravel()
            if lf.branchless:
                if len(c) != count:
                    raise InputError(
                        f"crd of singleton level {k} has {len(c)} entries; its parent level "
                        f"has {count} positions"
                    )
                p_arr = None
            else:
                p_arr = _index_array(p, f"pos of level {k}").ravel()
                if len(p_arr) != count + 1:
                    raise InputError(
                        f"pos of level {k} has {len(p_arr)} entries; its parent level has "
                        f"{count} positions, so it needs {count + 1}"
                    )
                if p_arr[0] != 0 or np.any(np.diff(p_arr) < 0) or p_arr[-1] != len(c):
                    raise InputError(
                        f"pos of level {k} must start at 0, never decrease and end at "
                        f"len(crd) = {len(c)}"
                    )
                if lf.ordered:
                    _check_sorted(c, p_arr, strict=lf.unique, level=k)
            if len(c) and (c.min() < 0 or c.max() >= size):
                raise InputError(
                    f"crd of level {k} has coordinates outside [0, {size}) of dimension "
                    f"{fmt.order[k]}"
                )
            levels.append(Level(lf, size, None if p_arr is None else _frozen(p_arr), _frozen(c)))
            count = len(c)
        v = _numeric(np.array(vals), "vals").ravel()
        if len(v) != count:
            raise InputError(f"vals has {len(v)} entries; the last level has {count} positions")
        off = (0,) * len(shp) if offset is None else _shape_of(offset, "offset")
        if len(off) != len(shp):
            raise ShapeError(f"offset {off} has {len(off)} entries for an order-{len(shp)} array")
        self._init(shp, fmt, tuple(levels), _frozen(v), off)

    def _init(
        self,
        shape: tuple[int, ...],
        fmt: Format,
        levels: tuple[Level, ...],
        vals: np.ndarray,
        offset: tuple[int, ...],
    ) -> None:
        self.shape = shape
        self.format = fmt
        self.levels = levels
        self.vals = vals
        self.offset = offset
        self._cache: dict[Any, Any] = {}
        #: ``from_scipy(copy=False)``: the caller's own 32-bit index array of the last
        #: level, read-only, for a leaf that streams it in place of its copy (one run's use)
        self._crd32: np.ndarray | None = None

    @classmethod
    def _make(
        cls,
        shape: tuple[int, ...],
        fmt: Format,
        levels: Sequence[Level],
        vals: np.ndarray,
        offset: tuple[int, ...] | None = None,
    ) -> SparseArray:
        """An array from arrays already known to be well formed (no copies, no checks)."""
        out = object.__new__(cls)
        for lv in levels:
            for a in (lv.pos, lv.crd):
                if a is not None and a.flags.writeable:
                    _frozen(a)
        if vals.flags.writeable:
            _frozen(vals)
        out._init(shape, fmt, tuple(levels), vals, offset or (0,) * len(shape))
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self.shape, self.format, self.levels, self.vals, self.offset))

    # -- what it is ------------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        """The order of the array."""
        return len(self.shape)

    @property
    def nnz(self) -> int:
        """The number of stored values (positions of the last level), explicit zeros too."""
        return len(self.vals)

    @property
    def dtype(self) -> np.dtype:
        """The type of the values."""
        return self.vals.dtype

    @property
    def pos(self) -> tuple[np.ndarray | None, ...]:
        """Each level's ``pos`` array (None for dense and singleton levels)."""
        return tuple(lv.pos for lv in self.levels)

    @property
    def crd(self) -> tuple[np.ndarray | None, ...]:
        """Each level's ``crd`` array (None for dense levels)."""
        return tuple(lv.crd for lv in self.levels)

    def __repr__(self) -> str:
        off = f", offset={self.offset}" if any(self.offset) else ""
        return (
            f"SparseArray(shape={self.shape}, format={self.format}, nnz={self.nnz}, "
            f"dtype={self.dtype}{off})"
        )

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_coo(
        cls, coords: Any, values: Any, shape: Sequence[int] | int, format: str | Format = "coo"
    ) -> SparseArray:
        """The array with ``values[e]`` at coordinates ``coords[:, e]`` (duplicates summed).

        ``coords`` is an ``(order, nnz)`` integer array (int32, int64, ...) or one
        coordinate array per dimension, in any order; ``nnz`` may be 0.

        Raises:
            ShapeError: a bad shape. InputError: coordinates out of range, non-integer
            coordinates, or values not one per entry. NotationError: a bad format.
        """
        shp = _shape_of(shape)
        fmt = parse_format(format, len(shp))
        c = _coordinate_table(coords, shp)
        v = _numeric(np.asarray(values), "values").ravel()
        if len(v) != c.shape[1]:
            raise InputError(f"{c.shape[1]} coordinates but {len(v)} values")
        return _from_points(c, v, shp, fmt, unique=False)

    @classmethod
    def from_dense(cls, array: Any, format: str | Format = "csf") -> SparseArray:
        """The non-zeros of a dense array (every entry when all levels are dense)."""
        a = _numeric(np.asarray(array), "a dense array")
        fmt = parse_format(format, a.ndim)
        if fmt.is_dense:
            vals = np.ascontiguousarray(a.transpose(fmt.order)).ravel().copy()
            levels = [
                Level(lf, a.shape[o]) for lf, o in zip(fmt.level_formats, fmt.order, strict=True)
            ]
            return cls._make(a.shape, fmt, levels, vals)
        nz = np.nonzero(a)
        coords = np.array(nz, dtype=np.int64).reshape(a.ndim, -1)
        return _from_points(coords, a[nz], a.shape, fmt, unique=True)

    @classmethod
    def from_scipy(
        cls, matrix: Any, format: str | Format = "csr", *, copy: bool = True
    ) -> SparseArray:
        """A scipy.sparse array or matrix (any scipy format; duplicates summed; explicit
        zeros stay stored). ``copy=False``: a CSR/CSC matrix in this format keeps reading
        its values where they are (through a read-only view), for a use that ends before
        the caller can change them (one run's inputs)."""
        if not is_scipy_sparse(matrix):
            raise InputError(f"from_scipy takes a scipy.sparse array or matrix, got {matrix!r}")
        shp = tuple(int(s) for s in matrix.shape)
        fmt = parse_format(format, len(shp))
        kind = getattr(matrix, "format", None)
        if len(shp) == 2 and kind in _SCIPY_FORMATS and fmt == _SCIPY_FORMATS[kind]:
            m = matrix
            if not m.has_canonical_format:
                m = m.copy()
                m.sum_duplicates()
            if copy or m is not matrix:
                vals = _numeric(np.array(m.data), "matrix values")
            else:
                vals = _numeric(np.asarray(m.data).view(), "matrix values")
                vals.flags.writeable = False  # the view's flag: the caller's array is untouched
            known = _known_pattern(m, shp, fmt)
            if known is not None:  # the same index arrays, holding the same pattern
                levels, cache = known
                out = cls._make(shp, fmt, levels, vals)
                out._cache = cache
            else:
                pos = np.array(m.indptr, dtype=np.int64)
                crd = np.array(m.indices, dtype=np.int64)
                top = Level(fmt.level(0), shp[fmt.order[0]])
                rows = Level(fmt.level(1), shp[fmt.order[1]], pos, crd)
                out = cls._make(shp, fmt, [top, rows], vals)
                _remember_pattern(m, out)
            if not copy and m is matrix and m.indices.dtype == np.int32:
                crd32 = np.asarray(m.indices).view()
                crd32.flags.writeable = False  # the view's flag: the caller's array is untouched
                out._crd32 = crd32
            return out
        coo = matrix.tocoo()
        coords = coo.coords if hasattr(coo, "coords") else (coo.row, coo.col)
        return cls.from_coo(coords, coo.data, shp, fmt)

    @classmethod
    def from_pydata(cls, array: Any, format: str | Format = "coo") -> SparseArray:
        """A pydata ``sparse`` array (COO, GCXS, DOK) with fill value 0."""
        if not is_pydata_sparse(array):
            raise InputError(f"from_pydata takes a pydata sparse array, got {array!r}")
        fill = getattr(array, "fill_value", 0)
        if not np.all(np.asarray(fill) == 0):
            raise InputError(f"a pydata sparse array with fill value {fill!r} is not sparse here")
        coo = _pydata_sparse().as_coo(array)
        shp = tuple(int(s) for s in coo.shape)
        return cls.from_coo(np.asarray(coo.coords), np.asarray(coo.data), shp, format)

    # -- conversion --------------------------------------------------------------------------

    def to_dense(self) -> np.ndarray:
        """The dense numpy array (of ``shape``, without the offset)."""
        out = np.zeros(self.shape, dtype=self.dtype)
        if self.ndim == 0:
            out[()] = self.vals[0]
        elif self.nnz:
            out[tuple(self.coordinates())] = self.vals
        return out

    def _entries(self) -> tuple[np.ndarray, np.ndarray]:
        """Coordinates and values of the entries, without the zeros a dense last level
        stores for every coordinate (those are not entries of a sparse format)."""
        coords, vals = self.coordinates(), self.vals
        if self.levels and self.levels[-1].format.full:
            keep = vals != 0
            coords, vals = coords[:, keep], vals[keep]
        return coords, vals

    def to_scipy(self) -> Any:
        """A ``scipy.sparse.csr_array`` (CSR), ``csc_array`` (CSC) or ``coo_array`` (any
        other format) of an order-2 array."""
        if self.ndim != 2:
            raise ShapeError(f"to_scipy takes an order-2 array; this one has order {self.ndim}")
        sp = _scipy_sparse()
        if self.format in _SCIPY_FORMATS.values():
            make = sp.csr_array if self.format == _SCIPY_FORMATS["csr"] else sp.csc_array
            lv = self.levels[1]
            return make((self.vals.copy(), lv.crd.copy(), lv.pos.copy()), shape=self.shape)
        coords, vals = self._entries()
        return sp.coo_array((vals.copy(), (coords[0].copy(), coords[1].copy())), shape=self.shape)

    def to_pydata(self) -> Any:
        """A pydata ``sparse.COO`` array."""
        sparse = _pydata_sparse()
        coords, vals = self._entries()
        return sparse.COO(coords.copy(), vals.copy(), shape=self.shape)

    def with_format(self, format: str | Format) -> SparseArray:
        """The same entries in another format (the same array when the format is its own)."""
        fmt = parse_format(format, self.ndim)
        if fmt == self.format:
            return self
        if fmt.is_dense:
            out = SparseArray.from_dense(self.to_dense(), fmt)
        else:
            coords, vals = self._entries()
            out = _from_points(coords, vals, self.shape, fmt, unique=True)
        out.offset = self.offset
        return out

    def with_values(self, vals: Any, copy: bool = True) -> SparseArray:
        """The same pattern (sharing its arrays and cached queries) with other values.

        ``copy=False`` (a runtime's result buffer): ``vals``, a 1-D numpy array, is held
        through a read-only view instead of copied; whoever keeps the buffer must not write
        it while the array lives (the local runtime's recycler hands a buffer out again
        only once nothing else holds it, the view included)."""
        if not copy and isinstance(vals, np.ndarray) and vals.ndim == 1:
            v = _numeric(vals, "vals").view()
        else:
            v = _numeric(np.array(vals), "vals").ravel()
        if len(v) != self.nnz:
            raise InputError(f"vals has {len(v)} entries; the pattern has {self.nnz} positions")
        out = SparseArray._make(self.shape, self.format, self.levels, v, self.offset)
        out._cache = self._cache
        return out

    # -- pattern queries ---------------------------------------------------------------------

    def pattern_fingerprint(self) -> str:
        """A hash of the shape, offset, format and every ``pos``/``crd`` array (not the
        values): equal patterns give equal fingerprints.

        It is xxhash's XXH3-128 when ``xxhash`` is importable and BLAKE2b-128 otherwise;
        the digest is prefixed with the algorithm (``"xxh3:..."``, ``"blake2b:..."``), so
        the value is stable within one environment, not across environments that differ
        in having xxhash.
        """
        if "fingerprint" not in self._cache:
            try:
                import xxhash

                h: Any = xxhash.xxh3_128()
                algo = "xxh3"
            except ImportError:
                h = hashlib.blake2b(digest_size=16)
                algo = "blake2b"
            head = (self.shape, self.offset, self.format.levels, self.format.order)
            h.update(repr(head).encode())
            for lv in self.levels:
                for a in (lv.pos, lv.crd):
                    if a is None:
                        h.update(b"|-")
                        continue
                    h.update(b"|" + len(a).to_bytes(8, "little"))
                    h.update(memoryview(np.ascontiguousarray(a, dtype="<i8")).cast("B"))
            self._cache["fingerprint"] = f"{algo}:{h.hexdigest()}"
        return self._cache["fingerprint"]

    def _parents(self, k: int) -> np.ndarray:
        """For compressed level ``k``: the parent position of each of its positions."""
        key = ("parents", k)
        if key not in self._cache:
            pos = self.levels[k].pos
            self._cache[key] = _frozen(
                np.repeat(np.arange(len(pos) - 1, dtype=np.int64), np.diff(pos))
            )
        return self._cache[key]

    def _ancestors(self, k: int) -> np.ndarray:
        """The position at level ``k`` of every position of the last level."""
        p = np.arange(self.nnz, dtype=np.int64)
        for j in range(len(self.levels) - 1, k, -1):
            lv = self.levels[j]
            if lv.format.locate:
                p = p // lv.size if lv.size else p
            elif lv.format.stores_pos:
                p = self._parents(j)[p]
        return p

    def coordinates(self) -> np.ndarray:
        """The ``(order, nnz)`` coordinates (dimension order) of every stored position."""
        out = np.empty((self.ndim, self.nnz), dtype=np.int64)
        if self.nnz == 0:
            return out
        p = np.arange(self.nnz, dtype=np.int64)
        for k in range(len(self.levels) - 1, -1, -1):
            lv = self.levels[k]
            dim = self.format.order[k]
            if lv.format.locate:
                out[dim] = p % lv.size
                p = p // lv.size
            else:
                out[dim] = lv.crd[p]
                if lv.format.stores_pos:
                    p = self._parents(k)[p]
        return out

    def _need_levels(self, query: str) -> None:
        if not self.levels:
            raise NotSupportedYet(f"{query} of an order-0 array (format {self.format!r})")

    def row_of_position(self) -> np.ndarray:
        """The top storage level's coordinate (the row of CSR/DCSR/COO, the column of
        CSC/DCSC) of every stored position: an int64 array of length ``nnz``."""
        self._need_levels("row_of_position")
        lvs = self.levels
        if len(lvs) == 2 and lvs[0].format.locate and lvs[1].format.stores_pos:
            pos = lvs[1].pos
            return np.repeat(np.arange(len(pos) - 1, dtype=np.int64), np.diff(pos))
        top = lvs[0]
        at = self._ancestors(0)
        return at if top.format.locate else top.crd[at]

    def fiber_of_position(self, levels: int = 2) -> np.ndarray:
        """The position at level ``levels - 1`` of every stored position: which fiber of the
        fused top ``levels`` levels it lies in (``"xyz -> (xy)"`` cuts use ``levels=2``).

        Fibers are numbered in storage order; when the fused levels are all dense that
        number is the linearised coordinate (``i * n1 + j`` for two levels), otherwise it
        indexes the ``crd`` of level ``levels - 1``.
        """
        if isinstance(levels, bool) or not isinstance(levels, numbers.Integral):
            raise InputError(f"fiber_of_position takes an int number of levels, got {levels!r}")
        if not 1 <= levels <= len(self.levels):
            raise InputError(
                f"fiber_of_position(levels={levels}) of a {len(self.levels)}-level "
                f"{self.format} array: need 1 <= levels <= {len(self.levels)}"
            )
        return self._ancestors(int(levels) - 1)

    def _check_range(self, query: str, lo: Any, hi: Any, n: int, what: str) -> tuple[int, int]:
        for v in (lo, hi):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise InputError(f"{query} takes int bounds, got {lo!r}, {hi!r}")
        if not 0 <= lo <= hi <= n:
            raise InputError(f"{query}({lo}, {hi}): need 0 <= lo <= hi <= {n} ({what})")
        return int(lo), int(hi)

    def _row_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Per level, the positions under the top coordinates ``[lo, hi)`` (contiguous)."""
        top = self.levels[0]
        if top.format.locate:
            a, b = lo, hi
        else:
            a = int(np.searchsorted(top.crd, lo, side="left"))
            b = int(np.searchsorted(top.crd, hi, side="left"))
        ranges = [(a, b)]
        for lv in self.levels[1:]:
            if lv.format.locate:
                a, b = a * lv.size, b * lv.size
            elif lv.format.stores_pos:
                a, b = int(lv.pos[a]), int(lv.pos[b])
            ranges.append((a, b))
        return ranges

    def positions_of_rows(self, lo: int, hi: int) -> tuple[int, int]:
        """The range ``[start, end)`` of stored positions whose top-level coordinate (row) is
        in ``[lo, hi)``."""
        self._need_levels("positions_of_rows")
        lo, hi = self._check_range("positions_of_rows", lo, hi, self.levels[0].size, "rows")
        return self._row_ranges(lo, hi)[-1]

    def split_positions(self, parts: int) -> np.ndarray:
        """The non-zero cut into ``parts`` pieces: ``b`` (int64, length ``parts + 1``) with
        piece ``p`` the positions ``[b[p], b[p+1])``, i.e. ``[p*c, (p+1)*c)`` clipped to
        ``nnz`` for ``c = ceil(nnz / parts)`` (trailing pieces may be empty)."""
        if isinstance(parts, bool) or not isinstance(parts, numbers.Integral) or parts < 1:
            raise InputError(f"split_positions takes a positive number of parts, got {parts!r}")
        chunk = -(-self.nnz // int(parts))
        return np.minimum(np.arange(int(parts) + 1, dtype=np.int64) * chunk, self.nnz)

    def _cut(self, ranges: list[tuple[int, int]], top_lo: int, top_hi: int) -> SparseArray:
        """The self-contained array of the positions ``ranges`` (one ``[a, b)`` per level;
        a dense level below the top must hold whole fibers), top coordinates rebased to
        ``top_lo``."""
        levels: list[Level] = []
        for k, lv in enumerate(self.levels):
            a, b = ranges[k]
            if k == 0:
                if lv.format.locate:
                    levels.append(Level(lv.format, top_hi - top_lo))
                else:
                    pos = np.array([0, b - a], dtype=np.int64)
                    levels.append(Level(lv.format, top_hi - top_lo, pos, lv.crd[a:b] - top_lo))
                continue
            pa, pb = ranges[k - 1]
            if lv.format.locate:
                levels.append(lv)
            elif not lv.format.stores_pos:
                levels.append(Level(lv.format, lv.size, None, lv.crd[a:b]))
            else:
                pos = np.clip(lv.pos[pa : pb + 1], a, b) - a
                levels.append(Level(lv.format, lv.size, pos, lv.crd[a:b]))
        a, b = ranges[-1]
        top_dim = self.format.order[0]
        shape = list(self.shape)
        shape[top_dim] = top_hi - top_lo
        offset = list(self.offset)
        offset[top_dim] += top_lo
        return SparseArray._make(tuple(shape), self.format, levels, self.vals[a:b], tuple(offset))

    def rows_piece(self, row_lo: int, row_hi: int) -> SparseArray:
        """The coordinate cut: the entries whose top-level coordinate (row) is in
        ``[row_lo, row_hi)``, as an array of extent ``row_hi - row_lo`` in that dimension
        (rows rebased, ``pos`` rebased, ``offset`` advanced by ``row_lo``)."""
        self._need_levels("rows_piece")
        lo, hi = self._check_range("rows_piece", row_lo, row_hi, self.levels[0].size, "rows")
        return self._cut(self._row_ranges(lo, hi), lo, hi)

    def piece(self, lo: int, hi: int) -> SparseArray:
        """The non-zero cut: the stored entries at positions ``[lo, hi)`` as a self-contained
        array over the rows they span (from the row of position ``lo`` to the row of
        position ``hi - 1``; rows, ``pos`` and ``crd`` slices rebased, ``offset`` advanced).
        Rows at either end may be partial. An empty range gives an array of no rows.

        Raises:
            NotSupportedYet: a format with a dense level below the top (a cut at positions
                can split its fibers).
        """
        self._need_levels("piece")
        if any(lf.full for lf in self.format.level_formats[1:]):
            raise NotSupportedYet(
                f"piece() of a {self.format.describe()} array: a dense level below "
                "the top cannot be cut at positions; use rows_piece()"
            )
        lo, hi = self._check_range("piece", lo, hi, self.nnz, "positions")
        if lo == hi:
            row = int(self.row_of_position()[lo]) if lo < self.nnz else self.levels[0].size
            return self.rows_piece(row, row)
        ranges = [(lo, hi)]
        a, b = lo, hi
        for lv in self.levels[:0:-1]:
            if lv.format.stores_pos:
                a = int(np.searchsorted(lv.pos, a, side="right")) - 1
                b = int(np.searchsorted(lv.pos, b - 1, side="right"))
            ranges.append((a, b))
        ranges.reverse()
        top = self.levels[0]
        if top.format.locate:
            top_lo, top_hi = a, b
        else:
            top_lo, top_hi = int(top.crd[a]), int(top.crd[b - 1]) + 1
        return self._cut(ranges, top_lo, top_hi)


# -- helpers ----------------------------------------------------------------------------------


def _restore(
    shape: tuple[int, ...],
    fmt: Format,
    levels: tuple[Level, ...],
    vals: np.ndarray,
    offset: tuple[int, ...],
) -> SparseArray:
    """Unpickling: the arrays come back writable; make them read-only again."""
    return SparseArray._make(shape, fmt, levels, vals, offset)


def _check_sorted(crd: np.ndarray, pos: np.ndarray, strict: bool, level: int) -> None:
    """Coordinates increase within every segment (strictly for a unique level)."""
    if len(crd) < 2:
        return
    step = np.diff(crd)
    inside = np.ones(len(crd) - 1, dtype=bool)  # step e joins entries e and e+1
    starts = pos[1:-1]
    starts = starts[(starts > 0) & (starts < len(crd))]
    inside[starts - 1] = False
    bad = (step <= 0) if strict else (step < 0)
    if np.any(bad & inside):
        kind = "strictly increasing" if strict else "non-decreasing"
        raise InputError(f"crd of level {level} is not {kind} within each segment of pos")


def _coordinate_table(coords: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``coords`` as an ``(order, n)`` int64 array, checked against ``shape``."""
    c = np.asarray(coords)
    if c.ndim == 1 and len(shape) == 1:
        c = c.reshape(1, -1)
    if c.size == 0:
        c = c.reshape(len(shape), 0)
    if c.ndim != 2 or c.shape[0] != len(shape):
        raise InputError(
            f"coordinates must be an (order, nnz) = ({len(shape)}, nnz) array, got shape {c.shape}"
        )
    c = _index_array(c, "coordinates")
    for d, n in enumerate(shape):
        if c.shape[1] and (c[d].min() < 0 or c[d].max() >= n):
            raise InputError(f"coordinates of dimension {d} fall outside [0, {n})")
    return c


def _from_points(
    coords: np.ndarray, vals: np.ndarray, shape: tuple[int, ...], fmt: Format, unique: bool
) -> SparseArray:
    """Build ``fmt``'s levels from entries (``coords`` in dimension order, any order,
    duplicates summed unless ``unique``)."""
    nlev = fmt.ndim
    s = coords[list(fmt.order)] if nlev else coords.reshape(0, coords.shape[1])
    n = s.shape[1]
    if n:
        if nlev:
            perm = np.lexsort(s[::-1])
            s, vals = s[:, perm], vals[perm]
        if not unique:
            new = np.ones(n, dtype=bool)
            new[1:] = np.any(s[:, 1:] != s[:, :-1], axis=0) if nlev else False
            if not new.all():
                starts = np.flatnonzero(new)
                vals = np.add.reduceat(vals, starts)
                s = s[:, starts]
                n = len(starts)
    sizes = [shape[o] for o in fmt.order]
    parent = np.zeros(n, dtype=np.int64)  # each entry's position at the level above
    count = 1
    levels: list[Level] = []
    k = 0
    while k < nlev:
        lf, size = fmt.level(k), sizes[k]
        if lf.locate:
            parent = parent * size + s[k]
            count *= size
            levels.append(Level(lf, size))
            k += 1
            continue
        end = k + 1  # a q level and the singleton levels under it share positions
        while end < nlev and fmt.level(end).branchless:
            end += 1
        new = np.ones(n, dtype=bool)
        if n > 1:
            new[1:] = (parent[1:] != parent[:-1]) | np.any(s[k:end, 1:] != s[k:end, :-1], axis=0)
        first = np.flatnonzero(new)
        pos = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.bincount(parent[first], minlength=count), out=pos[1:])
        levels.append(Level(lf, size, pos, np.ascontiguousarray(s[k][first])))
        levels.extend(
            Level(fmt.level(j), sizes[j], None, np.ascontiguousarray(s[j][first]))
            for j in range(k + 1, end)
        )
        parent = np.cumsum(new, dtype=np.int64) - 1
        count = len(first)
        k = end
    if count == n:
        out_vals = np.array(vals)
    else:  # dense levels below the last sparse one store every coordinate
        out_vals = np.zeros(count, dtype=vals.dtype)
        out_vals[parent] = vals
    return SparseArray._make(shape, fmt, levels, out_vals)


#: the formats scipy's CSR and CSC matrices are read in without a conversion
_SCIPY_FORMATS = {"csr": named_format("csr", 2), "csc": named_format("csc", 2)}

#: scipy CSR/CSC patterns already read, by the identity of the matrix's index arrays: a
#: loop that passes the same matrix to every run (new values, or none) reuses the int64
#: copies and their cached queries (the fingerprint, a binding's cuts) after one
#: comparison of the arrays, instead of copying and hashing every entry again
_SCIPY_PATTERNS: dict[tuple[int, int], tuple] = {}
_SCIPY_PATTERNS_MAX = 8  # each holds int64 copies of a matrix's index arrays


def frozen(a: Any) -> bool:
    """Whether ``a`` is a read-only numpy array: a scipy matrix whose ``indptr`` and
    ``indices`` are is taken to keep its pattern while they stay so (the caller's word:
    :func:`_known_pattern`). Not seen: writing their memory through another array that
    shares it (a writeable base), or making them writeable, changing and freezing them
    again between two runs."""
    return isinstance(a, np.ndarray) and not a.flags.writeable


def _known_pattern(m: Any, shape: tuple[int, ...], fmt: Format) -> tuple[list[Level], dict] | None:
    """The levels and query cache of ``m``'s pattern when these very index arrays were read
    before and still hold it: compared entry by entry (scipy arrays can change in place),
    by their digest, or, where both arrays were :func:`frozen` then and are still, not at
    all (read-only: the caller has said they do not change; the digest of a 4 M-entry
    matrix's indices costs 0.4-0.6 ms a run, a tenth of its SpMV)."""
    got = _SCIPY_PATTERNS.get((id(m.indptr), id(m.indices)))
    if got is None:
        return None
    indptr, indices, head, levels, cache, digest, was_frozen = got
    if indptr() is not m.indptr or indices() is not m.indices or head != (shape, fmt):
        return None
    if was_frozen:
        return (levels, cache) if frozen(m.indptr) and frozen(m.indices) else None
    if digest is not None:
        if _index_digest(m) != digest:
            return None
    else:
        lv = levels[1]
        if not np.array_equal(m.indptr, lv.pos) or not np.array_equal(m.indices, lv.crd):
            return None
    return levels, cache


#: index bytes from which the digest hashes the second half of ``indices`` on a helper
#: thread while this one hashes the first (xxhash lets go of the GIL): a 5 M-entry matrix's
#: 24 MB took 0.82 ms on one thread, 0.54 on two
PARALLEL_DIGEST_BYTES = 1 << 22
_DIGEST_POOL: list[Any] = []


def _xxh3(data: Any) -> bytes:
    import xxhash

    return xxhash.xxh3_128(data).digest()


def _index_digest(m: Any) -> bytes | None:
    """XXH3-128 of a scipy matrix's index arrays as they are stored (int32 or int64), or
    None without ``xxhash`` (the arrays are then compared with the kept copies). Read on
    every run a matrix is given to (scipy arrays can change in place), so a large one is
    hashed in two halves side by side, and the digest is that of the halves' digests: a
    value compared only within this process."""
    try:
        import xxhash
    except ImportError:
        return None
    ptr = memoryview(np.ascontiguousarray(m.indptr)).cast("B")
    crd = memoryview(np.ascontiguousarray(m.indices)).cast("B")
    h = xxhash.xxh3_128()
    h.update(f"{m.indptr.dtype.str}{m.indices.dtype.str}{len(ptr)},{len(crd)}".encode())
    if len(crd) < PARALLEL_DIGEST_BYTES or (os.cpu_count() or 1) < 2:
        h.update(ptr)
        h.update(crd)
        return h.digest()
    if not _DIGEST_POOL:
        from concurrent.futures import ThreadPoolExecutor

        _DIGEST_POOL.append(ThreadPoolExecutor(1, "distal-digest"))
    half = len(crd) // 2
    second = _DIGEST_POOL[0].submit(_xxh3, crd[half:])
    h.update(_xxh3(ptr))
    h.update(_xxh3(crd[:half]))
    h.update(second.result())
    return h.digest()


def _remember_pattern(m: Any, out: SparseArray) -> None:
    """Keep ``out``'s pattern for the next read of ``m``'s index arrays (until they die)."""
    import weakref

    key = (id(m.indptr), id(m.indices))
    if len(_SCIPY_PATTERNS) >= _SCIPY_PATTERNS_MAX:
        _SCIPY_PATTERNS.pop(next(iter(_SCIPY_PATTERNS)))
    try:
        refs = (weakref.ref(m.indptr), weakref.ref(m.indices))
    except TypeError:  # not weakly referable: nothing is kept
        return
    head = (out.shape, out.format)
    if frozen(m.indptr) and frozen(m.indices):  # nothing to compare later: they are kept
        _SCIPY_PATTERNS[key] = (*refs, head, list(out.levels), out._cache, None, True)
    else:
        digest = _index_digest(m)
        _SCIPY_PATTERNS[key] = (*refs, head, list(out.levels), out._cache, digest, False)
    weakref.finalize(m.indices, _SCIPY_PATTERNS.pop, key, None)


def as_sparse(
    x: Any,
    format: str | Format,
    shape: Sequence[int] | None = None,
    *,
    dtype: Any = None,
    label: str = "the sparse values",
    copy: bool = True,
) -> SparseArray:
    """``x`` as a :class:`SparseArray` of ``format`` (and ``shape`` and ``dtype``, when given).

    Takes a SparseArray (re-formatted if its format differs), a scipy.sparse array or
    matrix, a pydata ``sparse`` array (the package is imported only for those), or a dense
    array-like (its non-zeros are stored). With ``dtype`` the values are converted to it by
    the input rule of :func:`distal.casting.check_cast` (numpy's ``same_kind``): a
    complex matrix for a real tensor, or floats for an integer one, are refused rather than
    silently cut; ``label`` names the values in that error. ``copy=False``: a scipy CSR/CSC
    matrix's values are read in place (see :meth:`SparseArray.from_scipy`).

    Raises:
        ShapeError: ``x`` has another shape. InputError: a non-numeric input, or values
        that ``dtype`` cannot hold. NotationError: a bad format.
    """
    if isinstance(x, SparseArray):
        got: Any = x
    elif is_scipy_sparse(x) or is_pydata_sparse(x):
        got = x
    else:
        got = np.asarray(x)
        if got.dtype.kind not in "biufc":
            raise InputError(f"cannot store a {type(x).__name__} of dtype {got.dtype} sparsely")
    if shape is not None:
        want = _shape_of(shape)
        if tuple(got.shape) != want:
            raise ShapeError(f"an array of shape {tuple(got.shape)} was given for shape {want}")
    if dtype is not None:  # before converting: a refused value costs no conversion
        from distal.casting import check_cast

        dtype = np.dtype(dtype)
        check_cast(label, _numeric(np.empty(0, got.dtype), label).dtype, dtype)
    fmt = parse_format(format, len(got.shape))
    if isinstance(got, SparseArray):
        out = got.with_format(fmt)
    elif is_scipy_sparse(got):
        out = SparseArray.from_scipy(got, fmt, copy=copy)
    elif is_pydata_sparse(got):
        out = SparseArray.from_pydata(got, fmt)
    else:
        out = SparseArray.from_dense(got, fmt)
    if dtype is not None and out.dtype != dtype:
        out = out.with_values(out.vals.astype(dtype))
    return out
