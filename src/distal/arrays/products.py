"""numpy's products on DArrays: ``matmul`` (batched), ``dot``, ``vdot``, ``inner``,
``outer``, ``tensordot``, ``vecdot``, ``einsum``, ``trace`` -- contractions
(:func:`distal.arrays.graph.contract`), computed by index-notation kernels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from distal.arrays import graph as g
from distal.arrays.blocks import Block, Kind, register
from distal.arrays.darray import DArray, einsum_arrays
from distal.arrays.functions import (
    asdarray,
    assign_out,
    astype,
    broadcast_to,
    diag,
    elementwise,
    first_darray,
    new,
    nodes,
    reshape,
    squeeze,
    sum_,
)
from distal.errors import InputError, NotSupportedYet, ShapeError


def matmul(a: Any, b: Any) -> DArray:
    first, (x, y) = nodes([a, b])
    if x.ndim == 0 or y.ndim == 0:
        raise ShapeError("matmul: an operand is 0-d (use * for scalars)")
    if x.ndim <= 2 and y.ndim <= 2:
        return first._wrap(g.matmul(x, y))
    xa, ya = (
        new(x, first) if not isinstance(a, DArray) else a,
        new(y, first) if not isinstance(b, DArray) else b,
    )
    if x.ndim == 1:
        xa = reshape(xa, (1, x.shape[0]))
    if y.ndim == 1:
        ya = reshape(ya, (y.shape[0], 1))
    if xa.shape[-1] != ya.shape[-2]:
        raise ShapeError(f"matmul: shapes {x.shape} and {y.shape} do not align")
    try:
        batch = np.broadcast_shapes(xa.shape[:-2], ya.shape[:-2])
    except ValueError:
        raise ShapeError(
            f"matmul: batch shapes of {x.shape} and {y.shape} do not broadcast"
        ) from None
    xa = broadcast_to(xa, (*batch, *xa.shape[-2:]))
    ya = broadcast_to(ya, (*batch, *ya.shape[-2:]))
    letters = "abcdefghijklmnopqrstuvw"[: len(batch)]
    out = einsum(f"{letters}yz,{letters}zx->{letters}yx", xa, ya)
    if x.ndim == 1:
        out = squeeze(out, -2)
    if y.ndim == 1:
        out = squeeze(out, -1)
    return out


def dot(a: Any, b: Any) -> DArray:
    first, (x, y) = nodes([a, b])
    if x.ndim == 0 or y.ndim == 0:
        return first._wrap(g.map_node("mul", x, y), new=True)
    if x.ndim <= 2 and y.ndim <= 2:
        return first._wrap(g.matmul(x, y))
    la = "abcdefghij"[: x.ndim]
    lb = "klmnopqrst"[: y.ndim]
    lb = lb[: y.ndim - 2] + la[-1] + lb[-1] if y.ndim >= 2 else la[-1]
    out = la[:-1] + lb.replace(la[-1], "")
    return einsum(f"{la},{lb}->{out}", a, b)


def vdot(a: Any, b: Any) -> DArray:
    a, b = reshape(asdarray(a), (-1,)), reshape(asdarray(b, first_darray([a])), (-1,))
    if a.dtype.kind == "c":
        a = elementwise("conjugate", a)
    return matmul(a, b)


def inner(a: Any, b: Any) -> DArray:
    first, (x, y) = nodes([a, b])
    if x.ndim == 0 or y.ndim == 0:
        return first._wrap(g.map_node("mul", x, y), new=True)
    la, lb = "abcdefghij"[: x.ndim - 1], "klmnopqrst"[: y.ndim - 1]
    return einsum(f"{la}z,{lb}z->{la}{lb}", a, b)


def _outer(spec: tuple, arrays: list[np.ndarray], box: Any) -> np.ndarray:
    return np.multiply.outer(arrays[0], arrays[1])


register("outer", Kind(_outer))


def outer(a: Any, b: Any) -> DArray:
    """numpy's ``outer``: every product of the flattened operands, as numpy computes each
    (``-0.0 * 1.0`` keeps its sign): each processor its rows, the second operand read
    whole."""
    first = first_darray([a, b])
    x, y = reshape(asdarray(a, first), (-1,)), reshape(asdarray(b, first), (-1,))
    dt = np.result_type(x.dtype, y.dtype)
    node = Block((x.shape[0], y.shape[0]), dt, ("outer",), (x.node, y.node), "rows", (True, False))
    return x._wrap(node, new=True)


def tensordot(a: Any, b: Any, axes: Any = 2) -> DArray:
    _, (x, y) = nodes([a, b])
    if isinstance(axes, int | np.integer):
        ax_a = list(range(x.ndim - int(axes), x.ndim))
        ax_b = list(range(int(axes)))
    else:
        ax_a, ax_b = (list(v) if isinstance(v, Sequence) else [v] for v in axes)
        ax_a = [int(v) % x.ndim for v in ax_a]
        ax_b = [int(v) % y.ndim for v in ax_b]
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    la = [next(letters) for _ in range(x.ndim)]
    lb = [next(letters) for _ in range(y.ndim)]
    for i, j in zip(ax_a, ax_b, strict=True):
        lb[j] = la[i]
    out = [c for d, c in enumerate(la) if d not in ax_a] + [
        c for d, c in enumerate(lb) if d not in ax_b
    ]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def vecdot(a: Any, b: Any, axis: int = -1) -> DArray:
    """The array API's ``vecdot``: the (conjugated) products summed along ``axis``, whose
    extent must agree (no broadcasting along it), in the operands' promoted dtype."""
    first, (x, y) = nodes([a, b])
    if not x.ndim or not y.ndim:
        raise ShapeError("vecdot: the operands need an axis to sum")
    if not -min(x.ndim, y.ndim) <= axis < 0 and not 0 <= axis < min(x.ndim, y.ndim):
        raise InputError(f"vecdot: axis {axis} is out of range")
    ax = axis if axis < 0 else axis - min(x.ndim, y.ndim)
    if x.shape[ax] != y.shape[ax]:
        raise ShapeError(f"vecdot: extents {x.shape[ax]} and {y.shape[ax]} along axis {axis}")
    xa = new(x, first) if not isinstance(a, DArray) else a
    if xa.dtype.kind == "c":
        xa = elementwise("conjugate", xa)
    prod = elementwise("mul", xa, b)
    dt = np.result_type(x.dtype, y.dtype)
    return sum_(prod, ax, dt if dt.kind not in "fc" else None)


def einsum(subscripts: str, *operands: Any, out: Any = None, **kwargs: Any) -> DArray:
    for k in kwargs:
        if k not in ("optimize", "dtype", "casting", "order"):
            raise InputError(f"einsum: unknown keyword {k!r}")
    first = first_darray(operands)
    arrays = [asdarray(x, first) for x in operands]
    if any("->" not in subscripts and False for _ in arrays):
        pass
    spec_in = subscripts.replace(" ", "").split("->")[0].split(",")
    if any(len(set(s.replace(".", ""))) != len(s.replace(".", "")) for s in spec_in):
        return _einsum_repeated(subscripts, arrays)
    got = einsum_arrays(subscripts, tuple(arrays))
    dt = kwargs.get("dtype")
    if dt is not None:
        got = astype(got, dt, copy=False)
    return assign_out(got, out)


def _einsum_repeated(subscripts: str, arrays: list[DArray]) -> DArray:
    """An einsum with a label repeated within an operand: its diagonal taken first (a
    square 2-D operand only)."""
    left, _, right = subscripts.replace(" ", "").partition("->")
    specs = left.split(",")
    fixed = []
    for spec, a in zip(specs, arrays, strict=True):
        if len(set(spec)) != len(spec):
            if len(spec) != 2 or a.ndim != 2:
                raise NotSupportedYet(
                    f"einsum {subscripts!r}: a repeated label beyond a 2-D diagonal"
                )
            a = diag(a)
            spec = spec[0]
        fixed.append((spec, a))
    text = ",".join(s for s, _ in fixed) + ("->" + right if _ else "")
    if not _ and right == "":
        text = (
            ",".join(s for s, _ in fixed)
            + "->"
            + "".join(
                sorted(
                    c
                    for c in set("".join(s for s, _ in fixed))
                    if "".join(s for s, _ in fixed).count(c) == 1
                )
            )
        )
    return einsum_arrays(text, tuple(a for _, a in fixed))


def trace(x: Any, offset: int = 0) -> DArray:
    return sum_(diag(asdarray(x), offset))
