"""The xDSL context :func:`distal.mlir.importer.from_mlir` parses with (the only module that
imports xDSL).

xDSL has ``func``, ``arith``, ``tensor`` and ``linalg`` (``generic``, ``matmul``, ``fill``,
the element-wise named ops) but not ``linalg.matvec``, ``linalg.batch_matmul`` or
``linalg.dot``: they are defined here as named ops like its ``matmul`` (default indexing
maps, a hidden ``mulf``/``addf`` body), with their iterator types read off the maps.
``sparse_tensor`` is not an xDSL dialect either: the context allows unregistered
attributes, so an encoding arrives as its text (:func:`distal.mlir.types.parse_encoding`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, ClassVar

from distal.errors import NotSupportedYet

EXTRA = "pip install 'distal[mlir]'"


def _xdsl() -> None:
    try:
        import xdsl  # noqa: F401
    except ModuleNotFoundError as e:
        raise NotSupportedYet(f"reading MLIR needs xDSL ({e.name!r}): {EXTRA}") from e


@cache
def context() -> Any:
    """The xDSL ``Context`` with every dialect the importer reads (built once, then shared:
    parsing only reads it)."""
    _xdsl()
    from xdsl.context import Context
    from xdsl.dialects.arith import Arith
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func
    from xdsl.dialects.linalg import Linalg
    from xdsl.dialects.math import Math
    from xdsl.dialects.tensor import Tensor
    from xdsl.ir import Dialect

    linalg = Dialect("linalg", [*Linalg.operations, *_extra_named_ops()], [*Linalg.attributes])
    ctx = Context(allow_unregistered=True)
    for d in (Builtin, Func, Arith, Math, Tensor, linalg):
        ctx.load_dialect(d)
    return ctx


def _extra_named_ops() -> list[Any]:
    from xdsl.dialects.builtin import AffineMapAttr, ArrayAttr
    from xdsl.dialects.linalg.abstract_ops import NamedOperation
    from xdsl.dialects.linalg.attrs import IteratorTypeAttr
    from xdsl.dialects.linalg.ops import MatmulOp
    from xdsl.ir.affine import AffineMap
    from xdsl.irdl import irdl_op_definition, prop_def

    def named(op_name: str, *maps: Callable[..., tuple[Any, ...]]) -> Any:
        default = ArrayAttr([AffineMapAttr(AffineMap.from_callable(f)) for f in maps])

        class Op(NamedOperation):
            name = op_name
            PRINT_ATTRS_IN_FRONT: ClassVar[bool] = True
            indexing_maps = prop_def(ArrayAttr[AffineMapAttr], default_value=default)

            @classmethod
            def get_hidden_region(cls, inputs: Sequence[Any], outputs: Sequence[Any]) -> Any:
                return MatmulOp.get_hidden_region.__func__(cls, inputs, outputs)  # type: ignore[attr-defined]

            def get_default_indexing_maps(self) -> Sequence[AffineMap]:
                return tuple(m.data for m in self.indexing_maps.data)

            def get_indexing_maps(self) -> Any:
                return self.indexing_maps

            def get_iterator_types(self) -> Any:
                maps = self.get_default_indexing_maps()
                out = {r.position for r in maps[-1].results}
                return ArrayAttr(
                    [
                        IteratorTypeAttr.parallel() if d in out else IteratorTypeAttr.reduction()
                        for d in range(maps[-1].num_dims)
                    ]
                )

        Op.__name__ = Op.__qualname__ = op_name.split(".")[1].title().replace("_", "") + "Op"
        return irdl_op_definition(Op)

    return [
        named("linalg.matvec", lambda i, k: (i, k), lambda i, k: (k,), lambda i, k: (i,)),
        named(
            "linalg.batch_matmul",
            lambda b, i, j, k: (b, i, k),
            lambda b, i, j, k: (b, k, j),
            lambda b, i, j, k: (b, i, j),
        ),
        named("linalg.dot", lambda k: (k,), lambda k: (k,), lambda k: ()),
    ]


_CONVERT = re.compile(
    r"^(\s*%[\w.$-]+\s*=\s*)sparse_tensor\.convert\s+(%[\w.$-]+)\s*:\s*(.+?)\s+to\s+(.+?)\s*$",
    re.M,
)


_RESULTS = re.compile(r"^(\s*\}\s*->\s*)\((.*)\)\s*$", re.M)


def generic_forms(text: str) -> str:
    """``text`` in the forms xDSL reads: the operations of dialects xDSL lacks, which the
    exports write, in MLIR's generic form (read as unregistered operations:
    ``sparse_tensor.convert %x : A to B`` is ``"sparse_tensor.convert"(%x) : (A) -> B``), and
    a generic's list of result types, ``} -> (A, B)``, without its parentheses."""
    text = _CONVERT.sub(r'\1"sparse_tensor.convert"(\2) : (\3) -> \4', text)
    return _RESULTS.sub(r"\1\2", text)


class UnreadableText(Exception):
    """Text refused before or while xDSL reads it (a string literal left open, which xDSL's
    lexer can take minutes over, or an error xDSL raises as an ordinary exception)."""

    def __init__(self, msg: str, line: int | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.line = line


def _strings_closed(text: str) -> None:
    """Every string literal closes on its line (MLIR's cannot span lines)."""
    for n, line in enumerate(text.split("\n"), 1):
        inside, k = False, 0
        while k < len(line):
            c = line[k]
            if inside and c == "\\":
                k += 2
                continue
            if c == '"':
                inside = not inside
            elif not inside and line.startswith("//", k):
                break
            k += 1
        if inside:
            raise UnreadableText(f"a string literal is not closed on line {n}", n)


def parse(text: str) -> Any:
    """The module of ``text``; a parse error as the exception xDSL raises, or
    :class:`UnreadableText`."""
    from xdsl.parser import Parser

    _strings_closed(text)
    try:
        return Parser(context(), generic_forms(text)).parse_module()
    except errors():
        raise
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, AssertionError) as e:
        # xDSL's parsers of some operations fail this way on malformed text
        raise UnreadableText(f"{type(e).__name__}: {e}") from e


def errors() -> tuple[type[Exception], ...]:
    """The exceptions xDSL raises for text it cannot parse or verify."""
    from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

    return (ParseError, VerifyException, DiagnosticException, UnreadableText)
