"""``kernel.to_mlir(distributed=True, form="global")``: the statement on whole tensors, each
tensor annotated with its sharding (``shard.shard`` as a result and for its users): the
form upstream's ``--shard-partition`` takes.

The function ``@<out>_global`` takes the whole inputs and returns the whole output; its
body is the per-processor export's generics on the full extents (one leaf call over the
whole iteration space), the output starting at zero. Upstream partitions it itself for row
splits (each processor's part is distal's leaf) and reduction splits (the leaf, then
``shard.all_reduce``); it cannot infer a DISTAL schedule (SUMMA's steps, Cannon's shifts),
which the SPMD form carries.
"""

from __future__ import annotations

from typing import Any

from distal.lang.concrete import Statement
from distal.mlir.export import _box_leaf, leaf_function
from distal.mlir.shard import Sharding, grid_text
from distal.mlir.types import element_type


def global_module(
    st: Statement, tensors: dict[str, Any], machine: Any, shardings: dict[str, Sharding]
) -> str:
    """The module of the global form (see the module docstring)."""
    out = st.output
    full = [(0, e) for e in _extents(st)]
    extent, terms, _ = _box_leaf(st, [tuple(full)], 0)
    name = f"{out.name}_global"
    fn = leaf_function(st, tensors, extent, terms, name)
    lines = fn.text().rstrip("\n").split("\n")
    body = [ln for ln in lines if not ln.startswith("//")]
    ret, close = body[-2], body[-1]
    inner = body[1:-2]
    ins = list(fn.inputs)
    o = fn.output
    new = []
    for sh in shardings.values():
        if sh.split_axes:
            new.append(f"  %sharding_{sh.tensor} = {sh.text()}")
    for op in ins:
        sh = shardings[op.name]
        if not sh.split_axes:
            new.append(f"  %{op.name} = tensor.cast %{op.name}_arg : {op.type} to {op.type}")
            continue
        new.append(
            f"  %{op.name}_sharded = shard.shard %{op.name}_arg to %sharding_{op.name} : {op.type}"
        )
        new.append(
            f"  %{op.name} = shard.shard %{op.name}_sharded to %sharding_{op.name} "
            f"annotate_for_users : {op.type}"
        )
    elem = element_type(out.dtype, out.name)
    osh = shardings[o.name]
    if not fn.fresh_output:  # a sparse output's generics write into their own tensor.empty
        new.extend(_init(o, elem, osh))
    res = ret.split()[1]
    tail = []
    if osh.split_axes:
        tail.append(f"  %result_sharded = shard.shard {res} to %sharding_{o.name} : {o.type}")
        tail.append(
            f"  %result = shard.shard %result_sharded to %sharding_{o.name} "
            f"annotate_for_users : {o.type}"
        )
        res = "%result"
    tail.append(f"  return {res} : {o.type}")
    args = ", ".join(f"%{op.name}_arg: {op.type}" for op in ins)
    text = [
        f"// distal: {st.assignment!r} on {machine!r}, whole tensors with their shardings",
        "module {",
        f"  {grid_text(machine)}",
        f"  func.func @{name}({args}) -> {o.type} {{",
        *("  " + ln for ln in [*new, *inner, *tail]),
        f"  {close}",
        "}",
    ]
    return "\n".join(text) + "\n"


def _init(o: Any, elem: str, osh: Sharding) -> list[str]:
    """The output's zero initial value, annotated with its sharding."""
    zero = "0.0" if elem.startswith("f") else "0"
    out = [
        f"  %{o.name}_empty = tensor.empty() : {o.type}",
        f"  %{o.name}_zero = arith.constant {zero} : {elem}",
    ]
    empty = f"%{o.name}_empty"
    if osh.split_axes:  # every value the partitioner meets carries a sharding
        out.append(f"  %{o.name}_e1 = shard.shard {empty} to %sharding_{o.name} : {o.type}")
        out.append(
            f"  %{o.name}_e2 = shard.shard %{o.name}_e1 to %sharding_{o.name} "
            f"annotate_for_users : {o.type}"
        )
        empty = f"%{o.name}_e2"
    out.append(
        f"  %{o.name}_init = linalg.fill ins(%{o.name}_zero : {elem}) "
        f"outs({empty} : {o.type}) -> {o.type}"
    )
    if osh.split_axes:
        out.append(
            f"  %{o.name}_sharded = shard.shard %{o.name}_init to %sharding_{o.name} : {o.type}"
        )
        out.append(
            f"  %{o.name} = shard.shard %{o.name}_sharded to %sharding_{o.name} "
            f"annotate_for_users : {o.type}"
        )
    else:
        out.append(f"  %{o.name} = tensor.cast %{o.name}_init : {o.type} to {o.type}")
    return out


def _extents(st: Statement) -> list[int]:
    """Each statement variable's extent (from the tensors it indexes)."""
    ext: dict[Any, int] = {}
    for acc in [st.assignment.lhs, *(f for t in st.terms for f in t.factors)]:
        for v, n in zip(acc.indices, acc.tensor.shape, strict=True):
            ext.setdefault(v, n)
    return [ext.get(v, 1) for v in st.variables]
