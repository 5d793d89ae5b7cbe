"""Direct CBLAS calls into the OpenBLAS that numpy itself loaded, with numpy as the fallback.

Why: numpy's ``@`` cannot accumulate. ``dst += a @ b`` allocates a temporary the size of
``dst`` and then streams it through memory once more; for a SUMMA step on a 2048 x 2048
block that is ~10% of the step's time and a block-sized spike of memory. BLAS's own
``C = alpha*A@B + beta*C`` with ``beta=1`` does the same work in place, on strided views
(the leading dimension carries a block's row stride, so no operand is ever copied).

The library is the one numpy's wheel bundles (``libscipy_openblas64_``, ILP64, symbols
prefixed ``scipy_``), found among the shared objects this process has already mapped, so
its thread settings (``threadpoolctl``, ``OPENBLAS_NUM_THREADS``) are numpy's. The binding is
only used after a self-test against numpy on strided and transposed operands; anything
unexpected (another BLAS, a missing symbol, a wrong answer) silently leaves numpy in charge.
``DISTAL_BLAS=numpy`` switches the binding off.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_I64 = ctypes.c_int64
_P = ctypes.c_void_p


def _mapped_openblas() -> list[str]:
    """Paths of numpy's bundled OpenBLAS: mapped in this process (Linux), else next to numpy."""
    found: list[str] = []
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1] if "/" in line else ""
            if "openblas" in path.lower() and path not in found:
                found.append(path)
    except OSError:
        pass
    if not found:
        libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
        found = [str(p) for p in sorted(libs.glob("libscipy_openblas64_*.so*"))]
    return found


class _Blas:
    """The four routines the leaf kernels use, bound for float32 and float64."""

    def __init__(self, lib: Any, prefix: str, suffix: str) -> None:
        def fn(name: str, argtypes: list[Any]) -> Any:
            f = getattr(lib, f"{prefix}{name}{suffix}")
            f.argtypes, f.restype = argtypes, None
            return f

        gemm_args = [ctypes.c_int, ctypes.c_int, ctypes.c_int, _I64, _I64, _I64]
        gemv_args = [ctypes.c_int, ctypes.c_int, _I64, _I64]
        self.gemm = {
            np.dtype(np.float64): fn(
                "cblas_dgemm",
                [*gemm_args, ctypes.c_double, _P, _I64, _P, _I64, ctypes.c_double, _P, _I64],
            ),
            np.dtype(np.float32): fn(
                "cblas_sgemm",
                [*gemm_args, ctypes.c_float, _P, _I64, _P, _I64, ctypes.c_float, _P, _I64],
            ),
        }
        self.get_threads = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
        if self.get_threads is not None:
            self.get_threads.argtypes, self.get_threads.restype = [], ctypes.c_int
        self.set_global = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
        if self.set_global is not None:
            self.set_global.argtypes, self.set_global.restype = [ctypes.c_int], None
        # per-calling-thread thread count (OpenBLAS >= 0.3.27), unprefixed in numpy's build;
        # some builds change the process-wide count instead: checked before first use
        self.set_local = getattr(lib, "openblas_set_num_threads_local", None)
        if self.set_local is not None:
            self.set_local.argtypes, self.set_local.restype = [ctypes.c_int], ctypes.c_int
        self.local_checked = False
        self.gemv = {
            np.dtype(np.float64): fn(
                "cblas_dgemv",
                [*gemv_args, ctypes.c_double, _P, _I64, _P, _I64, ctypes.c_double, _P, _I64],
            ),
            np.dtype(np.float32): fn(
                "cblas_sgemv",
                [*gemv_args, ctypes.c_float, _P, _I64, _P, _I64, ctypes.c_float, _P, _I64],
            ),
        }


def _load() -> _Blas | None:
    if os.environ.get("DISTAL_BLAS", "").lower() == "numpy":
        return None
    for path in _mapped_openblas():
        try:
            lib = ctypes.CDLL(path)
            blas = _Blas(lib, "scipy_", "64_")
        except (OSError, AttributeError):
            continue
        global _LIB
        _LIB = blas
        try:
            ok = _self_test()
        except Exception:
            ok = False
        _LIB = None
        if ok:
            return blas
    return None


def _layout(x: np.ndarray) -> tuple[int, int] | None:
    """``(trans, ld)`` of a 2-D array for a row-major CBLAS call, or None if BLAS can't take it."""
    if x.ndim != 2 or not x.flags.aligned:
        return None
    rows, cols = x.shape
    item = x.itemsize
    s0, s1 = x.strides
    if s0 % item or s1 % item:
        return None
    s0, s1 = s0 // item, s1 // item
    if (cols <= 1 or s1 == 1) and (rows <= 1 or s0 >= cols):
        return _NO_TRANS, max(s0 if rows > 1 else cols, cols, 1)
    if (rows <= 1 or s0 == 1) and (cols <= 1 or s1 >= rows):
        return _TRANS, max(s1 if cols > 1 else rows, rows, 1)
    return None


def _vec(x: np.ndarray) -> int | None:
    """Increment of a 1-D array in elements (positive only), or None."""
    if x.ndim != 1 or not x.flags.aligned or x.strides[0] % x.itemsize:
        return None
    inc = x.strides[0] // x.itemsize if x.shape[0] > 1 else 1
    return inc if inc > 0 else None


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float, beta: float) -> bool:
    """``c = alpha * a @ b + beta * c`` in place through BLAS; False when BLAS can't take it.

    Strided views are fine as long as each matrix has one unit stride; ``c`` may be
    row- or column-major (a column-major ``c`` is computed as ``c.T = b.T @ a.T``).
    """
    blas = _LIB
    if blas is None or not c.flags.writeable:
        return False
    f = blas.gemm.get(c.dtype)
    if f is None or a.dtype != c.dtype or b.dtype != c.dtype:
        return False
    lc = _layout(c)
    if lc is None:
        return False
    if lc[0] == _TRANS:
        a, b, c = b.T, a.T, c.T
        lc = _layout(c)
        if lc is None or lc[0] != _NO_TRANS:
            return False
    la, lb = _layout(a), _layout(b)
    if la is None or lb is None:
        return False
    m, n = c.shape
    k = a.shape[1]
    if m == 0 or n == 0:
        return True
    if k == 0:
        c *= beta
        return True
    f(
        _ROW_MAJOR, la[0], lb[0], m, n, k, alpha,
        a.ctypes.data, la[1], b.ctypes.data, lb[1], beta, c.ctypes.data, lc[1],
    )  # fmt: skip
    return True


def gemv(a: np.ndarray, x: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> bool:
    """``y = alpha * a @ x + beta * y`` in place through BLAS; False when BLAS can't take it."""
    blas = _LIB
    if blas is None or not y.flags.writeable:
        return False
    f = blas.gemv.get(y.dtype)
    if f is None or a.dtype != y.dtype or x.dtype != y.dtype:
        return False
    la, ix, iy = _layout(a), _vec(x), _vec(y)
    if la is None or ix is None or iy is None:
        return False
    m, k = a.shape
    if m == 0:
        return True
    if k == 0:
        y *= beta
        return True
    if la[0] == _NO_TRANS:
        f(_ROW_MAJOR, _NO_TRANS, m, k, alpha, a.ctypes.data, la[1],
          x.ctypes.data, ix, beta, y.ctypes.data, iy)  # fmt: skip
    else:  # a is the transpose of a row-major (k, m) matrix
        f(_ROW_MAJOR, _TRANS, k, m, alpha, a.ctypes.data, la[1],
          x.ctypes.data, ix, beta, y.ctypes.data, iy)  # fmt: skip
    return True


def _self_test() -> bool:
    """Strided, transposed and column-major cases of both routines agree with numpy."""
    rng = np.random.default_rng(1)
    for dt in (np.float64, np.float32):
        big = rng.standard_normal((9, 11)).astype(dt)
        a, b = big[1:6, 2:9], big[:7, 1:5].T.copy().T  # strided; column-major
        c0 = rng.standard_normal((8, 6)).astype(dt)
        c = c0[1:6, 1:5].copy()
        want = 2.0 * (a @ b) + c
        if not gemm(a, b, c, 2.0, 1.0) or not np.allclose(c, want, rtol=1e-4, atol=1e-4):
            return False
        ct = np.asfortranarray(c0[:5, :4])
        want = a.T.T @ b
        if not gemm(a, b, ct, 1.0, 0.0) or not np.allclose(ct, want, rtol=1e-4, atol=1e-4):
            return False
        x = big[0, :7]
        y = c0[:5, 0].copy()
        want = a @ x + 0.5 * y
        if not gemv(a, x, y, 1.0, 0.5) or not np.allclose(y, want, rtol=1e-4, atol=1e-4):
            return False
        y = np.zeros(7, dt)
        if not gemv(a.T, big[2, :5], y, 1.0, 0.0) or not np.allclose(
            y, a.T @ big[2, :5], rtol=1e-4, atol=1e-4
        ):
            return False
    return True


_LIB: _Blas | None = None
_LIB = _load()


def threads() -> int:
    """BLAS threads numpy's OpenBLAS uses now (1 when unknown)."""
    if _LIB is None or _LIB.get_threads is None:
        return 1
    try:
        return max(1, int(_LIB.get_threads()))
    except Exception:
        return 1


def has_local_threads() -> bool:
    """Whether a thread can make its own BLAS calls single-threaded (without changing the
    count every other thread uses: some OpenBLAS builds make the "local" setter global,
    which would leave the whole process on one BLAS thread)."""
    if _LIB is None or _LIB.set_local is None:
        return False
    if not _LIB.local_checked:
        _LIB.local_checked = True
        before = threads()
        t = threading.Thread(target=_LIB.set_local, args=(1,))
        t.start()
        t.join()
        if threads() != before:
            if _LIB.set_global is not None:
                _LIB.set_global(before)
            _LIB.set_local = None
            return False
    return True


@contextlib.contextmanager
def one_thread_each() -> Iterator[bool]:
    """While inside, BLAS calls made from slab threads use one thread each.

    Yields False when that cannot be arranged (the caller then runs inline). With a
    thread-local setter the slab threads arranged it themselves; otherwise the process-wide
    count is lowered for the parallel region and restored after it (nothing else calls BLAS
    in this process meanwhile: runtimes call leaf kernels one at a time).
    """
    if has_local_threads():
        yield True
        return
    if _LIB is None or _LIB.set_global is None:
        yield False
        return
    before = threads()
    _LIB.set_global(1)
    try:
        yield True
    finally:
        _LIB.set_global(before)


def single_threaded_here() -> bool:
    """Make BLAS calls from the calling thread use one thread; False when BLAS can't."""
    if not has_local_threads():
        return False
    try:
        _LIB.set_local(1)  # type: ignore[union-attr]
    except Exception:
        return False
    return True


def available() -> bool:
    """Whether the direct BLAS binding is in use (else numpy computes every leaf)."""
    return _LIB is not None
