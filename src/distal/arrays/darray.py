"""``dl.DArray``: a numpy-shaped handle on a value of a session's arrays program.

Every operator records a node (:mod:`distal.arrays.graph`, which checks shapes and dtypes
at once) and returns a new handle; nothing runs until a value is read (see
:mod:`distal.arrays.program`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distal.arrays import graph as g
from distal.errors import InputError


class DArray:
    """A distributed array of a :class:`dl.Session` (made by ``sess[name]``,
    ``sess.asarray(value)`` or an operation on DArrays). Read it with ``.get()``,
    ``np.asarray``, ``float`` / ``int`` / ``bool`` (0-d)."""

    __slots__ = ("__weakref__", "node", "program", "session")
    __array_priority__ = 1000  # numpy defers its operators to ours

    def __init__(self, session: Any, node: g.Node, program: Any = None, new: bool = False) -> None:
        self.session = session
        self.program = session.arrays_program() if program is None else program
        self.node = node
        self.program.track(self, new)

    # -- what it is ------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def ndim(self) -> int:
        return self.node.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.node.dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.node.shape, dtype=np.int64))

    @property
    def dist(self) -> str | None:
        """Where the array lies, once it has a place: a sparse matrix's cut (``"xy -> x"``
        by rows, ``"xy -> (xy)"`` by stored entries: as given to ``sess.asarray``, else as
        the session's cost model chose it), a computed or placed dense value's distribution
        over the machine; None for an array not computed yet or not placed yet (the first
        kernel that reads it places it)."""
        node = self.node
        if not isinstance(node, g.Value):
            return None
        if node.sparse is not None:
            return "xy -> x" if node.sparse.endswith("/rows") else "xy -> (xy)"
        held = self.session.values.get(node.name)
        layout = getattr(held, "layout", None)
        return None if layout is None else layout.dist

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DArray")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "computed" if self.program.is_value(self.node) else "deferred"
        return f"DArray(shape={self.shape}, dtype={self.dtype}, {state})"

    # -- reading it ------------------------------------------------------------------------

    def get(self) -> Any:
        """The value, gathered: a numpy array, or a ``dl.SparseArray`` for a sparse one (on
        Dask a lost scheduler is ``PoolLost``, as for ``sess.get``)."""
        with self.session.runtime_errors():
            self.program.flush()  # this handle is live: it is among what the flush computes
            return self.session.read(self.program.name_of(self.node))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = np.asarray(self.get())
        return v if dtype is None else v.astype(dtype)

    def _scalar(self, kind: Any) -> Any:
        if self.ndim != 0 and self.size != 1:
            raise TypeError(f"only a 0-d or 1-element DArray converts to {kind.__name__}")
        if kind in (float, int) and self.dtype.kind == "c":
            # (numpy's own refusal is a bare TypeError from inside its conversion)
            raise InputError(
                f"{kind.__name__}() of a complex value ({self!r}) would drop its imaginary "
                "part: use complex(d), or take abs(d) first"
            )
        return kind(np.asarray(self.get()).reshape(()))

    def __float__(self) -> float:
        return self._scalar(float)

    def __int__(self) -> int:
        return self._scalar(int)

    def __bool__(self) -> bool:
        return self._scalar(bool)

    def __complex__(self) -> complex:
        return self._scalar(complex)

    # -- operations ------------------------------------------------------------------------

    def _wrap(self, node: g.Node, new: bool = False) -> DArray:
        """A handle on ``node`` (``new``: made just now, so no value yet)."""
        return DArray(self.session, node, self.program, new)

    def _node(self, other: Any) -> g.Node:
        return operand(self, other)

    def _map(self, op: str, *others: Any, right: bool = False) -> DArray:
        xs = [self.node, *(self._node(o) for o in others)]
        if right:
            xs.reverse()
        return self._wrap(g.map_node(op, *xs), new=True)

    def _rbinary(self, op: str, o: Any) -> DArray:
        """``o op self`` (numpy's reflected operators)."""
        other = g.const(o) if type(o) is float else operand(self, o)
        return _handle(self.session, g.binary(op, other, self.node), self.program)

    # ``a + b``, ``a - b``, ``a * b``: set after the class (see :func:`_operator`)
    __add__: Callable[[DArray, Any], DArray]
    __sub__: Callable[[DArray, Any], DArray]
    __mul__: Callable[[DArray, Any], DArray]

    def __radd__(self, o: Any) -> DArray:
        return self._rbinary("add", o)

    def __rsub__(self, o: Any) -> DArray:
        return self._rbinary("sub", o)

    def __rmul__(self, o: Any) -> DArray:
        return self._rbinary("mul", o)

    def __truediv__(self, o: Any) -> DArray:
        """``a / b``: an array divided by a scalar (a number or a 0-d DArray) is a product
        with its reciprocal (computed once, 0-d), so it fuses into index-notation kernels;
        otherwise numpy's division, a map."""
        d = self._node(o)
        if self.ndim and d.ndim == 0:
            if isinstance(d, g.Const):
                if d.value == 0:  # numpy's inf and nan (and its warning), as for an array of zeros
                    return self._map("div", o)
                # numpy's true division: the result dtype of a / b, even for integers
                dt = g.map_node("div", self.node, d).dtype
                return self._wrap(g.map_node("mul", self.node, g.const(dt.type(1) / d.value)))
            recip = self._wrap(g.map_node("div", g.const(1.0), d))
            return self._map("mul", recip)
        return self._map("div", o)

    def __rtruediv__(self, o: Any) -> DArray:
        return self._map("div", o, right=True)

    def __pow__(self, o: Any) -> DArray:
        return self._map("pow", o)

    def __rpow__(self, o: Any) -> DArray:
        return self._map("pow", o, right=True)

    def __floordiv__(self, o: Any) -> DArray:
        return self._map("floordiv", o)

    def __rfloordiv__(self, o: Any) -> DArray:
        return self._map("floordiv", o, right=True)

    def __mod__(self, o: Any) -> DArray:
        return self._map("mod", o)

    def __rmod__(self, o: Any) -> DArray:
        return self._map("mod", o, right=True)

    # -- slices and in-place updates (distal.arrays.views) ---------------------------------

    def __getitem__(self, key: Any) -> DArray:
        """``x[key]`` as numpy's: a basic index (integers, slices of any step, ``None``,
        ``...``) gives a view (a write through either is seen by the other), an integer
        for every axis a 0-d value."""
        from distal.arrays import views  # (views builds on this module)

        return views.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``x[key] = value``: the region replaced, in place (every holder of ``x`` and of
        its views sees it; what was recorded before keeps the old values)."""
        from distal.arrays import views

        views.setitem(self, key, value)

    def __iter__(self) -> Any:
        if not self.shape:
            raise TypeError("iteration over a 0-d DArray")
        return (self[k] for k in range(self.shape[0]))

    # ``a += b`` and the other in-place operators: set after the class (see :func:`_inplace`)
    __iadd__: Callable[[DArray, Any], DArray]
    __isub__: Callable[[DArray, Any], DArray]
    __imul__: Callable[[DArray, Any], DArray]
    __itruediv__: Callable[[DArray, Any], DArray]
    __ipow__: Callable[[DArray, Any], DArray]
    __ifloordiv__: Callable[[DArray, Any], DArray]
    __imod__: Callable[[DArray, Any], DArray]

    def __neg__(self) -> DArray:
        return self._map("neg")

    def __pos__(self) -> DArray:
        return self._map("pos")

    def __abs__(self) -> DArray:
        return self._map("abs")

    def __lt__(self, o: Any) -> DArray:
        return self._map("lt", o)

    def __le__(self, o: Any) -> DArray:
        return self._map("le", o)

    def __gt__(self, o: Any) -> DArray:
        return self._map("gt", o)

    def __ge__(self, o: Any) -> DArray:
        return self._map("ge", o)

    def __eq__(self, o: object) -> DArray:  # type: ignore[override]
        """Element-wise, as numpy's (a boolean DArray), not identity."""
        return self._map("eq", o)

    def __ne__(self, o: object) -> DArray:  # type: ignore[override]
        return self._map("ne", o)

    __hash__ = object.__hash__  # handles are tracked (weakly) by identity

    def __matmul__(self, o: Any) -> DArray:
        return self._wrap(g.matmul(self.node, self._node(o)))

    def __rmatmul__(self, o: Any) -> DArray:
        return self._wrap(g.matmul(self._node(o), self.node))

    @property
    def T(self) -> DArray:
        """The axes reversed. A sparse matrix's transpose is a sparse matrix of its own,
        made once in this process (sparse values are held whole), so ``A.T @ x`` is an
        SpMV like ``A @ x``."""
        node = self.node
        if isinstance(node, g.Value) and node.sparse is not None:
            return DArray(self.session, self.session.transposed(node), self.program)
        return self._wrap(g.transpose(node))

    def dot(self, o: Any) -> DArray:
        return self @ o


def _operator(op: str) -> Any:
    """``DArray.__add__`` and its kind for ``op``: ``self op o`` recorded in one Python
    frame besides the node's own (a handle of this program or a Python float taken as they
    are; anything else through :func:`operand`), since recording is most of a small fused
    kernel's dispatch."""
    binary, const, new = g.binary, g.const, _new

    def method(self: DArray, o: Any) -> DArray:
        program = self.program
        if type(o) is DArray and o.program is program:  # (one program: one session)
            other = o.node
        elif type(o) is float:
            other = const(o)
        else:
            other = operand(self, o)
        a = new(DArray)
        a.session = self.session
        a.program = program
        a.node = binary(op, self.node, other)
        program.track_new(a)
        return a

    method.__name__ = method.__qualname__ = f"__{op}__"
    method.__doc__ = f"``self {g._SYMBOL[op]} o``, as numpy's."
    return method


def _handle(session: Any, node: g.Node, program: Any) -> DArray:
    """``DArray(session, node, program, new=True)`` without its defaults: a handle on a node
    just made (so no value yet), tracked by ``program``."""
    a = _new(DArray)
    a.session = session
    a.program = program
    a.node = node
    program.track_new(a)
    return a


_new = object.__new__


def operand(array: DArray, x: Any) -> g.Node:
    """``x`` as a node of ``array``'s program: a DArray's own node, a number as a
    constant, anything else array-like as a new value on the same machine."""
    if isinstance(x, DArray):
        if x.session is not array.session:
            raise InputError("a DArray of another session: move it with sess.asarray(x.get())")
        if x.program is not array.program:
            raise InputError(
                f"DArrays on machines of {x.program.nprocs} and {array.program.nprocs} "
                "processors: make both on one machine"
            )
        return x.node
    if isinstance(x, bool | int | float | complex | np.generic) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    ):
        return g.const(x)
    return array.session.asarray(x, machine=array.program.nprocs).node


def _first(xs: tuple[Any, ...]) -> DArray | None:
    return next((x for x in xs if isinstance(x, DArray)), None)


def _func(op: str, *xs: Any) -> Any:
    first = _first(xs)
    if first is None:
        return getattr(np, op)(*xs)
    nodes = [operand(first, x) for x in xs]
    return first._wrap(g.map_node(op, *nodes))


def sqrt(x: Any) -> Any:
    """Element-wise square root (numpy's, for numpy operands)."""
    return _func("sqrt", x)


def absolute(x: Any) -> Any:
    """Element-wise absolute value."""
    return _func("abs", x)


def exp(x: Any) -> Any:
    """Element-wise exponential."""
    return _func("exp", x)


def maximum(a: Any, b: Any) -> Any:
    """Element-wise maximum."""
    return _func("maximum", a, b)


def minimum(a: Any, b: Any) -> Any:
    """Element-wise minimum."""
    return _func("minimum", a, b)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` holds, else ``b``."""
    return _func("where", cond, a, b)


def einsum_arrays(subscripts: str, operands: tuple[Any, ...]) -> DArray:
    """``dl.einsum`` with a DArray operand: one contraction node (see
    :func:`distal.arrays.graph.contract`)."""
    from distal.lang.einsum import parse_einsum

    first = _first(operands)
    assert first is not None
    nodes = tuple(operand(first, x) for x in operands)
    ins, out = parse_einsum(subscripts, [n.ndim for n in nodes])
    return first._wrap(g.contract(tuple(ins), out, nodes, f"einsum {subscripts!r}"))


# ``a + b``, ``a - b``, ``a * b`` (their reflected forms are DArray._rbinary)
DArray.__add__ = _operator("add")
DArray.__sub__ = _operator("sub")
DArray.__mul__ = _operator("mul")


def _inplace(op: str) -> Any:
    """``DArray.__iadd__`` and its kind: :func:`distal.arrays.views.inplace`."""

    def method(self: DArray, o: Any) -> DArray:
        from distal.arrays import views

        return views.inplace(self, op, o)

    name = "truediv" if op == "div" else op
    method.__name__ = method.__qualname__ = f"__i{name}__"
    method.__doc__ = f"``self {g._SYMBOL[op]}= o``: in place, as numpy's (every holder sees it)."
    return method


for _op in ("add", "sub", "mul", "div", "pow", "floordiv", "mod"):
    setattr(DArray, f"__i{'truediv' if _op == 'div' else _op}__", _inplace(_op))
