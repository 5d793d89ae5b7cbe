"""Sparse kernels on structured data, timed on every available peer side by side in one run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sparse_peers.py [--quick] [--repeat 5]
        [--kernels spmv,spmm] [--data rmat,zipf] [--dask-chunks 2] [--cg [--cg-iters 50]]

A uniform random matrix splits evenly however it is cut, so it flatters every system that
cuts by rows; the data sets here have the structure that does not (``distal.sparse.generate``):

===========  =====================================================================
data set     what
===========  =====================================================================
``rmat``     Graph500 R-MAT, scale 18, edge factor 16, *unpermuted* (row 0 heaviest)
``zipf``     2**18 x 2**18, 4 M entries, row lengths ~ 1 / rank**1.2, heaviest first
``banded``   2**18 x 2**18, bandwidth 15 (every entry with ``|i - j| <= 7``)
``zipf3``    16384**3 3-tensor, 4 M entries, Zipf-like marginals (s = 1.1) on each mode
``fem``      3-D Q1 stiffness pattern, 27**3 nodes x 3 unknowns (59 049 rows, 75 a row)
``road``     road network, 1200**2 junctions numbered by 32**2 tiles (2.8 a row)
``web``      web graph, 2**19 pages in sites, power-law degrees (7.4 a row)
===========  =====================================================================

The last three are the kinds of matrices users bring (SuiteSparse's audikw_1, roadNet-CA,
web-Google are of these kinds). ``--quick`` uses about 250 k entries (2**14 rows, 4096**3
tensors). Dense operands have
width 32 and values in ``(0, 1]``, as the sparse values do, so no sum cancels and every
result can be held to ``rtol = 1e-10`` against the float64 reference.

Kernels (on matrices: ``spmv``, ``spmm``, ``sddmm``, ``spadd3``; on 3-tensors: ``spttv``,
``spmttkrp``, ``spinnerprod``)::

    spmv         a(i)   = B(i,j) * c(j)
    spmm         A(i,k) = B(i,j) * C(j,k)
    sddmm        A(i,k) = B(i,k) * C(i,j) * D(j,k)          (A keeps B's pattern)
    spadd3       A      = B + C + D                         (C, D: B's rows rotated)
    spttv        A(i,j) = B(i,j,k) * c(k)                   (A sparse: B's (i,j) fibers)
    spmttkrp     A(i,l) = B(i,j,k) * C(j,l) * D(k,l)
    spinnerprod  a      = B(i,j,k) * C(i,j,k)               (C: same law, other seed)

Systems: ``scipy`` (scipy.sparse, one thread: the reference and the ratio's base),
``numpy`` (vectorised numpy on the coordinates: ``np.add.at`` for MTTKRP,
``np.add.reduceat`` for TTV, ``np.intersect1d`` for the inner product),
``graphblas-1t`` / ``graphblas-2t`` (python-graphblas on SuiteSparse:GraphBLAS with
``gb.ss.config["nthreads"]`` 1 and 2), ``dask-sparse`` (dask arrays of pydata
``sparse.COO`` row chunks on the threaded scheduler, 2 workers), ``pydata-sparse`` (the
3-tensor kernels on one ``sparse.COO``) and ``petsc`` (petsc4py, sequential AIJ: MatMult,
MatMatMult, MatAXPY, when the venv imports petsc4py) and ``petsc-seq`` / ``petsc-mpi2``
(Debian's PETSc under ``/usr/bin/python3``, set up by ``benchmarks/setup_petsc.sh``: SpMV as
``MatMult`` on one sequential AIJ matrix and on an MPI AIJ matrix over ``mpiexec -n 2``,
run by ``benchmarks/petsc_peer.py`` in a subprocess that times itself). A missing peer is
skipped with the reason; a kernel a peer has no formulation for shows ``n/a`` with why.

SpMV rows also show the bandwidth they reach, ``nnz * (8 + ib) + (rows + 1) * ib +
8 * (rows + cols)`` bytes (``ib``: the system's index size, 8 for int64 and 4 for PETSc's
int32) over the median time, and that as a fraction of the STREAM triad measured at the
start of the run on 2 threads (``benchmarks/stream.py``). ``--cg`` adds CG on the 5-point
Laplacian of a 1000 x 1000 grid, per iteration: distal's ``dl.apps.cg`` (local runtime, 2
processors), ``scipy.sparse.linalg.cg`` and PETSc's ``KSPCG`` without a preconditioner.

Every timing is the median of ``--repeat`` runs after one warm-up run, with
``time.perf_counter``; the warm-up's result is checked against the reference. Each row is
also printed on stderr as it is measured, with the peak memory so far: a full run peaks
near 12 GiB (GraphBLAS MTTKRP's fibers x 32 intermediates), so data sets are made one at
a time. Inputs are
converted to each peer's own types before timing; the timed part makes the output.

Other systems join the same table through :func:`add_system` (or ``run_suite``'s
``extra_systems``): a system is ``fn(kernel, data)`` returning the function to time, or
``(function, converter)`` whose converter turns the function's result into the
reference's form (a numpy array, a scipy CSR matrix, a float); it raises
:class:`Unsupported` for a kernel it does not run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy
import scipy.sparse as sp

from distal.sparse import SparseArray
from distal.sparse import generate as gen

HERE = os.path.dirname(os.path.abspath(__file__))

WIDTH = 32  # the dense width of SpMM, SDDMM and MTTKRP
RTOL = 1e-10
CHUNK = 1 << 16  # entries per chunk of the numpy gather formulations (temporaries ~16 MB)
MATRIX_KERNELS = ("spmv", "spmm", "sddmm", "spadd3")
TENSOR_KERNELS = ("spttv", "spmttkrp", "spinnerprod")
KERNELS = MATRIX_KERNELS + TENSOR_KERNELS
BASE = "scipy"

Prepared = Callable[[], Any] | tuple[Callable[[], Any], Callable[[Any], Any]]
System = Callable[[str, "Data"], Prepared]


class Unsupported(Exception):
    """The system has no formulation of this kernel (the message says why)."""


@dataclass
class Timed:
    """A run timed elsewhere (a subprocess peer): its result, its run times and, for SpMV,
    the index size it stored the matrix with."""

    result: Any
    times: list[float]
    index_bytes: int | None = None


# -- data --------------------------------------------------------------------------------------


@dataclass
class Data:
    """One data set and the dense operands of every kernel on it.

    Matrices: ``array`` (distal CSR), ``csr`` (scipy), ``c`` (n), ``C`` (n x 32), ``D``
    (32 x n for SDDMM), ``C_add`` / ``D_add`` (``csr`` with its rows rotated by n/3 and
    2n/3, for SpAdd3). Tensors: ``array`` (distal DSS), ``other`` (the inner product's
    second tensor, DSS), ``c`` (K), ``C`` (J x 32), ``D`` (K x 32). ``cache`` keeps each
    peer's converted inputs, so a data set is converted once per peer.
    """

    name: str
    kind: str  # "matrix" or "tensor"
    describe: str
    array: SparseArray
    operands: dict[str, Any]
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def nnz(self) -> int:
        return self.array.nnz

    def __getitem__(self, key: str) -> Any:
        return self.operands[key]

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    # tensor views shared by several peers (all from the DSS levels, no re-sorting)

    def fibers(self, which: str = "array") -> dict[str, Any]:
        """The ``(i, j)`` fibers of a DSS tensor: ``fi``, ``fj`` (each fiber's coordinates),
        ``Bf`` (scipy CSR, one row per fiber, columns k), ``S`` (I x fibers CSR of ones
        summing fibers into their slice), ``starts`` (each fiber's first position)."""

        def make() -> dict[str, Any]:
            t: SparseArray = self.array if which == "array" else self.operands[which]
            i_len, _, k_len = t.shape
            lv1, lv2 = t.levels[1], t.levels[2]
            nf = len(lv1.crd)
            fi = np.repeat(np.arange(i_len, dtype=np.int64), np.diff(lv1.pos))
            bf = sp.csr_array((t.vals, lv2.crd, lv2.pos), shape=(nf, k_len))
            s = sp.csr_array((np.ones(nf), np.arange(nf), lv1.pos), shape=(i_len, nf))
            return {"fi": fi, "fj": lv1.crd, "Bf": bf, "S": s, "starts": lv2.pos[:-1]}

        return self.cached(f"fibers:{which}", make)

    def coords(self, which: str = "array") -> tuple[np.ndarray, np.ndarray]:
        """Coordinates (3 x nnz, sorted) and values of a tensor."""
        t: SparseArray = self.array if which == "array" else self.operands[which]
        return self.cached(f"coords:{which}", lambda: (t.coordinates(), t.vals))

    def keys(self, which: str = "array") -> np.ndarray:
        """Row-major linear indices of a tensor's entries (increasing)."""
        _, j_len, k_len = self.shape

        def make() -> np.ndarray:
            co, _ = self.coords(which)
            return (co[0] * j_len + co[1]) * k_len + co[2]

        return self.cached(f"keys:{which}", make)

    def matricized(self, which: str = "array") -> sp.csr_array:
        """A tensor as the I x (J*K) scipy CSR matrix."""

        def make() -> sp.csr_array:
            t: SparseArray = self.array if which == "array" else self.operands[which]
            i_len, j_len, k_len = t.shape
            co, vals = self.coords(which)
            cols = co[1] * k_len + co[2]
            indptr = np.zeros(i_len + 1, dtype=np.int64)
            np.cumsum(np.bincount(co[0], minlength=i_len), out=indptr[1:])
            return sp.csr_array((vals, cols, indptr), shape=(i_len, j_len * k_len))

        return self.cached(f"matricized:{which}", make)


def rotated(m: sp.csr_array, shift: int) -> sp.csr_array:
    """``m`` with row ``r`` moved to row ``(r + shift) mod n``."""
    n = m.shape[0]
    src = (np.arange(n) - shift) % n
    out = m[src]
    out.sort_indices()
    return sp.csr_array(out)


def _dense(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return 1.0 - rng.random(shape)


def matrix_data(name: str, a: SparseArray, describe: str, seed: int = 1) -> Data:
    """A data set of a square matrix, with its dense operands."""
    n = a.shape[0]
    rng = np.random.default_rng(seed)
    m = a.to_scipy()
    if max(m.shape) < 2**31 and m.nnz < 2**31:  # 32-bit indices, as scipy makes them
        m = sp.csr_array((m.data, m.indices.astype(np.int32), m.indptr.astype(np.int32)),
                         shape=m.shape)  # fmt: skip
    ops = {
        "csr": m,
        "c": _dense(rng, n),
        "C": _dense(rng, n, WIDTH),
        "D": _dense(rng, WIDTH, n),
        "C_add": rotated(m, n // 3),
        "D_add": rotated(m, 2 * n // 3),
    }
    return Data(name, "matrix", describe, a, ops)


def tensor_data(name: str, shape: tuple[int, int, int], nnz: int, describe: str) -> Data:
    """A data set of a Zipf 3-tensor, the inner product's second one, and dense operands."""
    a = gen.zipf_tensor(shape, nnz, seed=0, format="dss")
    other = gen.zipf_tensor(shape, nnz, seed=1, format="dss")
    rng = np.random.default_rng(2)
    ops = {
        "other": other,
        "c": _dense(rng, shape[2]),
        "C": _dense(rng, shape[1], WIDTH),
        "D": _dense(rng, shape[2], WIDTH),
    }
    return Data(name, "tensor", describe, a, ops)


def _positive(a: SparseArray) -> SparseArray:
    """``a``'s pattern with its values' magnitudes: every data set's values are positive,
    so no sum cancels and each result is held to ``rtol = 1e-10`` (a stiffness matrix's
    rows sum to about one from terms of about 40)."""
    return a.with_values(np.abs(a.vals))


def dataset_makers(quick: bool, names: Sequence[str] | None = None) -> list[Callable[[], Data]]:
    """A function making each data set (``--quick``: about 250 k entries each, else about
    4 M): a full run makes them one at a time, as all four with every peer's converted
    copies do not fit in memory together."""
    scale = 14 if quick else 18
    n = 1 << scale
    nnz = 250_000 if quick else 4_000_000
    ext = 4096 if quick else 16384
    fem, side = (10, 300) if quick else (27, 1200)  # about 250 k / 4 M entries, as the rest
    makers: dict[str, Callable[[], Data]] = {
        "rmat": lambda: matrix_data(
            "rmat", gen.rmat(scale, 16), f"R-MAT scale {scale}, edge factor 16, unpermuted"
        ),
        "zipf": lambda: matrix_data(
            "zipf", gen.zipf_rows(n, n, nnz, s=1.2), f"{n}^2, Zipf rows s=1.2, heaviest first"
        ),
        "banded": lambda: matrix_data("banded", gen.banded(n, 15), f"{n}^2, bandwidth 15"),
        # the kinds users bring (SuiteSparse-like): a 3-D elasticity operator, a road
        # network numbered by region, a web graph of sites and popular pages
        "fem": lambda: matrix_data(
            "fem", _positive(gen.fem_stiffness(fem)), f"Q1 stiffness, {fem}^3 nodes x 3 unknowns"
        ),
        "road": lambda: matrix_data(
            "road", gen.road_network(side), f"road network, {side}^2 junctions in 32^2 tiles"
        ),
        "web": lambda: matrix_data(
            "web", gen.web_graph(n * 2), f"web graph, {2 * n} pages, degree 8, 75% in-site"
        ),
        "zipf3": lambda: tensor_data(
            "zipf3", (ext, ext, ext), nnz, f"{ext}^3, Zipf marginals s=1.1"
        ),
    }
    chosen = list(makers) if not names else list(names)
    unknown = [x for x in chosen if x not in makers]
    if unknown:
        raise SystemExit(f"unknown data sets {unknown}; choose from {sorted(makers)}")
    return [makers[x] for x in chosen]


def datasets(quick: bool, names: Sequence[str] | None = None) -> list[Data]:
    """The data sets themselves (all at once: for the quick sizes or a few of them)."""
    return [make() for make in dataset_makers(quick, names)]


# -- the reference -----------------------------------------------------------------------------


def _sddmm_vals(
    data: np.ndarray, rows: np.ndarray, cols: np.ndarray, c: np.ndarray, dt: np.ndarray
) -> np.ndarray:
    """``data[e] * (c[rows[e]] . dt[cols[e]])`` for every entry, in chunks."""
    out = np.empty(len(data))
    for s in range(0, len(data), CHUNK):
        e = slice(s, s + CHUNK)
        out[e] = data[e] * np.einsum("ij,ij->i", c[rows[e]], dt[cols[e]])
    return out


def _mttkrp_add_at(
    co: np.ndarray, vals: np.ndarray, c: np.ndarray, d: np.ndarray, n_rows: int
) -> np.ndarray:
    out = np.zeros((n_rows, c.shape[1]))
    for s in range(0, len(vals), CHUNK):
        e = slice(s, s + CHUNK)
        np.add.at(out, co[0, e], vals[e, None] * c[co[1, e]] * d[co[2, e]])
    return out


def reference(kernel: str, data: Data) -> Any:
    """The float64 numpy/scipy result of ``kernel`` on ``data`` (computed once)."""

    def make() -> Any:
        if kernel == "spmv":
            return data["csr"] @ data["c"]
        if kernel == "spmm":
            return data["csr"] @ data["C"]
        if kernel == "sddmm":
            m = data["csr"]
            rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
            vals = _sddmm_vals(
                m.data, rows, m.indices, data["C"], np.ascontiguousarray(data["D"].T)
            )
            return sp.csr_array((vals, m.indices, m.indptr), shape=m.shape)
        if kernel == "spadd3":
            return sp.csr_array(data["csr"] + data["C_add"] + data["D_add"])
        co, vals = data.coords()
        if kernel == "spttv":
            f = data.fibers()
            v = np.add.reduceat(vals * data["c"][co[2]], f["starts"]) if len(vals) else vals
            return sp.csr_array((v, (f["fi"], f["fj"])), shape=data.shape[:2])
        if kernel == "spmttkrp":
            return _mttkrp_add_at(co, vals, data["C"], data["D"], data.shape[0])
        if kernel == "spinnerprod":
            kc = data.keys("other")
            _, ia, ib = np.intersect1d(data.keys(), kc, assume_unique=True, return_indices=True)
            return float(vals[ia] @ data.coords("other")[1][ib])
        raise KeyError(kernel)

    return data.cached(f"reference:{kernel}", make)


def check(got: Any, want: Any, rtol: float = RTOL) -> str | None:
    """None when ``got`` equals ``want`` to ``rtol`` elementwise (sparse results: the same
    stored pattern too), else what differs."""
    if isinstance(want, float):
        g = float(got)
        return None if abs(g - want) <= rtol * abs(want) else f"{g!r} != {want!r}"
    if sp.issparse(want):
        if not sp.issparse(got):
            return f"a {type(got).__name__} where a sparse matrix was expected"
        g, w = sp.csr_array(got), sp.csr_array(want)
        if g.shape != w.shape:
            return f"shape {g.shape} != {w.shape}"
        g.sum_duplicates()
        w.sum_duplicates()
        g.eliminate_zeros()
        w.eliminate_zeros()
        if g.nnz != w.nnz or not (
            np.array_equal(g.indptr, w.indptr) and np.array_equal(g.indices, w.indices)
        ):
            return f"pattern differs ({g.nnz} entries vs {w.nnz})"
        got_vals, want_vals = g.data, w.data
    else:
        got_vals, want_vals = np.asarray(got), np.asarray(want)
        if got_vals.shape != want_vals.shape:
            return f"shape {got_vals.shape} != {want_vals.shape}"
    err = np.abs(got_vals - want_vals)
    bad = err > rtol * np.abs(want_vals)
    if np.any(bad):
        worst = int(np.argmax(err / np.maximum(np.abs(want_vals), 1e-300)))
        return (
            f"{int(bad.sum())} values off by more than rtol {rtol} (worst "
            f"{got_vals.ravel()[worst]!r} vs {want_vals.ravel()[worst]!r})"
        )
    return None


# -- peers -------------------------------------------------------------------------------------


def _need_matrix(kernel: str, data: Data) -> None:
    if kernel not in KERNELS:
        raise KeyError(kernel)
    if data.kind != "matrix":
        raise Unsupported("a matrix kernel")


def scipy_system(kernel: str, data: Data) -> Prepared:
    """scipy.sparse (single-threaded); SDDMM as a chunked gather of C's rows and D's columns
    (scipy has no SDDMM), the tensor kernels on the fiber matrix (one CSR row per ``(i, j)``
    fiber) or the ``I x JK`` matricization."""
    if kernel in MATRIX_KERNELS:
        m = data["csr"]
        if kernel == "spmv":
            c = data["c"]
            return lambda: m @ c
        if kernel == "spmm":
            cm = data["C"]
            return lambda: m @ cm
        if kernel == "sddmm":
            rows = data.cached("rows", lambda: np.repeat(np.arange(m.shape[0]), np.diff(m.indptr)))
            c, dt = data["C"], np.ascontiguousarray(data["D"].T)

            def sddmm() -> sp.csr_array:
                vals = _sddmm_vals(m.data, rows, m.indices, c, dt)
                return sp.csr_array((vals, m.indices, m.indptr), shape=m.shape)

            return sddmm
        if kernel == "spadd3":
            c2, d2 = data["C_add"], data["D_add"]
            return lambda: m + c2 + d2
    if data.kind != "tensor":
        raise Unsupported("a 3-tensor kernel")
    f = data.fibers()
    bf, s = f["Bf"], f["S"]
    if kernel == "spttv":
        c = data["c"]
        shape = data.shape[:2]
        fi, fj = f["fi"], f["fj"]
        return (lambda: bf @ c), (lambda v: sp.csr_array((v, (fi, fj)), shape=shape))
    if kernel == "spmttkrp":
        cm, dm, fj = data["C"], data["D"], f["fj"]
        return lambda: s @ ((bf @ dm) * cm[fj])
    if kernel == "spinnerprod":
        b, c2 = data.matricized(), data.matricized("other")
        return lambda: float(b.multiply(c2).sum())
    raise KeyError(kernel)


def numpy_system(kernel: str, data: Data) -> Prepared:
    """Vectorised numpy on a tensor's sorted coordinates: MTTKRP by ``np.add.at`` over
    chunks of entries, TTV by ``np.add.reduceat`` over fibers, the inner product by
    ``np.intersect1d`` of the linear indices."""
    if data.kind != "tensor":
        raise Unsupported("scipy.sparse is the matrix formulation")
    co, vals = data.coords()
    if kernel == "spmttkrp":
        cm, dm, n_rows = data["C"], data["D"], data.shape[0]
        return lambda: _mttkrp_add_at(co, vals, cm, dm, n_rows)
    if kernel == "spttv":
        f = data.fibers()
        c, starts, shape = data["c"], f["starts"], data.shape[:2]
        fi, fj, k = f["fi"], f["fj"], co[2]
        run = lambda: np.add.reduceat(vals * c[k], starts)  # noqa: E731
        return run, lambda v: sp.csr_array((v, (fi, fj)), shape=shape)
    if kernel == "spinnerprod":
        kb, kc = data.keys(), data.keys("other")
        vc = data.coords("other")[1]

        def inner() -> float:
            _, ia, ib = np.intersect1d(kb, kc, assume_unique=True, return_indices=True)
            return float(vals[ia] @ vc[ib])

        return inner
    raise KeyError(kernel)


def graphblas_unavailable() -> str | None:
    try:
        import graphblas  # noqa: F401
    except ImportError as e:
        return f"python-graphblas not importable ({e}); pip install python-graphblas"
    return None


def graphblas_system(threads: int) -> System:
    """python-graphblas (SuiteSparse:GraphBLAS) with ``threads`` threads: mxv, mxm, SDDMM
    as ``C @ D`` masked by B's structure and accumulated by ``times`` into a copy of B (D
    held transposed, n x 32, so the masked product takes dot products of rows: with D as
    32 x n it is three orders of magnitude slower), SpAdd3 as two ``ewise_add``; the
    tensor kernels on the fiber matrix (TTV: mxv; MTTKRP: the fibers times D, elementwise
    times C's rows gathered by a selection mxm, summed per slice by mxm) and the
    matricization (inner product: ``ewise_mult`` then ``reduce_scalar``)."""

    def system(kernel: str, data: Data) -> Prepared:
        import graphblas as gb

        def conv() -> dict[str, Any]:
            def mat(m: sp.csr_array) -> Any:
                m = sp.csr_array(m)
                return gb.Matrix.from_csr(
                    m.indptr, m.indices, m.data, nrows=m.shape[0], ncols=m.shape[1]
                )

            out: dict[str, Any] = {"mat": mat}
            if data.kind == "matrix":
                out.update(
                    B=mat(data["csr"]),
                    c=gb.Vector.from_dense(data["c"]),
                    C=gb.Matrix.from_dense(data["C"]),
                    DT=gb.Matrix.from_dense(np.ascontiguousarray(data["D"].T)),
                    C_add=mat(data["C_add"]),
                    D_add=mat(data["D_add"]),
                )
            else:
                f = data.fibers()
                nf = len(f["fj"])
                sel = sp.csr_array(
                    (np.ones(nf), f["fj"], np.arange(nf + 1)), shape=(nf, data.shape[1])
                )
                out.update(
                    Bf=mat(f["Bf"]),
                    S=mat(f["S"]),
                    P=mat(sel),
                    c=gb.Vector.from_dense(data["c"]),
                    C=gb.Matrix.from_dense(data["C"]),
                    D=gb.Matrix.from_dense(data["D"]),
                    B3=mat(data.matricized()),
                    C3=mat(data.matricized("other")),
                )
            return out

        g = data.cached("graphblas", conv)

        def with_threads(fn: Callable[[], Any]) -> Callable[[], Any]:
            def run() -> Any:
                gb.ss.config["nthreads"] = threads
                return fn()

            return run

        def to_csr(m: Any) -> sp.csr_array:
            indptr, indices, vals = m.to_csr()
            return sp.csr_array((vals, indices, indptr), shape=(m.nrows, m.ncols))

        def dense(x: Any) -> np.ndarray:
            return x.to_dense(fill_value=0.0)

        if data.kind == "matrix":
            b = g["B"]
            n = b.nrows
            if kernel == "spmv":

                def spmv() -> Any:
                    w = gb.Vector(float, n)
                    w << b.mxv(g["c"])
                    return w

                return with_threads(spmv), dense
            if kernel == "spmm":

                def spmm() -> Any:
                    out = gb.Matrix(float, n, WIDTH)
                    out << b.mxm(g["C"])
                    return out

                return with_threads(spmm), dense
            if kernel == "sddmm":

                def sddmm() -> Any:
                    out = b.dup()
                    out(b.S, accum=gb.binary.times) << g["C"].mxm(g["DT"].T)
                    return out

                return with_threads(sddmm), to_csr
            if kernel == "spadd3":

                def spadd3() -> Any:
                    out = gb.Matrix(float, n, n)
                    out << b.ewise_add(g["C_add"])
                    out << out.ewise_add(g["D_add"])
                    return out

                return with_threads(spadd3), to_csr
            raise Unsupported("a 3-tensor kernel")
        f = data.fibers()
        if kernel == "spttv":
            shape = data.shape[:2]
            fi, fj = f["fi"], f["fj"]
            nf = len(fj)

            def spttv() -> Any:
                w = gb.Vector(float, nf)
                w << g["Bf"].mxv(g["c"])
                return w

            return with_threads(spttv), lambda w: sp.csr_array((dense(w), (fi, fj)), shape=shape)
        if kernel == "spmttkrp":
            nf = len(f["fj"])
            i_len = data.shape[0]

            def mttkrp() -> Any:
                t = gb.Matrix(float, nf, WIDTH)
                t << g["Bf"].mxm(g["D"])
                t << t.ewise_mult(g["P"].mxm(g["C"]))
                out = gb.Matrix(float, i_len, WIDTH)
                out << g["S"].mxm(t)
                return out

            return with_threads(mttkrp), dense
        if kernel == "spinnerprod":

            def inner() -> float:
                return float(g["B3"].ewise_mult(g["C3"]).reduce_scalar().new().value)

            return with_threads(inner)
        raise KeyError(kernel)

    return system


def dask_unavailable() -> str | None:
    try:
        import dask.array  # noqa: F401

        import sparse  # noqa: F401
    except ImportError as e:
        return f"{e.name} not installed (pip install 'distal[bench]' and 'distal[sparse]')"
    return None


def dask_system(chunks: int = 2, workers: int = 2) -> System:
    """dask.array of pydata ``sparse.COO`` row chunks (``chunks`` equal row blocks) on the
    threaded scheduler with ``workers`` threads: SpMV, SpMM (``@`` with a numpy operand),
    SpAdd3 (``+``). Timed from building the graph to the computed result."""

    def system(kernel: str, data: Data) -> Prepared:
        if data.kind != "matrix":
            raise Unsupported("row-chunked matrices only")
        if kernel == "sddmm":
            raise Unsupported("no sampled dense-dense product in dask or pydata sparse")
        import dask.array as da

        import dask
        import sparse

        def conv() -> dict[str, Any]:
            n = data.shape[0]
            rows = -(-n // chunks)

            def arr(m: sp.csr_array) -> Any:
                return da.from_array(
                    sparse.COO.from_scipy_sparse(m), chunks=(rows, n), asarray=False
                )

            return {"B": arr(data["csr"]), "C_add": arr(data["C_add"]), "D_add": arr(data["D_add"])}

        g = data.cached(f"dask:{chunks}", conv)
        b = g["B"]

        def compute(x: Any) -> Any:
            with dask.config.set(scheduler="threads", num_workers=workers):
                return x.compute()

        if kernel == "spmv":
            c = data["c"]
            return lambda: compute(b @ c)
        if kernel == "spmm":
            cm = data["C"]
            return lambda: compute(b @ cm)
        if kernel == "spadd3":
            c2, d2 = g["C_add"], g["D_add"]
            return (lambda: compute(b + c2 + d2)), lambda r: r.to_scipy_sparse().tocsr()
        raise KeyError(kernel)

    return system


def pydata_system(kernel: str, data: Data) -> Prepared:
    """pydata ``sparse.COO`` 3-tensors (numba kernels, one thread): TTV by ``tensordot``
    (sparse result), MTTKRP by ``sparse.einsum``, the inner product by ``(B * C).sum()``."""
    if data.kind != "tensor":
        raise Unsupported("dask-sparse covers the matrices")
    import sparse

    def conv() -> dict[str, Any]:
        co, vals = data.coords()
        co2, vals2 = data.coords("other")
        return {
            "B": sparse.COO(co, vals, shape=data.shape, sorted=True, has_duplicates=False),
            "C3": sparse.COO(co2, vals2, shape=data.shape, sorted=True, has_duplicates=False),
        }

    g = data.cached("pydata", conv)
    b = g["B"]
    if kernel == "spttv":
        c = data["c"]
        return (
            lambda: sparse.tensordot(b, c, axes=((2,), (0,)), return_type=sparse.COO)
        ), lambda r: r.to_scipy_sparse().tocsr()
    if kernel == "spmttkrp":
        budget = 2 << 30  # einsum materialises the nnz x 32 product as a COO array
        if data.nnz * WIDTH * 32 > budget:
            raise Unsupported(
                f"sparse.einsum builds an nnz x {WIDTH} COO intermediate "
                f"(~{data.nnz * WIDTH * 32 >> 30} GiB here)"
            )
        cm, dm = data["C"], data["D"]

        def mttkrp() -> Any:
            return sparse.einsum("ijk,jl,kl->il", b, cm, dm)

        return mttkrp, lambda r: r.todense() if hasattr(r, "todense") else np.asarray(r)
    if kernel == "spinnerprod":
        c3 = g["C3"]

        def inner() -> float:
            r = (b * c3).sum()
            return float(r.todense() if hasattr(r, "todense") else r)

        return inner
    raise KeyError(kernel)


def petsc_unavailable() -> str | None:
    try:
        from petsc4py import PETSc  # noqa: F401
    except ImportError as e:
        return (
            f"petsc4py not importable in this venv ({e}), so no in-process PETSc row (SpMV, SpMM, "
            "SpAdd3); the petsc-seq / petsc-mpi2 rows run Debian's PETSc as a subprocess "
            "(benchmarks/setup_petsc.sh). For this row: pip install petsc petsc4py (builds "
            "PETSc from source; needs a BLAS/LAPACK, e.g. Debian's libopenblas-dev)"
        )
    return None


def petsc_system(kernel: str, data: Data) -> Prepared:
    """petsc4py, one sequential AIJ matrix: MatMult, MatMatMult with a dense matrix, MatAXPY
    (SpAdd3: a copy of B plus C plus D, different patterns)."""
    if data.kind != "matrix":
        raise Unsupported("PETSc matrices are 2-D")
    if kernel == "sddmm":
        raise Unsupported("PETSc has no sampled dense-dense product")
    from petsc4py import PETSc

    def conv() -> dict[str, Any]:
        it = PETSc.IntType

        def mat(m: sp.csr_array) -> Any:
            m = sp.csr_array(m)
            return PETSc.Mat().createAIJ(
                size=m.shape,
                csr=(m.indptr.astype(it), m.indices.astype(it), m.data.astype(PETSc.ScalarType)),
                comm=PETSc.COMM_SELF,
            )

        n = data.shape[0]
        x = PETSc.Vec().createWithArray(np.array(data["c"]), comm=PETSc.COMM_SELF)
        cd = PETSc.Mat().createDense(
            (n, WIDTH), array=np.asfortranarray(data["C"]), comm=PETSc.COMM_SELF
        )
        cd.assemble()
        return {"B": mat(data["csr"]), "C_add": mat(data["C_add"]),
                "D_add": mat(data["D_add"]), "x": x, "Cd": cd}  # fmt: skip

    g = data.cached("petsc", conv)
    b = g["B"]
    if kernel == "spmv":
        x = g["x"]

        def spmv() -> Any:
            y = b.createVecLeft()
            b.mult(x, y)
            return y

        return spmv, lambda y: y.getArray().copy()
    if kernel == "spmm":
        cd = g["Cd"]
        return (lambda: b.matMult(cd)), lambda r: np.array(r.getDenseArray())
    if kernel == "spadd3":
        c2, d2 = g["C_add"], g["D_add"]
        diff = PETSc.Mat.Structure.DIFFERENT_NONZERO_PATTERN

        def spadd3() -> Any:
            a = b.duplicate(copy=True)
            a.axpy(1.0, c2, structure=diff)
            a.axpy(1.0, d2, structure=diff)
            return a

        def to_csr(a: Any) -> sp.csr_array:
            indptr, indices, vals = a.getValuesCSR()
            return sp.csr_array((vals, indices, indptr), shape=a.getSize())

        return spadd3, to_csr
    raise KeyError(kernel)


SYSTEM_PYTHON = "/usr/bin/python3"
SYSTEM_MPIEXEC = "/usr/bin/mpiexec"
PETSC_PEER = os.path.join(HERE, "petsc_peer.py")


def system_petsc_unavailable() -> str | None:
    """Why Debian's petsc4py can't run under the system Python (None when it can)."""
    if not os.path.exists(SYSTEM_PYTHON):
        return f"no {SYSTEM_PYTHON}"
    res = subprocess.run([SYSTEM_PYTHON, "-c", "import petsc4py, numpy, scipy"],
                         capture_output=True, text=True)  # fmt: skip
    if res.returncode:
        last = (res.stderr.strip().splitlines() or ["failed"])[-1]
        return f"{SYSTEM_PYTHON} -c 'import petsc4py': {last} (sudo sh benchmarks/setup_petsc.sh)"
    return None


def _mpi_env() -> dict[str, str]:
    """One thread per rank; Debian's OpenMPI refuses root unless told."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_petsc_peer(what: str, m: Any, x: np.ndarray, ranks: int, *args: str) -> dict[str, Any]:
    """``benchmarks/petsc_peer.py`` on ``m`` and ``x`` (written as .npz / .npy) under the
    system Python, on ``ranks`` MPI ranks (``mpiexec -n``) or none (1): its JSON, and
    ``y`` (the SpMV result) when it wrote one."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.npz")
        sp.save_npz(path, sp.csr_matrix(m), compressed=False)
        np.save(os.path.join(tmp, "m.x.npy"), x)
        out = os.path.join(tmp, "y.npy")
        cmd = [SYSTEM_PYTHON, PETSC_PEER, what, path, "--out", out, *args]
        if ranks > 1:
            cmd = [SYSTEM_MPIEXEC, "-n", str(ranks), *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, env=_mpi_env(), timeout=1800)
        got = [json.loads(x[7:]) for x in res.stdout.splitlines() if x.startswith("RESULT ")]
        if res.returncode or not got:
            raise RuntimeError(f"petsc_peer.py failed ({res.returncode}): {res.stderr[-300:]}")
        if os.path.exists(out):
            got[0]["y"] = np.load(out)
        return got[0]


def system_petsc(ranks: int, repeat: int) -> System:
    """Debian's PETSc in a subprocess: SpMV (``MatMult``) on ``ranks`` ranks, timed there."""

    def system(kernel: str, data: Data) -> Prepared:
        if kernel != "spmv":
            raise Unsupported("the subprocess peer runs SpMV (and --cg)")
        _need_matrix(kernel, data)
        done: list[Timed] = []

        def run() -> Timed:  # the first (warm-up) call runs the subprocess: a failure is a row
            if not done:
                got = run_petsc_peer("spmv", data["csr"], data["c"], ranks, "--repeat", str(repeat))
                done.append(Timed(got["y"], got["times"], got["index_bytes"]))
            return done[0]

        return run

    return system


# -- systems -----------------------------------------------------------------------------------

SYSTEMS: dict[str, System] = {}
MISSING: dict[str, str] = {}  # a peer that could not be used, and why
INDEX_BYTES: dict[str, int] = {}  # a system's SpMV index size, where not that of scipy's CSR


def add_system(name: str, fn: System) -> None:
    """Add a system to every later :func:`run_suite` table (e.g. distal's own rows)."""
    SYSTEMS[name] = fn


def _register_peers(dask_chunks: int = 2, repeat: int = 5) -> None:
    add_system("scipy", scipy_system)
    add_system("numpy", numpy_system)
    why = graphblas_unavailable()
    if why:
        MISSING["graphblas"] = why
    else:
        add_system("graphblas-1t", graphblas_system(1))
        add_system("graphblas-2t", graphblas_system(2))
    why = dask_unavailable()
    if why:
        MISSING["dask-sparse"] = why
        MISSING["pydata-sparse"] = why
    else:
        add_system("dask-sparse", dask_system(dask_chunks, 2))
        add_system("pydata-sparse", pydata_system)
    why = petsc_unavailable()
    if why:
        MISSING["petsc"] = why
    else:
        from petsc4py import PETSc

        add_system("petsc", petsc_system)
        INDEX_BYTES["petsc"] = np.dtype(PETSc.IntType).itemsize
    why = system_petsc_unavailable()
    if why:
        MISSING["petsc-seq"] = MISSING["petsc-mpi2"] = why
    else:
        add_system("petsc-seq", system_petsc(1, repeat))
        if os.path.exists(SYSTEM_MPIEXEC):
            add_system("petsc-mpi2", system_petsc(2, repeat))
        else:
            MISSING["petsc-mpi2"] = f"no {SYSTEM_MPIEXEC} (Debian's PETSc MPI)"


# -- running -----------------------------------------------------------------------------------


@dataclass
class Row:
    kernel: str
    data: str
    system: str
    seconds: float | None  # median of the timed runs; None when not run
    runs: list[float]
    status: str  # "ok", "n/a: ...", "WRONG: ...", "error: ..."
    bytes: int | None = None  # SpMV: the bytes it must move at least (see the module doc)


def _prepare(fn: System, kernel: str, data: Data) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    prepared = fn(kernel, data)
    if isinstance(prepared, tuple):
        return prepared
    return prepared, lambda r: r


#: seconds each system waits before it is timed: OpenBLAS's threads spin for about 0.1 s
#: after a call before they sleep, and on 2 cores a spinning thread halves the speed of
#: whatever runs next on two threads (an SpMV after a numpy dot of 4 M elements: 5.4 ->
#: 8.4 ms); importing distal shortens numpy's OpenBLAS spin to 2^20 cycles
#: (``distal.kernels.blas.spin``), but graphblas's OpenMP threads and other BLAS libraries
#: still spin: every system gets the same pause
SETTLE_S = 0.3


def time_one(run: Callable[[], Any], repeat: int) -> tuple[Any, list[float]]:
    """The warm-up's result and the times of ``repeat`` further runs."""
    result = run()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return result, times


def spmv_bytes(data: Data, index_bytes: int) -> int:
    """The bytes a CSR SpMV moves at least: values and column indices, row pointers, x, y."""
    rows, cols = data.shape
    return data.nnz * (8 + index_bytes) + (rows + 1) * index_bytes + 8 * (rows + cols)


def _measure(fn: System, kernel: str, data: Data, name: str, want: Any, repeat: int) -> Row:
    """One system's row: its timings and the check of its result (a failure is a row too)."""
    try:
        run, convert = _prepare(fn, kernel, data)
    except Unsupported as e:
        return Row(kernel, data.name, name, None, [], f"n/a: {e}")
    try:
        time.sleep(SETTLE_S)  # the previous system's idle BLAS / OpenMP threads stop spinning
        result, times = time_one(run, repeat)
        ib = INDEX_BYTES.get(name)
        if isinstance(result, Timed):
            result, times, ib = result.result, result.times, result.index_bytes or ib
        bad = check(convert(result), want)
    except Exception as e:  # a peer's failure is a row of the table
        return Row(kernel, data.name, name, None, [], f"error: {e!r}"[:200])
    status = "ok" if bad is None else f"WRONG: {bad}"
    nbytes = None
    if kernel == "spmv":
        nbytes = spmv_bytes(data, ib or data["csr"].indices.itemsize)
    return Row(kernel, data.name, name, statistics.median(times), times, status, nbytes)


def run_suite(
    data_sets: Iterable[Data],
    kernels: Sequence[str] = KERNELS,
    repeat: int = 5,
    extra_systems: dict[str, System] | None = None,
    out: Callable[[str], None] = print,
) -> list[Row]:
    """Every kernel on every data set of its kind, on every system (the registered ones
    and ``extra_systems``), each result checked against :func:`reference`. A data set's
    cache (converted copies, references) is cleared when its kernels are done."""
    systems = {**SYSTEMS, **(extra_systems or {})}
    rows: list[Row] = []
    for data in data_sets:
        mine = [
            k for k in kernels if k in (MATRIX_KERNELS if data.kind == "matrix" else TENSOR_KERNELS)
        ]
        for kernel in mine:
            want = reference(kernel, data)
            for name, fn in systems.items():
                rows.append(_measure(fn, kernel, data, name, want, repeat))
                out(_line(rows[-1], rows))
        data.cache.clear()
    return rows


def _base(row: Row, rows: Sequence[Row]) -> float | None:
    for r in rows:
        if r.kernel == row.kernel and r.data == row.data and r.system == BASE and r.seconds:
            return r.seconds
    return None


TRIAD: float | None = None  # the STREAM triad of this run, bytes/s (None: not measured)


def measure_triad() -> str:
    """Measure the STREAM triad (2 threads, best of 20, ``benchmarks/stream.py``), keep the
    best measured so far in :data:`TRIAD` (the suites measure before and after their rows:
    on a shared machine one measurement may be low) and say what it is."""
    global TRIAD
    sys.path.insert(0, HERE)
    try:
        import stream

        bw = stream.triad_bandwidth(2, repeat=20)
    except Exception as e:  # no bandwidth fraction then, with the reason
        return f"STREAM triad: not measured ({e!r})"
    TRIAD = max(TRIAD or 0.0, bw)
    return (
        f"STREAM triad (2 threads, {stream.kernels(2)[0]}): {bw / 1e9:.2f} GB/s "
        f"(best this run: {TRIAD / 1e9:.2f} GB/s); load average {os.getloadavg()}"
    )


def _bandwidth(row: Row) -> str:
    if row.bytes is None or not row.seconds:
        return f"{'':>6s} {'':>6s}"
    gbs = row.bytes / row.seconds
    frac = f"{gbs / TRIAD:6.2f}" if TRIAD else f"{'-':>6s}"
    return f"{gbs / 1e9:6.2f} {frac}"


def _line(row: Row, rows: Sequence[Row]) -> str:
    if row.seconds is None:
        return (
            f"{row.kernel:12s} {row.data:8s} {row.system:14s} {'-':>10s} {'-':>8s} "
            f"{_bandwidth(row)}  {row.status}"
        )
    base = _base(row, rows)
    ratio = f"{base / row.seconds:8.2f}" if base else f"{'-':>8s}"
    return (
        f"{row.kernel:12s} {row.data:8s} {row.system:14s} {row.seconds * 1e3:10.2f} {ratio} "
        f"{_bandwidth(row)}  {row.status}"
    )


def table(rows: Sequence[Row]) -> str:
    """The table of what ran: median milliseconds and speed relative to scipy (scipy's time
    / the system's: above 1 is faster than scipy), for SpMV the bandwidth reached and its
    fraction of the STREAM triad; then the systems' kernels that did not run, with why."""
    head = (
        f"{'kernel':12s} {'data':8s} {'system':14s} {'median ms':>10s} {'x scipy':>8s} "
        f"{'GB/s':>6s} {'/triad':>6s}  check"
    )
    lines = [head, "-" * len(head)]
    lines += [_line(r, rows) for r in rows if not r.status.startswith("n/a")]
    skipped: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.status.startswith("n/a"):
            names = skipped.setdefault((r.system, r.status[5:]), [])
            if r.kernel not in names:
                names.append(r.kernel)
    if skipped:
        lines.append("not run:")
        lines += [f"  {sy:14s} {', '.join(ks)}: {why}" for (sy, why), ks in skipped.items()]
    return "\n".join(lines)


def laplacian(grid: int) -> sp.csr_array:
    """The 5-point Laplacian of a ``grid`` x ``grid`` mesh (Dirichlet boundary), CSR."""
    t = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(grid, grid))
    return sp.csr_array(sp.kronsum(t, t, format="csr"))


def _best_of(fn: Callable[[], Any], repeat: int) -> tuple[Any, float]:
    out, best = None, float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return out, best


def cg_lines(grid: int, iters: int, repeat: int) -> list[str]:
    """CG per iteration on the 5-point Laplacian, ``iters`` iterations from ``x0 = 0``
    without a preconditioner, the best of ``repeat`` solves: distal (local runtime, 2
    processors; the one-iteration call, which binds, subtracted), scipy, PETSc on 1 and 2
    ranks (its KSP set up by a warm-up solve). The residual ``||b - A x||`` of each is
    printed: the same iterations give the same residual to rounding."""
    from scipy.sparse.linalg import cg

    import distal as dl

    a = laplacian(grid)
    b = _dense(np.random.default_rng(7), a.shape[0])
    out = [
        f"CG, 5-point Laplacian {grid} x {grid} (n {a.shape[0]:,}, nnz {a.nnz:,}), {iters} "
        f"iterations, no preconditioner (ms per iteration, best of {repeat}):"
    ]

    def res(x: np.ndarray) -> float:
        return float(np.linalg.norm(b - a @ x))

    marks: list[float] = []  # each iteration's end, by the solvers' callbacks
    steps: dict[str, list[float]] = {}

    def mark(_: Any) -> None:
        marks.append(time.perf_counter())

    def run(k: int, name: str = "") -> Any:
        marks.clear()
        got = dl.apps.cg(a, b, machine=2, tol=0.0, maxiter=k, callback=mark,
                         session=dl.Session(progress=False))  # fmt: skip
        steps.setdefault(name, []).extend(np.diff(marks))
        return got

    run(1)
    _, one = _best_of(lambda: run(1), repeat)
    (x, its), t = _best_of(lambda: run(iters, "distal local P=2"), repeat)
    per = {"distal local P=2": ((t - one) / (iters - 1), res(x), its)}
    count = [0]

    def scipy_cg() -> np.ndarray:
        count[0] = 0
        marks.clear()

        def each(xk: Any) -> None:
            count[0] += 1
            mark(xk)

        got = cg(a, b, rtol=0.0, atol=0.0, maxiter=iters, callback=each)[0]
        steps.setdefault("scipy", []).extend(np.diff(marks))
        return got

    x, t = _best_of(scipy_cg, repeat)
    per["scipy"] = (t / iters, res(x), count[0])
    why = system_petsc_unavailable()
    for ranks in (1, 2):
        name = f"petsc KSPCG {'seq' if ranks == 1 else f'mpi{ranks}'}"
        if why or (ranks > 1 and not os.path.exists(SYSTEM_MPIEXEC)):
            out.append(f"  {name:18s} skipped: {why or f'no {SYSTEM_MPIEXEC}'}")
            continue
        args = ("--iters", str(iters), "--repeat", str(repeat))
        try:
            got = run_petsc_peer("cg", a, b, ranks, *args)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            out.append(f"  {name:18s} failed: {' '.join(str(e).split())}")
            continue
        per[name] = (min(got["times"]) / iters, got["residual"], got["iterations"])
        if got.get("iteration_median") is not None:
            steps[name] = [got["iteration_median"]]
    base = per["scipy"][0]
    for name, (sec, r, its) in per.items():
        note = _median_note(steps.get(name))
        out.append(f"  {name:18s} {sec * 1e3:9.2f} ms  x scipy {base / sec:5.2f}  "
                   f"iterations {its}  residual {r:.6e}{note}")  # fmt: skip
    return out


def _median_note(steps: list[float] | None) -> str:
    """The median time of one iteration (from the solver's per-iteration callback or
    monitor), which neither a solve's set-up nor one slow moment of a shared machine moves."""
    return "" if not steps else f"  median iteration {1e3 * float(np.median(steps)):7.2f} ms"


def _progress(line: str) -> None:
    """Each row as it is measured, with the peak memory so far (on stderr: a full run takes
    minutes, and a peer that needs too much memory shows where)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{line}  [peak rss {peak:.1f} GiB]", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="about 250 k entries per data set")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--kernels", default=",".join(KERNELS))
    p.add_argument("--data", default="", help="comma-separated data sets (default: all)")
    p.add_argument("--dask-chunks", type=int, default=2, help="row chunks of the dask arrays")
    p.add_argument("--cg", action="store_true", help="add CG on a 1000 x 1000 Laplacian")
    p.add_argument("--cg-iters", type=int, default=50)
    args = p.parse_args(argv)
    kernels = [k for k in args.kernels.split(",") if k]
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        p.error(f"unknown kernels {unknown}; choose from {list(KERNELS)}")
    print(f"load average before: {os.getloadavg()}")
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, cores {os.cpu_count()}")
    print(measure_triad())
    _register_peers(args.dask_chunks, args.repeat)
    for name, why in MISSING.items():
        print(f"skipped {name}: {why}")
    print(versions())
    makers = dataset_makers(args.quick, [x for x in args.data.split(",") if x])

    def made() -> Iterator[Data]:
        for make in makers:
            t = time.perf_counter()
            d = make()
            print(
                f"data {d.name}: shape {d.shape}, nnz {d.nnz:,} ({d.describe}), made in "
                f"{time.perf_counter() - t:.1f} s",
                flush=True,
            )
            yield d

    rows = run_suite(made(), kernels, args.repeat, out=_progress)
    print(measure_triad())
    print()
    print(table(rows))
    if args.cg:
        print()
        print("\n".join(cg_lines(200 if args.quick else 1000, args.cg_iters, 3)))
    print(f"\nload average after: {os.getloadavg()}")
    return 1 if any(r.status.startswith(("WRONG", "error")) for r in rows) else 0


def versions() -> str:
    """The versions of the peers that are importable."""
    found = [f"numpy {np.__version__}", f"scipy {scipy.__version__}"]
    for mod, label in (("graphblas", "python-graphblas"), ("dask", "dask"), ("sparse", "sparse"),
                       ("petsc4py", "petsc4py")):  # fmt: skip
        try:
            m = __import__(mod)
            found.append(f"{label} {getattr(m, '__version__', '?')}")
        except ImportError:
            continue
    try:
        import graphblas as gb

        lib = gb.ss.about["library_version"]
        found.append("SuiteSparse:GraphBLAS " + ".".join(map(str, lib)))
    except Exception:
        pass
    return "versions: " + ", ".join(found)


if __name__ == "__main__":
    raise SystemExit(main())
