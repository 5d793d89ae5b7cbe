"""The process a volunteer computes in: ``python -m distal.runtime.pool.child``.

The volunteer's main process (:mod:`.volunteer`) talks to the network; this one only
computes, inside the limits the donor set (started by :class:`.limits.ChildProcess`: an
address-space limit, a CPU affinity mask, a lower priority, BLAS threads to match). It
reads requests from its standard input and answers on its standard output, each a frame::

    <u32 little-endian length> <msgpack map> [<payload bytes: the map's "nbytes">]

Requests: ``put`` (a block or a program, by digest, with its bytes), ``drop`` (forget
one), ``run`` (compute a program over blocks it holds) and ``ping``. Answers: ``ok``,
``done`` (with the result's bytes), ``error`` (a reason). The blocks and decoded programs it
holds are its cache: the main process decides what stays. It never evaluates anything it
reads: a program is decoded by :func:`.program.decode` into distal's own classes and run
by distal's leaf kernels.
"""

from __future__ import annotations

import os
import struct
import sys
import time
import traceback
from typing import Any, BinaryIO

import numpy as np

from distal.runtime.pool import program as programs
from distal.runtime.pool.wire import WireError, array_bytes, array_digest, pack, unpack

HEADER = struct.Struct("<I")
MAX_HEADER = 1 << 20


def read_frame(f: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    """One frame from ``f``: its map and payload (None at the end of the stream)."""
    raw = f.read(HEADER.size)
    if len(raw) < HEADER.size:
        return None
    (n,) = HEADER.unpack(raw)
    if n > MAX_HEADER:
        raise WireError("unparsable", f"a frame header of {n} bytes")
    head = unpack(f.read(n), MAX_HEADER)
    if not isinstance(head, dict):
        raise WireError("envelope", "a frame header must be a map")
    size = head.get("nbytes", 0)
    payload = b""
    if isinstance(size, int) and size > 0:
        payload = f.read(size)
        if len(payload) != size:
            return None
    return head, payload


def frame(head: dict[str, Any], payload: bytes | memoryview = b"") -> list[bytes | memoryview]:
    """A frame's pieces, to write in order (``head["nbytes"]`` is set to the payload's)."""
    body = pack({**head, "nbytes": len(payload)})
    return [HEADER.pack(len(body)), body, payload]


def compute(prog: programs.Program, arrays: list[np.ndarray], prepared: dict) -> tuple[
        np.ndarray, int]:  # fmt: skip
    """Run a program over its blocks (in the order of its ``needs``): the unit's output
    buffer and the iterations its leaves visited."""
    from distal.runtime.elastic import tasks

    unit = prog.unit
    if len(arrays) != len(unit.needs):
        raise ValueError(f"{len(arrays)} blocks for a unit that needs {len(unit.needs)}")
    blocks = [
        (t, holder, a) for (t, _), holder, a in zip(unit.needs, prog.holders, arrays, strict=True)
    ]
    for t, holder, a in blocks:
        want = prog.dtypes.get(t)
        if want is not None and a.dtype != want:
            raise ValueError(f"block of {t!r} is {a.dtype.str}, the program says {want.str}")
        if isinstance(holder, tuple) and a.shape != tuple(hi - lo for lo, hi in holder):
            raise ValueError(f"block of {t!r} has shape {a.shape}, not its box's")
    ctx = tasks.Ctx("", prog.kernels, prog.out_dtype, None, worker=lambda: None)
    out, _, iterations = tasks._compute(ctx, unit, blocks, prepared=prepared)
    return out, iterations


class Child:
    """The compute loop's state: the blocks and programs held, by digest."""

    def __init__(self) -> None:
        self.blocks: dict[str, np.ndarray] = {}
        self.programs: dict[str, tuple[programs.Program, dict]] = {}

    def handle(self, head: dict[str, Any], payload: bytes) -> list[bytes | memoryview]:
        op = head.get("op")
        if op == "ping":
            return frame({"op": "ok"})
        if op == "drop":
            self.blocks.pop(str(head.get("digest")), None)
            self.programs.pop(str(head.get("digest")), None)
            return frame({"op": "ok"})
        if op == "put":
            digest, kind = str(head["digest"]), head.get("kind")
            if kind == "program":
                try:
                    prog = programs.decode(payload)
                except WireError as e:
                    return frame({"op": "error", "reason": f"program refused: {e}"})
                self.programs[digest] = (prog, {})
            else:
                dt, shape = np.dtype(head["dtype"]), tuple(head["shape"])
                if array_digest(dt, shape, payload) != digest:
                    return frame({"op": "error", "reason": "block digest mismatch"})
                arr = np.frombuffer(payload, dtype=dt).reshape(shape)
                self.blocks[digest] = arr
            return frame({"op": "ok"})
        if op == "run":
            prog_digest = str(head["program"])
            got = self.programs.get(prog_digest)
            missing = [d for d in head["blocks"] if d not in self.blocks]
            if got is None or missing:
                return frame({"op": "error", "reason": "missing", "missing": missing})
            prog, prepared = got
            t0 = time.perf_counter()
            try:
                out, iterations = compute(prog, [self.blocks[d] for d in head["blocks"]], prepared)
            except MemoryError:
                return frame({"op": "error", "reason": "out of memory (the volunteer's limit)"})
            except Exception as e:  # a program distal's kernels cannot run: report, go on
                tb = traceback.format_exception_only(type(e), e)[-1].strip()
                return frame({"op": "error", "reason": f"the unit failed: {tb}"[:1000]})
            seconds = time.perf_counter() - t0
            out = np.asarray(out)
            return frame(
                {"op": "done", "dtype": out.dtype.str, "shape": list(out.shape),
                 "seconds": seconds, "iterations": int(iterations)},
                array_bytes(out),
            )  # fmt: skip
        return frame({"op": "error", "reason": f"unknown request {str(op)[:20]!r}"})


def main() -> int:
    # answers go to a private copy of stdout; anything printed lands on stderr
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    inp = os.fdopen(0, "rb", buffering=1 << 20)
    child = Child()
    while True:
        try:
            got = read_frame(inp)
        except WireError as e:
            print(f"distal volunteer child: {e}", file=sys.stderr)
            return 2
        if got is None:
            return 0
        for piece in child.handle(*got):
            _write_all(out, piece)


def _write_all(f: Any, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        n = f.write(view)
        view = view[n:]


if __name__ == "__main__":
    sys.exit(main())
