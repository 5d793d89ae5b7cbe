"""``kernel.to_mlir(distributed=True)``: the whole distributed program in upstream MLIR.

Every algorithm of ``dl.algorithms`` (dense, and sparse bound to a pattern) exports an SPMD
module and a global-form module that upstream ``mlir-opt`` 22 verifies; each tensor's
``shard.sharding`` describes exactly the blocks distal's placement gives every processor
(restrictions and nested levels included); the schedule's data movement is the collective
it is (SUMMA broadcasts, Cannon shifts, k splits all-reduce, COSMA reduce-scatters); and
upstream's own ``--shard-partition`` of the global form derives, for row and reduction
splits, exactly the leaf distal computes on every processor.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from mlir_cases import DENSE, SPARSE, kernel
from upstream import mlir_opt

import distal as dl
from distal.mlir.shard import placement_of, shard_shape, sharding_of
from distal.mlir.spmd_plan import coords
from reference import apply_schedule, cases

ALL = [*DENSE, *SPARSE]


def test_every_algorithm_of_the_library_is_a_case() -> None:
    algs = {
        n
        for n in dir(dl.algorithms)
        if not n.startswith("_")
        and callable(getattr(dl.algorithms, n))
        and n not in {"Algorithm", "SparseAlgorithm", "cosma_grid", "cosma_words"}
        and not isinstance(getattr(dl.algorithms, n), type)
    }
    covered = {n.split("_nonzeros")[0] for n in ALL}
    assert algs <= covered, sorted(algs - covered)


@pytest.mark.parametrize("name", ALL)
def test_every_algorithm_exports_a_module_mlir_opt_verifies(name: str) -> None:
    k = kernel(name)
    spmd = k.to_mlir(distributed=True)
    assert "shard.grid @grid(shape = " in spmd
    assert "shard.sharding @grid" in spmd
    out = k.schedule.statement.output.name
    assert f"func.func @{out}_spmd(" in spmd
    assert f"func.func private @{out}_leaf(" in spmd
    mlir_opt(spmd, "--verify-diagnostics")
    glob = k.to_mlir(distributed=True, form="global")
    assert "shard.shard" in glob
    mlir_opt(glob, "--verify-diagnostics")


@pytest.mark.parametrize("name", ALL)
def test_shardings_describe_exactly_the_blocks_of_every_processor(name: str) -> None:
    k = kernel(name)
    plan = k.plan
    for t in k.schedule.tensors():
        pl = placement_of(k.schedule, t, plan.placements)
        sh = sharding_of(t, pl)
        if pl is None:  # a non-zero cut: no sharding, a note says so
            assert sh.split_axes == ()
            assert "non-zero cut" in sh.note
            continue
        for p in range(plan.nprocs):
            c = coords(p, pl.grid)
            box = pl.owned_box(c)
            want = tuple(hi - lo for lo, hi in box) if box else None
            got = shard_shape(pl, sh, c)
            if want is None:
                assert 0 in got or not got, (t, p, got)
            else:
                assert got == want, (t, p, got, want)


def _spmd(name: str) -> str:
    return kernel(name).to_mlir(distributed=True)


def test_summa_is_a_loop_over_k_steps_broadcasting_along_each_grid_axis() -> None:
    text = _spmd("summa")
    assert re.search(r"scf\.for %\w+ = %c0 to %c2 step %c1", text)
    loop = text[text.index("scf.for") :]
    step = re.search(r"scf\.for (%\w+) = ", text).group(1)  # the root is the step
    assert f"shard.broadcast %B on @grid grid_axes = [1] root = [{step}]" in loop
    assert f"shard.broadcast %C on @grid grid_axes = [0] root = [{step}]" in loop
    assert "func.call @A_leaf" in loop
    assert "shard.send" not in text  # nothing point to point


def test_cannon_skews_point_to_point_then_shifts() -> None:
    k = dl.algorithms.cannon(12, machine=dl.Machine(3, 3)).compile()
    text = k.to_mlir(distributed=True)
    mlir_opt(text, "--verify-diagnostics")
    assert "// step 0: B: p2p, C: p2p" in text
    assert "// step 1: B: shift, C: shift" in text
    loop = text[text.index("scf.for") :]
    assert "shard.shift %B_" in loop
    assert "shift_axis = 1 offset = -1 rotate" in loop
    assert "shift_axis = 0 offset = -1 rotate" in loop
    assert "shard.recv" in text[: text.index("scf.for")]


def test_partial_sums_are_reduce_all_reduce_and_reduce_scatter() -> None:
    assert re.search(
        r"shard\.reduce %\S+ on @grid grid_axes = \[2\] root = \[0\]", _spmd("johnson_3d")
    )
    assert re.search(
        r"shard\.reduce_scatter %\S+ on @grid grid_axes = \[2\] scatter_axis = 0", _spmd("cosma")
    )
    assert re.search(
        r"shard\.reduce %\S+ on @grid grid_axes = \[1, 2\] root = \[0, 0\]", _spmd("mttkrp")
    )
    assert "shard.all_gather %c on @grid grid_axes = [0] gather_axis = 0" in _spmd("spmv")
    text = _k_split().to_mlir(distributed=True)
    assert "shard.all_reduce" in text
    assert "shard.reduce " not in text


def test_restriction_and_nesting_are_shard_offsets() -> None:
    text = _spmd("mttkrp")  # A "il -> i00": only the processors at (x, 0, 0) hold A
    assert (
        "%sharding_A = shard.sharding @grid split_axes = [[0, 1, 2]] "
        "sharded_dims_offsets = [0, 2, 2, 2, 2, 4, 4, 4, 4]" in text
    )
    hier = _spmd("hierarchical_summa")
    assert "one grid of all its dimensions, outer level first" in hier
    assert "%sharding_A = shard.sharding @grid split_axes = [[0, 2], [1]]" in hier
    ragged = dl.algorithms.summa(10, machine=dl.Machine(3, 2)).compile().to_mlir(distributed=True)
    mlir_opt(ragged, "--verify-diagnostics")
    assert "sharded_dims_offsets = [0, 4, 8, 10, 0, 5, 10]" in ragged


def test_sparse_operands_keep_their_encodings() -> None:
    text = _spmd("spmv")
    csr = "#sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>"
    head = text[text.index("func.func @a_spmd(") :].split("\n")[0]
    assert re.search(r"%B: tensor<[0-9?]+x[0-9?]+xf64, " + re.escape(csr) + ">", head)
    assert "non-zero cut" in _spmd("spmv_nonzeros")


def _k_split() -> dl.Kernel:
    i, j, k, ko, ki = dl.index_vars("i j k ko ki")
    m = dl.Machine(2)
    A = dl.Tensor("A", (4, 6), dist="ij -> *", machine=m)
    B = dl.Tensor("B", (4, 8), dist="ik -> k", machine=m)
    C = dl.Tensor("C", (8, 6), dist="kj -> k", machine=m)
    A[i, j] = B[i, k] * C[k, j]
    return dl.compile(dl.schedule(A).distribute([k], [ko], [ki], m).communicate([A, B, C], ko))


_NAME = re.compile(r"%[\w.$#-]+")


def _generics(text: str) -> list[str]:
    """The linalg.generic ops of ``text`` (after upstream's generalization and
    canonicalization, maps printed in place), SSA names blanked."""
    text = mlir_opt(
        text, "--linalg-generalize-named-ops", "--canonicalize", "--mlir-print-local-scope"
    )
    out = []
    lines = text.split("\n")
    for n, ln in enumerate(lines):
        if "linalg.generic" in ln:
            block = [ln]
            for nxt in lines[n + 1 :]:
                block.append(nxt)
                if nxt.strip().startswith("} ->"):
                    break
            g = "\n".join(_NAME.sub("%_", b.strip()) for b in block)
            if not re.search(r"ins\(%_ : [fi]\d+\)", g):  # a generalized fill: not a leaf
                out.append(g)
    return out


@pytest.mark.parametrize(
    "make",
    [lambda: kernel("ttv"), lambda: kernel("ttm"), lambda: kernel("inner_product"), _k_split],
    ids=["ttv-rows", "ttm-rows", "inner-product-k", "matmul-k"],
)
def test_upstream_partitions_the_global_form_into_distals_leaves(make) -> None:
    k = make()
    glob = k.to_mlir(distributed=True, form="global")
    parted = mlir_opt(glob, "--pass-pipeline=builtin.module(func.func(shard-partition))")
    (theirs,) = _generics(parted)
    for p in range(k.nprocs):
        (ours,) = _generics(k.to_mlir(p))
        assert theirs == ours, (p, theirs, ours)
    st = k.schedule.statement
    summed = {v.name for v in st.variables if v not in st.lhs_vars}
    # a split summed variable leaves partial sums: upstream adds them with an all-reduce
    assert ("shard.all_reduce" in parted) == _splits_summed(k, summed)


def _splits_summed(k: dl.Kernel, summed: set[str]) -> bool:
    st = k.schedule.statement
    for t in st.terms:
        for f in t.factors:
            sh = sharding_of(
                f.tensor.name, placement_of(k.schedule, f.tensor.name, k.plan.placements)
            )
            for d, axes in enumerate(sh.split_axes):
                if axes and f.indices[d].name in summed:
                    return True
    return False


def test_bad_form_and_unbound_sparse_kernel() -> None:
    with pytest.raises(dl.InputError, match="forms"):
        kernel("summa").to_mlir(distributed=True, form="nope")
    alg, _ = SPARSE["spmv"]()
    with pytest.raises(dl.InputError):
        alg.compile().to_mlir(distributed=True)


@settings(max_examples=40, deadline=None)
@given(cases(with_schedule=True))
def test_the_differential_cases_export_modules_mlir_opt_verifies(case) -> None:
    """The differential suite's random problems, machines, distributions and schedules
    (``tests/test_properties.py``): each exports a distributed module upstream verifies, or
    says plainly what the export does not write (``NotSupportedYet``)."""
    built = case.build()
    sched = apply_schedule(dl.schedule(built.output), case.ops, built)
    kernel = dl.compile(sched)
    try:
        text = kernel.to_mlir(distributed=True)
    except dl.NotSupportedYet:
        return
    mlir_opt(text, "--verify-diagnostics")
