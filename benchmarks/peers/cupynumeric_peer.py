"""cuPyNumeric as a peer, run under the interpreter ``benchmarks/setup_cupynumeric.sh``
makes (it never imports distal): GEMM in float64 and float32, CG on the ``grid x grid``
2-D Laplacian written in its numpy (matrix-free: the five-point stencil by slices), and
the cost of one element-wise operation on 1000 elements, each next to numpy in the same
process.

    <venv>/bin/python benchmarks/peers/cupynumeric_peer.py N GRID REPEAT

Prints one JSON line: ``{"error": "<why it cannot run>"}``, or the timings (seconds,
medians of ``REPEAT`` after a warm-up). Every result is checked against numpy at a small
size first (``checked``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any


def _median(fn: Any, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _laplacian(xp: Any, p: Any) -> Any:
    q = 4.0 * p
    q[1:, :] -= p[:-1, :]
    q[:-1, :] -= p[1:, :]
    q[:, 1:] -= p[:, :-1]
    q[:, :-1] -= p[:, 1:]
    return q


def _cg(xp: Any, b: Any, iters: int) -> tuple[Any, float]:
    """``iters`` CG iterations from 0 (each reads ``p . q`` and ``r . r`` back, as a loop
    testing its residual does); the iterate and the seconds per iteration."""
    x = xp.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rs = float(xp.sum(r * r))
    t = time.perf_counter()
    for _ in range(iters):
        q = _laplacian(xp, p)
        alpha = rs / float(xp.sum(p * q))
        x = x + alpha * p
        r = r - alpha * q
        rs_new = float(xp.sum(r * r))
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x, (time.perf_counter() - t) / iters


def main() -> None:
    n, grid, repeat = (int(a) for a in sys.argv[1:4])
    try:
        import cupynumeric as cn
        import numpy as np
    except Exception as e:  # ImportError, or a library it loads (libcuda.so.1) missing
        print(json.dumps({"error": f"import cupynumeric failed: {type(e).__name__}: {e}"}))
        return
    rng = np.random.default_rng(0)
    a, b = rng.random((256, 256)), rng.random((256, 256))
    g = rng.random((64, 64))
    checked = bool(
        np.allclose(np.asarray(cn.asarray(a) @ cn.asarray(b)), a @ b)
        and np.allclose(np.asarray(_cg(cn, cn.asarray(g), 5)[0]), _cg(np, g, 5)[0])
    )
    out: dict[str, Any] = {"checked": checked, "version": getattr(cn, "__version__", "?")}
    for name, dt in (("gemm-f64", np.float64), ("gemm-f32", np.float32)):
        x = cn.asarray(rng.random((n, n)).astype(dt))
        y = cn.asarray(rng.random((n, n)).astype(dt))
        out[name] = _median(lambda x=x, y=y: float((x @ y)[0, 0]), repeat)
    rhs = rng.random((grid, grid))
    out["cg_ms"] = 1e3 * _cg(cn, cn.asarray(rhs), 20)[1]
    out["cg_numpy_ms"] = 1e3 * _cg(np, rhs, 20)[1]
    v, w = cn.ones(1000), np.ones(1000)
    out["op_us"] = 1e6 * _median(lambda: float((v + 1.0)[0]), 200)
    out["op_numpy_us"] = 1e6 * _median(lambda: float((w + 1.0)[0]), 200)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
