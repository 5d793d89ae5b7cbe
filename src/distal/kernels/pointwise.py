"""The leaf of an element-wise statement with shifted accesses or restricted terms: a
stencil, a slice read or a slice assignment of the arrays front.

Such a statement (every variable off the left side has extent 1, so nothing is summed)
is computed point by point from its right side *as written*, not from its expansion into
terms: ``0.25 * (u(i-1,j) + u(i+1,j) + u(i,j-1) + u(i,j+1))`` adds the four neighbours
left to right and multiplies once, numpy's order and numpy's bits, where the expanded
``0.25*u(i-1,j) + 0.25*u(i+1,j) + ...`` would round differently (and a difference of
nearly equal neighbours, ``(u(i+1) - u(i)) * c``, would lose its digits).

The right side travels as a *tree* of nested tuples (``TermKernel.tree``, built by
:func:`tree_of`): ``("access", tensor, ((position, scale, offset), ...))``,
``("const", value, repr, dtype)``, ``("add", a, b)``, ``("mul", a, b)``, ``("neg", a)`` and
``("restrict", ((position, lo, hi), ...), a)`` (``a`` inside that box of the statement's
variables, zero outside). A leaf box is cut where restrictions begin and end, so that on
each piece every restriction holds everywhere or nowhere; each piece's tree is pruned to
what holds there and evaluated over the piece:

* by one generated loop nest compiled by numba (float64 throughout, a piece of
  :data:`MIN_SIZE` points or more): it reads each operand element where it lies in its
  block or fetch buffer (``u[i - 1 - origin, j - origin]``: the halo is read where it was
  fetched, no shifted copy is made) and stores the point, split over the cores by its
  outermost variable (``nogil``); the operations are IEEE's in the tree's order, without
  ``fastmath``, so the bits are numpy's;
* otherwise by numpy on views of the operands shifted and transposed to the output's
  axes, in the same order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from distal.lang.concrete import Statement
from distal.lang.nodes import Access, Add, Expr, Literal, Mul, Neg, Restrict, Sum

#: points of a piece from which the compiled loop runs it (below, numpy's calls cost less
#: than compiling a loop nest for a handful of elements)
MIN_SIZE = 1 << 16

Tree = tuple
Box = tuple[tuple[int, int], ...]

_ZERO: Tree = ("zero",)


def tree_of(st: Statement) -> Tree:
    """The right side of ``st`` as a tree over statement-variable positions, where ``st``
    is computed point by point (see the module docstring): dense, with a shifted access or
    a restricted term, every variable off the left side of extent 1, no variable twice in
    one access. ``()`` otherwise (its terms are run one by one)."""
    ins = [f for t in st.terms for f in t.factors]
    if not any(f.shifted for f in ins) and not any(t.domain for t in st.terms):
        return ()
    lhs = set(st.lhs_vars)
    if any(st.extent[v] != 1 for v in st.variables if v not in lhs):
        return ()
    tensors = [st.output, *(f.tensor for f in ins)]
    if any(not t.format.is_dense for t in tensors):
        return ()
    if any(len(set(f.indices)) != len(f.indices) for f in ins):
        return ()
    pos = {v: n for n, v in enumerate(st.variables)}

    def walk(e: Expr) -> Tree:
        if isinstance(e, Access):
            return ("access", e.tensor.name, tuple((pos[v], a, c) for v, a, c in e.affine()))
        if isinstance(e, Literal):  # (repr and dtype: 2 == 2.0 == True and 0.0 == -0.0)
            return ("const", e.value, repr(e.value), np.asarray(e.value).dtype.str)
        if isinstance(e, Add):
            return ("add", walk(e.a), walk(e.b))
        if isinstance(e, Mul):
            return ("mul", walk(e.a), walk(e.b))
        if isinstance(e, Neg):
            return ("neg", walk(e.a))
        if isinstance(e, Sum):  # over a variable of extent 1: its one value
            return walk(e.body)
        if isinstance(e, Restrict):
            box = tuple(
                (pos[v], max(lo, 0), min(hi, st.extent[v])) for v, lo, hi in e.box if v in pos
            )
            return ("restrict", box, walk(e.a))
        raise TypeError(f"unknown node {e!r}")

    return walk(st.concrete_rhs)


# -- cutting a box where restrictions begin and end, and pruning ------------------------------


def _cuts(tree: Tree, out: dict[int, set[int]]) -> None:
    tag = tree[0]
    if tag == "restrict":
        for p, lo, hi in tree[1]:
            out.setdefault(p, set()).update((lo, hi))
        _cuts(tree[2], out)
    elif tag in ("add", "mul", "neg"):
        for sub in tree[1:]:
            _cuts(sub, out)


def pieces(tree: Tree, box: Box) -> list[tuple[Box, Tree]]:
    """``box`` cut where the tree's restrictions begin and end, each piece with the tree
    pruned to it (``("zero",)`` where nothing is computed there)."""
    cuts: dict[int, set[int]] = {}
    _cuts(tree, cuts)
    axes: list[list[tuple[int, int]]] = []
    for p, (lo, hi) in enumerate(box):
        at = sorted(c for c in cuts.get(p, ()) if lo < c < hi)
        edges = [lo, *at, hi]
        axes.append([(edges[k], edges[k + 1]) for k in range(len(edges) - 1)])
    out: list[tuple[Box, Tree]] = []

    def product(k: int, acc: list[tuple[int, int]]) -> None:
        if k == len(axes):
            b = tuple(acc)
            if all(hi > lo for lo, hi in b):
                out.append((b, prune(tree, b)))
            return
        for r in axes[k]:
            acc.append(r)
            product(k + 1, acc)
            acc.pop()

    product(0, [])
    return out


def prune(tree: Tree, box: Box) -> Tree:
    """``tree`` on ``box``, which every restriction covers whole or misses: restrictions
    resolved, zeros folded away (``a + 0`` is ``a``, ``a * 0`` is zero)."""
    tag = tree[0]
    if tag == "restrict":
        inside = all(lo <= box[p][0] and box[p][1] <= hi for p, lo, hi in tree[1])
        return prune(tree[2], box) if inside else _ZERO
    if tag == "add":
        a, b = prune(tree[1], box), prune(tree[2], box)
        return b if a == _ZERO else a if b == _ZERO else ("add", a, b)
    if tag == "mul":
        a, b = prune(tree[1], box), prune(tree[2], box)
        return _ZERO if _ZERO in (a, b) else ("mul", a, b)
    if tag == "neg":
        a = prune(tree[1], box)
        return _ZERO if a == _ZERO else ("neg", a)
    return tree


def _accesses(tree: Tree, out: list[Tree]) -> None:
    if tree[0] == "access":
        if tree not in out:
            out.append(tree)
    elif tree[0] in ("add", "mul", "neg"):
        for sub in tree[1:]:
            _accesses(sub, out)


# -- numpy ---------------------------------------------------------------------------------


def _view(acc: Tree, box: Box, lhs: tuple[int, ...], arr: np.ndarray, origin: Box) -> np.ndarray:
    """The operand of access ``acc`` over ``box``, as a view with the output's axes
    (``lhs`` positions, in order): shifted and strided along the variables it uses,
    transposed to the output's order, size 1 along those it does not use."""
    index: list[Any] = []
    kept: list[int] = []
    for (p, a, c), (o, _) in zip(acc[2], origin, strict=True):
        lo, hi = box[p]
        if p not in lhs:  # a variable of extent 1: its one value, 0
            index.append(c - o)
            continue
        start, last = a * lo + c - o, a * (hi - 1) + c - o
        stop = last + (1 if a > 0 else -1)
        index.append(slice(start, None if stop < 0 else stop, a))
        kept.append(lhs.index(p))
    v = arr[tuple(index)] if index else arr
    order = sorted(range(len(kept)), key=kept.__getitem__)
    v = v.transpose(order)
    present = {kept[k] for k in order}
    return v[tuple(slice(None) if k in present else None for k in range(len(lhs)))]


_NUMPY: dict[str, Callable[..., Any]] = {"add": np.add, "mul": np.multiply, "neg": np.negative}


def _numpy(tree: Tree, views: dict[Tree, np.ndarray]) -> Any:
    tag = tree[0]
    if tag == "access":
        return views[tree]
    if tag == "const":
        return tree[1]
    return _NUMPY[tag](*(_numpy(sub, views) for sub in tree[1:]))


# -- the compiled loop ---------------------------------------------------------------------

_LOOPS: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def _spell(tree: Tree, names: dict[Tree, str]) -> str | None:
    tag = tree[0]
    if tag == "access":
        return names[tree]
    if tag == "const":
        v = tree[1]
        if isinstance(v, bool) or not isinstance(v, int | float | np.floating | np.integer):
            return None
        if isinstance(v, np.floating) and np.dtype(type(v)) != np.float64:
            return None  # a float32 scalar computes in float32 in numpy
        if isinstance(v, int | np.integer) and abs(int(v)) > 2**53:
            return None
        return f"np.float64({float(v)!r})"
    subs = [_spell(s, names) for s in tree[1:]]
    if any(s is None for s in subs):
        return None
    if tag == "add":
        return f"({subs[0]} + {subs[1]})"
    if tag == "mul":
        return f"({subs[0]} * {subs[1]})"
    return f"(-{subs[0]})"


def _loop(tree: Tree, accs: tuple[Tree, ...], lhs: tuple[int, ...], store: bool) -> Any:
    """The compiled loop nest of ``tree`` (None where numba is missing or the tree has a
    constant it does not spell): ``f(lo, hi, out, out_offsets, *operands, *offsets)`` runs
    the outermost output variable over ``[lo, hi)`` and the others over the piece; every
    index is ``scale * i + offset`` with the offset less the block's origin passed in."""
    key = (tree, accs, lhs, store)
    got = _LOOPS.get(key, False)
    if got is not False:
        return got
    with _LOCK:
        got = _LOOPS.get(key, False)
        if got is False:
            got = _LOOPS[key] = _build(tree, accs, lhs, store)
    return got


def _build(tree: Tree, accs: tuple[Tree, ...], lhs: tuple[int, ...], store: bool) -> Any:
    """The loop nest's source, compiled. The innermost output variable runs from 0 over a
    row: every operand that varies along it is cut to its row first (``b[i - 1, l + c:]``,
    in steps of its scale), the output too, so the inner loop's indices are provably in
    range and non-negative (no wraparound test per access: it vectorizes); an operand that
    does not vary along it is read once per row."""
    try:
        import numba
    except ImportError:
        return None
    nd = len(lhs)
    inner = lhs[-1]
    first = "lo" if nd == 1 else f"l{nd - 1}"  # the innermost variable's first value
    names: dict[Tree, str] = {}
    args: list[str] = []
    rows: list[str] = []
    for n, acc in enumerate(accs):
        idx = []
        along = False
        for d, (p, a, _) in enumerate(acc[2]):
            off = f"c{n}_{d}"
            args.append(off)
            if p == inner:
                idx.append(f"{a} * {first} + {off}::{a}" if a != 1 else f"{first} + {off}:")
                along = True
            elif p in lhs:
                k = lhs.index(p)
                idx.append(f"i{k} + {off}" if a == 1 else f"{a} * i{k} + {off}")
            else:
                idx.append(off)
        read = f"b{n}[{', '.join(idx)}]" if idx else f"b{n}[()]"
        rows.append(f"r{n} = {read}")
        names[acc] = f"r{n}[j]" if along else f"r{n}"
    body = _spell(tree, names)
    if body is None:
        return None
    params = ["lo", "hi"]
    params += [f"l{k}, n{k}" for k in range(1, nd)]
    params += ["out", *(f"o{k}" for k in range(nd))]
    params += [f"b{n}" for n in range(len(accs))] + args
    src = f"def _leaf({', '.join(params)}):\n"
    indent = "    "
    for k in range(nd - 1):
        src += f"{indent}for i{k} in range({'lo, hi' if k == 0 else f'l{k}, n{k}'}):\n"
        indent += "    "
    last = "hi" if nd == 1 else f"n{nd - 1}"
    head = [f"i{k} - o{k}" for k in range(nd - 1)]
    src += f"{indent}orow = out[{', '.join([*head, f'{first} - o{nd - 1}:{last} - o{nd - 1}'])}]\n"
    src += "".join(f"{indent}{line}\n" for line in rows)
    src += f"{indent}for j in range({last} - {first}):\n"
    src += f"{indent}    orow[j] {'=' if store else '+='} {body}\n"
    namespace: dict[str, Any] = {"np": np}
    exec(compile(src, "<distal pointwise leaf>", "exec"), namespace)
    return numba.njit(nogil=True, error_model="numpy", boundscheck=False)(namespace["_leaf"])


# -- running a leaf --------------------------------------------------------------------------

#: the pieces of a (tree, box) pair, kept (a loop's leaves run on the same boxes every time)
_PIECES: dict[tuple[Tree, Box], list[tuple[Box, Tree]]] = {}
_PIECES_KEPT = 4096


def _pieces_of(tree: Tree, box: Box) -> list[tuple[Box, Tree]]:
    key = (tree, box)
    got = _PIECES.get(key)
    if got is None:
        got = pieces(tree, box)
        if len(_PIECES) >= _PIECES_KEPT:
            _PIECES.clear()
        _PIECES[key] = got
    return got


def run(
    tree: Tree,
    lhs: tuple[int, ...],
    box: Box,
    operands: dict[str, tuple[np.ndarray, Box]],
    out: np.ndarray,
    out_origin: Box,
    fresh: bool,
    parallel: Callable[[Callable[[int, int], None], int], None] | None = None,
) -> None:
    """Compute ``tree`` over ``box`` (statement-variable ranges) into ``out`` (holding
    ``out_origin`` of the output; ``lhs``: the positions of the output's variables):
    stored where ``fresh`` (every element of the box's output is written, zeros where no
    restriction holds), added otherwise. ``parallel(fn, n)`` runs ``fn(lo, hi)`` over
    ``range(n)`` in slabs on the cores (a large piece's outermost variable)."""
    for piece, t in _pieces_of(tree, box):
        dst_index = tuple(
            slice(piece[p][0] - o, piece[p][1] - o)
            for p, (o, _) in zip(lhs, out_origin, strict=True)
        )
        dst = out[dst_index] if dst_index else out
        if t == _ZERO:
            if fresh:
                dst[...] = 0
            continue
        accs: list[Tree] = []
        _accesses(t, accs)
        size = 1
        for p in lhs:
            size *= piece[p][1] - piece[p][0]
        if (
            lhs
            and size >= MIN_SIZE
            and _compiled(t, tuple(accs), lhs, piece, operands, out, out_origin, fresh, parallel)
        ):
            continue
        views = {a: _view(a, piece, lhs, *operands[a[1]]) for a in accs}
        value = _numpy(t, views)
        if fresh:
            np.copyto(dst, value, casting="unsafe")
        else:
            np.add(dst, value, out=dst, casting="unsafe")


def _compiled(
    tree: Tree,
    accs: tuple[Tree, ...],
    lhs: tuple[int, ...],
    piece: Box,
    operands: dict[str, tuple[np.ndarray, Box]],
    out: np.ndarray,
    out_origin: Box,
    fresh: bool,
    parallel: Callable[[Callable[[int, int], None], int], None] | None,
) -> bool:
    """Run ``tree`` over ``piece`` by the compiled loop where it applies (float64 operands
    and output); False where it does not (the caller runs numpy)."""
    f64 = np.dtype(np.float64)
    if out.dtype != f64 or any(operands[a[1]][0].dtype != f64 for a in accs):
        return False
    loop = _loop(tree, accs, lhs, fresh)
    if loop is None:
        return False
    arrays = [operands[a[1]][0] for a in accs]
    offsets = []
    for a in accs:
        origin = operands[a[1]][1]
        offsets.extend(c - o for (_, _, c), (o, _) in zip(a[2], origin, strict=True))
    inner = []
    for k in range(1, len(lhs)):
        lo, hi = piece[lhs[k]]
        inner += [lo, hi]
    outs = [o for o, _ in out_origin]
    lo0, hi0 = piece[lhs[0]]

    def slab(a: int, b: int) -> None:
        loop(lo0 + a, lo0 + b, *inner, out, *outs, *arrays, *offsets)

    if parallel is None:
        slab(0, hi0 - lo0)
    else:
        parallel(slab, hi0 - lo0)
    return True
