"""Every processor's leaf of every bound sparse kernel runs through upstream MLIR's
``--sparsifier`` (JIT-compiled by the MLIR Python bindings), and the processors' results,
added at their blocks' places, equal distal's own run and numpy.

The leaves are what ``kernel.to_mlir(p)`` writes: sparse operands with their
``sparse_tensor`` encodings (the processor's stored entries over its blocks), dense operands
as blocks; a sparse output is written into a ``tensor.empty`` (the initial value is added
outside), which is what the sparsifier lowers.
"""

from __future__ import annotations

import numpy as np
import pytest
from mlir_cases import SPARSE, kernel, sparse_inputs
from upstream import run_sparsified, wrapper

from distal.mlir.export import entry_spans, leaf_of
from distal.plan.region import Entries

pytestmark = pytest.mark.slow


def _inputs(name: str) -> dict[str, np.ndarray]:
    k = kernel(name)
    rng = np.random.default_rng(7)
    values = dict(sparse_inputs(name))
    for t in k.schedule.statement.inputs():
        if t.name not in values:
            values[t.name] = rng.standard_normal(t.shape)
    return values


def _dense(x: object) -> np.ndarray:
    return np.asarray(x.to_dense() if hasattr(x, "to_dense") else x, dtype=np.float64)


def _jobs(name: str) -> tuple[list, list]:
    """Every processor's leaf of case ``name`` as a sparsifier job, and where its result goes."""
    k = kernel(name)
    st = k.schedule.statement
    values = _inputs(name)
    first: dict = {}
    for term in st.terms:
        for f in term.factors:
            first.setdefault(f.tensor.name, f.indices)
    jobs, places = [], []
    for p in range(k.nprocs):
        prog = k.program(p)
        fn = leaf_of(k, p)
        span, _ = entry_spans(st, prog, prog.ops(p), p)

        def sl(idx: tuple, span: dict = span) -> tuple[slice, ...]:
            return tuple(slice(*span.get(v, (0, 0))) for v in idx)

        args = []
        for op in fn.inputs:
            t = next(x for x in st.inputs() if x.name == op.name)
            full = _dense(values[op.name])
            idx = first[op.name]
            if t.format.is_dense:
                args.append(full[sl(idx)])
                continue
            # the processor's stored entries only, in its blocks' coordinates
            region = prog.owned_region(op.name, p)
            part = np.zeros(full.shape)
            if isinstance(region, Entries) and len(region.positions):
                c = prog.patterns[op.name].coordinates()[:, region.positions]
                part[tuple(c)] = full[tuple(c)]
            args.append(part[sl(idx)])
        types = [o.type for o in fn.inputs]
        if not fn.fresh_output:
            args.append(np.zeros(tuple(s for s in fn.output.shape)))
            types.append(fn.output.type)
        jobs.append((fn.text() + "\n" + wrapper(fn.name, types, fn.output.type), args))
        places.append(sl(st.lhs_vars))
    return jobs, places


@pytest.fixture(scope="module")
def results() -> dict[str, list[tuple[tuple, np.ndarray]]]:
    """Every case's leaves run in one process (the bindings' start costs 3 s)."""
    jobs, owner = [], []
    for name in SPARSE:
        js, places = _jobs(name)
        jobs.extend(js)
        owner.extend((name, pl) for pl in places)
    out: dict[str, list] = {n: [] for n in SPARSE}
    for (name, place), res in zip(owner, run_sparsified(jobs), strict=True):
        out[name].append((place, res))
    return out


@pytest.mark.parametrize("name", list(SPARSE))
def test_every_sparse_leaf_runs_through_the_sparsifier_and_the_parts_add_up(name, results) -> None:
    k = kernel(name)
    want = _dense(k.run(_inputs(name)).value)
    got = np.zeros(k.schedule.statement.output.shape)
    for place, res in results[name]:
        got[place] += res
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.abs(want).sum() > 0  # the case computes something
