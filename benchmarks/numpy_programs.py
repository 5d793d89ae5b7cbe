"""Classic numpy programs, run unchanged under numpy and under ``distal.numpy``.

``python benchmarks/numpy_programs.py [--procs 2] [--scale 1.0] [--repeats 3]`` runs every
program below twice: with ``np`` bound to ``numpy`` and with ``np`` bound to
``distal.numpy`` (in a local session of ``--procs`` processors); the program's code is the
same function, only the module it is handed differs. Inputs are numpy arrays made here (or
by the program itself with ``np.linspace`` / ``np.meshgrid`` / ...); under distal they are
placed with ``np.asarray`` (a scipy sparse matrix becomes a sparse DArray), and placing is
not timed. Each program's result is read back with ``numpy.asarray`` (timed: it is part of
the program's work).

One line per program: status (``ok``: it ran and its result agrees with numpy's; ``WRONG``;
``refused``: a ``NotSupportedYet`` naming the function, allowed only for dense
factorizations; ``error``), the largest relative error against numpy, and the time ratio
``numpy / distal`` (above 1: distal is faster), both measured in this run (best of
``--repeats``). The last line is "N/M run unchanged and correct".
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy
import scipy.sparse as sp

import distal as dl
import distal.numpy as dnp

# -- the programs: plain numpy code over the module ``np`` ------------------------------------


def black_scholes(np: Any, S: Any, X: Any, T: Any) -> Any:
    """European call and put prices (the polynomial approximation of the normal CDF)."""
    r, v = 0.02, 0.30

    def cnd(d: Any) -> Any:
        a1, a2, a3, a4, a5 = 0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429
        k = 1.0 / (1.0 + 0.2316419 * np.abs(d))
        poly = k * (a1 + k * (a2 + k * (a3 + k * (a4 + k * a5))))
        w = 1.0 - 1.0 / np.sqrt(2.0 * np.pi) * np.exp(-d * d / 2.0) * poly
        return np.where(d < 0, 1.0 - w, w)

    sqrt_t = np.sqrt(T)
    d1 = (np.log(S / X) + (r + 0.5 * v * v) * T) / (v * sqrt_t)
    d2 = d1 - v * sqrt_t
    discount = np.exp(-r * T)
    call = S * cnd(d1) - X * discount * cnd(d2)
    put = X * discount * cnd(-d2) - S * cnd(-d1)
    return call, put


def jacobi(np: Any, n: int, iters: int) -> Any:
    """Laplace's equation on a square, top edge held at 1: Jacobi sweeps in place."""
    u = np.zeros((n, n))
    u[0, :] = 1.0
    for _ in range(iters):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return u


def stencil5(np: Any, u0: Any, iters: int) -> Any:
    """Explicit heat diffusion with the 5-point stencil, a new array every step."""
    u = u0.copy()
    for _ in range(iters):
        un = u.copy()
        un[1:-1, 1:-1] = u[1:-1, 1:-1] + 0.1 * (
            u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
        )
        u = un
    return u


def cfd_burgers(np: Any, n: int, steps: int) -> Any:
    """2-D Burgers' equation ("12 steps to Navier-Stokes", step 8): upwind convection and
    diffusion of a square pulse, boundaries held at 1."""
    dx = dy = 2.0 / (n - 1)
    nu, sigma = 0.01, 0.0009
    dt = sigma * dx * dy / nu
    u = np.ones((n, n))
    v = np.ones((n, n))
    lo, hi = int(0.5 / dy), int(1.0 / dy + 1)
    u[lo:hi, lo:hi] = 2.0
    v[lo:hi, lo:hi] = 2.0
    for _ in range(steps):
        un, vn = u.copy(), v.copy()
        c = un[1:-1, 1:-1]
        d = vn[1:-1, 1:-1]
        u[1:-1, 1:-1] = (
            c
            - dt / dx * c * (c - un[1:-1, 0:-2])
            - dt / dy * d * (c - un[0:-2, 1:-1])
            + nu * dt / dx**2 * (un[1:-1, 2:] - 2.0 * c + un[1:-1, 0:-2])
            + nu * dt / dy**2 * (un[2:, 1:-1] - 2.0 * c + un[0:-2, 1:-1])
        )
        v[1:-1, 1:-1] = (
            d
            - dt / dx * c * (d - vn[1:-1, 0:-2])
            - dt / dy * d * (d - vn[0:-2, 1:-1])
            + nu * dt / dx**2 * (vn[1:-1, 2:] - 2.0 * d + vn[1:-1, 0:-2])
            + nu * dt / dy**2 * (vn[2:, 1:-1] - 2.0 * d + vn[0:-2, 1:-1])
        )
        u[0, :] = 1.0
        u[-1, :] = 1.0
        u[:, 0] = 1.0
        u[:, -1] = 1.0
        v[0, :] = 1.0
        v[-1, :] = 1.0
        v[:, 0] = 1.0
        v[:, -1] = 1.0
    return u, v


def kmeans(np: Any, X: Any, C: Any, iters: int) -> Any:
    """Lloyd's algorithm: distances by broadcasting, labels by argmin, new centers as
    one-hot averages."""
    k = C.shape[0]
    for _ in range(iters):
        d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
        labels = np.argmin(d, axis=1)
        onehot = (labels[:, None] == np.arange(k)[None, :]).astype(np.float64)
        counts = onehot.sum(axis=0)
        C = (onehot.T @ X) / np.maximum(counts, 1.0)[:, None]
    return C


def linear_regression(np: Any, X: Any, y: Any, iters: int) -> Any:
    """Least squares by gradient descent."""
    w = np.zeros(X.shape[1])
    lr = 0.5
    for _ in range(iters):
        grad = X.T @ (X @ w - y) / X.shape[0]
        w -= lr * grad
    return w


def normal_equations(np: Any, X: Any, y: Any) -> Any:
    """Least squares by the normal equations (a dense solve)."""
    return np.linalg.solve(X.T @ X, X.T @ y)


def logistic_regression(np: Any, X: Any, y: Any, iters: int) -> Any:
    """Logistic regression by gradient descent, as numpy users write it."""
    w = np.zeros(X.shape[1])
    lr = 1e-5
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        w -= lr * X.T @ (p - y)
    return w


def conjugate_gradients(np: Any, A: Any, b: Any, iters: int) -> Any:
    """CG for ``A x = b`` (``A`` dense or a scipy.sparse matrix), stopping on the residual."""
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    rs = r @ r
    for _ in range(iters):
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rs_new = r @ r
        if np.sqrt(rs_new) < 1e-10:
            break
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


def lstm_cell(np: Any, x: Any, h: Any, c: Any, W: Any, U: Any, b: Any) -> Any:
    """One LSTM cell step over a batch."""
    H = h.shape[1]
    gates = x @ W + h @ U + b

    def sigmoid(z: Any) -> Any:
        return 1.0 / (1.0 + np.exp(-z))

    i = sigmoid(gates[:, :H])
    f = sigmoid(gates[:, H : 2 * H])
    o = sigmoid(gates[:, 2 * H : 3 * H])
    g = np.tanh(gates[:, 3 * H :])
    c_next = f * c + i * g
    h_next = o * np.tanh(c_next)
    return h_next, c_next


def nbody(np: Any, pos: Any, mass: Any, steps: int) -> Any:
    """Direct-sum gravity, leapfrog steps (softened)."""
    pos = pos.copy()
    vel = np.zeros_like(pos)
    dt = 1e-3
    for _ in range(steps):
        d = pos[None, :, :] - pos[:, None, :]
        r2 = (d**2).sum(axis=2) + 1e-2
        inv = r2**-1.5
        acc = (d * (inv * mass[None, :])[:, :, None]).sum(axis=1)
        vel += dt * acc
        pos += dt * vel
    return pos


def softmax(np: Any, z: Any) -> Any:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def mlp_forward(np: Any, x: Any, W1: Any, b1: Any, W2: Any, b2: Any) -> Any:
    """A two-layer perceptron's forward pass: ReLU, then softmax."""
    h = np.maximum(x @ W1 + b1, 0.0)
    return softmax(np, h @ W2 + b2)


def poisson_assembled(np: Any, n: int, sweeps: int) -> Any:
    """Poisson's equation on the unit square: the right-hand side on a meshgrid, the
    boundary rows tiled, the initial field concatenated, then Jacobi sweeps."""
    x = np.linspace(0.0, 1.0, n)
    X, Y = np.meshgrid(x, x)
    f = 2.0 * np.pi**2 * np.sin(np.pi * X) * np.sin(np.pi * Y)
    edge = np.tile(np.linspace(0.0, 1.0, n), (1, 1))
    u = np.concatenate([edge, np.zeros((n - 2, n)), edge], axis=0)
    h2 = (1.0 / (n - 1)) ** 2
    for _ in range(sweeps):
        u[1:-1, 1:-1] = 0.25 * (
            u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + h2 * f[1:-1, 1:-1]
        )
    return u


def sorting(np: Any, x: Any) -> Any:
    """Sorted values, the median, rows sorted, and the order of the values."""
    s = np.sort(x)
    median = s[x.shape[0] // 2]
    rows = np.sort(x.reshape(-1, 8), axis=1)
    order = np.argsort(x)
    return s, median, rows, order


def power_iteration(np: Any, A: Any, iters: int) -> Any:
    """The dominant eigenvector and its Rayleigh quotient."""
    v = np.ones(A.shape[0])
    for _ in range(iters):
        w = A @ v
        v = w / np.linalg.norm(w)
    return v, v @ (A @ v)


def histogram_bincount(np: Any, x: Any) -> Any:
    """A histogram of values in [0, 1) with bincount, and their cumulative counts."""
    bins = np.floor(x * 20.0).astype(np.int64)
    counts = np.bincount(bins, minlength=20)
    return counts, np.cumsum(counts)


# -- inputs (numpy and scipy, made the same way for both runs) ---------------------------------


def hashed(n: int, seed: float, shape: tuple[int, ...] | None = None) -> numpy.ndarray:
    """Deterministic values in [0, 1) (no random generator: both runs read the same)."""
    v = numpy.sin(numpy.arange(n) * 12.9898 + seed * 78.233) * 43758.5453
    v = v - numpy.floor(v)
    return v.reshape(shape) if shape is not None else v


def laplacian(n: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    return (sp.kron(sp.eye(n), t) + sp.kron(t, sp.eye(n))).tocsr()


def programs(scale: float, rows: int) -> list[tuple[str, Callable[..., Any], tuple, tuple]]:
    """``(name, program, array inputs, other arguments)``."""
    s = max(scale, 0.05)
    n_grid = int(512 * s**0.5)
    m = int(100_000 * s)
    d = 16
    X = hashed(m * d, 1.0, (m, d)) - 0.5
    y_lin = X @ numpy.linspace(-1.0, 1.0, d) + 0.01 * (hashed(m, 2.0) - 0.5)
    Xl = hashed(rows * 10, 3.0, (rows, 10)) - 0.5
    yl = (Xl @ numpy.linspace(-2.0, 2.0, 10) > 0).astype(numpy.float64)
    nd = int(1000 * s**0.5)
    B = hashed(nd * nd, 4.0, (nd, nd))
    A_dense = B.T @ B / nd + numpy.eye(nd)
    A_sparse = laplacian(int(300 * s**0.5))
    batch, H, In = 256, 128, 64
    nb = int(400 * s**0.5)
    k = 8
    centers = hashed(k * 4, 9.0, (k, 4)) * 4.0
    pts = numpy.concatenate(
        [centers[j] + 0.3 * (hashed(m // k * 4, 10.0 + j, (m // k, 4)) - 0.5) for j in range(k)]
    )
    return [
        ("black_scholes", black_scholes,
         (hashed(rows, 5.0) * 90 + 10, hashed(rows, 6.0) * 90 + 10,
          hashed(rows, 7.0) * 2 + 0.1), ()),
        ("jacobi", jacobi, (), (n_grid, 20)),
        ("stencil5", stencil5, (hashed(n_grid * n_grid, 8.0, (n_grid, n_grid)),), (20,)),
        ("cfd_burgers", cfd_burgers, (), (int(201 * s**0.5), 20)),
        ("kmeans", kmeans, (pts, centers + 0.1), (5,)),
        ("linear_regression", linear_regression, (X, y_lin), (20,)),
        ("normal_equations", normal_equations, (X, y_lin), ()),
        ("logistic_regression", logistic_regression, (Xl, yl), (10,)),
        ("cg_dense", conjugate_gradients, (A_dense, hashed(nd, 11.0)), (50,)),
        ("cg_scipy_sparse", conjugate_gradients,
         (A_sparse, hashed(A_sparse.shape[0], 12.0)), (100,)),
        ("lstm_cell", lstm_cell,
         (hashed(batch * In, 13.0, (batch, In)), hashed(batch * H, 14.0, (batch, H)),
          hashed(batch * H, 15.0, (batch, H)), hashed(In * 4 * H, 16.0, (In, 4 * H)) * 0.1,
          hashed(H * 4 * H, 17.0, (H, 4 * H)) * 0.1, hashed(4 * H, 18.0) * 0.1), ()),
        ("nbody", nbody, (hashed(nb * 3, 19.0, (nb, 3)), hashed(nb, 20.0) + 0.5), (5,)),
        ("softmax", softmax, (hashed(m * 10, 21.0, (m, 10)) * 10,), ()),
        ("mlp_forward", mlp_forward,
         (hashed(m // 10 * 64, 22.0, (m // 10, 64)), hashed(64 * 128, 23.0, (64, 128)) - 0.5,
          hashed(128, 24.0) - 0.5, hashed(128 * 10, 25.0, (128, 10)) - 0.5, hashed(10, 26.0)), ()),
        ("poisson_assembled", poisson_assembled, (), (n_grid, 20)),
        ("sorting", sorting, (hashed(m, 27.0),), ()),
        ("power_iteration", power_iteration, (A_dense,), (30,)),
        ("histogram_bincount", histogram_bincount, (hashed(m, 28.0),), ()),
    ]  # fmt: skip


# -- running them ---------------------------------------------------------------------------------

#: programs that may be refused: they need a dense factorization
FACTORIZATIONS = {"normal_equations"}


def as_numpy(result: Any) -> list[numpy.ndarray]:
    parts = result if isinstance(result, tuple) else (result,)
    return [numpy.asarray(p) for p in parts]


def rel_error(got: list[numpy.ndarray], want: list[numpy.ndarray]) -> float:
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:
            return float("inf")
        scale = max(float(numpy.max(numpy.abs(w))) if w.size else 0.0, 1e-300)
        if g.size:
            worst = max(
                worst, float(numpy.max(numpy.abs(g.astype(float) - w.astype(float)))) / scale
            )
    return worst


def timed(f: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run(
    name: str, prog: Callable[..., Any], arrays: tuple, args: tuple, repeats: int
) -> tuple[str, float, float, str]:
    t_np, want = timed(lambda: as_numpy(prog(numpy, *arrays, *args)), repeats)
    placed = [dnp.asarray(a) for a in arrays]
    try:
        as_numpy(prog(dnp, *placed, *args))  # the first run compiles
        t_dl, got = timed(lambda: as_numpy(prog(dnp, *placed, *args)), repeats)
    except dl.NotSupportedYet as e:
        return (
            ("refused" if name in FACTORIZATIONS else "error"),
            float("nan"),
            float("nan"),
            str(e),
        )
    except Exception as e:  # a failure is reported, and the run goes on
        if os.environ.get("DISTAL_BENCH_TRACE"):
            traceback.print_exc()
        return "error", float("nan"), float("nan"), f"{type(e).__name__}: {e}"
    err = rel_error(got, want)
    status = "ok" if err < 1e-6 else "WRONG"
    return status, err, t_np / t_dl, ""


def cpu_timed(f: Callable[[], Any], repeats: int) -> float:
    """The least processor time of this process over ``repeats`` calls (what the calls cost
    whatever else runs on the machine: the dispatch is single-threaded Python)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        f()
        best = min(best, time.process_time() - t0)
    return best


def dispatch(procs: int, repeats: int) -> None:
    """Per-operation overhead: recording one element-wise operation on a DArray, and a chain
    of twenty operations ended by a read (one fused pass), per operation, beside numpy's;
    processor time (and wall time)."""
    v = hashed(1000, 30.0)
    reps = 2000
    with dl.Session("local", machine=procs):
        x = dnp.asarray(v)
        x.get()

        def record() -> None:
            for _ in range(reps):
                y = x * 2.0  # noqa: F841  (recorded; dropped unread: never computed)

        def chain() -> None:
            y = x
            for _ in range(10):
                y = y * 1.0001 + 0.5
            numpy.asarray(y)

        def chain_np() -> None:
            y = v
            for _ in range(10):
                y = y * 1.0001 + 0.5

        record()
        chain()
        rows = []
        for what, f, n in (
            ("recording one element-wise operation", record, reps),
            ("a chain of 20 operations and its read", lambda: [chain() for _ in range(50)], 1000),
            ("numpy, the same chain", lambda: [chain_np() for _ in range(50)], 1000),
        ):
            cpu = cpu_timed(f, max(repeats, 3)) / n
            wall, _ = timed(f, max(repeats, 3))
            rows.append(
                f"  {what:40s} {cpu * 1e6:6.2f} us an operation ({wall / n * 1e6:.2f} wall)"
            )
    print("dispatch, 1000-element vectors (processor time; wall time under this load):")
    print("\n".join(rows))


def logreg_step(np: Any, X: Any, y: Any, w: Any, transposed: bool) -> Any:
    """One gradient step of logistic regression, the gradient as ``X.T @ (p - y)`` (as
    numpy users write it) or as ``(p - y) @ X``."""
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    return w - 1e-5 * (X.T @ (p - y) if transposed else (p - y) @ X)


def _logreg_distal(
    procs: int, Xn: numpy.ndarray, yn: numpy.ndarray, iters: int, repeats: int, transposed: bool
) -> tuple[float, float]:
    """Words moved an iteration (redistributions and every kernel run's measured words
    sent) and the best time of ``iters`` steps that read their weights every iteration."""
    with dl.Session("local", machine=procs) as sess:
        X, y = dnp.asarray(Xn), dnp.asarray(yn)
        sent = [0]
        run_named = sess.run_named

        def counted(*a: Any, **k: Any) -> Any:
            res = run_named(*a, **k)
            sent[0] += sum(res.stats.words_sent)
            return res

        sess.run_named = counted  # type: ignore[method-assign]

        def loop() -> Any:
            w = dnp.zeros(Xn.shape[1])
            for _ in range(iters):
                w = logreg_step(dnp, X, y, w, transposed)
                w.get()
            return w

        loop()
        before, sent[0] = sess.moved_words, 0
        loop()
        words = (sess.moved_words - before + sent[0]) / iters
        t_dl, _ = timed(loop, repeats)
    return words, t_dl


def transposes(procs: int, rows: int, cols: int, iters: int, repeats: int) -> None:
    """Transposes move nothing: logistic regression's step with ``X.T @ (p - y)`` and with
    ``(p - y) @ X`` (which reads ``X`` where it lies), words moved an iteration (measured)
    and time an iteration, beside numpy's step."""
    Xn = hashed(rows * cols, 40.0, (rows, cols)) - 0.5
    yn = (Xn @ numpy.linspace(-1.0, 1.0, cols) > 0).astype(numpy.float64)
    print(f"transposes: logistic regression's step, X {rows} x {cols} "
          f"({rows * cols} words) on {procs} processors:")  # fmt: skip
    for transposed in (True, False):
        form = "X.T @ (p - y)" if transposed else "(p - y) @ X"

        def loop_np(form_t: bool = transposed) -> None:
            w = numpy.zeros(cols)
            for _ in range(iters):
                w = logreg_step(numpy, Xn, yn, w, form_t)

        words, t_dl = _logreg_distal(procs, Xn, yn, iters, repeats, transposed)
        t_np, _ = timed(loop_np, repeats)
        print(f"  {form:15s} {words:12.0f} words an iteration   "
              f"{t_dl / iters * 1e3:8.2f} ms (numpy {t_np / iters * 1e3:.2f} ms, "
              f"numpy/distal {t_np / t_dl:.2f})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0, help="problem sizes (1: the default)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="black-scholes, logistic rows")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--no-dispatch", action="store_true")
    ap.add_argument("--no-transposes", action="store_true")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores; distal.numpy on "
          f"{args.procs} processors (local runtime) against numpy {numpy.__version__}")  # fmt: skip
    correct = refused = 0
    todo = [p for p in programs(args.scale, args.rows) if not args.only or p[0] in args.only]
    with dl.Session("local", machine=args.procs):
        for name, prog, arrays, extra in todo:
            status, err, ratio, why = run(name, prog, arrays, extra, args.repeats)
            correct += status == "ok"
            refused += status == "refused"
            line = f"{name:22s} {status:8s} rel.err {err:9.2e}  numpy/distal {ratio:6.2f}"
            print(line + (f"  ({why})" if why else ""), flush=True)
    if not args.no_dispatch:
        dispatch(args.procs, args.repeats)
    if not args.no_transposes:
        transposes(args.procs, int(100_000 * args.scale), 100, 10, args.repeats)
    print(
        f"{correct}/{len(todo)} run unchanged and correct"
        + (f" ({refused} refused by name: dense factorizations)" if refused else "")
    )
    sys.exit(0)


if __name__ == "__main__":
    main()
