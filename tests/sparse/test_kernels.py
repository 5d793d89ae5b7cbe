"""Sparse kernels against scipy/numpy on the local runtime, every one with its measured stats
equal to the bound plan's prediction.

Kernels: SpMV, SpMM, SDDMM (a CSR output on B's pattern), SpAdd3 (a CSR output on the union),
SpTTV (CSR or dense output), SpMTTKRP and the inner product of two sparse 3-tensors (a
scalar output). Each runs with a coordinate split by rows (``distribute([i])``) and a
non-zero split (``fuse`` + ``pos``; for 3-tensors also the fiber split of ``(i, j)``) on
``P`` in 1, 2, 3, 4, 8 processors, on uniform, banded, R-MAT, Zipf-sorted and skewed (empty
rows, one row denser than ``nnz/P``) patterns whose extents ``P`` does not divide. Then a
2-D machine, the input kinds a sparse tensor accepts, and explicit zeros.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from patterns import matrices, tensor3, uniform

import distal as dl
import sparse as pydata
from distal.sparse.array import SparseArray

PROCS = [1, 2, 3, 4, 8]
KINDS = ["uniform", "banded", "rmat", "zipf", "skewed"]
N = 37
_MATS = matrices(N, seed=3)
_OTHER = [matrices(N, seed=s) for s in (4, 5)]
SHAPE3 = (23, 11, 13)
_TENSORS = {
    "uniform": tensor3(SHAPE3, 400, seed=1),
    "skewed": tensor3(SHAPE3, 400, seed=2, skew=1.5),  # heavy low slices, empty high ones
}


def close(value, ref) -> None:
    ref = np.asarray(ref)
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(value, ref, rtol=1e-12, atol=1e-12 * scale)


def run(kernel, inputs: dict):
    """Run on the local runtime; the measured stats are the predicted ones."""
    r = kernel.run(inputs)
    assert r.stats == kernel.stats(inputs)
    assert r.stats.iterations == kernel.bind(inputs).stats().iterations
    return r


def same_pattern(a: sp.sparray, b: sp.sparray) -> bool:
    a, b = sp.csr_array(a), sp.csr_array(b)
    a.sort_indices()
    b.sort_indices()
    return np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)


def cut(s, split: str, driver, M, i, j, k=None):
    """Distribute a schedule by rows (``row``), by non-zeros of ``(i, j)`` (``nz``; with
    ``k``, of ``(i, j, k)``) or by fibers ``(i, j)`` of a 3-tensor (``fiber``)."""
    io, ii, f, ff, fp, fo, fi = dl.index_vars("io ii f ff fp fo fi")
    if split == "row":
        return s.distribute([i], [io], [ii], M), io
    s = s.fuse(i, j, f)
    if split == "nz" and k is not None:
        s = s.fuse(f, k, ff).pos(ff, fp, driver)
    else:
        s = s.pos(f, fp, driver)
    return s.distribute([fp], [fo], [fi], M), fo


def mat_dist(split: str) -> str:
    return "xy -> x" if split == "row" else "xy -> (xy)"


def ten_dist(split: str) -> str:
    return {"row": "xyz -> x", "nz": "xyz -> (xyz)", "fiber": "xyz -> (xy)"}[split]


# ---------------------------------------------------------------------------------------------
# matrix kernels
# ---------------------------------------------------------------------------------------------


def spmv(n, m, P, split):
    M = dl.Machine(P)
    i, j = dl.index_vars("i j")
    B = dl.Tensor("B", (n, m), format="csr", dist=mat_dist(split), machine=M)
    c = dl.Tensor("c", (m,), dist="x -> x", machine=M)
    a = dl.Tensor("a", (n,), dist="x -> x", machine=M)
    a[i] = B[i, j] * c[j]
    s, o = cut(dl.schedule(a), split, B, M, i, j)
    return dl.compile(s.communicate([a, B, c], o))


def spmm(n, m, K, P, split):
    M = dl.Machine(P)
    i, j, k = dl.index_vars("i j k")
    B = dl.Tensor("B", (n, m), format="csr", dist=mat_dist(split), machine=M)
    C = dl.Tensor("C", (m, K), dist="jk -> j", machine=M)
    A = dl.Tensor("A", (n, K), dist="ik -> i", machine=M)
    A[i, k] = B[i, j] * C[j, k]
    s, o = cut(dl.schedule(A).reorder([i, j, k]), split, B, M, i, j)
    return dl.compile(s.communicate([A, B, C], o))


def sddmm(n, m, J, P, split):
    M = dl.Machine(P)
    i, j, k = dl.index_vars("i j k")
    B = dl.Tensor("B", (n, m), format="csr", dist=mat_dist(split), machine=M)
    C = dl.Tensor("C", (n, J), dist="ij -> i", machine=M)
    D = dl.Tensor("D", (J, m), dist="jk -> k", machine=M)
    A = dl.Tensor("A", (n, m), format="csr", dist=mat_dist(split), machine=M)
    A[i, k] = B[i, k] * C[i, j] * D[j, k]
    s, o = cut(dl.schedule(A), split, B, M, i, k)
    return dl.compile(s.communicate([A, B, C, D], o))


def spadd3(n, m, P, split, out_dist=None):
    M = dl.Machine(P)
    i, j = dl.index_vars("i j")
    d = mat_dist(split)
    B, C, D = (dl.Tensor(x, (n, m), format="csr", dist=d, machine=M) for x in "BCD")
    A = dl.Tensor("A", (n, m), format="csr", dist=out_dist or d, machine=M)
    A[i, j] = B[i, j] + C[i, j] + D[i, j]
    s, o = cut(dl.schedule(A), split, B, M, i, j)
    return dl.compile(s.communicate([A, B, C, D], o))


SPLITS = ["row", "nz"]


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("kind", KINDS)
def test_spmv(kind, split):
    B = _MATS[kind]
    x = np.random.default_rng(1).standard_normal(N)
    for P in PROCS:
        close(run(spmv(N, N, P, split), {"B": B, "c": x}).value, B @ x)


@pytest.mark.parametrize("K", [5, 8])
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("kind", KINDS)
def test_spmm(kind, split, K):
    B = _MATS[kind]
    C = np.random.default_rng(2).standard_normal((N, K))
    for P in PROCS:
        close(run(spmm(N, N, K, P, split), {"B": B, "C": C}).value, B @ C)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("kind", KINDS)
def test_sddmm(kind, split):
    B = _MATS[kind]
    rng = np.random.default_rng(3)
    C, D = rng.standard_normal((N, 6)), rng.standard_normal((6, N))
    ref = sp.csr_array(B.multiply(C @ D))
    for P in PROCS:
        v = run(sddmm(N, N, 6, P, split), {"B": B, "C": C, "D": D}).value
        assert isinstance(v, SparseArray)
        assert v.nnz == B.nnz
        assert same_pattern(v.to_scipy(), B)
        close(v.to_dense(), ref.toarray())


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("kind", KINDS)
def test_spadd3(kind, split):
    mats = [_MATS[kind], _OTHER[0][kind], _OTHER[1][KINDS[(KINDS.index(kind) + 1) % 5]]]
    inputs = dict(zip("BCD", mats, strict=True))
    union = abs(mats[0]) + abs(mats[1]) + abs(mats[2])  # no cancellation: the union pattern
    ref = (mats[0] + mats[1] + mats[2]).toarray()
    for P in PROCS:
        for out_dist in (None, "xy -> x"):
            v = run(spadd3(N, N, P, split, out_dist), inputs).value
            assert same_pattern(v.to_scipy(), union)
            close(v.to_dense(), ref)


@pytest.mark.parametrize("split", SPLITS)
def test_rectangular_matrix_kernels(split):
    B = uniform(29, 41, 0.15, seed=9)
    rng = np.random.default_rng(4)
    x, C = rng.standard_normal(41), rng.standard_normal((41, 5))
    C2, D2 = rng.standard_normal((29, 3)), rng.standard_normal((3, 41))
    for P in PROCS:
        close(run(spmv(29, 41, P, split), {"B": B, "c": x}).value, B @ x)
        close(run(spmm(29, 41, 5, P, split), {"B": B, "C": C}).value, B @ C)
        v = run(sddmm(29, 41, 3, P, split), {"B": B, "C": C2, "D": D2}).value
        close(v.to_dense(), B.multiply(C2 @ D2).toarray())


# ---------------------------------------------------------------------------------------------
# 3-tensor kernels
# ---------------------------------------------------------------------------------------------


def coo3(kind: str) -> pydata.COO:
    coords, vals = _TENSORS[kind]
    return pydata.COO(coords, vals, shape=SHAPE3)


def spttv(P, split, out_format):
    M = dl.Machine(P)
    i, j, k = dl.index_vars("i j k")
    B = dl.Tensor("B", SHAPE3, format="dss", dist=ten_dist(split), machine=M)
    c = dl.Tensor("c", (SHAPE3[2],), dist="x -> x", machine=M)
    A = dl.Tensor("A", SHAPE3[:2], format=out_format, dist="xy -> x", machine=M)
    A[i, j] = B[i, j, k] * c[k]
    s, o = cut(dl.schedule(A), split, B, M, i, j, k)
    return dl.compile(s.communicate([A, B, c], o))


def mttkrp(P, split, fmt, R=4):
    M = dl.Machine(P)
    i, j, k, r = dl.index_vars("i j k r")
    B = dl.Tensor("B", SHAPE3, format=fmt, dist=ten_dist(split), machine=M)
    C = dl.Tensor("C", (SHAPE3[1], R), dist="jr -> j", machine=M)
    D = dl.Tensor("D", (SHAPE3[2], R), dist="kr -> k", machine=M)
    A = dl.Tensor("A", (SHAPE3[0], R), dist="ir -> i", machine=M)
    A[i, r] = B[i, j, k] * C[j, r] * D[k, r]
    s, o = cut(dl.schedule(A).reorder([i, j, k, r]), split, B, M, i, j, k)
    return dl.compile(s.communicate([A, B, C, D], o))


def inner(P, split, fmt, a_dist="-> 0"):
    """``a = B(i,j,k) * C(i,j,k)``: a scalar on one processor (``"-> 0"``; an order-0 tensor
    names no dimension on the left; None: processor 0 as well)."""
    M = dl.Machine(P)
    i, j, k = dl.index_vars("i j k")
    B = dl.Tensor("B", SHAPE3, format=fmt, dist=ten_dist(split), machine=M)
    C = dl.Tensor("C", SHAPE3, format=fmt, dist=ten_dist(split), machine=M)
    a = dl.Tensor("a", (), dist=a_dist, machine=M if a_dist else None)
    a[()] = B[i, j, k] * C[i, j, k]
    s, o = cut(dl.schedule(a), split, B, M, i, j, k)
    return dl.compile(s.communicate([a, B, C], o))


SPLITS3 = ["row", "nz", "fiber"]


@pytest.mark.parametrize("out_format", ["csr", "dense"])
@pytest.mark.parametrize("split", SPLITS3)
@pytest.mark.parametrize("kind", list(_TENSORS))
def test_spttv(kind, split, out_format):
    B = coo3(kind)
    c = np.random.default_rng(5).standard_normal(SHAPE3[2])
    ref = np.einsum("ijk,k->ij", B.todense(), c)
    for P in PROCS:
        v = run(spttv(P, split, out_format), {"B": B, "c": c}).value
        if out_format == "csr":
            assert isinstance(v, SparseArray)
            # the output's pattern: the (i, j) fibers B stores
            fibers = np.unique(B.coords[0] * SHAPE3[1] + B.coords[1])
            got = v.to_scipy()
            assert np.array_equal(np.sort(got.nonzero()[0] * SHAPE3[1] + got.nonzero()[1]), fibers)
            v = v.to_dense()
        close(v, ref)


@pytest.mark.parametrize("fmt", ["dss", "csf"])
@pytest.mark.parametrize("split", SPLITS3)
@pytest.mark.parametrize("kind", list(_TENSORS))
def test_mttkrp(kind, split, fmt):
    B = coo3(kind)
    rng = np.random.default_rng(6)
    C, D = rng.standard_normal((SHAPE3[1], 4)), rng.standard_normal((SHAPE3[2], 4))
    ref = np.einsum("ijk,jl,kl->il", B.todense(), C, D)
    for P in PROCS:
        close(run(mttkrp(P, split, fmt), {"B": B, "C": C, "D": D}).value, ref)


@pytest.mark.parametrize("fmt", ["dss", "csf"])
@pytest.mark.parametrize("split", SPLITS3)
def test_inner_product(split, fmt):
    """Two sparse operands with different patterns (the iteration is their intersection);
    under position splits C's entries live by C's positions, not B's, so they move."""
    B, C = coo3("uniform"), coo3("skewed")
    both = np.intersect1d(
        np.ravel_multi_index(tuple(B.coords), SHAPE3), np.ravel_multi_index(tuple(C.coords), SHAPE3)
    )
    assert len(both) > 10  # the operands do overlap
    ref = np.sum(B.todense() * C.todense())
    moved = 0
    for P in PROCS:
        for a_dist in ("-> 0", None, f"-> {P - 1}"):
            r = run(inner(P, split, fmt, a_dist), {"B": B, "C": C})
            assert r.value.shape == ()
            close(r.value, ref)
            moved += sum(r.stats.index_words_received)
            assert sum(r.stats.iterations) == len(both)
    if split != "row":
        assert moved > 0


# ---------------------------------------------------------------------------------------------
# a 2-D machine
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_spmm_rows_by_k_on_a_grid(kind):
    """Machine(2, 2): rows over dimension 0, the dense columns k over dimension 1 (B's rows
    replicated along dimension 1)."""
    B = _MATS[kind]
    M = dl.Machine(2, 2)
    i, j, k, io, ii, ko, ki = dl.index_vars("i j k io ii ko ki")
    K = 8
    Bt = dl.Tensor("B", (N, N), format="csr", dist="xy -> x*", machine=M)
    Ct = dl.Tensor("C", (N, K), dist="jk -> jk", machine=M)
    At = dl.Tensor("A", (N, K), dist="ik -> ik", machine=M)
    At[i, k] = Bt[i, j] * Ct[j, k]
    s = dl.schedule(At).distribute([i, k], [io, ko], [ii, ki], M).communicate([At, Bt, Ct], ko)
    kern = dl.compile(s)
    C = np.random.default_rng(7).standard_normal((N, K))
    r = run(kern, {"B": B, "C": C})
    close(r.value, B @ C)
    # each processor iterates its row block's entries times its half of k
    rows = np.diff(B.indptr)
    for p, (x, _) in enumerate(M.coords()):
        nb = -(-N // 2)
        assert r.stats.iterations[p] == rows[x * nb : (x + 1) * nb].sum() * 4


@pytest.mark.parametrize("kind", KINDS)
def test_checkerboard_spmv(kind):
    """B ``"xy -> xy"`` on Machine(2, 2), ``distribute([i, j])``. A sparse kernel's output
    has one copy of each element, so ``a`` is ``"x -> x0"`` (rows over dimension 0, on the
    column-0 processors): the column-1 processors send their partial sums there.
    ``"x -> x*"`` (replicated) is refused."""
    B = _MATS[kind]
    M = dl.Machine(2, 2)
    i, j, io, ii, jo, ji = dl.index_vars("i j io ii jo ji")
    Bt = dl.Tensor("B", (N, N), format="csr", dist="xy -> xy", machine=M)
    c = dl.Tensor("c", (N,), dist="x -> *x", machine=M)
    x = np.random.default_rng(8).standard_normal(N)
    for a_dist in ("x -> x0", "x -> xx"):
        a = dl.Tensor("a", (N,), dist=a_dist, machine=M)
        a[i] = Bt[i, j] * c[j]
        s = dl.schedule(a).distribute([i, j], [io, jo], [ii, ji], M).communicate([a, Bt, c], jo)
        r = run(dl.compile(s), {"B": B, "c": x})
        close(r.value, B @ x)
        assert sum(r.stats.iterations) == B.nnz
    # a replicated output: reduced on one replica per block, then sent to the others
    a = dl.Tensor("a", (N,), dist="x -> x*", machine=M)
    a[i] = Bt[i, j] * c[j]
    s = dl.schedule(a).distribute([i, j], [io, jo], [ii, ji], M).communicate([a, Bt, c], jo)
    k = dl.compile(s)
    r = run(k, {"B": B, "c": x})
    close(r.value, B @ x)
    assert r.stats == k.stats({"B": B})


# ---------------------------------------------------------------------------------------------
# what a sparse input may be
# ---------------------------------------------------------------------------------------------


def as_kinds(B: sp.csr_array) -> dict[str, object]:
    return {
        "scipy csr_array": B,
        "scipy csr_matrix": sp.csr_matrix(B),
        "scipy coo_array": sp.coo_array(B),
        "pydata COO": pydata.COO.from_scipy_sparse(B),
        "SparseArray": SparseArray.from_scipy(B),
        "SparseArray coo": SparseArray.from_scipy(B, format="coo"),
        "dense numpy": B.toarray(),
    }


@pytest.mark.parametrize("split", SPLITS)
def test_input_kinds(split):
    """The same pattern given as each kind of array binds the same plan and runs the same."""
    B = _MATS["skewed"]
    x = np.random.default_rng(9).standard_normal(N)
    for P in (3, 4):
        k = spmv(N, N, P, split)
        want = k.stats({"B": B})
        for label, arr in as_kinds(B).items():
            r = run(k, {"B": arr, "c": x})
            assert r.stats == want, label
            close(r.value, B @ x)


def test_three_tensor_input_kinds():
    B = coo3("skewed")
    c = np.random.default_rng(10).standard_normal(SHAPE3[2])
    ref = np.einsum("ijk,k->ij", B.todense(), c)
    k = spttv(4, "nz", "dense")
    want = k.stats({"B": B})
    for arr in (
        B,
        SparseArray.from_pydata(B),
        SparseArray.from_pydata(B, format="csf"),
        SparseArray.from_coo(B.coords, B.data, SHAPE3),
        B.todense(),
    ):
        r = run(k, {"B": arr, "c": c})
        assert r.stats == want
        close(r.value, ref)


@pytest.mark.parametrize("split", SPLITS)
def test_explicit_zeros_stay_in_the_pattern(split):
    """Stored zeros of B are entries: they are visited, counted and kept in SDDMM's output;
    a dense array given for B has no such entries."""
    B = sp.csr_array(_MATS["rmat"], copy=True)
    B.data[::3] = 0.0
    rng = np.random.default_rng(11)
    C, D = rng.standard_normal((N, 6)), rng.standard_normal((6, N))
    for P in PROCS:
        k = sddmm(N, N, 6, P, split)
        r = run(k, {"B": B, "C": C, "D": D})
        assert sum(r.stats.iterations) == B.nnz * 6  # entries times the dense loop j
        assert r.value.nnz == B.nnz
        assert same_pattern(r.value.to_scipy(), B)
        close(r.value.to_dense(), B.multiply(C @ D).toarray())
        dense = run(k, {"B": B.toarray(), "C": C, "D": D})
        assert sum(dense.stats.iterations) == np.count_nonzero(B.data) * 6
        close(dense.value.to_dense(), B.multiply(C @ D).toarray())


def test_values_change_pattern_kept():
    """A bound kernel runs new values of its pattern without binding again."""
    B = _MATS["zipf"]
    k = spmv(N, N, 3, "nz")
    bound = k.bind({"B": B})
    x = np.random.default_rng(12).standard_normal(N)
    for seed in range(3):
        B2 = sp.csr_array(B, copy=True)
        B2.data = np.random.default_rng(seed).standard_normal(B.nnz)
        assert k.bind({"B": B2}) is bound
        r = bound.run({"B": B2, "c": x})
        assert r.stats == bound.stats()
        close(r.value, B2 @ x)


@pytest.mark.parametrize("split", SPLITS)
def test_operands_through_other_variables(split):
    """``a(i) = B(i,j) * C(j,i) * c(j) * d(i)``: a second sparse operand read transposed
    (its pattern meets B's in B's storage order) and dense operands of either variable."""
    B, C = _MATS["rmat"], _OTHER[0]["uniform"]
    rng = np.random.default_rng(13)
    x, y = rng.standard_normal(N), rng.standard_normal(N)
    ref = (B.multiply(C.T) @ x) * y
    assert np.abs(ref).max() > 0
    for P in PROCS:
        M = dl.Machine(P)
        i, j = dl.index_vars("i j")
        Bt = dl.Tensor("B", (N, N), format="csr", dist=mat_dist(split), machine=M)
        Ct = dl.Tensor("C", (N, N), format="csr", dist="xy -> y", machine=M)
        c = dl.Tensor("c", (N,), dist="x -> x", machine=M)
        d = dl.Tensor("d", (N,), dist="x -> x", machine=M)
        a = dl.Tensor("a", (N,), dist="x -> x", machine=M)
        a[i] = Bt[i, j] * Ct[j, i] * c[j] * d[i]
        s, o = cut(dl.schedule(a), split, Bt, M, i, j)
        k = dl.compile(s.communicate([a, Bt, Ct, c, d], o))
        close(run(k, {"B": B, "C": C, "c": x, "d": y}).value, ref)
