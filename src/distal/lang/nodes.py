"""Index notation: index variables, tensors, accesses and expressions.

``A[i, j] = B[i, k] * C[k, j]`` builds an :class:`Assignment` through
``Tensor.__setitem__``; ``==`` is never overloaded, so expression nodes compare
structurally. Index variables and tensors compare by identity.
"""

from __future__ import annotations

import keyword
import numbers
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.distribution.machine import Machine
from distal.distribution.notation import Distribution, parse_layout
from distal.errors import NotationError, ShapeError
from distal.lang.affine import Affine, spell
from distal.sparse.formats import Format, parse_format


class IndexVar:
    """A named loop/index variable; two variables are equal only if they are the same object.

    The name is a Python identifier (not a keyword): ``repr(schedule)`` prints schedules as
    code that names the variables, which must paste back as Python.

    ``extent``: declared, for a variable whose uses are all shifted accesses (which give it
    none, see :class:`Access`); a plain use must agree with it.
    """

    __slots__ = ("extent", "name")

    def __init__(self, name: str, extent: int | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise NotationError(f"an index variable needs a non-empty string name, got {name!r}")
        if not name.isidentifier() or keyword.iskeyword(name):
            what = "a Python keyword" if keyword.iskeyword(name) else "not a Python identifier"
            raise NotationError(
                f"index variable name {name!r} is {what}; use letters, digits and '_', not "
                "starting with a digit (schedules print as code that names the variable)"
            )
        if extent is not None and (
            isinstance(extent, bool) or not isinstance(extent, numbers.Integral) or extent < 1
        ):
            raise NotationError(f"index variable {name!r}: extent {extent!r} is not a positive int")
        self.name = name
        self.extent = None if extent is None else int(extent)

    def __repr__(self) -> str:
        return self.name

    # ``i + 1``, ``i - 1``, ``2 * i``: an affine index (a shifted access, see Access)
    def __add__(self, c: Any) -> Affine:
        return Affine(self) + c

    def __radd__(self, c: Any) -> Affine:
        return Affine(self) + c

    def __sub__(self, c: Any) -> Affine:
        return Affine(self) - c

    def __rsub__(self, c: Any) -> Affine:
        return c - Affine(self)

    def __mul__(self, k: Any) -> Affine:
        return Affine(self) * k

    def __rmul__(self, k: Any) -> Affine:
        return Affine(self) * k

    def __neg__(self) -> Affine:
        return -Affine(self)


def index_vars(names: str) -> tuple[IndexVar, ...]:
    """``index_vars("i j k")`` -> a tuple of fresh variables (a tuple also for one name)."""
    if not isinstance(names, str):
        raise NotationError(f"index_vars takes a string of names, got {names!r}")
    parts = names.replace(",", " ").split()
    if not parts:
        raise NotationError("index_vars needs at least one name")
    twice = sorted({p for p in parts if parts.count(p) > 1})
    if twice:
        raise NotationError(
            f"index_vars({names!r}) names {', '.join(map(repr, twice))} more than once; two "
            "variables with one name would print alike but never be equal"
        )
    return tuple(IndexVar(p) for p in parts)


class Expr:
    """Base of expression nodes; gives them arithmetic operators."""

    __slots__ = ()

    def __add__(self, other: Any) -> Expr:
        return Add(self, as_expr(other))

    def __radd__(self, other: Any) -> Expr:
        return Add(as_expr(other), self)

    def __sub__(self, other: Any) -> Expr:
        return Add(self, Neg(as_expr(other)))

    def __rsub__(self, other: Any) -> Expr:
        return Add(as_expr(other), Neg(self))

    def __mul__(self, other: Any) -> Expr:
        return Mul(self, as_expr(other))

    def __rmul__(self, other: Any) -> Expr:
        return Mul(as_expr(other), self)

    def __neg__(self) -> Expr:
        return Neg(self)

    def __pos__(self) -> Expr:
        return self

    def __truediv__(self, other: Any) -> Expr:
        """``e / c`` for a number ``c``: the coefficient ``1 / c`` (tensors divide nothing:
        a leaf computes sums of products)."""
        c = _number(other)
        if c is None:
            raise _unsupported(f"{self!r} / {_show(other)}", "a division by a tensor expression")
        if c == 0:
            raise NotationError(f"{self!r} / {c!r} divides by zero")
        return Mul(self, Literal(1 / c))

    def __rtruediv__(self, other: Any) -> Expr:
        raise _unsupported(f"{_show(other)} / {self!r}", "a division by a tensor expression")

    def __pow__(self, other: Any) -> Expr:
        """``e ** n`` for a positive integer ``n``: ``n`` factors ``e * e * ... * e``."""
        n = other.item() if isinstance(other, np.ndarray) and other.ndim == 0 else other
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise _unsupported(
                f"{self!r} ** {_show(other)}", "a power that is not a positive integer"
            )
        n = int(n)
        base = f"({self!r})" if isinstance(self, Mul | Neg) else repr(self)
        terms = _term_count(self)
        if n > MAX_POWER or terms**n > MAX_POWER_TERMS:
            raise NotationError(
                f"{base} ** {n}: a power is expanded into repeated factors, here {terms}^{n} "
                f"products of {n} factors, past the limit of {MAX_POWER_TERMS} products of at "
                f"most {MAX_POWER} factors; compute the base into a tensor first"
            )
        out: Expr = self
        for _ in range(n - 1):
            out = Mul(out, self)
        return out

    def __rpow__(self, other: Any) -> Expr:
        raise _unsupported(f"{_show(other)} ** {self!r}", "a tensor expression as an exponent")

    def __abs__(self) -> Expr:
        raise _unsupported(f"abs({self!r})", "abs()")

    def __floordiv__(self, other: Any) -> Expr:
        raise _unsupported(f"{self!r} // {_show(other)}", "floor division")

    def __rfloordiv__(self, other: Any) -> Expr:
        raise _unsupported(f"{_show(other)} // {self!r}", "floor division")

    def __mod__(self, other: Any) -> Expr:
        raise _unsupported(f"{self!r} % {_show(other)}", "%")

    def __rmod__(self, other: Any) -> Expr:
        raise _unsupported(f"{_show(other)} % {self!r}", "%")

    def __matmul__(self, other: Any) -> Expr:
        raise _unsupported(f"{self!r} @ {_show(other)}", "@ (write the sum with index variables)")

    def __rmatmul__(self, other: Any) -> Expr:
        raise _unsupported(f"{_show(other)} @ {self!r}", "@ (write the sum with index variables)")

    def __lt__(self, other: Any) -> Expr:
        raise _unsupported(f"{self!r} < {_show(other)}", "comparisons")

    def __le__(self, other: Any) -> Expr:
        raise _unsupported(f"{self!r} <= {_show(other)}", "comparisons")

    def __gt__(self, other: Any) -> Expr:
        raise _unsupported(f"{self!r} > {_show(other)}", "comparisons")

    def __ge__(self, other: Any) -> Expr:
        raise _unsupported(f"{self!r} >= {_show(other)}", "comparisons")

    def __bool__(self) -> bool:
        raise NotationError("an index expression has no truth value; use T[i] = expr to assign")


@dataclass(frozen=True, slots=True, eq=True)
class Access(Expr):
    """``tensor[indices]``: one use of a tensor.

    A *shifted* access (written with an affine index, ``u[i - 1, j]``, ``x[2 * i]``) has
    ``scales`` and ``offsets``, one per index: dimension ``d`` is read at
    ``scales[d] * indices[d] + offsets[d]``. It is checked to lie inside the tensor over its
    variables' ranges and never defines an extent (``y[i] = x[i + 1] - x[i + 0]`` with ``y``
    one shorter than ``x``). A plain access has both empty."""

    tensor: Tensor
    indices: tuple[IndexVar, ...]
    offsets: tuple[int, ...] = ()
    scales: tuple[int, ...] = ()

    @property
    def shifted(self) -> bool:
        """Whether the access was written with affine indices."""
        return bool(self.offsets)

    def affine(self) -> tuple[tuple[IndexVar, int, int], ...]:
        """``(variable, scale, offset)`` per dimension (``(v, 1, 0)`` for a plain access)."""
        if not self.offsets:
            return tuple((v, 1, 0) for v in self.indices)
        return tuple(zip(self.indices, self.scales, self.offsets, strict=True))

    def __repr__(self) -> str:
        if not self.offsets:
            return f"{self.tensor.name}({','.join(v.name for v in self.indices)})"
        shown = ",".join(spell(v.name, a, c) for v, a, c in self.affine())
        return f"{self.tensor.name}({shown})"


@dataclass(frozen=True, slots=True, eq=True)
class Literal(Expr):
    """A scalar constant."""

    value: complex | float | int

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True, eq=True)
class Add(Expr):
    """``a + b``."""

    a: Expr
    b: Expr

    def __repr__(self) -> str:
        return f"({self.a!r} + {self.b!r})"


@dataclass(frozen=True, slots=True, eq=True)
class Mul(Expr):
    """``a * b``."""

    a: Expr
    b: Expr

    def __repr__(self) -> str:
        return f"{self.a!r} * {self.b!r}"


@dataclass(frozen=True, slots=True, eq=True)
class Neg(Expr):
    """``-a``."""

    a: Expr

    def __repr__(self) -> str:
        return f"-{self.a!r}"


@dataclass(frozen=True, slots=True, eq=True)
class Restrict(Expr):
    """``a`` inside the box ``box`` of left-side variables, zero outside it: a term's
    *domain* (see :func:`restrict`). ``box`` is ``((var, lo, hi), ...)``, half-open."""

    a: Expr
    box: tuple[tuple[IndexVar, int, int], ...]

    def __repr__(self) -> str:
        ranges = ", ".join(f"{v.name} in {lo}:{hi}" for v, lo, hi in self.box)
        return f"[{ranges}]({self.a!r})"


def restrict(expr: Any, ranges: Any) -> Restrict:
    """``expr`` where every variable of ``ranges`` (``{i: (lo, hi)}``, half-open) lies in its
    range, and zero elsewhere: one statement can compute a stencil on the interior of its
    output and something else (a copy, a boundary value) on the rest,
    ``u2[i] = restrict(u[i - 1] + u[i + 1], {i: (1, n - 1)}) + restrict(u[i + 0], {i: (0, 1)})
    + ...``. Only left-side variables may be restricted.

    Raises:
        NotationError: a key that is no index variable, or a range that is not two
            integers ``lo < hi``.
    """
    if not isinstance(ranges, dict) or not ranges:
        raise NotationError(f"restrict takes a dict {{index_var: (lo, hi)}}, got {ranges!r}")
    box = []
    for v, rng in ranges.items():
        if not isinstance(v, IndexVar):
            raise NotationError(f"restrict: {v!r} is not an index variable")
        try:
            lo, hi = rng
        except (TypeError, ValueError):
            raise NotationError(
                f"restrict: the range of {v.name!r} is {rng!r}, need (lo, hi)"
            ) from None
        if any(isinstance(x, bool) or not isinstance(x, numbers.Integral) for x in (lo, hi)):
            raise NotationError(f"restrict: the range of {v.name!r} is {rng!r}, need integers")
        if not lo < hi:
            raise NotationError(f"restrict: the range of {v.name!r} is empty ({lo}, {hi})")
        box.append((v, int(lo), int(hi)))
    return Restrict(as_expr(expr), tuple(box))


@dataclass(frozen=True, slots=True, eq=True)
class Sum(Expr):
    """``sum over var of body``: placed by the summation rule, never written by users."""

    var: IndexVar
    body: Expr

    def __repr__(self) -> str:
        return f"sum_{self.var.name}({self.body!r})"


#: what the notation computes, said by every error about what it does not
SUPPORTED = (
    "index notation supports +, -, * of tensor accesses and numbers, division by a number "
    "and positive integer powers (e ** 2)"
)
#: the most products a power may expand into (``(B[i] + C[i]) ** n`` has ``2 ** n``) and
#: the largest exponent: past them the leaves would evaluate an enormous sum, so the user
#: computes the base into a tensor first
MAX_POWER_TERMS = 1024
MAX_POWER = 64


def _unsupported(expr: str, what: str) -> NotationError:
    return NotationError(f"{expr}: {what} is not supported; {SUPPORTED}")


def _show(x: Any) -> str:
    return repr(x) if isinstance(x, Expr | numbers.Number) else f"<{type(x).__name__}>"


def _number(x: Any) -> complex | float | int | None:
    """``x`` as a Python number when it is a scalar (not a bool), else None."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x.item()
    if isinstance(x, numbers.Number) and not isinstance(x, bool | np.bool_):
        return x.item() if isinstance(x, np.generic) else x  # type: ignore[return-value]
    return None


def _term_count(e: Expr) -> int:
    """How many products ``e`` expands into (see :func:`distal.lang.concrete.expand`)."""
    if isinstance(e, Add):
        return _term_count(e.a) + _term_count(e.b)
    if isinstance(e, Mul):
        return _term_count(e.a) * _term_count(e.b)
    if isinstance(e, Neg | Restrict):
        return _term_count(e.a)
    if isinstance(e, Sum):
        return _term_count(e.body)
    return 1


def as_expr(x: Any) -> Expr:
    """Wrap Python/numpy scalars as literals; reject anything else."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x.item()
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        return Literal(x)  # type: ignore[arg-type]
    raise NotationError(
        f"cannot use {x!r} of type {type(x).__name__} in an index expression; "
        "use tensor accesses like B[i, k] and numbers"
    )


@dataclass(frozen=True, slots=True, eq=True)
class Assignment:
    """``lhs = rhs``: the definition of the output tensor's values."""

    lhs: Access
    rhs: Expr

    def __repr__(self) -> str:
        return f"{self.lhs!r} = {self.rhs!r}"


class Tensor:
    """A named tensor with an optional storage format and distribution over a machine.

    Args:
        name: the name used in inputs, plans and messages.
        shape: extents (``()`` for a scalar).
        dist: distribution notation such as ``"xy -> xy"``; None keeps the whole
            tensor on processor 0; ``"auto"`` leaves it to the scheduler.
        machine: the processor grid ``dist`` refers to.
        dtype: element type (default float64).
        format: storage format: ``"dense"`` (the default), a name (``"csr"``, ``"csc"``,
            ``"dcsr"``, ``"dcsc"``, ``"coo"``, ``"csf"``, ``"dss"``, ``"dds"``) or a
            ``dl.Format``; see :mod:`distal.sparse.formats`. ``format`` is the parsed Format.
    """

    __slots__ = (
        "assignment",
        "dist",
        "distribution",
        "dtype",
        "format",
        "machine",
        "name",
        "shape",
    )

    def __init__(
        self,
        name: str,
        shape: tuple[int, ...] | list[int] | int,
        dist: str | list[str] | None = None,
        machine: Machine | None = None,
        dtype: Any = np.float64,
        *,
        format: str | Format = "dense",
    ) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise NotationError(f"tensor name must be an identifier string, got {name!r}")
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, tuple | list):
            raise ShapeError(f"shape of tensor {name!r} must be a tuple of ints, got {shape!r}")
        for d, s in enumerate(shape):
            if isinstance(s, bool) or not isinstance(s, numbers.Integral):
                raise ShapeError(f"dimension {d} of tensor {name!r} has extent {s!r}; need an int")
            if s <= 0:
                raise ShapeError(
                    f"dimension {d} of tensor {name!r} has extent {s}; extents must be positive"
                )
        self.name = name
        self.shape: tuple[int, ...] = tuple(int(s) for s in shape)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError as e:
            raise NotationError(f"tensor {name!r} has an unknown dtype {dtype!r}") from e
        if self.dtype.kind not in "biufc":
            raise NotationError(f"tensor {name!r} has non-numeric dtype {self.dtype}")
        self.format: Format = parse_format(format, len(self.shape), name)
        if machine is not None and not isinstance(machine, Machine):
            raise NotationError(f"machine of tensor {name!r} must be a distal Machine")
        self.machine = machine
        self.dist = dist
        self.distribution: Distribution | tuple[Distribution, ...] | None = None
        if dist is not None and dist != "auto":
            if machine is None:
                raise NotationError(
                    f"tensor {name!r} has distribution {dist!r} but no machine; "
                    "pass machine=dl.Machine(...)"
                )
            self.distribution = parse_layout(dist, name, len(self.shape), machine)
        elif dist == "auto" and machine is None:
            raise NotationError(f"tensor {name!r} has dist='auto' but no machine")
        self.assignment: Assignment | None = None

    @property
    def ndim(self) -> int:
        """Order of the tensor."""
        return len(self.shape)

    @property
    def order(self) -> int:
        """Order of the tensor (same as ``ndim``)."""
        return len(self.shape)

    def _access(self, key: Any) -> Access:
        idx: tuple[Any, ...] = key if isinstance(key, tuple) else (key,)
        for v in idx:
            if not isinstance(v, IndexVar | Affine):
                raise NotationError(
                    f"tensor {self.name!r} is indexed with {v!r}; accesses take index "
                    "variables made by dl.index_vars (or affine ones: i + 1, 2 * i)"
                )
        if len(idx) != self.ndim:
            raise NotationError(
                f"tensor {self.name!r} has order {self.ndim} but is accessed with "
                f"{len(idx)} indices {list(idx)}"
            )
        if all(isinstance(v, IndexVar) for v in idx):
            return Access(self, idx)
        aff = [v if isinstance(v, Affine) else Affine(v) for v in idx]
        return Access(
            self,
            tuple(a.var for a in aff),
            tuple(a.offset for a in aff),
            tuple(a.scale for a in aff),
        )

    def __getitem__(self, key: Any) -> Access:
        return self._access(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        from distal.lang.verify import check_assignment  # (verify imports this module)

        lhs = self._access(key)
        self.assignment = check_assignment(Assignment(lhs, as_expr(value)))

    def __repr__(self) -> str:
        d = f", dist={self.dist!r}" if self.dist is not None else ""
        f = "" if self.format.is_dense else f", format={self.format}"
        return f"Tensor({self.name!r}, {self.shape}{d}{f})"


# -- walks over expressions (the checks an assignment must pass are in ``distal.lang.verify``)


def accesses(e: Expr) -> Iterator[Access]:
    """All accesses of ``e``, left to right."""
    if isinstance(e, Access):
        yield e
    elif isinstance(e, Add | Mul):
        yield from accesses(e.a)
        yield from accesses(e.b)
    elif isinstance(e, Neg | Restrict):
        yield from accesses(e.a)
    elif isinstance(e, Sum):
        yield from accesses(e.body)
    elif not isinstance(e, Literal):
        raise NotationError(f"unknown expression node {e!r}")


def domained(
    e: Expr, box: dict[IndexVar, tuple[int, int]] | None = None
) -> Iterator[tuple[Access, dict[IndexVar, tuple[int, int]]]]:
    """All accesses of ``e`` with the domain the restrictions around each put on its
    variables (``{var: (lo, hi)}``, intersected; empty where none)."""
    box = {} if box is None else box
    if isinstance(e, Access):
        yield e, box
    elif isinstance(e, Add | Mul):
        yield from domained(e.a, box)
        yield from domained(e.b, box)
    elif isinstance(e, Neg):
        yield from domained(e.a, box)
    elif isinstance(e, Sum):
        yield from domained(e.body, box)
    elif isinstance(e, Restrict):
        inner = dict(box)
        for v, lo, hi in e.box:
            a, b = inner.get(v, (lo, hi))
            inner[v] = (max(a, lo), min(b, hi))
        yield from domained(e.a, inner)
