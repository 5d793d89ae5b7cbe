"""One processor's program of a bound sparse kernel, written without the others' programs.

``BoundKernel.program(p)`` (before the whole plan exists) writes processor ``p``'s own
instructions and the messages the other processors exchange with it, read off their needs.
It must be exactly ``plan.restrict(p)``: the same instructions, the same messages in the
same order, region for region (rows, boxes, stored positions, their parts and the parents
they were cut from), the same owned regions, primaries and patterns; and it must never
build the whole plan. Checked over the sparse kernels of the library and the schedules
that exercise every path of the writer: row and non-zero cuts, 2-D machines, sparse
pieces that travel with their ``pos``/``crd``, sparse outputs, union patterns, streaming in
steps (the output flushed at every step or held over all of them), replicated outputs and
hierarchical machines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import distal as dl
from distal.plan.ir import Plan
from distal.plan.region import Entries, Rows
from distal.sparse.array import SparseArray
from test_one_plan import _streamed_spmm as streamed_spmm

A = dl.algorithms


def same(x: Any, y: Any, path: str = "plan") -> None:
    """Assert ``x`` and ``y`` are equal by structure: regions and arrays by value (regions
    compare by identity with ``==``), dataclasses field by field, containers element by
    element; ``path`` names where a difference is."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        assert isinstance(x, np.ndarray), path
        assert isinstance(y, np.ndarray), path
        assert x.shape == y.shape, path
        assert np.array_equal(x, y), path
        return
    if isinstance(x, SparseArray) or isinstance(y, SparseArray):
        assert x is y, path  # the binding's patterns themselves
        return
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        assert type(x) is type(y), f"{path}: {type(x).__name__} != {type(y).__name__}"
        for f in dataclasses.fields(x):
            same(getattr(x, f.name), getattr(y, f.name), f"{path}.{f.name}")
        return
    if isinstance(x, tuple | list):
        assert isinstance(y, tuple | list), path
        assert len(x) == len(y), f"{path}: {x!r} != {y!r}"
        for k, (a, b) in enumerate(zip(x, y, strict=True)):
            same(a, b, f"{path}[{k}]")
        return
    if isinstance(x, dict):
        assert isinstance(y, dict), path
        assert list(x) == list(y), f"{path}: keys differ"
        for k in x:
            same(x[k], y[k], f"{path}[{k!r}]")
        return
    assert x == y, f"{path}: {x!r} != {y!r}"


def _matrix(n: int, m: int, density: float, seed: int) -> sp.csr_matrix:
    """A random CSR matrix with one full and one empty row (uneven pieces either way)."""
    rng = np.random.default_rng(seed)
    b = sp.random(n, m, density=density, format="lil", random_state=rng)
    b[n // 3, :] = rng.random(m)
    b[n // 2, :] = 0
    return b.tocsr()


def _tensor3(shape: tuple[int, int, int], nnz: int, fmt: str, seed: int) -> SparseArray:
    rng = np.random.default_rng(seed)
    i = (shape[0] * rng.random(nnz) ** 2 * 0.8).astype(np.int64)
    coords = np.stack([i, rng.integers(0, shape[1], nnz), rng.integers(0, shape[2], nnz)])
    return SparseArray.from_coo(coords, rng.random(nnz), shape, fmt)


def _spmv(M: dl.Machine, split: str, bdist: str, adist: str = "x -> x", cdist: str = "x -> x"):
    n = 41
    i, j, io, ii, f, fp, fo, fi = dl.index_vars("i j io ii f fp fo fi")
    B = dl.Tensor("B", (n, n), format="csr", dist=bdist, machine=M)
    c = dl.Tensor("c", (n,), dist=cdist, machine=M)
    a = dl.Tensor("a", (n,), dist=adist, machine=M)
    a[i] = B[i, j] * c[j]
    s = dl.schedule(a)
    if split == "rows":
        s = s.distribute([i], [io], [ii], M).communicate([a, B, c], io)
    else:
        s = s.fuse(i, j, f).pos(f, fp, B).distribute([fp], [fo], [fi], M)
        s = s.communicate([a, B, c], fo)
    return dl.compile(s), {"B": _matrix(n, n, 0.12, 4)}


def _spmv_2d(M: dl.Machine):
    n = 38
    i, j, io, ii, jo, ji = dl.index_vars("i j io ii jo ji")
    B = dl.Tensor("B", (n, n), format="csr", dist="xy -> (xy)*", machine=M)
    c = dl.Tensor("c", (n,), dist="x -> *x", machine=M)
    a = dl.Tensor("a", (n,), dist="x -> x*", machine=M)
    a[i] = B[i, j] * c[j]
    s = dl.schedule(a).distribute([i, j], [io, jo], [ii, ji], M).communicate([a, B, c], jo)
    return dl.compile(s), {"B": _matrix(n, n, 0.1, 5)}


def _streamed_spmm(steps: int, out_each_step: bool):
    kernel, B, _ = streamed_spmm(steps, out_each_step)
    return kernel, {"B": B}


def _streamed_spmm_nonzeros(out_each_step: bool):
    """The streamed SpMM cut by non-zeros: partial sums of A flushed at every step, or once
    after the last step from a buffer held over all of them."""
    n, m, K = 40, 33, 10
    M = dl.Machine(3)
    i, j, k, f, fp, fo, fi, ko, ki = dl.index_vars("i j k f fp fo fi ko ki")
    B = dl.Tensor("B", (n, m), format="csr", dist="xy -> (xy)", machine=M)
    C = dl.Tensor("C", (m, K), dist="xy -> x", machine=M)
    At = dl.Tensor("A", (n, K), dist="xy -> x", machine=M)
    At[i, k] = B[i, j] * C[j, k]
    s = dl.schedule(At).reorder([i, j, k]).fuse(i, j, f).pos(f, fp, B)
    s = s.distribute([fp], [fo], [fi], M).divide(k, ko, ki, 3).reorder([ko, fi, ki])
    s = s.communicate(C, ko).communicate(B, fo).communicate(At, ko if out_each_step else fo)
    return dl.compile(s), {"B": _matrix(n, m, 0.15, 7)}


def _lib(alg: Any, inputs: dict[str, Any]):
    return dl.compile(alg.schedule), inputs


n, m, t = 37, 29, (17, 9, 11)
M4, G22 = dl.Machine(4), dl.Machine(2, 2)
CASES: dict[str, Callable[[], tuple[dl.Kernel, dict[str, Any]]]] = {
    "spmv rows": lambda: _lib(A.spmv((n, m), M4, "rows"), {"B": _matrix(n, m, 0.15, 1)}),
    "spmv nonzeros": lambda: _lib(A.spmv((n, m), M4, "nonzeros"), {"B": _matrix(n, m, 0.15, 1)}),
    "spmv rows hull": lambda: _lib(
        A.spmv((n, m), M4, "rows", exact=False), {"B": _matrix(n, m, 0.15, 1)}
    ),
    "spmv rows, B by non-zeros": lambda: _spmv(M4, "rows", "xy -> (xy)"),
    "spmv nonzeros, B by rows": lambda: _spmv(M4, "nonzeros", "xy -> x"),
    "spmv nonzeros, a replicated": lambda: _spmv(M4, "nonzeros", "xy -> (xy)", "x -> *"),
    "spmv nonzeros, c replicated": lambda: _spmv(M4, "nonzeros", "xy -> (xy)", cdist="x -> *"),
    "spmv 2-D, a replicated on a row": lambda: _spmv_2d(G22),
    "spmv 2-D, hierarchical": lambda: _spmv_2d(dl.Machine(2).nest(dl.Machine(2))),
    "spmm rows 2-D": lambda: _lib(A.spmm((n, m), 6, G22, "rows"), {"B": _matrix(n, m, 0.15, 2)}),
    "spmm nonzeros 2-D": lambda: _lib(
        A.spmm((n, m), 6, G22, "nonzeros"), {"B": _matrix(n, m, 0.15, 2)}
    ),
    "spmm streamed, A each step": lambda: _streamed_spmm(3, True),
    "spmm streamed, A held": lambda: _streamed_spmm(4, False),
    "spmm nonzeros streamed, A each step": lambda: _streamed_spmm_nonzeros(True),
    "spmm nonzeros streamed, A held": lambda: _streamed_spmm_nonzeros(False),
    "sddmm rows": lambda: _lib(A.sddmm((n, m), 5, M4, "rows"), {"B": _matrix(n, m, 0.15, 3)}),
    "sddmm nonzeros": lambda: _lib(
        A.sddmm((n, m), 5, M4, "nonzeros"), {"B": _matrix(n, m, 0.15, 3)}
    ),
    "spadd3": lambda: _lib(
        A.spadd3((n, m), M4), {x: _matrix(n, m, 0.1, 10 + k) for k, x in enumerate("BCD")}
    ),
    "spttv fibers": lambda: _lib(A.spttv(t, M4, "fibers"), {"B": _tensor3(t, 150, "dss", 9)}),
    "spttv rows": lambda: _lib(A.spttv(t, M4, "rows"), {"B": _tensor3(t, 150, "dss", 9)}),
    "spmttkrp nonzeros": lambda: _lib(
        A.spmttkrp(t, 4, M4, "nonzeros"), {"B": _tensor3(t, 150, "dss", 13)}
    ),
    "spinnerprod": lambda: _lib(
        A.spinnerprod(t, M4), {"B": _tensor3(t, 200, "csf", 11), "C": _tensor3(t, 200, "csf", 12)}
    ),
}


#: cases where every processor owns all it visits: nothing moves
STILL = {"sddmm rows", "spadd3", "spttv rows"}


@pytest.mark.parametrize("name", list(CASES))
def test_program_is_the_plans_part_for_that_processor(name: str) -> None:
    kernel, patterns = CASES[name]()
    bound = kernel.bind(patterns)
    programs = [bound.program(p) for p in range(bound.nprocs)]
    assert "plan" not in bound.__dict__, "program(p) built the whole plan"
    whole = bound.plan
    st = bound.stats()
    assert any(m.src != m.dst for m in whole.messages) == (name not in STILL)
    for p, prog in enumerate(programs):
        assert isinstance(prog, Plan)
        assert prog.procs == (p,)
        same(prog, whole.restrict(p), f"program({p})")
        assert sum(m.words for m in prog.messages if m.dst == p) == st.words_received[p]
        assert sum(m.words for m in prog.messages if m.src == p) == st.words_sent[p]
        assert (
            sum(m.index_words for m in prog.messages if m.dst == p) == (st.index_words_received[p])
        )
    # once the whole plan exists, program(p) is its part (the same objects)
    assert bound.program(1).messages == whole.restrict(1).messages


def test_the_comparison_sees_a_different_part() -> None:
    """``same`` tells apart regions that differ only in their rows, or in a part's parent."""
    r1 = Rows((0,), (), np.array([[1], [2]]), ())
    r2 = Rows((0,), (), np.array([[1], [3]]), ())
    with pytest.raises(AssertionError):
        same(r1, r2)
    sel = np.array([0])
    same(r1.part(sel, ()), Rows((0,), (), np.array([[1], [2]]), ()).part(sel, ()))
    with pytest.raises(AssertionError, match="parent"):
        same(r1.part(sel, ()), r2.part(sel, ()))
    with pytest.raises(AssertionError, match="index_words"):
        same(Entries(np.arange(3), 2), Entries(np.arange(3), 3))


def test_a_ranks_program_touches_only_its_messages() -> None:
    """SpMV at 16 processors: each program holds its own instructions alone and only the
    messages it sends or receives, far fewer than the plan's."""
    k = A.spmv((400, 400), dl.Machine(16), "rows").compile()
    B = sp.random(400, 400, density=0.05, format="csr", random_state=7)
    bound = k.bind({"B": B})
    progs = [bound.program(p) for p in range(16)]
    assert "plan" not in bound.__dict__
    total = len(bound.plan.messages)
    for p, prog in enumerate(progs):
        assert list(prog.programs) == [p]
        assert all(p in (msg.src, msg.dst) for msg in prog.messages)
        assert len(prog.messages) < total / 4
    # every message of the plan is in the programs of exactly its two ends
    ends = sum(len(prog.messages) for prog in progs)
    assert ends == 2 * total
