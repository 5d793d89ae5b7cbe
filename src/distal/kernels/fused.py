"""One pass over a block for the element-wise members of a fused set (numba).

A fused set of the arrays front (:mod:`distal.arrays.program`) computes several
element-wise arrays over one shape; numpy makes a pass over memory per operation and a
temporary per intermediate (``x + alpha * p`` reads ``p``, writes ``alpha * p``, reads both
back, writes the sum). For float64 blocks of :data:`MIN_SIZE` elements or more this module
generates one loop that computes every member at each element and writes only the members,
compiled by numba (``nogil``: the local runtime's processors run it side by side on their
own rows of the same arrays).

The loop evaluates each member's expression as numpy does, one IEEE operation at a time in
the same order with every operand float64 (numba compiles without ``fastmath``, so nothing
is contracted into a fused multiply-add or reassociated): the members come out bit for bit
as numpy's (a NaN's sign bit aside, which IEEE leaves to the hardware's operand order).
Besides the arithmetic operators it spells ``abs`` and ``sqrt``, whose results IEEE
arithmetic fixes exactly. Expressions with any other operation, or any other dtype, are
left to numpy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from distal.kernels import sums

#: elements of a block from which the generated loop is used (below, numpy's calls cost
#: less than the loop's dispatch and the first call's compile is not worth it): the size
#: from which an inner product's compiled loop runs, so the loop's reductions are its bits
MIN_SIZE = sums.MIN_SIZE

#: operations the loop spells (numpy's element-wise float64 arithmetic)
_SPELL = {
    "add": "({} + {})",
    "sub": "({} - {})",
    "mul": "({} * {})",
    "div": "({} / {})",
    "neg": "(-{})",
    "pos": "(+{})",
    # exact in both (the sign bit cleared; IEEE's correctly rounded square root)
    "abs": "abs({})",
    "sqrt": "np.sqrt({})",
}

#: the operations the generated loop spells (anything else leaves a set to numpy)
SPELLED = frozenset(_SPELL)

_F64 = np.dtype(np.float64)
_PASSES: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def _text(e: tuple, ref: Callable[[int], str]) -> str | None:
    tag = e[0]
    if tag == "slot":
        return ref(int(e[1]))
    if tag == "const":
        v, dt = e[1], np.dtype(e[3])
        if dt.kind == "f" and dt.itemsize <= 8:
            return f"np.float64({float(v)!r})"
        if dt.kind in "iu" and abs(int(v)) <= 2**53:  # exact as a float64, as numpy takes it
            return f"np.float64({float(int(v))!r})"
        return None
    spell = _SPELL.get(tag)
    if spell is None:
        return None
    subs = [_text(x, ref) for x in e[1:]]
    if any(s is None for s in subs):
        return None
    return spell.format(*subs)


def elementwise_pass(
    exprs: tuple[tuple, ...],
    member_slots: tuple[int | None, ...],
    scalars: tuple[bool, ...],
    dots: tuple[tuple[tuple, tuple], ...] = (),
    alias: tuple[int | None, ...] = (),
) -> Callable[..., tuple] | None:
    """The compiled loop computing ``exprs`` (the element-wise members, in order) over
    rows ``lo`` to ``hi`` of flattened blocks: ``f(outs, slots, lo, hi)`` writes member ``j``
    into ``outs[j]``, reading slot ``k`` as ``slots[k]`` (a 1-D float64 array, or a float
    where ``scalars[k]``); a member read by a later one (``member_slots[j]`` not None) is
    read from its value at the same element. None where an expression has an operation or
    constant the loop does not spell, or numba is not installed.

    ``dots``: reductions ``sum(a * b)`` of two expressions over the same slots and members,
    accumulated in the same pass (CG's ``r @ r`` right after ``r = r - alpha * q``: the
    values are not read back from memory); the loop returns their sums over the rows, each
    added in :func:`dot`'s order (blocks of four interleaved partial sums, their totals
    added pairwise: :mod:`distal.kernels.sums`), so they are :func:`dot`'s bits on the same
    ``hi - lo`` rows of :data:`MIN_SIZE` elements or more.

    ``outs[j]`` may be the array of an input slot (a block donated by a value nothing reads
    after this pass): the loop reads every input at an element before it stores a member
    there, so the members come out the same as into fresh arrays. ``alias[j]``: that slot,
    where the caller knows it (None or absent: another array); the loop then stores member
    ``j`` through the slot's own array, so the compiler sees one array read and written
    (two distinct arguments that overlap fail its overlap test at run time and take the
    scalar loop: CG's ``p = r + beta p`` in place ran 0.73 ms against 0.58)."""
    alias = tuple(alias) + (None,) * (len(exprs) - len(alias))
    key = (exprs, member_slots, scalars, dots, alias)
    got = _PASSES.get(key, False)
    if got is not False:
        return got
    with _LOCK:
        got = _PASSES.get(key, False)
        if got is False:
            got = _PASSES[key] = _build(exprs, member_slots, scalars, dots, alias)
    return got


def _build(
    exprs: tuple[tuple, ...],
    member_slots: tuple[int | None, ...],
    scalars: tuple[bool, ...],
    dots: tuple[tuple[tuple, tuple], ...],
    alias: tuple[int | None, ...],
) -> Callable[..., tuple] | None:
    try:
        import numba
    except ImportError:
        return None
    local = {k: f"m{j}" for j, k in enumerate(member_slots) if k is not None}

    def ref(k: int) -> str:
        if k in local:
            return local[k]
        return f"s{k}" if scalars[k] else f"v{k}[i]"

    body = []
    for j, e in enumerate(exprs):
        t = _text(e, ref)
        if t is None:
            return None
        body.append(f"m{j} = {t}")
    # every member and reduction term at an element is computed before any member is
    # stored there: an output may be the very array an input slot reads (a donated block,
    # see ``elementwise_pass``), and element i of an input is read only at element i
    stores = [
        f"o{j}[i] = m{j}" if alias[j] is None else f"v{alias[j]}[i] = m{j}"
        for j in range(len(exprs))
    ]
    terms = []
    for a, b in dots:
        ta, tb = _text(a, ref), _text(b, ref)
        if ta is None or tb is None:
            return None
        terms.append(f"({ta}) * ({tb})")
    outs = ", ".join(f"o{j}" for j in range(len(exprs)))
    ins = ", ".join(f"s{k}" for k in range(len(scalars)))
    # the rows cut first, so the loop's index runs from 0 and every access is provably in
    # range and non-negative (no wraparound test per access: the loop vectorizes)
    src = f"def _pass({outs}, {ins}, lo, hi):\n"
    src += "".join(f"    o{j} = o{j}[lo:hi]\n" for j in range(len(exprs)) if alias[j] is None)
    src += "".join(f"    v{k} = s{k}[lo:hi]\n" for k in range(len(scalars)) if not scalars[k])
    if not terms:
        src += "    for i in range(hi - lo):\n"
        src += "".join(f"        {line}\n" for line in body + stores)
        src += "    return ()\n"
    else:
        # dot's order (:mod:`distal.kernels.sums`): blocks of BLOCK elements, element i
        # into partial sum i % 4 (past the last multiple of 4, the first), each block's
        # total into a pairwise tree; the last, partial block after the full ones
        nd = len(terms)
        BLOCK = sums.BLOCK
        src += f"    n = hi - lo\n    m = n - n % 4\n    full = n // {BLOCK}\n"
        for d in range(nd):
            src += f"    st{d} = np.empty(64)\n    dp{d} = 0\n    ct{d} = 0\n"

        def block(full: bool) -> str:
            """One block's accumulation from element ``b0``: a full one of BLOCK elements
            (a constant trip count: the loop vectorizes), or the last, partial one up to
            ``n``, whose elements from ``m`` on go into the first partial sum."""
            out = "".join(f"        a{d}_0 = a{d}_1 = a{d}_2 = a{d}_3 = 0.0\n" for d in range(nd))
            if full:
                out += f"        for j in range(0, {BLOCK}, 4):\n            i4 = b0 + j\n"
            else:
                out += "        for i4 in range(b0, m, 4):\n"
            for q in range(4):
                out += f"            i = i4 + {q}\n"
                out += "".join(f"            {line}\n" for line in body)
                out += "".join(f"            a{d}_{q} += {t}\n" for d, t in enumerate(terms))
                out += "".join(f"            {line}\n" for line in stores)
            if not full:
                out += "        for i in range(max(m, b0), n):\n"
                out += "".join(f"            {line}\n" for line in body)
                out += "".join(f"            a{d}_0 += {t}\n" for d, t in enumerate(terms))
                out += "".join(f"            {line}\n" for line in stores)
            out += "".join(
                f"        dp{d}, ct{d} = _push(st{d}, dp{d}, ct{d}, "
                f"(a{d}_0 + a{d}_1) + (a{d}_2 + a{d}_3))\n"
                for d in range(nd)
            )
            return out

        src += "    for k in range(full):\n"
        src += f"        b0 = k * {BLOCK}\n"
        src += block(True)
        src += f"    b0 = full * {BLOCK}\n"
        src += "    if b0 < n:\n"
        src += block(False)
        sums_ = ", ".join(f"_fold(st{d}, dp{d}, 0.0)" for d in range(nd))
        src += f"    return ({sums_},)\n"
    namespace: dict[str, Any] = {
        "np": np,
        "_push": sums.compiled("push"),
        "_fold": sums.compiled("fold"),
    }
    exec(compile(src, "<distal fused pass>", "exec"), namespace)
    jitted = numba.njit(nogil=True, error_model="numpy")(namespace["_pass"])

    def run(out_arrays: list[np.ndarray], slots: list[Any], lo: int, hi: int) -> tuple:
        return jitted(*out_arrays, *slots, lo, hi)

    return run


def fits(slots: list[Any], size: int) -> bool:
    """Whether blocks of ``size`` elements with these slot values take the loop: large
    enough, and every slot a float64 scalar or a C-contiguous float64 array of that size."""
    if size < MIN_SIZE:
        return False
    for a in slots:
        if a is None:
            continue
        if not isinstance(a, np.ndarray) or a.dtype != _F64:
            return False
        if a.ndim and (a.size != size or not a.flags.c_contiguous):
            return False
    return True


# -- the partial dot products of a fused set's reductions ------------------------------------

#: (the inner products' order, and when their compiled loop runs: :mod:`distal.kernels.sums`)
compiled_dot = sums.compiled_dot
dot = sums.dot
