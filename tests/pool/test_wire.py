"""The pool's wire format: every reader refuses what is not a message of its kind with a
named ``WireError``, before allocating for the data, whatever the bytes (property-based)."""

from __future__ import annotations

import pickle
import tracemalloc
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from distal.runtime.pool import wire
from distal.runtime.pool.wire import CHUNK, Expect, Receiver, WireError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# plain msgpack values: what a hostile peer can put in a well-formed document
plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
    | st.text(max_size=20) | st.binary(max_size=40),
    lambda kids: st.lists(kids, max_size=5)
    | st.dictionaries(st.text(max_size=8), kids, max_size=5),
    max_leaves=25,
)  # fmt: skip


def _result(arr: np.ndarray) -> list[bytes]:
    return wire.result_messages(arr, 0.5, 100)


def _msg(**fields: object) -> bytes:
    return wire.pack({"v": wire.VERSION, **fields})


class Evil:
    """Unpickling this runs a command (what a malicious volunteer would send)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        import os

        return (os.system, (f"touch {self.marker}",))


# -- well-formed results ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (CHUNK // 8 + 3,)])
@pytest.mark.parametrize("dtype", ["<f8", "<f4", "<c16", "<i8", "|b1"])
def test_a_result_comes_back_equal_in_one_part_or_several(shape: tuple, dtype: str) -> None:
    arr = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    rx = Receiver()
    exp = Expect(np.dtype(dtype), shape)
    msgs = _result(arr)
    assert len(msgs) == exp.parts
    for m in msgs[:-1]:
        assert rx.feed("a1", exp, m).kind == "more"
    out = rx.feed("a1", exp, msgs[-1])
    assert out.kind == "done"
    assert out.array is not None
    assert out.array.dtype == np.dtype(dtype)
    assert np.array_equal(out.array, arr)
    assert rx.held_bytes == 0


def test_a_big_endian_result_travels_little_endian() -> None:
    arr = np.arange(6, dtype=">f8").reshape(2, 3)
    out = Receiver().feed("a", Expect(np.dtype("<f8"), (2, 3)), _result(arr)[0])
    assert out.array is not None
    assert np.array_equal(out.array, arr)


def test_a_restarted_result_starts_over_without_blame() -> None:
    arr = np.ones(CHUNK // 8 * 2, "<f8")
    rx, exp = Receiver(), Expect(np.dtype("<f8"), arr.shape)
    msgs = _result(arr)
    assert rx.feed("a", exp, msgs[0]).kind == "more"
    for m in msgs[:-1]:  # the volunteer reconnected and sends it all again
        assert rx.feed("a", exp, m).kind == "more"
    assert rx.feed("a", exp, msgs[-1]).kind == "done"


def test_failed_and_refuse_reports_carry_their_reason() -> None:
    out = Receiver().feed("a", Expect(np.dtype("<f8"), (2,)), wire.report("failed", "oom"))
    assert out.kind == "failed"
    assert out.reason == "oom"


# -- what is refused, and as what --------------------------------------------------------------

EXP = Expect(np.dtype("<f8"), (4, 4))


def _head(**over: object) -> dict:
    arr = np.ones((4, 4))
    head = {
        "dtype": "<f8", "shape": [4, 4], "nbytes": 128, "seconds": 0.1, "iterations": 1,
        "held": 16,
        "digest": wire.array_digest(arr.dtype, arr.shape, arr.tobytes()),
    }  # fmt: skip
    head.update(over)
    return head


def _part(data: bytes = np.ones((4, 4)).tobytes(), **over: object) -> bytes:
    fields = {"kind": "result", "part": 0, "parts": 1, "head": _head(), "data": data}
    fields.update(over)
    return _msg(**fields)


REFUSED = {
    "garbage msgpack": (b"\xc1\xc1\xc1\x00garbage", "unparsable"),
    "truncated msgpack": (_part()[:-7], "unparsable"),
    "an extension type": (msgpack.packb(msgpack.ExtType(5, b"x")), "unparsable"),
    "not a map": (msgpack.packb([1, 2, 3]), "envelope"),
    "another version": (wire.pack({"v": 2, "kind": "result"}), "envelope"),
    "an unknown kind": (_msg(kind="exec", code="print(1)"), "envelope"),
    "an extra field": (_part(code=b"x"), "envelope"),
    "an object dtype": (_part(head=_head(dtype="|O")), "dtype"),
    "a string dtype": (_part(head=_head(dtype="<U8")), "dtype"),
    "a big-endian dtype": (_part(head=_head(dtype=">f8")), "dtype"),
    "a structured dtype": (_part(head=_head(dtype="[('a', '<f8')]")), "dtype"),
    "another number type": (_part(head=_head(dtype="<f4", nbytes=64)), "dtype"),
    "a shape 10^6 times too large": (
        _part(head=_head(shape=[4000, 4000], nbytes=128 * 10**6)), "shape"),
    "a shape of 2^60 elements": (_part(head=_head(shape=[2**30, 2**30])), "shape"),
    "a negative extent": (_part(head=_head(shape=[-4, -4])), "shape"),
    "a byte count that lies": (_part(head=_head(nbytes=8)), "size"),
    "truncated data": (_part(data=np.ones((4, 4)).tobytes()[:100]), "size"),
    "too much data": (_part(data=np.ones((4, 5)).tobytes()), "size"),
    "a wrong digest": (_part(data=np.zeros((4, 4)).tobytes()), "digest"),
    "more parts than the size": (_part(parts=3), "parts"),
    "a later part first": (_part(part=1, head=None), "parts"),
    "a head that is not a map": (_part(head=b"pickle"), "envelope"),
    "a head with code in it": (_part(head={**_head(), "eval": "1"}), "envelope"),
    "a nan in seconds": (_part(head=_head(seconds=float("nan"))), "envelope"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_malformed_reply_is_refused_by_name(case: str) -> None:
    raw, code = REFUSED[case]
    if case == "a later part first":
        raw = _msg(kind="result", part=1, parts=1, data=b"")
    rx = Receiver()
    with pytest.raises(WireError) as e:
        rx.feed("a1", EXP, raw)
    assert e.value.code == code, e.value
    assert rx.held_bytes == 0


def test_a_pickle_reply_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Evil(marker))
    for raw in (payload, _part(data=payload), _part(head=_head(dtype="|O"), data=payload)):
        with pytest.raises(WireError):
            Receiver().feed("a1", EXP, raw)
    with pytest.raises(WireError):
        wire.read_unit(payload)
    with pytest.raises(WireError):
        wire.read_hello(payload)
    assert not marker.exists()


def test_a_result_for_an_attempt_not_given_is_refused() -> None:
    with pytest.raises(WireError) as e:
        Receiver().feed("a9", None, _part())
    assert e.value.code == "unexpected"


def test_a_huge_declared_shape_allocates_nothing() -> None:
    """A head declaring 10^6 times the unit's output (and one declaring 8 TB with the right
    shape's dtype) is refused with no allocation of that size."""
    exp = Expect(np.dtype("<f8"), (1000, 1000))
    heads = [
        _head(shape=[1000, 1000 * 10**6], nbytes=8 * 10**12),
        _head(shape=[1000, 1000], nbytes=8 * 10**12),
    ]
    tracemalloc.start()
    try:
        for h in heads:
            with pytest.raises(WireError):
                Receiver().feed("a", exp, _part(head=h, data=b""))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_refused_by_name(raw: bytes) -> None:
    for read in (wire.read_unit, wire.read_hello, wire.read_control):
        try:
            read(raw)
        except WireError:
            pass
    try:
        Receiver().feed("a", EXP, raw)
    except WireError:
        pass


@given(plain)
def test_arbitrary_documents_are_refused_by_name(doc: object) -> None:
    raw = msgpack.packb(doc, use_bin_type=True)
    for read in (wire.read_unit, wire.read_hello, wire.read_control):
        try:
            read(raw)
        except WireError:
            pass
    try:
        Receiver().feed("a", EXP, raw)
    except WireError:
        pass


@given(st.dictionaries(st.sampled_from(["kind", "part", "parts", "head", "data", "v", "x"]),
                       plain, max_size=7),
       st.dictionaries(st.sampled_from([*list(wire.HEAD), "x"]), plain, max_size=8))  # fmt: skip
def test_result_shaped_documents_are_refused_by_name(doc: dict, head: dict) -> None:
    doc = {"v": wire.VERSION, "kind": "result", **doc}
    if "head" in doc:
        doc["head"] = head
    try:
        out = Receiver().feed("a", EXP, msgpack.packb(doc, use_bin_type=True))
    except WireError:
        return
    assert out.kind in ("more", "done", "failed", "refuse")


# -- units and hellos ----------------------------------------------------------------------------

DIGEST = "ab" * 32


def _unit(**over: object) -> dict:
    doc = {
        "v": 1, "kind": "unit", "run": "r1", "attempt": "a1", "name": "part-p0",
        "program": {"ref": {"digest": DIGEST, "dtype": "|u1", "shape": [10]}},
        "blocks": [{"digest": DIGEST, "dtype": "<f8", "shape": [4, 4]}],
        "out": {"dtype": "<f8", "shape": [4, 4]}, "work": 64, "deadline": 5.0,
    }  # fmt: skip
    doc.update(over)
    return doc


def test_a_unit_reads_back_as_written() -> None:
    u = wire.read_unit(wire.pack(_unit()))
    assert u.attempt == "a1"
    assert u.out == Expect(np.dtype("<f8"), (4, 4))
    assert u.blocks[0].nbytes == 128
    assert wire.read_unit(u.to_wire()) == u


@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"v": 2}, "envelope"),  # a version the volunteer does not know
        ({"out": {"dtype": "|O", "shape": [4]}}, "dtype"),
        ({"out": {"dtype": "<M8", "shape": [4]}}, "dtype"),
        ({"blocks": [{"digest": DIGEST, "dtype": "<U3", "shape": [4]}]}, "dtype"),
        ({"blocks": [{"digest": "zz", "dtype": "<f8", "shape": [4]}]}, "envelope"),
        ({"attempt": "a.b>"}, "envelope"),  # not a subject token
        ({"program": {"exec": "import os"}}, "envelope"),
    ],
)
def test_a_volunteer_refuses_a_unit_it_does_not_know(over: dict, code: str) -> None:
    with pytest.raises(WireError) as e:
        wire.read_unit(wire.pack(_unit(**over)))
    assert e.value.code == code


def test_hello_and_bye() -> None:
    h = wire.read_hello(wire.hello((1,), 2, 1 << 30, 2, "x"))
    assert h is not None
    assert h.cpus == 2
    assert wire.read_hello(wire.bye("a3")) is None
    with pytest.raises(WireError):
        wire.read_hello(wire.pack({"v": 1, "kind": "hello", "versions": [], "cpus": 1,
                                   "memory": 1, "slots": 1, "software": ""}))  # fmt: skip


def test_a_started_note_carries_what_was_fetched() -> None:
    out = Receiver().feed("a", EXP, wire.started(1 << 20, 0.5))
    assert out.kind == "started"
    assert out.iterations == 1 << 20
    assert out.seconds == 0.5
    with pytest.raises(WireError):
        Receiver().feed("a", EXP, _msg(kind="started", fetched=-1, fetch_seconds=0.5))
