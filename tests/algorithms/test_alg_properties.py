"""Property-based: any algorithm, extents, grid and number of steps — correct, measured ==
predicted, and the closed form exact whenever every processor has work."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import distal as dl
from distal import algorithms as al

ext = st.integers(1, 11)
small = st.integers(1, 3)
steps = st.sampled_from([None, 1, 2, 3, 5])


@st.composite
def algorithms(draw) -> al.Algorithm:
    kind = draw(st.sampled_from(["2d", "row", "johnson", "25d", "cosma", "hier", "mttkrp", "4d"]))
    m, n, k = draw(ext), draw(ext), draw(ext)
    if kind == "2d":
        fn = draw(st.sampled_from([al.summa, al.cannon, al.pumma]))
        grid = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        return fn(m, n, k, machine=dl.Machine(*grid), steps=draw(steps))
    if kind == "row":
        return al.row_1d(m, n, k, machine=dl.Machine(draw(st.integers(1, 5))), steps=draw(steps))
    if kind == "johnson":
        return al.johnson_3d(m, n, k, machine=dl.Machine(draw(small), draw(small), draw(small)))
    if kind == "25d":
        r, c = draw(st.integers(1, 4)), draw(small)
        return al.solomonik_25d(m, n, k, machine=dl.Machine(r, r, c), steps=draw(steps))
    if kind == "cosma":
        grid = (draw(small), draw(small), draw(small))
        return al.cosma(m, n, k, machine=math.prod(grid), grid=grid, steps=draw(steps))
    if kind == "hier":
        fn = draw(st.sampled_from([al.hierarchical_summa, al.hierarchical_cannon]))
        M = dl.Machine(draw(small), draw(small)).nest(dl.Machine(draw(small)))
        inner = draw(st.sampled_from(["k", "rows"]))
        return fn(m, n, k, machine=M, steps=draw(steps), inner=inner)
    if kind == "mttkrp":
        M = dl.Machine(draw(small), draw(small), draw(small))
        return al.mttkrp((m, n, k), draw(small), machine=M)
    M = dl.Machine(draw(small), draw(small))
    return al.contraction_4d(m, n, k, draw(small), 1, draw(small), machine=M, steps=draw(steps))


@settings(max_examples=60)
@given(alg=algorithms(), seed=st.integers(0, 2**16))
def test_any_algorithm(alg: al.Algorithm, seed: int) -> None:
    kernel = alg.compile()
    predicted = kernel.stats()
    inputs = alg.inputs(seed)
    res = kernel.run(inputs)
    np.testing.assert_allclose(res.value, alg.reference(inputs), rtol=1e-10, atol=1e-10)
    assert res.stats.as_dict() == predicted.as_dict()
    if all(predicted.iterations):  # idle processors still move data: see test_alg_matmul
        assert list(predicted.words_received) == list(alg.words)
        if alg.level_words is not None:
            assert [list(w) for w in predicted.level_words_received] == [
                list(w) for w in alg.level_words
            ]
