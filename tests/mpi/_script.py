"""Runs on every rank under ``mpiexec``; driven by ``test_mpi_runtime.py``.

``python _script.py MODE [ARG]`` with MODE one of

* ``named``: the named algorithms of ``_mpi_cases.py`` that fit the job's size;
* ``sparse``: SpMV, SpMM and SDDMM of ``_mpi_cases.sparse_cases`` (row and non-zero splits,
  sparse inputs laid out against the cut so that their pieces travel), then the other
  gather modes and an unknown option;
* ``library``: the algorithms of ``distal.algorithms`` (see ``_mpi_cases.library_cases``);
  ``sparse-library`` its sparse ones (``_mpi_cases.sparse_library_cases``);
* ``random FILE``: the pickled random cases (from the reference generator) of this size;
* ``dist DIR``: distributed inputs/outputs (functions, .npy directories, Zarr, gather modes);
* ``fail-catch RANK STEP`` / ``fail-raise RANK STEP``: a failure injected on one rank;
  ``fail-tree RANK STEP`` the same (caught) in a broadcast-routed SUMMA, ``fail-sparse RANK
  STEP`` in an SpMM cut by non-zeros; ``fail-own RANK STEP`` the same, caught on the failing
  rank only (its script then ends);
* ``different-kernels``: rank 0 compiles another schedule (then another routing) than the
  others, then rank 2's sparse input has another pattern;
* ``sparse-bad RANK``: rank RANK's dense input is short, then its sparse input (which
  ``bind`` rejects before there is a bound kernel); all run again with good inputs;
* ``fail-source RANK``: a block source that raises on one rank's block;
* ``fail-write RANK DIR``: one rank's part of a collective ``write_npy_dir`` fails;
* ``wrong-size KIND HOW``: a dense (KIND ``dense``: 4 processors) or sparse (``sparse``: 4,
  or 2 in a job of 4) kernel for another number of processors than the job's, its error
  uncaught (HOW ``raise``) or caught and printed by every rank (``catch``).

Every check is an ``assert``: a failed one ends the job with a non-zero code. Dense values
must equal numpy's to 1e-10; sparse ones the local runtime's bit for bit and scipy's to
1e-12; measured stats always equal the predicted ones. Rank 0 prints one JSON line per
passed case, which the test counts; every rank prints each error it caught (the failure
modes) and, last, that it is done.
"""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import distal as dl  # noqa: E402
from distal.runtime.mpi import world  # noqa: E402

FIELDS = ("words_received", "words_sent", "messages_received", "messages_sent")
FIELDS += ("iterations", "peak_words", "index_words_received", "index_words_sent")
RANK, SIZE = world()


def say(**fields: object) -> None:
    """One JSON line from this rank."""
    print(json.dumps(fields), flush=True)


def report(**fields: object) -> None:
    """One JSON line from rank 0 only: a passed case is counted once, not once per rank."""
    if RANK == 0:
        say(**fields)


def same_stats(name: str, measured: dl.Stats, predicted: dl.Stats) -> None:
    """Measured == predicted: field by field first, so that a failure names the count that
    differs, then as a whole and with the per-level words (which ``==`` leaves out)."""
    for f in FIELDS:
        got, want = getattr(measured, f), getattr(predicted, f)
        assert got == want, f"{name}: measured {f} {got} != predicted {want}"
    assert measured == predicted, f"{name}: {measured} != {predicted}"
    assert measured.as_dict() == predicted.as_dict(), f"{name}: per-level words differ"


def passed(name: str, stats: dl.Stats, **more: object) -> None:
    """Report a passed case with the traffic the test checks (index words: what sparse
    pieces' pos/crd cost; none for a dense kernel)."""
    report(
        case=name,
        ok=True,
        words=stats.total_words,
        index=sum(stats.index_words_received),
        messages=sum(stats.messages_received),
        **more,
    )


def check(name: str, kernel: dl.Kernel, inputs: dict, expected: np.ndarray, **opts: object) -> None:
    """A dense case: value ~ numpy's, measured stats and compute events == the plan's."""
    res = kernel.run(inputs, runtime="mpi", **opts)
    predicted = kernel.stats()
    same_stats(name, res.stats, predicted)
    value = np.asarray(res.value)
    assert value.shape == expected.shape, (name, value.shape, expected.shape)
    assert np.allclose(value, expected, rtol=1e-10, atol=1e-10), f"{name}: wrong value"
    computing = {p for p, it in enumerate(predicted.iterations) if it}
    traced = {e.proc for e in res.trace if e.kind == "compute"}
    assert traced == computing, f"{name}: compute events from {traced}, expected {computing}"
    assert all(e.end >= e.start for e in res.trace), f"{name}: event ends before it starts"
    # trace=False: no events gathered, the same stats and value
    quiet = kernel.run(inputs, runtime="mpi", trace=False, **opts)
    assert quiet.trace == [], f"{name}: trace=False gathered {len(quiet.trace)} events"
    same_stats(f"{name} (trace=False)", quiet.stats, predicted)
    assert np.array_equal(np.asarray(quiet.value), value), f"{name}: trace=False changed the value"
    passed(name, res.stats, steps=kernel.plan.nsteps)


def _same_bits(x: Any, y: Any) -> bool:
    """Equal bits: both dense arrays, or both sparse with one pattern and equal values."""
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and np.array_equal(x, y)
    return x.pattern_fingerprint() == y.pattern_fingerprint() and np.array_equal(x.vals, y.vals)


def reads_own() -> bool:
    """Whether this rank's last MPI run (the newest plan its runtime prepared) left its own
    rows out of a fetch buffer, its leaves reading them from its owned block
    (``runtime/store.py::reads_own_in_place``)."""
    from distal.runtime.mpi.rank import _LEAVES

    prepared = list(_LEAVES._items.values())
    return bool(prepared) and any(prepared[-1][1][3].values())


def check_sparse(name: str, kernel: dl.Kernel, inputs: dict[str, Any], expected: Any) -> None:
    """A sparse case: MPI bits == the local runtime's, value ~ scipy's to 1e-12, measured
    stats == ``bound.stats()`` == the local runtime's."""
    import scipy.sparse as sp

    bound = kernel.bind(inputs)
    res = bound.run(inputs, runtime="mpi")
    # a rank writes its own program, never the whole plan (nor the stats counted from it)
    assert "plan" not in bound.__dict__, f"{name}: the MPI run wrote the whole plan"
    local = bound.run(inputs)  # the oracle, on this rank's threads
    assert _same_bits(res.value, local.value), f"{name}: MPI bits differ from the local runtime"
    want = expected.toarray() if sp.issparse(expected) else np.asarray(expected)
    got = res.value if isinstance(res.value, np.ndarray) else res.value.to_scipy().toarray()
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12), f"{name}: value"
    same_stats(name, res.stats, bound.stats())
    assert res.stats == local.stats, f"{name}: MPI and local stats differ"
    passed(name, res.stats)


def caught(case: str, run: Callable[[], object]) -> None:
    """``run`` must raise a DistalError on this rank: print what it caught (every rank)."""
    try:
        run()
    except dl.DistalError as e:
        processor = getattr(e, "processor", None)
        say(case=case, rank=RANK, kind=type(e).__name__, processor=processor, error=str(e))
    else:
        raise AssertionError(f"{case or 'run'}: no error")


def named() -> None:
    from _mpi_cases import named_cases

    for name, build in named_cases(SIZE).items():
        kernel, inputs, expected = build()
        check(name, kernel, inputs, expected)


def library(routing: str = "auto") -> None:
    from _mpi_cases import library_cases

    for name, build in library_cases(SIZE).items():
        alg = build()
        inputs = alg.inputs(0)
        kernel = dl.compile(alg.schedule, routing=routing)
        check(f"library {name}", kernel, inputs, alg.reference(inputs))


def sparse() -> None:
    from _mpi_cases import sparse_cases, spmm_streamed, spmv

    for name, build in sparse_cases(SIZE).items():
        check_sparse(name, *build())
        # the banded cases' leaves read the rank's own rows of c where they lie; the random
        # matrices' rows read every processor's (the split would not pay)
        assert reads_own() == ("banded" in name), f"{name}: reads own rows {reads_own()}"
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
        bound.run(inputs, runtime="mpi", progress=True)  # the local runtime's, not MPI's
    except dl.InputError as e:
        message = str(e)
    else:
        raise AssertionError("an unknown option was taken")
    assert "unknown option(s) ['progress']" in message, message
    quiet = bound.run(inputs, runtime="mpi", trace=False)
    assert quiet.trace == [], "trace=False gathered events"
    assert quiet.stats == bound.stats(), "trace=False stats"
    # traces: a few events a rank ride in the stats' collective, more take their own; both
    # arrive whole on every rank (a compute event per step and rank)
    from distal.runtime.mpi.entry import INLINE_EVENTS
    from distal.trace import COMPUTE

    for steps in (2, 12):
        kernel, inputs, _ = spmm_streamed(SIZE, steps)
        traced = kernel.bind(inputs).run(inputs, runtime="mpi").trace
        per = {p: sum(1 for e in traced if e.proc == p) for p in range(SIZE)}
        assert (max(per.values()) > INLINE_EVENTS) == (steps == 12), (steps, per)
        for p in range(SIZE):
            got = sorted(e.step for e in traced if e.proc == p and e.kind == COMPUTE)
            assert got == list(range(steps)), (steps, p, got)
    report(case="gather modes and options", ok=True)


def sparse_library() -> None:
    from _mpi_cases import sparse_library_cases

    for name, build in sparse_library_cases(SIZE).items():
        check_sparse(name, *build())


def random_cases(path: str) -> None:
    from reference import apply_schedule

    cases = pickle.loads(Path(path).read_bytes()).get(SIZE, [])
    for n, case in enumerate(cases):
        built = case.build()
        kernel = dl.compile(apply_schedule(dl.schedule(built.output), case.ops, built))
        inputs = case.problem.random_inputs(np.random.default_rng(n))
        check(f"random #{n} {case.machine_shape}", kernel, inputs, case.problem.expected(inputs))


def dist(out_dir: str) -> None:
    from _mpi_cases import gemm

    root = Path(out_dir)
    n = 37
    kernel, _, _ = gemm((2, 2), n, "summa")
    ib, jb = np.ogrid[0:n, 0:n]
    b_full = np.sin(ib * 0.5 + jb * 0.25)
    c_full = (ib * 3 + jb) % 7 - 3.0
    expected = b_full @ c_full
    B = dl.from_function((n, n), lambda i, j: np.sin(i * 0.5 + j * 0.25))

    def c_block(box):
        (i0, i1), (j0, j1) = box
        i, j = np.ogrid[i0:i1, j0:j1]
        return (i * 3 + j) % 7 - 3.0

    C = dl.from_box_function((n, n), c_block)
    # 1. inputs from functions, result kept distributed
    res = kernel.run({"B": B, "C": C}, runtime="mpi", gather="none")
    assert res.value is None
    assert res.stats.words_received == kernel.stats().words_received
    ((box, block),) = res.blocks.items()
    assert np.allclose(block, expected[tuple(slice(lo, hi) for lo, hi in box)])
    report(case="from_function + gather none", ok=True)
    # 2. write the distributed result as .npy blocks, read it back whole and per block
    res.write_npy_dir(root / "A_npy")
    back = dl.from_npy_dir(root / "A_npy")
    assert back.shape == (n, n)
    assert len(back.boxes) == 4
    assert np.allclose(back.read_block(((0, n), (0, n))), expected)
    assert np.allclose(back.read_block(((5, 30), (17, 18))), expected[5:30, 17:18])
    report(case="write_npy_dir / from_npy_dir", ok=True)
    # 3. an .npy directory as the input of another kernel (other blocking: 4 x 1)
    if RANK == 0:
        dl.write_npy_dir(
            root / "C_npy", {((0, 20), (0, n)): c_full[:20], ((20, n), (0, n)): c_full[20:]}
        )
    res.barrier()
    k41, _, _ = gemm((4, 1), n, "summa")
    res3 = k41.run({"B": back, "C": dl.from_npy_dir(root / "C_npy")}, runtime="mpi", gather="root")
    assert res3.stats.peak_words == k41.stats().peak_words
    if RANK == 0:
        assert np.allclose(res3.value, expected @ c_full)
    else:
        assert res3.value is None
    report(case="npy-dir input, gather root", ok=True)
    # 4. Zarr, when installed
    try:
        import zarr  # noqa: F401
    except ModuleNotFoundError:
        report(case="zarr", ok=True, skipped="zarr not installed")
        return
    res.write_zarr(root / "A.zarr")
    za = dl.from_zarr(root / "A.zarr")
    assert np.allclose(za.read_block(((0, n), (0, n))), expected)
    res2 = kernel.run({"B": za, "C": C}, runtime="mpi")
    assert np.allclose(res2.value, expected @ c_full)
    report(case="zarr write / read", ok=True)


def fail(mode: str, rank: int, step: int) -> None:
    from _mpi_cases import gemm, spmm

    if mode == "tree":  # broadcast trees: relays forwarding, ranks finishing at other times
        alg = dl.algorithms.summa(96, machine=dl.Machine(2, SIZE // 2))
        kernel, inputs = dl.compile(alg.schedule, routing="broadcast"), alg.inputs(0)
    elif mode == "sparse":  # the failing rank has posted its messages; pos/crd travel too
        kernel, inputs, _ = spmm(SIZE, "nz", "xy -> x")
    else:
        kernel, inputs, _ = gemm((2, 2) if SIZE == 4 else (SIZE, 1), 32, "summa")

    def run() -> None:
        kernel.run(inputs, runtime="mpi", fault=(rank, step))

    if mode == "raise":
        run()
        return
    if mode == "own":  # the failing rank catches its error, the others do not
        try:
            run()
        except dl.RuntimeFailure:
            if RANK != rank:
                raise
        return
    caught("", run)


def fail_source(rank: int) -> None:
    from _mpi_cases import gemm

    kernel, inputs, _ = gemm((2, 2), 32, "summa")
    bad = kernel.plan.placements["B"].owned_box(
        kernel.plan.coord_in(kernel.plan.placements["B"], rank)
    )

    def block(box):
        if box == bad:
            raise OSError(f"disk on fire reading {box}")
        return np.ones([hi - lo for lo, hi in box])

    kernel.run({"B": dl.from_box_function((32, 32), block), "C": inputs["C"]}, runtime="mpi")


def fail_write(rank: int, out_dir: str) -> None:
    """Every rank catches its error and reports it: nobody waits at a barrier for good."""
    from _mpi_cases import gemm

    import distal.runtime.data as data  # where the writers live (dl.data re-exports them)

    kernel, inputs, _ = gemm((2, 2), 32, "summa")
    res = kernel.run(inputs, runtime="mpi", gather="none")
    if RANK == rank:
        real = data.write_npy_blocks

        def broken(path, blocks):  # this rank's disk is full
            real(path, blocks[:0])
            raise OSError(28, "No space left on device")

        data.write_npy_blocks = broken
    caught("", lambda: res.write_npy_dir(Path(out_dir) / "out"))


def different_kernels() -> None:
    """Every rank raises the same DistalUserError, before anything runs: a sparse kernel
    bound to another pattern is another kernel too."""
    from _mpi_cases import gemm, spmv

    summa, inputs, expected = gemm((2, 2), 32, "summa")
    cannon, _, _ = gemm((2, 2), 32, "cannon")
    alg = dl.algorithms.summa(32, machine=dl.Machine(2, 2))
    routed = {r: dl.compile(alg.schedule, routing=r) for r in ("direct", "broadcast")}
    sparse, sparse_inputs, sparse_expected = spmv(SIZE, "nz", "xy -> x")
    other = dict(sparse_inputs)
    if RANK == 2:
        b = sparse_inputs["B"].tolil()
        b[0, 0] = 0 if b[0, 0] else 1
        other["B"] = b.tocsr()
    cases = {
        "schedule": (cannon if RANK == 0 else summa, inputs),
        "routing": (routed["broadcast" if RANK == 0 else "direct"], alg.inputs(0)),
        "pattern": (sparse, other),
    }
    for name, (kernel, data) in cases.items():
        caught(name, lambda k=kernel, d=data: k.run(d, runtime="mpi"))
    res = summa.run(inputs, runtime="mpi")  # the same kernel everywhere again: it runs
    assert np.allclose(res.value, expected)
    report(case="same kernel after different ones", ok=True)
    res = sparse.run(sparse_inputs, runtime="mpi")  # nothing was left pending either
    assert np.allclose(res.value, sparse_expected, rtol=1e-12)
    report(case="same pattern after different ones", ok=True)


def sparse_bad(who: int) -> None:
    """Rank ``who``'s dense input is short; then its sparse input is (rejected by ``bind``,
    before there is a bound kernel, so this rank joins the others through ``fail_together``);
    then every rank runs again with good inputs: nothing was left pending."""
    from _mpi_cases import spmv

    from distal.runtime.mpi.entry import fail_together

    kernel, inputs, expected = spmv(SIZE, "nz", "xy -> x")
    given = dict(inputs)
    if RANK == who:
        given["c"] = np.ones(len(inputs["c"]) - 1)
    caught("dense", lambda: kernel.run(given, runtime="mpi"))
    given = dict(inputs)
    if RANK == who:
        given["B"] = inputs["B"][:-1]

    def bind_and_run() -> None:
        try:
            bound = kernel.bind(given)
        except dl.InputError as e:
            fail_together(e)
        bound.run(given, runtime="mpi")

    caught("sparse", bind_and_run)
    res = kernel.run(inputs, runtime="mpi")
    assert np.allclose(res.value, expected, rtol=1e-12)
    say(rank=RANK, rerun="ok")


def wrong_size(kind: str, how: str) -> None:
    from _mpi_cases import gemm, spmv

    if kind == "sparse":
        kernel, inputs, _ = spmv(4 if SIZE != 4 else 2, "row", "xy -> x")
    else:
        kernel, inputs, _ = gemm((2, 2), 16, "summa")
    if how == "catch":
        caught("", lambda: kernel.run(inputs, runtime="mpi"))
    else:
        kernel.run(inputs, runtime="mpi")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "named":
        named()
    elif mode == "sparse":
        sparse()
    elif mode == "sparse-library":
        sparse_library()
    elif mode == "sparse-bad":
        sparse_bad(int(args[0]))
    elif mode == "library-tree":
        from distal.runtime.mpi import relay

        started = []
        real_start = relay.Forwarder.start
        relay.Forwarder.start = lambda self: (started.append(1), real_start(self))[1]
        library("tree")
        from mpi4py import MPI

        total = MPI.COMM_WORLD.allreduce(len(started))  # relays' forwarding threads, all ranks
        report(threads_ok=relay.threads_ok(), forwarder_threads=total)
    elif mode == "library":
        library()
    elif mode == "random":
        random_cases(args[0])
    elif mode == "dist":
        dist(args[0])
    elif mode in ("fail-catch", "fail-raise", "fail-tree", "fail-sparse", "fail-own"):
        fail(mode.split("-")[1], int(args[0]), int(args[1]))
    elif mode == "fail-source":
        fail_source(int(args[0]))
    elif mode == "fail-write":
        fail_write(int(args[0]), args[1])
    elif mode == "wrong-size":
        wrong_size(*args)
    elif mode == "different-kernels":
        different_kernels()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    say(done=mode, rank=RANK)
