"""Whole computations on sessions: CP-ALS, PageRank, conjugate gradients.

Each application runs its kernels in a :class:`distal.Session` (any runtime), keeps its
vectors and tensors distributed between kernels, checkpoints every iteration when the
session has a checkpoint location, and shows one progress bar counting iterations on a
terminal. Sparse inputs are made dense (up to 2**24 elements) until sparse kernels exist.
Walkthrough: ``docs/applications.md``.

>>> import numpy as np
>>> import distal as dl
>>> A = np.array([[4.0, 1.0], [1.0, 3.0]])
>>> x, its = dl.apps.cg(A, np.array([1.0, 2.0]), machine=2)
>>> bool(np.allclose(A @ x, [1.0, 2.0]))
True
"""

from distal.apps.cg import cg
from distal.apps.cp import cp_als
from distal.apps.pagerank import pagerank

__all__ = ["cg", "cp_als", "pagerank"]
