"""Sparse kernels under ``mpiexec``; driven by ``test_sparse_mpi.py``.

``python sparse_job.py MODE [ARG]`` on every rank, MODE one of

* ``cases``: SpMV, SpMM and SDDMM in the row and non-zero splits (and with sparse inputs
  laid out against the cut, so sparse pieces travel): on every rank the MPI value equals the
  local runtime's bit for bit and scipy's to 1e-12, and ``Result.stats == bound.stats()``;
  rank 0 prints one JSON line per passed case;
* ``library``: the kernels of ``distal.algorithms`` (SpMV with hull gathers, SpMM and SDDMM
  on a 2-D machine, SDDMM with an output cut by non-zeros, SpMTTKRP in its three splits,
  SpTTV, SpAdd3's union pattern, the inner product's scalar output), checked the same way;
* ``bad RANK``: rank RANK's dense input has the wrong shape; every rank prints the error it
  caught, then all run again with good inputs;
* ``fail RANK``: rank RANK fails after posting its messages; every rank prints what it
  caught;
* ``wrong-size``: a kernel for 4 processors (2 in a job of 4); every rank prints its error;
* ``--bench``: times one SpMV and one SpMM (32 columns) on a random CSR matrix of about 1M
  non-zeros: on the MPI runtime under ``mpiexec -n P``, on the local runtime with 2
  processors when run without ``mpiexec``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

import distal as dl
from distal.runtime.mpi import world

RANK, SIZE = world()
Case = tuple[Any, dict[str, Any], Any]  # kernel, inputs, scipy's value


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def _matrix(n: int, m: int, density: float, seed: int) -> sp.csr_matrix:
    """A random CSR matrix with a few empty and a few long rows (uneven pieces)."""
    rng = np.random.default_rng(seed)
    b = sp.random(n, m, density=density, format="lil", random_state=rng)
    b[n // 3, :] = rng.random(m)  # one full row
    b[n // 2, :] = 0  # one empty row
    return b.tocsr()


def spmv(
    P: int, split: str, bdist: str, n: int = 60, dtype: Any = np.float64, adist: str = "x -> x"
) -> Case:
    """``a[i] = B[i, j] * c[j]``: split ``"row"`` (cut i) or ``"nz"`` (cut B's non-zeros);
    ``adist="x -> *"`` replicates the output (reduced on one replica, then sent to all)."""
    M = dl.Machine(P)
    i, j, io, ii, f, fp, fo, fi = dl.index_vars("i j io ii f fp fo fi")
    B = dl.Tensor("B", (n, n), format="csr", dist=bdist, machine=M, dtype=dtype)
    c = dl.Tensor("c", (n,), dist="x -> x", machine=M, dtype=dtype)
    a = dl.Tensor("a", (n,), dist=adist, machine=M, dtype=dtype)
    a[i] = B[i, j] * c[j]
    s = _split(dl.schedule(a), split, (i, j), B, M, (io, ii, f, fp, fo, fi))
    s = s.communicate([a, B, c], fo if split == "nz" else io)
    rng = np.random.default_rng(n)
    bv = _matrix(n, n, 0.1, 1)
    cv = rng.random(n)
    if np.dtype(dtype).kind == "c":
        bv = (bv + 1j * _matrix(n, n, 0.1, 1)).tocsr()
        cv = cv + 1j * rng.random(n)
    return dl.compile(s), {"B": bv, "c": cv}, bv @ cv


def spmm_streamed(P: int, steps: int, n: int = 60, r: int = 8) -> Case:
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


def spmm(P: int, split: str, bdist: str, n: int = 60, r: int = 8) -> Case:
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


def sddmm(P: int, split: str, bdist: str, ddist: str, n: int = 40, m: int = 30) -> Case:
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


def cases(P: int) -> dict[str, Callable[[], Case]]:
    """Every case, by name: (split, how B is laid out)."""
    out: dict[str, Callable[[], Case]] = {}
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
    return out


def _same(x: Any, y: Any) -> bool:
    """Equal bits: both dense arrays, or both sparse with one pattern and equal values."""
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and np.array_equal(x, y)
    return x.pattern_fingerprint() == y.pattern_fingerprint() and np.array_equal(x.vals, y.vals)


def _dense(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else x.to_scipy().toarray()


def run_cases() -> None:
    check_all(cases(SIZE))
    # the other gather modes: the value on rank 0 only, or no value and the owned parts
    kernel, inputs, expected = spmv(SIZE, "nz", "xy -> x")
    bound = kernel.bind(inputs)
    root = bound.run(inputs, runtime="mpi", gather="root")
    assert (root.value is not None) == (RANK == 0), "gather='root'"
    if RANK == 0:
        assert np.allclose(root.value, expected, rtol=1e-12), "gather='root' value"
    none = bound.run(inputs, runtime="mpi", gather="none")
    assert none.value is None, "gather='none'"
    assert none.stats == bound.stats(), "gather='none' stats"
    lo, hi = none.extra["owned"][0]
    assert np.allclose(none.extra["block"], expected[lo:hi], rtol=1e-12), "owned block"
    try:
        bound.run(inputs, runtime="mpi", trace=True)
    except dl.InputError as e:
        message = str(e)
    else:
        raise AssertionError("an unknown option was taken")
    assert "unknown option(s) ['trace']" in message, message
    if RANK == 0:
        say(case="gather modes and options", ok=True)
    say(done="cases", rank=RANK)


def _tensor3(shape: tuple[int, int, int], nnz: int, fmt: str, seed: int) -> Any:
    """A random 3-tensor with slices of uneven weight (low ``i`` heavy, high ``i`` empty)."""
    from distal.sparse.array import SparseArray

    rng = np.random.default_rng(seed)
    i = (shape[0] * rng.random(nnz) ** 2 * 0.8).astype(np.int64)
    coords = np.stack([i, rng.integers(0, shape[1], nnz), rng.integers(0, shape[2], nnz)])
    return SparseArray.from_coo(coords, rng.random(nnz), shape, fmt)


def library_cases(P: int) -> dict[str, Callable[[], Case]]:
    """The sparse algorithms of ``distal.algorithms``, with inputs, by name."""
    from distal.algorithms import sparse as alg

    M, grid = dl.Machine(P), dl.Machine(P // 2, 2)
    rng = np.random.default_rng(7)
    n, m = 37, 29
    b = _matrix(n, m, 0.15, 8)
    t = (17, 9, 11)

    def case(a: Any, inputs: dict[str, Any]) -> Case:
        return dl.compile(a.schedule), inputs, a.reference(inputs)

    out: dict[str, Callable[[], Case]] = {
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


def mttkrp_moved(P: int, t: tuple[int, int, int], fmt: str) -> Case:
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


def check_all(builders: dict[str, Callable[[], Case]]) -> None:
    """Every case: MPI bits == local bits, value ~ reference, stats == the plan's."""
    for name, build in builders.items():
        kernel, inputs, expected = build()
        bound = kernel.bind(inputs)
        res = bound.run(inputs, runtime="mpi")
        # a rank writes its own program, never the whole plan (nor the stats counted from it)
        assert "plan" not in bound.__dict__, f"{name}: the MPI run wrote the whole plan"
        local = bound.run(inputs)  # the oracle, on this rank's threads
        assert _same(res.value, local.value), f"{name}: MPI bits differ from the local runtime"
        want = expected.toarray() if sp.issparse(expected) else np.asarray(expected)
        got = _dense(res.value)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        assert np.allclose(got, want, rtol=1e-12, atol=1e-12), f"{name}: value"
        assert res.stats == bound.stats(), f"{name}: {res.stats} != {bound.stats()}"
        assert res.stats.as_dict() == bound.stats().as_dict(), f"{name}: per-level words"
        assert res.stats == local.stats, f"{name}: MPI and local stats differ"
        if RANK == 0:
            st = res.stats
            say(case=name, ok=True, words=st.total_words, index=sum(st.index_words_received),
                messages=sum(st.messages_received))  # fmt: skip


def _catch(kernel: Any, inputs: dict[str, Any], case: str = "", **options: Any) -> None:
    try:
        kernel.run(inputs, runtime="mpi", **options)
    except dl.DistalError as e:
        say(case=case, rank=RANK, kind=type(e).__name__, error=str(e))
    else:
        raise AssertionError("no error")


def bad(who: int) -> None:
    """Rank ``who``'s dense input is short; then its sparse input is (rejected by ``bind``,
    before there is a bound kernel); then its sparse input has another pattern."""
    from distal.runtime.mpi.entry import fail_together

    kernel, inputs, expected = spmv(SIZE, "nz", "xy -> x")
    given = dict(inputs)
    if RANK == who:
        given["c"] = np.ones(len(inputs["c"]) - 1)
    _catch(kernel, given, case="dense")
    given = dict(inputs)
    if RANK == who:
        given["B"] = inputs["B"][:-1]
    try:
        bound = kernel.bind(given)
    except dl.InputError as e:
        try:
            fail_together(e)
        except dl.InputError as again:
            say(case="sparse", rank=RANK, kind=type(again).__name__, error=str(again))
    else:
        _catch(bound, given, case="sparse")
    given = dict(inputs)
    if RANK == who:
        b = inputs["B"].tolil()
        b[0, 0] = 0 if b[0, 0] else 1
        given["B"] = b.tocsr()
    _catch(kernel, given, case="pattern")
    res = kernel.run(inputs, runtime="mpi")  # nothing was left pending: the job goes on
    assert np.allclose(res.value, expected, rtol=1e-12)
    say(rank=RANK, rerun="ok")


def fail(who: int) -> None:
    kernel, inputs, _ = spmm(SIZE, "nz", "xy -> x")
    _catch(kernel, inputs, _fail_on_rank=who)


def wrong_size() -> None:
    kernel, inputs, _ = spmv(4 if SIZE != 4 else 2, "row", "xy -> x")
    _catch(kernel, inputs)


def _best(f: Callable[[], Any], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def bench() -> None:
    """SpMV and SpMM (32 columns), ~1M non-zeros, non-zero split; best of 5 runs."""
    n, nnz = 200_000, 1_000_000
    P = SIZE if SIZE > 1 else 2
    runtime = "mpi" if SIZE > 1 else "local"
    rng = np.random.default_rng(0)
    bv = sp.random(n, n, density=nnz / n / n, format="csr", random_state=rng)
    line: dict[str, Any] = {"runtime": runtime, "P": P, "nnz": int(bv.nnz)}
    for name in ("spmv", "spmm"):
        M = dl.Machine(P)
        i, j, k, f, fp, fo, fi = dl.index_vars("i j k f fp fo fi")
        B = dl.Tensor("B", (n, n), format="csr", dist="xy -> (xy)", machine=M)
        if name == "spmv":
            c = dl.Tensor("c", (n,), dist="x -> x", machine=M)
            a = dl.Tensor("a", (n,), dist="x -> x", machine=M)
            a[i] = B[i, j] * c[j]
            inputs, out, dense = {"B": bv, "c": rng.random(n)}, a, c
        else:
            c = dl.Tensor("C", (n, 32), dist="xy -> x", machine=M)
            a = dl.Tensor("A", (n, 32), dist="xy -> x", machine=M)
            a[i, k] = B[i, j] * c[j, k]
            inputs, out, dense = {"B": bv, "C": rng.random((n, 32))}, a, c
        s = (
            dl.schedule(out)
            .reorder([i, j, k] if name == "spmm" else [i, j])
            .fuse(i, j, f)
            .pos(f, fp, B)
            .distribute([fp], [fo], [fi], M)
        )
        kernel = dl.compile(s.communicate([out, B, dense], fo))
        t = time.perf_counter()
        bound = kernel.bind(inputs)
        line[f"{name}_bind_s"] = round(time.perf_counter() - t, 4)
        bound.run(inputs, runtime=runtime)  # warm: the rank's plan and leaves
        line[f"{name}_run_s"] = round(_best(lambda b=bound, x=inputs: b.run(x, runtime=runtime)), 4)
        res = bound.run(inputs, runtime=runtime)
        line[f"{name}_max_words"] = res.stats.max_words_received
        if runtime == "mpi":  # where the time goes: the slowest rank's phases
            line[f"{name}_compute_s"] = round(max(res.extra["compute_seconds"]), 4)
            line[f"{name}_execute_s"] = round(res.extra["execute_seconds"], 4)
            line[f"{name}_gather_s"] = round(res.extra["gather_seconds"], 4)
        ref = bv @ inputs["c" if name == "spmv" else "C"]
        assert np.allclose(res.value, ref, rtol=1e-12), name
    if RANK == 0:
        say(**line)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "cases":
        run_cases()
    elif mode == "library":
        check_all(library_cases(SIZE))
        say(done="library", rank=RANK)
    elif mode == "bad":
        bad(int(sys.argv[2]))
    elif mode == "fail":
        fail(int(sys.argv[2]))
    elif mode == "wrong-size":
        wrong_size()
    elif mode == "--bench":
        bench()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
