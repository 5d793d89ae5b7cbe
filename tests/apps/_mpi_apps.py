"""Every application on the MPI runtime, run on every rank under ``mpiexec -n 4``.

Rank 0 prints one JSON line per application with its error against numpy (float64).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _problems import cp_tensor, graph, numpy_pagerank, reconstruct, spd

import distal as dl

sess = dl.Session("mpi")
rank = sess.rank

x = cp_tensor()
w, fs, fit = dl.apps.cp_als(x, 4, iters=500, tol=1e-12, session=sess)
true_fit = 1 - np.linalg.norm(x - reconstruct(w, fs)) / np.linalg.norm(x)
if rank == 0:
    print(json.dumps({"app": "cp_als", "fit": fit, "true_fit": float(true_fit)}), flush=True)

a = graph()
pr = dl.apps.pagerank(a, session=sess)
if rank == 0:
    err = float(np.max(np.abs(pr - numpy_pagerank(a))))
    print(json.dumps({"app": "pagerank", "err": err, "sum": float(pr.sum())}), flush=True)

A, b = spd()
sol, its = dl.apps.cg(A, b, session=sess)
if rank == 0:
    err = float(np.max(np.abs(sol - np.linalg.solve(A, b))))
    print(json.dumps({"app": "cg", "err": err, "iterations": its}), flush=True)

# the same applications on sparse inputs: the sparse kernels (SpMV, sparse MTTKRP)
import scipy.sparse as sps  # noqa: E402
from _problems import sparse_cp_tensor, sparse_spd  # noqa: E402

import sparse as pydata  # noqa: E402

xs = sparse_cp_tensor()
w, fs, fit = dl.apps.cp_als(pydata.COO.from_numpy(xs), 4, iters=500, tol=1e-12, session=sess)
true_fit = 1 - np.linalg.norm(xs - reconstruct(w, fs)) / np.linalg.norm(xs)
if rank == 0:
    print(json.dumps({"app": "cp_als_sparse", "fit": fit, "true_fit": float(true_fit)}), flush=True)

pr = dl.apps.pagerank(sps.csr_array(a), session=sess)
if rank == 0:
    err = float(np.max(np.abs(pr - numpy_pagerank(a))))
    print(json.dumps({"app": "pagerank_sparse", "err": err, "sum": float(pr.sum())}), flush=True)

As, bs = sparse_spd()
sol, its = dl.apps.cg(sps.csr_array(As), bs, session=sess)
if rank == 0:
    err = float(np.max(np.abs(sol - np.linalg.solve(As, bs))))
    print(json.dumps({"app": "cg_sparse", "err": err, "iterations": its}), flush=True)
