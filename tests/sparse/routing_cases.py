"""The bound sparse kernels of ``test_sparse_routing.py``: dense operands that several
processors fetch whole, so ``routing="tree"`` sends them along binomial trees.

Each case builds ``(kernel, inputs, reference)`` for a machine of ``P`` processors and a
routing; inputs are seeded, so every MPI rank builds the same ones. B has a full row in
every block of rows (for P dividing 8), so every processor needs every row of the dense
operand.

Under ``mpiexec -n P``, ``python routing_cases.py ROUTING`` runs every case on the MPI
runtime with that routing and checks it on every rank against scipy (rtol 1e-12) and
``bound.stats()``; each rank prints one JSON line per case, ``{"case", "rank", "ok",
"relayed"}`` plus ``"error"`` when a check failed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

import distal as dl

if __name__ == "__main__":  # run as an MPI script: the shared test helpers are one level up
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_matrix_cases import check

N, M, K = 40, 30, 8
Case = tuple[Any, dict[str, Any], np.ndarray]


def matrix(n: int, m: int, seed: int) -> sp.csr_matrix:
    """A random CSR matrix with a full row in every eighth of its rows and one empty row."""
    rng = np.random.default_rng(seed)
    b = sp.random(n, m, density=0.1, format="lil", random_state=rng)
    for r in range(0, n, n // 8):
        b[r, :] = rng.random(m)
    b[n // 8 + 1, :] = 0
    return b.tocsr()


def spmm(P: int, routing: str, cdist: str | None = None, exact: bool = True) -> Case:
    """``A(i,k) = B(i,j) * C(j,k)``, B's rows cut over the machine; C whole on processor 0
    (``cdist`` None) or laid out by ``cdist``; ``exact=False`` fetches the hull of rows."""
    Mc = dl.Machine(P)
    i, j, k, io, ii = dl.index_vars("i j k io ii")
    B = dl.Tensor("B", (N, M), format="csr", dist="xy -> x", machine=Mc)
    C = dl.Tensor("C", (M, K), dist=cdist, machine=Mc if cdist else None)
    A = dl.Tensor("A", (N, K), dist="ik -> i", machine=Mc)
    A[i, k] = B[i, j] * C[j, k]
    s = dl.schedule(A).reorder([i, j, k]).distribute([i], [io], [ii], Mc)
    s = s.communicate([A, B, C], io, exact=exact)
    b = matrix(N, M, 1)
    c = np.random.default_rng(2).standard_normal((M, K))
    return dl.compile(s, routing=routing), {"B": b, "C": c}, b @ c


def spmm_streamed(P: int, routing: str) -> Case:
    """SpMM with C (whole on processor 0) streamed in column chunks over 3 steps: every
    processor fetches the same chunk at every step (relays pass it on while they compute)."""
    Mc = dl.Machine(P)
    i, j, k, io, ii, ko, ki = dl.index_vars("i j k io ii ko ki")
    B = dl.Tensor("B", (N, M), format="csr", dist="xy -> x", machine=Mc)
    C = dl.Tensor("C", (M, 6))
    A = dl.Tensor("A", (N, 6), dist="ik -> i", machine=Mc)
    A[i, k] = B[i, j] * C[j, k]
    s = dl.schedule(A).reorder([i, j, k]).distribute([i], [io], [ii], Mc)
    s = s.divide(k, ko, ki, 3).reorder([ko, ii, j, ki])
    s = s.communicate(B, io).communicate([A, C], ko)
    b = matrix(N, M, 3)
    c = np.random.default_rng(4).standard_normal((M, 6))
    return dl.compile(s, routing=routing), {"B": b, "C": c}, b @ c


def spmv(P: int, routing: str) -> Case:
    """``a(i) = B(i,j) * c(j)``, B's rows cut, c whole on processor 0."""
    Mc = dl.Machine(P)
    i, j, io, ii = dl.index_vars("i j io ii")
    B = dl.Tensor("B", (N, N), format="csr", dist="xy -> x", machine=Mc)
    c = dl.Tensor("c", (N,))
    a = dl.Tensor("a", (N,), dist="x -> x", machine=Mc)
    a[i] = B[i, j] * c[j]
    s = dl.schedule(a).distribute([i], [io], [ii], Mc).communicate([a, B, c], io)
    b = matrix(N, N, 5)
    x = np.random.default_rng(6).standard_normal(N)
    return dl.compile(s, routing=routing), {"B": b, "c": x}, b @ x


CASES: dict[str, Callable[[int, str], Case]] = {
    "spmm, C on processor 0": lambda P, r: spmm(P, r),
    "spmm hull, C in row blocks": lambda P, r: spmm(P, r, "jk -> j", exact=False),
    "spmm, C in column blocks": lambda P, r: spmm(P, r, "jk -> k"),
    "spmm, C on processor 0 streamed": spmm_streamed,
    "spmv, c on processor 0": spmv,
}


def _mpi_main(routing: str) -> None:
    from distal.runtime.mpi import world

    rank, size = world()
    for name, build in CASES.items():
        kernel, inputs, reference = build(size, routing)
        bound = kernel.bind(inputs)
        relayed = sum(m.relay for m in bound.program(rank).messages)
        line: dict[str, Any] = {"case": name, "rank": rank, "relayed": relayed}
        try:
            check(bound.run(inputs, runtime="mpi"), reference, bound.stats())
        except AssertionError as e:
            line |= {"ok": False, "error": str(e)[:2000]}
        else:
            line["ok"] = True
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    _mpi_main(sys.argv[1])
