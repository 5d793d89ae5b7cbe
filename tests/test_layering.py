"""The package's layers, checked from the source: no lower layer reaches up, no import cycles.

The compiler and runtimes (``lang``, ``schedule``, ``distribution``, ``plan``, ``runtime``,
``kernels``) sit below :mod:`distal.kernel` (which ties them together), the cost model
(:mod:`distal.cost`, with the plan simulator :mod:`distal.sim`, which runs plans on the
model's networks) and the pictures (:mod:`distal.viz`). A lower module that imports one of
those — even inside a function, where it only fails at run time — depends on everything
above it. One kind of reference is allowed, listed in :data:`PICTURE_METHODS`: the
``plot``/``to_chrome_trace`` conveniences of result objects, which hand the result itself
to :mod:`distal.viz` (``res.plot_timeline()`` for ``distal.viz.plot_timeline(res)``); no
rule of the compiler or the runtimes depends on them. Import cycles are checked over
module-level imports (the ones that run at import time, ``if TYPE_CHECKING:`` blocks
included: they are still a dependency a reader has to untangle).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LOWER = ("lang", "schedule", "distribution", "plan", "runtime", "kernels")
UPPER = ("distal.kernel", "distal.viz", "distal.cost")
#: (module, method) pairs allowed to import distal.viz: results drawing themselves.
PICTURE_METHODS = {
    ("distal.runtime.result", "plot_timeline"),
    ("distal.runtime.result", "to_chrome_trace"),
    ("distal.sim.result", "plot"),
    ("distal.sim.result", "to_chrome_trace"),
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "distal").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The distal modules an import statement names (``from pkg import sub`` names sub)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = module if _is_package(module) else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            pkg = pkg.rpartition(".")[0]
        base = f"{pkg}.{base}" if base else pkg
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append(sub if sub in MODULES else base)
    return out


def _imports(tree: ast.AST, module: str, top_level: bool) -> list[tuple[int, str]]:
    """``(line, module)`` of the distal imports in ``tree``; ``top_level``: only those run
    at import time (module body, through ``if``/``try``/``with`` but not into functions)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.extend((child.lineno, t) for t in _targets(child, module))
            elif top_level and isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
            ):
                if isinstance(child, ast.ClassDef):
                    visit(child)  # a class body runs at import time; its methods do not
                continue
            else:
                visit(child)

    visit(tree)
    return [(line, t) for line, t in found if t == "distal" or t.startswith("distal.")]


def _trees() -> dict[str, ast.AST]:
    return {m: ast.parse(p.read_text(), str(p)) for m, p in MODULES.items()}


TREES = _trees()


def _reaches_up(target: str) -> bool:
    return any(target == u or target.startswith(u + ".") for u in UPPER)


def _picture_lines(module: str, tree: ast.AST) -> set[int]:
    """Lines of the :data:`PICTURE_METHODS` of ``module``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (module, node.name) in PICTURE_METHODS:
            out.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return out


def test_lower_layers_never_import_kernel_viz_or_cost() -> None:
    bad = []
    for module, tree in TREES.items():
        layer = module.split(".")[1] if module.count(".") else ""
        if layer in LOWER or layer == "sim":
            allowed = _picture_lines(module, tree)
            for line, target in _imports(tree, module, top_level=False):
                if target.startswith("distal.viz") and line in allowed:
                    continue
                if layer == "sim" and target.startswith("distal.cost"):
                    continue  # the simulator sits with the cost model
                if _reaches_up(target):
                    path = MODULES[module].relative_to(SRC)
                    bad.append(f"{path}:{line} imports {target}")
    assert not bad, "lower layers import upper ones:\n" + "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_no_import_cycles() -> None:
    graph = {
        m: {t for _, t in _imports(tree, m, top_level=True) if t in MODULES}
        for m, tree in TREES.items()
    }
    cycles = _cycles(graph)
    assert not cycles, "import cycles (module-level imports):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_the_checks_see_what_they_look_for() -> None:
    """The walkers find a function-level upward import and a two-module cycle."""
    tree = ast.parse("def f():\n    from distal.viz import plot_timeline\n")
    assert _imports(tree, "distal.runtime.result", top_level=False) == [(2, "distal.viz")]
    assert _imports(tree, "distal.runtime.result", top_level=True) == []
    rel = ast.parse("from ..plan import ir\nfrom . import store\n")
    assert [t for _, t in _imports(rel, "distal.runtime.local", True)] == [
        "distal.plan.ir",
        "distal.runtime.store",
    ]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert not _reaches_up("distal.kernels.leaf")  # the leaf kernels are a lower layer
    assert _reaches_up("distal.kernel")
    assert _reaches_up("distal.cost.bounds")
