"""A checkpointed application run, as a subprocess (or on every rank under ``mpiexec``).

``python _resume_script.py APP RUNTIME LOCATION OUT PAUSE``: runs (RUNTIME ``local``,
``mpi``, ``dask``: a pool of two workers inside this process, or ``dask@ADDRESS``: the
pool of the scheduler at ADDRESS) ``cp_als`` (30 iterations,
``tol=0``: all of them) or ``cg`` in a session with checkpoint LOCATION ("-": none), each
kernel run PAUSE seconds slower (so that a test can kill it mid-run), saves the result to
OUT and prints ``{"resumed_from": ...}`` (rank 0).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _problems import cp_tensor, spd

import distal as dl

app, runtime, location, out, pause = sys.argv[1:6]


class Slow(dl.Session):
    """Every kernel run (``sess.run``'s and the arrays program's: both go through
    ``run_named``) and every fused set of the arrays program PAUSE seconds slower."""

    def run_named(self, kernel, names, inputs=None, **kw):  # type: ignore[no-untyped-def]
        time.sleep(float(pause))
        return super().run_named(kernel, names, inputs, **kw)

    def fused_blocks(self, *args, **kw):  # type: ignore[no-untyped-def]
        time.sleep(float(pause))
        return super().fused_blocks(*args, **kw)


opts: dict = {} if runtime == "mpi" else {"progress": False}
if runtime == "dask":
    # the session's own pool, in this process: SIGKILL takes the driver, the scheduler
    # and every worker at once, and a rerun starts a fresh pool
    opts |= {"n_workers": 2, "processes": False}
elif runtime.startswith("dask@"):  # a pool of its own processes, at this scheduler address
    runtime, opts["client"] = "dask", runtime.removeprefix("dask@")
sess = Slow(runtime, checkpoint=None if location == "-" else location, **opts)
if app == "cp_als":
    w, fs, fit = dl.apps.cp_als(cp_tensor(), 4, iters=30, tol=0.0, session=sess, machine=4)
    arrays = {"w": w, "fit": np.array(fit), **{f"F{n}": f for n, f in enumerate(fs)}}
else:
    A, b = spd()
    x, its = dl.apps.cg(A, b, session=sess, machine=4)
    arrays = {"x": x, "iterations": np.array(its)}
if sess.rank == 0:
    np.savez(out, **arrays)
    print(json.dumps({"resumed_from": sess.resumed_from}), flush=True)
