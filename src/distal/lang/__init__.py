"""Tensor index notation."""

from distal.lang.concrete import Statement, Term, concretize
from distal.lang.nodes import Access, Assignment, Expr, IndexVar, Tensor, index_vars

__all__ = [
    "Access",
    "Assignment",
    "Expr",
    "IndexVar",
    "Statement",
    "Tensor",
    "Term",
    "concretize",
    "index_vars",
]
