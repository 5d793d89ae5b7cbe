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

#: elements of a block from which the generated loop is used (below, numpy's calls cost
#: less than the loop's dispatch and the first call's compile is not worth it)
MIN_SIZE = 1 << 16

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
    added in :func:`dot`'s order (four interleaved partial sums over the elements, then
    ``(s0 + s1) + (s2 + s3)``), so they are :func:`dot`'s bits on the same ``hi - lo`` rows
    of :data:`MIN_SIZE` elements or more.

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
        # dot's order: element i into partial sum i % 4 over the first n - n % 4 elements,
        # the rest into the first, the four added pairwise at the end
        src += "    n = hi - lo\n    m = n - n % 4\n"
        for d in range(len(terms)):
            src += f"    a{d}_0 = a{d}_1 = a{d}_2 = a{d}_3 = 0.0\n"
        src += "    for i4 in range(0, m, 4):\n"
        for q in range(4):
            src += f"        i = i4 + {q}\n"
            src += "".join(f"        {line}\n" for line in body)
            src += "".join(f"        a{d}_{q} += {t}\n" for d, t in enumerate(terms))
            src += "".join(f"        {line}\n" for line in stores)
        src += "    for i in range(m, n):\n"
        src += "".join(f"        {line}\n" for line in body)
        src += "".join(f"        a{d}_0 += {t}\n" for d, t in enumerate(terms))
        src += "".join(f"        {line}\n" for line in stores)
        sums = ", ".join(f"(a{d}_0 + a{d}_1) + (a{d}_2 + a{d}_3)" for d in range(len(terms)))
        src += f"    return ({sums},)\n"
    namespace: dict[str, Any] = {"np": np}
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


def _dot_loop(a: np.ndarray, b: np.ndarray) -> float:
    """``sum(a * b)`` in four interleaved partial sums (their chains run side by side),
    added as ``(s0 + s1) + (s2 + s3)``: one fixed order, so every runtime gets the same bits."""
    n = a.shape[0]
    m = n - n % 4
    s0 = s1 = s2 = s3 = 0.0
    for i in range(0, m, 4):
        s0 += a[i] * b[i]
        s1 += a[i + 1] * b[i + 1]
        s2 += a[i + 2] * b[i + 2]
        s3 += a[i + 3] * b[i + 3]
    for i in range(m, n):
        s0 += a[i] * b[i]
    return (s0 + s1) + (s2 + s3)


_DOT: list[Any] = []


def compiled_dot(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether :func:`dot` takes its compiled loop for ``a`` and ``b`` (and so whether a
    product's leaf computing the same sum, :mod:`distal.kernels.spmv_dot`, gives its bits):
    C-contiguous 1-D float64 arrays of one shape, :data:`MIN_SIZE` elements or more, and
    numba installed."""
    return (
        a.size >= MIN_SIZE
        and a.dtype == _F64
        and b.dtype == _F64
        and a.ndim == 1
        and a.shape == b.shape
        and a.flags.c_contiguous
        and b.flags.c_contiguous
    )


def dot(a: np.ndarray, b: np.ndarray) -> Any:
    """``numpy.dot`` of two 1-D arrays, by a compiled loop for C-contiguous float64 ones of
    :data:`MIN_SIZE` elements or more (numpy's otherwise).

    Why not BLAS: a reduction's dot product over a block is memory-bound, so a second BLAS
    thread gains little, while numpy's OpenBLAS (a library of its own, which distal's
    per-thread BLAS setting does not reach) starts its threads for such a call and leaves
    them spinning after it, taking a core from the sparse leaves that run next: a CG
    iteration on 10^6 rows took 12.6 ms with numpy's dot and 8.0 ms without it."""
    if not compiled_dot(a, b):
        return np.dot(a, b)
    if not _DOT:
        with _LOCK:
            if not _DOT:
                try:
                    import numba
                except ImportError:
                    _DOT.append(None)
                else:
                    _DOT.append(numba.njit(nogil=True, error_model="numpy")(_dot_loop))
    f = _DOT[0]
    return np.dot(a, b) if f is None else np.float64(f(a, b))
