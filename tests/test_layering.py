"""The package's layers, checked from the source: no lower layer reaches up, no import cycles.

The layers, bottom to top (a module imports only from its own layer or below):

1. foundations: ``errors``, ``typing``, ``text``, ``casting`` (the one cast rule),
   ``trace`` (run events) and ``progress`` (the progress bar);
2. the compiler and runtimes: ``sparse`` (formats, arrays), ``values`` (the input rules),
   ``distribution``, ``lang``,
   ``schedule``, ``plan``, ``mlir`` (leaves as MLIR text and ``linalg`` read back as
   notation; it takes a kernel as an argument), ``kernels`` (the leaves), ``runtime`` and
   ``data`` (what a run reads and returns);
3. ``costmodel``: machine parameters, the ``Stats`` -> seconds model and the lower bounds of
   a statement; pure functions of statements and stats, used by ``compile(routing="auto")``
   and ``explain()``;
4. :mod:`distal.kernel`, which ties the compiler and runtimes together;
5. beside each other on top of it: the auto-scheduler :mod:`distal.cost` (it compiles
   kernels; :mod:`distal.cost.model` and :mod:`distal.cost.bounds` re-export
   ``costmodel``), the plan simulator :mod:`distal.sim` and the pictures :mod:`distal.viz`.
   ``kernel.simulate()`` / ``plot_traffic()`` / ``plot_distribution()`` are thin upward
   calls: sim and viz take the kernel as an argument and never import ``distal.kernel``,
   :mod:`distal.cost` or anything above; viz never imports sim;
6. what is built from kernels: ``algorithms``, ``arrays`` (the deferred numpy-like front; the
   session makes its handles, so it never imports ``session``), ``session``, ``einsum``,
   ``apps``;
7. the facade ``distal`` (the package itself), ``cli``, ``cli_study`` (``distal explain |
   plot | simulate``) and ``studies`` (the simulated scaling study and the simulator's
   validation, which use the algorithm library).

A lower module that imports ``distal.kernel``, ``distal.viz``, ``distal.sim`` or
``distal.cost`` — even inside a function, where it only fails at run time — depends on
everything above it. One kind of reference is allowed, listed in :data:`PICTURE_METHODS`:
the ``plot``/``plot_timeline``/``to_chrome_trace`` conveniences of the simulator's and the
runtimes' results, which hand the result itself to :mod:`distal.viz` (``res.plot_timeline()``
for ``distal.viz.plot_timeline(res)``); they create no cycle because viz never imports sim or
the runtimes (the events and the progress bar it draws live in the foundations:
:mod:`distal.trace`, :mod:`distal.progress`).

Cycles are checked twice: between modules over the imports that run at import time
(``if TYPE_CHECKING:`` blocks included: they are still a dependency a reader has to
untangle), and between the top-level modules and packages of ``distal`` (``distal.kernel``,
``distal.plan``, ``distal.runtime``, ... and the package ``distal`` itself) over every
import, function-level ones included. :data:`PENDING` lists the imports that still close a
cycle, each with what removes it; each must disappear, and the list with it.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LOWER = (
    "errors",
    "typing",
    "text",
    "casting",
    "trace",
    "progress",
    "sparse",
    "values",
    "distribution",
    "lang",
    "schedule",
    "plan",
    "mlir",
    "kernels",
    "runtime",
    "data",
    "costmodel",
)
UPPER = ("distal.kernel", "distal.viz", "distal.sim", "distal.cost")
#: what sim and viz may not import: the kernel and everything built on it
ABOVE_SIM_AND_VIZ = (
    "distal.kernel",
    "distal.cost",
    "distal.algorithms",
    "distal.arrays",
    "distal.session",
    "distal.einsum",
    "distal.apps",
    "distal.cli",
    "distal.cli_study",
    "distal.studies",
)
#: (module, method) pairs allowed to import distal.viz: results drawing themselves.
PICTURE_METHODS = {
    ("distal.sim.result", "plot"),
    ("distal.sim.result", "to_chrome_trace"),
    ("distal.runtime.result", "plot_timeline"),
    ("distal.runtime.result", "to_chrome_trace"),
}
#: (importing module, imported top-level module) that still close a cycle between top-level
#: modules, with what removes each. They are in files being rewritten for the one-plan work.
PENDING: dict[tuple[str, str], str] = {}


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


def _top(name: str) -> str:
    """The top-level module or package of ``distal`` that ``name`` is in (``distal``: the
    package itself)."""
    return ".".join(name.split(".")[:2])


def _within(target: str, names: tuple[str, ...]) -> bool:
    return any(target == n or target.startswith(n + ".") for n in names)


def _picture_lines(module: str, tree: ast.AST) -> set[int]:
    """Lines of the :data:`PICTURE_METHODS` of ``module``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (module, node.name) in PICTURE_METHODS:
            out.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return out


def _where(module: str, line: int, target: str) -> str:
    return f"{MODULES[module].relative_to(SRC)}:{line} imports {target}"


def test_lower_layers_never_import_kernel_viz_sim_or_cost() -> None:
    bad = []
    for module, tree in TREES.items():
        if _top(module).removeprefix("distal.") not in LOWER:
            continue
        pictures = _picture_lines(module, tree)
        for line, target in _imports(tree, module, top_level=False):
            if target.startswith("distal.viz") and line in pictures:
                continue  # a result drawing itself (PICTURE_METHODS)
            if _reaches_up(target) and (module, _top(target)) not in PENDING:
                bad.append(_where(module, line, target))
    assert not bad, "lower layers import upper ones:\n" + "\n".join(dict.fromkeys(bad))


def test_sim_and_viz_take_the_kernel_as_an_argument() -> None:
    """sim and viz import nothing built on the kernel (nor the facade), and viz never sim."""
    bad = []
    for module, tree in TREES.items():
        side = _top(module)
        if side not in ("distal.sim", "distal.viz"):
            continue
        allowed = _picture_lines(module, tree)
        for line, target in _imports(tree, module, top_level=False):
            other = "distal.viz" if side == "distal.sim" else "distal.sim"
            if _within(target, ABOVE_SIM_AND_VIZ) or target == "distal":
                bad.append(_where(module, line, target))
            elif _within(target, (other,)) and not (side == "distal.sim" and line in allowed):
                bad.append(_where(module, line, target))
    assert not bad, "sim / viz reach up:\n" + "\n".join(dict.fromkeys(bad))


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


def _top_imports(pending: bool) -> dict[tuple[str, str], list[str]]:
    """``(top-level importer, top-level imported) -> the imports behind it`` over every
    import, function-level ones included; ``pending``: with the :data:`PENDING` ones."""
    out: dict[tuple[str, str], list[str]] = {}
    for module, tree in TREES.items():
        for line, target in _imports(tree, module, top_level=False):
            a, b = _top(module), _top(target)
            where = _where(module, line, target)
            if a != b and (pending or (module, b) not in PENDING):
                if where not in out.setdefault((a, b), []):
                    out[(a, b)].append(where)
    return out


def _top_cycles(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Each cycle between top-level modules, with the imports inside it (two per pair of
    modules, and how many more)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    out = []
    for comp in _cycles(graph):
        inside = []
        for (a, b), lines in sorted(edges.items()):
            if a in comp and b in comp:
                more = f" (+{len(lines) - 2} more)" if len(lines) > 2 else ""
                inside.append(f"  {a} -> {b}: " + "; ".join(lines[:2]) + more)
        out.append(" <-> ".join(comp) + "\n" + "\n".join(inside))
    return out


def test_no_cycles_between_top_level_modules() -> None:
    """Counting function-level imports: ``distal.kernel`` -> ``distal.cost`` -> ``distal.kernel``
    is a cycle even when one side imports inside a function."""
    cycles = _top_cycles(_top_imports(pending=False))
    assert not cycles, "cycles between top-level modules (every import counted):\n" + "\n".join(
        cycles
    )


def test_every_pending_import_exists_and_closes_a_cycle() -> None:
    """:data:`PENDING` is exactly what is left: drop an entry once its import is gone."""
    edges = _top_imports(pending=True)
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    comps = _cycles(graph)
    stale = []
    for module, target in PENDING:
        found = (
            any(_top(t) == target for _, t in _imports(TREES[module], module, top_level=False))
            if module in TREES
            else False
        )
        a = _top(module)
        if not found or not any(a in c and target in c for c in comps):
            stale.append(f"{module} -> {target}")
    assert not stale, "PENDING entries that no longer close a cycle:\n" + "\n".join(stale)


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
    assert not _reaches_up("distal.costmodel.bounds")  # below the kernel
    assert _reaches_up("distal.kernel")
    assert _reaches_up("distal.cost.bounds")
    assert _reaches_up("distal.sim.network")
    assert _top("distal.cost.autoschedule") == "distal.cost"
    assert _top("distal") == "distal"
    cyc = _top_cycles(
        {("distal.kernel", "distal.cost"): ["k"], ("distal.cost", "distal.kernel"): ["c"]}
    )
    assert cyc == [
        "distal.cost <-> distal.kernel\n  distal.cost -> distal.kernel: c\n"
        "  distal.kernel -> distal.cost: k"
    ]


# -- sparse levels are asked what they can do, never compared by letter ------------------------

#: the level letters of ``sparse/formats.py``, the one module that may compare them
LEVEL_LETTERS = frozenset("dcqs")
LETTERS_HOME = "distal.sparse.formats"
#: names under which a numpy dtype's ``kind`` is compared with a letter (``"c"``: complex)
DTYPE_NAMES = frozenset({"dtype", "dt", "src", "dst"})


def _is_letters(node: ast.AST) -> bool:
    """A string of level letters, or a collection of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(node.value) and set(node.value) <= LEVEL_LETTERS
    if isinstance(node, ast.Set | ast.Tuple | ast.List | ast.Dict):
        items = node.keys if isinstance(node, ast.Dict) else node.elts
        return bool(items) and all(x is not None and _is_letters(x) for x in items)
    return False


def _names_a_level(node: ast.AST) -> bool:
    """An expression reading a level's letter (``lv.kind``, ``letter``, ``fmt.levels[k]``),
    not a numpy dtype's kind."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            names.add(n.attr)
    return bool(names & {"kind", "letter", "levels"}) and not names & DTYPE_NAMES


def _letter_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing level letters: ``kind == "c"``, ``lv.kind in "cq"``,
    ``"d" in fmt.levels``, ``set(fmt.levels) - {"d", "c"}``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.BinOp):
            operands = [node.left, node.right]
        else:
            continue
        if any(_is_letters(o) for o in operands) and any(
            _names_a_level(o) for o in operands if not _is_letters(o)
        ):
            out.append(node.lineno)
    return sorted(set(out))


def test_no_level_letter_comparison_outside_the_formats_module() -> None:
    """The sparse code asks a level what it can do (``Level.format`` / ``Format.level(k)``:
    ``locate``, ``iterate_positions``, ``unique``, ...), as TACO asks a ``ModeFormat``;
    only ``sparse/formats.py`` knows which letter answers what."""
    bad = []
    for module, tree in TREES.items():
        if module == LETTERS_HOME:
            continue
        for line in _letter_comparisons(tree):
            bad.append(f"{MODULES[module].relative_to(SRC)}:{line}")
    assert not bad, "level letters compared (ask the level format instead):\n" + "\n".join(bad)


def test_the_letter_check_sees_what_it_looks_for() -> None:
    found = _letter_comparisons(
        ast.parse(
            'a = lv.kind in "cq"\n'
            'b = kind == "d"\n'
            'c = "d" in fmt.levels[1:]\n'
            'd = set(fmt.levels) - {"d", "c"}\n'
            'e = np.dtype(t).kind == "c"\n'
            'f = dtype.kind == "c"\n'
            "g = m.kind == FETCH\n"
        )
    )
    assert found == [1, 2, 3, 4]


# -- the boundary between compiling and running ---------------------------------------------------

#: the registered runtimes' names, which the layers that look a runtime up never compare
RUNTIME_NAMES = frozenset({"local", "mpi", "dask", "pool"})
#: the layers that look a runtime up (``distal.runtime.base``) and never ask which one they have
RUNTIME_AGNOSTIC = ("distal.session", "distal.arrays", "distal.kernel")
#: the runtime modules those layers may import: the interface, the executable, and what every
#: runtime shares (results, block sources, the checkpoint store); never one runtime's own
SHARED_RUNTIME = (
    "distal.runtime",
    "distal.runtime.base",
    "distal.runtime.executable",
    "distal.runtime.codec",
    "distal.runtime.result",
    "distal.runtime.source",
    "distal.runtime.checkpoint",
    "distal.runtime.checkpoint_auth",
)
#: what no runtime imports: the lowering, the kernel and the session (a runtime runs an
#: executable; nothing it runs calls back into the compiler)
COMPILER = ("distal.kernel", "distal.plan.engine", "distal.plan.sparse", "distal.session")
#: parameters through which a kernel or a bound kernel would reach a runtime untyped
KERNEL_PARAMETERS = frozenset({"kernel", "bound"})
#: what is still left on the boundary, with what removes it (each must disappear, and the
#: entry with it): modules with a ``kernel: Any`` parameter
PENDING_KERNEL_ANY: dict[str, str] = {}


def _runtime_name_branches(tree: ast.AST) -> list[int]:
    """Lines comparing something with a runtime's name (``runtime == "mpi"``, ``name in
    ("local", "mpi")``) or matching on one."""

    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in RUNTIME_NAMES
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            return any(named(x) for x in node.elts)
        return False

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(named(o) for o in (node.left, *node.comparators)):
            out.append(node.lineno)
        elif isinstance(node, ast.match_case) and any(
            isinstance(p, ast.MatchValue) and named(p.value) for p in ast.walk(node.pattern)
        ):
            out.append(node.pattern.lineno)
    return sorted(set(out))


def _agnostic(module: str) -> bool:
    return _within(module, RUNTIME_AGNOSTIC)


def test_no_branch_on_a_runtime_name_above_the_runtimes() -> None:
    """The session, the arrays front and the kernel look their runtime up by name and then
    ask it (its methods and capabilities), never compare the name."""
    bad = [
        f"{MODULES[m].relative_to(SRC)}:{line}"
        for m, tree in TREES.items()
        if _agnostic(m)
        for line in _runtime_name_branches(tree)
    ]
    assert not bad, "branches on a runtime's name:\n" + "\n".join(bad)


def test_the_layers_above_import_no_runtime_of_their_own() -> None:
    """They reach a runtime through ``distal.runtime.base`` only (function-level imports
    counted): no ``runtime.mpi``, ``runtime.dask``, ``runtime.elastic``, ``runtime.local``."""
    bad = []
    for module, tree in TREES.items():
        if not _agnostic(module):
            continue
        for line, target in _imports(tree, module, top_level=False):
            if _within(target, ("distal.runtime",)) and target not in SHARED_RUNTIME:
                bad.append(_where(module, line, target))
    assert not bad, "a runtime's own module imported above the runtimes:\n" + "\n".join(bad)


def test_runtimes_never_import_the_compiler_the_kernel_or_the_session() -> None:
    bad = []
    for module, tree in TREES.items():
        if not _within(module, ("distal.runtime",)):
            continue
        for line, target in _imports(tree, module, top_level=False):
            if _within(target, COMPILER):
                bad.append(_where(module, line, target))
    assert not bad, "runtimes reaching into the compiler:\n" + "\n".join(bad)


def _untyped_kernels(tree: ast.AST) -> list[int]:
    """Lines of parameters named ``kernel`` or ``bound`` annotated ``Any``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg in KERNEL_PARAMETERS:
            ann = node.annotation
            text = ast.unparse(ann) if ann is not None else ""
            if text in ("Any", "typing.Any", "'Any'"):
                out.append(node.lineno)
    return out


def test_no_runtime_takes_a_kernel_as_any() -> None:
    """A runtime receives an ``Executable`` (typed), never a kernel through ``Any``."""
    found = {
        m: _untyped_kernels(tree) for m, tree in TREES.items() if _within(m, ("distal.runtime",))
    }
    bad = [
        f"{MODULES[m].relative_to(SRC)}:{line}"
        for m, lines in found.items()
        if m not in PENDING_KERNEL_ANY
        for line in lines
    ]
    assert not bad, "kernel: Any in the runtimes:\n" + "\n".join(bad)
    stale = [m for m in PENDING_KERNEL_ANY if not found.get(m)]
    assert not stale, f"PENDING_KERNEL_ANY entries that are gone: {stale}"


def test_no_private_option_rides_on_the_public_run() -> None:
    """Every registered runtime's options are public names: what a session needs of its
    runtime is a method of the runtime, never an ``_`` option through ``run(**options)``."""
    from distal.runtime.base import runtime_class, runtimes

    bad = {}
    for name in runtimes():
        try:
            cls = runtime_class(name)
        except Exception:  # a runtime whose extra is missing here has nothing to check
            continue
        private = [o for o in cls.options if o.startswith("_")]
        if private:
            bad[name] = private
    assert not bad, f"private options on the public run: {bad}"


def test_the_boundary_checks_see_what_they_look_for() -> None:
    branches = _runtime_name_branches(
        ast.parse(
            'a = runtime == "mpi"\n'
            'b = self.runtime in ("local", "mpi")\n'
            'c = name != "dask"\n'
            "d = sess.rt.leaf_dot\n"
            'e = kind == "fetch"\n'
            'match runtime:\n    case "pool":\n        pass\n'
        )
    )
    assert branches == [1, 2, 3, 7]
    typed = _untyped_kernels(
        ast.parse("def f(kernel: Any, exe: Executable, bound: Any = None, k: Any = 0): pass\n")
    )
    assert typed == [1, 1]


#: names under which the layers built on sessions hold one
SESSION_NAMES = frozenset({"session", "sess"})


def _private_session_calls(tree: ast.AST) -> list[int]:
    """Lines reaching a session's private members (``self.sess._x``, ``session._x``)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__"):
            continue
        base = node.value
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
        if name in SESSION_NAMES:
            out.append(node.lineno)
    return out


def test_the_arrays_front_and_the_apps_use_the_session_s_public_interface() -> None:
    bad = [
        f"{MODULES[m].relative_to(SRC)}:{line}"
        for m, tree in TREES.items()
        if _within(m, ("distal.arrays", "distal.apps", "distal.numpy"))
        for line in _private_session_calls(tree)
    ]
    assert not bad, "private session members used:\n" + "\n".join(bad)
    assert _private_session_calls(
        ast.parse("a = self.sess._fused_blocks(1)\nb = sess.values\nc = session.__class__\n")
    ) == [1]
