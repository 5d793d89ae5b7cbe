"""Conjugate gradients for ``A x = b``, ``A`` symmetric positive definite.

Distributed on a line of ``P`` processors, owner computes: ``A`` in row blocks
(``"ij -> i"``), the vectors in blocks (``"i -> i"``). Every iteration runs

* ``q[i] = A[i,j] * p[j]``, reading ``p`` replicated (``"j -> *"``: the session moves
  ``n * (P - 1)`` words, each processor receiving the blocks it lacks); the other kernels
  read ``p`` replicated too, each processor using its own block of it;
* ``pq[()] = p[i] * q[i]`` and ``rr[()] = r[i] * r[i]``: distributed inner products
  (partial sums reduced onto processor 0);
* ``x[i] + alpha[()] * p[i]``, ``r[i] - alpha[()] * q[i]``, ``r[i] + beta[()] * p[i]``:
  the vector updates, with the scalars ``alpha``, ``beta`` computed on the driver from the
  gathered 0-d inner products and replicated.

It stops when ``||r|| <= tol * ||b||`` (``r = b - A x``, updated recursively) or after
``maxiter`` iterations.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distal.apps._common import (
    check_schedule,
    dense_input,
    is_sparse,
    machine_for,
    owner,
    progress,
    rename,
    scalar,
    session_for,
    sparse_input,
    spmv,
)
from distal.distribution.machine import Machine
from distal.errors import InputError
from distal.lang.nodes import Tensor, index_vars
from distal.session import Session


def _kernels(n: int, M: Machine, split: str = "owner") -> dict[str, Any]:
    i, j = index_vars("i j")

    def vec(name: str, dist: str = "i -> i") -> Tensor:
        return Tensor(name, (n,), dist=dist, machine=M)

    if split == "owner":
        A = Tensor("cg_A", (n, n), dist="ij -> i", machine=M)
        q, p_rep = vec("cg_q"), vec("cg_p", "i -> *")
        q[i] = A[i, j] * p_rep[j]
        ks: dict[str, Any] = {"matvec": owner(q, i, M)}
    else:  # a sparse A: p stays in blocks, the product gathers exactly the entries it uses
        ks = {"matvec": spmv("cg_q", "cg_A", "cg_p", n, n, M, split)}

    def dot(out: str, a: str, b: str) -> Any:
        s, u, v = scalar(out, M), vec(a, rep.get(a, "i -> i")), vec(b)
        s[()] = u[i] * v[i] if a != b else u[i] * u[i]
        return owner(s, i, M)

    # p is read replicated everywhere: the matvec needs it so, and every other kernel then
    # reads its own block of the replicated copy without moving anything
    rep = {"cg_p": "i -> *"} if split == "owner" else {}
    ks["pq"] = dot("cg_pq", "cg_p", "cg_q")
    ks["rr"] = dot("cg_rrn", "cg_r", "cg_r")
    ks["bb"] = dot("cg_bb", "cg_b", "cg_b")

    def axpy(out: str, a: str, coef: str, b: str, sign: float) -> Any:
        o, c = vec(out), scalar(coef, M, "*")
        u, v = vec(a, rep.get(a, "i -> i")), vec(b, rep.get(b, "i -> i"))
        o[i] = u[i] + c[()] * v[i] if sign > 0 else u[i] - c[()] * v[i]
        return owner(o, i, M)

    ks["x"] = axpy("cg_xn", "cg_x", "cg_alpha", "cg_p", 1.0)
    ks["r"] = axpy("cg_rn", "cg_r", "cg_alpha", "cg_q", -1.0)
    ks["p"] = axpy("cg_pn", "cg_r", "cg_beta", "cg_p", 1.0)
    return ks


def cg(
    A: Any,
    b: Any,
    machine: Machine | int | None = None,
    tol: float = 1e-10,
    session: Session | None = None,
    *,
    maxiter: int | None = None,
    schedule: str = "auto",
) -> tuple[np.ndarray, int]:
    """Solve ``A x = b`` (``A`` SPD) by conjugate gradients from ``x0 = 0``.

    Args:
        A: an ``(n, n)`` array, scipy.sparse matrix or ``dl.SparseArray``; a sparse ``A``
            runs the sparse matrix-vector product (CSR, ``schedule`` ``"rows"`` or
            ``"nonzeros"``), with the vectors in blocks.
        b: the right-hand side, ``(n,)``.
        machine: a ``dl.Machine`` (used as a line of its processors) or a processor count;
            default one per MPI rank, else one per core (at most 8).
        tol: stop when ``||r|| <= tol * ||b||``.
        session: the ``dl.Session`` to run in (its runtime and checkpoint); a new local
            one by default. With a checkpoint, every iteration is saved (loop ``"cg"``,
            keeping ``cg_x``, ``cg_r``, ``cg_p``, ``cg_rr``) and a restarted call resumes.
        maxiter: iterations at most (default ``10 * n``).
        schedule: ``"auto"``; ``"owner"`` (dense ``A``: the owner-computes schedules of the
            module docstring); ``"rows"`` or ``"nonzeros"`` (sparse ``A``; auto picks
            ``"nonzeros"``, balanced whatever the row lengths).

    Returns:
        ``(x, iterations)``: the solution and the number of iterations run in total.
    """
    split = check_schedule(schedule, "cg", is_sparse(A))
    a = dense_input(A, "A", 2) if split == "owner" else sparse_input(A, "A", "csr", 2)
    n = a.shape[0]
    if a.shape != (n, n):
        raise InputError(f"cg: A must be square, got shape {a.shape}")
    bv = dense_input(b, "b", 1)
    if bv.shape != (n,):
        raise InputError(f"cg: b has shape {bv.shape}, A is {a.shape}")
    if not (isinstance(tol, int | float) and tol >= 0):
        raise InputError(f"cg: tol must be a non-negative number, got {tol!r}")
    maxiter = 10 * n if maxiter is None else int(maxiter)
    sess = session_for(session)
    M = machine_for(sess, machine)
    ks = _kernels(n, M, split)

    sess.put("cg_A", a)
    sess.put("cg_b", bv)
    sess.put("cg_x", np.zeros(n))
    sess.put("cg_r", bv)
    sess.put("cg_p", bv)
    sess.run(ks["bb"])
    bnorm = float(np.sqrt(sess.get("cg_bb")))
    sess.run(ks["rr"])
    rename(sess, "cg_rrn", "cg_rr")
    loop = sess.iterations(
        maxiter, keep=["cg_x", "cg_r", "cg_p", "cg_rr"], name="cg", save="latest"
    )
    first = 0 if sess.resumed_from is None else sess.resumed_from + 1
    rs = float(sess.get("cg_rr"))
    done = first
    bar = progress(sess, maxiter, "cg iterations")
    try:
        if np.sqrt(rs) <= tol * bnorm:
            loop.close()
        for it in loop:
            sess.run(ks["matvec"])
            sess.run(ks["pq"])
            pq = float(sess.get("cg_pq"))
            if pq <= 0:
                raise InputError(
                    f"cg: p.Ap = {pq:.3g} <= 0 at iteration {it}: A is not positive definite"
                )
            sess.put("cg_alpha", np.array(rs / pq))
            sess.run(ks["x"])
            rename(sess, "cg_xn", "cg_x")
            sess.run(ks["r"])
            rename(sess, "cg_rn", "cg_r")
            sess.run(ks["rr"])
            rs_new = float(sess.get("cg_rrn"))
            done = it + 1
            bar.update(done, note=f"residual {np.sqrt(rs_new) / max(bnorm, 1e-300):.2e}")
            if np.sqrt(rs_new) <= tol * bnorm:
                break
            sess.put("cg_beta", np.array(rs_new / rs))
            sess.run(ks["p"])
            rename(sess, "cg_pn", "cg_p")
            rename(sess, "cg_rrn", "cg_rr")
            rs = rs_new
    finally:
        loop.close()  # the last finished iteration is saved
        bar.close()
    return sess.get("cg_x"), done
