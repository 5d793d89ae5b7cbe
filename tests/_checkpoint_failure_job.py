"""``test_checkpoint_failures.py``'s MPI job: a checkpointed session loop whose iteration 3
cannot be written by rank ``BAD`` alone (``OSError`` faked where it writes). Every rank
prints one JSON line: the error it ended with, the iteration and the last saved one."""

from __future__ import annotations

import errno
import json
import sys

import numpy as np

import distal as dl
from distal.runtime import checkpoint as ck

LOCATION, BAD, MODE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sess = dl.Session("mpi", checkpoint=LOCATION, checkpoint_errors=MODE)
real = ck.CheckpointStore.save


def save(self: ck.CheckpointStore, name: str, arr: np.ndarray) -> str:
    if sess.rank == BAD and self.run.endswith("/3"):
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(self, name, arr)


ck.CheckpointStore.save = save  # type: ignore[method-assign]
sess["x"] = np.zeros(16)
out: dict = {"rank": sess.rank, "error": None}
try:
    for _ in sess.iterations(6, keep=["x"], name="jacobi"):
        sess["x"] = sess["x"] * 0.5 + 1.0
except dl.CheckpointFailed as e:
    out.update(error=type(e).__name__, iteration=e.iteration, saved=e.saved)
out["x0"] = float(sess.get("x")[0])
out["failures"] = [it for _, it, _ in sess.save_failures]
print(json.dumps(out), flush=True)
