"""Runs on every rank under ``mpiexec -n 4``; driven by ``test_session_mpi.py``.

Sessions on the MPI runtime: a chain whose layouts agree moves nothing; every pair of
layouts of ``test_session.PAIRS`` on a 2 x 2 grid moves exactly the hand-computed oracle's
words (the copy kernel runs on MPI), and the values equal numpy's. Rank 0 prints one JSON
line per passed case.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_session import PAIRS, elementwise, matmul, oracle

import distal as dl

M = dl.Machine(2, 2)
rank = dl.Session("mpi").rank


def report(case: str) -> None:
    if rank == 0:
        print(json.dumps({"case": case, "ok": True}), flush=True)


n = 16
rng = np.random.default_rng(0)
b, c = rng.random((n, n)), rng.random((n, n))
lay = {"A": "ij", "B": "ij", "C": "ij", "D": "ij"}
sess = dl.Session("mpi")
sess.put("B", b)
sess.put("C", c)
sess.run(matmul(n, "A", "B", "C", lay, M))
res = sess.run(matmul(n, "D", "A", "C", lay, M))
assert res.value is None
assert sess.moved_words == 0
assert np.allclose(sess.get("D"), b @ c @ c)
report("agreeing chain")

res = sess.run(elementwise(n, "E", "ij", {"A": "i*"}, M, 2.0), gather=True)
assert sess.moved_words == n * n, sess.moved_words
assert np.allclose(res.value, 2 * (b @ c))
report("xy -> x*")

for grid, src, dst in PAIRS:
    if grid != (2, 2):
        continue
    for m in (6, 7):
        x = np.random.default_rng(m).random((m, m))
        s = dl.Session("mpi")
        s.put("B", x)
        s.run(elementwise(m, "A", src, {"B": "**"}, M, 3.0))
        s.run(elementwise(m, "D", dst, {"A": dst}, M, 0.5))
        assert s.moved_words == oracle((m, m), src, dst, grid), (src, dst, s.moved_words)
        assert np.allclose(s.get("D"), 1.5 * x)
        assert np.allclose(s.get("A"), 3.0 * x)
        report(f"{src} -> {dst} n={m}")
