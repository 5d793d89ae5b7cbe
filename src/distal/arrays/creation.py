"""Arrays made on the processors, block by block: ``full`` (``zeros``, ``ones``,
``empty``), ``arange``, ``linspace``, ``eye`` and random numbers.

Each is a ``rows`` block with no operand (:mod:`distal.arrays.blocks`): processor ``p``
computes its own rows from their position, so nothing is made on the driver and nothing
moves.

Random numbers are counter-based: the flat (row-major) element index space is cut into
chunks of :data:`CHUNK` elements, and chunk ``c`` of a call is drawn by numpy's
``Generator`` over a Philox bit generator whose key is the stream's (a ``SeedSequence`` of
the seed and the call's number in the stream) and whose counter starts at ``c`` in its
high words. A processor draws the chunks its rows touch and keeps its elements, so an
array's values depend on the seed, the call and the shape only, never on the number of
processors or where the blocks are cut. They are not numpy's own values for that seed
(numpy draws the whole array from one stream).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.arrays.blocks import Block, Kind, register
from distal.errors import InputError
from distal.typing import Box, box_shape


def _rows(box: Box) -> tuple[int, int]:
    return (box[0][0], box[0][1]) if box else (0, 1)


# -- full, arange, linspace, eye -------------------------------------------------------------------


def _full(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, value, dt = spec
    return np.full(box_shape(box), value, np.dtype(dt))


def _arange(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, start, step, dt = spec
    lo, hi = _rows(box)
    dtype = np.dtype(dt)
    if dtype.kind in "iub":
        return (start + step * np.arange(lo, hi, dtype=np.int64)).astype(dtype)
    return np.asarray(start + np.arange(lo, hi, dtype=np.float64) * step).astype(dtype)


def _linspace(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    """numpy's ``linspace`` formula for the rows ``lo`` to ``hi`` (its last point set to
    ``stop`` exactly when ``endpoint``)."""
    _, start, stop, num, endpoint, dt = spec
    lo, hi = _rows(box)
    div = (num - 1) if endpoint else num
    delta = stop - start
    y = np.arange(lo, hi, dtype=np.float64 if not np.iscomplexobj(delta) else complex)
    step = delta / div if div > 0 else np.nan
    with np.errstate(all="ignore"):
        if div > 0:
            if step == 0:
                y = y / div * delta + start
            else:
                y = y * step + start
        else:
            y = y * delta + start
        if endpoint and num > 1 and hi == num:
            y[-1] = stop
    dtype = np.dtype(dt)
    if dtype.kind in "iu":
        y = np.floor(y)
    return y.astype(dtype, copy=False)


def _eye(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, m, k, dt = spec
    lo, hi = _rows(box)
    return np.eye(hi - lo, m, k + lo, dtype=np.dtype(dt))


register("full", Kind(_full))
register("arange", Kind(_arange))
register("linspace", Kind(_linspace))
register("eye", Kind(_eye))


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(int(n) for n in shape)
        ok = all(isinstance(n, int | np.integer) and not isinstance(n, bool) for n in shape)
    except TypeError:
        raise InputError(f"{what}: shape {shape!r} is not a tuple of integers") from None
    if not ok or any(n < 0 for n in out):
        raise InputError(f"{what}: shape {shape!r} must be non-negative integers")
    return out


def full(shape: Any, value: Any, dtype: Any) -> Block:
    """``numpy.full(shape, value, dtype)`` (dtype None: numpy's for ``value``)."""
    shape = _shape(shape, "full")
    dt = np.asarray(value).dtype if dtype is None else np.dtype(dtype)
    if dt.kind not in "biufc":
        raise InputError(f"full: dtype {dt} is not numeric")
    try:
        v = np.asarray(value).astype(dt).item()
    except (TypeError, ValueError, OverflowError) as e:
        raise InputError(f"full: {value!r} is not a {dt} value: {e}") from None
    if np.asarray(value).ndim:
        raise InputError("full: the fill value must be a scalar")
    return Block(shape, dt, ("full", v, dt.str))


def arange(start: Any, stop: Any, step: Any, dtype: Any) -> Block:
    """numpy's ``arange`` (its length and dtype rules)."""
    if stop is None:
        start, stop = 0, start
    if step is None:
        step = 1
    if step == 0:
        raise InputError("arange: step must not be zero")
    for v in (start, stop, step):
        if not isinstance(v, int | float | np.integer | np.floating | bool):
            raise InputError(f"arange: {v!r} is not a real number")
    try:  # numpy's dtype: of start, stop and step together, unless one is given
        dt = np.dtype(dtype) if dtype is not None else np.array([start, stop, step]).dtype
        if np.array([start, stop, step]).dtype == bool:
            dt = np.dtype(np.int64) if dtype is None else dt
    except (TypeError, ValueError) as e:
        raise InputError(f"arange: {e}") from None
    n = max(0, int(np.ceil((stop - start) / step)))
    if dt.kind not in "biufc":
        raise InputError(f"arange: dtype {dt} is not numeric")
    start_v = int(start) if dt.kind in "iub" else float(start)
    step_v = int(step) if dt.kind in "iub" else float(step)
    return Block((n,), dt, ("arange", start_v, step_v, dt.str))


def linspace(start: Any, stop: Any, num: int, endpoint: bool, dtype: Any) -> Block:
    if isinstance(num, bool) or not isinstance(num, int | np.integer) or num < 0:
        raise InputError(f"linspace: num must be a non-negative integer, got {num!r}")
    dt = np.result_type(0.0, start, stop) if dtype is None else np.dtype(dtype)
    if dt.kind not in "biufc":
        raise InputError(f"linspace: dtype {dt} is not numeric")
    cast = complex if dt.kind == "c" else float
    return Block(
        (int(num),), dt, ("linspace", cast(start), cast(stop), int(num), bool(endpoint), dt.str)
    )


def eye(n: int, m: int | None, k: int, dtype: Any) -> Block:
    m = n if m is None else m
    for v in (n, m, k):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise InputError(f"eye: {v!r} is not an integer")
    if n < 0 or m < 0:
        raise InputError(f"eye: negative dimensions ({n}, {m})")
    dt = np.dtype(float if dtype is None else dtype)
    return Block((int(n), int(m)), dt, ("eye", int(m), int(k), dt.str))


# -- random numbers -------------------------------------------------------------------------------

#: elements per chunk of a random array (each drawn from its own Philox counter)
CHUNK = 1 << 16

#: ``Generator`` methods a random block may call, and their dtype (None: float64 or the one
#: asked for)
METHODS = {
    "random": None,
    "standard_normal": None,
    "normal": "f8",
    "uniform": "f8",
    "standard_exponential": None,
    "exponential": "f8",
    "integers": "i8",
    "poisson": "i8",
    "binomial": "i8",
    "gamma": "f8",
    "standard_gamma": None,
    "beta": "f8",
    "lognormal": "f8",
    "laplace": "f8",
    "logistic": "f8",
    "geometric": "i8",
    "chisquare": "f8",
}


def _generator(key: tuple[int, ...], chunk: int) -> np.random.Generator:
    k = np.random.SeedSequence(list(key)).generate_state(2, np.uint64)
    return np.random.Generator(np.random.Philox(key=k, counter=[0, 0, chunk, 0]))


def _random(spec: tuple, arrays: list[np.ndarray], box: Box) -> np.ndarray:
    _, key, method, params, kwargs, dt, shape = spec
    row = int(np.prod(shape[1:], dtype=np.int64)) if shape else 1
    lo, hi = _rows(box)
    first, last = lo * row, hi * row
    out = np.empty(last - first, np.dtype(dt))
    total = int(np.prod(shape, dtype=np.int64))
    kw = dict(kwargs)
    c = first // CHUNK
    while c * CHUNK < last:
        c0, c1 = c * CHUNK, min((c + 1) * CHUNK, total)
        got = getattr(_generator(key, c), method)(*params, size=c1 - c0, **kw)
        a, b = max(c0, first), min(c1, last)
        out[a - first : b - first] = got[a - c0 : b - c0]
        c += 1
    return out.reshape(box_shape(box) if box else ())


register("random", Kind(_random))


def random(
    key: tuple[int, ...], method: str, params: tuple, kwargs: tuple, shape: Any, dtype: Any
) -> Block:
    """``Generator.<method>(*params, size=shape, **kwargs)`` drawn chunk by chunk (see the
    module docstring); ``key`` identifies the stream and the call."""
    if method not in METHODS:
        raise InputError(f"random: no distribution {method!r} here")
    shape = _shape(() if shape is None else shape, method)
    for p in params:
        if np.ndim(p):
            raise InputError(f"random.{method}: array parameters are not supported, only numbers")
    fixed = METHODS[method]
    probe = getattr(np.random.default_rng(0), method)(*params, size=1, **dict(kwargs))
    dt = np.dtype(dtype) if dtype is not None else probe.dtype
    if fixed is None and dtype is not None:
        kwargs = (*kwargs, ("dtype", dt.str))
    elif dtype is not None and method == "integers":
        kwargs = (*kwargs, ("dtype", dt.str))
    params = tuple(p.item() if isinstance(p, np.generic) else p for p in params)
    return Block(shape, dt, ("random", tuple(key), method, params, tuple(kwargs), dt.str, shape))
