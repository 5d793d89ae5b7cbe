"""Reductions as accurate as numpy's pairwise sums, with the same bits on every runtime
(``distal.kernels.sums``): the float32 sum of 10^7 times 0.1 by every path a program
takes, on the local runtime, on MPI ranks and on Dask, within numpy's own error; and the
blocked pairwise order itself (compiled loop, its Python twin, the fused pass)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _sums_program import N, sums, values

import distal as dl
from distal.kernels import fused
from distal.kernels import sums as ksums
from mpi_jobs import run_job

HERE = Path(__file__).resolve().parent
#: 10^7 float32 values of 0.1 sum to 1000000.0149... (float64 of the float32 0.1)
EXACT = float(np.float64(np.float32(0.1)) * N)


def numpy_error() -> float:
    return abs(float(values().sum()) - EXACT)  # numpy's pairwise sum: 0.11


def within_numpys_error(got: dict[str, float]) -> None:
    bound = numpy_error()
    assert bound > 0.05  # numpy's own is not exact here (1000000.125)
    for path, v in got.items():
        assert abs(v - EXACT) <= bound, (path, v, EXACT, bound)


@pytest.mark.slow
def test_float32_sums_on_the_local_runtime_are_within_numpys_error() -> None:
    """Before: a fused sum 999992.4, a kernel's leaf 999988.6 (7.6 and 11.4 ppm low)."""
    got = sums(dl.Session("local", machine=2))
    within_numpys_error(got)
    got4 = sums(dl.Session("local", machine=4))
    within_numpys_error(got4)
    assert dl.einsum("i->", values(), machine=dl.Machine(2)) == pytest.approx(
        EXACT, abs=numpy_error()
    )


@pytest.mark.slow
@pytest.mark.mpi
def test_float32_sums_on_mpi_ranks_have_the_local_runtimes_bits() -> None:
    job = run_job(2, script=HERE / "_sums_program.py", timeout=240)
    assert job.rc == 0, job
    lines = job.lines()
    assert sorted(d.pop("rank") for d in lines) == [0, 1], job
    assert lines[0] == lines[1]
    within_numpys_error(lines[0])
    assert lines[0] == sums(dl.Session("local", machine=2))  # bit for bit


@pytest.mark.slow
@pytest.mark.dask
def test_float32_sums_on_dask_have_the_local_runtimes_bits(dask_client: Any) -> None:
    got = sums(
        dl.Session("dask", client=dask_client, machine=2), runtime="dask", client=dask_client
    )
    within_numpys_error(got)
    assert got == sums(dl.Session("local", machine=2))


def test_the_blocked_pairwise_order() -> None:
    """The compiled loop is its Python twin's order; float64 terms add to within the
    pairwise bound of the exact sum; float32 accumulate in float64."""
    rng = np.random.default_rng(7)
    for n in (ksums.MIN_SIZE, ksums.MIN_SIZE + 3, 3 * ksums.BLOCK * 517 + 130):
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        got = ksums.dot(a, b)
        assert got == ksums._dot_loop(a, b, 0.0, np.empty(64))
        exact = float(np.sum(a.astype(np.longdouble) * b.astype(np.longdouble)))
        bound = (ksums.BLOCK / 4 + np.log2(n)) * np.finfo(float).eps * float(np.abs(a) @ np.abs(b))
        assert abs(got - exact) <= bound
    ones = np.ones(N, np.float32)
    assert abs(float(ksums.dot(values(), ones)) - EXACT) <= numpy_error()
    assert abs(float(ksums.total(values())) - EXACT) <= numpy_error()


def test_the_pairwise_tree_adds_block_totals_as_a_binary_counter() -> None:
    """Five block totals: ((1 + 2) + (3 + 4)) + 5, the newest tree added first from the
    right, written with values whose sums show the order."""
    stack, depth, count = np.empty(64), 0, 0
    for t in (1.0, 1e16, -1e16, 1.0, 3.0):
        depth, count = ksums.push(stack, depth, count, t)
    assert depth == 2  # a tree of four and one of one
    assert stack[0] == (1.0 + 1e16) + (-1e16 + 1.0)
    assert ksums.fold(stack, depth, 0.0) == stack[0] + 3.0


def test_the_fused_pass_adds_its_reductions_in_dots_order() -> None:
    """A fused set whose loop accumulates ``r @ r`` while it writes ``r``: the dot's bits."""
    pytest.importorskip("numba")
    n = 5 * ksums.BLOCK * 129 + 7  # full blocks and a partial one past MIN_SIZE
    assert n >= fused.MIN_SIZE
    rng = np.random.default_rng(3)
    r, q = rng.standard_normal(n), rng.standard_normal(n)
    loop = fused.elementwise_pass(
        (("sub", ("slot", 0), ("mul", ("slot", 1), ("slot", 2))),),
        (3,),
        (False, False, True, True),
        ((("slot", 3), ("slot", 3)),),
    )
    assert loop is not None
    out = np.empty(n)
    (rr,) = loop([out], [r, q, 0.25, 0.0], 0, n)
    np.testing.assert_array_equal(out, r - q * 0.25)
    assert rr == ksums.dot(out, out)
