"""``distal explain | plot | simulate``: study a configuration without writing Python.

A configuration is an expression, extents, a machine grid and an algorithm:

    distal explain "A(i,j) = B(i,k) * C(k,j)" --n 1024 --machine 2x2 --algorithm cannon
    distal plot "ik,kj->ij" --n 512 --machine 4x4 --algorithm summa --kind traffic -o t.png
    distal simulate "ik,kj->ij" --n 65536 --machine 16x16 --algorithm cannon --network fat-tree-hdr

The expression is index notation (``A(i,j) = B(i,k) * C(k,j) + D(i,j)``) or numpy
einsum subscripts (inputs are then named B, C, D, ... and the output A). The
algorithm is a name from :mod:`distal.algorithms` (its distributions and schedule;
the expression must have the algorithm's form) or ``auto`` (the cost model's
``autoschedule``; ``--dist`` fixes some distributions, the others are chosen).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.errors import DistalUserError, NotationError, NotSupportedYet
from distal.text import time_text


class CliError(DistalUserError):
    """A command-line configuration that cannot be built (names the culprit)."""


# -------------------------------------------------------------------------------------------
# Expressions: index notation or einsum, into accesses and terms
# -------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\d*\.\d+|\d+)|([A-Za-z_]\w*)|(.))")


@dataclass
class Parsed:
    """An expression as plain data: output access, and ``rhs`` as a small tuple tree."""

    out: str
    out_vars: list[str]
    rhs: Any  # ("acc", name, vars) | ("num", x) | ("+"|"-"|"*", a, b) | ("neg", a)
    tensors: dict[str, list[str]]  # name -> index variables (first access)


def _tokens(text: str) -> list[str]:
    out = []
    for num, name, other in _TOKEN.findall(text):
        tok = num or name or other
        if tok.strip():
            out.append(tok)
    return out


def parse_expression(text: str) -> Parsed:
    """Parse ``A(i,j) = B(i,k) * C(k,j)`` or ``"ik,kj->ij"`` (NotationError naming the token)."""
    if "->" in text or ("=" not in text and "," in text):
        return _from_einsum(text)
    toks = _tokens(text)
    pos = 0
    tensors: dict[str, list[str]] = {}

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def take(expected: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if tok is None or (expected is not None and tok != expected):
            got = "the end" if tok is None else repr(tok)
            raise NotationError(f"expected {expected or 'more'} in {text!r}, found {got}")
        pos += 1
        return tok

    def access() -> tuple[str, list[str]]:
        name = take()
        if not (name[0].isalpha() or name[0] == "_"):
            raise NotationError(f"expected a tensor name in {text!r}, found {name!r}")
        idx: list[str] = []
        if peek() == "(":
            take("(")
            while peek() != ")":
                v = take()
                if not v.isidentifier():
                    raise NotationError(f"bad index variable {v!r} in {text!r}")
                idx.append(v)
                if peek() == ",":
                    take(",")
            take(")")
        seen = tensors.setdefault(name, idx)
        if len(seen) != len(idx):
            raise NotationError(f"tensor {name!r} is used with {len(seen)} and {len(idx)} indices")
        return name, idx

    def factor() -> Any:
        tok = peek()
        if tok == "-":
            take("-")
            return ("neg", factor())
        if tok == "(":
            take("(")
            e = expr()
            take(")")
            return e
        if tok is not None and (tok[0].isdigit() or tok[0] == "."):
            return ("num", float(take()))
        name, idx = access()
        return ("acc", name, idx)

    def term() -> Any:
        e = factor()
        while peek() == "*":
            take("*")
            e = ("*", e, factor())
        return e

    def expr() -> Any:
        e = term()
        while peek() in ("+", "-"):
            op = take()
            e = (op, e, term())
        return e

    out, out_vars = access()
    take("=")
    rhs = expr()
    if peek() is not None:
        raise NotationError(f"unexpected {peek()!r} in {text!r}")
    return Parsed(out, out_vars, rhs, tensors)


def _from_einsum(text: str) -> Parsed:
    from distal.lang.einsum import parse_einsum

    left = text.replace(" ", "").partition("->")[0]
    ins, out = parse_einsum(text, [len(s) for s in left.split(",")])
    names = [chr(ord("B") + n) for n in range(len(ins))]
    tensors = {"A": list(out), **{n: list(s) for n, s in zip(names, ins, strict=True)}}
    rhs: Any = ("acc", names[0], list(ins[0]))
    for n, s in zip(names[1:], ins[1:], strict=True):
        rhs = ("*", rhs, ("acc", n, list(s)))
    return Parsed("A", list(out), rhs, tensors)


def product_form(p: Parsed) -> tuple[list[list[str]], list[str]] | None:
    """Index lists of the factors and of the output, for a single product (else None)."""
    facs: list[list[str]] = []

    def walk(e: Any) -> bool:
        if e[0] == "acc":
            facs.append(list(e[2]))
            return True
        return e[0] == "*" and walk(e[1]) and walk(e[2])

    return (facs, list(p.out_vars)) if walk(p.rhs) else None


def canonical(form: tuple[list[list[str]], list[str]]) -> tuple[str, dict[str, str]]:
    """``"ik,kj->ij"`` with variables relabelled a, b, c... by first appearance; the map."""
    names: dict[str, str] = {}
    for v in [*(v for f in form[0] for v in f), *form[1]]:
        names.setdefault(v, chr(ord("a") + len(names)))
    text = ",".join("".join(names[v] for v in f) for f in form[0])
    return text + "->" + "".join(names[v] for v in form[1]), names


def _form_of(spec: str) -> tuple[list[list[str]], list[str]]:
    ins, _, out = spec.partition("->")
    return [list(x) for x in ins.split(",")], list(out)


# -------------------------------------------------------------------------------------------
# Building a kernel: library algorithm or autoschedule
# -------------------------------------------------------------------------------------------

MATMUL = ("row_1d", "summa", "cannon", "pumma", "johnson_3d", "solomonik_25d", "cosma")
OTHERS = {"ttm": "ijk,kl->ijl", "mttkrp": "ijk,jl,kl->il"}


def parse_machine(text: str) -> tuple[int, ...]:
    """``"2x2"`` -> (2, 2); the message says whether the form or an extent is wrong."""
    parts = text.lower().split("x")
    if not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"machine must look like 4, 2x2 or 2x2x2; got {text!r}")
    if any(int(p) < 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"machine {text!r} has an extent of 0; each must be at least 1, e.g. 2x2"
        )
    return tuple(int(p) for p in parts)


def parse_sizes(text: str) -> dict[str, int]:
    """``"i=1024,k=64"`` -> {"i": 1024, "k": 64}."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, val = item.partition("=")
        if not eq or not name.strip().isidentifier() or not val.strip().isdigit():
            raise argparse.ArgumentTypeError(f"sizes look like i=1024,k=64; got {item!r}")
        out[name.strip()] = int(val)
    return out


def _extents(p: Parsed, sizes: dict[str, int], n: int) -> dict[str, int]:
    letters = dict.fromkeys(v for vs in p.tensors.values() for v in vs)
    bad = sorted(set(sizes) - set(letters))
    if bad:
        raise CliError(f"--sizes names {bad[0]!r}, not an index variable of the expression")
    return {v: sizes.get(v, n) for v in letters}


def _library(p: Parsed, name: str, ext: dict[str, int], machine: Any) -> Any:
    try:
        from distal import algorithms
    except ImportError as e:
        raise NotSupportedYet("the algorithm library (distal.algorithms) is not available") from e
    want = "ik,kj->ij" if name in MATMUL else OTHERS.get(name)
    if want is None or not hasattr(algorithms, name):
        known = sorted([*MATMUL, *OTHERS, "auto"])
        raise CliError(f"unknown algorithm {name!r}; choose one of {known}")
    form = product_form(p)
    got, user = canonical(form) if form is not None else ("a sum", {})
    ref, alg = canonical(_form_of(want))
    if got != ref:
        raise CliError(f"algorithm {name!r} computes {want}; the expression's form is {got}")
    label = {c: v for v, c in alg.items()}  # canonical letter -> algorithm's variable
    by_alg = {label[c]: ext[u] for u, c in user.items()}
    fn = getattr(algorithms, name)
    if name in MATMUL:
        return fn(by_alg["i"], by_alg["j"], by_alg["k"], machine=machine)
    return fn((by_alg["i"], by_alg["j"], by_alg["k"]), by_alg["l"], machine=machine)


def _build_tensors(p: Parsed, ext: dict[str, int], machine: Any, dists: dict[str, str]) -> Any:
    import distal as dl

    bad = sorted(set(dists) - set(p.tensors))
    if bad:
        raise CliError(f"--dist names tensor {bad[0]!r}, not in the expression")
    vars_ = {v: dl.index_vars(v)[0] for v in ext}
    T = {
        name: dl.Tensor(
            name, tuple(ext[v] for v in idx), dist=dists.get(name, "auto"), machine=machine
        )
        for name, idx in p.tensors.items()
    }

    def ev(e: Any) -> Any:
        tag = e[0]
        if tag == "acc":
            t = T[e[1]]
            return t[tuple(vars_[v] for v in e[2])] if e[2] else t[()]
        if tag == "num":
            return e[1]
        if tag == "neg":
            return -ev(e[1])
        a, b = ev(e[1]), ev(e[2])
        return a * b if tag == "*" else a + b if tag == "+" else a - b

    out = T[p.out]
    out[tuple(vars_[v] for v in p.out_vars) if p.out_vars else ()] = ev(p.rhs)
    return out


@dataclass
class Config:
    """What the three commands share: the compiled kernel and how it was chosen."""

    kernel: Any
    description: str
    inputs: Callable[[], dict[str, np.ndarray]]


def build(args: argparse.Namespace) -> Config:
    """Compile the configuration the command line describes."""
    import distal as dl

    p = parse_expression(args.expression)
    ext = _extents(p, args.sizes or {}, args.n)
    machine = dl.Machine(*args.machine)
    if args.algorithm == "auto":
        try:
            from distal.cost.autoschedule import autoschedule
        except ImportError as e:
            raise NotSupportedYet(
                "--algorithm auto needs the cost model's autoschedule (distal.cost), "
                "which this installation lacks; name an algorithm instead"
            ) from e
        out = _build_tensors(p, ext, machine, dict(args.dist or []))
        s = autoschedule(out, machine)
        kernel = dl.compile(s)
        shapes = {n: t.shape for n, t in s.tensors().items()}
        rng = np.random.default_rng(0)
        inputs = lambda: {n: rng.standard_normal(shapes[n]) for n in kernel.plan.inputs}  # noqa: E731
        return Config(kernel, f"auto: {s!r}", inputs)
    if args.dist:
        raise CliError("--dist is for --algorithm auto; a library algorithm fixes distributions")
    alg = _library(p, args.algorithm, ext, machine)
    return Config(alg.compile(), repr(alg), alg.inputs)


def _parse_dist(text: str) -> tuple[str, str]:
    name, eq, dist = text.partition("=")
    if not eq or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f'--dist looks like B="xy -> xy"; got {text!r}')
    return name.strip(), dist.strip()


# -------------------------------------------------------------------------------------------
# The commands
# -------------------------------------------------------------------------------------------


def cmd_explain(args: argparse.Namespace) -> int:
    """Print the configuration, the loop nest and the per-processor traffic table."""
    cfg = build(args)
    print(cfg.description)
    print(cfg.kernel.explain(processor=args.processor))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Write one picture: distribution, traffic, timeline (a local run) or simulated."""
    cfg = build(args)
    k, path = cfg.kernel, args.output or f"distal-{args.kind}.png"
    if args.kind == "distribution":
        name = args.tensor or k.plan.output
        k.plot_distribution(name, path)
    elif args.kind == "traffic":
        k.plot_traffic(path, step=args.step)
    elif args.kind == "timeline":
        k.run(cfg.inputs()).plot_timeline(path, machine=k.plan.machine)
    else:
        sim = k.simulate(args.network)
        title = f"simulated on {args.network}: {time_text(sim.seconds)}"
        sim.plot(path, machine=k.plan.machine, title=title)
    print(f"wrote {path}")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate the plan on a network model and print the summary."""
    cfg = build(args)
    sim = cfg.kernel.simulate(args.network, sequential=args.sequential)
    print(cfg.description)
    print(sim.summary())
    if args.plot:
        title = f"simulated on {args.network}: {time_text(sim.seconds)}"
        sim.plot(args.plot, machine=cfg.kernel.plan.machine, title=title)
        print(f"wrote {args.plot}")
    if args.chrome_trace:
        sim.to_chrome_trace(args.chrome_trace)
        print(f"wrote {args.chrome_trace}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("expression", help='e.g. "A(i,j) = B(i,k) * C(k,j)" or "ik,kj->ij"')
    p.add_argument("--n", type=int, default=1024, help="extent of every variable (default 1024)")
    p.add_argument("--sizes", type=parse_sizes, default=None, help="per variable: i=1024,k=64")
    p.add_argument("--machine", type=parse_machine, default=(2, 2), help="grid, e.g. 2x2")
    p.add_argument(
        "--algorithm", default="auto", help=f"one of {', '.join([*MATMUL, *OTHERS])} or auto"
    )
    p.add_argument(
        "--dist", type=_parse_dist, action="append", help='with auto: B="xy -> xy" (repeatable)'
    )


def add_subcommands(sub: Any) -> None:
    """Register ``explain``, ``plot`` and ``simulate`` on the ``distal`` CLI's subparsers."""
    from distal.sim.network import PRESETS

    nets = sorted(PRESETS)
    ex = sub.add_parser("explain", help="print the plan of an expression + algorithm")
    _common(ex)
    ex.add_argument(
        "--processor", type=int, default=None, help="also list this processor's program"
    )
    ex.set_defaults(func=cmd_explain)
    pl = sub.add_parser("plot", help="draw distribution / traffic / timeline pictures")
    _common(pl)
    pl.add_argument(
        "--kind",
        choices=("distribution", "traffic", "timeline", "simulated"),
        default="distribution",
        help="distribution: a tensor's blocks by owner; traffic: words between processors; "
        "timeline: a local run's Gantt chart; simulated: the plan replayed on --network",
    )
    pl.add_argument("--tensor", default=None, help="tensor to draw (distribution; default output)")
    pl.add_argument("--step", type=int, default=None, help="one step's traffic (default all)")
    pl.add_argument("--network", choices=nets, default="fat-tree-edr", help="for --kind simulated")
    pl.add_argument("-o", "--output", default=None, help="PNG/SVG/PDF path")
    pl.set_defaults(func=cmd_plot)
    si = sub.add_parser("simulate", help="simulate the plan on a network model")
    _common(si)
    si.add_argument("--network", choices=nets, default="fat-tree-edr")
    si.add_argument("--sequential", action="store_true", help="the local runtime's order")
    si.add_argument("--plot", default=None, help="write the simulated Gantt chart here")
    si.add_argument("--chrome-trace", default=None, help="write Chrome trace JSON here")
    si.set_defaults(func=cmd_simulate)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the distal command: distal explain|plot|simulate ...")
