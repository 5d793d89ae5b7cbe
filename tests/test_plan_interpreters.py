"""One interpreter of the plan IR: every reader of plan programs dispatches by a table.

* Every interpreter (the local runtime, the MPI rank, the simulator's cost model, the
  printer, the sinks' memory model) has a handler, or a deliberate ``ignores`` entry, for
  every instruction type of the IR, and an interpreter that misses one is refused where its
  class is defined.
* ``split`` groups a step's instructions by the phase of their handlers, in program order.
* No module of ``src/distal`` interprets instructions by an ``if isinstance(op, A) ...
  elif isinstance(op, B)`` chain any more (the two left are listed in
  :data:`PENDING_CHAINS`, each in a file its owner is rewriting).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest

import distal as dl
from distal.errors import InternalError
from distal.plan import ir
from distal.plan.visit import INSTRUCTIONS, INTERPRETERS, Interpreter, impl

SRC = Path(__file__).resolve().parents[1] / "src" / "distal"

#: the interpreters the issue names, by module and class
EXPECTED = {
    ("distal.plan.printer", "_OpText"),
    ("distal.plan.sinks", "Footprint"),
    ("distal.sim.engine", "_Costs"),
    ("distal.runtime.local", "LocalRuntime"),
    ("distal.runtime.mpi.rank", "Rank"),
}
#: files still interpreting instructions by an isinstance chain, with who removes it
PENDING_CHAINS = {
    "runtime/elastic/units.py": "the elastic core's unit cutter (elastic)",
    "mlir/export.py": "the extents of a leaf over stored entries (mlir)",
}


def _load_all() -> None:
    for module, _ in EXPECTED:
        if module.startswith("distal.runtime.mpi"):
            pytest.importorskip("mpi4py")
        importlib.import_module(module)


def test_instructions_are_every_instruction_class_of_the_ir() -> None:
    """``INSTRUCTIONS`` is ``ir.Op``: every frozen dataclass of ``plan/ir.py`` a program
    holds (all but the plan, its messages and the leaves' work descriptions)."""
    not_ops = {ir.Plan, ir.Message, ir.TermWork, ir.EntryWork}
    classes = {
        c
        for _, c in inspect.getmembers(ir, inspect.isclass)
        if c.__module__ == ir.__name__ and dataclasses.is_dataclass(c) and c not in not_ops
    }
    assert classes == set(INSTRUCTIONS)
    assert len(INSTRUCTIONS) == 9


def test_every_interpreter_handles_every_instruction() -> None:
    _load_all()
    found = {(c.__module__, c.__qualname__) for c in INTERPRETERS}
    assert EXPECTED <= found, EXPECTED - found
    for cls in INTERPRETERS:
        assert set(cls.table) == set(INSTRUCTIONS), cls
        ignored = {t for t in INSTRUCTIONS if t not in cls.phases}
        assert ignored == set(cls.ignores), cls
        for t, f in cls.table.items():
            assert callable(f), (cls, t)


def test_an_interpreter_missing_a_handler_is_refused_where_it_is_defined() -> None:
    with pytest.raises(InternalError, match=r"no handler for \['Forward'"):

        class Partial(Interpreter):
            ignores = tuple(t for t in INSTRUCTIONS if t is not ir.Forward and t is not ir.Combine)

    class Base(Interpreter, abstract=True):  # a base others complete is allowed
        @impl(ir.Forward)
        def forward(self, op: ir.Forward) -> str:
            return "forward"

    class Done(Base):
        ignores = tuple(t for t in INSTRUCTIONS if t is not ir.Forward)

    assert Done().visit(ir.Forward(0, "B", ((0, 1),), 1)) == "forward"
    assert Done().visit(ir.Reduce(0, 1, ((0, 1),))) is None  # ignored: nothing done
    assert Done in INTERPRETERS
    assert Base not in INTERPRETERS
    INTERPRETERS.remove(Done)
    with pytest.raises(InternalError, match="not an instruction"):
        impl(int)


def test_split_groups_by_phase_in_program_order_and_leaves_out_the_ignored() -> None:
    class Phased(Interpreter):
        ignores = (ir.Forward, ir.SendFinal, ir.RecvFinal, ir.OpenOutput, ir.Flush)

        @impl(ir.Fetch, phase="fetch")
        def fetch(self, op: ir.Fetch) -> None: ...

        @impl(ir.Reduce, ir.Combine, phase="post")
        def post(self, op: ir.Reduce | ir.Combine) -> None: ...

        @impl(ir.Compute)
        def compute(self, op: ir.Compute) -> None: ...

    INTERPRETERS.remove(Phased)
    f1, f2 = ir.Fetch(0, "B", None, (), False), ir.Fetch(0, "C", None, (), False)
    red, comb = ir.Reduce(0, 1, ((0, 2),)), ir.Combine(0, 2, ((0, 2),))
    comp = ir.Compute(0, (((0, 2),),))
    ops = [f2, red, ir.Forward(0, "B", ((0, 1),), 1), comp, comb, f1]
    got = Phased.split(ops)
    assert got == {"fetch": [f2, f1], "post": [red, comb], "run": [comp]}


def _chains(tree: ast.AST) -> list[int]:
    """Lines of ``isinstance`` chains over instructions: two or more branches of one ``if``
    / ``elif`` chain, or two or more ``if`` statements of one block, testing instruction
    types (``if isinstance(op, A): ... elif isinstance(op, B)``, or a run of ``if
    isinstance(op, A): return ...``)."""
    names = {t.__name__ for t in INSTRUCTIONS}

    def tests_type(cond: ast.expr) -> bool:
        for node in [cond, *getattr(cond, "values", [])]:
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
                and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node.args[1]))
            ):
                return True
        return False

    def branches(node: ast.If) -> int:
        count = 0
        link: ast.stmt | None = node
        while isinstance(link, ast.If):
            count += tests_type(link.test)
            link = link.orelse[0] if len(link.orelse) == 1 else None
        return count

    out = []
    for node in ast.walk(tree):
        for block in ("body", "orelse", "finalbody"):
            stmts = getattr(node, block, None)
            if not isinstance(stmts, list):
                continue
            ifs = [st for st in stmts if isinstance(st, ast.If)]
            if isinstance(node, ast.If) and block == "orelse" and len(stmts) == 1:
                continue  # an elif: counted with the chain it belongs to
            if sum(branches(st) for st in ifs) >= 2:
                out.append(next(st.lineno for st in ifs if branches(st)))
    return sorted(out)


def test_no_isinstance_chain_interprets_instructions() -> None:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        lines = _chains(ast.parse(path.read_text(), str(path)))
        if lines:
            found[path.relative_to(SRC).as_posix()] = lines
    unexpected = {f: ln for f, ln in found.items() if f not in PENDING_CHAINS}
    assert not unexpected, f"isinstance chains over instructions (use plan.visit): {unexpected}"


def test_the_chain_finder_finds_a_chain() -> None:
    src = (
        "def f(op):\n"
        "    if isinstance(op, Fetch):\n        pass\n"
        "    elif isinstance(op, Compute | Flush):\n        pass\n"
    )
    assert _chains(ast.parse(src)) == [2]
    run = "def f(op):\n    if isinstance(op, Fetch):\n        return 1\n"
    run += "    if isinstance(op, Reduce):\n        return 2\n"
    assert _chains(ast.parse(run)) == [2]
    assert _chains(ast.parse("if isinstance(op, Fetch | Flush):\n    pass\n")) == []


def test_printed_programs_read_as_before() -> None:
    """The printer's handlers: one line per instruction, a header per step."""
    k = dl.algorithms.summa(8, machine=dl.Machine(2, 2)).compile()
    text = k.explain(processor=0).splitlines()
    body = text[text.index(next(t for t in text if t.startswith("program of processor 0"))) :]
    assert body[1] == "  step 0:"
    assert any(line.startswith("    fetch B") for line in body)
    assert any(line.startswith("    compute ") for line in body)
    assert sum(1 for line in body if line.strip().startswith("step ")) == k.plan.nsteps
