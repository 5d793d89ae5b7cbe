"""Random array programs against numpy: whatever the program fuses, cuts or maps, and
whichever intermediate values it keeps, the result is numpy's."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import distal as dl

UNARY = ("neg", "scale", "shift", "sqrt_abs", "abs")
BINARY = ("add", "sub", "mul", "max", "min", "div_pos", "where_gt")
FINAL = ("none", "sum", "sum0", "sum_last", "matvec", "T", "inner")


def unary(op: str, x: Any, lib: Any) -> Any:
    if op == "neg":
        return -x
    if op == "scale":
        return x * 1.5
    if op == "shift":
        return 0.25 - x
    if op == "sqrt_abs":
        return lib.sqrt(lib.abs(x))
    return lib.abs(x)


def binary(op: str, x: Any, y: Any, lib: Any) -> Any:
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "max":
        return lib.maximum(x, y)
    if op == "min":
        return lib.minimum(x, y)
    if op == "div_pos":
        return x / (lib.abs(y) + 1.0)
    return lib.where(x > y, x, y)


@st.composite
def programs(draw: Any) -> dict[str, Any]:
    m, n = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    shapes = [(m, n), (n,), (1, n), (m, 1), ()]
    k = draw(st.integers(1, 3))
    operands = [draw(st.sampled_from(shapes[:4])) for _ in range(k)]
    operands[0] = (m, n)  # the result has the full shape, so every final step applies
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            steps.append(("u", draw(st.sampled_from(UNARY)), draw(st.integers(0, 99))))
        else:
            steps.append(
                (
                    "b",
                    draw(st.sampled_from(BINARY)),
                    draw(st.integers(0, 99)),
                    draw(st.integers(0, 99)),
                )
            )
    return {
        "operands": operands,
        "scalar": draw(st.booleans()),
        "steps": steps,
        "keep": draw(st.lists(st.integers(0, 10), max_size=3)),
        "final": draw(st.sampled_from(FINAL)),
        "procs": draw(st.integers(1, 3)),
        "seed": draw(st.integers(0, 2**16)),
    }


def run(prog: dict[str, Any], arrays: list[np.ndarray], make: Any, lib: Any) -> Any:
    vals = [make(a) for a in arrays]
    kept = []
    for t, step in enumerate(prog["steps"]):
        if step[0] == "u":
            v = unary(step[1], vals[step[2] % len(vals)], lib)
        else:
            v = binary(step[1], vals[step[2] % len(vals)], vals[step[3] % len(vals)], lib)
        vals.append(v)
        if t in prog["keep"]:
            kept.append(v)  # held by the program: computed as a value of its own
    # the result keeps the full shape: combine with the first operand
    out = vals[-1] + vals[0] if np.shape(vals[-1]) != np.shape(vals[0]) else vals[-1]
    final = prog["final"]
    if final == "sum":
        out = out.sum()
    elif final == "sum0":
        out = out.sum(0)
    elif final == "sum_last":
        out = out.sum(-1)
    elif final == "matvec":
        out = out @ make(np.linspace(-1.0, 1.0, np.shape(out)[-1]))
    elif final == "T":
        out = out.T * 2.0
    elif final == "inner":
        out = (out * out).sum()
    return out, kept


@given(programs())
def test_random_programs_match_numpy(prog: dict[str, Any]) -> None:
    rng = np.random.default_rng(prog["seed"])
    arrays = [rng.standard_normal(s) for s in prog["operands"]]
    if prog["scalar"]:
        arrays.append(np.array(rng.standard_normal()))
    want, want_kept = run(prog, arrays, np.asarray, np)
    sess = dl.Session("local", machine=prog["procs"])
    got, got_kept = run(prog, arrays, sess.asarray, dl)
    assert got.shape == np.shape(want)
    assert got.dtype == np.asarray(want).dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)
    for g, w in zip(got_kept, want_kept, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10, atol=1e-12)
