"""Shape and layout operations as block operations (:mod:`distal.arrays.blocks`):
``reshape`` (and ``ravel``, ``expand_dims``, ``squeeze``), ``concatenate``,
``broadcast_to``, ``tile``, ``repeat``, ``flip``, ``roll``, ``diag``, ``triu`` / ``tril``,
``sort`` / ``argsort``.

Each result block reads the operand boxes it needs, worked out from the shapes: a reshape
that keeps the first axis (``(m, n, k) -> (m, n * k)``) or a concatenation along another
axis reads each processor's own rows (nothing moves); one that changes the first axis reads
the rows whose row-major elements its block holds; a sort along the first axis reads the
whole axis (every processor receives it: words that are counted, not a scalable sort).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays import graph as g
from distal.arrays.blocks import Block, Kind, register, rows_of, whole
from distal.errors import InputError, NotSupportedYet, ShapeError
from distal.typing import Box, box_shape


def _prod(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _lohi(box: Box) -> tuple[int, int]:
    return (box[0][0], box[0][1]) if box else (0, 1)


# -- reshape ---------------------------------------------------------------------------------------


def _reshape_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, src, dst = spec
    if not src:
        return [()]
    lo, hi = _lohi(box) if dst else (0, 1)
    r_out = _prod(dst[1:]) if dst else 1
    r_in = _prod(src[1:])
    flo, fhi = lo * r_out, hi * r_out
    if r_in == 0 or fhi <= flo:
        return [None]
    return [((flo // r_in, -(-fhi // r_in)), *((0, n) for n in src[1:]))]


def _reshape(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, src, dst = spec
    x = arrays[0]
    lo, hi = _lohi(box) if dst else (0, 1)
    r_out = _prod(dst[1:]) if dst else 1
    if x is None:
        return np.empty(box_shape(box))
    flat = np.asarray(x).reshape(-1)
    first = 0
    if src:
        first = lo * r_out - (box_of_rows(src, lo * r_out) * _prod(src[1:]))
    n = (hi - lo) * r_out
    return flat[first : first + n].reshape(box_shape(box) if dst else ())


def box_of_rows(src: tuple[int, ...], flat: int) -> int:
    """The first row of ``src`` a read starting at flat element ``flat`` holds."""
    r = _prod(src[1:])
    return flat // r if r else 0


register("reshape", Kind(_reshape, reads=_reshape_reads))


def reshape(x: g.Node, shape: Any) -> g.Node:
    """numpy's ``reshape`` (row-major order; one ``-1`` inferred)."""
    if isinstance(shape, int | np.integer):
        shape = (shape,)
    try:
        want = [int(n) for n in shape]
    except TypeError:
        raise InputError(f"reshape: {shape!r} is not a shape") from None
    size = _prod(x.shape)
    if want.count(-1) > 1 or any(n < -1 for n in want):
        raise InputError(f"reshape: bad shape {tuple(want)}")
    if -1 in want:
        rest = _prod(tuple(n for n in want if n != -1))
        if rest == 0 or size % rest:
            raise ShapeError(f"cannot reshape an array of size {size} into shape {tuple(want)}")
        want[want.index(-1)] = size // rest
    new = tuple(want)
    if _prod(new) != size:
        raise ShapeError(f"cannot reshape an array of size {size} into shape {new}")
    if new == x.shape:
        return x
    return Block(new, x.dtype, ("reshape", x.shape, new), (x,), "boxes")


# -- concatenate -----------------------------------------------------------------------------------


def _concat_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, axis, shapes, _ = spec
    lo, hi = _lohi(box)
    if axis != 0:
        return [rows_of(box, s) for s in shapes]
    got: list[Box | None] = []
    off = 0
    for s in shapes:
        a, b = max(lo - off, 0), min(hi - off, s[0])
        got.append(((a, b), *((0, n) for n in s[1:])) if b > a else None)
        off += s[0]
    return got


def _concat(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, axis, _, dt = spec
    parts = [np.asarray(a).astype(dt, copy=False) for a in arrays if a is not None]
    if not parts:
        return np.empty(box_shape(box), dt)
    return np.concatenate(parts, axis=axis)


register("concat", Kind(_concat, reads=_concat_reads))


def concatenate(xs: list[g.Node], axis: int | None) -> g.Node:
    if not xs:
        raise InputError("concatenate: need at least one array")
    if axis is None:
        xs = [reshape(x, (-1,)) for x in xs]
        axis = 0
    nd = xs[0].ndim
    if nd == 0:
        raise InputError("concatenate: zero-dimensional arrays cannot be concatenated")
    if any(x.ndim != nd for x in xs):
        raise ShapeError(
            "concatenate: all the input arrays must have the same number of dimensions, got "
            + ", ".join(str(x.shape) for x in xs)
        )
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not -nd <= axis < nd:
        raise InputError(f"concatenate: axis {axis!r} is out of range for {nd}-D arrays")
    axis = int(axis) % nd
    for x in xs[1:]:
        if any(
            a != b for d, (a, b) in enumerate(zip(x.shape, xs[0].shape, strict=True)) if d != axis
        ):
            raise ShapeError(
                f"concatenate: shapes {xs[0].shape} and {x.shape} differ off axis {axis}"
            )
    dt = np.result_type(*[x.dtype for x in xs])
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    spec = ("concat", axis, tuple(x.shape for x in xs), dt.str)
    return Block(tuple(shape), dt, spec, tuple(xs), "boxes")


# -- broadcast_to, tile, repeat --------------------------------------------------------------------


def _broadcast(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    return np.array(np.broadcast_to(arrays[0], box_shape(box)))


register("broadcast", Kind(_broadcast))


def broadcast_to(x: g.Node, shape: Any) -> g.Node:
    shape = tuple(int(n) for n in ((shape,) if isinstance(shape, int | np.integer) else shape))
    try:
        got = np.broadcast_shapes(x.shape, shape)
    except ValueError:
        raise ShapeError(f"broadcast_to: {x.shape} does not broadcast to {shape}") from None
    if got != shape:
        raise ShapeError(f"broadcast_to: {x.shape} does not broadcast to {shape}")
    if shape == x.shape:
        return x
    aligned = x.ndim == len(shape) and len(shape) > 0 and x.shape[0] == shape[0]
    return Block(shape, x.dtype, ("broadcast",), (x,), "rows", (aligned,))


def _tile_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, src, _ = spec
    lo, hi = _lohi(box)
    m = src[0]
    if hi - lo >= m or lo // m != (hi - 1) // m:
        return [whole(src)]
    return [((lo % m, (hi - 1) % m + 1), *((0, n) for n in src[1:]))]


def _tile(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, src, reps = spec
    lo, hi = _lohi(box)
    x = arrays[0]
    m = src[0]
    start = 0 if x.shape[0] == m else lo % m
    rows = (np.arange(lo, hi) % m) - start
    return np.tile(np.take(x, rows, axis=0), (1, *reps[1:]))


register("tile", Kind(_tile, reads=_tile_reads))


def tile(x: g.Node, reps: Any) -> g.Node:
    reps = (reps,) if isinstance(reps, int | np.integer) else tuple(int(r) for r in reps)
    if any(r < 0 for r in reps):
        raise InputError(f"tile: negative repetitions {reps}")
    nd = max(x.ndim, len(reps))
    src = (1,) * (nd - x.ndim) + x.shape
    reps = (1,) * (nd - len(reps)) + reps
    if src != x.shape:
        x = reshape(x, src)
    shape = tuple(a * r for a, r in zip(src, reps, strict=True))
    if not shape:
        return x
    return Block(shape, x.dtype, ("tile", src, reps), (x,), "boxes")


def _repeat_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, src, reps, axis = spec
    if axis != 0:
        return [rows_of(box, src)]
    lo, hi = _lohi(box)
    return [((lo // reps, -(-hi // reps)), *((0, n) for n in src[1:]))]


def _repeat(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, _, reps, axis = spec
    x = np.repeat(arrays[0], reps, axis=axis)
    if axis != 0:
        return x
    lo, hi = _lohi(box)
    first = (lo // reps) * reps
    return x[lo - first : hi - first]


register("repeat", Kind(_repeat, reads=_repeat_reads))


def repeat(x: g.Node, reps: Any, axis: int | None) -> g.Node:
    if not isinstance(reps, int | np.integer) or isinstance(reps, bool) or reps < 0:
        raise NotSupportedYet("repeat: only one non-negative integer count of repetitions")
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    (ax,) = _axes(axis, x.ndim, "repeat")
    shape = tuple(n * int(reps) if d == ax else n for d, n in enumerate(x.shape))
    return Block(shape, x.dtype, ("repeat", x.shape, int(reps), ax), (x,), "boxes")


def _axes(axis: Any, ndim: int, what: str) -> tuple[int, ...]:
    from distal.arrays.reductions import normalize_axes

    return normalize_axes(axis, ndim, what)


# -- flip and roll ---------------------------------------------------------------------------------


def _flip_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, axes, shape = spec
    if 0 not in axes:
        return [rows_of(box, shape)]
    lo, hi = _lohi(box)
    n = shape[0]
    return [((n - hi, n - lo), *((0, k) for k in shape[1:]))]


def _flip(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, axes, _ = spec
    return np.flip(arrays[0], axis=axes)


register("flip", Kind(_flip, reads=_flip_reads))


def flip(x: g.Node, axis: Any) -> g.Node:
    axes = _axes(axis, x.ndim, "flip")
    if not axes:
        return x
    return Block(x.shape, x.dtype, ("flip", axes, x.shape), (x,), "boxes")


def _roll_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, pairs, shape = spec
    if 0 not in dict(pairs):
        return [rows_of(box, shape)]
    return [whole(shape)]


def _roll(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, pairs, _ = spec
    shifts = dict(pairs)
    x = arrays[0]
    axes = tuple(shifts)
    rolled = np.roll(x, tuple(shifts[a] for a in axes), axis=axes)
    if 0 not in shifts:
        return rolled
    lo, hi = _lohi(box)
    return rolled[lo:hi]


register("roll", Kind(_roll, reads=_roll_reads))


def roll(x: g.Node, shift: Any, axis: Any) -> g.Node:
    if axis is None:
        flat = reshape(x, (-1,))
        return reshape(roll(flat, shift, 0), x.shape)
    axes = axis if isinstance(axis, tuple | list) else (axis,)
    shifts_in = shift if isinstance(shift, tuple | list) else (shift,) * len(axes)
    if len(shifts_in) != len(axes):
        raise InputError("roll: shift and axis must have the same length")
    shifts: dict[int, int] = {}
    for s, a in zip(shifts_in, axes, strict=True):
        (ax,) = _axes(a, x.ndim, "roll") if x.ndim else (0,)
        shifts[ax] = shifts.get(ax, 0) + int(s)
    shifts = {a: s % x.shape[a] if x.shape[a] else 0 for a, s in shifts.items()}
    shifts = {a: s for a, s in shifts.items() if s}
    if not shifts:
        return x
    return Block(x.shape, x.dtype, ("roll", tuple(sorted(shifts.items())), x.shape), (x,), "boxes")


# -- diag, triu, tril ------------------------------------------------------------------------------


def _diag_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, k, src = spec
    lo, hi = _lohi(box)
    if len(src) == 1:  # a vector to a matrix: row i holds v[i - max(0, -k)]
        off = max(0, -k)
        a, b = max(lo - off, 0), min(hi - off, src[0])
        return [((a, b),) if b > a else None]
    r, c = max(0, -k), max(0, k)
    return [((lo + r, hi + r), (lo + c, hi + c))]


def _diag(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, k, src = spec
    lo, hi = _lohi(box)
    dt = np.dtype(spec_dt(spec, arrays))
    if len(src) == 2:
        return np.diagonal(arrays[0]).copy()
    n = src[0] + abs(k)
    out = np.zeros((hi - lo, n), dt)
    v = arrays[0]
    if v is None:
        return out
    off = max(0, -k)
    rows = np.arange(max(lo, off), min(hi, off + src[0]))
    out[rows - lo, rows + k] = v[: len(rows)]
    return out


def spec_dt(spec: tuple, arrays: list[Any]) -> Any:
    return next((a.dtype for a in arrays if a is not None), np.float64)


register("diag", Kind(_diag, reads=_diag_reads))


def diag(x: g.Node, k: int = 0) -> g.Node:
    k = int(k)
    if x.ndim == 1:
        n = x.shape[0] + abs(k)
        return Block((n, n), x.dtype, ("diag", k, x.shape), (x,), "boxes")
    if x.ndim != 2:
        raise InputError("diag: the input must be 1-D or 2-D")
    m, n = x.shape
    length = max(0, min(m + min(k, 0), n - max(k, 0)))
    return Block((length,), x.dtype, ("diag", k, x.shape), (x,), "boxes")


def _tri(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, upper, k, ndim = spec
    lo = _lohi(box)[0] if ndim == 2 else 0
    f = np.triu if upper else np.tril
    return f(arrays[0], k + lo)


register("tri", Kind(_tri))


def tri(x: g.Node, k: int, upper: bool) -> g.Node:
    if x.ndim < 2:
        raise InputError(f"{'triu' if upper else 'tril'}: the input must have 2 or more axes")
    return Block(x.shape, x.dtype, ("tri", bool(upper), int(k), x.ndim), (x,), "rows", (True,))


# -- sort ------------------------------------------------------------------------------------------


def _sort_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, axis, _, shape, _ = spec
    return [whole(shape) if axis == 0 else rows_of(box, shape)]


def _sort(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, axis, kind, _, descending = spec
    x = arrays[0]
    if kind == "argsort":
        if descending:  # numpy's stable order of equal elements, from the largest down
            r = np.flip(x, axis=axis)
            got = np.flip(np.argsort(r, axis=axis, kind="stable"), axis=axis)
            got = x.shape[axis] - 1 - got
        else:
            got = np.argsort(x, axis=axis, kind="stable")
    else:
        got = np.sort(x, axis=axis, kind="stable")
        if descending:
            got = np.flip(got, axis=axis)
    if axis != 0:
        return got
    lo, hi = _lohi(box)
    return got[lo:hi]


register("sort", Kind(_sort, reads=_sort_reads))


def sort(x: g.Node, axis: int, kind: str, descending: bool = False) -> g.Node:
    """``sort`` (``kind="sort"``) or ``argsort`` along ``axis`` (stable, as numpy's with
    ``kind="stable"``)."""
    if x.ndim == 0:
        raise InputError(f"{kind}: a 0-d array has no axis to sort")
    (ax,) = _axes(axis, x.ndim, kind)
    dt = np.dtype(np.intp) if kind == "argsort" else x.dtype
    if x.dtype.kind == "c":
        raise NotSupportedYet(f"{kind} of complex numbers")
    spec = ("sort", ax, kind, x.shape, bool(descending))
    return Block(x.shape, dt, spec, (x,), "boxes")


# -- diff and searchsorted -------------------------------------------------------------------------


def _diff_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, axis, shape = spec
    if axis != 0:
        return [rows_of(box, shape)]
    lo, hi = _lohi(box)
    return [((lo, hi + 1), *((0, n) for n in shape[1:]))]


def _diff(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, axis, _ = spec
    return np.diff(arrays[0], axis=axis)


register("diff", Kind(_diff, reads=_diff_reads))


def diff(x: g.Node, axis: int) -> g.Node:
    """One ``numpy.diff`` along ``axis`` (along the first: each block reads one row more)."""
    shape = tuple(max(n - 1, 0) if d == axis else n for d, n in enumerate(x.shape))
    dt = x.dtype
    if dt == np.dtype(bool):
        raise InputError("diff: numpy subtracts no booleans (use logical_xor)")
    return Block(shape, dt, ("diff", axis, x.shape), (x,), "boxes")


def _searchsorted(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, side = spec
    return np.searchsorted(arrays[1], arrays[0], side=side)


register("searchsorted", Kind(_searchsorted))


# -- take, take_along_axis -------------------------------------------------------------------------


def _take_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, axis, along = spec
    xs, idx = ins
    if axis != 0:
        return [rows_of(box, xs), rows_of(box, idx) if along else whole(idx)]
    # along the first axis: any row of x may be asked for (the indices are values)
    return [whole(xs), rows_of(box, idx) if (along or len(idx) == 1) else whole(idx)]


def _take(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, axis, along = spec
    x, idx = arrays
    if along:
        return np.take_along_axis(x, idx, axis=axis)
    return np.take(x, idx, axis=axis)


register("take", Kind(_take, reads=_take_reads))


def take(x: g.Node, indices: g.Node, axis: int, along: bool) -> g.Node:
    """numpy's ``take`` (``indices`` 1-D, as the array API's) or ``take_along_axis``: an
    index along the first axis may name any row, so there each block reads all of ``x``."""
    if indices.dtype.kind not in "iu":
        raise InputError(f"take: indices must be integers, got {indices.dtype}")
    (ax,) = _axes(axis, x.ndim, "take") if x.ndim else (0,)
    if along:
        if indices.ndim != x.ndim:
            raise ShapeError("take_along_axis: indices need the array's number of axes")
        shape = tuple(int(n) for n in np.broadcast_shapes(
            tuple(1 if d == ax else n for d, n in enumerate(x.shape)),
            tuple(1 if d == ax else n for d, n in enumerate(indices.shape)),
        ))  # fmt: skip
        shape = tuple(indices.shape[d] if d == ax else n for d, n in enumerate(shape))
        if shape != indices.shape or any(x.shape[d] != n for d, n in enumerate(shape) if d != ax):
            raise NotSupportedYet("take_along_axis: broadcasting between x and indices")
    else:
        if indices.ndim != 1:
            raise NotSupportedYet("take: one-dimensional indices")
        shape = (*x.shape[:ax], indices.shape[0], *x.shape[ax + 1 :])
    return Block(shape, x.dtype, ("take", ax, along), (x, indices), "boxes")


# -- fft along an axis -----------------------------------------------------------------------------


def _fft_reads(spec: tuple, out: tuple, ins: list, box: Box) -> list[Box | None]:
    _, _, _, axes, _, shape = spec
    return [whole(shape) if 0 in axes else rows_of(box, shape)]


def _fft(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, name, s, axes, norm, _ = spec
    f = getattr(np.fft, name)
    if name in ("fftn", "ifftn", "rfftn", "irfftn"):
        got = f(arrays[0], s=s, axes=axes, norm=norm)
    else:
        got = f(arrays[0], n=s, axis=axes[0], norm=norm)
    if 0 in axes:
        lo, hi = _lohi(box)
        got = got[lo:hi]
    return got


register("fft", Kind(_fft, reads=_fft_reads))


def fft(x: g.Node, name: str, s: Any, axes: tuple[int, ...], norm: str | None) -> g.Node:
    """numpy's ``fft.<name>`` along ``axes``: along other axes than the first each processor
    transforms its own rows; along the first each block reads the whole axis."""
    probe_shape = tuple(max(n, 1) if d not in axes else n for d, n in enumerate(x.shape))
    probe = np.zeros(probe_shape, x.dtype)
    f = getattr(np.fft, name)
    try:
        if name in ("fftn", "ifftn", "rfftn", "irfftn"):
            got = f(probe, s=s, axes=axes, norm=norm)
        else:
            got = f(probe, n=s, axis=axes[0], norm=norm)
    except (TypeError, ValueError) as e:
        raise InputError(f"fft.{name}: {e}") from None
    shape = tuple(got.shape[d] if d in axes else n for d, n in enumerate(x.shape))
    spec = ("fft", name, s, axes, norm, x.shape)
    return Block(shape, got.dtype, spec, (x,), "boxes")
