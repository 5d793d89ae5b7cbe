"""One small ``distal.numpy`` program, run on every runtime by ``test_numpy_runtimes.py``
(under MPI on every rank by ``_mpi_numpy.py``): reductions with ``axis``, block operations
(creation, reshape, concatenate, cumsum, sort) and a fused chain. Returns its largest error
against numpy and one value read."""

from __future__ import annotations

from typing import Any

import numpy as np


def program(dnp: Any) -> tuple[float, float]:
    a = np.arange(35.0).reshape(7, 5) / 7.0 - 2.0
    x = dnp.asarray(a)
    errs = []

    def check(got: Any, want: Any) -> None:
        arr = np.asarray(got)
        assert arr.shape == np.shape(want), (arr.shape, np.shape(want))
        errs.append(float(np.max(np.abs(arr - want))) if arr.size else 0.0)

    check(dnp.max(x, axis=0), a.max(axis=0))
    check(dnp.min(x, axis=1, keepdims=True), a.min(axis=1, keepdims=True))
    check(dnp.mean(dnp.sin(x) * 2.0, axis=0), (np.sin(a) * 2.0).mean(axis=0))
    check(dnp.argmax(x, axis=0), a.argmax(axis=0))
    check(x.sum(axis=1), a.sum(axis=1))
    check(dnp.std(x, axis=(0, 1)), a.std())
    check(dnp.cumsum(x, axis=0), np.cumsum(a, axis=0))
    check(x.reshape(5, 7), a.reshape(5, 7))
    check(dnp.concatenate([x, x * 2.0]), np.concatenate([a, a * 2.0]))
    check(dnp.sort(x, axis=0), np.sort(a, axis=0))
    check(dnp.arange(9.0) * dnp.linspace(0.0, 1.0, 9), np.arange(9.0) * np.linspace(0.0, 1.0, 9))
    check(dnp.tile(dnp.eye(3), (2, 1)), np.tile(np.eye(3), (2, 1)))
    value = float(dnp.sum(dnp.exp(x / 10.0)))
    check(np.float64(value), np.exp(a / 10.0).sum())
    return max(errs), value
