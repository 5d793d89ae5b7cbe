"""A unit's program as data: one processor's slice of a plan, in the Executable's format.

What a volunteer computes is an elastic :class:`~distal.runtime.elastic.units.Unit` (its
input buffers cut from owned blocks, its compute boxes, its leaves over stored entries)
with the leaf kernels of the statement (:class:`~distal.kernels.leaf.TermKernel`), the
output dtype, every input's dtype and what each block it needs holds: nothing but numbers,
strings and index arrays. It is written with the one codec of compiled programs
(:mod:`distal.runtime.codec`: msgpack, raw little-endian buffers, versioned, a table of
the classes it may build, no pickle), to which this module adds the unit's own records
(tags 96-100 of ``codec.POOL_TAGS``). Reading builds only classes of that table, through
their constructors, from plain values, so no byte of a program can name a function, a
class or code to run (``docs/executable.md``; ``docs/pool.md``, "Programs").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.errors import InputError
from distal.kernels.leaf import LEAVES, TermKernel
from distal.runtime import codec
from distal.runtime.elastic.units import Cut, Gather, Span, Unit
from distal.runtime.pool.wire import WireError, dtype_field

PROGRAM_VERSION = 2
"""The program record's version (inside the codec's own)."""


@dataclass(frozen=True)
class Program:
    """A unit's program: the unit (its task form: what it computes, not where its partial
    goes), its leaf kernels, the output dtype, every input tensor's dtype, and what each
    block of the unit's ``needs`` holds (a box, or a :class:`Span` for a processor's owned
    stored values)."""

    version: int
    unit: Unit
    kernels: tuple[TermKernel, ...]
    out_dtype: np.dtype
    dtypes: dict[str, np.dtype]
    holders: tuple[Any, ...]


for _tag, _cls in zip(codec.POOL_TAGS, (Unit, Cut, Gather, Span, Program), strict=False):
    if _cls not in codec._BY_CLASS:  # (registered once, whoever imports this first)
        codec.register(codec._dataclass_kind(_tag, _cls))


def encode(unit: Unit, kernels: tuple[TermKernel, ...], out_dtype: np.dtype,
           dtypes: dict[str, np.dtype], holders: Sequence[Any]) -> bytes:  # fmt: skip
    """Unit ``unit``'s program as bytes (see :class:`Program`)."""
    out = np.dtype(out_dtype)
    return codec.dumps(
        Program(
            PROGRAM_VERSION, unit.task(), tuple(kernels),
            out.newbyteorder("<") if out.byteorder == ">" else out,
            {t: np.dtype(d) for t, d in sorted(dtypes.items())}, tuple(holders),
        )
    )  # fmt: skip


def decode(raw: bytes) -> Program:
    """Read a program (:func:`encode`'s bytes). Anything that is not a program of
    :data:`PROGRAM_VERSION`, or names a leaf routine or a dtype this volunteer does not
    have, is a :class:`~.wire.WireError`."""
    try:
        prog = codec.loads(bytes(raw))
    except InputError as e:
        raise WireError("envelope", f"program: {str(e)[:300]}") from None
    if not isinstance(prog, Program):
        raise WireError("envelope", f"program: a {type(prog).__name__}, not a program")
    if prog.version != PROGRAM_VERSION:
        raise WireError("envelope", f"program version {prog.version!r} is not known here")
    if not isinstance(prog.unit, Unit) or not isinstance(prog.kernels, tuple):
        raise WireError("envelope", "program: not a unit and its kernels")
    for k in prog.kernels:
        if not isinstance(k, TermKernel):
            raise WireError("envelope", f"program: a {type(k).__name__} among the kernels")
        if k.leaf not in LEAVES:
            raise WireError("envelope", f"program: leaf routine {k.leaf!r} is not one this "
                                        "volunteer has")  # fmt: skip
        if k.widen:
            dtype_field(np.dtype(k.widen).newbyteorder("<").str)
    if not isinstance(prog.dtypes, dict) or not all(isinstance(t, str) for t in prog.dtypes):
        raise WireError("envelope", "program: dtypes must map tensor names to dtypes")
    u = prog.unit
    if not (isinstance(u.name, str) and isinstance(u.steps, tuple) and isinstance(u.needs, tuple)
            and all(isinstance(n, tuple) and len(n) == 2 and isinstance(n[0], str)
                    for n in u.needs)):  # fmt: skip
        raise WireError("envelope", "program: a unit with fields of the wrong kinds")
    for d in (prog.out_dtype, *prog.dtypes.values()):
        if not isinstance(d, np.dtype):
            raise WireError("envelope", "program: a dtype that is not one")
        dtype_field(d.newbyteorder("<").str if d.byteorder == ">" else d.str)
    if not isinstance(prog.holders, tuple) or len(prog.holders) != len(u.needs):
        raise WireError("envelope", "program: one holder per block the unit needs")
    return prog


__all__ = ["PROGRAM_VERSION", "Program", "decode", "encode"]
