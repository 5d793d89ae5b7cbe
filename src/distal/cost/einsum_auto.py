"""``dl.einsum(..., schedule="auto")``: auto-scheduled kernels, pairwise for many operands.

The compiler compiles one statement at a time, so an expression of more than two
operands runs either as **one fused kernel** (every operand in one statement; its
iteration space is the product of all extents) or as a **sequence of pairwise
kernels** whose outputs are intermediates. Both are costed with the same model
(closed-form estimates of the auto-scheduled kernels, summed over the sequence),
and the cheaper runs. Contraction orders: all of them for up to 4 operands, greedy
(cheapest next pair) beyond. An intermediate keeps only the indices that later
operands or the output still use; it is produced with a one-copy ``"auto"``
distribution and the next kernel takes it as given (``dist`` fixed), so each
kernel's plan counts the traffic of reading it where it was left.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.cost.autoschedule import search
from distal.cost.model import MachineParams, load_params
from distal.distribution.machine import Machine
from distal.kernel import compile as compile_kernel
from distal.lang.nodes import Expr, IndexVar, Tensor


@dataclass(frozen=True)
class Operand:
    """An operand of the expression: its subscripts, shape, dtype and where it lives."""

    spec: str
    shape: tuple[int, ...]
    dtype: np.dtype
    dist: str = "auto"
    machine: Machine | None = None


def _statement(
    ops: list[Operand], out: str, extent: dict[str, int], machine: Machine, name: str = "out"
) -> tuple[Tensor, list[Tensor]]:
    var = {c: IndexVar(c) for c in dict.fromkeys(out + "".join(o.spec for o in ops))}
    tensors = [
        Tensor(f"T{n}", o.shape, o.dist, o.machine or machine, o.dtype) for n, o in enumerate(ops)
    ]
    dtype = np.result_type(*(o.dtype for o in ops)) if ops else np.float64
    result = Tensor(name, tuple(extent[c] for c in out), "auto", machine, dtype)
    rhs: Expr = tensors[0][tuple(var[c] for c in ops[0].spec)]
    for t, o in zip(tensors[1:], ops[1:], strict=True):
        rhs = rhs * t[tuple(var[c] for c in o.spec)]
    result[tuple(var[c] for c in out)] = rhs
    return result, tensors


def _kernel_seconds(
    ops: list[Operand], out: str, extent: dict[str, int], machine: Machine, params: MachineParams
) -> float:
    result, _ = _statement(ops, out, extent, machine)
    return search(result, machine, params=params, evaluate="model", shortlist=1)[0].cost.seconds


def _keep(a: str, b: str, rest: list[str], out: str) -> str:
    later = set(out).union(*map(set, rest)) if rest else set(out)
    return "".join(c for c in dict.fromkeys(a + b) if c in later)


def plan_pairs(
    specs: list[str], out: str, extent: dict[str, int], machine: Machine, params: MachineParams
) -> tuple[float, list[tuple[int, int, str]]]:
    """Cheapest pairwise order: ``(modelled seconds, [(i, j, result spec), ...])``.

    Each step contracts operands ``i < j`` of the current list, removes them and
    appends the intermediate (numpy's ``einsum_path`` convention).
    """
    cache: dict[tuple[str, str, str], float] = {}

    def pair_cost(a: str, b: str, res: str) -> float:
        key = (a, b, res)
        if key not in cache:
            shape = lambda s: tuple(extent[c] for c in s)  # noqa: E731
            ops = [
                Operand(a, shape(a), np.dtype(np.float64)),
                Operand(b, shape(b), np.dtype(np.float64)),
            ]
            cache[key] = _kernel_seconds(ops, res, extent, machine, params)
        return cache[key]

    def steps(cur: list[str]) -> list[tuple[int, int, str, list[str]]]:
        out_steps = []
        for i, j in itertools.combinations(range(len(cur)), 2):
            rest = [s for n, s in enumerate(cur) if n not in (i, j)]
            res = out if not rest else _keep(cur[i], cur[j], rest, out)
            out_steps.append((i, j, res, [*rest, res]))
        return out_steps

    def exhaustive(cur: list[str]) -> tuple[float, list[tuple[int, int, str]]]:
        if len(cur) == 1:
            return 0.0, []
        best: tuple[float, list[tuple[int, int, str]]] = (float("inf"), [])
        for i, j, res, nxt in steps(cur):
            c = pair_cost(cur[i], cur[j], res)
            sub, path = exhaustive(nxt)
            if c + sub < best[0]:
                best = (c + sub, [(i, j, res), *path])
        return best

    if len(specs) <= 4:
        return exhaustive(list(specs))
    cur, total, path = list(specs), 0.0, []
    while len(cur) > 1:
        i, j, res, nxt = min(steps(cur), key=lambda x: pair_cost(cur[x[0]], cur[x[1]], x[2]))
        total += pair_cost(cur[i], cur[j], res)
        path.append((i, j, res))
        cur = nxt
    return total, path


#: the kernels of statements run before, by what decides them (operands, output, machine,
#: model): a loop calling ``dl.einsum`` on arrays of the same shapes searches and compiles
#: once, and later calls reuse the kernel's plan (the search and the compile cost 16 ms
#: of a 384^3 TTV's 41, more than numpy's whole 19 ms)
_KERNELS: dict[tuple, tuple[Any, tuple[str, ...], Operand]] = {}
KERNELS_KEPT = 64
#: the choice between one fused kernel (``[]``) and a pairwise order, by the same key: the
#: costing searches both (15 ms for an MTTKRP), and a loop's later calls need neither
_PATHS: dict[tuple, list[tuple[int, int, str]]] = {}


def _run_kernel(
    ops: list[Operand],
    arrays: list,
    out: str,
    extent: dict[str, int],
    machine: Machine,
    params: MachineParams,
) -> tuple[np.ndarray, Operand]:
    key = (tuple(ops), out, machine, params)
    got = _KERNELS.get(key)
    if got is None:
        result, tensors = _statement(ops, out, extent, machine)
        s = search(result, machine, params=params)[0].schedule
        dist, m = s.layouts()[result.name]
        got = (
            compile_kernel(s),
            tuple(t.name for t in tensors),
            Operand(out, result.shape, result.dtype, dist, m),
        )
        while len(_KERNELS) >= KERNELS_KEPT:
            _KERNELS.pop(next(iter(_KERNELS)))
        _KERNELS[key] = got
    kernel, names, produced = got
    value = kernel.run(dict(zip(names, arrays, strict=True))).value
    return value, produced


def einsum_auto(
    ins: list[str],
    out: str,
    arrays: list[np.ndarray],
    machine: Machine,
    params: MachineParams | None = None,
) -> np.ndarray:
    """Evaluate an einsum with auto-scheduled kernels (see the module docstring)."""
    params = params if params is not None else load_params()
    extent = {
        c: n
        for spec, a in zip(ins, arrays, strict=True)
        for c, n in zip(spec, a.shape, strict=True)
    }
    ops = [Operand(s, a.shape, a.dtype) for s, a in zip(ins, arrays, strict=True)]
    if len(ops) <= 2:
        return _run_kernel(ops, arrays, out, extent, machine, params)[0]
    key = (tuple(ops), out, machine, params)
    path = _PATHS.get(key)
    if path is None:
        fused = _kernel_seconds(ops, out, extent, machine, params)
        paired, path = plan_pairs(list(ins), out, extent, machine, params)
        path = [] if fused <= paired else path
        while len(_PATHS) >= KERNELS_KEPT:
            _PATHS.pop(next(iter(_PATHS)))
        _PATHS[key] = path
    if not path:  # one fused kernel
        return _run_kernel(ops, arrays, out, extent, machine, params)[0]
    cur_ops, cur_arrays = list(ops), list(arrays)
    for i, j, res in path:
        value, produced = _run_kernel(
            [cur_ops[i], cur_ops[j]], [cur_arrays[i], cur_arrays[j]], res, extent, machine, params
        )
        cur_ops = [o for n, o in enumerate(cur_ops) if n not in (i, j)] + [produced]
        cur_arrays = [a for n, a in enumerate(cur_arrays) if n not in (i, j)] + [value]
    return cur_arrays[0]
