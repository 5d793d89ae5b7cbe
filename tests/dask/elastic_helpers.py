"""Kernels and inputs shared by the Dask runtime tests and the driver-kill subprocess.

Inputs are small integers stored as float64, so every sum is exact whatever order Dask
finishes tasks in: results are compared with ``np.array_equal``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import distal as dl


def ints(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Small integer-valued float64 data: exact sums in any order."""
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float64)


def gemm(
    n: int = 32, grid: tuple[int, int] = (4, 4), algorithm: str = "cannon", routing: str = "auto"
) -> Any:
    """``A = B @ C`` over a grid of virtual processors (over-decomposed on purpose):
    ``dl.algorithms``' Cannon or SUMMA with ``k`` in ``grid[0]`` steps."""
    alg = getattr(dl.algorithms, algorithm)(n, machine=dl.Machine(*grid), steps=grid[0])
    return alg.compile(routing=routing)


def gemm_inputs(n: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    return {"B": ints((n, n), seed), "C": ints((n, n), seed + 1)}


def mttkrp(n: int = 12, r: int = 5, grid: tuple[int, int] = (2, 2), routing: str = "auto") -> Any:
    """``A(i,l) = B(i,j,k) C(j,l) D(k,l)``: j is split over the grid, so partial sums flow."""
    M = dl.Machine(*grid)
    i, j, k, l = dl.index_vars("i j k l")  # noqa: E741
    A = dl.Tensor("A", (n, r), dist="il -> i0", machine=M)
    B = dl.Tensor("B", (n, n, n), dist="ijk -> ij", machine=M)
    C = dl.Tensor("C", (n, r), dist="jl -> *j", machine=M)
    D = dl.Tensor("D", (n, r), dist="kl -> **", machine=M)
    A[i, l] = B[i, j, k] * C[j, l] * D[k, l]
    io, jo, ii, ji, ko, ki = dl.index_vars("io jo ii ji ko ki")
    s = (
        dl.schedule(A)
        .distribute([i, j], [io, jo], [ii, ji], M)
        .divide(k, ko, ki, 3)
        .reorder([ko, ii, ji])
        .communicate([B, C, D], ko)
    )
    return dl.compile(s, routing=routing)


def mttkrp_inputs(n: int = 12, r: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    return {"B": ints((n, n, n), seed), "C": ints((n, r), seed + 1), "D": ints((n, r), seed + 2)}


def mttkrp_expected(x: dict[str, np.ndarray]) -> np.ndarray:
    return np.einsum("ijk,jl,kl->il", x["B"], x["C"], x["D"])


@contextlib.contextmanager
def process_pool(envs: list[dict[str, str]], security: Any = None) -> Iterator[Any]:
    """A loopback pool of single-threaded worker *processes*, one per entry of ``envs``
    (the environment variables of that worker's process); yields a connected client."""
    from distributed import Client, Nanny, Scheduler, SpecCluster

    proto = "tls://" if security is not None else "tcp://"
    sec = {"security": security} if security is not None else {}
    workers = {
        f"w{n}": {
            "cls": Nanny,
            "options": {"nthreads": 1, "env": env, "host": "127.0.0.1", **sec},
        }
        for n, env in enumerate(envs)
    }
    scheduler = {
        "cls": Scheduler,
        "options": {"host": "127.0.0.1", "dashboard_address": ":0", "protocol": proto, **sec},
    }
    with (
        SpecCluster(workers=workers, scheduler=scheduler, **sec) as cluster,
        Client(cluster, **sec) as client,
    ):
        client.wait_for_workers(len(envs), timeout=60)
        yield client
