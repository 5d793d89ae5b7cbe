"""SpDISTAL's kernels as ready schedules: row splits, non-zero splits and 2-D splits.

Each function returns a :class:`SparseAlgorithm`: the tensors with their distributions, a
schedule built from public commands only (``distribute``, ``fuse``, ``pos``,
``communicate``), and ``words(inputs)``, the words each processor receives computed from
the pattern by the formula in ``formula`` -- written here from the block rules, never from
the plan, so comparing it with ``kernel.stats(inputs)`` checks the compiler.

``split`` chooses the cut:

* ``"rows"``: a coordinate cut of the top storage level (SpDISTAL's *RowSplit*): rows in
  blocks of ``ceil(N/P)``; no partial sums; load follows the row lengths;
* ``"nonzeros"``: ``fuse`` the sparse operand's levels and ``pos`` (SpDISTAL's *PosSplit*):
  stored entries in blocks of ``ceil(nnz/P)``; perfectly balanced; rows that straddle two
  processors send partial sums;
* ``"fibers"`` (3-tensors): fuse the top two levels only; each ``(i, j)`` fiber stays whole.

On a 2-D machine SpMM and SDDMM cut their dense loop (the columns of the result) over the
second machine dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distal.algorithms.base import check_extent
from distal.distribution.machine import Machine
from distal.errors import ScheduleError
from distal.kernel import Kernel, compile
from distal.lang.nodes import Tensor, index_vars
from distal.schedule.api import Schedule, schedule

SPLITS = ("rows", "nonzeros", "fibers")


@dataclass(frozen=True, eq=False)
class SparseAlgorithm:
    """A sparse kernel's distributions + schedule + its pattern-computed traffic.

    Attributes:
        name: e.g. ``"spmv"``.
        tensors: every tensor by name, the output first.
        schedule: the schedule (public commands only; ``repr`` is the code).
        output: the output's name.
        machine: the processor grid.
        split: ``"rows"``, ``"nonzeros"`` or ``"fibers"``.
        formula: how ``words`` counts, in words.
        reference: ``reference(inputs)`` computes the output with scipy / numpy.
    """

    name: str
    tensors: Mapping[str, Tensor]
    schedule: Schedule
    output: str
    machine: Machine
    split: str
    formula: str
    reference: Callable[[Mapping[str, Any]], Any]
    _words: Callable[[Mapping[str, Any]], list[int]] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def input_names(self) -> tuple[str, ...]:
        """Input tensor names."""
        return tuple(n for n in self.tensors if n != self.output)

    def compile(self) -> Kernel:
        """``dl.compile`` of the schedule."""
        return compile(self.schedule)

    def words(self, inputs: Mapping[str, Any]) -> list[int]:
        """Words each processor receives for these inputs' patterns (see ``formula``)."""
        if self._words is None:
            raise ScheduleError(f"{self.name} has no independent traffic formula")
        return self._words(inputs)

    def __repr__(self) -> str:
        return f"SparseAlgorithm({self.name!r}, split={self.split!r}, machine={self.machine!r})"


def _machine(machine: Any, name: str) -> Machine:
    if not isinstance(machine, Machine):
        raise ScheduleError(f"{name}: machine must be a dl.Machine, got {machine!r}")
    if len(machine.levels) > 1 or machine.ndim > 2:
        raise ScheduleError(f"{name}: takes a 1-D or 2-D machine, got {machine!r}")
    return machine


def _split(split: Any, name: str, allowed: tuple[str, ...]) -> str:
    if split not in allowed:
        raise ScheduleError(f"{name}: split must be one of {list(allowed)}, got {split!r}")
    return split


def _block(n: int, g: int) -> int:
    return max(1, -(-n // g))


def _csr(inputs: Mapping[str, Any], name: str, shape: tuple[int, ...], fmt: str) -> Any:
    from distal.sparse.array import as_sparse

    return as_sparse(inputs[name], fmt, shape)


def _entry_owner_rows(rows: np.ndarray, n: int, P: int) -> np.ndarray:
    return rows // _block(n, P)


def _gather_words(
    proc: np.ndarray, ref: np.ndarray, n_ref: int, P: int, width: int, exact: bool
) -> list[int]:
    """Words of a dense operand with rows in ``ceil(n/P)`` blocks, fetched by processor
    ``proc[e]`` at row ``ref[e]``: each distinct row a processor references (or every row of
    their hull) and does not own, times ``width``."""
    out = [0] * P
    b = _block(n_ref, P)
    for p in range(P):
        r = ref[proc == p]
        if not len(r):
            continue
        rows = np.unique(r) if exact else np.arange(r.min(), r.max() + 1)
        out[p] = int(np.count_nonzero(rows // b != p)) * width
    return out


def _partial_words(proc: np.ndarray, row: np.ndarray, n: int, P: int, width: int) -> list[int]:
    """Words of partial sums: each output row a processor's entries touch and another owns
    (rows in ``ceil(n/P)`` blocks), times ``width``, counted at the owner."""
    out = [0] * P
    b = _block(n, P)
    for p in range(P):
        rows = np.unique(row[proc == p])
        for q in rows[rows // b != p] // b:
            out[int(q)] += width
    return out


def _entry_procs(n_rows: int, rows: np.ndarray, nnz: int, P: int, split: str) -> np.ndarray:
    if split == "rows":
        return rows // _block(n_rows, P)
    return np.arange(nnz) // _block(nnz, P)


def spmv(
    shape: tuple[int, int], machine: Machine, split: str = "rows", exact: bool = True
) -> SparseAlgorithm:
    """``a(i) = B(i,j) * c(j)``, B CSR, a and c in row blocks on a 1-D machine."""
    name = "spmv"
    M = _machine(machine, name)
    if M.ndim != 1:
        raise ScheduleError(f"{name}: takes a 1-D machine, got {M!r}")
    split = _split(split, name, SPLITS[:2])
    m, n = (check_extent(x, "shape", name) for x in shape)
    i, j, io, ii, f, fp, fo, fi = index_vars("i j io ii f fp fo fi")
    B = Tensor("B", (m, n), format="csr", dist="xy -> x" if split == "rows" else "xy -> (xy)",
               machine=M)  # fmt: skip
    c = Tensor("c", (n,), dist="x -> x", machine=M)
    a = Tensor("a", (m,), dist="x -> x", machine=M)
    a[i] = B[i, j] * c[j]
    s = schedule(a)
    if split == "rows":
        s = s.distribute([i], [io], [ii], M).communicate([a, B, c], io, exact=exact)
    else:
        s = s.fuse(i, j, f).pos(f, fp, B).distribute([fp], [fo], [fi], M)
        s = s.communicate([a, B, c], fo, exact=exact)
    P = M.size

    def words(inputs: Mapping[str, Any]) -> list[int]:
        arr = _csr(inputs, "B", (m, n), "csr")
        rows, cols = arr.coordinates()
        proc = _entry_procs(m, rows, arr.nnz, P, split)
        got = _gather_words(proc, cols, n, P, 1, exact)
        if split == "nonzeros":
            got = [x + y for x, y in zip(got, _partial_words(proc, rows, m, P, 1), strict=True)]
        return got

    return SparseAlgorithm(
        name, {"a": a, "B": B, "c": c}, s, "a", M, split,
        "c: distinct columns of p's entries outside p's block of c"
        + (" (their hull)" if not exact else "")
        + ("; a: rows p's entries touch that another processor owns, one word each, at the"
           " owner" if split == "nonzeros" else ""),
        lambda x: _scipy(x["B"]) @ np.asarray(x["c"]), words, {"exact": exact},
    )  # fmt: skip


def spmm(
    shape: tuple[int, int], k: int, machine: Machine, split: str = "rows", exact: bool = True
) -> SparseAlgorithm:
    """``A(i,k) = B(i,j) * C(j,k)``, B CSR; C and A in row blocks; on a 2-D machine the
    columns ``k`` are cut over the second dimension."""
    name = "spmm"
    M = _machine(machine, name)
    split = _split(split, name, SPLITS[:2])
    m, n = (check_extent(x, "shape", name) for x in shape)
    k = check_extent(k, "k", name)
    i, j, kk, io, ii, ko, ki, f, fp, fo, fi = index_vars("i j k io ii ko ki f fp fo fi")
    two = M.ndim == 2
    bdist = ("xy -> x" if split == "rows" else "xy -> (xy)") + ("*" if two else "")
    B = Tensor("B", (m, n), format="csr", dist=bdist, machine=M)
    C = Tensor("C", (n, k), dist="jk -> jk" if two else "jk -> j", machine=M)
    A = Tensor("A", (m, k), dist="ik -> ik" if two else "ik -> i", machine=M)
    A[i, kk] = B[i, j] * C[j, kk]
    s = schedule(A)
    if split == "rows":
        s = s.reorder([i, j, kk])
        s = (s.distribute([i, kk], [io, ko], [ii, ki], M) if two
             else s.distribute([i], [io], [ii], M))  # fmt: skip
        top = io
    else:
        s = s.reorder([i, j, kk]).fuse(i, j, f).pos(f, fp, B)
        s = (s.distribute([fp, kk], [fo, ko], [fi, ki], M) if two
             else s.distribute([fp], [fo], [fi], M))  # fmt: skip
        top = fo
    s = s.communicate([A, B, C], ko if two else top, exact=exact)
    P0 = M.shape[0]
    P1 = M.shape[1] if two else 1

    def words(inputs: Mapping[str, Any]) -> list[int]:
        arr = _csr(inputs, "B", (m, n), "csr")
        rows, cols = arr.coordinates()
        proc = _entry_procs(m, rows, arr.nnz, P0, split)
        out = []
        kb = _block(k, P1)
        gw = _gather_words(proc, cols, n, P0, 1, exact)
        pw = _partial_words(proc, rows, m, P0, 1) if split == "nonzeros" else [0] * P0
        for p0 in range(P0):
            for p1 in range(P1):
                width = max(0, min((p1 + 1) * kb, k) - min(p1 * kb, k))
                out.append((gw[p0] + pw[p0]) * width)
        return out

    return SparseAlgorithm(
        name, {"A": A, "B": B, "C": C}, s, "A", M, split,
        "C: distinct rows j of p's entries outside p's row block, times p's columns of k"
        + ("; A: touched rows owned elsewhere, times p's columns" if split == "nonzeros"
           else ""),
        lambda x: _scipy(x["B"]) @ np.asarray(x["C"]), words if not two or exact else None,
        {"k": k, "exact": exact},
    )  # fmt: skip


def sddmm(shape: tuple[int, int], j: int, machine: Machine, split: str = "rows") -> SparseAlgorithm:
    """``A(i,k) = B(i,k) * C(i,j) * D(j,k)``: A keeps B's pattern (CSR); C in row blocks,
    D whole on every processor (its columns are reached through B's coordinates)."""
    name = "sddmm"
    M = _machine(machine, name)
    if M.ndim != 1:
        raise ScheduleError(f"{name}: takes a 1-D machine, got {M!r}")
    split = _split(split, name, SPLITS[:2])
    m, n = (check_extent(x, "shape", name) for x in shape)
    jn = check_extent(j, "j", name)
    i, k, jj, io, ii, f, fp, fo, fi = index_vars("i k j io ii f fp fo fi")
    dist = "xy -> x" if split == "rows" else "xy -> (xy)"
    B = Tensor("B", (m, n), format="csr", dist=dist, machine=M)
    A = Tensor("A", (m, n), format="csr", dist=dist, machine=M)
    C = Tensor("C", (m, jn), dist="ij -> i", machine=M)
    D = Tensor("D", (jn, n), dist="jk -> *", machine=M)
    A[i, k] = B[i, k] * C[i, jj] * D[jj, k]
    s = schedule(A)
    if split == "rows":
        s = s.distribute([i], [io], [ii], M).communicate([A, B, C, D], io)
    else:
        s = s.fuse(i, k, f).pos(f, fp, B).distribute([fp], [fo], [fi], M)
        s = s.communicate([A, B, C, D], fo)
    P = M.size

    def words(inputs: Mapping[str, Any]) -> list[int]:
        arr = _csr(inputs, "B", (m, n), "csr")
        rows, _ = arr.coordinates()
        proc = _entry_procs(m, rows, arr.nnz, P, split)
        return _gather_words(proc, rows, m, P, jn, True)

    def reference(x: Mapping[str, Any]) -> Any:
        b = _scipy(x["B"]).tocoo()
        vals = b.data * np.einsum(
            "ej,je->e", np.asarray(x["C"])[b.row], np.asarray(x["D"])[:, b.col]
        )
        import scipy.sparse as sp

        return sp.csr_array((vals, (b.row, b.col)), shape=b.shape)

    return SparseAlgorithm(
        name, {"A": A, "B": B, "C": C, "D": D}, s, "A", M, split,
        "C: distinct rows i of p's entries outside p's row block, times j (D is replicated; "
        "A's entries are owned where they are computed)", reference, words, {"j": jn},
    )  # fmt: skip


def spmttkrp(
    shape: tuple[int, int, int],
    rank: int,
    machine: Machine,
    split: str = "rows",
) -> SparseAlgorithm:
    """``A(i,l) = B(i,j,k) * C(j,l) * D(k,l)``, B in DSS; C and D whole on every processor,
    A in row blocks. ``"nonzeros"`` cuts B's stored entries (all three levels fused)."""
    name = "spmttkrp"
    M = _machine(machine, name)
    if M.ndim != 1:
        raise ScheduleError(f"{name}: takes a 1-D machine, got {M!r}")
    split = _split(split, name, SPLITS)
    ni, nj, nk = (check_extent(x, "shape", name) for x in shape)
    L = check_extent(rank, "rank", name)
    i, j, k, ll, io, ii, f, g, fp, fo, fi = index_vars("i j k l io ii f g fp fo fi")
    dist = {"rows": "xyz -> x", "nonzeros": "xyz -> (xyz)", "fibers": "xyz -> (xy)"}[split]
    B = Tensor("B", (ni, nj, nk), format="dss", dist=dist, machine=M)
    C = Tensor("C", (nj, L), dist="jl -> *", machine=M)
    D = Tensor("D", (nk, L), dist="kl -> *", machine=M)
    A = Tensor("A", (ni, L), dist="il -> i", machine=M)
    A[i, ll] = B[i, j, k] * C[j, ll] * D[k, ll]
    s = schedule(A).reorder([i, j, k, ll])
    if split == "rows":
        s = s.distribute([i], [io], [ii], M).communicate([A, B, C, D], io)
    else:
        s = s.fuse(i, j, f)
        if split == "nonzeros":
            s = s.fuse(f, k, g).pos(g, fp, B)
        else:
            s = s.pos(f, fp, B)
        s = s.distribute([fp], [fo], [fi], M).communicate([A, B, C, D], fo)

    def reference(x: Mapping[str, Any]) -> Any:
        from distal.sparse.array import as_sparse

        b = as_sparse(x["B"], "dss", (ni, nj, nk))
        ci, cj, ck = b.coordinates()
        out = np.zeros((ni, L))
        np.add.at(out, ci, b.vals[:, None] * np.asarray(x["C"])[cj] * np.asarray(x["D"])[ck])
        return out

    return SparseAlgorithm(
        name, {"A": A, "B": B, "C": C, "D": D}, s, "A", M, split,
        "C, D replicated: nothing fetched; A: rows p's entries touch that another owns, "
        "times l (non-zero and fiber splits)", reference, None, {"l": L},
    )  # fmt: skip


def spttv(shape: tuple[int, int, int], machine: Machine, split: str = "rows") -> SparseAlgorithm:
    """``A(i,j) = B(i,j,k) * c(k)``, B in DSS, A in CSR (the ``(i, j)`` fibers of B); c whole
    on every processor."""
    name = "spttv"
    M = _machine(machine, name)
    split = _split(split, name, ("rows", "fibers"))
    ni, nj, nk = (check_extent(x, "shape", name) for x in shape)
    i, j, k, io, ii, f, fp, fo, fi = index_vars("i j k io ii f fp fo fi")
    dist = "xyz -> x" if split == "rows" else "xyz -> (xy)"
    B = Tensor("B", (ni, nj, nk), format="dss", dist=dist, machine=M)
    c = Tensor("c", (nk,), dist="k -> *", machine=M)
    A = Tensor("A", (ni, nj), format="csr", dist="xy -> x", machine=M)
    A[i, j] = B[i, j, k] * c[k]
    s = schedule(A)
    if split == "rows":
        s = s.distribute([i], [io], [ii], M).communicate([A, B, c], io)
    else:
        s = s.fuse(i, j, f).pos(f, fp, B).distribute([fp], [fo], [fi], M)
        s = s.communicate([A, B, c], fo)

    def reference(x: Mapping[str, Any]) -> Any:
        from distal.sparse.array import as_sparse

        return np.einsum("ijk,k->ij", as_sparse(x["B"], "dss", (ni, nj, nk)).to_dense(), x["c"])

    return SparseAlgorithm(
        name, {"A": A, "B": B, "c": c}, s, "A", M, split,
        "c replicated; A: fibers computed away from their row block's owner", reference,
    )  # fmt: skip


def spadd3(shape: tuple[int, int], machine: Machine) -> SparseAlgorithm:
    """``A(i,j) = B(i,j) + C(i,j) + D(i,j)``, all CSR in row blocks; A is the union pattern."""
    name = "spadd3"
    M = _machine(machine, name)
    m, n = (check_extent(x, "shape", name) for x in shape)
    i, j, io, ii = index_vars("i j io ii")
    ts = {x: Tensor(x, (m, n), format="csr", dist="xy -> x", machine=M) for x in "ABCD"}
    ts["A"][i, j] = ts["B"][i, j] + ts["C"][i, j] + ts["D"][i, j]
    s = schedule(ts["A"]).distribute([i], [io], [ii], M).communicate(list(ts.values()), io)
    return SparseAlgorithm(
        name, ts, s, "A", M, "rows", "nothing moves: every row block is local",
        lambda x: _scipy(x["B"]) + _scipy(x["C"]) + _scipy(x["D"]), lambda x: [0] * M.size,
    )  # fmt: skip


def spinnerprod(
    shape: tuple[int, int, int], machine: Machine, format: str = "csf"
) -> SparseAlgorithm:
    """``a = B(i,j,k) * C(i,j,k)``, both in ``format`` (CSF by default) cut by their top
    level; the scalar is reduced to processor 0."""
    name = "spinnerprod"
    M = _machine(machine, name)
    ni, nj, nk = (check_extent(x, "shape", name) for x in shape)
    i, j, k, io, ii = index_vars("i j k io ii")
    B = Tensor("B", (ni, nj, nk), format=format, dist="xyz -> x", machine=M)
    C = Tensor("C", (ni, nj, nk), format=format, dist="xyz -> x", machine=M)
    a = Tensor("a", (), dist=" -> " + " ".join("0" for _ in M.shape), machine=M)
    a[()] = B[i, j, k] * C[i, j, k]
    s = schedule(a).reorder([i, j, k]).distribute([i], [io], [ii], M)
    s = s.communicate([B, C], io)

    def reference(x: Mapping[str, Any]) -> Any:
        from distal.sparse.array import as_sparse

        b = as_sparse(x["B"], "csf", (ni, nj, nk)).to_dense()
        return np.asarray(np.sum(b * as_sparse(x["C"], "csf", (ni, nj, nk)).to_dense()))

    def words(inputs: Mapping[str, Any]) -> list[int]:
        out = [0] * M.size
        out[0] = sum(1 for p in range(1, M.size) if _touches(inputs, (ni, nj, nk), p, M.size))
        return out

    return SparseAlgorithm(
        name, {"a": a, "B": B, "C": C}, s, "a", M, "rows",
        "one partial sum from every other processor whose rows hold common entries",
        reference, words,
    )  # fmt: skip


def _touches(inputs: Mapping[str, Any], shape: tuple[int, ...], p: int, P: int) -> bool:
    from distal.sparse.array import as_sparse

    b = as_sparse(inputs["B"], "csf", shape)
    c = as_sparse(inputs["C"], "csf", shape)
    kb = np.ravel_multi_index(tuple(b.coordinates()), shape)
    kc = np.ravel_multi_index(tuple(c.coordinates()), shape)
    common = np.intersect1d(kb, kc)
    rows = np.unravel_index(common, shape)[0]
    return bool(np.any(rows // _block(shape[0], P) == p))


def _scipy(x: Any) -> Any:
    from distal.sparse.array import SparseArray, is_scipy_sparse

    if is_scipy_sparse(x):
        return x.tocsr()
    if isinstance(x, SparseArray):
        return x.to_scipy().tocsr()
    import scipy.sparse as sp

    return sp.csr_array(np.asarray(x))


__all__ = [
    "SPLITS",
    "SparseAlgorithm",
    "sddmm",
    "spadd3",
    "spinnerprod",
    "spmm",
    "spmttkrp",
    "spmv",
    "spttv",
]
