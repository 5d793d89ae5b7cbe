"""The wire format of an :class:`~distal.runtime.executable.Executable`: msgpack, versioned,
no pickle.

A serialized executable is ``MAGIC`` (8 bytes), the format ``VERSION`` (2 bytes, little
endian) and one msgpack document. The document is a tree of msgpack values in which

* ``nil``, booleans, integers, floats and strings are themselves;
* an *array* is a Python tuple (boxes, instruction lists, ...);
* a *map with one integer key* is anything else, the key saying what (:data:`TAGS`):
  ``{LIST: [...]}``, ``{DICT: [k0, v0, k1, v1, ...]}`` (keys in insertion order, of any
  kind), ``{FROZENSET: [...]}`` (items sorted), ``{COMPLEX: [re, im]}``, ``{DTYPE: "<f8"}``,
  ``{ARRAY: [ref, dtype, shape, bytes]}`` (C order, little endian, numeric and boolean
  dtypes only), ``{SCALAR: [dtype, bytes]}`` (a numpy scalar), ``{SLICE: [start, stop,
  step]}``, ``{ELLIPSIS: []}``, ``{REF: ref}``, and one tag
  per class of the plan IR (``{tag: [ref, field, ...]}`` for the classes whose identity
  matters, ``{tag: [field, ...]}`` for the others, the fields in their dataclass order).

Objects whose identity matters (arrays, regions, tensors, index variables, leaves over
stored entries, sparse patterns, placements, machines) are written once: their first
occurrence carries a reference number (``ref``, counted from 0 in order of first
occurrence) and every later one is ``{REF: ref}``, so what was shared is shared again after
reading, and a region's parent is the very object its sibling parts name.

Reading constructs only the classes of :data:`TAGS`, through their constructors (which
check their arguments) and never evaluates, imports or unpickles anything. Bytes that are
not such a document, or an unknown version, are an :class:`~distal.errors.InputError`.
The format is documented for other implementations in ``docs/executable.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from distal.distribution.machine import Machine
from distal.distribution.notation import DimRule, Distribution
from distal.distribution.partition import Placement
from distal.errors import InputError, InternalError
from distal.kernels.leaf import TermKernel
from distal.kernels.passes import Pass
from distal.lang.concrete import Statement, Term
from distal.lang.nodes import (
    Access,
    Add,
    Assignment,
    IndexVar,
    Literal,
    Mul,
    Neg,
    Restrict,
    Sum,
    Tensor,
)
from distal.plan import ir
from distal.plan.region import Entries, Location, Rows
from distal.plan.stats import Stats
from distal.sparse.array import SparseArray
from distal.sparse.formats import Format

MAGIC = b"\x89DISTALX"
#: the version this module writes; :data:`READS` are the versions it reads
VERSION = 1
READS = (1,)

# containers and values (tags 0-15)
LIST, DICT, FROZENSET, COMPLEX, DTYPE, ARRAY, REF, SCALAR, SLICE, ELLIPSIS = range(10)
#: tags 96-111 are the volunteer pool's own records (:func:`register` from ``runtime/pool``)
POOL_TAGS = range(96, 112)

#: dtype kinds an array or a dtype may have (numbers and booleans: nothing that holds objects)
KINDS = "biufc"
#: the most dimensions an array may have
MAX_NDIM = 32


class Malformed(Exception):
    """What the reader raises inside; :func:`loads` turns it into an ``InputError``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Kind:
    """How one class is written: its tag, whether its identity matters (written once, then
    referred to), how to take it apart into fields and build it again from them."""

    tag: int
    cls: type
    shared: bool
    fields: Callable[[Any], tuple]
    build: Callable[..., Any]


def _dataclass_kind(tag: int, cls: type, shared: bool = False) -> Kind:
    names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
    return Kind(tag, cls, shared, lambda x: tuple(getattr(x, n) for n in names), cls)


def _machine(levels: tuple) -> Machine:
    m = Machine(*levels[0])
    for lv in levels[1:]:
        m = m.nest(Machine(*lv))
    return m


def _tensor(name: str, shape: tuple, dtype: np.dtype, fmt: Format, dist: Any, m: Any) -> Tensor:
    return Tensor(name, shape, dist=dist, machine=m, dtype=dtype, format=fmt)


def _tensor_fields(t: Tensor) -> tuple:
    dist = list(t.dist) if isinstance(t.dist, list | tuple) else t.dist
    return (t.name, t.shape, t.dtype, t.format, dist, t.machine)


def _pattern(shape: tuple, fmt: Format, pos: tuple, crd: tuple, dtype: Any, offset: tuple) -> Any:
    """A sparse pattern read back: its arrays checked by ``SparseArray``, its values zeros."""
    count = 1  # positions of the last level
    for k, c in enumerate(crd):
        count = count * shape[fmt.order[k]] if c is None else len(c)
    zeros = np.zeros(count, np.dtype(dtype))
    checked = SparseArray(shape, fmt, list(pos), list(crd), zeros, offset=offset)
    # then made of the arrays read, which keeps what patterns shared shared (an SDDMM's
    # output pattern is its sparse input's)
    levels = []
    for k, lv in enumerate(checked.levels):
        for a in (pos[k], crd[k]):
            if a is not None and a.dtype != np.int64:
                raise Malformed(f"level {k} of a pattern has {a.dtype} indices, not int64")
        levels.append(dataclasses.replace(lv, pos=pos[k], crd=crd[k]))
    return SparseArray._make(tuple(shape), fmt, levels, zeros, tuple(offset))


def _pattern_fields(a: SparseArray) -> tuple:
    """A sparse array is written as its pattern: the plan needs where entries are stored,
    never their values (a bound input's values are the run's, not the executable's)."""
    return (a.shape, a.format, a.pos, a.crd, a.dtype, a.offset)


_STATS = tuple(f.name for f in dataclasses.fields(Stats))


def _stats(*lists: Any) -> Stats:
    return Stats(*lists)


_KINDS: list[Kind] = [
    # the plan IR
    _dataclass_kind(16, ir.Plan),
    _dataclass_kind(17, ir.Message),
    _dataclass_kind(18, ir.Fetch),
    _dataclass_kind(19, ir.Compute),
    _dataclass_kind(20, ir.OpenOutput),
    _dataclass_kind(21, ir.Flush),
    _dataclass_kind(22, ir.Forward),
    _dataclass_kind(23, ir.Combine),
    _dataclass_kind(24, ir.Reduce),
    _dataclass_kind(25, ir.SendFinal),
    _dataclass_kind(26, ir.RecvFinal),
    _dataclass_kind(27, ir.EntryWork, shared=True),
    _dataclass_kind(28, ir.TermWork, shared=True),
    _dataclass_kind(29, Rows, shared=True),
    _dataclass_kind(30, Entries, shared=True),
    _dataclass_kind(31, Location),
    # where tensors live
    Kind(32, Machine, True, lambda m: (m.levels,), _machine),
    _dataclass_kind(33, Placement, shared=True),
    _dataclass_kind(34, Distribution),
    _dataclass_kind(35, DimRule),
    # the statement
    Kind(40, IndexVar, True, lambda v: (v.name,), IndexVar),
    Kind(41, Tensor, True, _tensor_fields, _tensor),
    _dataclass_kind(42, Access),
    _dataclass_kind(43, Literal),
    _dataclass_kind(44, Add),
    _dataclass_kind(45, Mul),
    _dataclass_kind(46, Neg),
    _dataclass_kind(47, Sum),
    _dataclass_kind(51, Restrict),
    _dataclass_kind(48, Assignment),
    _dataclass_kind(49, Term),
    _dataclass_kind(50, Statement),
    # formats, patterns, leaves, stats
    Kind(56, Format, False, lambda f: (f.levels, f.order), Format),
    Kind(57, SparseArray, True, _pattern_fields, _pattern),
    _dataclass_kind(58, TermKernel),
    _dataclass_kind(60, Pass),
    Kind(59, Stats, False, lambda s: tuple(getattr(s, n) for n in _STATS), _stats),
]

#: every class the format knows, by its tag
TAGS: dict[int, Kind] = {}
_BY_CLASS: dict[type, Kind] = {}


def dataclass_kind(tag: int, cls: type, shared: bool = False) -> Kind:
    """How a frozen dataclass is written: its ``__init__`` fields in declaration order, read
    back through its constructor (for :func:`register`)."""
    return _dataclass_kind(tag, cls, shared)


def registered(cls: type) -> bool:
    """Whether the format knows ``cls``."""
    return cls in _BY_CLASS


def register(kind: Kind) -> None:
    """Add a class to the format (the executable's own records register themselves). A tag
    or a class is registered once."""
    if kind.tag in TAGS or kind.tag <= REF or kind.cls in _BY_CLASS:
        raise InternalError(f"tag {kind.tag} or class {kind.cls.__name__} is registered already")
    TAGS[kind.tag] = kind
    _BY_CLASS[kind.cls] = kind


for _k in _KINDS:
    register(_k)


# -- writing ----------------------------------------------------------------------------------


class _Writer:
    """One document: the references given so far (by identity; the objects are kept alive
    while it writes, so no identity is reused)."""

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}
        self.alive: list[Any] = []

    def _ref(self, x: Any) -> int | None:
        got = self.refs.get(id(x))
        if got is None:
            self.refs[id(x)] = len(self.alive)
            self.alive.append(x)
        return got

    def value(self, x: Any) -> Any:
        t = type(x)
        if x is None or t is bool or t is int or t is float or t is str:
            return x
        if t is tuple:
            return [self.value(y) for y in x]
        if isinstance(x, np.ndarray):
            return self._array(x)
        if isinstance(x, np.generic):  # (a numpy scalar's type decides numpy's promotion)
            data = x.astype(x.dtype.newbyteorder("<")).tobytes()
            return {SCALAR: [_dtype_text(x.dtype), data]}
        kind = _BY_CLASS.get(t)
        if kind is not None:
            if kind.shared:
                got = self._ref(x)
                if got is not None:
                    return {REF: got}
                return {kind.tag: [self.refs[id(x)], *[self.value(y) for y in kind.fields(x)]]}
            return {kind.tag: [self.value(y) for y in kind.fields(x)]}
        if t is list:
            return {LIST: [self.value(y) for y in x]}
        if t is dict:
            flat: list[Any] = []
            for k, v in x.items():
                flat += [self.value(k), self.value(v)]
            return {DICT: flat}
        if t is frozenset:
            return {FROZENSET: [self.value(y) for y in sorted(x, key=_order)]}
        if t is complex:
            return {COMPLEX: [x.real, x.imag]}
        if t is slice:
            return {SLICE: [self.value(x.start), self.value(x.stop), self.value(x.step)]}
        if x is Ellipsis:
            return {ELLIPSIS: []}
        if isinstance(x, np.dtype):
            return {DTYPE: _dtype_text(x)}
        raise InternalError(f"an executable cannot hold a {t.__name__} ({x!r:.80})")

    def _array(self, x: np.ndarray) -> Any:
        got = self._ref(x)
        if got is not None:
            return {REF: got}
        a = np.ascontiguousarray(x)
        text = _dtype_text(a.dtype)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        return {ARRAY: [self.refs[id(x)], text, list(a.shape), a.tobytes()]}


def _order(x: Any) -> tuple:
    """Sort key of a frozenset's items (index variables by name, anything else by text)."""
    return (type(x).__name__, getattr(x, "name", None) or repr(x))


def _dtype_text(d: np.dtype) -> str:
    if d.kind not in KINDS or d.fields is not None or d.subdtype is not None:
        raise InternalError(f"an executable holds numeric arrays only, not {d}")
    return d.newbyteorder("<").str if d.byteorder == ">" else d.str


def dumps(root: Any) -> bytes:
    """``root`` written in the format (see the module docstring)."""
    doc = _Writer().value(root)
    try:
        body = msgpack.packb(doc, use_bin_type=True)
    except (OverflowError, ValueError, TypeError) as e:
        raise InternalError(f"an executable could not be written: {e}") from e
    return MAGIC + VERSION.to_bytes(2, "little") + body


# -- reading ----------------------------------------------------------------------------------


class _Reader:
    def __init__(self) -> None:
        self.objects: list[Any] = []

    def value(self, x: Any) -> Any:
        t = type(x)
        if x is None or t is bool or t is int or t is float or t is str:
            return x
        if t is list:
            return tuple(self.value(y) for y in x)
        if t is not dict or len(x) != 1:
            raise Malformed(f"unexpected {t.__name__} in the document")
        ((tag, body),) = x.items()
        if tag == REF:
            if type(body) is not int or not 0 <= body < len(self.objects):
                raise Malformed(f"reference {body!r} to no object")
            got = self.objects[body]
            if got is None:
                raise Malformed(f"reference {body} to an object being read (a cycle)")
            return got
        if type(body) is not list and tag != DTYPE:
            raise Malformed(f"tag {tag!r} without a list of fields")
        if tag == LIST:
            return [self.value(y) for y in body]
        if tag == DICT:
            if len(body) % 2:
                raise Malformed("a mapping with an odd number of items")
            items = [self.value(y) for y in body]
            return dict(zip(items[::2], items[1::2], strict=True))
        if tag == FROZENSET:
            return frozenset(self.value(y) for y in body)
        if tag == COMPLEX:
            re, im = body
            return complex(float(re), float(im))
        if tag == SLICE:
            start, stop, step = (self.value(y) for y in body)
            if not all(v is None or type(v) is int for v in (start, stop, step)):
                raise Malformed("a slice of other than integers")
            return slice(start, stop, step)
        if tag == ELLIPSIS:
            return Ellipsis
        if tag == DTYPE:
            return _dtype(body)
        if tag == ARRAY:
            return self._array(body)
        if tag == SCALAR:
            text, data = body
            dtype = _dtype(text)
            if type(data) is not bytes or len(data) != dtype.itemsize:
                raise Malformed(f"a {dtype} scalar of {len(data)} bytes")
            return np.frombuffer(data, dtype)[0]
        kind = TAGS.get(tag)
        if kind is None:
            raise Malformed(f"unknown tag {tag!r}")
        if kind.shared:
            slot = self._reserve(body)
            body = body[1:]
        fields = [self.value(y) for y in body]
        obj = kind.build(*fields)
        if kind.shared:
            self.objects[slot] = obj
        return obj

    def _reserve(self, body: list) -> int:
        """The reference number a shared object's first occurrence carries: the next one."""
        if not body or body[0] != len(self.objects) or type(body[0]) is not int:
            raise Malformed("a shared object out of order")
        self.objects.append(None)
        return body[0]

    def _array(self, body: list) -> np.ndarray:
        slot = self._reserve(body)
        _, text, shape, data = body
        dtype = _dtype(text)
        if (
            type(shape) is not list
            or len(shape) > MAX_NDIM
            or any(type(n) is not int or n < 0 for n in shape)
            or type(data) is not bytes
        ):
            raise Malformed("an array with a bad shape or body")
        if math.prod(shape) * dtype.itemsize != len(data):
            raise Malformed(f"an array of shape {shape} and dtype {dtype} with {len(data)} bytes")
        arr = np.frombuffer(data, dtype).reshape(shape)
        self.objects[slot] = arr
        return arr


def _dtype(text: Any) -> np.dtype:
    if type(text) is not str:
        raise Malformed(f"dtype {text!r} is not a string")
    try:
        d = np.dtype(text)
    except TypeError as e:
        raise Malformed(f"unknown dtype {text!r}") from e
    if d.kind not in KINDS or d.fields is not None or d.subdtype is not None or d.byteorder == ">":
        raise Malformed(f"dtype {text!r} is not a little-endian number type")
    return d


def version_of(data: Any) -> int:
    """The format version of serialized bytes.

    Raises:
        InputError: not bytes of this format.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InputError(
            f"an executable is read from bytes (exe.dumps()), not a {type(data).__name__}"
        )
    head = bytes(data[: len(MAGIC) + 2])
    if len(head) < len(MAGIC) + 2 or not head.startswith(MAGIC):
        raise InputError("these bytes are not a serialized distal executable (no header)")
    return int.from_bytes(head[len(MAGIC) :], "little")


def loads(data: Any) -> Any:
    """The object serialized in ``data`` (bytes :func:`dumps` wrote).

    Raises:
        InputError: not bytes of this format, a version this module does not read, or a
            malformed document; never an exception from inside.
    """
    version = version_of(data)
    if version not in READS:
        raise InputError(
            f"executable format version {version} is not one this distal reads ({list(READS)}); "
            "serialize it again with this version of distal"
        )
    try:
        doc = msgpack.unpackb(
            bytes(data[len(MAGIC) + 2 :]), raw=False, strict_map_key=False, use_list=True
        )
        return _Reader().value(doc)
    except InputError as e:
        raise InputError(f"a malformed executable: {e}") from None
    except Exception as e:  # malformed in any way: a clear error, never one from inside
        raise InputError(f"a malformed executable ({type(e).__name__}: {e})") from None


__all__ = [
    "MAGIC",
    "POOL_TAGS",
    "READS",
    "TAGS",
    "VERSION",
    "Kind",
    "dataclass_kind",
    "dumps",
    "loads",
    "register",
    "registered",
    "version_of",
]
