"""Unit programs as data: written and read back equal, run by the volunteer's compute code
to the local runtime's numbers, and anything else refused by name (property-based)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import distal as dl
from distal.plan.region import shape
from distal.runtime import codec
from distal.runtime.elastic.units import Span, block_region, decompose
from distal.runtime.pool import child, program
from distal.runtime.pool.wire import WireError


def _gemm(n: int = 12) -> tuple:
    alg = dl.algorithms.summa(n, machine=dl.Machine(2, 2), steps=2)
    k = alg.compile()
    rng = np.random.default_rng(0)
    x = {"B": rng.integers(-3, 4, (n, n)).astype(float), "C": rng.integers(-3, 4, (n, n)) * 1.0}
    return k, k.plan, x


def _spmv(n: int = 60) -> tuple:
    sps = pytest.importorskip("scipy.sparse")
    A = sps.random(n, n, density=0.1, random_state=2, format="csr")
    M = dl.Machine(3)
    i, j = dl.index_vars("i j")
    y = dl.Tensor("y", (n,), dist="x -> x", machine=M)
    As = dl.Tensor("A", (n, n), format="csr", dist="xy -> x", machine=M)
    xv = dl.Tensor("x", (n,), dist="x -> x", machine=M)
    y[i] = As[i, j] * xv[j]
    io, ii = dl.index_vars("io ii")
    k = dl.compile(dl.schedule(y).distribute([i], [io], [ii], M).communicate([As, xv], io))
    x = {"A": A, "x": np.random.default_rng(1).standard_normal(n)}
    b = k.bind(x)
    return b, b.plan, x


def _arrays(plan, unit, kernel, x):
    """The unit's input blocks as the coordinator cuts them (PoolDriver.block)."""
    from distal.runtime.pool.driver import Job, PoolDriver

    data = kernel.check_inputs(x) if hasattr(kernel, "check_inputs") else x
    drv = PoolDriver(Job(plan, kernel.kernels, kernel.dtypes), data)
    return drv, [drv.block(t, idx) for t, idx in unit.needs]


@pytest.mark.parametrize("make", [_gemm, _spmv])
def test_a_program_reads_back_and_computes_what_the_unit_computes(make) -> None:
    kernel, plan, x = make()
    dtypes = {t: np.dtype(kernel.dtypes[t]) for t in plan.inputs}
    for u in decompose(plan):
        holders = []
        for t, idx in u.needs:
            r = block_region(plan, t, idx)
            holders.append(r if isinstance(r, tuple) else Span(shape(r)))
        raw = program.encode(u, kernel.kernels, np.dtype(kernel.dtypes[plan.output]), dtypes,
                             holders)  # fmt: skip
        prog = program.decode(raw)
        assert prog.unit.name == u.name
        assert prog.unit.needs == u.needs
        assert prog.unit.needs == u.needs  # (its cuts compare by identity: computed below)
        assert prog.kernels == tuple(kernel.kernels)
        drv, arrays = _arrays(plan, u, kernel, x)
        got, _, _ = child.compute(prog, arrays, {})
        blocks = [(t, h, a) for (t, _), h, a in zip(u.needs, holders, arrays, strict=True)]
        want, _, _ = drv_compute(drv, u, blocks)
        assert got.dtype == want.dtype
        assert np.array_equal(got, want)


def drv_compute(drv, u, blocks):
    from distal.runtime.elastic import tasks

    return tasks.compute(drv.job.kernels, drv.out_dtype, u, blocks)


@pytest.fixture(scope="module")
def sample() -> bytes:
    kernel, plan, _ = _spmv(20)
    u = decompose(plan)[0]
    holders = [
        Span(shape(block_region(plan, t, i)))
        if not isinstance(block_region(plan, t, i), tuple)
        else block_region(plan, t, i)
        for t, i in u.needs
    ]
    return program.encode(u, kernel.kernels, np.dtype("<f8"), {}, holders)  # fmt: skip


@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_not_a_program(raw: bytes) -> None:
    with pytest.raises(WireError):
        program.decode(raw)


def _paths(tree, at=()):
    yield at
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _paths(v, (*at, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _paths(v, (*at, i))


junk = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(), st.text(max_size=6),
    st.binary(max_size=9), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "s", "i", "e", "box", "span", "c"]), st.integers(-9, 9),
                    max_size=2),
)  # fmt: skip


HEAD = len(codec.MAGIC) + 2


@given(st.data())
def test_a_program_with_any_field_replaced_is_read_or_refused_by_name(
    sample: bytes, data: st.DataObject
) -> None:
    tree = msgpack.unpackb(sample[HEAD:], raw=False, strict_map_key=False)
    paths = [p for p in _paths(tree) if p]
    path = data.draw(st.sampled_from(paths))
    node = tree
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = data.draw(junk)
    try:
        program.decode(sample[:HEAD] + msgpack.packb(tree, use_bin_type=True))
    except WireError:
        pass


def test_a_program_of_another_version_or_leaf_is_refused(sample: bytes) -> None:
    import dataclasses

    prog = program.decode(sample)
    other = dataclasses.replace(prog, version=99)
    with pytest.raises(WireError, match="version"):
        program.decode(codec.dumps(other))
    k = dataclasses.replace(prog.kernels[0], leaf="cuda-magic") if prog.kernels else None
    if k is not None:
        with pytest.raises(WireError, match="leaf routine"):
            program.decode(codec.dumps(dataclasses.replace(prog, kernels=(k,))))
    with pytest.raises(WireError, match="not a program"):
        program.decode(codec.dumps(prog.unit))


def test_a_shifted_access_travels_whole() -> None:
    """Offsets, scales, a domain and a point-by-point tree (slices, stencils) are part of
    the program: the volunteer computes the shifted accesses, not unshifted ones."""
    import dataclasses

    kernel, plan, _ = _gemm()
    u = decompose(plan)[0]
    shifted = dataclasses.replace(kernel.kernels[0], offsets=((1, 0), (0, 0)),
                                  scales=((1, 1), (1, 1)), domain=((0, 1, 5),))  # fmt: skip
    prog = program.decode(program.encode(u, (shifted,), np.dtype("<f8"), {}, [None] * len(
        u.needs)))  # fmt: skip
    assert prog.kernels == (shifted,)
