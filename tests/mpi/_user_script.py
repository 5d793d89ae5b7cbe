"""A plain user script, run under a bare ``mpiexec -n 4 python _user_script.py MODE RANK``.

It imports only ``distal`` and ``mpi4py`` (never ``distal.runtime.mpi``, and no launcher
installs anything first), so what ends the job after a failure is the MPI runtime itself,
imported by the first ``kernel.run(..., runtime="mpi")``. Rank ``RANK`` gets an input ``B``
of the wrong shape; MODE says what the script does about it:

* ``raise``: nothing (the ``InputError`` is uncaught);
* ``catch-end``: the failing rank catches it silently and its script ends;
* ``catch-barrier``: the failing rank catches it and goes on into an MPI barrier that the
  other ranks never reach;
* ``catch-rerun``: the failing rank catches it and runs the kernel again, with good inputs;
* ``catch-all``: every rank catches its error (``DistalError``), prints it as JSON, and all
  run the kernel again with good inputs: the job ends normally;
* ``exit``: rank ``RANK`` calls ``sys.exit(3)`` instead of running (under ``distal run``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from _mpi_cases import gemm  # noqa: E402

import distal as dl  # noqa: E402

RANK = MPI.COMM_WORLD.Get_rank()


def main(mode: str, bad: int) -> None:
    kernel, inputs, expected = gemm((2, 2), 32, "summa")
    given = dict(inputs)
    if RANK == bad:
        given["B"] = np.ones((31, 32))
    if mode == "exit" and RANK == bad:
        sys.exit(3)
    if mode in ("raise", "exit"):
        kernel.run(given, runtime="mpi")
    elif mode == "catch-all":
        try:
            kernel.run(given, runtime="mpi")
        except dl.DistalError as e:
            line = {"rank": RANK, "kind": type(e).__name__, "error": str(e)}
            print(json.dumps(line), flush=True)
        else:
            raise AssertionError("no error")
        res = kernel.run(inputs, runtime="mpi")  # the communicator is still usable
        assert np.allclose(res.value, expected)
        print(json.dumps({"rank": RANK, "rerun": "ok"}), flush=True)
    else:
        try:
            kernel.run(given, runtime="mpi")
        except dl.InputError:
            pass  # only the failing rank gets here; the others raise PeerFailure
        if mode == "catch-barrier":
            MPI.COMM_WORLD.Barrier()
        elif mode == "catch-rerun":
            kernel.run(inputs, runtime="mpi")
    print(json.dumps({"rank": RANK, "end": mode}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
