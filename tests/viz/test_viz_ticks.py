"""Processor axes read as processors: integer or coordinate tick labels, never 0.5 steps."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("matplotlib", reason="needs matplotlib (viz extra)")

from kernels_for_viz import cannon, johnson, vector

import distal as dl
from distal.viz import plot_timeline
from distal.viz._mpl import proc_label
from distal.viz.timeline import time_unit

INTEGER = re.compile(r"\d+")


def labels(ax, axis):
    """The tick labels matplotlib draws inside the axis' view (after a draw)."""
    ax.figure.canvas.draw()
    lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks if lo <= t.get_position()[0 if axis == "x" else 1] <= hi]


def traffic_axes(fig):
    """The words matrix and the words-received bars (the colour bar is the third axes)."""
    return fig.axes[0], fig.axes[1]


def test_traffic_on_a_line_labels_every_processor_with_its_number():
    fig = vector().plot_traffic()  # 4 processors in a line
    matrix, bars = traffic_axes(fig)
    for ax, axis in ((matrix, "x"), (matrix, "y"), (bars, "x")):
        assert labels(ax, axis) == ["0", "1", "2", "3"]


def test_traffic_on_a_grid_labels_processors_with_coordinates():
    fig = cannon(32, 2).plot_traffic()  # 2 x 2 grid
    matrix, bars = traffic_axes(fig)
    want = ["(0,0)", "(0,1)", "(1,0)", "(1,1)"]
    for ax, axis in ((matrix, "x"), (matrix, "y"), (bars, "x")):
        assert labels(ax, axis) == want
    # one separator between the machine's two rows, on both axes of the matrix
    assert sorted({ln.get_xdata()[0] for ln in matrix.lines if ln.get_xdata()[0] > 0}) == [1.5]


def test_traffic_on_a_3d_grid_has_three_coordinates():
    fig = johnson().plot_traffic()
    got = labels(fig.axes[1], "x")
    assert got[0] == "(0,0,0)"
    assert got[-1] == "(1,1,1)"
    assert len(got) == 8


@pytest.mark.parametrize("g", [4, 8])
def test_traffic_on_a_large_grid_has_fewer_integer_ticks(g):
    fig = cannon(8 * g, g).plot_traffic()
    n = g * g
    matrix, bars = traffic_axes(fig)
    for ax, axis in ((matrix, "x"), (matrix, "y"), (bars, "x")):
        got = labels(ax, axis)
        if n <= 16:
            assert len(got) == n
            assert all(re.fullmatch(r"\(\d+,\d+\)", t) for t in got)
        else:
            assert 2 <= len(got) <= 16
            assert all(INTEGER.fullmatch(t) for t in got), got
            assert [int(t) for t in got] == list(range(0, n, g))  # the start of each row


def test_traffic_on_a_long_line_has_a_few_integer_ticks():
    M = dl.Machine(40)
    (i,) = dl.index_vars("i")
    y = dl.Tensor("y", (80,), dist="i -> i", machine=M)
    x = dl.Tensor("x", (80,), dist="i -> *", machine=M)
    y[i] = x[i] * 2
    io, ii = dl.index_vars("io ii")
    k = dl.compile(dl.schedule(y).distribute([i], [io], [ii], M).communicate([x, y], io))
    for ax, axis in ((k.plot_traffic().axes[0], "y"), (k.plot_traffic().axes[1], "x")):
        got = labels(ax, axis)
        assert 2 <= len(got) <= 10
        assert all(INTEGER.fullmatch(t) for t in got), got


def test_hierarchical_machine_labels_node_and_processor():
    alg = dl.algorithms.hierarchical_summa(16, machine=dl.Machine(2, 2).nest(dl.Machine(2)))
    got = labels(alg.compile().plot_traffic().axes[1], "x")
    assert got[:3] == ["(0,0|0)", "(0,0|1)", "(0,1|0)"]
    assert len(got) == 8


def test_proc_label():
    assert proc_label(5, ((8,),)) == "5"
    assert proc_label(5, ((2, 3),)) == "(1,2)"
    assert proc_label(7, ((2, 2), (2,))) == "(1,1|1)"


def test_timeline_ticks_and_units():
    kernel = cannon(32, 2)
    import numpy as np

    rng = np.random.default_rng(0)
    res = kernel.run({"B": rng.random((32, 32)), "C": rng.random((32, 32))})
    fig = plot_timeline(res, machine=kernel.plan.machine)
    ax = fig.axes[0]
    assert labels(ax, "y") == ["(0,0)", "(0,1)", "(1,0)", "(1,1)"]
    assert plot_timeline(res).axes[0].get_yticks().tolist() == [0, 1, 2, 3]
    unit = time_unit(max(e.end for e in res.trace))[0]
    assert ax.get_xlabel() == f"time since start ({unit})"
    assert time_unit(3.0) == ("s", 1.0)
    assert time_unit(0.004) == ("ms", 1e3)
    assert time_unit(6.5e-5) == ("µs", 1e6)
