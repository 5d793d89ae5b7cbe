"""Leaf kernels on local numpy blocks."""

from distal.kernels.leaf import TermKernel, contraction, run_leaf, term_kernels

__all__ = ["TermKernel", "contraction", "run_leaf", "term_kernels"]
