"""Slices of the arrays front: regions of a value, read and written, lowered as regions.

``u[1:-1, 1:-1]`` records a :class:`Slice` node, ``u[1:-1, 1:-1] = expr`` a
:class:`SetSlice` node (``u`` with that region replaced); both are immutable, like every
node, so a read recorded before a write keeps reading the values it saw (the recorded
program keeps numpy's order of reads and writes). :mod:`distal.arrays.views` makes
handles of them (views, in-place updates).

A basic index (integers, slices of any step, ``None``, ``...``) is normalized to a
:class:`Region`: per axis of the indexed array a range ``(start, step, length)`` or one
position, and where new axes go.

**Lowering.** A group whose element-wise tree (``+ - *``, negation, numbers, 0-d values,
transposes) reads slices, or that is a slice or a slice assignment itself, is one kernel in
index notation over its result's index space, with *shifted* accesses
(:mod:`distal.lang.affine`): ``u[:-2, 1:-1]`` inside a result indexed by ``(i, j)`` is
``u(i, j+1)``; a slice of a slice, of a transpose or of an element-wise node composes into
the accesses of the values below it. A slice assignment's kernel computes the whole of the
new array over the old one's index space (so its blocks lie where the old one's lie): the
assigned expression restricted to the region (``restrict``), and the old values copied on
the rest of the array, cut into boxes (the region's complement). The plan then fetches
only what the shifted accesses reach beyond each block -- a stencil's halo rows -- counted
in ``Stats`` like every kernel, and the statement is computed point by point in the order
numpy computes it (:mod:`distal.kernels.pointwise`: one compiled loop over block and halo
for large float64 blocks). Anything else under a slice (a function, a division by an
array, a contraction, an earlier assignment) is computed into a value first; a map over
slices reads them as values made by such kernels.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.arrays.graph import (
    KERNEL_OPS,
    Const,
    Map,
    Node,
    Transpose,
    Value,
    const,
    values_made,
)
from distal.arrays.lower import OUT, held_dist, slot_name
from distal.distribution.machine import Machine
from distal.errors import InputError, InternalError, NotSupportedYet, ShapeError
from distal.kernel import Kernel, compile
from distal.lang.nodes import Expr, IndexVar, Literal, Tensor, index_vars, restrict
from distal.schedule.api import schedule as default_schedule

Pick = tuple[int, int, int] | int


class IndexOutOfRange(InputError, IndexError):
    """An index past the end of an axis (an ``IndexError`` too, as numpy's, so a loop
    that stops on ``IndexError`` stops)."""


@dataclass(frozen=True, slots=True)
class Region:
    """A basic index, normalized: ``picks[d]`` for axis ``d`` of the indexed array is a range
    ``(start, step, length)`` (positions ``start + step * k``) or one position (an ``int``,
    the axis dropped); ``new`` are the positions of the result's new axes (``None``);
    ``shape`` is the result's."""

    picks: tuple[Pick, ...]
    new: tuple[int, ...]
    shape: tuple[int, ...]

    def result_axes(self) -> tuple[int | None, ...]:
        """Per axis of the result, the indexed array's axis it runs along (None: a new
        axis)."""
        ranges = iter(d for d, p in enumerate(self.picks) if not isinstance(p, int))
        return tuple(None if r in self.new else next(ranges) for r in range(len(self.shape)))

    def whole(self, shape: tuple[int, ...]) -> bool:
        """Whether the region is all of an array of ``shape``, its axes unchanged."""
        return not self.new and all(p == (0, 1, n) for p, n in zip(self.picks, shape, strict=True))

    def box(self, what: str) -> tuple[tuple[int, int], ...]:
        """The region as a box of the indexed array, where it is one (steps of 1 or -1).

        Raises:
            NotSupportedYet: a step of 2 or more over two or more positions (naming
                ``what``).
        """
        out = []
        for p in self.picks:
            if isinstance(p, int):
                out.append((p, p + 1))
                continue
            s, st, n = p
            if n > 1 and abs(st) != 1:
                raise NotSupportedYet(
                    f"{what}: assigning to a slice with step {st} of an array of "
                    f"{len(self.picks)} dimensions (elements {abs(st)} apart are not a box): "
                    "read such slices, or assign a vector's, or with steps 1 and -1"
                )
            out.append((s, s + n) if st > 0 else (s - n + 1, s + 1))
        return tuple(out)


def region_of(shape: tuple[int, ...], key: Any) -> Region | None:
    """numpy's basic index ``key`` over an array of ``shape``; None when ``key`` is not a
    basic index (an array, a list, a mask: advanced indexing).

    Raises:
        IndexOutOfRange: an integer past the end of its axis, or more indices than axes.
        InputError: two ellipses, or a slice that is not of integers.
        NotSupportedYet: a boolean scalar as an index.
    """
    entries = key if isinstance(key, tuple) else (key,)
    for e in entries:
        if isinstance(e, bool | np.bool_):
            raise NotSupportedYet(f"indexing with the boolean {e!r} (a new axis of 0 or 1)")
        if not (
            e is None
            or e is Ellipsis
            or isinstance(e, slice)
            or (isinstance(e, numbers.Integral))
            or (isinstance(e, np.ndarray) and e.ndim == 0 and e.dtype.kind in "iu")
        ):
            return None
    ells = sum(1 for e in entries if e is Ellipsis)
    if ells > 1:
        raise InputError(f"an index can only have a single ellipsis ('...'), got {key!r}")
    used = sum(1 for e in entries if e is not None and e is not Ellipsis)
    ndim = len(shape)
    if used > ndim:
        raise IndexOutOfRange(
            f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed"
        )
    if ells:
        at = next(k for k, e in enumerate(entries) if e is Ellipsis)
        entries = (*entries[:at], *(slice(None),) * (ndim - used), *entries[at + 1 :])
    else:
        entries = (*entries, *(slice(None),) * (ndim - used))
    picks: list[Pick] = []
    new: list[int] = []
    out: list[int] = []
    d = 0
    for e in entries:
        if e is None:
            new.append(len(out))
            out.append(1)
            continue
        n = shape[d]
        if isinstance(e, slice):
            try:
                start, stop, step = e.indices(n)
            except (TypeError, ValueError) as err:
                raise InputError(f"slice {e!r} of axis {d}: {err}") from None
            length = len(range(start, stop, step))
            picks.append(
                (start, step, length) if length > 1 else (start if length else 0, 1, length)
            )
            out.append(length)
        else:
            k = int(e)
            if not -n <= k < n:
                raise IndexOutOfRange(f"index {k} is out of bounds for axis {d} with size {n}")
            picks.append(k % n)
        d += 1
    return Region(tuple(picks), tuple(new), tuple(out))


def compose(a: Region, b: Region) -> Region:
    """The region ``b`` of the result of region ``a`` of an array, as one region of the
    array (a view of a view is a view of the base)."""
    picks = list(a.picks)
    axes = a.result_axes()
    new: list[int] = []
    b_axes = b.result_axes()
    for k, d in enumerate(axes):
        pb = b.picks[k]
        if d is None:  # a new axis of a: b keeps it (a range of one) or drops it (index 0)
            if not isinstance(pb, int) and pb[2] != 1:
                raise NotSupportedYet("an empty slice of a new axis")
            continue
        s, st, _ = a.picks[d]  # type: ignore[misc]
        if isinstance(pb, int):
            picks[d] = s + st * pb
        else:
            s2, st2, n2 = pb
            picks[d] = (s + st * s2, st * st2 if n2 > 1 else 1, n2)
    # the result's axes are b's: new where b adds one or where it keeps a new axis of a
    kept = iter(k for k, p in enumerate(b.picks) if not isinstance(p, int))
    for r, src in enumerate(b_axes):
        if src is None:
            new.append(r)
            continue
        k = next(kept)
        if axes[k] is None:
            new.append(r)
    return Region(tuple(picks), tuple(new), b.shape)


# -- nodes ---------------------------------------------------------------------------------


class Slice(Node):
    """``operand[region]``: a basic-index read, a region of the operand."""

    __slots__ = ("operand", "region")
    _fields = (*Node._fields, "region", "operand")

    def __init__(self, operand: Node, region: Region) -> None:
        super().__init__(region.shape, operand.dtype)
        self.operand = operand
        self.region = region

    def args(self) -> tuple[Node, ...]:
        return () if self.operand is None else (self.operand,)


class SetSlice(Node):
    """``base`` with ``region`` replaced by ``value`` (broadcast to the region): what
    ``base[key] = value`` makes of the array."""

    __slots__ = ("base", "region", "value")
    _fields = (*Node._fields, "region", "base", "value")

    def __init__(self, base: Node, region: Region, value: Node) -> None:
        super().__init__(base.shape, base.dtype)
        self.base = base
        self.region = region
        self.value = value

    def args(self) -> tuple[Node, ...]:
        return () if self.base is None else (self.base, self.value)


#: the node kinds of this module
REGIONS = (Slice, SetSlice)


def _refuse_sparse(x: Node, what: str) -> None:
    if isinstance(x, Value) and x.sparse is not None:
        raise NotSupportedYet(
            f"{what} of a sparse array: the arrays front runs a sparse matrix only as A @ x"
        )


def read(x: Node, key: Any) -> Node:
    """``x[key]`` for a basic index ``key`` (the node itself for ``x[...]`` / ``x[:]``)."""
    region = region_of(x.shape, key)
    if region is None:
        raise InternalError(f"read() of an advanced index {key!r}")
    _refuse_sparse(x, f"[{key!r}]")
    return sliced(x, region)


def sliced(x: Node, region: Region) -> Node:
    """The node of ``x``'s ``region``: ``x`` itself for all of it, one region of the
    operand for a slice of a slice (not yet a value)."""
    if region.whole(x.shape):
        return x
    if type(x) is Slice and x.operand is not None:
        return Slice(x.operand, compose(x.region, region))
    return Slice(x, region)


def castable(value: Node, dtype: np.dtype, what: str) -> None:
    """Whether ``value`` may be written into an array of ``dtype``: numpy's ``same_kind``
    rule (an ``int64`` array takes integers, not floats), and a Python number that the
    dtype holds exactly (``x[0] = 1.0`` into integers is 1).

    Raises:
        InputError: naming the two dtypes (numpy would truncate or drop the imaginary
            part without a word; cast the value explicitly first).
    """
    if np.can_cast(value.dtype, dtype, "same_kind"):
        return
    if isinstance(value, Const) and type(value.value) in (int, float, complex):
        v = value.value
        try:
            if dtype.type(v) == v:
                return
        except (OverflowError, TypeError, ValueError):
            pass
    raise InputError(
        f"{what}: cannot write {value.dtype} values into a {dtype} array by numpy's "
        "'same_kind' rule (they would be cut to fit); cast them first"
    )


def write(base: Node, region: Region, value: Node, what: str) -> Node:
    """``base`` with ``region`` replaced by ``value``, checked as numpy checks it: the value
    broadcasts to the region's shape (ShapeError otherwise), its dtype fits (see
    :func:`castable`); an assignment to all of ``base`` of a value of its shape and dtype
    is the value itself."""
    _refuse_sparse(base, what)
    _refuse_sparse(value, what)
    try:
        got = np.broadcast_shapes(value.shape, region.shape)
    except ValueError:
        got = None
    if got != region.shape:
        raise ShapeError(
            f"{what}: could not broadcast input array from shape {value.shape} into shape "
            f"{region.shape}"
        )
    castable(value, base.dtype, what)
    if isinstance(value, Const) and not np.can_cast(value.dtype, base.dtype, "same_kind"):
        value = const(base.dtype.type(value.value))  # (exact: castable said so)
    if 0 in region.shape:
        return base
    region.box(what)  # (refuses a strided region before anything is recorded)
    if region.whole(base.shape) and value.shape == base.shape and value.dtype == base.dtype:
        return value
    return SetSlice(base, region, value)


# -- lowering -------------------------------------------------------------------------------


def reads_region(root: Node, is_value: Callable[[Node], bool]) -> bool:
    """Whether ``root`` is a region node, or an element-wise node of one or more dimensions
    whose tree of operations index notation computes reaches one (not through a value)."""
    if type(root) in REGIONS:
        return not is_value(root)
    if type(root) is not Map or not root.shape or root.op not in KERNEL_OPS:
        return False
    f = root.fused  # (its leaves, where they are still as recorded: no walk for most groups)
    if f is not None and f[4] == values_made() and not any(type(x) in REGIONS for x in f[1]):
        return False
    stack, seen = list(root.operands), set()
    while stack:
        n = stack.pop()
        if id(n) in seen or is_value(n):
            continue  # (a node read twice is walked once: a loop's graph shares nodes)
        seen.add(id(n))
        t = type(n)
        if t in REGIONS:
            return True
        if (t is Map and n.op in KERNEL_OPS) or t is Transpose:
            stack.extend(n.args())
    return False


class _Walk:
    """One walk of a region group: slots (its leaves) and index variables with extents; an
    access of a node is ``((variable, scale, offset), ...)``, one per axis of the node."""

    def __init__(self, is_leaf: Callable[[Node], bool]) -> None:
        self.is_leaf = is_leaf
        self.slots: list[Node] = []
        self.slot_of: dict[int, int] = {}
        self.extents: list[int] = []

    def var(self, extent: int) -> int:
        self.extents.append(int(extent))
        return len(self.extents) - 1

    def slot(self, node: Node) -> int:
        k = self.slot_of.get(id(node))
        if k is None:
            k = self.slot_of[id(node)] = len(self.slots)
            self.slots.append(node)
        return k

    def expr(self, node: Node, at: tuple[tuple[int, int, int], ...]) -> tuple:
        if isinstance(node, Const):
            return ("const", node.value, node.dtype.str, repr(node.value))
        if self.is_leaf(node):
            return ("slot", self.slot(node), at)
        t = type(node)
        if t is Map:
            subs = []
            for x in node.operands:
                lead = node.ndim - x.ndim
                xat = tuple(
                    (self.var(1), 1, 0) if n == 1 and node.shape[lead + d] != 1 else at[lead + d]
                    for d, n in enumerate(x.shape)
                )
                subs.append(self.expr(x, xat))
            return (node.op, *subs)
        if t is Slice:
            return self.expr(node.operand, self.through(node.region, at))
        if t is Transpose:
            return self.expr(node.operand, tuple(reversed(at)))
        raise InternalError(f"a region group reached {type(node).__name__} as an inner node")

    def through(
        self, region: Region, at: tuple[tuple[int, int, int], ...]
    ) -> tuple[tuple[int, int, int], ...]:
        """The access of a region's operand, given the access of the region's result."""
        of_axis = {d: r for r, d in enumerate(region.result_axes()) if d is not None}
        out = []
        for d, p in enumerate(region.picks):
            if isinstance(p, int):
                out.append((self.var(1), 1, p))
                continue
            s, st, _ = p
            v, a, c = at[of_axis[d]]
            out.append((v, st * a, s + st * c))
        return tuple(out)


def signature(root: Node, is_leaf: Callable[[Node], bool], nprocs: int) -> tuple[tuple, list[Node]]:
    """The key of a region group and its leaves (slots in order).

    The key is ``("region", outs, tree, extents, descs, dtype, nprocs)``: the result's
    variables, the right side as nested tuples (``("slot", k, ((var, scale, offset), ...))``,
    ``("const", ...)``, ``(op, ...)``, ``("restrict", ((var, lo, hi), ...), sub)``), every
    variable's extent, each slot's ``(shape, dtype)``; equal keys make equal kernels."""
    w = _Walk(is_leaf)
    outs = tuple(w.var(n) for n in root.shape)
    plain = tuple((v, 1, 0) for v in outs)
    if isinstance(root, SetSlice):
        tree = _assignment(w, root, outs)
    else:
        tree = w.expr(root, plain)
    descs = tuple((tuple(x.shape), x.dtype.str) for x in w.slots)
    key = ("region", outs, tree, tuple(w.extents), descs, root.dtype.str, int(nprocs))
    return key, w.slots


def _assignment(w: _Walk, root: SetSlice, outs: tuple[int, ...]) -> tuple:
    """The right side of a slice assignment's kernel over the base's variables ``outs``:
    the value on the region (its index ``k`` along a range ``start, step`` of steps 1 or
    -1 is ``step * i - step * start``), the base's old values on each box of the rest."""
    region = root.region
    box = region.box("slice assignment")
    at = []
    for d in region.result_axes():
        if d is None:  # a new axis of the region: the value's index there is 0
            at.append((w.var(1), 1, 0))
            continue
        s, st, _ = region.picks[d]  # type: ignore[misc]
        at.append((outs[d], st, -st * s))
    value = root.value
    lead = len(at) - value.ndim
    vat = tuple(
        (w.var(1), 1, 0) if n == 1 and region.shape[lead + d] != 1 else at[lead + d]
        for d, n in enumerate(value.shape)
    )
    tree = w.expr(value, vat)
    rest = complement(box, root.shape)
    if not rest:  # the whole array
        return tree
    tree = ("restrict", tuple((v, lo, hi) for v, (lo, hi) in zip(outs, box, strict=True)), tree)
    base = ("slot", w.slot(root.base), tuple((v, 1, 0) for v in outs))
    for part in rest:
        rbox = tuple((v, lo, hi) for v, (lo, hi) in zip(outs, part, strict=True))
        tree = ("add", tree, ("restrict", rbox, base))
    return tree


def complement(box: tuple[tuple[int, int], ...], shape: tuple[int, ...]) -> list[tuple]:
    """The part of an array of ``shape`` outside ``box``, as disjoint boxes: along each
    axis in turn the slabs before and after the box, the earlier axes cut to the box."""
    out = []
    for d, (lo, hi) in enumerate(box):
        head = tuple(box[:d])
        tail = tuple((0, n) for n in shape[d + 1 :])
        if lo > 0:
            out.append((*head, (0, lo), *tail))
        if hi < shape[d]:
            out.append((*head, (hi, shape[d]), *tail))
    return out


def _expr(e: tuple, slots: list[Tensor], vs: list[IndexVar]) -> Expr:
    tag = e[0]
    if tag == "slot":
        t = slots[e[1]]
        if not e[2]:
            return t[()]
        return t[tuple(vs[v] * a + c for v, a, c in e[2])]
    if tag == "const":
        return Literal(e[1])
    if tag == "restrict":
        return restrict(_expr(e[2], slots, vs), {vs[v]: (lo, hi) for v, lo, hi in e[1]})
    subs = [_expr(x, slots, vs) for x in e[1:]]
    if tag == "add":
        return subs[0] + subs[1]
    if tag == "sub":
        return subs[0] - subs[1]
    if tag == "mul":
        return subs[0] * subs[1]
    if tag == "neg":
        return -subs[0]
    if tag == "pos":
        return subs[0]
    raise InternalError(f"unknown operation {tag!r} in a region key")


def build(key: tuple) -> Kernel:
    """The kernel of a region key: the result and every slot in blocks of their first axis
    (where held values lie), owner-computes by the result's first index (its one variable
    of extent 1 for a 0-d result), routed directly: its fetches are the rows next to a
    block, each from the one neighbour that owns them (no piece is shared by many
    receivers for a tree to spread), and a loop reading ``x[t]`` compiles a kernel per
    ``t``, so the cost model's comparison of routings (2.5x the compile) is left out."""
    _, outs, tree, extents, descs, dtype, nprocs = key
    machine = Machine(nprocs)
    vs = [IndexVar(f"v{n}", extent=x) for n, x in enumerate(extents)]
    slots = [
        Tensor(slot_name(k), shape, dist=held_dist(len(shape)), machine=machine, dtype=np.dtype(dt))
        for k, (shape, dt) in enumerate(descs)
    ]
    result = Tensor(
        OUT,
        tuple(extents[v] for v in outs),
        dist=held_dist(len(outs)),
        machine=machine,
        dtype=np.dtype(dtype),
    )
    result[tuple(vs[v] for v in outs)] = _expr(tree, slots, vs)
    s = default_schedule(result)
    owner = outs[0] if outs else next((v for v in range(len(extents)) if v not in outs), None)
    if owner is not None:
        po, pi = index_vars("po pi")
        s = s.distribute([vs[owner]], [po], [pi], machine)
    return compile(s, routing="direct")


def group(program: Any, root: Node) -> tuple[str, list[Node], Any]:
    """``("region", deps, (key, slots))``: how ``root``'s region group runs (see the
    module docstring) and what must be values before it."""

    def is_leaf(n: Node) -> bool:
        # walked through: slices, transposes and index notation's element-wise operations;
        # anything else (a value, a 0-d node, a contraction, an earlier assignment, a
        # function, a node kind of another module) is read as a value
        t = type(n)
        if program.is_value(n) or n.ndim == 0:
            return True
        return not (t is Slice or t is Transpose or (t is Map and n.op in KERNEL_OPS))

    key, slots = signature(root, lambda n: n is not root and is_leaf(n), program.nprocs)
    deps = sorted(
        {id(x): x for x in slots if not program.is_value(x) and not isinstance(x, Const)}.values(),
        key=lambda n: n.seq,
    )
    return "region", deps, (key, slots)


def run(program: Any, root: Node, out: str, sig: tuple) -> None:
    """Run ``root``'s region group as one kernel (compiled once per key) into value
    ``out``."""
    key, slots = sig
    kernel = program.kernels.get(key)
    if kernel is None:
        kernel = program.kernels[key] = build(key)
        program.compiles += 1
    names = {slot_name(k): program.name_of(x) for k, x in enumerate(slots)}
    names[OUT] = out
    program.sess.run_named(kernel, names)
    program.kernels_run += 1
    # the node is a value now: it lets go of what it was computed from, so a loop's chain
    # of assignments recorded before one flush frees each array as the next is made
    # (reads recorded before hold their own references to what they read)
    if isinstance(root, SetSlice):
        root.base = root.value = None  # type: ignore[assignment]
    elif isinstance(root, Slice):
        root.operand = None  # type: ignore[assignment]
