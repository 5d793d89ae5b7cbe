"""A unit's program as data: one processor's slice of a plan, written and read without pickle.

What a volunteer computes is an elastic :class:`~distal.runtime.elastic.units.Unit` (its
input buffers cut from owned blocks, its compute boxes, its leaves over stored entries)
and the leaf kernels of the statement (:class:`~distal.kernels.leaf.TermKernel`: an einsum
spec, factors, coefficient): nothing but numbers, strings and index arrays. This module
writes them as a msgpack tree and reads them back, checking every field's type and range as
it goes: a reader builds only these classes, from plain values, so no byte of a program can
name a function, a class or code to run (``docs/pool.md``, "Programs").

Arrays inside a program (index arrays of gathers and leaves over stored entries) are
``{"a": [dtype, shape, bytes]}`` with the dtype from :data:`~.wire.DTYPES`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.errors import NotSupportedYet
from distal.kernels.leaf import LEAVES, TermKernel
from distal.plan.ir import EntryWork, TermWork
from distal.plan.region import Entries, Location, Rows
from distal.runtime.elastic.units import Cut, Gather, Span, Unit
from distal.runtime.pool.wire import WireError, dtype_field, pack, shape_field, unpack

PROGRAM_VERSION = 1
"""The program format's version (inside the wire format's)."""

MAX_ITEMS = 1 << 22  # list lengths a program may hold


def _fail(what: str) -> WireError:
    return WireError("envelope", f"program: {what}")


# -- writing -----------------------------------------------------------------------------


def _arr(a: Any) -> dict[str, Any]:
    a = np.asarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    a = np.ascontiguousarray(a)
    return {"a": [a.dtype.str, list(a.shape), a.tobytes()]}


def _box(b: Any) -> list[list[int]]:
    return [[int(lo), int(hi)] for lo, hi in b]


def _index_item(x: Any) -> Any:
    if x is Ellipsis:
        return {"e": 1}
    if isinstance(x, slice):
        return {"s": [x.start, x.stop, x.step]}
    if isinstance(x, (int, np.integer)):
        return {"i": int(x)}
    if isinstance(x, np.ndarray):
        return _arr(x)
    raise TypeError(f"an index item of type {type(x).__name__}")


def _ix(ix: Any) -> dict[str, Any]:
    if isinstance(ix, Location):
        return {
            "loc": [
                None if ix.perm is None else list(ix.perm),
                [_index_item(x) for x in ix.index],
                bool(ix.rowless),
            ]
        }
    if isinstance(ix, tuple):
        return {"ix": [_index_item(x) for x in ix]}
    raise TypeError(f"an index of type {type(ix).__name__}")


def _region(r: Any) -> Any:
    if isinstance(r, tuple):
        return {"box": _box(r)}
    if isinstance(r, Rows):
        return {"rows": [list(r.sdims), list(r.ddims), _arr(r.rows), _box(r.box)]}
    if isinstance(r, Entries):
        return {"entries": [_arr(r.positions), int(r.index_words)]}
    raise TypeError(f"a region of type {type(r).__name__}")


def _opt_arr(a: Any) -> Any:
    return None if a is None else _arr(a)


def _coeff(c: Any) -> Any:
    if isinstance(c, (complex, np.complexfloating)):
        return {"c": [float(c.real), float(c.imag)]}
    if isinstance(c, (bool, np.bool_)):
        return int(c)
    if isinstance(c, (int, np.integer)):
        return int(c)
    return float(c)


def _work(w: EntryWork) -> list[Any]:
    terms = [
        [
            _coeff(t.coeff),
            [[n, _opt_arr(i)] for n, i in t.sparse],
            [[n, _opt_arr(i), letters] for n, i, letters in t.dense],
            _arr(t.out),
            _opt_arr(t.entries),
        ]
        for t in w.terms
    ]
    return [
        terms, w.out_letters, int(w.out_rows), [[c, int(n)] for c, n in w.extents],
        int(w.entries), int(w.width), [[t, _region(r)] for t, r in w.views],
        None if w.out_view is None else _region(w.out_view),
    ]  # fmt: skip


def _buffer(b: Any) -> Any:
    if isinstance(b, Gather):
        pieces = [
            [int(src), [int(c.need), _ix(c.src), _ix(c.dst), int(c.index_words)]]
            for src, c in b.pieces
        ]
        return {"gather": [list(b.shape), pieces]}
    return {"box": _box(b)}


def _kernel(k: TermKernel) -> list[Any]:
    if k.offsets or k.scales or k.domain or k.tree:
        raise NotSupportedYet(
            "shifted accesses (slices, stencils: a leaf with offsets, scales, a domain or a "
            "point-by-point tree) on the volunteer pool are not in this version"
        )
    return [
        _coeff(k.coeff), k.spec, [[n, list(pos)] for n, pos in k.factors], list(k.gates),
        list(k.multipliers), list(k.out), list(k.parallel), k.leaf, k.widen,
    ]  # fmt: skip


def _holder(h: Any) -> Any:
    return {"span": list(h.shape)} if isinstance(h, Span) else {"box": _box(h)}


def encode(unit: Unit, kernels: tuple[TermKernel, ...], out_dtype: np.dtype,
           dtypes: dict[str, np.dtype], holders: Sequence[Any]) -> bytes:  # fmt: skip
    """Unit ``unit``'s program as bytes: its task form (what it computes, not where its
    partial goes), the leaf kernels, the output dtype, each input tensor's dtype, and what
    each of its ``needs`` blocks holds (``holders``: a box, or a :class:`Span` for a
    processor's owned stored values)."""
    u = unit.task()
    out_box = _holder(u.out_box)
    steps = [
        [[[t, _buffer(b)] for t, b in bufs], [_box(b) for b in boxes], [_work(w) for w in works]]
        for bufs, boxes, works in u.steps
    ]
    tree = {
        "program": PROGRAM_VERSION,
        "name": u.name,
        "proc": int(u.proc),
        "first": int(u.first),
        "out_box": out_box,
        "steps": steps,
        "needs": [[t, [int(x) for x in key]] for t, key in u.needs],
        "holders": [_holder(h) for h in holders],
        "final": bool(u.final),
        "kernels": [_kernel(k) for k in kernels],
        "out_dtype": np.dtype(out_dtype).newbyteorder("<").str
        if np.dtype(out_dtype).byteorder == ">" else np.dtype(out_dtype).str,
        "dtypes": {t: np.dtype(d).str for t, d in sorted(dtypes.items())},
    }  # fmt: skip
    return pack(tree)


# -- reading -----------------------------------------------------------------------------


def _list(v: Any, what: str, n: int | None = None) -> list[Any]:
    if not isinstance(v, list) or len(v) > MAX_ITEMS or (n is not None and len(v) != n):
        raise _fail(f"{what} must be a list" + (f" of {n}" if n is not None else ""))
    return v


def _int(v: Any, what: str, lo: int = -(1 << 62), hi: int = 1 << 62) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise _fail(f"{what} must be an integer in [{lo}, {hi}]")
    return v


def _str(v: Any, what: str, limit: int = 256) -> str:
    if not isinstance(v, str) or len(v) > limit:
        raise _fail(f"{what} must be a string")
    return v


def _one(v: Any, what: str) -> tuple[str, Any]:
    if not isinstance(v, dict) or len(v) != 1:
        raise _fail(f"{what} must be a one-key map")
    (k, x), = v.items()  # fmt: skip
    return k, x


def _read_arr(v: Any, what: str, kinds: str = "iub") -> np.ndarray:
    k, x = _one(v, what)
    if k != "a":
        raise _fail(f"{what} must be an array")
    dt_s, shape_v, data = _list(x, what, 3)
    dt = dtype_field(dt_s)
    if dt.kind not in kinds:
        raise _fail(f"{what}: dtype {dt.str} where {kinds!r} kinds are expected")
    shape = shape_field(shape_v)
    if not isinstance(data, bytes) or len(data) != dt.itemsize * math.prod(shape):
        raise WireError("size", f"program: {what} holds another number of bytes than its shape")
    return np.frombuffer(data, dtype=dt).reshape(shape)


def _read_index_arr(v: Any, what: str, bound: int = 1 << 40) -> np.ndarray:
    a = _read_arr(v, what, "iu")
    if a.size and (int(a.min()) < -bound or int(a.max()) >= bound):
        raise _fail(f"{what}: index out of range")
    return a


def _read_box(v: Any, what: str) -> tuple[tuple[int, int], ...]:
    out = []
    for pair in _list(v, what):
        lo, hi = _list(pair, what, 2)
        lo, hi = _int(lo, what, 0), _int(hi, what, 0)
        if hi < lo:
            raise _fail(f"{what}: an interval ends before it starts")
        out.append((lo, hi))
    if len(out) > 8:
        raise _fail(f"{what}: more than 8 dimensions")
    return tuple(out)


def _read_index_item(v: Any) -> Any:
    k, x = _one(v, "index item")
    if k == "e":
        return Ellipsis
    if k == "s":
        parts = _list(x, "slice", 3)
        for p in parts:
            if p is not None:
                _int(p, "slice bound")
        if parts[2] == 0:
            raise _fail("a slice step of 0")
        return slice(*parts)
    if k == "i":
        return _int(x, "index")
    if k == "a":
        return _read_index_arr(v, "index array")
    raise _fail(f"unknown index item {k!r}")


def _read_ix(v: Any) -> Any:
    k, x = _one(v, "index")
    if k == "ix":
        return tuple(_read_index_item(i) for i in _list(x, "index"))
    if k == "loc":
        perm_v, index_v, rowless = _list(x, "location", 3)
        perm = None
        if perm_v is not None:
            perm = tuple(_int(p, "perm", 0, 8) for p in _list(perm_v, "perm"))
            if sorted(perm) != list(range(len(perm))):
                raise _fail("a location's perm is not a permutation")
        if not isinstance(rowless, bool):
            raise _fail("rowless must be a boolean")
        return Location(perm, tuple(_read_index_item(i) for i in _list(index_v, "index")), rowless)
    raise _fail(f"unknown index kind {k!r}")


def _read_region(v: Any) -> Any:
    k, x = _one(v, "region")
    if k == "box":
        return _read_box(x, "box")
    if k == "rows":
        sd, dd, rows, box = _list(x, "rows", 4)
        return Rows(
            tuple(_int(d, "dim", 0, 8) for d in _list(sd, "sdims")),
            tuple(_int(d, "dim", 0, 8) for d in _list(dd, "ddims")),
            _read_index_arr(rows, "rows"), _read_box(box, "rows box"),
        )  # fmt: skip
    if k == "entries":
        pos, iw = _list(x, "entries", 2)
        return Entries(_read_index_arr(pos, "positions"), _int(iw, "index words", 0))
    raise _fail(f"unknown region kind {k!r}")


def _read_coeff(v: Any) -> complex | float | int:
    if isinstance(v, dict):
        k, x = _one(v, "coefficient")
        re, im = _list(x, "complex", 2) if k == "c" else (None, None)
        if not isinstance(re, float) or not isinstance(im, float):
            raise _fail("a complex coefficient is two floats")
        return complex(re, im)
    if type(v) is int or type(v) is float:
        return v
    raise _fail("a coefficient must be a number")


def _letters(v: Any, what: str) -> str:
    s = _str(v, what, 64)
    if not all(c.isascii() and c.isalpha() for c in s):
        raise _fail(f"{what} must be letters")
    return s


def _read_work(v: Any) -> EntryWork:
    terms_v, out_letters, out_rows, extents, entries, width, views, out_view = _list(v, "work", 8)
    terms = []
    for t in _list(terms_v, "terms"):
        coeff, sparse, dense, out, ent = _list(t, "term", 5)
        terms.append(
            TermWork(
                _read_coeff(coeff),
                tuple(
                    (_str(n, "tensor"), None if i is None else _read_index_arr(i, "index"))
                    for n, i in (_list(p, "sparse factor", 2) for p in _list(sparse, "sparse"))
                ),
                tuple(
                    (_str(n, "tensor"), _read_index_arr(i, "rows"), _letters(ls, "letters"))
                    for n, i, ls in (_list(p, "dense factor", 3) for p in _list(dense, "dense"))
                ),
                _read_index_arr(out, "out rows"),
                None if ent is None else _read_index_arr(ent, "entries"),
            )
        )
    return EntryWork(
        tuple(terms), _letters(out_letters, "out letters"), _int(out_rows, "out rows", 0),
        tuple((_letters(c, "letter"), _int(n, "extent", 0)) for c, n in
              (_list(e, "extent", 2) for e in _list(extents, "extents"))),
        _int(entries, "entries", 0), _int(width, "width", 0),
        tuple((_str(t, "tensor"), _read_region(r)) for t, r in
              (_list(x, "view", 2) for x in _list(views, "views"))),
        None if out_view is None else _read_region(out_view),
    )  # fmt: skip


def _read_buffer(v: Any) -> Any:
    k, x = _one(v, "buffer")
    if k == "box":
        return _read_box(x, "buffer box")
    if k == "gather":
        shape_v, pieces_v = _list(x, "gather", 2)
        pieces = []
        for p in _list(pieces_v, "pieces"):
            src, cut = _list(p, "piece", 2)
            need, six, dix, iw = _list(cut, "cut", 4)
            pieces.append(
                (_int(src, "source", 0, 1 << 30),
                 Cut(_int(need, "need", -1, 1 << 20), _read_ix(six), _read_ix(dix),
                     _int(iw, "index words", 0)))
            )  # fmt: skip
        return Gather(shape_field(shape_v), tuple(pieces))
    raise _fail(f"unknown buffer kind {k!r}")


def _read_kernel(v: Any) -> TermKernel:
    coeff, spec, factors, gates, mults, out, par, leaf, widen = _list(v, "kernel", 9)
    spec = _str(spec, "spec", 512)
    if not all(c.isascii() and (c.isalpha() or c in ",->") for c in spec) or spec.count("->") != 1:
        raise _fail(f"spec {spec[:40]!r} is not an einsum spec")
    leaf = _str(leaf, "leaf", 32)
    if leaf not in LEAVES:
        raise WireError("envelope", f"program: leaf routine {leaf!r} is not one this volunteer has")
    widen = _str(widen, "widen", 8)
    if widen:
        dtype_field(widen)
    pos = lambda xs, w: tuple(_int(p, w, 0, 64) for p in _list(xs, w))  # noqa: E731
    return TermKernel(
        _read_coeff(coeff), spec,
        tuple((_str(n, "tensor"), pos(p, "positions")) for n, p in
              (_list(f, "factor", 2) for f in _list(factors, "factors"))),
        pos(gates, "gates"), pos(mults, "multipliers"), pos(out, "out"), pos(par, "parallel"),
        leaf, widen,
    )  # fmt: skip


@dataclass(frozen=True)
class Program:
    """A decoded program: the unit, its leaf kernels, the output dtype, every input
    tensor's dtype, and what each block of the unit's ``needs`` holds."""

    unit: Unit
    kernels: tuple[TermKernel, ...]
    out_dtype: np.dtype
    dtypes: dict[str, np.dtype]
    holders: tuple[Any, ...]


def _read_holder(v: Any, what: str) -> Any:
    k, x = _one(v, what)
    if k == "span":
        return Span(shape_field(x))
    if k == "box":
        return _read_box(x, what)
    raise _fail(f"{what} must be a box or a span")


def decode(raw: bytes) -> Program:
    """Read a program (:func:`encode`'s bytes). Anything that is not a program of
    :data:`PROGRAM_VERSION` is a :class:`~.wire.WireError`."""
    tree = unpack(raw, 1 << 31)
    keys = {"program", "name", "proc", "first", "out_box", "steps", "needs", "holders", "final",
            "kernels", "out_dtype", "dtypes"}  # fmt: skip
    if not isinstance(tree, dict) or set(tree) != keys:
        raise _fail("not a program map")
    if tree["program"] != PROGRAM_VERSION or type(tree["program"]) is not int:
        raise WireError("envelope", f"program version {tree['program']!r} is not known here")
    out_box = _read_holder(tree["out_box"], "out box")
    steps = []
    for s in _list(tree["steps"], "steps"):
        bufs, boxes, works = _list(s, "step", 3)
        pairs = (_list(x, "buffer", 2) for x in _list(bufs, "buffers"))
        steps.append(
            (
                tuple((_str(t, "tensor"), _read_buffer(b)) for t, b in pairs),
                tuple(_read_box(b, "compute box") for b in _list(boxes, "boxes")),
                tuple(_read_work(w) for w in _list(works, "works")),
            )
        )
    needs = tuple(
        (_str(t, "tensor"), tuple(_int(i, "key", 0) for i in _list(key, "key")))
        for t, key in (_list(n, "need", 2) for n in _list(tree["needs"], "needs"))
    )
    holders = tuple(_read_holder(h, "holder") for h in _list(tree["holders"], "holders"))
    if len(holders) != len(needs):
        raise _fail("one holder per need")
    if not isinstance(tree["final"], bool):
        raise _fail("final must be a boolean")
    unit = Unit(
        name=_str(tree["name"], "name"), proc=_int(tree["proc"], "proc", 0),
        first=_int(tree["first"], "first", 0), out_box=out_box, steps=tuple(steps),
        needs=needs, pieces=(), final=tree["final"],
    )  # fmt: skip
    kernels = tuple(_read_kernel(k) for k in _list(tree["kernels"], "kernels"))
    out_dtype = dtype_field(tree["out_dtype"])
    dtypes_v = tree["dtypes"]
    if not isinstance(dtypes_v, dict) or len(dtypes_v) > 64:
        raise _fail("dtypes must be a map")
    dtypes = {_str(t, "tensor"): dtype_field(d) for t, d in dtypes_v.items()}
    return Program(unit, kernels, out_dtype, dtypes, holders)


__all__ = ["PROGRAM_VERSION", "Program", "decode", "encode"]
