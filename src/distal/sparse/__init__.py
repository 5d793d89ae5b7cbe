"""Sparse tensors: storage formats and the sparse array container.

:class:`Format` says how a tensor is stored, one level format per dimension (TACO's
dense, compressed and singleton levels), and :class:`LevelFormat` what each level is and
can do (TACO's mode format properties and capabilities); :class:`SparseArray` holds a
tensor in a format (``pos``/``crd`` per level and ``vals``), converts from and to
scipy.sparse, pydata ``sparse`` and numpy, and answers the pattern queries a distributed
lowering cuts by.
"""

from distal.sparse.array import Level, SparseArray, as_sparse, is_pydata_sparse, is_scipy_sparse
from distal.sparse.formats import (
    LEVELS,
    NAMES,
    Format,
    LevelFormat,
    level_letter,
    named_format,
    parse_format,
)

__all__ = [
    "LEVELS",
    "NAMES",
    "Format",
    "Level",
    "LevelFormat",
    "SparseArray",
    "as_sparse",
    "is_pydata_sparse",
    "is_scipy_sparse",
    "level_letter",
    "named_format",
    "parse_format",
]
