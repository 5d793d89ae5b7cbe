"""Hierarchical SUMMA / Cannon: 2x2 nodes x 2 processors, per-level traffic."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal import algorithms as al

HIER = (al.hierarchical_summa, al.hierarchical_cannon)
FLAT = {al.hierarchical_summa: al.summa, al.hierarchical_cannon: al.cannon}


def nested(nodes: tuple[int, int], q: int) -> dl.Machine:
    return dl.Machine(*nodes).nest(dl.Machine(q))


@pytest.mark.parametrize("fn", HIER, ids=lambda f: f.__name__)
@pytest.mark.parametrize("inner", ["k", "rows"])
@pytest.mark.parametrize(
    ("shape", "nodes", "q"),
    [((8, 8, 8), (2, 2), 2), ((7, 10, 11), (2, 2), 2), ((12, 12, 12), (2, 3), 2)],
)
def test_correct_and_closed_form(fn, inner: str, shape, nodes, q: int) -> None:
    alg = fn(*shape, machine=nested(nodes, q), inner=inner)
    kernel = alg.compile()
    st = kernel.stats()
    inputs = alg.inputs(1)
    res = kernel.run(inputs)
    np.testing.assert_allclose(res.value, alg.reference(inputs), rtol=1e-10, atol=1e-10)
    assert res.stats.as_dict() == st.as_dict()
    assert [list(x) for x in st.level_words_received] == [list(x) for x in alg.level_words]
    assert list(st.words_received) == list(alg.words)


@pytest.mark.parametrize("fn", HIER, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("n", "nodes", "q"), [(8, (2, 2), 2), (12, (2, 2), 2), (12, (2, 3), 2)])
def test_inter_node_equals_flat_on_node_grid(fn, n: int, nodes, q: int) -> None:
    """Each node receives from other nodes what one processor of the flat algorithm on the
    node grid receives (2*(g-1)*(n/g)**2 on g x g), split evenly over its processors; inside
    the node each processor receives the others' partial sums of its rows of the A tile."""
    M = nested(nodes, q)
    st = fn(n, machine=M).compile().stats()
    flat = FLAT[fn](n, machine=M.level(0)).compile().stats()
    inter = st.level_words_received[0]
    per_node = [sum(inter[b * q : (b + 1) * q]) for b in range(M.level(0).size)]
    assert per_node == list(flat.words_received)
    gx, gy = nodes
    if gx == gy:  # chunks line up with the node blocks: only A's partials move inside
        assert per_node == [2 * (gx - 1) * (n // gx) ** 2] * (gx * gy)
        tile = (n // gx) * (n // gy)
        assert list(st.level_words_received[1]) == [(q - 1) * tile // q] * M.size


def test_distal_rows_split_duplicates_c_across_nodes() -> None:
    """DISTAL's inner split by rows: both processors of a node fetch the same C chunk from
    the remote owner, so C crosses the node boundary twice."""
    n, g, q = 8, 2, 2
    st = al.hierarchical_summa(n, machine=nested((g, g), q), inner="rows").compile().stats()
    inter = st.level_words_received[0]
    b = (n // g) * (n - n // g)  # the node's B row panel minus its own block
    per_node = [sum(inter[x * q : (x + 1) * q]) for x in range(g * g)]
    assert per_node == [b + q * b] * (g * g)


@pytest.mark.parametrize(
    ("call", "culprit"),
    [
        (lambda: al.hierarchical_summa(4, machine=dl.Machine(2, 2)), "2-level"),
        (lambda: al.hierarchical_cannon(4, machine=dl.Machine(2).nest(dl.Machine(2))), "1-D"),
        (lambda: al.hierarchical_summa(4, machine=nested((2, 2), 2), inner="cols"), "inner"),
    ],
)
def test_bad_parameters(call, culprit: str) -> None:
    with pytest.raises(dl.ScheduleError, match=culprit):
        call()
