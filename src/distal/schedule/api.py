"""The scheduling language: a loop nest plus relations, changed by pure commands.

Every command validates first, then returns a new :class:`Schedule`; the old one
is unchanged (``dataclasses.replace``). ``repr(schedule)`` prints the commands
as code that rebuilds it.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from distal.distribution.machine import Machine
from distal.distribution.notation import parse_layout
from distal.errors import ScheduleError
from distal.lang.concrete import Statement, concretize
from distal.lang.nodes import IndexVar, Tensor
from distal.schedule.relations import Divide, Fuse, Pos, Relation, Rotate, Split


@dataclass(frozen=True, slots=True, eq=False)
class Level:
    """One ``distribute``: its outer (processor) and inner variables on a machine."""

    vars: tuple[IndexVar, ...]
    outers: tuple[IndexVar, ...]
    inners: tuple[IndexVar, ...]
    machine: Machine


@dataclass(frozen=True, slots=True, eq=False)
class Schedule:
    """A concrete loop nest for one tensor's computation.

    Attributes:
        statement: the concrete statement being scheduled.
        loops: the nest, outermost first.
        relations: how derived variables relate to their parents.
        extent: iterations of every variable, original and derived.
        levels: the ``distribute`` commands applied (outermost level first).
        comm: ``(tensor name, loop variable)`` for each ``communicate``, latest last.
        parallel: loops marked with ``parallelize``.
        hull: tensors communicated with ``exact=False`` (sparse kernels fetch the hull of
            what the pattern references instead of exactly the referenced entries).
        history: the commands, as code, for ``repr``.
    """

    statement: Statement
    loops: tuple[IndexVar, ...]
    relations: tuple[Relation, ...] = ()
    extent: dict[IndexVar, int] = field(default_factory=dict)
    levels: tuple[Level, ...] = ()
    comm: tuple[tuple[str, IndexVar], ...] = ()
    parallel: frozenset[IndexVar] = frozenset()
    history: tuple[str, ...] = ()
    placed: tuple[tuple[str, str, Machine], ...] = ()
    hull: frozenset[str] = frozenset()

    replace = dataclasses.replace

    # -- queries -----------------------------------------------------------------------------

    @property
    def tensor(self) -> Tensor:
        """The output tensor."""
        return self.statement.output

    @property
    def processor_loops(self) -> tuple[IndexVar, ...]:
        """Outer variables of every ``distribute``, outermost first."""
        return tuple(v for lvl in self.levels for v in lvl.outers)

    @property
    def machine(self) -> Machine:
        """The processor grid the computation is distributed over."""
        if self.levels:
            m = self.levels[0].machine
            for lvl in self.levels[1:]:
                m = m.nest(lvl.machine)
            return m
        for t in (self.statement.output, *self.statement.inputs()):
            if t.machine is not None:
                return t.machine
        return Machine(1)

    @property
    def distributions(self) -> dict[str, str | None]:
        """Distribution string of every tensor of the statement (None: all on processor 0)."""
        return {name: d for name, (d, _) in self.layouts().items()}

    def layouts(self) -> dict[str, tuple[str | None, Machine | None]]:
        """``(distribution string, machine)`` of every tensor, ``place`` overriding the tensor's."""
        out = {t.name: (t.dist, t.machine) for t in self.tensors().values()}
        for name, dist, machine in self.placed:
            out[name] = (dist, machine)
        return out

    def tensors(self) -> dict[str, Tensor]:
        """Every tensor of the statement by name, output first."""
        return {t.name: t for t in (self.statement.output, *self.statement.inputs())}

    def comm_var(self, name: str) -> IndexVar | None:
        """The loop at which tensor ``name`` is communicated (None: once per processor)."""
        found = None
        for t, v in self.comm:
            if t == name:
                found = v
        return found

    def __repr__(self) -> str:
        """Code that rebuilds this schedule, given the tensors and their index variables.

        The variables the commands introduce are declared first, so the text can be
        pasted after the computation's definition and edited.
        """
        new = [v for v in self.extent if v not in self.statement.extent]
        body = "".join(f"\n    .{h}" for h in self.history)
        head = ""
        if new:
            names = " ".join(v.name for v in new)
            # a trailing comma only where it is needed: one variable unpacked from the tuple
            targets = ", ".join(v.name for v in new) + ("," if len(new) == 1 else "")
            head = f"{targets} = dl.index_vars({names!r})\n"
        return f"{head}(dl.schedule({self.tensor.name}){body})"

    # -- validation helpers ------------------------------------------------------------------

    def _loop(self, v: Any, cmd: str, what: str = "variable") -> IndexVar:
        if not isinstance(v, IndexVar):
            raise ScheduleError(f"{cmd}: {what} {v!r} is not an index variable")
        if v not in self.loops:
            where = "is not a loop of this nest" if v in self.extent else "is unknown here"
            raise ScheduleError(
                f"{cmd}: {what} {v.name!r} {where}; loops are {[x.name for x in self.loops]}"
            )
        return v

    def _fresh(self, v: Any, cmd: str, taken: set[IndexVar]) -> IndexVar:
        if not isinstance(v, IndexVar):
            raise ScheduleError(f"{cmd}: new variable {v!r} is not an index variable")
        if v in self.extent or v in taken:
            raise ScheduleError(f"{cmd}: variable {v.name!r} is already used in this schedule")
        taken.add(v)
        return v

    def _serial(self, v: IndexVar, cmd: str) -> None:
        if v in self.processor_loops:
            raise ScheduleError(f"{cmd}: {v.name!r} is a processor loop made by distribute")

    @staticmethod
    def _positive(x: Any, cmd: str, what: str) -> int:
        if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x <= 0:
            raise ScheduleError(f"{cmd}: {what} must be a positive integer, got {x!r}")
        return int(x)

    def _moved_comm(self, old: dict[IndexVar, IndexVar]) -> tuple[tuple[str, IndexVar], ...]:
        """Communication at a replaced loop moves to the loop that keeps its granularity.

        A tensor communicated at ``v`` is fetched per iteration of ``v``; after ``v``
        becomes ``(outer, inner)`` an iteration of ``v`` is one of ``inner``.
        """
        return tuple((t, old.get(v, v)) for t, v in self.comm)

    def _replace_loop(self, v: IndexVar, new: Sequence[IndexVar]) -> tuple[IndexVar, ...]:
        k = self.loops.index(v)
        return (*self.loops[:k], *new, *self.loops[k + 1 :])

    # -- commands ----------------------------------------------------------------------------

    def split(self, v: IndexVar, outer: IndexVar, inner: IndexVar, size: int) -> Schedule:
        """Strip-mine ``v``: ``inner`` runs ``size`` iterations, ``outer`` ``ceil(N/size)``."""
        cmd = "split"
        self._loop(v, cmd)
        self._serial(v, cmd)
        size = self._positive(size, cmd, "size")
        taken: set[IndexVar] = set()
        self._fresh(outer, cmd, taken)
        self._fresh(inner, cmd, taken)
        n = self.extent[v]
        ext = {**self.extent, outer: -(-n // size), inner: size}
        return self.replace(
            loops=self._replace_loop(v, (outer, inner)),
            relations=(*self.relations, Split(v, outer, inner, size)),
            extent=ext,
            comm=self._moved_comm({v: inner}),
            history=(*self.history, f"split({v}, {outer}, {inner}, {size})"),
        )

    def divide(self, v: IndexVar, outer: IndexVar, inner: IndexVar, parts: int) -> Schedule:
        """Cut ``v`` into ``parts``: ``outer`` runs ``parts``, ``inner`` ``ceil(N/parts)``."""
        cmd = "divide"
        self._loop(v, cmd)
        self._serial(v, cmd)
        parts = self._positive(parts, cmd, "parts")
        taken: set[IndexVar] = set()
        self._fresh(outer, cmd, taken)
        self._fresh(inner, cmd, taken)
        n = self.extent[v]
        ext = {**self.extent, outer: parts, inner: -(-n // parts)}
        return self.replace(
            loops=self._replace_loop(v, (outer, inner)),
            relations=(*self.relations, Divide(v, outer, inner, parts)),
            extent=ext,
            comm=self._moved_comm({v: inner}),
            history=(*self.history, f"divide({v}, {outer}, {inner}, {parts})"),
        )

    def reorder(self, vars: Sequence[IndexVar]) -> Schedule:
        """Give the listed loops this order, in the positions they occupy now."""
        cmd = "reorder"
        if isinstance(vars, IndexVar) or not isinstance(vars, Sequence) or not vars:
            raise ScheduleError(f"{cmd}: expected a non-empty list of loop variables, got {vars!r}")
        for v in vars:
            self._loop(v, cmd)
            self._serial(v, cmd)
        if len(set(vars)) != len(vars):
            raise ScheduleError(f"{cmd}: a variable is listed twice in {list(vars)}")
        slots = sorted(self.loops.index(v) for v in vars)
        loops = list(self.loops)
        for pos, v in zip(slots, vars, strict=True):
            loops[pos] = v
        names = ", ".join(v.name for v in vars)
        return self.replace(loops=tuple(loops), history=(*self.history, f"reorder([{names}])"))

    def distribute(
        self,
        vars: Sequence[IndexVar],
        outers: Sequence[IndexVar],
        inners: Sequence[IndexVar],
        machine: Machine,
    ) -> Schedule:
        """Divide each ``vars[d]`` into ``machine.shape[d]`` parts, one per processor coordinate.

        The nest becomes ``outers..., inners...``, then the other loops in their
        previous order; iteration ``(outers...)`` runs on the processor with those
        coordinates. A second ``distribute`` (on loops below the first one's, onto
        the next level of a hierarchical machine) nests a level: its outers follow
        the first level's, and a processor's coordinates are all levels' outers.
        """
        cmd = "distribute"
        if not isinstance(machine, Machine):
            raise ScheduleError(f"{cmd}: {machine!r} is not a dl.Machine")
        for what, seq in (("vars", vars), ("outers", outers), ("inners", inners)):
            if isinstance(seq, IndexVar) or not isinstance(seq, Sequence):
                raise ScheduleError(f"{cmd}: {what} must be a list of index variables")
            if len(seq) != machine.ndim:
                raise ScheduleError(
                    f"{cmd}: {len(seq)} {what} {list(seq)} for a machine of rank {machine.ndim} "
                    f"{machine.shape}; give one per machine dimension"
                )
        for v in vars:
            self._loop(v, cmd)
            self._serial(v, cmd)
        if len(set(vars)) != len(vars):
            raise ScheduleError(f"{cmd}: a variable is listed twice in {list(vars)}")
        taken: set[IndexVar] = set()
        for v in (*outers, *inners):
            self._fresh(v, cmd, taken)
        ext = dict(self.extent)
        rels = list(self.relations)
        for o, g in zip(outers, machine.shape, strict=True):
            ext[o] = g
        for v, o, i, g in zip(vars, outers, inners, machine.shape, strict=True):
            ext[i] = -(-self.extent[v] // g)
            rels.append(Divide(v, o, i, g))
        procs = self.processor_loops
        rest = tuple(x for x in self.loops if x not in vars and x not in procs)
        level = Level(tuple(vars), tuple(outers), tuple(inners), machine)
        fmt = lambda xs: "[" + ", ".join(x.name for x in xs) + "]"  # noqa: E731
        return self.replace(
            loops=(*procs, *outers, *inners, *rest),
            relations=tuple(rels),
            extent=ext,
            levels=(*self.levels, level),
            comm=self._moved_comm(dict(zip(vars, inners, strict=True))),
            history=(
                *self.history,
                f"distribute({fmt(vars)}, {fmt(outers)}, {fmt(inners)}, {_code(machine)})",
            ),
        )

    def rotate(self, target: IndexVar, by: Sequence[IndexVar], result: IndexVar) -> Schedule:
        """Replace ``target`` by ``result`` with ``target = (result + sum(by)) mod extent``."""
        cmd = "rotate"
        self._loop(target, cmd, "target")
        self._serial(target, cmd)
        if isinstance(by, IndexVar):
            by = [by]
        if not isinstance(by, Sequence) or not by:
            raise ScheduleError(f"{cmd}: 'by' must be a non-empty list of processor loops")
        for b in by:
            self._loop(b, cmd, "'by' variable")
            if b not in self.processor_loops:
                raise ScheduleError(
                    f"{cmd}: 'by' variable {b.name!r} is not a processor loop; rotate by the "
                    "outer variables of distribute"
                )
        self._fresh(result, cmd, set())
        ext = {**self.extent, result: self.extent[target]}
        names = ", ".join(b.name for b in by)
        return self.replace(
            loops=self._replace_loop(target, (result,)),
            relations=(*self.relations, Rotate(target, tuple(by), result)),
            extent=ext,
            comm=self._moved_comm({target: result}),
            history=(*self.history, f"rotate({target}, [{names}], {result})"),
        )

    def communicate(
        self, tensors: Tensor | str | Sequence[Tensor | str], v: IndexVar, exact: bool = True
    ) -> Schedule:
        """At each iteration of ``v``, fetch the box of each tensor that the loops inside touch.

        In a sparse kernel a dense tensor reached through a sparse coordinate is fetched
        exactly (only the entries the stored coordinates reference); ``exact=False`` fetches
        the hull of them instead (what SpDISTAL does), for comparison.
        """
        cmd = "communicate"
        items = [tensors] if isinstance(tensors, Tensor | str) else tensors
        if not isinstance(items, Sequence) or not items:
            raise ScheduleError(f"{cmd}: expected a tensor or a list of tensors, got {tensors!r}")
        known = self.tensors()
        names = []
        for t in items:
            name = t.name if isinstance(t, Tensor) else t
            if (
                not isinstance(name, str)
                or name not in known
                or (isinstance(t, Tensor) and known[name] is not t)
            ):
                raise ScheduleError(
                    f"{cmd}: tensor {getattr(t, 'name', t)!r} is not part of this computation; "
                    f"its tensors are {list(known)}"
                )
            names.append(name)
        self._loop(v, cmd)
        if not isinstance(exact, bool):
            raise ScheduleError(f"{cmd}: exact must be True or False, got {exact!r}")
        listed = names[0] if len(names) == 1 else "[" + ", ".join(names) + "]"
        hull = self.hull - set(names) if exact else self.hull | set(names)
        return self.replace(
            comm=(*self.comm, *((n, v) for n in names)),
            hull=frozenset(hull),
            history=(
                *self.history,
                f"communicate({listed}, {v}" + (")" if exact else ", exact=False)"),
            ),
        )

    def fuse(self, outer: IndexVar, inner: IndexVar, fused: IndexVar) -> Schedule:
        """One loop ``fused`` over the ``(outer, inner)`` pairs; ``inner`` must be the loop
        right inside ``outer``. With :meth:`pos` this is how a sparse tensor's stored entries
        of several levels become one loop to cut evenly."""
        cmd = "fuse"
        self._loop(outer, cmd, "outer")
        self._loop(inner, cmd, "inner")
        self._serial(outer, cmd)
        self._serial(inner, cmd)
        k = self.loops.index(outer)
        if k + 1 >= len(self.loops) or self.loops[k + 1] is not inner:
            raise ScheduleError(
                f"{cmd}: {inner.name!r} is not the loop right inside {outer.name!r}; "
                f"loops are {[x.name for x in self.loops]} (reorder first)"
            )
        self._fresh(fused, cmd, set())
        ext = {**self.extent, fused: self.extent[outer] * self.extent[inner]}
        loops = (*self.loops[:k], fused, *self.loops[k + 2 :])
        return self.replace(
            loops=loops,
            relations=(*self.relations, Fuse(outer, inner, fused)),
            extent=ext,
            comm=self._moved_comm({outer: fused, inner: fused}),
            history=(*self.history, f"fuse({outer}, {inner}, {fused})"),
        )

    def coords_of(self, v: IndexVar) -> tuple[IndexVar, ...]:
        """The statement variables a loop stands for, outermost first (through ``fuse``)."""
        for r in self.relations:
            if isinstance(r, Fuse) and r.fused is v:
                return (*self.coords_of(r.outer), *self.coords_of(r.inner))
        return (v,)

    def pos(self, v: IndexVar, position: IndexVar, tensor: Tensor | str) -> Schedule:
        """Iterate loop ``v`` over the stored positions of ``tensor`` (a sparse access).

        ``v`` is a statement variable or a ``fuse`` of them, and its variables must be a
        prefix of ``tensor``'s storage order (CSR: ``i`` or ``(i, j)``). ``position`` then
        runs over the stored entries of those levels in storage order; its extent is the
        tensor's number of stored entries there, known when the kernel is bound to inputs
        (the schedule records the dense extent as an upper bound). ``distribute``,
        ``communicate`` and ``parallelize`` work on it as on any loop.
        """
        cmd = "pos"
        self._loop(v, cmd)
        self._serial(v, cmd)
        name = tensor.name if isinstance(tensor, Tensor) else tensor
        known = self.tensors()
        if not isinstance(name, str) or name not in known:
            raise ScheduleError(
                f"{cmd}: tensor {getattr(tensor, 'name', tensor)!r} is not part of this "
                f"computation; its tensors are {list(known)}"
            )
        t = known[name]
        if t.format.is_dense:
            raise ScheduleError(
                f"{cmd}: tensor {name!r} is dense; pos iterates the stored entries of a sparse "
                "access (give the tensor a sparse format)"
            )
        coords = self.coords_of(v)
        access = next((a for a in self.statement_accesses() if a.tensor is t), None)
        if access is None or name == self.tensor.name:
            raise ScheduleError(f"{cmd}: tensor {name!r} is not read by this computation")
        storage = tuple(access.indices[d] for d in t.format.order)
        if storage[: len(coords)] != coords:
            raise ScheduleError(
                f"{cmd}: loop {v.name!r} stands for {[c.name for c in coords]}, which is not a "
                f"prefix of tensor {name!r}'s storage order {[c.name for c in storage]}"
            )
        self._fresh(position, cmd, set())
        ext = {**self.extent, position: self.extent[v]}
        return self.replace(
            loops=self._replace_loop(v, (position,)),
            relations=(*self.relations, Pos(v, position, name, coords)),
            extent=ext,
            comm=self._moved_comm({v: position}),
            history=(*self.history, f"pos({v}, {position}, {name})"),
        )

    def statement_accesses(self) -> list[Any]:
        """Every tensor access of the right side, in order."""
        from distal.lang.nodes import accesses

        return list(accesses(self.statement.assignment.rhs))

    def place(self, tensor: Tensor | str, dist: str, machine: Machine | None = None) -> Schedule:
        """Use distribution ``dist`` on ``machine`` for ``tensor`` in this schedule.

        This is how a schedule carries distributions it chose itself (e.g. for
        tensors declared with ``dist="auto"``); ``machine`` defaults to the
        schedule's machine.
        """
        cmd = "place"
        name = tensor.name if isinstance(tensor, Tensor) else tensor
        known = self.tensors()
        if name not in known:
            raise ScheduleError(f"{cmd}: tensor {name!r} is not part of this computation")
        m = machine if machine is not None else self.machine
        if not isinstance(m, Machine):
            raise ScheduleError(f"{cmd}: {m!r} is not a dl.Machine")
        parse_layout(dist, name, known[name].ndim, m)
        return self.replace(
            placed=(*self.placed, (name, dist, m)),
            history=(*self.history, f"place({name}, {dist!r}, {_code(m)})"),
        )

    def parallelize(self, v: IndexVar) -> Schedule:
        """Run loop ``v`` with threads inside a processor (never changes results or traffic).

        The leaf kernel cuts the range of ``v`` (or, for a derived loop, of the statement
        variable it came from) within each leaf box into one chunk per core, run on a thread
        pool with the BLAS threads shared out between the chunks. It pays off where one
        leaf call cannot use every core by itself: einsum-loop or memory-bound leaves
        (TTV, elementwise terms, batched products), or many small BLAS calls. Only output
        variables are cut (each chunk writes its own slice of the output); a summed loop
        runs on one thread, since threading it would need a private output per thread.
        """
        self._loop(v, "parallelize")
        return self.replace(
            parallel=self.parallel | {v}, history=(*self.history, f"parallelize({v})")
        )


def _code(m: Machine) -> str:
    """A machine as code: ``dl.Machine(2, 2).nest(dl.Machine(2))``."""
    return "dl." + repr(m).replace(".nest(Machine", ".nest(dl.Machine")


def schedule(t: Tensor) -> Schedule:
    """The default loop nest of ``t``'s computation (left-side variables first)."""
    if not isinstance(t, Tensor):
        raise ScheduleError(f"schedule() takes the output tensor, got {t!r}")
    if t.assignment is None:
        raise ScheduleError(
            f"tensor {t.name!r} has no computation; define it first, e.g. {t.name}[i] = ..."
        )
    st = concretize(t.assignment)
    return Schedule(st, st.variables, extent=dict(st.extent))
