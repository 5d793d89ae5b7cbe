"""Distributed data: inputs that are never whole on one host, results that stay distributed.

Runtimes read an input only for the blocks a processor owns, through the block-source
protocol of :mod:`distal.runtime.source` (``shape`` + ``read_block(box)``). This module
builds such sources and writes distributed results back in the same formats:

* :func:`from_function` -- every element is a function of its global index
  (``np.fromfunction`` style, evaluated one block at a time);
  :func:`from_box_function` -- a function returns a whole block given its box;
* :func:`from_npy_dir` / :func:`write_npy_dir` -- one ``.npy`` file per block plus a small
  JSON manifest (``distal.json``) listing the boxes; any box can be read back, whatever
  blocking wrote it (files are memory-mapped, so only the overlapping parts are read);
* :func:`from_zarr` -- a Zarr array (needs the ``zarr`` extra).

:class:`DistributedResult` is what the MPI runtime returns: the usual
:class:`~distal.runtime.result.Result` plus this rank's output blocks and collective writers.

A *box* is a tuple of half-open ``(lo, hi)`` intervals in global coordinates (``()`` for an
order-0 tensor).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from distal.errors import InputError
from distal.runtime.result import Result
from distal.typing import Box, box_index, box_intersect, box_is_empty, box_shape, box_volume

MANIFEST = "distal.json"
FORMAT = "distal-npy-dir"

Blocks = Mapping[Box, np.ndarray] | Iterable[tuple[Box, np.ndarray]]


def _shape(shape: Any) -> tuple[int, ...]:
    try:
        out = tuple(int(n) for n in shape)
    except TypeError as e:
        raise InputError(f"shape must be a tuple of non-negative integers, got {shape!r}") from e
    if any(n < 0 for n in out):
        raise InputError(f"shape must be a tuple of non-negative integers, got {shape!r}")
    return out


def _check_box(box: Box, shape: tuple[int, ...], what: str) -> Box:
    box = tuple((int(lo), int(hi)) for lo, hi in box)
    if len(box) != len(shape) or any(
        not 0 <= lo <= hi <= n for (lo, hi), n in zip(box, shape, strict=True)
    ):
        raise InputError(f"{what}: box {box} does not lie inside shape {shape}")
    return box


# --------------------------------------------------------------------------------------------
# Block sources built from functions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionSource:
    """A tensor whose blocks are computed on demand (see :func:`from_function`)."""

    shape: tuple[int, ...]
    fn: Callable[..., Any]
    dtype: np.dtype
    by_box: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def read_block(self, box: Box) -> np.ndarray:
        """Evaluate the function over ``box`` only."""
        box = _check_box(box, self.shape, "from_function")
        if self.by_box:
            return np.asarray(self.fn(box), dtype=self.dtype)
        if not box:
            return np.asarray(self.fn(), dtype=self.dtype)
        grids = tuple(np.ogrid[tuple(slice(lo, hi) for lo, hi in box)])
        value = np.asarray(self.fn(*grids), dtype=self.dtype)
        return np.broadcast_to(value, box_shape(box)).copy()

    def __repr__(self) -> str:
        kind = "from_box_function" if self.by_box else "from_function"
        return f"{kind}({self.shape}, {getattr(self.fn, '__name__', self.fn)!s}, {self.dtype})"


def from_function(
    shape: tuple[int, ...], fn: Callable[..., Any], dtype: Any = np.float64
) -> FunctionSource:
    """A tensor whose element at global index ``(i, j, ...)`` is ``fn(i, j, ...)``.

    Like ``np.fromfunction``, ``fn`` is called with one integer array per dimension, but only
    over one owned block at a time and with *open* grids (``np.ogrid``: broadcastable, not
    full), so ``fn`` must be written with broadcasting numpy operations; its result is
    broadcast to the block's shape (a constant is fine). For an order-0 tensor ``fn()`` is
    called without arguments. Example::

        B = dl.data.from_function((n, n), lambda i, j: np.sin(i + 2.0 * j))
        kernel.run({"B": B, ...})
    """
    return FunctionSource(_shape(shape), fn, np.dtype(dtype))


def from_box_function(
    shape: tuple[int, ...], fn: Callable[[Box], Any], dtype: Any = np.float64
) -> FunctionSource:
    """A tensor whose block over ``box`` is ``fn(box)``, an array of the box's shape.

    Use this when a block is cheaper to make whole (e.g. seeded random numbers, a file
    read): ``box`` is a tuple of half-open ``(lo, hi)`` pairs in global coordinates.
    Note that the values then depend on the blocking unless ``fn`` takes care.
    """
    return FunctionSource(_shape(shape), fn, np.dtype(dtype), by_box=True)


# --------------------------------------------------------------------------------------------
# Per-block .npy directories
# --------------------------------------------------------------------------------------------


def block_filename(box: Box) -> str:
    """The file a block is stored in: a pure function of its box, so writers never clash."""
    if not box:
        return "block.npy"
    return "block_" + "_".join(f"{lo}-{hi}" for lo, hi in box) + ".npy"


def _as_pairs(blocks: Blocks) -> list[tuple[Box, np.ndarray]]:
    items = blocks.items() if isinstance(blocks, Mapping) else blocks
    return [(tuple((int(lo), int(hi)) for lo, hi in box), np.asarray(a)) for box, a in items]


def write_npy_blocks(path: str | os.PathLike[str], blocks: Blocks) -> list[Box]:
    """Write each ``(box, array)`` to its own ``.npy`` file in ``path`` (no manifest).

    The piece of a collective write that every rank does for the blocks it is responsible
    for; :func:`write_npy_manifest` completes the directory.
    """
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    boxes = []
    for box, arr in _as_pairs(blocks):
        if arr.shape != box_shape(box):
            raise InputError(
                f"block for box {box} has shape {arr.shape}; expected {box_shape(box)}"
            )
        tmp = root / (block_filename(box) + ".tmp")
        with open(tmp, "wb") as f:
            np.save(f, arr)
        os.replace(tmp, root / block_filename(box))
        boxes.append(box)
    return boxes


def write_npy_manifest(
    path: str | os.PathLike[str], shape: tuple[int, ...], dtype: Any, boxes: Iterable[Box]
) -> None:
    """Write the manifest listing every block of a tensor of ``shape`` and ``dtype``."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT,
        "version": 1,
        "shape": list(shape),
        "dtype": np.dtype(dtype).str,
        "blocks": [
            {"box": [list(iv) for iv in box], "file": block_filename(box)}
            for box in boxes
            if not box_is_empty(box)
        ],
    }
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, root / MANIFEST)


def write_npy_dir(
    path: str | os.PathLike[str],
    blocks: Blocks,
    shape: tuple[int, ...] | None = None,
    dtype: Any = None,
) -> None:
    """Write blocks (a mapping or pairs ``box -> array``) as a complete ``.npy`` directory.

    ``shape`` defaults to the bounding box of the blocks, ``dtype`` to the first block's.
    A single-process writer; a distributed result writes with
    :meth:`DistributedResult.write_npy_dir`.
    """
    pairs = _as_pairs(blocks)
    if shape is None:
        if not pairs:
            raise InputError("write_npy_dir: no blocks and no shape")
        shape = tuple(max(b[d][1] for b, _ in pairs) for d in range(len(pairs[0][0])))
    if dtype is None:
        dtype = pairs[0][1].dtype if pairs else np.float64
    shape = _shape(shape)
    for box, _ in pairs:
        _check_box(box, shape, f"write_npy_dir({str(path)!r})")
    write_npy_blocks(path, [(b, a) for b, a in pairs if not box_is_empty(b)])
    write_npy_manifest(path, shape, dtype, [b for b, _ in pairs])


@dataclass(frozen=True)
class NpyDirSource:
    """A tensor stored as per-block ``.npy`` files (see :func:`from_npy_dir`)."""

    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype
    boxes: tuple[Box, ...]
    files: tuple[str, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def read_block(self, box: Box) -> np.ndarray:
        """Assemble ``box`` from the stored blocks it overlaps (memory-mapped reads)."""
        box = _check_box(box, self.shape, f"from_npy_dir({str(self.path)!r})")
        out = np.empty(box_shape(box), self.dtype)
        covered = 0
        for stored, fname in zip(self.boxes, self.files, strict=True):
            part = box_intersect(stored, box) if box else ()
            if box and box_is_empty(part):
                continue
            arr = np.load(self.path / fname, mmap_mode="r")
            if arr.shape != box_shape(stored):
                raise InputError(
                    f"{self.path / fname} holds shape {arr.shape}; manifest says box {stored}"
                )
            out[box_index(part, box)] = arr[box_index(part, stored)]
            covered += box_volume(part)
        if covered != box_volume(box):
            raise InputError(
                f"from_npy_dir({str(self.path)!r}): the stored blocks do not cover box {box}"
            )
        return out

    def __repr__(self) -> str:
        return (
            f"from_npy_dir({str(self.path)!r}: {self.shape} {self.dtype}, {len(self.boxes)} blocks)"
        )


def from_npy_dir(path: str | os.PathLike[str]) -> NpyDirSource:
    """Open a directory written by :func:`write_npy_dir` as a block source.

    Blocks must not overlap; reading a box that they do not cover raises ``InputError``.
    Opening reads only the manifest.
    """
    root = Path(path)
    try:
        doc = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError as e:
        raise InputError(f"from_npy_dir({str(path)!r}): no {MANIFEST} manifest there") from e
    except (OSError, ValueError) as e:
        raise InputError(f"from_npy_dir({str(path)!r}): unreadable manifest: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"from_npy_dir({str(path)!r}): {MANIFEST} is not a {FORMAT} manifest")
    try:
        shape = _shape(doc["shape"])
        dtype = np.dtype(doc["dtype"])
        boxes = tuple(
            _check_box(tuple(tuple(iv) for iv in b["box"]), shape, str(root)) for b in doc["blocks"]
        )
        files = tuple(str(b["file"]) for b in doc["blocks"])
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"from_npy_dir({str(path)!r}): malformed manifest: {e!r}") from e
    for a in range(len(boxes)):
        for b in range(a + 1, len(boxes)):
            if boxes[a] and not box_is_empty(box_intersect(boxes[a], boxes[b])):
                raise InputError(
                    f"from_npy_dir({str(path)!r}): blocks {boxes[a]} and {boxes[b]} overlap"
                )
    return NpyDirSource(root, shape, dtype, boxes, files)


# --------------------------------------------------------------------------------------------
# Zarr
# --------------------------------------------------------------------------------------------


def _zarr() -> Any:
    try:
        import zarr
    except ModuleNotFoundError as e:
        from distal.errors import NotSupportedYet

        raise NotSupportedYet("Zarr support needs 'zarr': pip install 'distal[zarr]'") from e
    return zarr


@dataclass(frozen=True)
class ZarrSource:
    """A tensor stored as a Zarr array (see :func:`from_zarr`)."""

    array: Any
    path: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.array.dtype)

    def read_block(self, box: Box) -> np.ndarray:
        """Read only the chunks ``box`` overlaps."""
        box = _check_box(box, self.shape, f"from_zarr({self.path!r})")
        if box_is_empty(box) and box:
            return np.empty(box_shape(box), self.dtype)
        return np.asarray(self.array[box_index(box, tuple((0, n) for n in self.shape))])

    def __repr__(self) -> str:
        return f"from_zarr({self.path!r}: {self.shape} {self.dtype})"


def from_zarr(path: str | os.PathLike[str]) -> ZarrSource:
    """Open a Zarr array (a directory store path) as a block source; needs ``distal[zarr]``."""
    zarr = _zarr()
    try:
        arr = zarr.open_array(store=str(path), mode="r")
    except Exception as e:
        raise InputError(f"from_zarr({str(path)!r}): cannot open a Zarr array: {e}") from e
    return ZarrSource(arr, str(path))


def chunks_for(bounds: tuple[tuple[tuple[int, int], ...], ...], shape: tuple[int, ...]) -> tuple:
    """A regular chunk shape such that every block is a union of whole chunks.

    ``bounds[d]`` are the block intervals along dimension ``d``; the chunk size is the gcd of
    the interior block boundaries, so concurrent writers of different blocks never share a
    chunk (for the usual ``ceil(N/g)`` blocking it is exactly the block size).
    """
    out = []
    for d, n in enumerate(shape):
        cuts = {x for lo, hi in bounds[d] for x in (lo, hi) if 0 < x < n}
        out.append(math.gcd(*cuts) if cuts else max(n, 1))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Distributed results
# --------------------------------------------------------------------------------------------


def _no_barrier() -> None:
    return None


@dataclass
class DistributedResult(Result):
    """A :class:`~distal.runtime.result.Result` whose output may stay spread over the ranks.

    ``value`` is the whole output where it was gathered (every rank with ``gather="all"``,
    rank 0 with ``"root"``) and ``None`` elsewhere. ``blocks`` maps this rank's owned output
    box to its array (empty when the rank holds nothing); ``primary`` lists the boxes this
    rank is responsible for writing (each block has exactly one such rank). The writers are
    collective: every rank must call them.
    """

    rank: int = 0
    nprocs: int = 1
    shape: tuple[int, ...] = ()
    dtype: Any = np.float64
    blocks: dict[Box, np.ndarray] = field(default_factory=dict)
    primary: tuple[Box, ...] = ()
    all_boxes: tuple[Box, ...] = ()
    chunks: tuple[int, ...] = ()
    barrier: Callable[[], None] = field(default=_no_barrier, repr=False)
    notify: Callable[[str], None] = field(default=lambda text: None, repr=False)

    def _attempt(self, path: str | os.PathLike[str], write: Callable[[], None]) -> None:
        """Run this rank's part of a collective write; a path that cannot be written is an
        :class:`InputError` here and, through ``notify``, a failure the other ranks see at
        their next barrier instead of waiting there for good."""
        try:
            write()
        except (OSError, ValueError) as e:
            where = f"{os.fspath(path)!r} (rank {self.rank})"
            err = InputError(f"cannot write the result to {where}: {e}")
            self.notify(str(err))
            raise err from e

    def _primary_pairs(self) -> list[tuple[Box, np.ndarray]]:
        out = []
        for box in self.primary:
            for own, arr in self.blocks.items():
                if not box or (box_volume(box_intersect(own, box)) == box_volume(box)):
                    out.append((box, arr[box_index(box, own)]))
                    break
        return out

    def write_npy_dir(self, path: str | os.PathLike[str]) -> None:
        """Collectively write the output as a ``.npy`` directory readable by :func:`from_npy_dir`.

        Each rank writes the blocks it reduces; rank 0 writes the manifest; the call returns
        on every rank once the directory is complete.
        """
        pairs = [(b, a) for b, a in self._primary_pairs() if not box_is_empty(b)]
        self._attempt(path, lambda: write_npy_blocks(path, pairs))
        self.barrier()
        if self.rank == 0:
            self._attempt(
                path, lambda: write_npy_manifest(path, self.shape, self.dtype, self.all_boxes)
            )
        self.barrier()

    def write_zarr(self, path: str | os.PathLike[str]) -> None:
        """Collectively write the output as a Zarr array (chunks aligned with the blocks)."""
        zarr = _zarr()
        if self.rank == 0:
            meta = {"shape": self.shape, "chunks": self.chunks, "dtype": self.dtype}
            self._attempt(path, lambda: zarr.open_array(store=str(path), mode="w", **meta))
        self.barrier()

        def blocks() -> None:
            arr = zarr.open_array(store=str(path), mode="r+")
            for box, block in self._primary_pairs():
                if box and box_is_empty(box):
                    continue
                arr[box_index(box, tuple((0, n) for n in self.shape))] = block

        self._attempt(path, blocks)
        self.barrier()
