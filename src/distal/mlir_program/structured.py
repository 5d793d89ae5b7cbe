"""One result of a structured ``linalg`` op of an imported graph, recorded as array
operations: a contraction as ``einsum`` s, anything else element-wise over the loop space
(see :mod:`distal.mlir_program.body`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from distal.errors import NotationError, NotSupportedYet
from distal.mlir_program import ops
from distal.mlir_program.body import (
    BodyEval,
    Val,
    depends_on,
    from_loop_space,
    map_results,
    to_loop_space,
    yielded,
)
from distal.mlir_program.function import (
    _combine_init,
    _combine_kind,
    _op_name,
    _other_operand,
    _tensor_type,
)

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def record(run: Any, op: Any, j: int) -> Val:
    """Result ``j`` of ``op`` (see the module docstring)."""
    name = _op_name(op)
    what = f"{name} (result {j})" if len(op.results) > 1 else name
    maps = [m.data for m in op.get_indexing_maps().data]
    results = [map_results(m, what) for m in maps]
    n = maps[0].num_dims if maps else 0
    iters = [str(t.data).rsplit(".", 1)[-1].lower() for t in op.get_iterator_types().data]
    nins = len(op.inputs)
    block = op.regions[0].block
    ins = [
        Val((), np.dtype(type(run.consts[v])), fill=run.consts[v])
        if v in run.consts
        else run.get(v, what)
        for v in op.inputs
    ]
    init = run.get(op.outputs[j], what)
    shape, dtype = _tensor_type(op.results[j].type, what)
    extents = _extents(
        results, [*(v.shape for v in ins), *(run.get(o, what).shape for o in op.outputs)], n, what
    )
    y = yielded(op)[j]
    outs = list(block.args[nins:])
    out = outs[j]
    others = set(outs) - {out}
    if depends_on(y, others):
        raise NotSupportedYet(f"{what}: its value reads another result's running value")
    if _reads_index(y):
        raise NotSupportedYet(f"{what}: its value reads loop indices (linalg.index)")
    red = [d for d in range(n) if iters[d] == "reduction"]
    par = [d for d in range(n) if iters[d] != "reduction"]
    out_map = results[nins + j]
    if red:
        kind = _combine_kind(y, out, what)
        e = _other_operand(y, out)
        if depends_on(e, {out}):
            raise NotSupportedYet(f"{what}: a reduction reading its running value twice")
        poly = _polynomial(e, list(block.args[:nins]), run.consts) if kind == "sum" else None
        if poly is not None:
            r = _contract(run, poly, ins, results[:nins], out_map, extents, what)
        else:
            args = {
                block.args[k]: to_loop_space(run.operand(ins[k], what), results[k], n, what)
                for k in range(nins)
            }
            f = BodyEval(op, args, run.consts, what)(e)
            r = _reduce(kind, f, red, par, extents, run, what)
            r = from_loop_space(r, par, out_map, what)
        value = _combine_init(run, kind, r, init, what)
    else:
        args = {
            block.args[k]: to_loop_space(run.operand(ins[k], what), results[k], n, what)
            for k in range(nins)
        }
        if depends_on(y, {out}):
            args[out] = to_loop_space(run.operand(init, what), out_map, n, what)
        f = BodyEval(op, args, run.consts, what)(y)
        value = from_loop_space(f, list(range(n)), out_map, what)
    if not hasattr(value, "shape") or isinstance(value, np.generic):
        return Val(shape, dtype, fill=dtype.type(value).item())
    if np.dtype(value.dtype) != dtype:
        value = ops.astype(value, dtype, what)
    return Val(shape, dtype, arr=value)


def _extents(results: list, shapes: list[tuple[int, ...]], n: int, what: str) -> list[int]:
    ext = [0] * n
    for res, shape in zip(results, shapes, strict=True):
        if len(res) != len(shape):
            raise NotationError(
                f"{what}: an indexing map has {len(res)} results for an operand of shape {shape}"
            )
        for (kind, k), s in zip(res, shape, strict=True):
            if kind == "dim":
                if ext[k] and ext[k] != s:
                    raise NotationError(f"{what}: loop d{k} has extents {ext[k]} and {s}")
                ext[k] = s
    return ext


def _reads_index(y: Any) -> bool:
    stack, seen = [y], set()
    while stack:
        v = stack.pop()
        owner = getattr(v, "owner", None)
        if owner is None or not hasattr(owner, "operands") or id(owner) in seen:
            continue
        seen.add(id(owner))
        if _op_name(owner) == "linalg.index":
            return True
        stack.extend(owner.operands)
    return False


def _reduce(
    kind: str, f: Any, red: list[int], par: list[int], ext: list[int], run: Any, what: str
) -> Any:
    """``f`` (over the loop space, maybe broadcast) reduced over the loops ``red``."""
    count = math.prod(ext[d] for d in red)
    if not hasattr(f, "shape") or isinstance(f, np.generic):
        return f * count if kind == "sum" else f
    full = tuple(ext[d] if d in red else f.shape[d] for d in range(len(ext)))
    if tuple(f.shape) != full:
        f = ops.broadcast_to(f, full, run.session, what)
    return ops.reduce(kind, f, tuple(red), what)


def _polynomial(
    e: Any, args: list[Any], consts: dict[Any, Any]
) -> list[tuple[float, tuple[int, ...]]] | None:
    """``e`` as a sum of products of the inputs ``args`` (coefficient, input numbers), or
    None when it is not one."""
    memo: dict[Any, Any] = {}

    def go(v: Any) -> Any:
        if v in memo:
            return memo[v]
        if v in args:
            r = [(1.0, (args.index(v),))]
        elif v in consts:
            r = [(float(consts[v]), ())]
        else:
            owner = getattr(v, "owner", None)
            if owner is None or not hasattr(owner, "operands"):
                return None
            name = _op_name(owner)
            if name == "arith.constant":
                from distal.mlir_program.function import scalar_constant

                r = [(float(scalar_constant(owner)), ())]
            else:
                xs = [go(x) for x in owner.operands]
                if any(x is None for x in xs):
                    return None
                if name in ("arith.addf", "arith.addi"):
                    r = xs[0] + xs[1]
                elif name in ("arith.subf", "arith.subi"):
                    r = xs[0] + [(-c, m) for c, m in xs[1]]
                elif name in ("arith.mulf", "arith.muli"):
                    r = [(c1 * c2, m1 + m2) for c1, m1 in xs[0] for c2, m2 in xs[1]]
                elif name == "arith.negf":
                    r = [(-c, m) for c, m in xs[0]]
                else:
                    return None
        memo[v] = r
        return r

    got = go(e)
    if got is None:
        return None
    return [(c, m) for c, m in got if c != 0]


def _contract(
    run: Any, poly: list, ins: list[Val], in_maps: list, out_map: list, ext: list[int], what: str
) -> Any:
    """The sum of the monomials ``poly`` over the summed loops, as einsums, laid out by the
    output map."""
    out_loops = [k for kind, k in out_map if kind == "dim"]
    total: Any = 0.0
    for coeff, factors in poly:
        xs, subs = [], []
        for k in factors:
            arr = run.array(ins[k], what)
            res = in_maps[k]
            if any(kind == "const" for kind, _ in res):
                arr = ops.drop_axes(
                    arr, [i for i, (kd, _) in enumerate(res) if kd == "const"], what
                )
            xs.append(arr)
            subs.append("".join(_LETTERS[d] for kind, d in res if kind == "dim"))
        used = {d for s in subs for d in s}
        missing = [d for d in out_loops if _LETTERS[d] not in used]
        if not xs:
            term: Any = coeff * math.prod(ext[d] for d in range(len(ext)) if d not in out_loops)
        else:
            spec = (
                f"{','.join(subs)}->{''.join(_LETTERS[d] for d in out_loops if d not in missing)}"
            )
            term = ops.einsum(spec, *xs)
            extra = math.prod(
                ext[d] for d in range(len(ext)) if d not in out_loops and _LETTERS[d] not in used
            )
            if coeff * extra != 1:
                term = term * (coeff * extra)
            if missing:
                present = [d for d in out_loops if d not in missing]
                gaps = [i for i, d in enumerate(out_loops) if d not in present]
                term = ops.insert_axes(term, gaps, len(out_loops), what)
        total = term if isinstance(total, float) and total == 0.0 else total + term
    if any(kind == "const" for kind, _ in out_map) and hasattr(total, "shape"):
        consts = [i for i, (kind, _) in enumerate(out_map) if kind == "const"]
        total = ops.insert_axes(total, consts, len(out_map), what)
    return total
