"""The body of the SPMD function: its steps, data movement, leaf calls and output sums,
printed with an :class:`~distal.mlir.spmd_emit.Emitter` from the analysis of
:mod:`distal.mlir.spmd_plan` (see :mod:`distal.mlir.distributed` for the whole module)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distal.errors import NotSupportedYet
from distal.mlir.shard import GRID
from distal.mlir.spmd_emit import Emitter, Program, TType, step_groups, ttype_of
from distal.mlir.spmd_plan import Analysis, Box, Exchange, coords, extents


@dataclass
class State:
    """The values a step reads and leaves: each dense input's buffer, the output's own block
    and its accumulation buffer."""

    buf: dict[str, str]
    own: str
    acc: str


class Steps:
    """Prints the steps of ``a`` into ``e`` for ``prog``."""

    def __init__(self, e: Emitter, a: Analysis, prog: Program, args: dict[str, str]) -> None:
        self.e, self.a, self.prog, self.args = e, a, prog, args
        self.P = e.nprocs
        dense = [t for t in prog.inputs if t not in prog.sparse]
        self.dense = list(dict.fromkeys(dense))
        out = prog.output
        self.own_t = prog.own_type[out]
        accs: list[Box | None] = [b for st in a.steps for b in st.output.acc if b is not None]
        self.acc_t = ttype_of(accs or list(a.own[out]), prog.elem[out], prog.ndim[out])
        self.buf_t: dict[str, TType] = {}
        for t in self.dense:
            boxes = [
                b for st in a.steps for ex in st.exchanges if ex.tensor == t for b in ex.buffers
            ]
            held = [b for b in boxes if b is not None] or list(a.own[t])
            self.buf_t[t] = ttype_of(held, prog.elem[t], prog.ndim[t])
        # what each (step, processor) holds, to place leaf operands in their buffers
        self.held: dict[str, list[tuple[Box | None, ...]]] = {
            t: [next(ex for ex in st.exchanges if ex.tensor == t).buffers for st in a.steps]
            for t in self.dense
        }
        self.acc_box: list[list[Box | None]] = []
        #: per step and processor: whether its accumulation buffer is its owned block (the
        #: flag of its latest OpenOutput; a processor that never opened one has none)
        self.direct: list[list[bool]] = []
        cur: list[Box | None] = [None] * self.P
        flag = [False] * self.P
        for st in a.steps:
            cur = [b if b is not None else c for b, c in zip(st.output.acc, cur, strict=True)]
            flag = [
                d if b is not None else f
                for d, b, f in zip(st.output.direct, st.output.acc, flag, strict=True)
            ]
            self.acc_box.append(list(cur))
            self.direct.append(list(flag))

    # -- the whole body ------------------------------------------------------------------

    def run(self) -> str:
        e, prog = self.e, self.prog
        self.rank = e.op(f"shard.process_linear_index on @{GRID} : index", "rank")
        out = prog.output
        if prog.output_sparse:
            return self.sparse_output()
        own_tbl = e.table([list(_ext(b, prog.ndim[out])) for b in self.a.own[out]], "own")
        sizes = [
            e.lookup(own_tbl, self.rank, e.idx(d))
            for d, s in enumerate(self.own_t.shape)
            if s is None
        ]
        empty = e.op(f"tensor.empty({', '.join(sizes)}) : {self.own_t.text}", "empty")
        z = e.zero_scalar(self.own_t.elem)
        own = e.op(
            f"linalg.fill ins({z} : {self.own_t.elem}) outs({empty} : {self.own_t.text}) "
            f"-> {self.own_t.text}",
            "out",
        )
        buf = {}
        for t in self.dense:
            dyn = [e.idx(0) for s in self.buf_t[t].shape if s is None]
            buf[t] = e.op(f"tensor.empty({', '.join(dyn)}) : {self.buf_t[t].text}", f"{t}_buf")
        if _compatible(self.own_t, self.acc_t):
            acc = e.cast(own, self.own_t, self.acc_t)
        else:
            acc = e.zeros(self.acc_t)
        state = State(buf, own, acc)
        for lo, hi in step_groups(self.a.steps):
            state = self.group(lo, hi, state)
        state = self.finals(state)
        return state.own

    def sparse_output(self) -> str:
        """A sparse output: each processor's stored entries are its one leaf call's result
        (the leaf writes into a ``tensor.empty``); partial sums of entries do not move."""
        e, prog = self.e, self.prog
        calls = [
            [(s, c) for s, st in enumerate(self.a.steps) for c in st.calls[p]]
            for p in range(self.P)
        ]
        if any(len(c) > 1 for c in calls) or any(st.output.kind != "none" for st in self.a.steps):
            raise NotSupportedYet(
                f"sparse output {prog.output!r}: the distributed MLIR export writes one leaf "
                "call per processor whose entries stay where they are computed"
            )
        buf: dict[str, str] = {}
        for t in self.dense:
            dyn = [e.idx(0) for s in self.buf_t[t].shape if s is None]
            buf[t] = e.op(f"tensor.empty({', '.join(dyn)}) : {self.buf_t[t].text}", f"{t}_buf")
        for s, st in enumerate(self.a.steps):
            key = e.op(f"arith.addi {e.idx(s * self.P)}, {self.rank} : index", "key")
            for ex in st.exchanges:
                buf[ex.tensor] = self.exchange(ex, [s], e.idx(s), key, buf[ex.tensor])
        ins = [self._operand(t, buf) for t in prog.inputs]
        types = ", ".join(t.text for t in prog.leaf_in)
        r = e.op(
            f"func.call @{prog.leaf}({', '.join(ins)}) : ({types}) -> {prog.leaf_out.text}", "leaf"
        )
        return e.cast(r, prog.leaf_out, self.own_t)

    def group(self, lo: int, hi: int, state: State) -> State:
        e = self.e
        if hi - lo == 1:
            return self.step(lo, [lo], e.idx(lo), state)
        carried = [t for t in self.dense if self._reads_buffer(t, lo)]
        names = [*carried, "own", "acc"]
        vals = [*(state.buf[t] for t in carried), state.own, state.acc]
        types = [*(self.buf_t[t] for t in carried), self.own_t, self.acc_t]
        s = e.fresh("step")
        iters = [e.fresh(f"{n}_") for n in names]
        res = e.fresh("loop")
        inits = ", ".join(f"{i} = {v}" for i, v in zip(iters, vals, strict=True))
        tys = ", ".join(t.text for t in types)
        e.emit(
            f"{res}:{len(names)} = scf.for {s} = {e.idx(lo)} to {e.idx(hi)} step {e.idx(1)} "
            f"iter_args({inits}) -> ({tys}) {{"
        )
        e.indent += 2
        bufs = {**state.buf, **dict(zip(carried, iters, strict=False))}
        inner = State(bufs, iters[-2], iters[-1])
        inner = self.step(lo, list(range(lo, hi)), s, inner)
        outv = [*(inner.buf[t] for t in carried), inner.own, inner.acc]
        e.emit(f"scf.yield {', '.join(outv)} : {tys}")
        e.indent -= 2
        e.emit("}")
        k = len(carried)
        after = {**state.buf, **{t: f"{res}#{n}" for n, t in enumerate(carried)}}
        return State(after, f"{res}#{k}", f"{res}#{k + 1}")

    def _reads_buffer(self, t: str, lo: int) -> bool:
        """Whether a step from ``lo`` on reads ``t``'s buffer of the step before (a step
        that keeps it, shifts it, or where a processor fetches nothing new)."""
        for st in self.a.steps[lo:]:
            ex = next(x for x in st.exchanges if x.tensor == t)
            if ex.kind in ("keep", "p2p") or (ex.kind == "shift" and ex.base == "buffer"):
                return True
        return False

    # -- one step (or the body of a loop over steps) --------------------------------------

    def step(self, first: int, steps: list[int], s: str, state: State) -> State:
        e = self.e
        key = e.op(
            f"arith.addi {e.op(f'arith.muli {s}, {e.idx(self.P)} : index', 'k')}, "
            f"{self.rank} : index",
            "key",
        )
        buf = dict(state.buf)
        for ex in self.a.steps[first].exchanges:
            buf[ex.tensor] = self.exchange(ex, steps, s, key, buf[ex.tensor])
        acc = self.open(steps, key, state)
        acc = self.leaf(steps, key, buf, acc)
        own, acc = self.flush(steps, key, state.own, acc)
        return State(buf, own, acc)

    def exchange(self, ex: Exchange, steps: list[int], s: str, key: str, cur: str) -> str:
        e, t = self.e, ex.tensor
        bt = self.buf_t[t]
        own_v, own_t = self.args[t], self.prog.own_type[t]
        exs = [next(x for x in self.a.steps[k].exchanges if x.tensor == t) for k in steps]
        if ex.kind == "keep":
            return cur
        if ex.kind == "local":
            return e.cast(own_v, own_t, bt)
        axes = ", ".join(map(str, ex.axes))
        if ex.kind == "broadcast":
            roots = {x.root for x in exs}
            if len(roots) == 1:
                root, rt = ", ".join(map(str, ex.root)), ""
            elif len(ex.axes) == 1 and [x.root[0] for x in exs] == steps:
                root, rt = s, ", index"  # the root is the step (SUMMA)
            else:
                tbl = e.table([list(x.root) for x in exs], f"{t}_root")
                rel = e.op(f"arith.subi {s}, {e.idx(steps[0])} : index", "rel")
                root = ", ".join(e.lookup(tbl, rel, e.idx(k)) for k in range(len(ex.axes)))
                rt = ", index" * len(ex.axes)
            r = e.op(
                f"shard.broadcast {own_v} on @{GRID} grid_axes = [{axes}] root = [{root}] "
                f": ({own_t.text}{rt}) -> {own_t.text}",
                f"{t}_bcast",
            )
            return e.cast(r, own_t, bt)
        if ex.kind == "shift":
            src, st = (own_v, own_t) if ex.base == "own" else (cur, bt)
            r = e.op(
                f"shard.shift {src} on @{GRID} grid_axes = [{axes}] shift_axis = {ex.axes[0]} "
                f"offset = {-ex.offset} rotate : {st.text} -> {st.text}",
                f"{t}_shift",
            )
            return e.cast(r, st, bt)
        if ex.kind == "all_gather":
            group = 1
            for m in ex.axes:
                group *= e.grid[m]
            shape = list(own_t.shape)
            shape[ex.dim] = None if shape[ex.dim] is None else shape[ex.dim] * group
            gt = TType(tuple(shape), own_t.elem)
            r = e.op(
                f"shard.all_gather {own_v} on @{GRID} grid_axes = [{axes}] gather_axis = {ex.dim} "
                f": {own_t.text} -> {gt.text}",
                f"{t}_gather",
            )
            return e.cast(r, gt, bt)
        return self.p2p(t, exs, steps, key, cur)

    def p2p(self, t: str, exs: Sequence[Exchange], steps: list[int], key: str, cur: str) -> str:
        """Each (step, processor) case: its sends, then its buffer from its own pieces and
        the pieces it receives."""
        e, prog = self.e, self.prog
        bt = self.buf_t[t]
        own_v, own_t = self.args[t], prog.own_type[t]
        res = e.fresh(f"{t}_p2p")
        e.emit(f"{res} = scf.index_switch {key} -> {bt.text}")
        for s, ex in zip(steps, exs, strict=True):
            for p in range(self.P):
                e.emit(f"case {s * self.P + p} {{")
                e.indent += 2
                own_box = self.a.own[t][p]
                ot = TType(_ext(own_box, prog.ndim[t]), own_t.elem)
                ov = e.cast(own_v, own_t, ot)
                for dst, b in ex.send[p] if ex.send else ():
                    assert own_box is not None
                    piece, pt = e.slice(ov, ot, _rel(b, own_box), extents(b))
                    e.send(piece, pt, dst)
                box = ex.buffers[p]
                if box is not None and ex.recv and ex.recv[p]:
                    ty = TType(extents(box), bt.elem)
                    tiled = sum(_volume(b) for _, b in ex.recv[p]) == _volume(box)
                    v = e.op(f"tensor.empty() : {ty.text}", "empty") if tiled else e.zeros(ty)
                    for src, b in ex.recv[p]:
                        pt = TType(extents(b), bt.elem)
                        if src == p:
                            assert own_box is not None
                            piece, pt = e.slice(ov, ot, _rel(b, own_box), extents(b))
                        else:
                            piece = e.recv(pt, src)
                        v = e.insert(piece, pt, v, ty, _rel(b, box))
                    out = e.cast(v, ty, bt)
                elif box is not None and box == own_box:
                    out = e.cast(ov, ot, bt)
                else:
                    out = cur
                e.emit(f"scf.yield {out} : {bt.text}")
                e.indent -= 2
                e.emit("}")
        e.yield_case("default", cur, bt.text)
        return res

    # -- the output ----------------------------------------------------------------------

    def open(self, steps: list[int], key: str, state: State) -> str:
        """The accumulation buffers of the steps that open one: the own block (direct) or a
        zero partial block."""
        e = self.e
        outs = [self.a.steps[k].output for k in steps]
        if all(b is None for o in outs for b in o.acc):
            return state.acc
        if all(d or b is None for o in outs for d, b in zip(o.direct, o.acc, strict=True)):
            # every opening processor accumulates into its own block, so acc is own
            return e.cast(state.own, self.own_t, self.acc_t)
        res = e.fresh("acc")
        e.emit(f"{res} = scf.index_switch {key} -> {self.acc_t.text}")
        for s, o in zip(steps, outs, strict=True):
            for p in range(self.P):
                if o.acc[p] is None:
                    continue
                e.emit(f"case {s * self.P + p} {{")
                e.indent += 2
                if o.direct[p]:
                    v = e.cast(state.own, self.own_t, self.acc_t)
                else:
                    ty = TType(extents(o.acc[p]), self.acc_t.elem)  # type: ignore[arg-type]
                    v = e.cast(e.zeros(ty), ty, self.acc_t)
                e.emit(f"scf.yield {v} : {self.acc_t.text}")
                e.indent -= 2
                e.emit("}")
        e.yield_case("default", state.acc, self.acc_t.text)
        return res

    def leaf(self, steps: list[int], key: str, buf: dict[str, str], acc: str) -> str:
        e, prog = self.e, self.prog
        if self._direct(steps):
            ins = [self._operand(t, buf) for t in prog.inputs]
            call = self._call(ins, e.cast(acc, self.acc_t, prog.leaf_out))
            return e.cast(call, prog.leaf_out, self.acc_t)
        res = e.fresh("acc")
        e.emit(f"{res} = scf.index_switch {key} -> {self.acc_t.text}")
        for s in steps:
            for p in range(self.P):
                calls = self.a.steps[s].calls[p]
                if not calls:
                    continue
                e.emit(f"case {s * self.P + p} {{")
                e.indent += 2
                at_box = self.acc_box[s][p]
                if at_box is None:
                    raise NotSupportedYet(
                        f"processor {p} computes at step {s} with no output block"
                    )
                at = TType(extents(at_box), self.acc_t.elem)
                v = e.cast(acc, self.acc_t, at)
                for c in calls:
                    ins = []
                    for k, t in enumerate(prog.inputs):
                        if t in prog.sparse:
                            ins.append(self._operand(t, buf))
                            continue
                        hb = self.held[t][s][p]
                        ob = c.inputs[k]
                        assert hb is not None
                        assert ob is not None
                        ht = TType(extents(hb), self.buf_t[t].elem)
                        hv = e.cast(buf[t], self.buf_t[t], ht)
                        piece, pt = e.slice(hv, ht, _rel(ob, hb), extents(ob))
                        ins.append(e.cast(piece, pt, prog.leaf_in[k]))
                    assert c.output is not None
                    part, pt = e.slice(v, at, _rel(c.output, at_box), extents(c.output))
                    r = self._call(ins, e.cast(part, pt, prog.leaf_out))
                    v = e.insert(e.cast(r, prog.leaf_out, pt), pt, v, at, _rel(c.output, at_box))
                e.emit(f"scf.yield {e.cast(v, at, self.acc_t)} : {self.acc_t.text}")
                e.indent -= 2
                e.emit("}")
        e.yield_case("default", acc, self.acc_t.text)
        return res

    def _direct(self, steps: list[int]) -> bool:
        for s in steps:
            st = self.a.steps[s]
            for p, cs in enumerate(st.calls):
                if len(cs) != 1:
                    return False
                for k, t in enumerate(self.prog.inputs):
                    if t not in self.prog.sparse and cs[0].inputs[k] != self.held[t][s][p]:
                        return False
                if cs[0].output != self.acc_box[s][p]:
                    return False
        return True

    def _operand(self, t: str, buf: dict[str, str]) -> str:
        k = self.prog.inputs.index(t)
        if t in self.prog.sparse:
            return self.args[t]
        return self.e.cast(buf[t], self.buf_t[t], self.prog.leaf_in[k])

    def _call(self, ins: list[str], out: str) -> str:
        prog = self.prog
        types = ", ".join(t.text for t in (*prog.leaf_in, prog.leaf_out))
        return self.e.op(
            f"func.call @{prog.leaf}({', '.join([*ins, out])}) : ({types}) -> {prog.leaf_out.text}",
            "leaf",
        )

    def flush(self, steps: list[int], key: str, own: str, acc: str) -> tuple[str, str]:
        """The partial sums leaving at the end of the step, and the own block after it."""
        e = self.e
        outs = [self.a.steps[k].output for k in steps]
        kind = outs[0].kind
        all_direct = all(all(self.direct[k]) for k in steps)
        if kind == "none" and all_direct:
            return e.cast(acc, self.acc_t, self.own_t), acc
        if kind == "reduce":
            o = outs[0]
            axes = ", ".join(map(str, o.axes))
            last = steps[-1] == len(self.a.steps) - 1
            fin = self.a.finals
            if (
                last
                and len(steps) == 1
                and fin.kind == "broadcast"
                and fin.axes == o.axes
                and fin.root == o.root
            ):
                r = e.op(
                    f"shard.all_reduce {acc} on @{GRID} grid_axes = [{axes}] "
                    f": {self.acc_t.text} -> {self.acc_t.text}",
                    "allred",
                )
                self.a.finals = type(fin)()  # the final copies are the all-reduce's
                return e.cast(r, self.acc_t, self.own_t), r
            root = ", ".join(map(str, o.root))
            r = e.op(
                f"shard.reduce {acc} on @{GRID} grid_axes = [{axes}] root = [{root}] "
                f": ({self.acc_t.text}) -> {self.acc_t.text}",
                "red",
            )
            roots = [
                p for p in range(self.P) if tuple(coords(p, e.grid)[m] for m in o.axes) == o.root
            ]
            return self._pick(
                steps, key, {p: e.cast(r, self.acc_t, self.own_t) for p in roots}, own
            ), r
        if kind == "reduce_scatter":
            o = outs[0]
            axes = ", ".join(map(str, o.axes))
            r = e.op(
                f"shard.reduce_scatter {acc} on @{GRID} grid_axes = [{axes}] "
                f"scatter_axis = {o.dim} "
                f": {self.acc_t.text} -> {self.own_t.text}",
                "rs",
            )
            return e.add(own, r, self.own_t), acc
        # point to point (or a mix of direct and partial blocks without messages)
        res = e.fresh("own")
        e.emit(f"{res} = scf.index_switch {key} -> {self.own_t.text}")
        out = self.prog.output
        for s, o in zip(steps, outs, strict=True):
            for p in range(self.P):
                e.emit(f"case {s * self.P + p} {{")
                e.indent += 2
                ob = self.a.own[out][p]
                ot = TType(_ext(ob, self.prog.ndim[out]), self.own_t.elem)
                v = e.cast(
                    acc if self.direct[s][p] else own,
                    self.acc_t if self.direct[s][p] else self.own_t,
                    ot,
                )
                ab = self.acc_box[s][p]
                if o.kind == "p2p" and ab is not None:
                    at = TType(extents(ab), self.acc_t.elem)
                    av = e.cast(acc, self.acc_t, at)
                    for dst, b in o.send[p]:
                        piece, pt = e.slice(av, at, _rel(b, ab), extents(b))
                        e.send(piece, pt, dst)
                    for b in o.local[p]:
                        assert ob is not None
                        piece, pt = e.slice(av, at, _rel(b, ab), extents(b))
                        old, _ = e.slice(v, ot, _rel(b, ob), extents(b))
                        v = e.insert(e.add(old, piece, pt), pt, v, ot, _rel(b, ob))
                if o.kind == "p2p":
                    for src, b in o.recv[p]:
                        assert ob is not None
                        pt = TType(extents(b), self.own_t.elem)
                        piece = e.recv(pt, src)
                        old, _ = e.slice(v, ot, _rel(b, ob), extents(b))
                        v = e.insert(e.add(old, piece, pt), pt, v, ot, _rel(b, ob))
                e.emit(f"scf.yield {e.cast(v, ot, self.own_t)} : {self.own_t.text}")
                e.indent -= 2
                e.emit("}")
        e.yield_case("default", own, self.own_t.text)
        return res, acc

    def _pick(self, steps: list[int], key: str, values: dict[int, str], default: str) -> str:
        """The own block: ``values[p]`` on the listed processors, ``default`` elsewhere."""
        e = self.e
        res = e.fresh("own")
        e.emit(f"{res} = scf.index_switch {self.rank} -> {self.own_t.text}")
        for p, v in sorted(values.items()):
            e.yield_case(f"case {p}", v, self.own_t.text)
        e.yield_case("default", default, self.own_t.text)
        return res

    def finals(self, state: State) -> State:
        e, fin = self.e, self.a.finals
        if fin.kind == "none":
            return state
        if fin.kind == "broadcast":
            axes, root = ", ".join(map(str, fin.axes)), ", ".join(map(str, fin.root))
            r = e.op(
                f"shard.broadcast {state.own} on @{GRID} grid_axes = [{axes}] root = [{root}] "
                f": ({self.own_t.text}) -> {self.own_t.text}",
                "final",
            )
            return State(state.buf, r, state.acc)
        out = self.prog.output
        res = e.fresh("final")
        e.emit(f"{res} = scf.index_switch {self.rank} -> {self.own_t.text}")
        for p in range(self.P):
            if not fin.send[p] and not fin.recv[p]:
                continue
            e.emit(f"case {p} {{")
            e.indent += 2
            ob = self.a.own[out][p]
            ot = TType(_ext(ob, self.prog.ndim[out]), self.own_t.elem)
            v = e.cast(state.own, self.own_t, ot)
            for dst, b in fin.send[p]:
                assert ob is not None
                piece, pt = e.slice(v, ot, _rel(b, ob), extents(b))
                e.send(piece, pt, dst)
            for src, b in fin.recv[p]:
                assert ob is not None
                pt = TType(extents(b), self.own_t.elem)
                v = e.insert(e.recv(pt, src), pt, v, ot, _rel(b, ob))
            e.emit(f"scf.yield {e.cast(v, ot, self.own_t)} : {self.own_t.text}")
            e.indent -= 2
            e.emit("}")
        e.yield_case("default", state.own, self.own_t.text)
        return State(state.buf, res, state.acc)


def _compatible(a: TType, b: TType) -> bool:
    return all(x is None or y is None or x == y for x, y in zip(a.shape, b.shape, strict=True))


def _volume(b: Box) -> int:
    n = 1
    for lo, hi in b:
        n *= hi - lo
    return n


def _ext(b: Box | None, ndim: int) -> tuple[int, ...]:
    return extents(b) if b is not None else (0,) * ndim


def _rel(b: Box, origin: Box) -> list[int]:
    return [lo - o for (lo, _), (o, _) in zip(b, origin, strict=True)]
