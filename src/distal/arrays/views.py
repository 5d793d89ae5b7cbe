"""Views and in-place updates of DArrays: what ``u[1:-1]``, ``u[1:-1] = ...`` and ``x += y``
do to handles (the nodes they record are :mod:`distal.arrays.slicing`'s).

A :class:`DArray` is the array: a handle whose node is what the array holds now. An
in-place update (``x += y``, ``x[...] = v``, ``x[1:] = v``, an ``out=``) gives the handle a
new node, so every holder of the handle sees the new values, and what was recorded before
keeps reading the old node (numpy's order of reads and writes).

A basic slice is a :class:`DView`, as in numpy: its node is the region of its base's
*current* node, worked out when it is read, and a write through it writes the region of the
base. Views of views are views of the base; an integer index of every axis is a value,
not a view (numpy gives a scalar there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays import masks, slicing
from distal.arrays.darray import DArray, operand
from distal.arrays.graph import Node
from distal.errors import InputError, ShapeError

_new = object.__new__


class DView(DArray):
    """``base[key]`` for a basic index: a view of ``base`` (a DArray that is no view), its
    region ``region``. Its node follows the base's: a write through either is seen by the
    other."""

    __slots__ = ("_made", "_seen", "base", "region")

    @property  # type: ignore[override]
    def node(self) -> Node:
        b = self.base.node
        if b is not self._seen:
            self._made = slicing.sliced(b, self.region)
            self._seen = b
        return self._made

    def get(self) -> Any:
        """The view's values, gathered (as ``DArray.get``)."""
        with self.session.runtime_errors():
            self.program.flush()
            node = self.node
            name = self.program.materialize(node)
            return self.session.read(name)

    def __repr__(self) -> str:
        return f"DArray(shape={self.shape}, dtype={self.dtype}, view)"


def _view(base: DArray, region: slicing.Region) -> DView:
    v = _new(DView)
    v.session = base.session
    v.program = base.program
    v.base = base
    v.region = region
    v._seen = None
    v._made = None
    return v


def _scalar_key(key: Any, ndim: int) -> bool:
    """Whether ``key`` gives every axis an integer (numpy's scalar, not a view)."""
    entries = key if isinstance(key, tuple) else (key,)
    return len(entries) == ndim and all(
        e is not None and e is not Ellipsis and not isinstance(e, slice) for e in entries
    )


def getitem(a: DArray, key: Any) -> Any:
    """``a[key]``: a view for a basic index (a value where every axis is given an integer),
    masks and integer arrays by :func:`distal.arrays.masks.getitem`."""
    region = slicing.region_of(a.shape, key)
    if region is None:
        return masks.getitem(a, key)
    slicing._refuse_sparse(a.node, f"[{key!r}]")
    base, whole = (
        (a.base, slicing.compose(a.region, region)) if isinstance(a, DView) else (a, region)
    )
    if _scalar_key(key, a.ndim):  # numpy's scalar: the value now, not a view
        return a._wrap(slicing.sliced(base.node, whole), new=True)
    if whole.whole(base.shape):
        return base
    return _view(base, whole)


def setitem(a: DArray, key: Any, value: Any) -> None:
    """``a[key] = value``: the region of ``a`` (of its base, for a view) replaced; masks
    and integer arrays by :func:`distal.arrays.masks.setitem`."""
    region = slicing.region_of(a.shape, key)
    if region is None:
        masks.setitem(a, key, value)
        return
    what = f"[{key!r}] = ..."
    if isinstance(a, DView):
        base, region = a.base, slicing.compose(a.region, region)
    else:
        base = a
    if isinstance(value, DView) and value.base is base and value.region == region:
        return  # ``x[k] += y``: Python writes the updated view back onto itself
    if base.ndim == 1 and _strided(region):  # every k-th element of a vector: a scatter
        (start, step, length) = region.picks[0]  # type: ignore[misc]
        masks.setitem(base, start + step * np.arange(length), value)
        return
    node = operand(a, value)
    _assign(base, slicing.write(base.node, region, node, what))


def _strided(region: slicing.Region) -> bool:
    p = region.picks[0]
    return not region.new and not isinstance(p, int) and p[2] > 1 and abs(p[1]) > 1


def update(a: DArray, node: Node, what: str = "an update") -> None:
    """Make ``a`` hold ``node`` (broadcast to ``a``'s shape, cast by numpy's ``same_kind``
    rule): what an in-place operator or an ``out=`` does. Every holder of ``a`` sees it; a
    view writes its base's region."""
    whole = slicing.Region(tuple((0, 1, n) for n in a.shape), (), a.shape)
    if isinstance(a, DView):
        base = a.base
        _assign(base, slicing.write(base.node, a.region, node, what))
    else:
        _assign(a, slicing.write(a.node, whole, node, what))


def _assign(base: DArray, node: Node) -> None:
    if node is base.node:
        return
    base.node = node
    base.program.touched(base)


_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "floordiv": "//"}
_OPS["mod"] = "%"


def inplace(a: DArray, op: str, other: Any) -> DArray:
    """``a op= other``: ``a op other`` as the operator computes it, written into ``a``. The
    result must have ``a``'s shape (``other`` broadcasts to ``a``, not ``a`` to it) and a
    dtype numpy's ``same_kind`` rule casts to ``a``'s (``int_array += 0.5`` is refused, as
    numpy refuses it)."""
    method = getattr(DArray, f"__{'truediv' if op == 'div' else op}__")
    result = method(a, other)
    node = result.node
    sym = _OPS[op]
    if node.shape != a.shape:
        raise ShapeError(
            f"{sym}=: non-broadcastable output operand with shape {a.shape} doesn't match "
            f"the broadcast shape {node.shape}"
        )
    if node.dtype != a.dtype and not np.can_cast(node.dtype, a.dtype, "same_kind"):
        raise InputError(
            f"{sym}=: cannot cast the result from {node.dtype} to {a.dtype} with casting rule "
            "'same_kind' (as numpy refuses it); write a = a " + sym + " b for a new array"
        )
    update(a, node, f"{sym}=")
    return a
