"""A checkpointed session loop, run as a subprocess (or on every rank under ``mpiexec``).

``python _loop_script.py RUNTIME LOCATION N OUT [SLEEP]``: puts ``A`` and ``B``, then for
``it`` in ``sess.iterations(N, keep=["X", "R"])`` prints ``{"start": it}`` (rank 0), sleeps
SLEEP seconds and runs ``Y = A @ X`` (all ``"xy -> xy"``), ``X = 0.05 * Y^T + B`` (reading
``Y`` as ``"xy -> yx"``: a redistribution every iteration) and ``R = sum(X * X)``. At the end
rank 0 prints ``{"resumed_from", "ran", "moved_words"}`` and saves ``X`` and ``R`` to OUT.
On ``dask`` it starts two local worker processes; with ``LOOP_KILL_WORKER_AT=i`` one of
them is SIGKILLed during iteration ``i``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np

import distal as dl


def main() -> None:

    runtime, location, n_iter, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    pause = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    n = 12
    M = dl.Machine(2, 2)
    i, j, k = dl.index_vars("i j k")
    io, jo, ii, ji = dl.index_vars("io jo ii ji")

    def owner(t: dl.Tensor) -> dl.Kernel:
        return dl.compile(dl.schedule(t).distribute([i, j], [io, jo], [ii, ji], M))

    A = dl.Tensor("A", (n, n), dist="xy -> xy", machine=M)
    X = dl.Tensor("X", (n, n), dist="xy -> xy", machine=M)
    Y = dl.Tensor("Y", (n, n), dist="xy -> xy", machine=M)
    Y[i, j] = A[i, k] * X[k, j]
    matmul = owner(Y)

    Yt = dl.Tensor("Y", (n, n), dist="xy -> yx", machine=M)
    B = dl.Tensor("B", (n, n), dist="xy -> xy", machine=M)
    X2 = dl.Tensor("X", (n, n), dist="xy -> xy", machine=M)
    X2[i, j] = Yt[j, i] * 0.05 + B[i, j]
    update = owner(X2)

    R = dl.Tensor("R", ())
    X3 = dl.Tensor("X", (n, n), dist="xy -> xy", machine=M)
    R[()] = X3[i, j] * X3[i, j]
    norm = dl.compile(dl.schedule(R))

    options = {}
    kill_at = int(os.environ.get("LOOP_KILL_WORKER_AT", "-1"))
    if runtime == "dask":  # two worker processes, so one can be killed while the loop runs
        import distributed

        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        )
        client = distributed.Client(cluster)
        options = {"client": client, "progress": False}
    sess = dl.Session(runtime, checkpoint=location, **options)
    rng = np.random.default_rng(7)
    sess.put("A", rng.random((n, n)))
    sess.put("B", rng.random((n, n)))
    sess.put("X", np.eye(n))
    rank = sess.rank
    ran = []
    for it in sess.iterations(n_iter, keep=["X", "R"], name="power"):
        if rank == 0:
            print(json.dumps({"start": it}), flush=True)
        time.sleep(pause)
        if it == kill_at:  # a worker vanishes in the middle of this iteration's kernels
            pids = list(client.run(os.getpid).values())
            sess.run(matmul)
            os.kill(pids[0], signal.SIGKILL)
            print(json.dumps({"killed_worker": pids[0]}), flush=True)
        else:
            sess.run(matmul)
        sess.run(update)
        sess.run(norm)
        ran.append(it)
    x, r = sess.get("X"), sess.get("R")
    if rank == 0:
        np.savez(out, X=x, R=r)
        print(
            json.dumps({"resumed_from": sess.resumed_from, "ran": ran, "moved": sess.moved_words})
        )


if __name__ == "__main__":  # Dask's worker processes import this file too
    main()
