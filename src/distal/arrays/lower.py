"""A fused group of the arrays program as one distributed kernel.

A *group* is a root node with the element-wise tree that feeds it, down to its *leaves*:
values the session holds (named) and scalar constants. It becomes one statement in index
notation, which the ordinary pipeline compiles; nothing here is a second lowering.

The walk over the group (:func:`signature`) gives a *key*: a nested tuple that says
everything the kernel depends on — the expression with its leaves as numbered slots, every
index variable's extent, each slot's shape, dtype and format, the result's dtype and the
machine. Equal keys make equal kernels, so the program compiles a key once and a loop's
second iteration compiles nothing; :func:`build` makes the kernel from the key alone.

Placement (the one rule, here), chosen by the cost model: over a line of ``P`` processors,
an element-wise group is computed owner-computes by its first index (a held value's own
layout is blocks along its first axis, so element-wise chains over equal shapes move
nothing); a contraction by whichever of its indices :func:`owner_costs` models cheapest
with every operand and the result where held values lie, the result's first index unless
another is strictly cheaper (a summed index leaves a large operand in place and reduces
partial sums onto the result's blocks instead). The result, and every operand whose same
axis that index runs over, is cut into blocks along it; an operand not indexed by it is
read replicated; a 0-d result is replicated, where every later group reads it. A sparse
matrix times a vector is SpDISTAL's SpMV, cut by rows or by stored entries as the user
said, else as :func:`choose_split` models cheaper for the matrix's own pattern, with the
vectors in blocks.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from distal.arrays.graph import Const, Contract, Map, Node, Transpose, Value, is_spmv, numpy_op
from distal.costmodel.seconds import (
    Cost,
    MachineParams,
    flops_per_iteration,
    load_params,
    stats_cost,
)
from distal.distribution.machine import Machine
from distal.errors import InternalError
from distal.kernel import Kernel, compile
from distal.kernels import blas
from distal.kernels import fused as fused_kernels
from distal.kernels.passes import Pass, register_pass
from distal.kernels.recycle import Recycler
from distal.kernels.sums import total as pairwise_total
from distal.lang.concrete import concretize, expand
from distal.lang.nodes import Expr, IndexVar, Literal, Tensor, index_vars
from distal.schedule.api import schedule as default_schedule

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

#: the tensor names of a group's kernel: slot ``k`` is ``t{k}``, the result ``out``
OUT = "out"


def slot_name(k: int) -> str:
    return f"t{k}"


class _Walk:
    """State of one walk: slots by node, index variables by id with their extents."""

    def __init__(self, is_leaf: Callable[[Node], bool]) -> None:
        self.is_leaf = is_leaf
        self.slots: list[Node] = []
        self.slot_of: dict[int, int] = {}
        self.extents: list[int] = []

    def var(self, extent: int) -> int:
        self.extents.append(int(extent))
        return len(self.extents) - 1

    def expr(self, node: Node, vs: tuple[int, ...]) -> tuple:
        if isinstance(node, Const):
            return ("const", node.value, node.dtype.str, repr(node.value))
        if self.is_leaf(node):
            return ("slot", self.slot(node), vs)
        if isinstance(node, Transpose):
            inner = [0] * len(vs)
            for d, a in enumerate(node.axes):
                inner[a] = vs[d]
            return self.expr(node.operand, tuple(inner))
        if isinstance(node, Map) and node.op in ("add", "sub", "mul", "neg", "pos"):
            subs = tuple(self.expr(x, self.broadcast(x, node.shape, vs)) for x in node.operands)
            return (node.op, *subs)
        raise InternalError(f"a group reached {type(node).__name__} {node!r} as an inner node")

    def slot(self, node: Node) -> int:
        k = self.slot_of.get(id(node))
        if k is None:
            k = self.slot_of[id(node)] = len(self.slots)
            self.slots.append(node)
        return k

    def map_expr(self, node: Node, top: bool = False) -> tuple:
        """A map group's expression: every element-wise node down to the leaves (a
        transposed or contracted operand is a leaf: the program makes it a value first)."""
        if isinstance(node, Const):  # repr and dtype: 2 == 2.0 == True and 0.0 == -0.0
            return ("const", node.value, repr(node.value), node.dtype.str)
        if not isinstance(node, Map) or (not top and self.is_leaf(node)):
            return ("slot", self.slot(node))
        return (node.op, *[self.map_expr(x) for x in node.operands])

    def broadcast(self, x: Node, shape: tuple[int, ...], vs: tuple[int, ...]) -> tuple[int, ...]:
        """The variables of operand ``x`` inside a result of ``shape`` indexed by ``vs``:
        numpy's broadcasting, a size-1 axis against a longer one getting a variable of its
        own (extent 1, so summing over it is the value itself)."""
        lead = len(shape) - x.ndim
        out = []
        for d, n in enumerate(x.shape):
            out.append(self.var(1) if n == 1 and shape[lead + d] != 1 else vs[lead + d])
        return tuple(out)


def signature(root: Node, is_leaf: Callable[[Node], bool], nprocs: int) -> tuple[tuple, list[Node]]:
    """The key of ``root``'s group and its leaves (slots, in slot order).

    Raises:
        NotSupportedYet: the group cannot be one kernel (the program materializes the
            operands of a contraction first when its terms do not all use its summed
            indices; see :func:`sums_cover`).
    """
    w = _Walk(is_leaf)
    if isinstance(root, Contract):
        letter: dict[str, int] = {}
        for spec, x in zip(root.ins, root.operands, strict=True):
            for c, n in zip(spec, x.shape, strict=True):
                if c not in letter:
                    letter[c] = w.var(n)
        outs = tuple(letter[c] for c in root.out)
        summed = tuple(v for c, v in letter.items() if c not in root.out)
        factors = tuple(
            w.expr(x, tuple(letter[c] for c in spec))
            for spec, x in zip(root.ins, root.operands, strict=True)
        )
        body: tuple = ("contract", outs, summed, factors)
    else:
        outs = tuple(w.var(n) for n in root.shape)
        body = ("map", outs, w.expr(root, outs))
    descs = tuple(_desc(x) for x in w.slots)
    kind = "dense"
    if any(d[2] is not None for d in descs):
        kind = _sparse_kind(root, w.slots)
    key = (body, tuple(w.extents), descs, root.dtype.str, int(nprocs), kind)
    return key, w.slots


def _desc(x: Node) -> tuple:
    return (tuple(x.shape), x.dtype.str, x.sparse if isinstance(x, Value) else None)


def _sparse_kind(root: Node, slots: list[Node]) -> str:
    """The one sparse group, checked when its node was made: a sparse matrix times a
    vector, its operands values (nothing is fused into it)."""
    if (
        isinstance(root, Contract)
        and is_spmv(root.ins, root.out, root.operands)
        and len(slots) == 2
    ):
        return "spmv"
    raise InternalError(f"a sparse group that is not a sparse matrix times a vector: {root!r}")


def sums_cover(key: tuple) -> bool:
    """Every term of the expanded statement of ``key`` uses every summed index."""
    body = key[0]
    if body[0] != "contract" or not body[2]:
        return True
    vs = _vars(key[1])
    slots = _slot_tensors(key, vs, Machine(1))
    expr = _product(body[3], slots, vs)
    summed = {vs[v] for v in body[2]}
    for term in expand(expr):
        used = term.used()
        if not summed <= used:
            return False
    return True


#: terms past which a group is cut (its operands computed first): a product of sums
#: expands into the product of their term counts, and each term is a leaf of its own
MAX_TERMS = 32


def term_count(key: tuple) -> int:
    """Terms of the expanded statement of ``key`` (without expanding it)."""

    def count(e: tuple) -> int:
        tag = e[0]
        if tag in ("slot", "const"):
            return 1
        if tag in ("add", "sub"):
            return count(e[1]) + count(e[2])
        if tag == "mul":
            return count(e[1]) * count(e[2])
        return count(e[1])

    body = key[0]
    if body[0] == "map":
        return count(body[2])
    n = 1
    for f in body[3]:
        n *= count(f)
    return n


# -- building the kernel from a key -----------------------------------------------------------


def _vars(extents: tuple[int, ...]) -> list[IndexVar]:
    return [IndexVar(f"v{n}") for n in range(len(extents))]


def _uses(e: tuple, out: dict[int, list[tuple[int, ...]]]) -> None:
    if e[0] == "slot":
        out.setdefault(e[1], []).append(e[2])
    elif e[0] != "const":
        for sub in e[1:]:
            _uses(sub, out)


def _default_owner(key: tuple) -> int | None:
    """The owner index when nothing is searched: the result's first index (its first
    summed index for a 0-d result); blocks along it are where every held value lies."""
    body = key[0]
    outs, summed = body[1], body[2] if body[0] == "contract" else ()
    return outs[0] if outs else (summed[0] if summed else None)


#: owner indices chosen, by group key (the search compiles one small plan per candidate)
_OWNERS: dict[tuple, int | None] = {}
_OWNERS_KEPT = 1024


def _owner_var(key: tuple) -> int | None:
    """The index a group is owner-computes by: for a contraction on more than one
    processor, the candidate of :func:`owner_costs` the cost model says is cheapest (the
    default, :func:`_default_owner`, unless another is strictly cheaper); for an
    element-wise group the default (every operand then lies where it is read)."""
    got = _OWNERS.get(key, -1)
    if got != -1:
        return got
    best = _default_owner(key)
    if key[0][0] == "contract" and key[4] > 1:
        costs = owner_costs(key)
        for v, c in costs.items():
            if best not in costs or c.seconds < costs[best].seconds * (1 - 1e-9):
                best = v
    if len(_OWNERS) >= _OWNERS_KEPT:
        _OWNERS.clear()
    _OWNERS[key] = best
    return best


def owner_costs(key: tuple, params: MachineParams | None = None) -> dict[int, Cost]:
    """The modelled cost of running contraction ``key`` owner-computes by each of its
    indices (outputs first, then summed; those with at least one index per processor),
    every operand and the result laid out where a held value lies (blocks of its first
    axis, 0-d replicated).

    Each candidate is compiled with those layouts and costed from its plan's exact stats
    (:func:`~distal.costmodel.seconds.stats_cost`), so what its plan fetches is what the
    session's redistribution would move to the layout the chosen kernel reads, and an
    index whose operand is large pays for moving it while a summed one pays for its
    partial sums: ``x @ A``, an MTTKRP over a tensor's second mode and a Gram matrix
    ``F.T @ F`` are computed by their summed index, leaving the large operand in place.
    """
    body, extents, descs, dtype, nprocs, _ = key
    outs, summed = body[1], body[2]
    vs = _vars(extents)
    machine = Machine(nprocs)
    slots = [
        Tensor(
            slot_name(k),
            shape,
            dist=held_dist(len(shape)),
            machine=machine,
            dtype=np.dtype(dt),
            format="dense" if sparse is None else sparse.split("/")[0],
        )
        for k, (shape, dt, sparse) in enumerate(descs)
    ]
    result = Tensor(
        OUT,
        tuple(extents[v] for v in outs),
        dist=held_dist(len(outs)),
        machine=machine,
        dtype=np.dtype(dtype),
    )
    result[tuple(vs[v] for v in outs)] = _product(body[3], slots, vs)
    params = params if params is not None else load_params()
    flops = flops_per_iteration(concretize(result.assignment))
    itemsize = max(np.dtype(d[1]).itemsize for d in descs)
    po, pi = index_vars("po pi")
    costs: dict[int, Cost] = {}
    for v in (*outs, *summed):
        if extents[v] < nprocs:
            continue
        s = default_schedule(result).distribute([vs[v]], [po], [pi], machine)
        costs[v] = stats_cost(compile(s).stats(), flops, params, itemsize)
    return costs


def _dist(ndim: int, accesses: list[tuple[int, ...]], owner: int | None) -> str:
    """Blocks along the axis the owner index runs over in every access, else replicated."""
    names = _LETTERS[:ndim]
    axes = {acc.index(owner) if owner in acc else None for acc in accesses}
    if owner is None or len(axes) != 1 or None in axes:
        return f"{names} -> *"
    (axis,) = axes
    return f"{names} -> {names[axis]}"


def _slot_tensors(key: tuple, vs: list[IndexVar], machine: Machine) -> list[Tensor]:
    body, _, descs = key[0], key[1], key[2]
    uses: dict[int, list[tuple[int, ...]]] = {}
    for e in body[3] if body[0] == "contract" else (body[2],):
        _uses(e, uses)
    owner = _owner_var(key)
    out = []
    for k, (shape, dtype, sparse) in enumerate(descs):
        dist = _dist(len(shape), uses.get(k, []), owner)
        fmt = "dense" if sparse is None else sparse.split("/")[0]
        out.append(
            Tensor(
                slot_name(k), shape, dist=dist, machine=machine, dtype=np.dtype(dtype), format=fmt
            )
        )
    return out


def _expr(e: tuple, slots: list[Tensor], vs: list[IndexVar]) -> Expr:
    tag = e[0]
    if tag == "slot":
        return slots[e[1]][tuple(vs[v] for v in e[2])]
    if tag == "const":
        return Literal(e[1])
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
    raise InternalError(f"unknown operation {tag!r} in a group key")


def _product(factors: tuple, slots: list[Tensor], vs: list[IndexVar]) -> Expr:
    out = _expr(factors[0], slots, vs)
    for f in factors[1:]:
        out = out * _expr(f, slots, vs)
    return out


def build(key: tuple) -> Kernel:
    """The kernel of a group key (see the module docstring for its placement)."""
    body, extents, _, dtype, nprocs, kind = key
    machine = Machine(nprocs)
    if kind == "spmv":
        (_, mdt, sparse), (_, vdt, _) = key[2]
        fmt, split = sparse.split("/")
        dtypes = (np.dtype(mdt), np.dtype(vdt), np.dtype(dtype))
        n, m = key[2][0][0]
        return spmv_kernel(
            OUT, slot_name(0), slot_name(1), n, m, machine, split, dtypes=dtypes, fmt=fmt
        )
    vs = _vars(extents)
    slots = _slot_tensors(key, vs, machine)
    outs = body[1]
    owner = _owner_var(key)
    out_dist = f"{_LETTERS[: len(outs)]} -> {_LETTERS[0]}" if outs else "-> *"
    result = Tensor(
        OUT, tuple(extents[v] for v in outs), dist=out_dist, machine=machine, dtype=np.dtype(dtype)
    )
    rhs = _product(body[3], slots, vs) if body[0] == "contract" else _expr(body[2], slots, vs)
    if not slots:
        raise InternalError("a group with no operand array reached the lowering")
    result[tuple(vs[v] for v in outs)] = rhs
    s = default_schedule(result)
    if owner is not None:
        (po, pi) = index_vars("po pi")
        s = s.distribute([vs[owner]], [po], [pi], machine)
    return compile(s)


# -- maps: element-wise groups outside index notation ---------------------------------------


def map_signature(root: Node, is_leaf: Callable[[Node], bool]) -> tuple[tuple, list[Node]]:
    """A map group as an expression over numbered slots (its leaves), for :func:`evaluate`."""
    w = _Walk(is_leaf)
    return w.map_expr(root, top=True), w.slots


def evaluate(expr: tuple, arrays: list[Any]) -> Any:
    """A map's expression on numpy arrays (each processor's blocks, or whole values)."""
    return evaluator(expr)(arrays)


#: each map expression's function, made once: a loop evaluates the same few every iteration
_EVALUATORS: dict[tuple, Callable[[list[Any]], Any]] = {}
_EVALUATORS_MAX = 1024


def evaluator(expr: tuple) -> Callable[[list[Any]], Any]:
    """A function computing ``expr`` from the slot arrays: the numpy calls nested as the
    expression nests, made once per expression (no walk of it per call): one generated
    function (a call per numpy call, no more), or closures for one nested too deep to
    compile."""
    fn = _EVALUATORS.get(expr)
    if fn is None:
        fn = _generated(expr) or _closure(expr)
        if len(_EVALUATORS) < _EVALUATORS_MAX:
            _EVALUATORS[expr] = fn
    return fn


def map_function(expr: tuple) -> Pass:
    """A map's pass: :func:`evaluator` of ``expr``, as data (a
    :class:`~distal.kernels.passes.Pass`: what a map's blocks are computed by, on any
    runtime; on Dask it travels as ``expr``, and each worker makes its function once)."""
    return Pass("map", expr)


#: nesting past which an expression's evaluator is closures (Python's parser has a limit)
_GENERATED_DEPTH = 48


def _generated(expr: tuple) -> Callable[[list[Any]], Any] | None:
    """``expr`` as one function ``lambda a: f0(f1(a[0], c0), a[1])``: its text holds only
    slot numbers and the names of ``namespace``'s entries (the numpy functions and the
    constants, bound as objects, never spelled), so nothing of the program is parsed.
    None when it nests deeper than :data:`_GENERATED_DEPTH`."""
    namespace: dict[str, Any] = {}

    def text(e: tuple, depth: int) -> str | None:
        tag = e[0]
        if tag == "slot":
            return f"a[{int(e[1])}]"
        name = f"_{len(namespace)}"
        if tag == "const":
            namespace[name] = e[1]
            return name
        if depth > _GENERATED_DEPTH:
            return None
        namespace[name] = numpy_op(tag)
        subs = [text(x, depth + 1) for x in e[1:]]
        if any(t is None for t in subs):
            return None
        return f"{name}({', '.join(subs)})"  # type: ignore[arg-type]

    body = text(expr, 0)
    if body is None:
        return None
    return eval(f"lambda a: {body}", namespace)


def _closure(expr: tuple) -> Callable[[list[Any]], Any]:
    tag = expr[0]
    if tag == "slot":
        k = expr[1]
        return lambda arrays: arrays[k]
    if tag == "const":
        v = expr[1]
        return lambda arrays: v
    f = numpy_op(tag)
    subs = [_closure(x) for x in expr[1:]]
    if len(subs) == 1:
        (a,) = subs
        return lambda arrays: f(a(arrays))
    if len(subs) == 2:
        a, b = subs
        return lambda arrays: f(a(arrays), b(arrays))
    return lambda arrays: f(*(g(arrays) for g in subs))


def held_dist(ndim: int) -> str:
    """A held value's own layout: blocks of its first axis (0-d: replicated)."""
    names = _LETTERS[:ndim]
    return f"{names} -> {names[0]}" if ndim else "-> *"


def map_dist(result: tuple[int, ...], operand: tuple[int, ...]) -> str:
    """How a map reads an operand: in the result's blocks when its first axis is the
    result's (so each processor's block of it lines up with its block of the result),
    otherwise replicated (a broadcast operand)."""
    if result and len(operand) == len(result) and operand[0] == result[0]:
        return held_dist(len(operand))
    return f"{_LETTERS[: len(operand)]} -> *"


def spmv_kernel(
    out: str,
    mat: str,
    vec: str,
    n: int,
    m: int,
    machine: Machine,
    split: str,
    *,
    dtypes: tuple[Any, Any, Any] = (np.float64, np.float64, np.float64),
    fmt: str = "csr",
) -> Kernel:
    """``out[i] = mat[i, j] * vec[j]`` with ``mat`` sparse, cut by rows (``"rows"``) or by
    stored entries (``"nonzeros"``); the vectors in blocks (each processor gathers exactly
    the entries of ``vec`` its columns use). Kernels are kept by their arguments (the same
    object for the same arguments: its binding to a pattern is made once)."""
    key = (out, mat, vec, n, m, machine.levels, split, tuple(np.dtype(d).str for d in dtypes), fmt)
    kernel = _SPMV_KERNELS.get(key)
    if kernel is None:
        if len(_SPMV_KERNELS) >= _SPMV_KEPT:
            _SPMV_KERNELS.clear()
        kernel = _SPMV_KERNELS[key] = _spmv_kernel(out, mat, vec, n, m, machine, split, dtypes, fmt)
    return kernel


#: SpMV kernels by their arguments (each holds its binding to the last pattern it ran on)
_SPMV_KERNELS: dict[tuple, Kernel] = {}
_SPMV_KEPT = 64


def _spmv_kernel(
    out: str,
    mat: str,
    vec: str,
    n: int,
    m: int,
    machine: Machine,
    split: str,
    dtypes: tuple[Any, Any, Any],
    fmt: str,
) -> Kernel:
    i, j, io, ii, f, fp, fo, fi = index_vars("i j io ii f fp fo fi")
    dist = "xy -> x" if split == "rows" else "xy -> (xy)"
    A = Tensor(mat, (n, m), format=fmt, dist=dist, machine=machine, dtype=dtypes[0])
    x = Tensor(vec, (m,), dist="j -> j", machine=machine, dtype=dtypes[1])
    y = Tensor(out, (n,), dist="i -> i", machine=machine, dtype=dtypes[2])
    y[i] = A[i, j] * x[j]
    s = default_schedule(y)
    if split == "rows":
        s = s.distribute([i], [io], [ii], machine).communicate([y, A, x], io)
    else:
        s = s.fuse(i, j, f).pos(f, fp, A).distribute([fp], [fo], [fi], machine)
        s = s.communicate([y, A, x], fo)
    return compile(s)


#: the cuts of a sparse matrix ``A @ x`` chooses between (see :func:`split_costs`)
SPLITS = ("rows", "nonzeros")


def split_costs(
    matrix: Any, nprocs: int, fmt: str = "csr", params: MachineParams | None = None
) -> dict[str, Cost]:
    """The modelled cost of ``matrix @ x`` (``matrix`` a 2-D ``dl.SparseArray``) cut by
    rows and by stored entries on a line of ``nprocs`` processors: each cut's SpMV plan
    bound to the matrix's pattern, costed from the bound plan's exact stats with each
    stored entry streaming its value and column index from memory (an SpMV is
    memory-bound: at the flop rate alone a cut that gives one processor most of the
    entries would look free). Rows win on a matrix whose rows are even (no partial sums
    of split rows); stored entries where a few rows hold most of them (R-MAT, Zipf)."""
    n, m = matrix.shape
    # (the cut is costed for a float64 vector; a complex matrix's product is complex)
    dtypes = (matrix.dtype, np.dtype(np.float64), np.result_type(matrix.dtype, np.float64))
    index = max((c.dtype.itemsize for c in matrix.crd if c is not None), default=8)
    params = params if params is not None else load_params()
    costs = {}
    for split in SPLITS:
        kernel = spmv_kernel(
            OUT, slot_name(0), slot_name(1), n, m, Machine(nprocs), split, dtypes=dtypes, fmt=fmt
        )
        stats = kernel.bind({slot_name(0): matrix}).stats()
        costs[split] = stats_cost(stats, 2, params, 8, bytes_per_iter=matrix.dtype.itemsize + index)
    return costs


#: splits chosen, by pattern fingerprint, processors and format (a matrix solved again
#: in a new session is not bound twice more)
_SPLITS_CHOSEN: dict[tuple, str] = {}
_SPLITS_KEPT = 256


def choose_split(matrix: Any, nprocs: int, fmt: str = "csr") -> str:
    """The cut of :func:`split_costs` with the least modelled time (stored entries on a
    tie, and on one processor, where there is nothing to cut). The chosen cut's plan is
    the one the product then runs (:func:`spmv_kernel` keeps its kernels, and a kernel its
    binding), so the search costs one binding more than running does."""
    if nprocs <= 1:
        return "nonzeros"
    key = (matrix.pattern_fingerprint(), matrix.dtype.str, int(nprocs), fmt)
    got = _SPLITS_CHOSEN.get(key)
    if got is None:
        costs = split_costs(matrix, nprocs, fmt)
        cheaper = costs["rows"].seconds < costs["nonzeros"].seconds * (1 - 1e-9)
        got = "rows" if cheaper else "nonzeros"
        if len(_SPLITS_CHOSEN) >= _SPLITS_KEPT:
            _SPLITS_CHOSEN.clear()
        _SPLITS_CHOSEN[key] = got
    return got


# -- fused sets: several element-wise groups and the reductions they feed, one pass -------------

#: a fused set's step: ``("map", (expression,), slot)`` (an element-wise member; ``slot`` the
#: slot later steps read it from, or None) or ``("sum", (expression, ...), None)`` (a full
#: reduction member: the sum of the product of its one or two operand expressions)
Step = tuple[str, tuple[tuple, ...], int | None]


def fused_signature(
    members: list[Node], is_leaf: Callable[[Node], bool]
) -> tuple[tuple[Step, ...], list[Node]]:
    """A fused set (see :meth:`distal.arrays.program.Program._fusible`) as steps over one
    numbering of slots: the values and 0-d operands it reads, and every member a later
    member reads (``is_leaf`` is true for members, so each is computed once and read back).

    Where the set has an operation the generated loop does not spell (numpy computes it),
    an inner node that two or more places read (Black-Scholes' ``d1`` in the call and the
    put) is a ``("temp", ...)`` step of its own, computed once into a slot the later steps
    read, as numpy's program computes it once: not once per reader."""
    shared = _shared_nodes(members, is_leaf)
    leaf = is_leaf if not shared else (lambda n: is_leaf(n) or id(n) in shared)
    w = _Walk(leaf)
    steps: list[Step] = []
    made: list[Node] = []  # the node of each step (temporaries and members, in creation
    # order: each after what it reads, the members in their own order)
    temps = {id(t) for t in shared.values()}
    for n in sorted([*shared.values(), *members], key=lambda n: n.seq):
        if id(n) in temps:
            steps.append(("temp", (w.map_expr(n, top=True),), None))
        elif isinstance(n, Contract):
            steps.append(("sum", tuple(w.map_expr(x) for x in n.operands), None))
        else:
            steps.append(("map", (w.map_expr(n, top=True),), None))
        made.append(n)
    out = []
    for n, (kind, exprs, _) in zip(made, steps, strict=True):
        slot = w.slot(n) if kind == "temp" else w.slot_of.get(id(n))
        out.append((kind, exprs, slot))
    return tuple(out), w.slots


def _shared_nodes(members: list[Node], is_leaf: Callable[[Node], bool]) -> dict[int, Node]:
    """The inner element-wise nodes of a fused set read from two or more places, where the
    set has an operation the generated loop does not spell (else none: the loop computes
    at each element, and recomputing costs no memory traffic)."""
    uses: dict[int, int] = {}
    nodes: dict[int, Node] = {}
    spelled = True
    stack: list[tuple[Node, bool]] = []
    for m in members:
        if isinstance(m, Contract):
            stack.extend((x, False) for x in m.operands)
        else:
            stack.append((m, True))
    seen: set[int] = set()
    while stack:
        n, top = stack.pop()
        if isinstance(n, Const) or not isinstance(n, Map) or (not top and is_leaf(n)):
            continue
        if not top:
            uses[id(n)] = uses.get(id(n), 0) + 1
            nodes[id(n)] = n
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op not in fused_kernels.SPELLED:
            spelled = False
        stack.extend((x, False) for x in n.operands)
    if spelled:
        return {}
    return {k: nodes[k] for k, c in uses.items() if c > 1}


def fused_function(steps: tuple[Step, ...]) -> Pass:
    """A fused set's pass: :func:`fused_evaluator` of ``steps``, as data (on Dask it travels
    as ``steps``; each worker makes it, and compiles its loops, once)."""
    return Pass("fused", steps)


def fused_evaluator(steps: tuple[Step, ...]) -> Callable[..., tuple[list, list]]:
    """The function a fused set runs on each process: ``fn(slots, cuts, shape, each)`` takes
    the slot arrays (members' slots None), the cuts ``(lo, hi)`` of the first axis whose
    partial sums the reductions report (the processors' blocks within these arrays), the
    arrays' shape, and optionally ``each(f, cuts)`` mapping ``f`` over the cuts (the local
    runtime: its processors' threads); it returns the element-wise members' arrays and, per
    reduction, its partial sum over each cut.

    Element-wise members are computed as numpy computes them (as a map): by numpy, or, for
    large float64 blocks, by one generated loop over each cut that computes them all at
    each element (:mod:`distal.kernels.fused`, the same values bit for bit). A reduction of
    two operands is :func:`distal.kernels.fused.dot` of each cut (a compiled loop for large
    float64 cuts, numpy's ``p @ q`` otherwise), of one numpy's pairwise sum
    (:func:`distal.kernels.sums.total`: float32 accumulated in float64). Where the generated
    loop runs and every cut is large enough for dot's compiled loop, the loop adds the
    two-operand reductions up itself, in dot's order (the same bits, without reading the
    members back)."""
    fns = tuple((kind, tuple(evaluator(e) for e in exprs), slot) for kind, exprs, slot in steps)
    maps = tuple(exprs[0] for kind, exprs, _ in steps if kind == "map")
    member_slots = tuple(slot for kind, _, slot in steps if kind == "map")
    sums = [exprs for kind, exprs, _ in steps if kind == "sum"]
    temps = any(kind == "temp" for kind, _, _ in steps)
    nsums = len(sums)
    #: the reductions of two operands (their places among the reductions, their operands)
    two_at = tuple(j for j, exprs in enumerate(sums) if len(exprs) == 2)
    two = tuple((sums[j][0], sums[j][1]) for j in two_at)
    #: by (slots that are scalars, whether the loop adds the reductions): the loop, and the
    #: reductions' places it adds (empty where it could not spell them)
    passes: dict[tuple[tuple[bool, ...], bool], tuple[Any, tuple[int, ...]]] = {}
    made = Recycler(2 * len(maps))  # this call's outputs and the last call's

    def partials(
        a: list[Any], shape: tuple[int, ...], lo: int, hi: int, done: Any = ()
    ) -> list[Any]:
        """The reductions' partial sums over rows ``lo`` to ``hi`` (every slot of one or more
        dimensions has the set's shape: it is cut to those rows); the loop's ``done`` ones
        are in its result, and None here."""
        if not nsums:
            return []
        cut = [x[lo:hi] if x is not None and x.ndim else x for x in a]
        rows = (hi - lo, *shape[1:])
        out: list[Any] = []
        for kind, fs, _ in fns:
            if kind != "sum":
                continue
            if len(out) in done:
                out.append(None)
                continue
            xs = [np.broadcast_to(np.asarray(f(cut)), rows) for f in fs]
            if len(xs) == 1:
                out.append(pairwise_total(xs[0]))
            else:
                out.append(fused_kernels.dot(xs[0].reshape(-1), xs[1].reshape(-1)))
        return out

    def run(
        slots: list[Any],
        cuts: list[tuple[int, int]],
        shape: tuple[int, ...],
        each: Callable[..., list] | None = None,
        donate: Sequence[tuple[int, int]] = (),
    ) -> tuple:
        a = list(slots)
        size = int(np.prod(shape, dtype=np.int64))
        if each is None or size < fused_kernels.MIN_SIZE:
            each = _serial  # handing small cuts to threads costs more than it saves
        loop, done = None, ()
        row = size // shape[0] if shape[0] else 0
        given: dict[int, int] = {}
        if maps and not temps and fused_kernels.fits(a, size):
            scalars = tuple(x is None or x.ndim == 0 for x in a)  # None: a member, read as itself
            # the loop adds the reductions where each cut's dot would be the compiled one
            adds = bool(two) and all((hi - lo) * row >= fused_kernels.MIN_SIZE for lo, hi in cuts)
            got = passes.get((scalars, adds))
            if got is None:
                f = (
                    fused_kernels.elementwise_pass(maps, member_slots, scalars, two)
                    if adds
                    else None
                )
                # (without them where the loop does not spell a reduction)
                got = passes[(scalars, adds)] = (
                    (f, two_at)
                    if f is not None
                    else (fused_kernels.elementwise_pass(maps, member_slots, scalars), ())
                )
            loop, done = got
            # donated blocks only where the loop does every reduction (it reads each element
            # before it stores there); their loop stores through the donated slots
            given = _donated(donate, a, shape) if loop is not None and len(done) == nsums else {}
            if given:
                alias = tuple(given.get(j) for j in range(len(maps)))
                dots = two if done else ()
                loop = (
                    fused_kernels.elementwise_pass(maps, member_slots, scalars, dots, alias) or loop
                )
        if loop is not None:
            # outputs of the call before last that nothing holds any more are written again:
            # a fresh block of this size costs a page fault per page on its first write
            elems = [a[given[j]] if j in given else _made(made, shape) for j in range(len(maps))]
            flat_out = [e.reshape(-1) for e in elems]
            flat_in = [0.0 if x is None else (x[()] if x.ndim == 0 else x.reshape(-1)) for x in a]
            for e, slot in zip(elems, member_slots, strict=True):
                if slot is not None:
                    a[slot] = e

            def part(cut: tuple[int, int]) -> list[Any]:
                lo, hi = cut
                added = loop(flat_out, flat_in, lo * row, hi * row)
                out = partials(a, shape, lo, hi, done)
                for j, v in zip(done, added, strict=True):
                    out[j] = np.float64(v)
                return out

            per_cut = each(part if each is _serial else _one_blas_thread(part), cuts)
        else:
            elems = _numpy_members(fns, a, shape, cuts, each)

            def numpy_part(cut: tuple[int, int]) -> list[Any]:
                return partials(a, shape, *cut)

            # small cuts in this thread (numpy's sums are fast next to a hand-over to another
            # thread); large ones side by side, as the loop's (a reduction-only epilogue,
            # CG's p @ q: one compiled dot per processor's block, each on its own core)
            if each is _serial or not nsums:
                per_cut = [numpy_part(c) for c in cuts]
            else:
                per_cut = each(_one_blas_thread(numpy_part), cuts)
        return elems, [[pc[j] for pc in per_cut] for j in range(nsums)]

    return run


def _numpy_members(
    fns: tuple, a: list[Any], shape: tuple[int, ...], cuts: list[tuple[int, int]], each: Any
) -> list[Any]:
    """The element-wise members (and temporaries) of a fused set computed by numpy, in
    order, into ``a``'s member slots; the members returned. Large sets with several cuts
    run each cut in its processor's thread (numpy lets go of the GIL over large arrays):
    each cut's members are numpy's values of the same operations on its rows."""
    size = int(np.prod(shape, dtype=np.int64))
    if each is _serial or len(cuts) < 2 or size < fused_kernels.MIN_SIZE:
        elems = []
        with np.errstate(all="ignore"):
            for kind, fs, slot in fns:
                if kind == "sum":
                    continue
                v = np.asarray(fs[0](a))
                if v.shape != shape:
                    v = np.broadcast_to(v, shape).copy()
                if kind == "map":
                    elems.append(v)
                if slot is not None:
                    a[slot] = v
        return elems

    def unit(cut: tuple[int, int]) -> list[Any]:
        lo, hi = cut
        rows = (hi - lo, *shape[1:])
        b = [x[lo:hi] if x is not None and x.ndim else x for x in a]
        got = []
        with np.errstate(all="ignore"):
            for kind, fs, slot in fns:
                if kind == "sum":
                    continue
                v = np.asarray(fs[0](b))
                if v.shape != rows:
                    v = np.broadcast_to(v, rows)
                if slot is not None:
                    b[slot] = v
                if kind == "map" or (kind == "temp" and sums):
                    got.append(v)
        return got

    sums = any(kind == "sum" for kind, _, _ in fns)
    parts = each(_one_blas_thread(unit), cuts)
    made = [np.concatenate([p[j] for p in parts]) for j in range(len(parts[0]))]
    elems = []
    j = 0
    for kind, _, slot in fns:
        if kind == "map" or (kind == "temp" and sums):
            if slot is not None:
                a[slot] = made[j]
            if kind == "map":
                elems.append(made[j])
            j += 1
    return elems


#: the blocks fused passes have made (by identity; an entry goes with its array): only
#: these may be donated, never a block a caller gave or a kernel's result
_MADE: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def _made(made: Recycler, shape: tuple[int, ...]) -> np.ndarray:
    x = made.take(shape, np.float64)
    _MADE[id(x)] = x
    return x


def made_by_a_pass(x: Any) -> bool:
    """Whether ``x`` is a block a fused pass wrote (and so may be donated to the next)."""
    return isinstance(x, np.ndarray) and _MADE.get(id(x)) is x


def _donated(
    donate: Sequence[tuple[int, int]], slots: list[Any], shape: tuple[int, ...]
) -> dict[int, int]:
    """Member ``j``'s output slot ``k`` for each ``(j, k)`` of ``donate`` whose slot holds a
    whole block of ``shape`` (the loop's slots are C-contiguous float64 already,
    :func:`~distal.kernels.fused.fits`): the caller's word that nothing reads that
    value after this pass (:meth:`distal.session.Session.fused_blocks`), so the pass
    writes the member over it in place (one array fewer through the cache: CG's
    ``x = x + alpha * p``). Only where the generated loop computes every member and
    reduction (it reads each element before it stores there); each block given once."""
    out: dict[int, int] = {}
    taken: set[int] = set()
    for j, k in donate:
        x = slots[k] if 0 <= k < len(slots) else None
        if (
            j in out
            or not isinstance(x, np.ndarray)
            or id(x) in taken
            or x.shape != shape
            or not x.flags.writeable
        ):
            continue
        out[j] = k
        taken.add(id(x))
    return out


def _serial(f: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    return [f(x) for x in items]


def _one_blas_thread(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``f`` with its BLAS calls on one thread (cuts run side by side, one per core)."""

    def g(x: Any) -> Any:
        with blas.limit_here(1):
            return f(x)

    return g


register_pass("map", evaluator)
register_pass("fused", fused_evaluator)
