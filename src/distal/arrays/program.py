"""The deferred program of a session's arrays: what is pending, and how it is evaluated.

Operations on :class:`~distal.arrays.darray.DArray` record nodes (:mod:`distal.arrays.graph`)
and run nothing. When a value is needed (``float``, ``np.asarray``, ``.get()``,
``sess.get``, a checkpoint save, ``sess.flush()``) the program *flushes*: every array the
user still holds a handle on (a live :class:`DArray`) whose node is not yet a value is
evaluated, in creation order (the same on every MPI rank). What the user no longer holds is
never a value of its own: it is fused into the kernels that read it.

How the pending nodes become kernels:

* a node the user holds (a session name's handle too), a contraction (``@``, ``.sum``,
  ``einsum``), and a node bound to a
  session name are *materialized*: each is the root of one group, computed by one kernel
  (:mod:`distal.arrays.lower`) into a session value;
* every other element-wise node is fused into the group that reads it (recomputed where
  two groups read it: element-wise work, cheaper than a kernel and a held value);
* 0-d element-wise nodes (``alpha = rs / pq``) are computed with numpy from their 0-d
  operands on each process (every rank holds the replicated scalars) and held as a
  replicated value;
* an element-wise group with an operation outside index notation's sums of products (a
  function, a comparison, a division by an array) or a product of sums is a *map*: numpy
  over each processor's blocks, in numpy's own order (index notation would expand
  ``(x - y) * z`` into ``x*z - y*z``, which cancels where numpy's does not);
* a contraction over a chain that adds computes the chain first (``(x - y).sum()`` is not
  ``x.sum() - y.sum()``), as does one whose terms would not all use its summed indices
  (see :func:`distal.arrays.lower.sums_cover`), or whose statement would have more than
  :data:`~distal.arrays.lower.MAX_TERMS` terms.

Kernels are cached by their group's key, so a loop compiles only in its first iteration
(``sess.compiles``); ``sess.kernels_run`` counts the kernels executed. Values materialized
for unnamed arrays are dropped from the session when their node is no longer reachable.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from distal.arrays import slicing
from distal.arrays.blocks import Block, units
from distal.arrays.graph import (
    FUSED_MAX,
    KERNEL_OPS,
    Const,
    Contract,
    Map,
    Node,
    Transpose,
    Value,
    is_spmv,
    made_value,
    numpy_op,
    values_made,
)
from distal.arrays.lower import (
    MAX_TERMS,
    OUT,
    _Walk,
    build,
    fused_function,
    fused_signature,
    held_dist,
    map_dist,
    map_function,
    map_signature,
    signature,
    slot_name,
    sums_cover,
    term_count,
)
from distal.errors import InternalError
from distal.kernels.fused import MIN_SIZE
from distal.kernels.passes import Pass

#: element-wise operations that add: under a product or a contraction they would be
#: distributed (see :meth:`Program._is_map` and :meth:`Program._has_sum`)
SUMS = ("add", "sub")

#: element-wise operations a product's kernel computes inside its own statement
_SCALING = frozenset(("mul", "neg", "pos"))

#: pending nodes past which a new operation flushes (so a loop that never reads a value
#: does not grow one ever longer expression)
MAX_PENDING = 256

#: members of one fused set at most
MAX_FUSED = 16

#: elements from which an array that fuses with nothing still runs as a fused set of one
LARGE = MIN_SIZE


#: the node kinds a group's expression is written through (the rest are its leaves)
_WALKED = (Map, Transpose, slicing.Slice)


class Program:
    """The arrays program of one session (``session`` is duck-typed: the session layer
    sits above this one)."""

    def __init__(self, session: Any, nprocs: int) -> None:
        self.sess = session
        self.nprocs = nprocs
        #: what each materialized node became is on the node (``Node.as_value``): a Value
        #: node reading its session value (the handles are moved onto it at a flush, so the
        #: operation's operands can be freed)
        #:
        #: the live handles: weak references, each removing itself from this dictionary when
        #: its handle dies (``dict.pop`` as the callback: no Python call, where a
        #: ``WeakSet``'s callback is one; a handle compares element-wise, but its hash is
        #: its identity, so two live references never compare their handles)
        self.live: dict[weakref.ref[Any], None] = {}
        self._untrack = self.live.pop
        self.kernels: dict[tuple, Any] = {}
        #: whether a flush runs fused sets (see :meth:`_fused_set`): not where the session
        #: says ``fuse=False`` (on a Dask session with ``verify=`` each fused block is
        #: computed twice, as a map's blocks are: ``Session._twice``)
        self._fusing = getattr(session, "fuse", True)
        self._covers: dict[tuple, bool] = {}
        #: ``(product, p)``: the product whose kernel's leaf may compute its result's dot
        #: product with ``p`` (:meth:`_leaf_dot_of`), while the product is materialized
        self._dot_of: tuple[Node, Node] | None = None
        #: what each group already worked out and not yet run reads (values, and nodes made
        #: values before it runs), innermost last: a group's signature is taken before what
        #: it needs first is made, and may compute a pending node inside it from that
        #: node's operands (an epilogue's ``p @ q`` computes ``p = r + beta * p_old`` from
        #: ``p_old`` while ``A @ p`` makes ``p``); no block read here is donated
        #: (:meth:`_donations`)
        self._reading: list[list[Node]] = []
        self.compiles = 0
        self.kernels_run = 0
        self._counter = itertools.count()
        self._pending = 0
        #: the handle of each session name read or bound through this program (``sess[name]``
        #: returns it while the binding holds, so an in-place update through it updates the
        #: name): at every flush a name whose handle's node is not its value yet is bound to
        #: the value computed (``sess[name] = x`` is recorded, fused with the rest)
        self.named: dict[str, Any] = {}
        #: names whose handle was bound or updated in place since the last flush (the flush
        #: binds each to its handle's value), and each named handle's name (by identity)
        self.dirty: set[str] = set()
        self._handle_names: dict[int, str] = {}

    # -- recording ---------------------------------------------------------------------------

    def track(self, array: Any, new: bool = False) -> None:
        """A new handle: the program evaluates it at the next flush unless it dies first
        (``new``: its node was just made, so it is no value yet)."""
        if new or not self.is_value(array.node):
            self.track_new(array)
            return
        self.live[weakref.ref(array, self._untrack)] = None

    def track_new(self, array: Any) -> None:
        """:meth:`track` of a handle on a node just made. A product with a vector or
        matrix result over a pending operand that its kernel would compute first anyway
        (an element-wise array that adds or applies a function, or another product)
        flushes what is pending first: a loop's iteration begins with its product (CG's
        ``q = A @ p``, ``p = r + beta * p`` made by the iteration before), so what one
        iteration records is flushed together, as if it read a value at its end. (A
        transposed or scaled operand, ``F.T @ F``, ``(2 * x) @ A``, is read by the product's
        kernel itself: no flush.) Past :data:`MAX_PENDING` pending operations anything
        recorded flushes (a loop that never reads a value does not grow one ever longer
        expression)."""
        node = array.node
        if self._pending and type(node) is Contract and node.shape:
            for x in node.operands:
                t = type(x)
                if x.as_value is None and (
                    (t is Map and x.op not in _SCALING) or (t is Contract and x.shape)
                ):
                    # (the product's own operands are left to it: its kernel may compute
                    # them, ``lr * X.T`` in ``lr * X.T @ (p - y)``)
                    self.flush(keep=node.operands)
                    break
        elif self._pending >= MAX_PENDING:
            self.flush()
        self.live[weakref.ref(array, self._untrack)] = None
        self._pending += 1

    def bind(self, name: str, handle: Any) -> None:
        """``sess[name] = x``: ``name`` will hold what ``handle`` (a new handle on ``x``'s
        node) holds, computed at the next flush (fused with what else is pending, as a
        local variable's would be)."""
        self.remember(name, handle)
        self.dirty.add(name)
        self._pending += 1
        if self._pending >= MAX_PENDING:
            self.flush()

    def remember(self, name: str, handle: Any) -> None:
        """``handle`` is the one ``sess[name]`` returns while the name holds its value."""
        old = self.named.get(name)
        if old is not None:
            self._handle_names.pop(id(old), None)
        self.named[name] = handle
        self._handle_names[id(handle)] = name

    def forget(self, name: str) -> None:
        """``name`` holds another value now (given, or a kernel's result): its handle no
        longer stands for it."""
        old = self.named.pop(name, None)
        if old is not None:
            self._handle_names.pop(id(old), None)
        self.dirty.discard(name)

    def handle_of(self, name: str) -> Any:
        """The handle of ``name`` when it still stands for the name's value (bound, or on
        the very value the session holds under the name), else None."""
        h = self.named.get(name)
        if h is None or name in self.dirty:
            return h
        node = h.node
        v = node if type(node) is Value else node.as_value
        values = self.sess.values
        if v is not None and values.get(name) is values.get(v.name):
            return h
        self.forget(name)
        return None

    def touched(self, array: Any) -> None:
        """Live handle ``array`` was given a new node in place (``x += y``, ``x[k] = v``):
        the next flush evaluates it (and binds it to its session name, if it is a name's
        handle)."""
        name = self._handle_names.get(id(array))
        if name is not None:
            self.dirty.add(name)
        self._pending += 1
        if self._pending > MAX_PENDING:
            self.flush()

    def is_value(self, node: Node) -> bool:
        return type(node) is Value or node.as_value is not None

    def name_of(self, node: Node) -> str:
        if isinstance(node, Value):
            return node.name
        value = node.as_value
        if value is None:
            raise InternalError(f"{node!r} is not a value yet")
        return value.name

    def handles(self) -> list[Any]:
        """The live handles (a copy: a flush makes and drops handles)."""
        return [a for a in [r() for r in list(self.live)] if a is not None]

    # -- evaluating ---------------------------------------------------------------------------

    def flush(self, keep: tuple[Node, ...] = ()) -> None:
        """Evaluate every live pending array (see the module docstring); ``keep``: pending
        nodes left pending (a product about to be recorded reads them)."""
        if not self._pending:
            return  # every handle made since the last flush is on a value already
        handles = self.handles()
        todo = [a.node for a in handles if not self.is_value(a.node)]
        if len(todo) > 1:  # (two handles on one node: a name's and a variable's)
            todo = list({id(n): n for n in todo}.values())
        if keep:  # (a flush before a product: its operands, and transposes, wait for it)
            kept = {id(n) for n in keep}
            todo = [n for n in todo if id(n) not in kept and type(n) is not Transpose]
        if len(todo) > 1:
            todo.extend(self._pending_products(todo))
            todo.sort(key=_seq)
        i = 0
        if len(todo) == 1 and math.prod(todo[0].shape) < LARGE:
            # one small pending array (a loop's statement bound to a name): no set, no
            # epilogue, no products first (those are for large arrays), so no search for them
            self.materialize(todo[0])
            i = 1
        while i < len(todo):
            deps = self._products_first(todo[i])
            if deps:  # x_new = 0.85 * (A @ x) + c: the product first, then the set
                todo[i:i] = deps
                continue
            members, used = self._fused_set(todo, i)
            if len(members) > 1 or (members and self._large_alone(members[0])):
                self._run_fused(members)
            elif members:
                reads = self._epilogue(members[0], todo[i + used :])
                if reads:  # q = A @ p and the p @ q after it: one kernel
                    self._run_fused(reads, product=members[0])
                else:
                    self.materialize(members[0])
            i += used
        left = 0
        for a in handles:
            node = a.node
            if not isinstance(node, Value):
                if node.as_value is None:  # kept pending
                    left += 1
                    continue
                a.node = node.as_value  # the handle now reads the value, not the recipe
        if self.dirty:  # each name bound or updated holds what its handle holds now
            for name in sorted(self.dirty):
                node = self.named[name].node
                if self.is_value(node):
                    self.materialize(node, name)
            self.dirty = {n for n in self.dirty if not self.is_value(self.named[n].node)}
        self._pending = left

    def _pending_products(self, todo: list[Node]) -> list[Node]:
        """The pending sparse matrix-vector products the element-wise trees of ``todo`` read:
        each is computed as a kernel of its own before what reads it (the sparse lowering
        fuses nothing), and computing it in creation order, as if a handle held it (``q`` in
        CG written inside a function, where nothing holds ``q`` when the loop flushes), lets
        what reads it form one fused set with the arrays beside it."""
        seen = {id(n) for n in todo}
        found: list[Node] = []
        stack = [x for n in todo if type(n) is Map for x in n.operands]
        while stack:
            n = stack.pop()
            if id(n) in seen or type(n) is Const or type(n) is Value or n.as_value is not None:
                continue
            seen.add(id(n))
            if type(n) is Map:
                stack.extend(n.operands)
            elif type(n) is Contract and n.shape and is_spmv(n.ins, n.out, n.operands):
                found.append(n)  # (a dense product may be fused into what reads it)
        return found

    # -- fused sets ----------------------------------------------------------------------------

    def _fused_set(self, todo: list[Node], i: int) -> tuple[list[Node], int]:
        """The pending nodes from ``todo[i]`` on that run as one fused set (one node when it
        fuses with nothing after it), and how many entries of ``todo`` they span (a node that
        became a value as another's operand is passed over)."""
        members: list[Node] = []
        ids: set[int] = set()
        shape: tuple[int, ...] | None = None
        j = i
        while j < len(todo) and len(members) < MAX_FUSED:
            node = todo[j]
            if self.is_value(node):
                j += 1
                continue
            if not members and j + 1 == len(todo):  # the last one: a set of one, no test
                return [node], j - i + 1
            got = self._fusible(node, ids, shape) if self._fusing else None
            if got is None:
                if not members:
                    return [node], j - i + 1
                break
            shape = got
            members.append(node)
            ids.add(id(node))
            j += 1
        return members, j - i

    def _products_first(self, node: Node) -> list[Node]:
        """The pending contractions (one or more dimensions) that keep a large element-wise
        ``node`` out of a fused set, where they are all that does: the flush computes them
        first, each as the kernel it is (with its own epilogue), so ``node`` and what
        follows it form a set over their values instead of ``node`` becoming an
        index-notation kernel that computes the product and the sums in two passes. Empty
        where ``node`` is no such array (small, not float64, or blocked by anything else)."""
        if (
            not self._fusing
            or type(node) is not Map
            or node.dtype != np.float64
            or not node.shape
            or math.prod(node.shape) < LARGE
        ):
            return []
        found: dict[int, Node] = {}
        stack, seen = list(node.operands), set()
        while stack:
            n = stack.pop()
            if id(n) in seen or isinstance(n, Const) or self.is_value(n) or not n.shape:
                continue  # (0-d operands are made values by the set itself)
            seen.add(id(n))
            if type(n) is Map:
                stack.extend(n.operands)
            elif type(n) is Contract and n.shape == node.shape:
                found[id(n)] = n
            else:
                return []
        return sorted(found.values(), key=_seq)

    def _large_alone(self, node: Node) -> bool:
        """Whether ``node``, in no set with others, still runs as a fused set of one: a large
        float64 element-wise array (:data:`~distal.kernels.fused.MIN_SIZE` elements or more)
        takes the generated loop in the processors' threads and reuses freed outputs, where
        its kernel would write a fresh output in two passes. (A lone reduction stays a
        kernel: measured, its numpy sums gained nothing.)"""
        if not self._fusing or type(node) is not Map or node.dtype != np.float64:
            return False
        if math.prod(node.shape) < LARGE:  # first: the cheap test (every small flush)
            return False
        return self._fusible(node, set(), None) is not None

    def _fusible(self, node: Node, ids: set[int], shape: tuple[int, ...] | None) -> Any:
        """The shape of the set with ``node`` in it, or None where ``node`` cannot join the
        set of ``ids`` over ``shape``. A member is an element-wise node of one or more
        dimensions, or a full reduction (``p @ q`` of vectors, ``x.sum()``, an einsum summing
        every index of one or two operands of one shape); what it reads, down to values, is
        element-wise over values and members of that shape, constants, and 0-d values (or 0-d
        nodes computed first, which read no member)."""
        if isinstance(node, Map):
            if not node.ndim or (shape is not None and node.shape != shape):
                return None
            s, roots = node.shape, [node]
        elif isinstance(node, Contract):
            xs = node.operands
            if node.ndim or not 1 <= len(xs) <= 2 or node.out:
                return None
            s = xs[0].shape
            letters = node.ins[0]
            if (
                not s
                or (shape is not None and s != shape)
                or any(x.shape != s or lab != letters for x, lab in zip(xs, node.ins, strict=True))
                or len(set(letters)) != len(letters)
            ):
                return None
            roots = [x for x in xs if isinstance(x, Map) and not self.is_value(x)]
            if any(not self._leaf_fits(x, ids, s) for x in xs if not isinstance(x, Map)):
                return None
        else:
            return None
        if 0 in s:  # an empty array has no blocks to make partial sums of
            return None
        stack, seen = [x for r in roots for x in r.operands], set()
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if isinstance(n, Map) and n.ndim and not self.is_value(n) and id(n) not in ids:
                stack.extend(n.operands)
            elif not self._leaf_fits(n, ids, s):
                return None
        return s

    def _leaf_fits(self, n: Node, ids: set[int], shape: tuple[int, ...]) -> bool:
        """Whether a fused set over ``shape`` can read ``n`` as one of its slots."""
        if isinstance(n, Const):
            return True
        if id(n) in ids:  # an element-wise member; a reduction's sum is not known per block
            return n.ndim > 0
        if n.ndim == 0:
            return self.is_value(n) or not self._reaches(n, ids)
        if not self.is_value(n) or n.shape != shape:
            return False
        v = n if isinstance(n, Value) else n.as_value
        return v is not None and v.sparse is None

    def _reaches(self, node: Node, ids: set[int]) -> bool:
        """Whether computing ``node`` reads a member of ``ids``."""
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if id(n) in seen:  # a shared node is walked once (a loop's graph is a DAG)
                continue
            seen.add(id(n))
            if id(n) in ids:
                return True
            if not self.is_value(n):
                stack.extend(n.args())
        return False

    def _epilogue(self, node: Node, later: list[Node]) -> list[Node]:
        """The full reductions pending in ``later`` (or under them) that can run as the
        epilogue of ``node``'s kernel, a matrix-vector product (a sparse or a dense matrix):
        each reads the product (with values of its shape and element-wise arrays over them,
        as a fused set does: ``p @ q`` after ``q = A @ p``), or only values of its shape
        (PageRank's ``dangling @ x`` beside ``A @ x``). They run at the
        product's place in the flush, before the arrays after it (they read nothing those
        make).
        Empty where there are none (or ``node`` is no such product, or the session does not
        fuse)."""
        if (
            not self._fusing
            or not later
            or type(node) is not Contract
            or node.ins != ("ab", "b")
            or node.out != "a"
            or (type(node.operands[1]) is Value and node.operands[1].sparse is not None)
        ):
            return []
        ids = {id(node)}
        found: dict[int, Node] = {}
        seen: set[int] = set()
        stack = list(later)
        while stack:
            n = stack.pop()
            if id(n) in seen or isinstance(n, Const) or self.is_value(n):
                continue
            seen.add(id(n))
            if (
                type(n) is Contract
                and not n.ndim
                and (
                    any(x is node for x in n.operands) or all(self.is_value(x) for x in n.operands)
                )
                and self._fusible(n, ids, node.shape) is not None
            ):
                found[id(n)] = n
            else:
                stack.extend(n.args())
        return sorted(found.values(), key=_seq)[:MAX_FUSED]

    def _run_fused(self, members: list[Node], product: Node | None = None) -> None:
        """Run a fused set as one map: one pass of numpy over each processor's blocks computes
        every element-wise member, and each reduction's partial sums over the blocks are added
        in processor order into its replicated 0-d value.

        With ``product`` (a matrix-vector product the members reduce, see
        :meth:`_epilogue`) the set is that product's kernel's epilogue: the kernel runs, and
        the set over the blocks of its result as they lie, as one kernel run."""
        ids = {id(m) for m in members}

        def leaf(n: Node) -> bool:
            return n is product or self.is_value(n) or id(n) in ids or n.ndim == 0

        cuts = self._expansion_cuts(members, leaf)
        steps, slots = fused_signature(
            members, (lambda n: leaf(n) or id(n) in cuts) if cuts else leaf
        )
        # the set's own temporaries (nodes read from two places, computed once per block)
        temps = {id(x) for kind, _, k in steps if kind == "temp" for x in (slots[k],)}
        self._reading.append([x for x in slots if id(x) not in ids and id(x) not in temps])
        leaf_dot = False
        try:
            for x in slots:  # the 0-d operands not yet values (alpha = rs / pq)
                if (
                    x is not product
                    and id(x) not in ids
                    and id(x) not in temps
                    and not isinstance(x, Const)
                    and not self.is_value(x)
                ):
                    self.materialize(x)
            if product is not None:
                p = self._leaf_dot_of(members, product)
                self._dot_of = None if p is None else (product, p)
                try:
                    self.materialize(product)
                finally:
                    leaf_dot, self._dot_of = self._dot_of is not None, None
        finally:
            self._reading.pop()
        fn = fused_function(steps)  # data; its function is made once per process
        first = members[0]
        shape = first.operands[0].shape if isinstance(first, Contract) else first.shape
        operands = [
            (k, self.name_of(x), _held_dist(x.ndim))
            for k, x in enumerate(slots)
            if id(x) not in ids and id(x) not in temps
        ]
        outs = []
        for m in members:
            out = f"_a{next(self._counter)}"
            outs.append((out, m.shape, m.dtype))
        self.sess.fused_blocks(
            fn,
            len(slots),
            operands,
            outs,
            shape,
            self.nprocs,
            epilogue=product is not None,
            donate=self._donations(members, slots, ids),
            leaf_dot=leaf_dot,
        )
        for m, (out, _, _) in zip(members, outs, strict=True):
            value = Value(m.shape, m.dtype, out)
            m.as_value = value
            made_value()
            value.drop = self.sess.values
        if product is None:
            self.kernels_run += 1

    def _leaf_dot_of(self, members: list[Node], product: Node) -> Node | None:
        """The vector ``p`` where the epilogue is the one reduction ``p @ (A @ p)`` (either
        order) of float64 vectors, ``product`` being ``A @ p`` on an MPI session: the
        product's leaf may compute each rank's part of it as it stores the result
        (``Session.run_named``'s ``dot_with``, where the runtime can: ``leaf_dot``), saving
        the pass over both vectors."""
        if len(members) != 1 or not self.sess.rt.leaf_dot:
            return None
        m = members[0]
        if type(m) is not Contract or m.ndim or len(m.operands) != 2 or m.dtype != np.float64:
            return None
        p = product.operands[1]
        a, b = m.operands
        if not ((a is p and b is product) or (a is product and b is p)):
            return None
        if p.ndim != 1 or p.dtype != np.float64 or product.dtype != np.float64:
            return None
        return p

    def _donations(
        self, members: list[Node], slots: list[Node], ids: set[int]
    ) -> list[tuple[int, int]]:
        """``(j, k)``: element-wise member ``j`` (in order among the set's element-wise
        members) may be written over the block of slot ``k``, a float64 value of its shape
        that nothing reads after this set: no live handle is on it, and no pending array a
        live handle leads to reads it except through this set's members (CG's
        ``x = x + alpha * p`` once the old ``x`` is rebound), and no group worked out before
        this set was made reads it when it runs after (``_reading``: its signature may
        read what this set replaces, as it was when the group was worked out). The session
        decides whether the block itself is free
        (:meth:`distal.session.Session.fused_blocks`)."""
        maps = [m for m in members if not isinstance(m, Contract)]
        if not maps:
            return []
        candidates: dict[int, int] = {}  # id(value) -> slot
        for k, x in enumerate(slots):
            v = x if type(x) is Value else x.as_value
            if v is not None and id(x) not in ids and v.dtype == np.float64 and v.ndim:
                candidates.setdefault(id(v), k)
        if not candidates:
            return []
        seen: set[int] = set()
        stack = [a.node for a in self.handles()]
        while stack and candidates:
            n = stack.pop()
            if id(n) in seen or id(n) in ids:
                continue  # (what a member reads, it reads in this set)
            seen.add(id(n))
            v = n if type(n) is Value else n.as_value
            if v is not None:
                candidates.pop(id(v), None)
                continue
            stack.extend(n.args())
        for reads in self._reading:  # groups worked out, not yet run (see __init__)
            for n in reads:
                v = n if type(n) is Value else n.as_value
                if v is not None:
                    candidates.pop(id(v), None)
        free = sorted(candidates.values())
        out = []
        for j, m in enumerate(maps):
            for k in free:
                x = slots[k]
                if x.shape == m.shape and m.dtype == np.float64:
                    out.append((j, k))
                    free.remove(k)
                    break
        return out

    def materialize(self, node: Node, name: str | None = None) -> str:
        """Compute ``node`` into a session value (under ``name``, or a fresh one) and return
        the value's name."""
        if self.is_value(node):
            have = self.name_of(node)
            if name is not None and name != have:
                self.sess.values[name] = self.sess.values[have]  # one held value, two names
                return name
            return have
        if isinstance(node, Const):
            raise InternalError("a constant reached materialize")
        if type(node) is not Block and (
            0 in node.shape or (type(node) is not Map and any(0 in x.shape for x in node.args()))
        ):  # (an element-wise operand with an empty axis makes the result empty too)
            # an empty array, or sums over an empty axis: nothing to distribute (a tensor
            # has positive extents), numpy's own answer is zeros of the result's shape
            out = name or f"_a{next(self._counter)}"
            self.sess.put(out, np.zeros(node.shape, node.dtype))
            value = Value(node.shape, node.dtype, out)
            node.as_value = value
            made_value()
            if name is None:
                value.drop = self.sess.values
            return out
        if name is None and self._large_alone(node):  # (an operand: alpha's p @ q)
            self._run_fused([node])
            return self.name_of(node)
        # what this node's group needs as values first
        kind, deps, sig = self._group(node)
        if deps:
            self._reading.append(self._reads(node, deps))
            try:
                for dep in deps:
                    self.materialize(dep)
            finally:
                self._reading.pop()
        out = name or f"_a{next(self._counter)}"
        if kind == "region":
            slicing.run(self, node, out, sig)
        elif kind == "host":
            self._host(node, out)
        elif kind == "block":
            self._block(node, out, sig)
        elif kind == "map":
            self._map(node, out, sig)
        else:
            self._kernel(node, out, sig)
        value = Value(node.shape, node.dtype, out)
        node.as_value = value
        made_value()
        if name is None:
            value.drop = self.sess.values  # the session value goes with the node reading it
        return out

    def _reads(self, root: Node, deps: list[Node]) -> list[Node]:
        """What ``root``'s group reads once ``deps`` are values: ``deps``, and the values
        reached from ``root`` through nodes that are not (what it computes inside it; a
        superset of what its signature reads)."""
        out = list(deps)
        seen = {id(d) for d in deps}
        stack = list(root.args())
        while stack:
            n = stack.pop()
            if id(n) in seen or isinstance(n, Const):
                continue
            seen.add(id(n))
            if self.is_value(n):
                out.append(n)
            else:
                stack.extend(n.args())
        return out

    def _group(self, root: Node) -> tuple[str, list[Node], Any]:
        """How ``root``'s group runs (``"host"``, ``"map"`` or ``"kernel"``), the nodes that
        must be values before it runs (contractions inside it, 0-d element-wise nodes,
        transposes under a map, maps under a kernel, and — where the sums would differ from
        numpy's, or the statement would have too many terms — the root's own operands),
        and for a kernel its :func:`~distal.arrays.lower.signature` when it is already
        final (``None``: worked out when it runs)."""
        if type(root) is Block:
            return self._block_group(root)
        if slicing.reads_region(root, self.is_value):  # a slice's group (arrays/slicing.py)
            cuts = list(self._expansion_cuts([root], self._region_leaf).values())
            if cuts:  # made now (the region's walk stops at values), as deps are made
                self._reading.append(self._reads(root, cuts))
                try:
                    for n in cuts:
                        self.materialize(n)
                finally:
                    self._reading.pop()
            return slicing.group(self, root)
        contract = isinstance(root, Contract)
        if contract and is_spmv(root.ins, root.out, root.operands):
            # the sparse lowering fuses nothing: its vector is a value first
            return "kernel", [x for x in root.operands if not self.is_value(x)], None
        if not root.shape and not contract:  # 0-d: computed with numpy
            return "host", [x for x in root.args() if not isinstance(x, Const)], None
        fused = root.fused if type(root) is Map else None
        if fused is not None and fused[4] == values_made():
            # worked out as the nodes were made (see distal.arrays.graph._fused), and no
            # node became a value since: the group is as recorded
            expr, leaves, is_map = fused[0], fused[1], fused[2]
            if is_map:
                deps = [x for x in leaves if not self.is_value(x)]
                if len(deps) > 1:
                    deps.sort(key=_seq)
                return "map", deps, (expr, leaves)
        else:
            is_map = self._is_map(root)
        if is_map:
            # one walk gives the map's expression and what must be values first: its leaves
            # that are not (contractions, 0-d values, transposes: a map reads blocks as they
            # lie); once they are, the same expression reads them
            cuts = self._expansion_cuts([root], self._map_leaf)
            leaf = (lambda n: self._map_leaf(n) or id(n) in cuts) if cuts else self._map_leaf
            sig = map_signature(root, leaf)
            deps = {id(x): x for x in sig[1] if not self.is_value(x)}
            return "map", sorted(deps.values(), key=_seq), sig
        out: list[Node] = []
        seen: set[int] = set()
        stack = list(root.args())
        while stack:  # (a loop, not a recursive closure: that would be a reference cycle)
            n = stack.pop()
            if id(n) in seen or isinstance(n, Const) or self.is_value(n):
                continue
            seen.add(id(n))
            if isinstance(n, Contract | Block | slicing.Slice | slicing.SetSlice) or n.ndim == 0:
                out.append(n)
            elif isinstance(n, Map) and n.op not in KERNEL_OPS:
                out.append(n)  # outside index notation: a map of its own, made first
            else:
                stack.extend(n.args())
        stop = {id(b) for b in out}
        cuts = self._expansion_cuts([root], lambda n: self.is_value(n) or id(n) in stop)
        if cuts:
            out.extend(cuts.values())
            stop |= cuts.keys()
        sig = signature(root, lambda n: self.is_value(n) or id(n) in stop, self.nprocs)
        key = sig[0]
        if term_count(key) > MAX_TERMS or (
            isinstance(root, Contract)
            and (any(self._has_sum(x) for x in root.operands) or not self._cover(key))
        ):
            # cut here: the operands that add become values first (only they would be
            # expanded into several sums), or all of them where that is not enough; a
            # transposed one as the array it transposes, which the kernel reads in another
            # index order (``lr * X.T @ (p - y)`` reads X where it lies: made a value,
            # ``lr * X.T`` would be X moved)
            summing = [x for x in root.operands if self._has_sum(x)]
            cut = summing if isinstance(root, Contract) and summing else list(root.args())
            if cut is summing and term_count(key) <= MAX_TERMS:
                extra = self._cut(cut, stop)
                stop2 = stop | {id(x) for x in extra}
                sig = signature(root, lambda n: self.is_value(n) or id(n) in stop2, self.nprocs)
                if term_count(sig[0]) <= MAX_TERMS and self._cover(sig[0]):
                    out.extend(extra)
                    return "kernel", sorted(dict.fromkeys(out), key=_seq), sig
            out.extend(self._cut(list(root.args()), stop))
            sig = None
        return "kernel", sorted(dict.fromkeys(out), key=_seq), sig

    def _cut(self, xs: list[Node], stop: set[int]) -> list[Node]:
        """The nodes to make values first for operands ``xs`` of a cut group: each as it
        is, a transpose as the array it transposes (read in another index order)."""
        got = []
        for x in xs:
            while type(x) is Transpose and x.as_value is None:
                x = x.operand
            if not isinstance(x, Const) and id(x) not in stop and not self.is_value(x):
                got.append(x)
        return got

    def _cover(self, key: tuple) -> bool:
        """:func:`~distal.arrays.lower.sums_cover`, once per key."""
        got = self._covers.get(key)
        if got is None:
            got = self._covers[key] = sums_cover(key)
        return got

    def _is_map(self, root: Node) -> bool:
        """Whether ``root``'s group is a map: an element-wise tree of one or more dimensions
        with an operation outside index notation in it (above the contractions, 0-d values
        and values it reads)."""
        if not isinstance(root, Map) or root.ndim == 0:
            return False
        stack: list[tuple[Node, bool]] = [(root, False)]
        seen: set[tuple[int, bool]] = set()
        while stack:
            n, under_product = stack.pop()
            if (id(n), under_product) in seen:
                continue
            seen.add((id(n), under_product))
            if isinstance(n, Map) and n.ndim:
                if n.op not in KERNEL_OPS or (under_product and n.op in SUMS):
                    # a product of sums too: index notation would expand it into a sum of
                    # products, which cancels where numpy's order does not ((x - y) * z
                    # as x*z - y*z); numpy's own order is the map's
                    return True
                inner = under_product or n.op == "mul"
                stack.extend((x, inner) for x in n.operands if not self.is_value(x))
            elif isinstance(n, Transpose) and not self.is_value(n):
                stack.extend((x, under_product) for x in n.args())
        return False

    def _has_sum(self, node: Node) -> bool:
        """Whether the element-wise tree of ``node`` (down to values) adds or subtracts:
        a contraction over it would be expanded into several sums (``(x - y).sum()`` as
        ``x.sum() - y.sum()``, which cancels), so it is made a value first."""
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if self.is_value(n) or isinstance(n, Const | Contract | Block) or n.ndim == 0:
                continue
            if isinstance(n, Map) and n.op in SUMS:
                return True
            stack.extend(n.args())
        return False

    def _map_leaf(self, node: Node) -> bool:
        """Where a map's expression stops: values, and what is made a value before it."""
        return (
            self.is_value(node) or node.ndim == 0 or isinstance(node, Contract | Transpose | Block)
        )

    def _expansion_cuts(
        self, roots: list[Node], is_leaf: Callable[[Node], bool]
    ) -> dict[int, Node]:
        """Inner element-wise nodes under ``roots`` to make values first so that no group's
        expression expands past :data:`~distal.arrays.graph.FUSED_MAX` nodes. A group's
        expression is a tree: a node read twice is written twice, so a loop recorded
        without a read that reads its last value twice (``y = y * a + y * b``) would double
        the expression each iteration. Working up from the leaves, a node whose expansion
        (what is under it, down to leaves and nodes already cut) passes the bound is cut: a
        group of its own, read as a value by the groups above it. Empty for most groups (a
        walk of each node once)."""
        size: dict[int, int] = {}
        cuts: dict[int, Node] = {}
        for root in roots:
            stack: list[tuple[Node, bool]] = [(root, False)]
            while stack:
                n, ready = stack.pop()
                if n is not root and id(n) in size:
                    continue
                t = type(n)
                if t not in _WALKED or (n is not root and is_leaf(n)):
                    size[id(n)] = 0  # a leaf: a slot of the expression
                    continue
                if not ready:
                    stack.append((n, True))
                    stack.extend((x, False) for x in n.args() if id(x) not in size)
                    continue
                grown = (t is Map) + sum(size[id(x)] for x in n.args() if id(x) not in cuts)
                if n is root:
                    size[id(n)] = 0 if is_leaf(n) else grown  # (another root's leaf)
                elif grown > FUSED_MAX and t is Map and n.ndim:
                    cuts[id(n)] = n
                    size[id(n)] = 0
                else:
                    size[id(n)] = grown
        return cuts

    def _region_leaf(self, n: Node) -> bool:
        """Where a region group's expression stops (as :func:`distal.arrays.slicing.group`
        walks it): values, 0-d nodes, and what is not a slice, a transpose or an operation
        of index notation."""
        t = type(n)
        if self.is_value(n) or n.ndim == 0:
            return True
        return not (t is slicing.Slice or t is Transpose or (t is Map and n.op in KERNEL_OPS))

    def _map(self, root: Node, out: str, sig: Any = None) -> None:
        """A map group: numpy over each processor's blocks of its operands (laid out by
        :func:`~distal.arrays.lower.map_dist`; what moves is counted as redistribution)."""
        expr, slots = sig if sig is not None else map_signature(root, self.is_value)
        shape = root.shape
        operands = [(self.name_of(x), _map_dist(shape, x.shape)) for x in slots]
        self.sess.map_blocks(
            map_function(expr),
            operands,
            out,
            shape,
            root.dtype,
            _held_dist(len(shape)),
            self.nprocs,
        )

    def _block_group(self, root: Block) -> tuple[str, list[Node], Any]:
        """A block's group: its first operand's element-wise tree fused into it (rows and
        partials modes), its other operands read as they are; the slots not yet values are
        made first."""
        first = root.operands[0] if root.operands else None
        cuts = (
            self._expansion_cuts([first], self._map_leaf)
            if type(first) is Map and first.ndim
            else set()
        )
        w = _Walk((lambda n: self._map_leaf(n) or id(n) in cuts) if cuts else self._map_leaf)
        exprs = []
        for k, x in enumerate(root.operands):
            fuse = k == 0 and root.mode != "boxes" and type(x) is Map and x.ndim > 0
            fuse = fuse and not self.is_value(x)
            if fuse:
                exprs.append(w.map_expr(x, top=True))
            else:  # a slot of its own: what it reads is this operand's (outer(w, w))
                w.slots.append(x)
                exprs.append(("slot", len(w.slots) - 1))
        slots = w.slots
        deps = [x for x in slots if not self.is_value(x) and not isinstance(x, Const)]
        return "block", sorted(dict.fromkeys(deps), key=_seq), (tuple(exprs), slots)

    def _block(self, root: Block, out: str, sig: Any) -> None:
        """A block operation (:mod:`distal.arrays.blocks`) on the session's runtime."""
        exprs, slots = sig
        fn = Pass("block", (root.spec, exprs))  # data: its function is made once per process
        combine = Pass("combine", root.spec) if root.mode == "partials" else None
        needs, work = units(root, exprs, slots, self.nprocs)
        self.sess.blockwise(
            fn,
            [self.name_of(x) for x in slots],
            needs,
            work,
            out,
            root.shape,
            root.dtype,
            self.nprocs,
            combine=combine,
        )

    def _host(self, node: Node, out: str) -> None:
        """A 0-d element-wise node, computed with numpy from its 0-d operands (by the
        session: on Dask on a worker, where the operands are)."""
        args = [
            (False, x.value) if isinstance(x, Const) else (True, self.name_of(x))
            for x in node.args()
        ]
        if isinstance(node, Map):
            fn = numpy_op(node.op)
        elif isinstance(node, Transpose):
            fn = _first
        else:
            raise InternalError(f"no host evaluation of {type(node).__name__}")
        self.sess.scalar_op(fn, args, out, node.dtype)

    def _kernel(self, root: Node, out: str, sig: Any = None) -> None:
        """Run ``root``'s group as one kernel (compiled once per key) into value ``out``."""
        key, slots = sig if sig is not None else signature(root, self.is_value, self.nprocs)
        kernel = self.kernels.get(key)
        if kernel is None:
            kernel = self.kernels[key] = build(key)
            self.compiles += 1
        names = {slot_name(k): self.name_of(x) for k, x in enumerate(slots)}
        names[OUT] = out
        dot_with = None
        if self._dot_of is not None and root is self._dot_of[0]:
            at = [k for k, x in enumerate(slots) if x is self._dot_of[1]]
            dot_with = slot_name(at[0]) if len(at) == 1 else None
            if dot_with is None:
                self._dot_of = None  # (the run will not compute it: the set's pass will)
        if dot_with is None:
            self.sess.run_named(kernel, names)
        else:
            self.sess.run_named(kernel, names, dot_with=dot_with)
        self.kernels_run += 1


#: distributions already spelled, by the shapes they are for (strings made at every map)
_MAP_DISTS: dict[tuple, str] = {}
_HELD_DISTS: dict[int, str] = {}
_DISTS_MAX = 1024


def _map_dist(result: tuple[int, ...], operand: tuple[int, ...]) -> str:
    """:func:`~distal.arrays.lower.map_dist`, remembered."""
    key = (result, operand)
    got = _MAP_DISTS.get(key)
    if got is None:
        got = map_dist(result, operand)
        if len(_MAP_DISTS) < _DISTS_MAX:
            _MAP_DISTS[key] = got
    return got


def _held_dist(ndim: int) -> str:
    """:func:`~distal.arrays.lower.held_dist`, remembered."""
    got = _HELD_DISTS.get(ndim)
    if got is None:
        got = _HELD_DISTS[ndim] = held_dist(ndim)
    return got


def _seq(node: Node) -> int:
    return node.seq


def _first(x: Any) -> Any:
    """The 0-d transpose: the operand itself."""
    return x
