"""dask.array: ``einsum(..., optimize=True)`` (its default skips BLAS) on chunks laid out
like distal's blocks, with the threaded scheduler or a ``distributed.LocalCluster``.

Inputs are made on the workers by ``da.fromfunction`` from the same element functions and
persisted before timing; the timed part builds the graph and persists the result (it stays
in the workers' memory, as the distributed systems' results do).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

CHUNKS = {  # parts per dimension, as distal's 2 x 2 distributions cut them
    "gemm": ((2, 2), (2, 2)),
    "ttv": ((2, 2, 1), (1,)),
    "ttm": ((2, 2, 1), (1, 1)),
    "mttkrp": ((2, 2, 1), (2, 1), (1, 1)),
    "inner": ((2, 2, 1), (2, 2, 1)),
    "contract4d": ((2, 2, 1, 1), (2, 2, 1, 1)),
}


def unavailable(cluster: bool) -> str | None:
    try:
        import dask.array  # noqa: F401

        if cluster:
            import distributed  # noqa: F401
    except ModuleNotFoundError as e:
        return f"{e.name} not installed (pip install 'distal[bench]')"
    return None


def _inputs(p: Any) -> list[Any]:
    import dask.array as da

    arrs = []
    for (name, shape), parts in zip(p.inputs.items(), CHUNKS[p.name.split("-")[0]], strict=True):
        chunks = tuple(-(-s // k) for s, k in zip(shape, parts, strict=True))
        fn = p.fn(name)
        arrs.append(da.fromfunction(lambda *ix, fn=fn: fn(*ix), shape=shape, chunks=chunks,
                                    dtype=p.dtype).astype(p.dtype))  # fmt: skip
    return arrs


def time_problem(p: Any, repeat: int, client: Any = None) -> dict[str, Any]:
    import dask.array as da
    from dask.graph_manipulation import clone
    from threadpoolctl import threadpool_limits

    import dask

    if client is None:
        ctx: Any = dask.config.set(scheduler="threads", num_workers=2)
    else:
        ctx = dask.config.set(scheduler=client.get)

    def wait(x: Any) -> Any:
        if client is None:
            return x
        from distributed import wait as dwait

        dwait(x)
        return x

    with ctx, threadpool_limits(1, user_api="blas"):
        args = [wait(a.persist()) for a in _inputs(p)]
        times, check = [], 0.0
        for r in range(repeat + 1):
            t0 = time.perf_counter()
            # fresh keys every repeat: a cluster would otherwise hand back the last result
            expr = clone(da.einsum(p.subscripts, *args, optimize=True), omit=args, seed=r)
            res = wait(expr.persist())
            dt = time.perf_counter() - t0
            if r == 0:
                check = float(res.sum().compute())
            else:
                times.append(dt)
            del res
    return {"seconds": statistics.median(times), "times": times, "checksum": check}


def cluster() -> Any:
    """A LocalCluster of 2 single-threaded worker processes with 1 BLAS thread each."""
    from distributed import Client, LocalCluster

    old = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None, memory_limit=0)  # fmt: skip
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Client(lc)
