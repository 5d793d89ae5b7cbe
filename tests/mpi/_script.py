"""Runs on every rank under ``mpiexec``; driven by ``test_mpi.py``.

``python _script.py MODE [ARG]`` with MODE one of

* ``named``: the named algorithms of ``_mpi_cases.py`` that fit the job's size;
* ``library``: the algorithms of ``distal.algorithms`` (see ``_mpi_cases.library_cases``);
* ``random FILE``: the pickled random cases (from the reference generator) of this size;
* ``dist DIR``: distributed inputs/outputs (functions, .npy directories, Zarr, gather modes);
* ``fail-catch RANK STEP`` / ``fail-raise RANK STEP``: a failure injected on one rank;
  ``fail-tree RANK STEP`` the same (caught) in a broadcast-routed SUMMA; ``fail-own RANK
  STEP`` the same, caught on the failing rank only (its script then ends);
* ``different-kernels``: rank 0 compiles another schedule (then another routing) than the
  others;
* ``fail-source RANK``: a block source that raises on one rank's block;
* ``fail-write RANK DIR``: one rank's part of a collective ``write_npy_dir`` fails;
* ``wrong-size``: a 4-processor kernel, whatever the job's size.

Every check is an ``assert``: a failed one ends the job with a non-zero code. Rank 0 prints
one JSON line per passed case, which the test counts.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import distal as dl  # noqa: E402
from distal.runtime.mpi import world  # noqa: E402

FIELDS = ("words_received", "words_sent", "messages_received", "messages_sent")
FIELDS += ("iterations", "peak_words")
RANK, SIZE = world()


def report(**fields: object) -> None:
    if RANK == 0:
        print(json.dumps(fields), flush=True)


def check(name: str, kernel: dl.Kernel, inputs: dict, expected: np.ndarray, **opts: object) -> None:
    res = kernel.run(inputs, runtime="mpi", **opts)
    predicted = kernel.stats()
    for f in FIELDS:
        got, want = getattr(res.stats, f), getattr(predicted, f)
        assert got == want, f"{name}: measured {f} {got} != predicted {want}"
    assert res.stats.as_dict() == predicted.as_dict(), f"{name}: per-level words differ"
    value = np.asarray(res.value)
    assert value.shape == expected.shape, (name, value.shape, expected.shape)
    assert np.allclose(value, expected, rtol=1e-10, atol=1e-10), f"{name}: wrong value"
    computing = {p for p, it in enumerate(predicted.iterations) if it}
    traced = {e.proc for e in res.trace if e.kind == "compute"}
    assert traced == computing, f"{name}: compute events from {traced}, expected {computing}"
    assert all(e.end >= e.start for e in res.trace), f"{name}: event ends before it starts"
    report(case=name, ok=True, words=res.stats.total_words, steps=kernel.plan.nsteps)


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
    from _mpi_cases import gemm

    if mode == "tree":  # broadcast trees: relays forwarding, ranks finishing at other times
        alg = dl.algorithms.summa(96, machine=dl.Machine(2, SIZE // 2))
        kernel, inputs = dl.compile(alg.schedule, routing="broadcast"), alg.inputs(0)
    else:
        kernel, inputs, _ = gemm((2, 2) if SIZE == 4 else (SIZE, 1), 32, "summa")
    if mode == "raise":
        kernel.run(inputs, runtime="mpi", _fail_on_rank=rank, _fail_at_step=step)
        return
    if mode == "own":  # the failing rank catches its error, the others do not
        try:
            kernel.run(inputs, runtime="mpi", _fail_on_rank=rank, _fail_at_step=step)
        except dl.RuntimeFailure:
            if RANK != rank:
                raise
        return
    try:
        kernel.run(inputs, runtime="mpi", _fail_on_rank=rank, _fail_at_step=step)
    except dl.RuntimeFailure as e:
        print(json.dumps({"rank": RANK, "processor": e.processor, "error": str(e)}), flush=True)
    else:
        raise AssertionError("no RuntimeFailure")


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
    try:
        res.write_npy_dir(Path(out_dir) / "out")
    except dl.DistalError as e:
        print(json.dumps({"rank": RANK, "kind": type(e).__name__, "error": str(e)}), flush=True)
    else:
        raise AssertionError("no error")


def different_kernels() -> None:
    """Every rank raises the same DistalUserError, before anything runs."""
    from _mpi_cases import gemm

    summa, inputs, expected = gemm((2, 2), 32, "summa")
    cannon, _, _ = gemm((2, 2), 32, "cannon")
    alg = dl.algorithms.summa(32, machine=dl.Machine(2, 2))
    routed = {r: dl.compile(alg.schedule, routing=r) for r in ("direct", "broadcast")}
    cases = {
        "schedule": (cannon if RANK == 0 else summa, inputs),
        "routing": (routed["broadcast" if RANK == 0 else "direct"], alg.inputs(0)),
    }
    for name, (kernel, data) in cases.items():
        try:
            kernel.run(data, runtime="mpi")
        except dl.DistalError as e:
            line = {"rank": RANK, "case": name, "kind": type(e).__name__, "error": str(e)}
            print(json.dumps(line), flush=True)
        else:
            raise AssertionError(f"{name}: no error")
    res = summa.run(inputs, runtime="mpi")  # the same kernel everywhere again: it runs
    assert np.allclose(res.value, expected)
    report(case="same kernel after different ones", ok=True)


def wrong_size() -> None:
    from _mpi_cases import gemm

    kernel, inputs, _ = gemm((2, 2), 16, "summa")
    kernel.run(inputs, runtime="mpi")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "named":
        named()
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
    elif mode in ("fail-catch", "fail-raise", "fail-tree", "fail-own"):
        fail(mode.split("-")[1], int(args[0]), int(args[1]))
    elif mode == "fail-source":
        fail_source(int(args[0]))
    elif mode == "fail-write":
        fail_write(int(args[0]), args[1])
    elif mode == "wrong-size":
        wrong_size()
    elif mode == "different-kernels":
        different_kernels()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    report(done=mode)
