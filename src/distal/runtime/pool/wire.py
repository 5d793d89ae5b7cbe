"""The pool's wire format: every message between the coordinator and a volunteer.

Messages are msgpack maps of plain values (strings, integers, floats, booleans, byte
strings, lists, maps), read with hard limits on every length and no extension types, so
reading one can allocate no more than the message's own size and can run no code. Array
data travels as raw little-endian bytes next to a declared dtype and shape; a reader checks
the declaration against what it expects *before* it allocates anything for the data.
Every map carries ``"v"`` (:data:`VERSION`) and ``"kind"``; a reader refuses another
version, an unknown kind, a missing or extra field, or a field of the wrong type.

The readers raise only :class:`WireError`, whose ``code`` names the refusal (the
coordinator reports it and excludes the sender; a volunteer refuses the unit); the
property-based tests in ``tests/pool`` feed them arbitrary bytes and arbitrary maps to hold
them to that. ``docs/pool.md`` documents every message.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from distal.errors import DistalError

VERSION = 1
"""The wire format's version; a message of another version is refused."""

CHUNK = 4 << 20
"""Bytes of array data per result message (the server's limit is 8 MiB a message)."""

MAX_MESSAGE = 8 << 20
"""No message is read beyond this many bytes (the NATS server's ``max_payload``)."""

MAX_DIMS = 8
MAX_ELEMENTS = 1 << 40
MAX_BLOCKS = 4096  # input blocks one unit may name
MAX_TEXT = 4096  # characters of any free-text field (a reason)

#: the dtypes an array on the wire may have: fixed-size numbers and booleans, little-endian
#: (``|`` for one byte); objects, strings, structured and big-endian arrays are refused
DTYPES = frozenset(
    {"|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8",
     "<c8", "<c16"}
)  # fmt: skip

DIGEST_HEX = 64  # BLAKE2b-256 in hex


class WireError(DistalError):
    """A message that is refused. ``code`` is one of :data:`REFUSALS`."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail


REFUSALS = (
    "unparsable",  # not msgpack, or msgpack with extension types / over the limits
    "envelope",  # not a map of this version and known kind; fields missing, extra, mistyped
    "dtype",  # a dtype outside DTYPES, or another than the one expected
    "shape",  # a shape that is not a shape, or not the one expected
    "size",  # a byte count that does not match the dtype and shape, or data of another length
    "parts",  # result parts out of order, too many, or of the wrong length
    "digest",  # data whose digest is not the one declared
    "unexpected",  # a result for an attempt the sender was not given
)


# -- reading and writing msgpack ------------------------------------------------------------


def _no_ext(code: int, data: bytes) -> Any:
    raise WireError("unparsable", f"msgpack extension type {code} is not part of the format")


def unpack(raw: bytes | memoryview, limit: int = MAX_MESSAGE) -> Any:
    """The msgpack value in ``raw``, read with every length bounded by ``raw``'s own and no
    extension types (:class:`WireError` ``unparsable`` otherwise)."""
    n = len(raw)
    if n > limit:
        raise WireError("unparsable", f"a message of {n} bytes is over the limit of {limit}")
    try:
        return msgpack.unpackb(
            raw, raw=False, strict_map_key=True, use_list=True, ext_hook=_no_ext,
            max_str_len=n, max_bin_len=n, max_array_len=n, max_map_len=n, max_ext_len=0,
        )  # fmt: skip
    except WireError:
        raise
    except Exception as e:  # msgpack's errors (ExtraData, FormatError, StackError, ...)
        raise WireError("unparsable", f"not a msgpack value ({type(e).__name__})") from None


def pack(obj: Any) -> bytes:
    """``obj`` (plain values only) as msgpack."""
    return msgpack.packb(obj, use_bin_type=True, strict_types=False)


# -- field checks --------------------------------------------------------------------------


def envelope(msg: Any, kinds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``msg`` if it is a map of this version whose kind is one of ``kinds`` with exactly
    that kind's fields (``{name: type or tuple of types}``; a name ending in ``?`` is
    optional)."""
    if not isinstance(msg, dict):
        raise WireError("envelope", f"a message must be a map, not {type(msg).__name__}")
    if msg.get("v") != VERSION or type(msg.get("v")) is not int:
        raise WireError("envelope", f"version {msg.get('v')!r} is not {VERSION}")
    kind = msg.get("kind")
    if not isinstance(kind, str) or kind not in kinds:
        raise WireError("envelope", f"kind {kind!r} is not one of {sorted(kinds)}")
    spec = kinds[kind]
    allowed = {"v", "kind", *(k.rstrip("?") for k in spec)}
    extra = set(msg) - allowed
    if extra:
        raise WireError("envelope", f"{kind}: unknown field(s) {sorted(map(str, extra))[:5]}")
    for k, t in spec.items():
        name, optional = k.rstrip("?"), k.endswith("?")
        if name not in msg:
            if optional:
                continue
            raise WireError("envelope", f"{kind}: field {name!r} is missing")
        v = msg[name]
        if not _typed(v, t):
            raise WireError("envelope", f"{kind}: field {name!r} is a {type(v).__name__}")
    return msg


def _typed(v: Any, t: Any) -> bool:
    ts = t if isinstance(t, tuple) else (t,)
    if isinstance(v, bool):
        return bool in ts
    if int in ts and type(v) is int:
        return True
    if float in ts and type(v) in (float, int):
        return math.isfinite(v) if isinstance(v, float) else True
    return any(type(v) is x for x in ts if x not in (int, float, bool))


def token(v: Any, what: str, limit: int = 64) -> str:
    """A subject-safe identifier (letters, digits, ``_``, ``-``)."""
    if not isinstance(v, str) or not 0 < len(v) <= limit:
        raise WireError("envelope", f"{what} must be a short string")
    if not all(c.isascii() and (c.isalnum() or c in "_-") for c in v):
        raise WireError("envelope", f"{what} {v[:20]!r} has characters outside [A-Za-z0-9_-]")
    return v


def text(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise WireError("envelope", f"{what} must be a string")
    return v[:MAX_TEXT]


def digest_field(v: Any, what: str = "digest") -> str:
    if not isinstance(v, str) or len(v) != DIGEST_HEX:
        raise WireError("envelope", f"{what} must be {DIGEST_HEX} hex digits")
    if any(c not in "0123456789abcdef" for c in v):
        raise WireError("envelope", f"{what} must be lower-case hex")
    return v


def dtype_field(v: Any, expect: np.dtype | None = None) -> np.dtype:
    """A dtype string from :data:`DTYPES` (and ``expect``'s, when given)."""
    if not isinstance(v, str) or v not in DTYPES:
        shown = repr(v)[:40]
        raise WireError("dtype", f"dtype {shown} is not a little-endian number type")
    dt = np.dtype(v)
    if expect is not None and dt != np.dtype(expect):
        raise WireError("dtype", f"dtype {v} is not the expected {np.dtype(expect).str}")
    return dt


def shape_field(v: Any, expect: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """A shape: at most :data:`MAX_DIMS` non-negative integers, at most :data:`MAX_ELEMENTS`
    elements (and ``expect``, when given)."""
    if not isinstance(v, list) or len(v) > MAX_DIMS:
        raise WireError("shape", f"a shape must be a list of at most {MAX_DIMS} integers")
    if not all(type(x) is int and 0 <= x <= MAX_ELEMENTS for x in v):
        raise WireError("shape", "a shape's extents must be integers in [0, 2^40]")
    shape = tuple(v)
    if math.prod(shape) > MAX_ELEMENTS:
        raise WireError("shape", f"shape {shape} has more than 2^40 elements")
    if expect is not None and shape != tuple(expect):
        raise WireError("shape", f"shape {shape} is not the expected {tuple(expect)}")
    return shape


def nbytes_of(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    return int(dtype.itemsize) * math.prod(shape)


def array_digest(dtype: np.dtype, shape: tuple[int, ...], data: bytes | memoryview) -> str:
    """BLAKE2b-256 of an array's dtype, shape and bytes: equal to
    :func:`distal.runtime.checkpoint_auth.content_digest` of the array."""
    dims = list(shape) if shape else [1]
    h = hashlib.blake2b(f"{np.dtype(dtype).str}{dims}|".encode(), digest_size=32)
    if len(data):
        h.update(data)
    return h.hexdigest()


def array_bytes(arr: np.ndarray) -> memoryview:
    """An array's data as little-endian C-order bytes (no copy where it already is)."""
    a = np.asarray(arr)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    a = np.ascontiguousarray(a)
    return memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")


# -- volunteer -> coordinator -----------------------------------------------------------------

HELLO = {
    "hello": {"versions": list, "cpus": int, "memory": int, "slots": int, "software": str},
    "bye": {"attempt?": str},
}

RESULT = {
    "started": {"fetched": int, "fetch_seconds": float},
    "result": {"part": int, "parts": int, "head?": dict, "data": bytes},
    "failed": {"reason": str},
    "refuse": {"reason": str},
}

HEAD = {"dtype": str, "shape": list, "nbytes": int, "digest": str, "seconds": float,
        "iterations": int, "held": int}  # fmt: skip


@dataclass(frozen=True)
class Hello:
    versions: tuple[int, ...]
    cpus: int
    memory: int
    slots: int
    software: str


def read_hello(raw: bytes) -> Hello | None:
    """A volunteer's ``hello`` (None for its ``bye``)."""
    msg = envelope(unpack(raw, 1 << 16), HELLO)
    if msg["kind"] == "bye":
        return None
    vs = msg["versions"]
    if not vs or len(vs) > 16 or not all(type(x) is int for x in vs):
        raise WireError("envelope", "hello: versions must be a short list of integers")
    for k in ("cpus", "memory", "slots"):
        if not 0 <= msg[k] <= 1 << 50:
            raise WireError("envelope", f"hello: {k} out of range")
    return Hello(tuple(vs), msg["cpus"], msg["memory"], max(1, min(msg["slots"], 64)),
                 text(msg["software"], "software"))  # fmt: skip


@dataclass(frozen=True)
class Expect:
    """What the coordinator expects back for one attempt: the output's dtype and shape."""

    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)

    @property
    def parts(self) -> int:
        return max(1, -(-self.nbytes // CHUNK))


@dataclass
class Assembly:
    """A result being received: its declared head, checked, and the buffer it fills (made
    only once the head has passed)."""

    expect: Expect
    head: dict[str, Any]
    buffer: bytearray
    received: int = 0
    next_part: int = 1


@dataclass(frozen=True)
class Outcome:
    """What a result message amounted to: ``done`` with the array (checked: dtype, shape,
    byte count, digest), a volunteer's ``failed`` or ``refuse`` with its reason, ``more``
    (parts to come), or ``started`` (its inputs are in place: ``iterations`` holds the bytes
    it fetched for it, ``seconds`` how long that took)."""

    kind: str
    array: np.ndarray | None = None
    reason: str = ""
    seconds: float = 0.0
    iterations: int = 0
    held: int = 0


@dataclass
class Receiver:
    """Reassembles one volunteer's result messages for the attempts it was given.

    Every check happens before the memory is taken: a head whose dtype, shape or byte count
    is not the expected one is refused without allocating; the buffer is the expected size
    and a part that would overflow it, or arrives out of order, is refused. The digest is
    checked over the whole before the array is handed out.
    """

    open: dict[str, Assembly] = field(default_factory=dict)

    def feed(self, attempt: str, expect: Expect | None, raw: bytes) -> Outcome:
        """One result message for ``attempt`` (``expect`` None: not an attempt the sender
        holds)."""
        if expect is None:
            raise WireError("unexpected", f"a result for attempt {attempt[:16]!r} it was not given")
        msg = envelope(unpack(raw), RESULT)
        if msg["kind"] == "started":
            if not 0 <= msg["fetched"] < 1 << 50 or not 0 <= msg["fetch_seconds"] < 1e9:
                raise WireError("envelope", "started: fetched or fetch_seconds out of range")
            return Outcome("started", iterations=msg["fetched"], seconds=msg["fetch_seconds"])
        if msg["kind"] != "result":
            self.open.pop(attempt, None)
            return Outcome(msg["kind"], reason=text(msg["reason"], "reason"))
        part, parts, data = msg["part"], msg["parts"], msg["data"]
        if parts != expect.parts:
            raise WireError("parts", f"{parts} parts declared, {expect.parts} expected")
        if part == 0:
            # a fresh start (a volunteer that reconnected sends its result again)
            head = self._head(msg.get("head"), expect)
            asm = Assembly(expect, head, bytearray(expect.nbytes))
            self.open[attempt] = asm
        else:
            asm = self.open.get(attempt)  # type: ignore[assignment]
            if asm is None or part != asm.next_part:
                self.open.pop(attempt, None)
                raise WireError("parts", f"part {part} arrived out of order")
            if "head" in msg:
                raise WireError("envelope", "only part 0 carries a head")
            asm.next_part += 1
        want = min(CHUNK, expect.nbytes - part * CHUNK) if expect.nbytes else 0
        if len(data) != want:
            self.open.pop(attempt, None)
            raise WireError("size", f"part {part} carries {len(data)} bytes, not {want}")
        asm.buffer[asm.received : asm.received + want] = data
        asm.received += want
        if part < parts - 1:
            return Outcome("more")
        del self.open[attempt]
        got = array_digest(expect.dtype, expect.shape, asm.buffer)
        if got != asm.head["digest"]:
            raise WireError("digest", "the data's digest is not the declared one")
        arr = np.frombuffer(asm.buffer, dtype=expect.dtype).reshape(expect.shape)
        head = asm.head
        return Outcome("done", arr, seconds=float(head["seconds"]),
                       iterations=int(head["iterations"]), held=int(head["held"]))  # fmt: skip

    @staticmethod
    def _head(head: Any, expect: Expect) -> dict[str, Any]:
        if not isinstance(head, dict):
            raise WireError("envelope", "part 0 must carry a head")
        extra = set(head) - set(HEAD)
        if extra or set(HEAD) - set(head):
            raise WireError("envelope", f"head fields {sorted(map(str, head))[:8]}")
        for k, t in HEAD.items():
            if not _typed(head[k], t):
                raise WireError("envelope", f"head field {k!r} is a {type(head[k]).__name__}")
        dt = dtype_field(head["dtype"], expect.dtype)
        shape = shape_field(head["shape"], expect.shape)
        if head["nbytes"] != nbytes_of(dt, shape):
            raise WireError("size", f"{head['nbytes']} bytes declared for {dt.str} {shape}")
        digest_field(head["digest"])
        if not 0 <= head["seconds"] < 1e9 or not 0 <= head["iterations"] < 1 << 62:
            raise WireError("envelope", "head: seconds or iterations out of range")
        if not 0 <= head["held"] < 1 << 50:
            raise WireError("envelope", "head: held out of range")
        return head

    def drop(self, attempt: str) -> None:
        self.open.pop(attempt, None)

    @property
    def held_bytes(self) -> int:
        return sum(len(a.buffer) for a in self.open.values())


def result_messages(arr: np.ndarray, seconds: float, iterations: int, held: int = 0) -> list[bytes]:
    """A volunteer's result as its messages (part 0 carries the head)."""
    data = array_bytes(arr)
    dt = np.dtype(arr.dtype).newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    n = len(data)
    parts = max(1, -(-n // CHUNK))
    head = {
        "dtype": np.dtype(dt).str, "shape": list(arr.shape), "nbytes": n,
        "digest": array_digest(dt, arr.shape, data), "seconds": float(seconds),
        "iterations": int(iterations), "held": int(held),
    }  # fmt: skip
    out = []
    for i in range(parts):
        msg: dict[str, Any] = {"v": VERSION, "kind": "result", "part": i, "parts": parts}
        if i == 0:
            msg["head"] = head
        msg["data"] = bytes(data[i * CHUNK : (i + 1) * CHUNK])
        out.append(pack(msg))
    return out


def started(fetched: int, fetch_seconds: float) -> bytes:
    """A volunteer's word that a unit's inputs are in place and it computes now."""
    return pack({"v": VERSION, "kind": "started", "fetched": int(fetched),
                 "fetch_seconds": float(fetch_seconds)})  # fmt: skip


def report(kind: str, reason: str) -> bytes:
    """A volunteer's ``failed`` (the unit could not be computed) or ``refuse`` (it will not
    compute it: a version, dtype or kernel it does not know, or over its limits)."""
    assert kind in ("failed", "refuse")
    return pack({"v": VERSION, "kind": kind, "reason": reason[:MAX_TEXT]})


# -- coordinator -> volunteer ----------------------------------------------------------------

BLOCK = {"digest": str, "dtype": str, "shape": list}

UNIT = {
    "unit": {
        "run": str, "attempt": str, "name": str, "program": dict, "blocks": list,
        "out": dict, "work": int, "deadline": float,
    },
}  # fmt: skip

CONTROL = {"cancel": {"attempt": str}, "stop": {"reason": str}}


@dataclass(frozen=True)
class BlockRef:
    """An input block by content: its digest, dtype and shape."""

    digest: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dtype, self.shape)

    def to_wire(self) -> dict[str, Any]:
        return {"digest": self.digest, "dtype": self.dtype.str, "shape": list(self.shape)}


def block_ref(v: Any) -> BlockRef:
    if not isinstance(v, dict) or set(v) != set(BLOCK):
        raise WireError("envelope", "a block reference is {digest, dtype, shape}")
    return BlockRef(digest_field(v["digest"]), dtype_field(v["dtype"]), shape_field(v["shape"]))


@dataclass(frozen=True)
class UnitMsg:
    """A unit of work as a volunteer reads it (validated; the program still to decode)."""

    run: str
    attempt: str
    name: str
    program: BlockRef | bytes
    blocks: tuple[BlockRef, ...]
    out: Expect
    work: int
    deadline: float

    def to_wire(self) -> bytes:
        prog = (
            {"inline": self.program}
            if isinstance(self.program, bytes)
            else {"ref": self.program.to_wire()}
        )
        return pack(
            {
                "v": VERSION, "kind": "unit", "run": self.run, "attempt": self.attempt,
                "name": self.name, "program": prog,
                "blocks": [b.to_wire() for b in self.blocks],
                "out": {"dtype": self.out.dtype.str, "shape": list(self.out.shape)},
                "work": int(self.work), "deadline": float(self.deadline),
            }
        )  # fmt: skip

    @property
    def input_bytes(self) -> int:
        return sum(b.nbytes for b in self.blocks)


def read_unit(raw: bytes) -> UnitMsg:
    """A unit message, every field checked (the volunteer's side)."""
    msg = envelope(unpack(raw), UNIT)
    run, attempt = token(msg["run"], "run"), token(msg["attempt"], "attempt")
    name = text(msg["name"], "name")[:200]
    prog = msg["program"]
    program: BlockRef | bytes
    if set(prog) == {"inline"} and isinstance(prog["inline"], bytes):
        program = prog["inline"]
    elif set(prog) == {"ref"}:
        program = block_ref(prog["ref"])
        if program.dtype != np.dtype("|u1") or len(program.shape) != 1:
            raise WireError("envelope", "a program reference names a byte string (|u1, 1-d)")
    else:
        raise WireError("envelope", "program must be {inline: bytes} or {ref: block}")
    blocks = msg["blocks"]
    if len(blocks) > MAX_BLOCKS:
        raise WireError("envelope", f"a unit names at most {MAX_BLOCKS} blocks")
    out = msg["out"]
    if not isinstance(out, dict) or set(out) != {"dtype", "shape"}:
        raise WireError("envelope", "out must be {dtype, shape}")
    if not 0 <= msg["work"] < 1 << 62 or not 0 <= msg["deadline"] < 1e9:
        raise WireError("envelope", "work or deadline out of range")
    return UnitMsg(
        run, attempt, name, program, tuple(block_ref(b) for b in blocks),
        Expect(dtype_field(out["dtype"]), shape_field(out["shape"])),
        msg["work"], float(msg["deadline"]),
    )  # fmt: skip


def read_control(raw: bytes) -> dict[str, Any]:
    msg = envelope(unpack(raw, 1 << 16), CONTROL)
    if msg["kind"] == "cancel":
        token(msg["attempt"], "attempt")
    return msg


def hello(versions: tuple[int, ...], cpus: int, memory: int, slots: int, software: str) -> bytes:
    return pack({"v": VERSION, "kind": "hello", "versions": list(versions), "cpus": cpus,
                 "memory": memory, "slots": slots, "software": software})  # fmt: skip


def bye(attempt: str | None = None) -> bytes:
    msg: dict[str, Any] = {"v": VERSION, "kind": "bye"}
    if attempt:
        msg["attempt"] = attempt
    return pack(msg)


def control(kind: str, **fields: Any) -> bytes:
    return pack({"v": VERSION, "kind": kind, **fields})


__all__ = [
    "CHUNK",
    "DTYPES",
    "REFUSALS",
    "VERSION",
    "BlockRef",
    "Expect",
    "Hello",
    "Outcome",
    "Receiver",
    "UnitMsg",
    "WireError",
    "array_bytes",
    "array_digest",
    "block_ref",
    "bye",
    "control",
    "hello",
    "pack",
    "read_control",
    "read_hello",
    "read_unit",
    "report",
    "result_messages",
    "started",
    "unpack",
]
