"""Kernels and inputs shared by the Dask runtime tests and the driver-kill subprocess.

Dense inputs are small integers stored as float64, so every sum is exact whatever order Dask
finishes tasks in: results are compared with ``np.array_equal``. The sparse problems (SpMV,
SpMM, SDDMM cut by rows or by non-zeros) sit next to the dense ones as ``Problem``s, so one
test runs the same checks on both; their values are compared with the local runtime bit
for bit and with scipy to 1e-12.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

import distal as dl


def assert_stats(measured: Any, kernel: Any) -> None:
    """A Dask run's stats against the kernel's prediction: every count of words, index
    words, messages and iterations equal; ``peak_words`` measured on the workers (each
    processor's owned blocks plus the most one of its tasks held: buffers, partial sums),
    so at least its owned blocks wherever a task of it ran, and more for some processor
    (a task holds its output or a buffer) -- compared with the model in
    ``test_dask_runtime.py::test_peak_words_are_measured_on_the_workers``."""
    got, want = measured.as_dict(), kernel.stats().as_dict()
    peak = got.pop("peak_words")
    want.pop("peak_words")
    assert got == want
    owned = [kernel.plan.owned_words(p) for p in range(kernel.plan.nprocs)]
    ran = [p for p, n in enumerate(measured.iterations) if n]
    assert ran
    assert all(peak[p] >= owned[p] for p in ran)
    assert any(peak[p] > owned[p] for p in ran)


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


# --- one matrix of problems: dense and sparse kernels side by side ------------------------


@dataclasses.dataclass
class Problem:
    """A kernel, its inputs and numpy's (or scipy's) answer, for the tests that run the same
    checks on a dense and a sparse kernel.

    ``bound`` is ``kernel.bind(inputs)``: the exact plan for a sparse kernel's patterns and
    the kernel itself for a dense one (``BoundKernel`` delegates), so ``bound.plan``,
    ``bound.stats()`` and ``bound.run`` mean the same on both sides. ``exact``: integer data,
    so any summation order gives ``want`` bit for bit; otherwise the value matches ``want``
    to 1e-12 and the local runtime's bits.
    """

    name: str
    kernel: Any
    inputs: dict[str, Any]
    want: np.ndarray
    exact: bool
    sparse: bool

    @property
    def bound(self) -> Any:
        return self.kernel.bind(self.inputs)

    def local(self) -> Any:
        """The local runtime's result: the oracle for the Dask runtime's bits."""
        return self.bound.run(self.inputs)

    def check(self, value: Any, local: Any = None) -> None:
        """``value`` is the reference's (equal, or to 1e-12) and, given ``local``, has the
        local runtime's bits."""
        if local is not None:
            assert np.array_equal(bits(value), bits(local)), f"{self.name}: not the local bits"
        got = dense_of(value)
        if self.exact:
            assert np.array_equal(got, self.want), f"{self.name}: value"
        else:
            np.testing.assert_allclose(got, self.want, rtol=1e-12, atol=1e-12, err_msg=self.name)


def dense_of(v: Any) -> np.ndarray:
    """A result as a dense array (a sparse output's stored values placed in its shape)."""
    from distal.sparse.array import SparseArray

    return v.to_dense() if isinstance(v, SparseArray) else np.asarray(v)


def bits(v: Any) -> np.ndarray:
    """The values a result is made of (a sparse output's stored values, in storage order)."""
    from distal.sparse.array import SparseArray

    return v.vals if isinstance(v, SparseArray) else np.asarray(v)


def gemm_problem(n: int = 32, grid: tuple[int, int] = (4, 4), algorithm: str = "cannon") -> Problem:
    x = gemm_inputs(n)
    return Problem("gemm", gemm(n, grid, algorithm), x, x["B"] @ x["C"], True, False)


def mttkrp_problem(n: int = 12, grid: tuple[int, int] = (2, 2)) -> Problem:
    x = mttkrp_inputs(n)
    return Problem("mttkrp", mttkrp(n, grid=grid), x, mttkrp_expected(x), True, False)


def sparse_matrix(seed: int = 0, n: int = 50, density: float = 0.1) -> Any:
    """A random CSR matrix (scipy's ``csr_array``, sorted indices)."""
    import scipy.sparse as sp  # here: the dense-only helpers (elastic_driver.py) do without

    m = sp.csr_array(sp.random(n, n, density=density, random_state=seed, format="csr"))
    m.sort_indices()
    return m


def _bdist(split: str) -> str:
    """B's layout: by rows, by non-zeros, or by rows under a non-zero cut (``nz-rowB``: stored
    entries travel to the processors that need them, with their ``pos``/``crd``)."""
    return {"row": "xy -> x", "nz": "xy -> (xy)", "nz-rowB": "xy -> x"}[split]


def _cut(s: Any, split: str, B: Any, M: Any, i: Any, j: Any) -> tuple[Any, Any]:
    """Distribute by rows (``i``) or by B's non-zeros (``fuse`` + ``pos``); the outer var."""
    io, ii, f, fp, fo, fi = dl.index_vars("io ii f fp fo fi")
    if split == "row":
        return s.distribute([i], [io], [ii], M), io
    return s.fuse(i, j, f).pos(f, fp, B).distribute([fp], [fo], [fi], M), fo


def spmv(split: str, n: int = 50, procs: int = 4) -> Any:
    """``a = B c`` over ``procs`` virtual processors, cut by rows or by non-zeros."""
    M = dl.Machine(procs)
    i, j = dl.index_vars("i j")
    B = dl.Tensor("B", (n, n), format="csr", dist=_bdist(split), machine=M)
    c = dl.Tensor("c", (n,), dist="x -> x", machine=M)
    a = dl.Tensor("a", (n,), dist="x -> x", machine=M)
    a[i] = B[i, j] * c[j]
    s, o = _cut(dl.schedule(a), split, B, M, i, j)
    return dl.compile(s.communicate([a, B, c], o))


def spmm(split: str, n: int = 50, K: int = 5, procs: int = 4) -> Any:
    """``A = B C`` with a dense ``C`` of ``K`` columns (row blocks of C and A)."""
    M = dl.Machine(procs)
    i, j, k = dl.index_vars("i j k")
    B = dl.Tensor("B", (n, n), format="csr", dist=_bdist(split), machine=M)
    C = dl.Tensor("C", (n, K), dist="jk -> j", machine=M)
    A = dl.Tensor("A", (n, K), dist="ik -> i", machine=M)
    A[i, k] = B[i, j] * C[j, k]
    s, o = _cut(dl.schedule(A).reorder([i, j, k]), split, B, M, i, j)
    return dl.compile(s.communicate([A, B, C], o))


def sddmm(split: str, n: int = 50, J: int = 6, procs: int = 4) -> Any:
    """``A = B .* (C D)``: a CSR output on B's pattern."""
    M = dl.Machine(procs)
    i, j, k = dl.index_vars("i j k")
    B = dl.Tensor("B", (n, n), format="csr", dist=_bdist(split), machine=M)
    C = dl.Tensor("C", (n, J), dist="ij -> i", machine=M)
    D = dl.Tensor("D", (J, n), dist="jk -> k", machine=M)
    A = dl.Tensor("A", (n, n), format="csr", dist=_bdist(split), machine=M)
    A[i, k] = B[i, k] * C[i, j] * D[j, k]
    s, o = _cut(dl.schedule(A), split, B, M, i, k)
    return dl.compile(s.communicate([A, B, C, D], o))


def sparse_problem(
    kind: str,
    split: str,
    seed: int = 0,
    n: int = 50,
    procs: int = 4,
    density: float = 0.1,
    K: int = 5,
) -> Problem:
    """SpMV, SpMM (``K`` columns) or SDDMM on a random ``n x n`` matrix (standard normal
    dense operands: not exact, compared to scipy's answer to 1e-12)."""
    import scipy.sparse as sp

    B = sparse_matrix(seed, n, density)
    rng = np.random.default_rng(seed + 1)
    name = f"{kind} {split}"
    if kind == "spmv":
        x = rng.standard_normal(n)
        return Problem(name, spmv(split, n, procs), {"B": B, "c": x}, B @ x, False, True)
    if kind == "spmm":
        C = rng.standard_normal((n, K))
        return Problem(name, spmm(split, n, K, procs), {"B": B, "C": C}, B @ C, False, True)
    C, D = rng.standard_normal((n, 6)), rng.standard_normal((6, n))
    want = sp.csr_array(B.multiply(C @ D)).toarray()
    return Problem(name, sddmm(split, n, procs=procs), {"B": B, "C": C, "D": D}, want, False, True)


SPARSE = ["spmv row", "spmv nz", "spmv nz-rowB", "spmm row", "spmm nz", "sddmm row", "sddmm nz"]


def problem(name: str) -> Problem:
    """The problems of the matrices by name: ``gemm`` (Cannon, 32 x 32 on 4 x 4), ``mttkrp``
    (2 x 2, partial sums) and ``"<spmv|spmm|sddmm> <row|nz|nz-rowB>"`` (50 x 50 on 4)."""
    if name == "gemm":
        return gemm_problem()
    if name == "mttkrp":
        return mttkrp_problem()
    kind, split = name.split()
    return sparse_problem(kind, split)


def summed_blocks(plan: Any, granularity: str | int = "flush") -> set[Any]:
    """The output blocks a reduction task sums (the units' pieces go there): every block a
    piece goes to but those one unit makes whole (``units.fuse``: that unit's result is the
    block). Worked out from the plan as the driver does, so a test can count the run's
    reductions: ``tasks_total == len(units) + len(summed_blocks)``."""
    from distal.plan.region import words
    from distal.runtime.elastic import units
    from distal.typing import box_is_empty

    out = plan.output
    pl = plan.placements.get(out)
    if pl is None:  # a sparse output: the stored entries each processor owns
        regions = plan.owned[out]
        blocks = {(q,): r for q, r in enumerate(regions) if r is not None and words(r) > 0}
    else:
        blocks = {
            i: pl.block_box(i)
            for i in sorted(plan.primary)
            if not (pl.block_box(i) and box_is_empty(pl.block_box(i)))
        }
    fused = units.fuse(units.decompose(plan, granularity), blocks)
    return {i for u in fused if not u.final for i, _ in u.pieces}


def unit_blocks(bound: Any, data: dict[str, Any], u: Any) -> list[tuple[str, Any, Any]]:
    """The input blocks the driver hands unit ``u``'s tasks, cut here from ``data``."""
    from distal.plan.region import Entries
    from distal.runtime.elastic import units

    plan, out = bound.plan, []
    for t, idx in u.needs:
        r = units.block_region(plan, t, idx)
        if isinstance(r, Entries):
            out.append((t, units.Span(r.shape), np.asarray(data[t].vals)[r.positions]))
        else:
            out.append((t, r, np.asarray(data[t])[tuple(slice(lo, hi) for lo, hi in r)]))
    return out


def entry_calls(bound: Any, x: Any) -> list[tuple[Any, Any, Any, list[Any], np.ndarray]]:
    """Per unit of a bound plan: the unit, its blocks, its Ctx, its leaves over stored entries
    with their operands, and its result."""
    from distal.runtime.elastic import tasks, units

    data = bound.check_inputs(x)
    ctx = tasks.Ctx("t", bound.kernels, np.dtype(np.float64), None, lambda: None)
    out = []
    for u in units.decompose(bound.plan):
        u = u.task()
        blocks = unit_blocks(bound, data, u)
        calls = [
            (w, {t: a for t, (a, _) in ops.items()})
            for ops, _, works in tasks._steps(ctx, u, blocks)
            for w in works
        ]
        y, _, _ = tasks._compute(ctx, u, blocks)
        out.append((u, blocks, ctx, calls, y))
    return out


def trace_lines(path: Any) -> list[tuple[str, str, str]]:
    """(event, task, status) lines a run's ``faults={"trace": ...}`` file got."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) >= 2:
            out.append((parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    return out
