"""``distal.numpy.random``: random arrays made block by block on the processors.

``default_rng(seed)`` returns a :class:`Generator` whose methods (``random``,
``standard_normal``, ``normal``, ``uniform``, ``integers``, ``exponential``, ...) make
DArrays; the legacy functions (``seed``, ``rand``, ``randn``, ``random``, ``uniform``,
``normal``, ``randint``, ...) use one generator of this module. Each array is drawn in
counter-based chunks (:mod:`distal.arrays.creation`): the same seed gives the same array
whatever the number of processors, but not the values numpy's own generators give.
"""

from __future__ import annotations

import itertools
import secrets
from typing import Any

from distal.arrays import creation
from distal.arrays import functions as F
from distal.errors import InputError


class Generator:
    """A stream of random arrays: each call draws from its own key (the seed and the
    call's number), so calls are independent and the stream reproducible."""

    def __init__(self, seed: Any = None) -> None:
        if seed is None:
            seed = secrets.randbits(63)
        if isinstance(seed, Generator):
            seed = seed._seed
        try:
            self._seed = tuple(int(s) for s in (seed if isinstance(seed, list | tuple) else [seed]))
        except (TypeError, ValueError):
            raise InputError(f"default_rng: seed {seed!r} is not an integer") from None
        if any(s < 0 for s in self._seed):
            raise InputError("default_rng: the seed must be non-negative")
        self._calls = itertools.count()

    def _draw(self, method: str, params: tuple, size: Any, dtype: Any = None, **kw: Any) -> Any:
        key = (*self._seed, next(self._calls))
        node = creation.random(key, method, params, tuple(sorted(kw.items())), size, dtype)
        return F.made(node)

    def random(self, size: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return F.assign_out(self._draw("random", (), size, dtype), out)

    def standard_normal(self, size: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return F.assign_out(self._draw("standard_normal", (), size, dtype), out)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None) -> Any:
        return self._draw("normal", (loc, scale), size)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> Any:
        return self._draw("uniform", (low, high), size)

    def integers(
        self,
        low: Any,
        high: Any = None,
        size: Any = None,
        dtype: Any = None,
        endpoint: bool = False,
    ) -> Any:
        if high is None:
            low, high = 0, low
        return self._draw("integers", (low, high), size, dtype, endpoint=endpoint)

    def exponential(self, scale: float = 1.0, size: Any = None) -> Any:
        return self._draw("exponential", (scale,), size)

    def standard_exponential(self, size: Any = None, dtype: Any = None) -> Any:
        return self._draw("standard_exponential", (), size, dtype)

    def poisson(self, lam: float = 1.0, size: Any = None) -> Any:
        return self._draw("poisson", (lam,), size)

    def binomial(self, n: int, p: float, size: Any = None) -> Any:
        return self._draw("binomial", (n, p), size)

    def gamma(self, shape: float, scale: float = 1.0, size: Any = None) -> Any:
        return self._draw("gamma", (shape, scale), size)

    def beta(self, a: float, b: float, size: Any = None) -> Any:
        return self._draw("beta", (a, b), size)

    def lognormal(self, mean: float = 0.0, sigma: float = 1.0, size: Any = None) -> Any:
        return self._draw("lognormal", (mean, sigma), size)


def default_rng(seed: Any = None) -> Generator:
    return Generator(seed)


_GLOBAL = [Generator(0)]


def seed(seed: Any = None) -> None:
    """Reset the legacy functions' generator."""
    _GLOBAL[0] = Generator(seed)


def _size(args: tuple) -> Any:
    return args if args else None


def rand(*shape: int) -> Any:
    return _GLOBAL[0].random(_size(shape))


def randn(*shape: int) -> Any:
    return _GLOBAL[0].standard_normal(_size(shape))


def random(size: Any = None) -> Any:
    return _GLOBAL[0].random(size)


random_sample = random
sample = random


def standard_normal(size: Any = None) -> Any:
    return _GLOBAL[0].standard_normal(size)


def normal(loc: float = 0.0, scale: float = 1.0, size: Any = None) -> Any:
    return _GLOBAL[0].normal(loc, scale, size)


def uniform(low: float = 0.0, high: float = 1.0, size: Any = None) -> Any:
    return _GLOBAL[0].uniform(low, high, size)


def randint(low: int, high: Any = None, size: Any = None, dtype: Any = int) -> Any:
    return _GLOBAL[0].integers(low, high, size, dtype)


def exponential(scale: float = 1.0, size: Any = None) -> Any:
    return _GLOBAL[0].exponential(scale, size)


def poisson(lam: float = 1.0, size: Any = None) -> Any:
    return _GLOBAL[0].poisson(lam, size)
