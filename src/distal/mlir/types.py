"""Element types and ``sparse_tensor`` encodings: the two vocabularies that MLIR tensor types
and distal tensors share.

A :class:`~distal.sparse.formats.Format` maps one-to-one onto an encoding: level ``k``
stores dimension ``order[k]``, so the encoding's map sends ``(d0, ..., dn-1)`` to the
levels in storage order, each with its level type::

    d  dense         c  compressed        q  compressed(nonunique)
    s  singleton     (an ``s`` with another ``s`` below it: singleton(nonunique), since
                      its coordinate repeats once per entry of the levels below, as in
                      MLIR's COO)

CSR is ``(d0, d1) -> (d0 : dense, d1 : compressed)``, CSC
``(d0, d1) -> (d1 : dense, d0 : compressed)``. A dense format in the natural order has no
encoding (a plain tensor type). Reading one back ignores ``posWidth`` / ``crdWidth``
(distal stores int64 positions and coordinates) and refuses level types distal has no
format for (``loose_compressed``, ``nonordered`` levels, block maps).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from distal.errors import NotationError, NotSupportedYet
from distal.sparse.formats import Format, level_letter

#: numpy dtype -> MLIR element type (integers are signless in MLIR: arith decides the
#: signedness per operation)
_ELEMENT = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint64": "i64",
    "uint32": "i32",
    "uint16": "i16",
    "uint8": "i8",
}
#: MLIR element type -> numpy dtype (signless integers read as signed)
_DTYPE = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
}


def element_type(dtype: Any, tensor: str) -> str:
    """The MLIR element type of ``dtype``.

    Raises:
        NotSupportedYet: complex and boolean tensors (their bodies would need the
            ``complex`` dialect or bit logic, which the leaves do not use).
    """
    name = np.dtype(dtype).name
    if name not in _ELEMENT:
        raise NotSupportedYet(
            f"tensor {tensor!r} has dtype {name}: MLIR export covers {sorted(set(_ELEMENT))}"
        )
    return _ELEMENT[name]


def dtype_of(element: str, where: str) -> np.dtype:
    """The numpy dtype of MLIR element type ``element`` (text, e.g. ``"f64"``).

    Raises:
        NotationError: an element type distal tensors do not have, naming ``where``.
    """
    if element not in _DTYPE:
        raise NotationError(f"{where} has element type {element}; distal reads {sorted(_DTYPE)}")
    return np.dtype(_DTYPE[element])


def is_float(element: str) -> bool:
    """``f16``/``f32``/``f64`` (arith's ``*f`` operations) rather than an integer type."""
    return element.startswith("f")


def encoding(fmt: Format) -> str | None:
    """The ``#sparse_tensor.encoding<...>`` of ``fmt``; None for a dense natural-order one."""
    if fmt.is_dense and fmt.order == tuple(range(fmt.ndim)):
        return None
    dims = ", ".join(f"d{k}" for k in range(fmt.ndim))
    levels = [f"d{fmt.order[k]} : {lf.level_type}" for k, lf in enumerate(fmt.level_formats)]
    return f"#sparse_tensor.encoding<{{ map = ({dims}) -> ({', '.join(levels)}) }}>"


_MAP = re.compile(r"map\s*=\s*\(([^)]*)\)\s*->\s*\((.*)\)\s*(,|$)", re.S)
_LEVEL = re.compile(r"^\s*([A-Za-z_][\w$.]*)\s*:\s*([a-z_]+)\s*(?:\(([^)]*)\))?\s*$")


def _split_levels(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        depth += (ch == "(") - (ch == ")")
        cur.append(ch)
    out.append("".join(cur))
    return out


def parse_encoding(body: str, ndim: int, where: str) -> Format:
    """The Format of an encoding's body ``{ map = (d0, d1) -> (d0 : dense, ...) }``.

    Raises:
        NotationError: no ``map``, a level that is not a plain dimension, a level type or
            property distal has no format for, or a map of another order than the tensor's;
            the message names ``where`` and the level.
    """
    text = body.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    m = _MAP.search(text)
    if m is None:
        raise NotationError(f"{where}: a sparse_tensor.encoding without a map: {body!r}")
    dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
    if len(dims) != ndim:
        raise NotationError(
            f"{where}: the encoding maps {len(dims)} dimensions but the tensor has order {ndim}"
        )
    letters, order = [], []
    for lvl in _split_levels(m.group(2)):
        lm = _LEVEL.match(lvl)
        if lm is None or lm.group(1) not in dims:
            raise NotationError(
                f"{where}: encoding level {lvl.strip()!r} is not 'dimension : level type' "
                "(block and affine level maps have no distal format)"
            )
        kind, props = lm.group(2), {p.strip() for p in (lm.group(3) or "").split(",") if p.strip()}
        if kind not in ("dense", "compressed", "singleton") or props - {"nonunique"}:
            raise NotationError(
                f"{where}: encoding level {lvl.strip()!r}: distal formats have dense, "
                "compressed, compressed(nonunique) and singleton levels (ordered)"
            )
        letters.append(level_letter(kind, unique="nonunique" not in props))
        order.append(dims.index(lm.group(1)))
    if len(letters) != ndim or sorted(order) != list(range(ndim)):
        raise NotationError(
            f"{where}: the encoding's levels {m.group(2).strip()!r} do not store each "
            "dimension once"
        )
    return Format("".join(letters), order)
