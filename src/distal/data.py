"""Inputs that never sit whole on one host, and results that stay spread over the ranks.

The block sources (a function of the block's coordinates or box, a directory of ``.npy``
blocks, a Zarr array), the collective writers and :class:`DistributedResult` live in the
runtime layer (:mod:`distal.runtime.data`), where the MPI runtime builds its results; this
module is their public name, ``dl.data``.
"""

from distal.runtime.data import (
    FORMAT,
    MANIFEST,
    Blocks,
    DistributedResult,
    FunctionSource,
    NpyDirSource,
    ZarrSource,
    block_filename,
    chunks_for,
    from_box_function,
    from_function,
    from_npy_dir,
    from_zarr,
    write_npy_blocks,
    write_npy_dir,
    write_npy_manifest,
)

__all__ = [
    "FORMAT",
    "MANIFEST",
    "Blocks",
    "DistributedResult",
    "FunctionSource",
    "NpyDirSource",
    "ZarrSource",
    "block_filename",
    "chunks_for",
    "from_box_function",
    "from_function",
    "from_npy_dir",
    "from_zarr",
    "write_npy_blocks",
    "write_npy_dir",
    "write_npy_manifest",
]
