"""Named distributed algorithms written with the public API, for the MPI tests.

Each builder returns ``(kernel, inputs, expected)`` for a machine of the given shape; the
inputs are deterministic, so every MPI rank builds the same ones. The sparse builders
(``sparse_cases``, ``sparse_library_cases``) take scipy matrices or ``SparseArray``s and
return scipy's (or numpy's) value as ``expected``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

import distal as dl

if TYPE_CHECKING:
    import scipy.sparse as sp

Built = tuple[Any, dict[str, np.ndarray], np.ndarray]
SparseBuilt = tuple[Any, dict[str, Any], Any]  # kernel, inputs, scipy's value


def _rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def gemm(shape: tuple[int, int], n: int, algorithm: str) -> Built:
    """``dl.algorithms``' SUMMA, Cannon or PUMMA, ``A(i,j) = B(i,k) * C(k,j)`` on a 2-D grid,
    every tensor in 2-D tiles, ``k`` in ``max(shape)`` steps."""
    alg = getattr(dl.algorithms, algorithm)(n, machine=dl.Machine(*shape), steps=max(shape))
    b, c = _rand((n, n), 1), _rand((n, n), 2)
    return alg.compile(routing="auto"), {"B": b, "C": c}, b @ c


def johnson3d(shape: tuple[int, int, int], n: int) -> Built:
    """3-D GEMM: [i, j, k] distributed over a cube; the output is summed across k."""
    M = dl.Machine(*shape)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="ij -> ij0", machine=M)
    B = dl.Tensor("B", (n, n), dist="ik -> i*k", machine=M)
    C = dl.Tensor("C", (n, n), dist="kj -> *jk", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
    s = dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)
    s = s.communicate([A, B, C], ko)
    b, c = _rand((n, n), 3), _rand((n, n), 4)
    return dl.compile(s), {"B": b, "C": c}, b @ c


def ttv(shape: tuple[int, ...], n: int) -> Built:
    """``A(i,j) = B(i,j,k) * c(k)``, c replicated; on a 3-D grid k is cut and summed."""
    M = dl.Machine(*shape)
    i, j, k = dl.index_vars("i j k")
    if len(shape) == 3:
        A = dl.Tensor("A", (n, n - 1), dist="ij -> ij*", machine=M)
        B = dl.Tensor("B", (n, n - 1, n + 1), dist="ijk -> ijk", machine=M)
        c = dl.Tensor("c", (n + 1,), dist="k -> ***", machine=M)
        names = "io jo ko ii ji ki"
        axes = [i, j, k]
    else:
        A = dl.Tensor("A", (n, n - 1), dist="ij -> ij", machine=M)
        B = dl.Tensor("B", (n, n - 1, n + 1), dist="ijk -> ij", machine=M)
        c = dl.Tensor("c", (n + 1,), dist="k -> **", machine=M)
        names = "io jo ii ji"
        axes = [i, j]
    A[i, j] = B[i, j, k] * c[k]
    v = dl.index_vars(names)
    h = len(v) // 2
    s = dl.schedule(A).distribute(axes, list(v[:h]), list(v[h:]), M)
    b, cc = _rand((n, n - 1, n + 1), 5), _rand((n + 1,), 6)
    return dl.compile(s), {"B": b, "c": cc}, np.einsum("ijk,k->ij", b, cc)


def mttkrp(shape: tuple[int, int, int], n: int, r: int = 5) -> Built:
    """``A(i,l) = B(i,j,k) * C(j,l) * D(k,l)`` with [i, j, k] over a 3-D grid."""
    M = dl.Machine(*shape)
    i, j, k, l_ = dl.index_vars("i j k l")
    A = dl.Tensor("A", (n, r), dist="il -> i00", machine=M)
    B = dl.Tensor("B", (n, n + 1, n + 2), dist="ijk -> ijk", machine=M)
    C = dl.Tensor("C", (n + 1, r), dist="jl -> *j*", machine=M)
    D = dl.Tensor("D", (n + 2, r), dist="kl -> **k", machine=M)
    A[i, l_] = B[i, j, k] * C[j, l_] * D[k, l_]
    io, jo, ko, ii, ji, ki = dl.index_vars("io jo ko ii ji ki")
    s = dl.schedule(A).distribute([i, j, k], [io, jo, ko], [ii, ji, ki], M)
    s = s.communicate([A, B, C, D], ko)
    b = _rand((n, n + 1, n + 2), 7)
    c, d = _rand((n + 1, r), 8), _rand((n + 2, r), 9)
    return dl.compile(s), {"B": b, "C": c, "D": d}, np.einsum("ijk,jl,kl->il", b, c, d)


def named_cases(p: int, n: int = 24) -> dict[str, Callable[[], Built]]:
    """The named algorithms that fit a machine of ``p`` processors."""
    two = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (4, 2)}[p]
    three = {1: (1, 1, 1), 2: (1, 1, 2), 4: (2, 1, 2), 8: (2, 2, 2)}[p]
    out: dict[str, Callable[[], Built]] = {
        f"summa {two}": lambda: gemm(two, n, "summa"),
        f"summa {two[::-1]}": lambda: gemm(two[::-1], n + 3, "summa"),
        f"3-D gemm {three}": lambda: johnson3d(three, n),
        f"ttv {two}": lambda: ttv(two, n),
        f"ttv {three}": lambda: ttv(three, n - 5),
        f"mttkrp {three}": lambda: mttkrp(three, n - 4),
    }
    if two[0] == two[1]:
        out[f"cannon {two}"] = lambda: gemm(two, n + 1, "cannon")
        out[f"pumma {two}"] = lambda: gemm(two, n, "pumma")
    else:
        sq = {2: (1, 2), 8: (2, 4)}[p]
        out[f"cannon {sq}"] = lambda: gemm(sq, n + 1, "cannon")
    return out


def library_cases(p: int, n: int = 12) -> dict[str, Callable[[], Any]]:
    """Algorithms of ``distal.algorithms`` on machines of ``p`` processors (name -> builder).

    Each builder returns an ``Algorithm`` (``compile()``, ``inputs()``, ``reference()``).
    """
    import distal.algorithms as al

    M = dl.Machine
    two = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (4, 2)}[p]
    three = {1: (1, 1, 1), 2: (1, 1, 2), 4: (2, 1, 2), 8: (2, 2, 2)}[p]
    cube = {1: (1, 1, 1), 2: (1, 1, 2), 4: (2, 2, 1), 8: (2, 2, 2)}[p]
    nodes, q = {1: ((1, 1), 1), 2: ((1, 1), 2), 4: ((2, 1), 2), 8: ((2, 2), 2)}[p]
    t3 = (n, n - 1, n + 1)
    return {
        "summa": lambda: al.summa(n, n + 1, n + 2, machine=M(*two)),
        "cannon": lambda: al.cannon(n, machine=M(*two)),
        "pumma": lambda: al.pumma(n, machine=M(*two)),
        "row_1d": lambda: al.row_1d(n, machine=M(p)),
        "johnson_3d": lambda: al.johnson_3d(n, machine=M(*three)),
        "solomonik_25d": lambda: al.solomonik_25d(n, machine=M(*cube)),
        "cosma": lambda: al.cosma(n, n + 2, n - 1, machine=p),
        "ttv": lambda: al.ttv(t3, machine=M(*two)),
        "ttm": lambda: al.ttm(t3, 4, machine=M(*two)),
        "mttkrp": lambda: al.mttkrp(t3, 4, machine=M(*three)),
        "inner_product": lambda: al.inner_product(t3, machine=M(*three)),
        "contraction_4d": lambda: al.contraction_4d(4, 3, 5, 4, 3, 2, machine=M(*two)),
        "hierarchical_summa": lambda: al.hierarchical_summa(n, machine=M(*nodes).nest(M(q))),
        "hierarchical_cannon": lambda: al.hierarchical_cannon(n, machine=M(*nodes).nest(M(q))),
    }


def _matrix(n: int, m: int, density: float, seed: int) -> sp.csr_matrix:
    """A random CSR matrix with a few empty and a few long rows (uneven pieces)."""
    import scipy.sparse as sp  # here: the dense jobs (and _user_script.py) do without scipy

    rng = np.random.default_rng(seed)
    b = sp.random(n, m, density=density, format="lil", random_state=rng)
    b[n // 3, :] = rng.random(m)  # one full row
    b[n // 2, :] = 0  # one empty row
    return b.tocsr()


def _banded(n: int, seed: int) -> sp.csr_matrix:
    """A banded matrix (offsets -3, -1, 0, 1, 3), whose rows a row cut leaves reading
    mostly the processor's own vector rows (and a few rows past each end: the ghosts)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    offsets = (-3, -1, 0, 1, 3)
    return sp.diags([rng.standard_normal(n - abs(k)) for k in offsets], offsets).tocsr()


def spmv(
    P: int,
    split: str,
    bdist: str,
    n: int = 60,
    dtype: Any = np.float64,
    adist: str = "x -> x",
    banded: bool = False,
) -> SparseBuilt:
    """``a[i] = B[i, j] * c[j]``: split ``"row"`` (cut i) or ``"nz"`` (cut B's non-zeros);
    ``adist="x -> *"`` replicates the output (reduced on one replica, then sent to all);
    ``banded``: B banded (:func:`_banded`), not random."""
    M = dl.Machine(P)
    i, j, io, ii, f, fp, fo, fi = dl.index_vars("i j io ii f fp fo fi")
    B = dl.Tensor("B", (n, n), format="csr", dist=bdist, machine=M, dtype=dtype)
    c = dl.Tensor("c", (n,), dist="x -> x", machine=M, dtype=dtype)
    a = dl.Tensor("a", (n,), dist=adist, machine=M, dtype=dtype)
    a[i] = B[i, j] * c[j]
    s = _split(dl.schedule(a), split, (i, j), B, M, (io, ii, f, fp, fo, fi))
    s = s.communicate([a, B, c], fo if split == "nz" else io)
    rng = np.random.default_rng(n)
    bv = _banded(n, 1) if banded else _matrix(n, n, 0.1, 1)
    cv = rng.random(n)
    if np.dtype(dtype).kind == "c":
        bv = (bv + 1j * (_banded(n, 2) if banded else _matrix(n, n, 0.1, 1))).tocsr()
        cv = cv + 1j * rng.random(n)
    return dl.compile(s), {"B": bv, "c": cv}, bv @ cv


def spmm_streamed(P: int, steps: int, n: int = 60, r: int = 8) -> SparseBuilt:
    """SpMM with the rows of B per processor and C's columns streamed in ``steps`` chunks:
    C and A communicated at the chunk loop, B once per processor (a plan of ``steps``
    steps whose fetches of step s+1 are posted while step s computes)."""
    M = dl.Machine(P)
    i, j, k, io, ii, ko, ki = dl.index_vars("i j k io ii ko ki")
    B = dl.Tensor("B", (n, n), format="csr", dist="xy -> x", machine=M)
    C = dl.Tensor("C", (n, r), dist="xy -> x", machine=M)
    A = dl.Tensor("A", (n, r), dist="xy -> x", machine=M)
    A[i, k] = B[i, j] * C[j, k]
    s = dl.schedule(A).reorder([i, j, k]).distribute([i], [io], [ii], M)
    s = s.divide(k, ko, ki, steps).reorder([ko, ii, j, ki])
    s = s.communicate([C, A], ko).communicate(B, io)
    bv = _matrix(n, n, 0.1, 2)
    cv = np.random.default_rng(3).random((n, r))
    return dl.compile(s), {"B": bv, "C": cv}, bv @ cv


def spmm(P: int, split: str, bdist: str, n: int = 60, r: int = 8) -> SparseBuilt:
    """``A[i, k] = B[i, j] * C[j, k]`` with dense ``C`` and ``A`` (row blocks)."""
    M = dl.Machine(P)
    i, j, k, io, ii, f, fp, fo, fi = dl.index_vars("i j k io ii f fp fo fi")
    B = dl.Tensor("B", (n, n), format="csr", dist=bdist, machine=M)
    C = dl.Tensor("C", (n, r), dist="xy -> x", machine=M)
    A = dl.Tensor("A", (n, r), dist="xy -> x", machine=M)
    A[i, k] = B[i, j] * C[j, k]
    s = _split(dl.schedule(A).reorder([i, j, k]), split, (i, j), B, M, (io, ii, f, fp, fo, fi))
    s = s.communicate([A, B, C], fo if split == "nz" else io)
    bv = _matrix(n, n, 0.1, 2)
    cv = np.random.default_rng(3).random((n, r))
    return dl.compile(s), {"B": bv, "C": cv}, bv @ cv


def sddmm(P: int, split: str, bdist: str, ddist: str, n: int = 40, m: int = 30) -> SparseBuilt:
    """``A[i, k] = B[i, k] * C[i, j] * D[j, k]``: a csr output with B's pattern."""
    M = dl.Machine(P)
    i, j, k, io, ii, f, fp, fo, fi = dl.index_vars("i j k io ii f fp fo fi")
    r = 6
    B = dl.Tensor("B", (n, m), format="csr", dist=bdist, machine=M)
    C = dl.Tensor("C", (n, r), dist="xy -> x", machine=M)
    D = dl.Tensor("D", (r, m), dist=ddist, machine=M)
    A = dl.Tensor("A", (n, m), format="csr", dist="xy -> x", machine=M)
    A[i, k] = B[i, k] * C[i, j] * D[j, k]
    s = _split(dl.schedule(A), split, (i, k), B, M, (io, ii, f, fp, fo, fi))
    s = s.communicate([A, B, C, D], fo if split == "nz" else io)
    bv = _matrix(n, m, 0.2, 4)
    rng = np.random.default_rng(5)
    cv, dv = rng.random((n, r)), rng.random((r, m))
    return dl.compile(s), {"B": bv, "C": cv, "D": dv}, bv.multiply(cv @ dv).tocsr()


def _split(s: Any, split: str, ij: tuple, B: Any, M: Any, names: tuple) -> Any:
    io, ii, f, fp, fo, fi = names
    if split == "row":
        return s.distribute([ij[0]], [io], [ii], M)
    return s.fuse(ij[0], ij[1], f).pos(f, fp, B).distribute([fp], [fo], [fi], M)


def sparse_cases(P: int) -> dict[str, Callable[[], SparseBuilt]]:
    """The sparse kernels written with the public API, by name: SpMV, SpMM and SDDMM in
    the row and non-zero splits, and with their sparse input laid out against the cut."""
    out: dict[str, Callable[[], SparseBuilt]] = {}
    for split, bdist in (("row", "xy -> x"), ("nz", "xy -> (xy)")):
        out[f"spmv {split}"] = lambda s=split, b=bdist: spmv(P, s, b)
        out[f"spmm {split}"] = lambda s=split, b=bdist: spmm(P, s, b)
        for ddist in ("xy -> *", "xy -> x"):
            out[f"sddmm {split} D {ddist}"] = lambda s=split, b=bdist, d=ddist: sddmm(P, s, b, d)
    # sparse inputs laid out against the cut: their pieces travel with pos/crd
    out["spmv row, B by non-zeros"] = lambda: spmv(P, "row", "xy -> (xy)")
    out["spmv nz, B by rows"] = lambda: spmv(P, "nz", "xy -> x")
    out["spmm nz, B by rows"] = lambda: spmm(P, "nz", "xy -> x")
    out["sddmm row, B by non-zeros"] = lambda: sddmm(P, "row", "xy -> (xy)", "xy -> x")
    out["spmv nz complex"] = lambda: spmv(P, "nz", "xy -> x", dtype=np.complex128)
    out["spmv nz, a replicated"] = lambda: spmv(P, "nz", "xy -> (xy)", adist="x -> *")
    out["spmm row, C streamed in 3 steps"] = lambda: spmm_streamed(P, 3)
    # each rank's leaf reads its own rows of c in place, its fetch only the ghosts
    out["spmv row banded"] = lambda: spmv(P, "row", "xy -> x", n=48 * P, banded=True)
    out["spmv row banded complex"] = lambda: spmv(
        P, "row", "xy -> x", n=48 * P, dtype=np.complex128, banded=True
    )
    return out


def _tensor3(shape: tuple[int, int, int], nnz: int, fmt: str, seed: int) -> Any:
    """A random 3-tensor with slices of uneven weight (low ``i`` heavy, high ``i`` empty)."""
    from distal.sparse.array import SparseArray

    rng = np.random.default_rng(seed)
    i = (shape[0] * rng.random(nnz) ** 2 * 0.8).astype(np.int64)
    coords = np.stack([i, rng.integers(0, shape[1], nnz), rng.integers(0, shape[2], nnz)])
    return SparseArray.from_coo(coords, rng.random(nnz), shape, fmt)


def sparse_library_cases(P: int) -> dict[str, Callable[[], SparseBuilt]]:
    """The sparse algorithms of ``distal.algorithms``, with inputs, by name."""
    from distal.algorithms import sparse as alg

    M, grid = dl.Machine(P), dl.Machine(P // 2, 2)
    rng = np.random.default_rng(7)
    n, m = 37, 29
    b = _matrix(n, m, 0.15, 8)
    t = (17, 9, 11)

    def case(a: Any, inputs: dict[str, Any]) -> SparseBuilt:
        return dl.compile(a.schedule), inputs, a.reference(inputs)

    out: dict[str, Callable[[], SparseBuilt]] = {
        "spmv rows hull": lambda: case(
            alg.spmv((n, m), M, "rows", exact=False), {"B": b, "c": rng.random(m)}
        ),
        "spmm rows 2-D": lambda: case(
            alg.spmm((n, m), 6, grid, "rows"), {"B": b, "C": rng.random((m, 6))}
        ),
        "spmm nonzeros 2-D": lambda: case(
            alg.spmm((n, m), 6, grid, "nonzeros"), {"B": b, "C": rng.random((m, 6))}
        ),
        "sddmm nonzeros, A by non-zeros": lambda: case(
            alg.sddmm((n, m), 5, M, "nonzeros"),
            {"B": b, "C": rng.random((n, 5)), "D": rng.random((5, m))},
        ),
        "spttv fibers": lambda: case(
            alg.spttv(t, M, "fibers"), {"B": _tensor3(t, 150, "dss", 9), "c": rng.random(t[2])}
        ),
        "spadd3": lambda: case(
            alg.spadd3((n, m), M), {x: _matrix(n, m, 0.1, 10 + k) for k, x in enumerate("BCD")}
        ),
        "spinnerprod": lambda: case(
            alg.spinnerprod(t, M),
            {"B": _tensor3(t, 200, "csf", 11), "C": _tensor3(t, 200, "csf", 12)},
        ),
    }
    for fmt in ("csf", "dss"):
        out[f"spmttkrp rows, {fmt} B by non-zeros"] = lambda f=fmt: mttkrp_moved(P, t, f)
    for split in ("rows", "nonzeros", "fibers"):
        out[f"spmttkrp {split}"] = lambda s=split: case(
            alg.spmttkrp(t, 4, M, s),
            {"B": _tensor3(t, 150, "dss", 13), "C": rng.random((t[1], 4)),
             "D": rng.random((t[2], 4))},
        )  # fmt: skip
    return out


def mttkrp_moved(P: int, t: tuple[int, int, int], fmt: str) -> SparseBuilt:
    """SpMTTKRP cut by rows with B laid out by non-zeros: 3-level pieces (``pos``/``crd`` of
    compressed levels, ``crd`` of singleton ones) travel to the rows' processors."""
    M = dl.Machine(P)
    i, j, k, ll, io, ii = dl.index_vars("i j k l io ii")
    B = dl.Tensor("B", t, format=fmt, dist="xyz -> (xyz)", machine=M)
    C = dl.Tensor("C", (t[1], 3), dist="jl -> *", machine=M)
    D = dl.Tensor("D", (t[2], 3), dist="kl -> j", machine=M)
    A = dl.Tensor("A", (t[0], 3), dist="il -> i", machine=M)
    A[i, ll] = B[i, j, k] * C[j, ll] * D[k, ll]
    s = dl.schedule(A).reorder([i, j, k, ll]).distribute([i], [io], [ii], M)
    s = s.communicate([A, B, C, D], io)
    rng = np.random.default_rng(14)
    b = _tensor3(t, 160, fmt, 15)
    c, d = rng.random((t[1], 3)), rng.random((t[2], 3))
    ci, cj, ck = b.coordinates()
    ref = np.zeros((t[0], 3))
    np.add.at(ref, ci, b.vals[:, None] * c[cj] * d[ck])
    return dl.compile(s), {"B": b, "C": c, "D": d}, ref
