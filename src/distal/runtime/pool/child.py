"""The process a volunteer computes in: ``python -m distal.runtime.pool.child DIR``.

The volunteer's main process (:mod:`.volunteer`) talks to the network; this one only
computes, inside the limits the donor set (started by :class:`.sandbox.ChildProcess`: an
address-space limit, a CPU affinity mask, a lower priority, BLAS threads to match).

Blocks and programs are files in the volunteer's block directory ``DIR`` (a private
directory on ``/dev/shm`` where there is one), named by their digest and written by the
main process as they arrive, their digest checked before they get that name: the network
never waits for a computation, and a block is held once, in the page cache, mapped
read-only into this process for the units that read it. This process reads requests from
its standard input and answers on its standard output, each a frame::

    <u32 little-endian length> <msgpack map>

Requests: ``run`` (compute a program over blocks, writing the result to a file of the
directory; ``forget`` lists programs whose decoded form it may drop) and ``ping``.
Answers: ``done`` (the result's file, dtype, shape, seconds, iterations), ``error`` (a
reason; ``missing`` names files not there). It keeps decoded programs and their prepared
leaves over stored entries (the sparse leaves' index work) for the programs used most
recently. It never evaluates anything it reads: a program is decoded by
:func:`.program.decode` into distal's own classes and run by distal's leaf kernels.
"""

from __future__ import annotations

import os
import struct
import sys
import time
import traceback
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from distal.runtime.pool import program as programs
from distal.runtime.pool.wire import WireError, pack, unpack

HEADER = struct.Struct("<I")
MAX_HEADER = 1 << 20
PROGRAMS_KEPT = 32


def read_frame(f: BinaryIO) -> dict[str, Any] | None:
    """One frame's map from ``f`` (None at the end of the stream)."""
    raw = f.read(HEADER.size)
    if len(raw) < HEADER.size:
        return None
    (n,) = HEADER.unpack(raw)
    if n > MAX_HEADER:
        raise WireError("unparsable", f"a frame header of {n} bytes")
    head = unpack(f.read(n), MAX_HEADER)
    if not isinstance(head, dict):
        raise WireError("envelope", "a frame header must be a map")
    return head


def frame(head: dict[str, Any]) -> bytes:
    body = pack(head)
    return HEADER.pack(len(body)) + body


def compute(prog: programs.Program, arrays: list[np.ndarray], prepared: dict) -> tuple[
        np.ndarray, int, int]:  # fmt: skip
    """Run a program over its blocks (in the order of its ``needs``): the unit's output
    buffer, the iterations its leaves visited and the most elements it held beside its
    processor's owned blocks (its fetch buffers and partial output, measured on the arrays
    it made: what ``peak_words`` counts)."""
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
    held: list[int] = []
    out, _, iterations = tasks._compute(
        tasks._bare(prog.kernels, prog.out_dtype), unit, blocks, prepared=prepared, held=held
    )
    return out, iterations, max(held, default=0)


def load(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A block file mapped read-only (an empty array for an empty block)."""
    if not shape or 0 in shape or int(np.prod(shape)) == 0:
        return np.fromfile(path, dtype=dtype).reshape(shape)
    return np.memmap(path, dtype=dtype, mode="r", shape=tuple(shape))


class Child:
    """The compute loop's state: the block directory and the decoded programs kept."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.programs: OrderedDict[str, tuple[programs.Program, dict]] = OrderedDict()
        self.results = 0

    def program(self, digest: str) -> tuple[programs.Program, dict]:
        got = self.programs.get(digest)
        if got is None:
            got = (programs.decode((self.root / digest).read_bytes()), {})
            self.programs[digest] = got
            while len(self.programs) > PROGRAMS_KEPT:
                self.programs.popitem(last=False)
        else:
            self.programs.move_to_end(digest)
        return got

    def handle(self, head: dict[str, Any]) -> dict[str, Any]:
        op = head.get("op")
        if op == "ping":
            return {"op": "ok"}
        if op != "run":
            return {"op": "error", "reason": f"unknown request {str(op)[:20]!r}"}
        for d in head.get("forget", ()):
            self.programs.pop(str(d), None)
        prog_digest = str(head["program"])
        blocks = [(str(d), np.dtype(t), tuple(s)) for d, t, s in head["blocks"]]
        missing = [d for d in [prog_digest, *(b[0] for b in blocks)]
                   if not (self.root / d).exists()]  # fmt: skip
        if missing:
            return {"op": "error", "reason": "missing", "missing": missing}
        try:
            prog, prepared = self.program(prog_digest)
        except WireError as e:
            return {"op": "refuse", "reason": f"program refused: {e}"}
        t0 = time.perf_counter()
        try:
            arrays = [load(self.root / d, t, s) for d, t, s in blocks]
            out, iterations, held = compute(prog, arrays, prepared)
            out = np.asarray(out, order="C")  # (0-d stays 0-d)
            if out.dtype.byteorder == ">":
                out = out.astype(out.dtype.newbyteorder("<"))
        except MemoryError:
            return {"op": "error", "reason": "out of memory (the volunteer's limit)"}
        except Exception as e:  # a program distal's kernels cannot run: report, go on
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            return {"op": "error", "reason": f"the unit failed: {tb}"[:1000]}
        seconds = time.perf_counter() - t0
        self.results += 1
        name = f"result-{os.getpid()}-{self.results}"
        out.tofile(self.root / name)
        return {"op": "done", "file": name, "dtype": out.dtype.str, "shape": list(out.shape),
                "seconds": seconds, "iterations": int(iterations), "held": int(held)}  # fmt: skip


def main() -> int:
    from distal.runtime.elastic import tasks  # noqa: F401 - imported before the first unit

    root = Path(sys.argv[1])
    # answers go to a private copy of stdout; anything printed lands on stderr
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    inp = os.fdopen(0, "rb", buffering=1 << 16)
    child = Child(root)
    while True:
        try:
            head = read_frame(inp)
        except WireError as e:
            print(f"distal volunteer child: {e}", file=sys.stderr)
            return 2
        if head is None:
            return 0
        view = memoryview(frame(child.handle(head)))
        while len(view):
            view = view[out.write(view) :]


if __name__ == "__main__":
    sys.exit(main())
