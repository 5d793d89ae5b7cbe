"""Direct CBLAS calls into the BLAS numpy itself loaded, with numpy as the fallback.

Why: numpy's ``@`` cannot accumulate. ``dst += a @ b`` allocates a temporary the size of
``dst`` and then streams it through memory once more; for a SUMMA step on a 2048 x 2048
block that is ~10% of the step's time and a block-sized spike of memory. BLAS's own
``C = alpha*A@B + beta*C`` with ``beta=1`` does the same work in place, on strided views
(the leading dimension carries a block's row stride, so no operand is ever copied).

Which library, and why not scipy: the library is the one numpy already mapped into this
process, so its thread settings (``threadpoolctl``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS``) are numpy's and no second BLAS competes for the cores. Its symbol
names differ between builds, so they are discovered, not assumed: every mapped shared object
whose name says BLAS (found in ``/proc/self/maps``, through ``threadpoolctl`` when it is
installed, or next to numpy) is tried with the prefixes ``scipy_`` / none and the suffixes
``64_`` / ``_64`` / ``_`` / none for ``cblas_dgemm``. That covers numpy >= 2 wheels
(``scipy_cblas_dgemm64_``), numpy 1.2x wheels (``cblas_dgemm64_`` in ``libopenblas64_p``),
Debian/Fedora OpenBLAS (``cblas_dgemm``, LP64; ``cblas_dgemm64_`` in the 64-bit-index
packages), and MKL's ``libmkl_rt`` (``cblas_dgemm``, LP64, or ``cblas_dgemm_64``). The
index width follows the name (``64`` in the suffix: 64-bit) unless OpenBLAS's own config
string says ``USE64BITINT``. ``scipy.linalg.cython_blas`` would give a stable Fortran ABI,
but it costs a large dependency for four routines, its LP64 indices cap a matrix at 2^31
elements per dimension product, and it binds scipy's OpenBLAS rather than numpy's (two
thread pools on the same cores); the discovery above is cheap and verified instead.

The binding is only used after a self-test against numpy on strided, transposed and
column-major operands; anything unexpected (no BLAS found, a wrong answer) leaves numpy in
charge, and :func:`binding` says which one is used (CI fails when it disappears).
``DISTAL_BLAS=numpy`` switches the binding off.

Thread counts: the leaf kernels sometimes run many small GEMMs in parallel slab threads,
each BLAS call single-threaded. Where the library has a per-thread setter
(``openblas_set_num_threads_local``, ``mkl_set_num_threads_local``) the slab threads use it;
otherwise the process-wide count is lowered while any parallel region is open, under one
lock with a count of open regions, so two threads running leaves at once cannot leave the
process on one BLAS thread (the first region saves the count, the last one restores it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_P = ctypes.c_void_p

PREFIXES = ("scipy_", "")
SUFFIXES = ("64_", "_64", "_", "")
_NAME_HINTS = ("blas", "mkl_rt", "libmkl", "flexiblas", "blis", "accelerate")


def _candidate_libraries() -> list[str]:
    """Shared objects of this process that may hold numpy's BLAS, most likely first."""
    found: list[str] = []

    def add(path: str | None) -> None:
        if path and path not in found:
            found.append(path)

    try:  # threadpoolctl knows numpy's BLAS by its API, whatever the file is called
        import threadpoolctl  # type: ignore[import-not-found]

        for info in threadpoolctl.threadpool_info():
            if info.get("user_api") == "blas":
                add(info.get("filepath"))
    except Exception:
        pass
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1] if "/" in line else ""
            name = Path(path).name.lower()
            if ".so" in name and any(h in name for h in _NAME_HINTS):
                add(path)
    except OSError:
        pass
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"  # wheels, without /proc
    for pattern in ("*openblas*.so*", "*openblas*.dylib", "*openblas*.dll"):
        for p in sorted(libs.glob(pattern)):
            add(str(p))
    dylibs = Path(np.__file__).resolve().parent / ".dylibs"  # macOS wheels
    for p in sorted(dylibs.glob("*blas*.dylib")):
        add(str(p))
    return found


@dataclass(frozen=True, slots=True)
class Names:
    """How one library spells the CBLAS routines, and its index width."""

    prefix: str
    suffix: str
    ilp64: bool

    def of(self, name: str) -> str:
        return f"{self.prefix}{name}{self.suffix}"


def discover(lib: Any) -> Names | None:
    """The first prefix/suffix spelling under which ``lib`` exports ``cblas_dgemm``.

    ``lib`` is anything with the symbols as attributes (a ``ctypes.CDLL``); the index width
    is 64-bit when the suffix says ``64`` or OpenBLAS's config says ``USE64BITINT``.
    """
    for prefix in PREFIXES:
        for suffix in SUFFIXES:
            if getattr(lib, f"{prefix}cblas_dgemm{suffix}", None) is None:
                continue
            ilp64 = "64" in suffix
            config = getattr(lib, f"{prefix}openblas_get_config{suffix}", None)
            if config is not None and not ilp64:
                try:
                    config.restype, config.argtypes = ctypes.c_char_p, []
                    ilp64 = b"USE64BITINT" in (config() or b"")
                except Exception:
                    pass
            return Names(prefix, suffix, ilp64)
    return None


def _optional(lib: Any, names: list[str], argtypes: list[Any], restype: Any) -> Any:
    for n in names:
        f = getattr(lib, n, None)
        if f is not None:
            f.argtypes, f.restype = argtypes, restype
            return f
    return None


class _Blas:
    """The four routines the leaf kernels use (float32 and float64) and the thread knobs."""

    def __init__(self, lib: Any, names: Names, path: str) -> None:
        self.path, self.names = path, names
        idx = ctypes.c_int64 if names.ilp64 else ctypes.c_int32
        self.index_max = 2**63 - 1 if names.ilp64 else 2**31 - 1

        def fn(name: str, argtypes: list[Any]) -> Any:
            f = getattr(lib, names.of(name))
            f.argtypes, f.restype = argtypes, None
            return f

        ci = ctypes.c_int
        gemm = [ci, ci, ci, idx, idx, idx]
        gemv = [ci, ci, idx, idx]
        d, s = ctypes.c_double, ctypes.c_float
        f64, f32 = np.dtype(np.float64), np.dtype(np.float32)
        self.gemm = {
            f64: fn("cblas_dgemm", [*gemm, d, _P, idx, _P, idx, d, _P, idx]),
            f32: fn("cblas_sgemm", [*gemm, s, _P, idx, _P, idx, s, _P, idx]),
        }
        self.gemv = {
            f64: fn("cblas_dgemv", [*gemv, d, _P, idx, _P, idx, d, _P, idx]),
            f32: fn("cblas_sgemv", [*gemv, s, _P, idx, _P, idx, s, _P, idx]),
        }
        p, x = names.prefix, names.suffix
        ob = [f"{p}openblas_get_num_threads{x}", f"{p}openblas_get_num_threads"]
        self.get_threads = _optional(lib, [*ob, "MKL_Get_Max_Threads"], [], ctypes.c_int)
        ob = [f"{p}openblas_set_num_threads{x}", f"{p}openblas_set_num_threads"]
        self.set_global = _optional(lib, [*ob, "MKL_Set_Num_Threads"], [ci], None)
        # per-calling-thread count (OpenBLAS >= 0.3.27; unprefixed in numpy's build; MKL);
        # some builds change the process-wide count instead: checked before first use
        local = [f"{p}openblas_set_num_threads_local{x}", "openblas_set_num_threads_local"]
        self.set_local = _optional(lib, [*local, "MKL_Set_Num_Threads_Local"], [ci], ci)
        self.local_checked = False
        #: routines ("gemm", "gemv") that, given ``beta = 0``, do not write ``c`` as if it
        #: had been zero (:func:`_stores_at_beta_zero`): :func:`gemm` / :func:`gemv` zero it
        self.zero_first: frozenset[str] = frozenset()


OFF_REASON = (
    "the direct BLAS binding is switched off on purpose (DISTAL_BLAS=numpy): "
    "numpy computes every leaf"
)
_why_unbound = ""  # why _load found no binding: what a skipped test or a report says


def _load() -> _Blas | None:
    global _LIB, _why_unbound
    if os.environ.get("DISTAL_BLAS", "").lower() == "numpy":
        _why_unbound = OFF_REASON
        return None
    _why_unbound = (
        "no direct BLAS binding on this platform: no library numpy loaded has a cblas_dgemm "
        "that passes the self-test (numpy computes every leaf)"
    )
    for path in _candidate_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        names = discover(lib)
        if names is None:
            continue
        try:
            blas = _Blas(lib, names, path)
        except AttributeError:  # no sgemm/gemv under that spelling
            continue
        _LIB = blas
        try:
            ok = _self_test()
            blas.zero_first = _stores_at_beta_zero()
        except Exception:
            ok = False
        _LIB = None
        if ok:
            _why_unbound = ""
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


def _aligned(x: np.ndarray) -> np.ndarray:
    """``x``, or an aligned copy of it where its address is not a multiple of its item size.

    An operand that arrived over a network (a Dask task's input, unpickled from a frame at
    an arbitrary offset) can be unaligned, and BLAS cannot take it. Falling back to numpy
    then would change the result's bits, not only the speed: BLAS accumulates ``alpha * a @
    b`` into ``c`` with fused multiply-adds, numpy rounds the product first. So the same
    kernel would give different last bits depending on where its inputs happened to land;
    one copy of the (rare) unaligned operand keeps every run on the same arithmetic.
    """
    return x if x.flags.aligned else x.copy()


def _scale(c: np.ndarray, beta: float) -> None:
    """``c *= beta``, where ``beta = 0`` stores zeros (whatever ``c`` held: NaN too)."""
    if beta == 0:
        c.fill(0)
    else:
        c *= beta


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float, beta: float) -> bool:
    """``c = alpha * a @ b + beta * c`` in place through BLAS; False when BLAS can't take it.
    With ``beta = 0`` whatever ``c`` held is not read (BLAS's own contract, checked at load).

    Strided views are fine as long as each matrix has one unit stride; ``c`` may be
    row- or column-major (a column-major ``c`` is computed as ``c.T = b.T @ a.T``).
    """
    blas = _LIB
    if blas is None or not c.flags.writeable:
        return False
    f = blas.gemm.get(c.dtype)
    if f is None or a.dtype != c.dtype or b.dtype != c.dtype:
        return False
    a, b = _aligned(a), _aligned(b)
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
    if max(m, n, k, la[1], lb[1], lc[1]) > blas.index_max:
        return False
    if k == 0 or (beta == 0 and "gemm" in blas.zero_first):
        _scale(c, beta)
        if k == 0:
            return True
    f(
        _ROW_MAJOR, la[0], lb[0], m, n, k, alpha,
        a.ctypes.data, la[1], b.ctypes.data, lb[1], beta, c.ctypes.data, lc[1],
    )  # fmt: skip
    return True


def gemv(a: np.ndarray, x: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> bool:
    """``y = alpha * a @ x + beta * y`` in place through BLAS; False when BLAS can't take it.
    With ``beta = 0`` whatever ``y`` held is not read (as for :func:`gemm`)."""
    blas = _LIB
    if blas is None or not y.flags.writeable:
        return False
    f = blas.gemv.get(y.dtype)
    if f is None or a.dtype != y.dtype or x.dtype != y.dtype:
        return False
    a, x = _aligned(a), _aligned(x)
    la, ix, iy = _layout(a), _vec(x), _vec(y)
    if la is None or ix is None or iy is None:
        return False
    m, k = a.shape
    if m == 0:
        return True
    if max(m, k, la[1], ix, iy) > blas.index_max:
        return False
    if k == 0 or (beta == 0 and "gemv" in blas.zero_first):
        _scale(y, beta)
        if k == 0:
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


def _stores_at_beta_zero() -> frozenset[str]:
    """The routines that do not, given ``beta = 0``, write ``c`` as if it held zeros.

    BLAS's reference says ``c`` "need not be set on input" then, and distal's leaves rely
    on it to write a recycled block without zeroing it first; but OpenBLAS's gemv has
    scaled ``y`` by ``beta`` in some versions (``0 * NaN = NaN``, ``0 * -1 = -0.0``). Each
    routine runs, at a small and a blocked size, into a block of NaN, infinities and
    negative numbers and into a zeroed one: any bit apart lists it."""
    rng = np.random.default_rng(2)
    bad = set()
    for dt in (np.float64, np.float32):
        for m, n, k in ((3, 4, 2), (96, 80, 64)):
            a = rng.standard_normal((m, k)).astype(dt)
            a[0] = -0.0  # a row of -0.0 products: the sign of each zero shows too
            b = rng.standard_normal((k, n)).astype(dt)
            xm = rng.standard_normal(m).astype(dt)
            cases = (
                ("gemm", gemm, a, b, (m, n)),
                ("gemv", gemv, a, b[:, 0], (m,)),
                ("gemv", gemv, a.T, xm, (k,)),
            )
            for name, routine, x, y, shape in cases:
                clean = np.zeros(shape, dt)
                junk = np.resize(np.array([np.nan, -np.inf, -1.0, np.inf], dt), clean.size)
                dirty = junk.reshape(shape)
                ran = routine(x, y, clean, 1.0, 0.0) and routine(x, y, dirty, 1.0, 0.0)
                if not ran or clean.tobytes() != dirty.tobytes():
                    bad.add(name)
    return frozenset(bad)


_LIB: _Blas | None = None
_LIB = _load()


#: log2 of the cycles OpenBLAS's idle threads keep polling (``sched_yield``) after a call
#: before they sleep. OpenBLAS waits 2^28 cycles (about 0.1 s): a leaf streaming memory
#: in distal's slab threads right after a numpy BLAS call shares both cores with the
#: polling thread (a 512^3 TTV took 80 ms after ``np.tensordot`` against 42 ms alone).
#: 2^20 cycles (under a millisecond) still catches back-to-back calls: numpy's GEMM at
#: n = 64 .. 1024, alone or after idling, ran at the same speed.
SPIN_LOG2 = 20
SPIN_ENV = "DISTAL_OPENBLAS_THREAD_TIMEOUT"


def _shorten_spin(blas: _Blas | None) -> str:
    """Give numpy's OpenBLAS threads a short poll (:data:`SPIN_LOG2`); returns what was done.

    OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` when it starts its threads, so the variable
    is set for a moment, re-read (``openblas_read_env``) and the idle threads stopped
    (``blas_thread_shutdown_``, as OpenBLAS's own fork handler does): its next parallel
    call starts them again with the new timeout. Left alone: where the environment sets
    ``OPENBLAS_THREAD_TIMEOUT`` (the user's choice), where ``DISTAL_OPENBLAS_THREAD_TIMEOUT``
    is ``0``, where the library is not OpenBLAS's threads server, and where another Python
    thread runs (it might be inside a BLAS call that the stop would break).
    """
    want = os.environ.get(SPIN_ENV, "").strip() or str(SPIN_LOG2)
    if want != "0" and not (want.isdigit() and 4 <= int(want) <= 30):
        from distal.errors import InputError

        raise InputError(
            f"{SPIN_ENV}={os.environ[SPIN_ENV]!r}: give log2 of the cycles, 4 to 30, "
            "or 0 to leave OpenBLAS's idle threads as it set them"
        )
    if blas is None:
        return "no BLAS binding: OpenBLAS's idle threads left as they are"
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        given = os.environ["OPENBLAS_THREAD_TIMEOUT"]
        return f"OPENBLAS_THREAD_TIMEOUT={given} (the environment's): left as it is"
    if want == "0":
        return f"left as OpenBLAS set it ({SPIN_ENV}=0)"
    lib = ctypes.CDLL(blas.path)
    read_env = getattr(lib, "openblas_read_env", None)
    stop = getattr(lib, "blas_thread_shutdown_", None)
    if read_env is None or stop is None:
        return "not OpenBLAS's threads server: left as it is"
    if threading.active_count() > 1:
        return "other threads ran when distal was imported: OpenBLAS's threads left as they are"
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = want
    try:
        read_env()
    finally:
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]  # child processes see the caller's environment
    stop()
    return f"OpenBLAS's idle threads poll 2^{want} cycles, then sleep (set by distal)"


_spin_note = _shorten_spin(_LIB)


def spin() -> str:
    """What distal did to OpenBLAS's idle threads when it was imported (for reports)."""
    return _spin_note


#: environment variables through which a user sets BLAS's thread count themselves
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def share_threads(n: int) -> str:
    """Lower numpy's BLAS to at most ``n`` threads in this process; returns what was done.

    For the MPI runtime's ranks that share a node's cores (:func:`distal.kernels.cores.cores`
    says how many are this rank's): every BLAS call numpy or distal makes, ``np.dot`` of a
    reduction included, would otherwise start a thread per core in every rank. Left alone
    where the environment sets a thread count (the user's choice) or no library with a
    thread setter is bound."""
    global _saved
    given = [v for v in THREAD_VARS if os.environ.get(v, "").strip()]
    if given:
        return f"BLAS threads left as {given[0]}={os.environ[given[0]]} sets them"
    if _LIB is None or _LIB.set_global is None:
        return f"BLAS threads left as they are ({unbound_reason() or 'no thread setter'})"
    n = max(1, n)
    with _THREADS_LOCK:
        # inside a parallel region the count is lowered for a while: what counts is the
        # one the last region out restores
        have = _saved if _regions else threads()
        if have <= n:
            return f"BLAS threads: {have} (at most {n} cores for this rank)"
        if _regions:
            _saved = n
        else:
            _LIB.set_global(n)
    return f"BLAS threads: {have} -> {n} (this rank's share of the node's cores, set by distal)"


def unbound_reason() -> str | None:
    """Why there is no direct binding (None when there is one): switched off on purpose by
    ``DISTAL_BLAS=numpy``, or none found on this platform. A test that needs the binding
    skips with this, so a deliberate numpy pass does not read as a missing library."""
    if _LIB is not None:
        return None
    return _why_unbound or OFF_REASON  # _LIB set to None after import: switched off too


def binding() -> str | None:
    """``"<library path>:<cblas_dgemm symbol>"`` of the direct binding, or None (numpy)."""
    if _LIB is None:
        return None
    return f"{_LIB.path}:{_LIB.names.of('cblas_dgemm')}"


def threads() -> int:
    """BLAS threads numpy's BLAS uses now (1 when unknown)."""
    if _LIB is None or _LIB.get_threads is None:
        return 1
    try:
        return max(1, int(_LIB.get_threads()))
    except Exception:
        return 1


_THREADS_LOCK = threading.Lock()
_regions = 0  # open one_thread_each regions lowering the process-wide count
_saved = 1  # the count before the first of them


def has_local_threads() -> bool:
    """Whether a thread can make its own BLAS calls single-threaded (without changing the
    count every other thread uses: some OpenBLAS builds make the "local" setter global,
    which would leave the whole process on one BLAS thread)."""
    if _LIB is None or _LIB.set_local is None:
        return False
    with _THREADS_LOCK:
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
    return _LIB.set_local is not None


@contextlib.contextmanager
def one_thread_each() -> Iterator[bool]:
    """While inside, BLAS calls made from slab threads use one thread each.

    Yields False when that cannot be arranged (the caller then runs inline). With a
    thread-local setter the slab threads arranged it themselves; otherwise the process-wide
    count is lowered while any region is open: the first region entered saves the count,
    the last one left restores it, under one lock (two threads running leaves at once
    would otherwise restore each other's lowered count).
    """
    global _regions, _saved
    if has_local_threads():
        yield True
        return
    if _LIB is None or _LIB.set_global is None:
        yield False
        return
    with _THREADS_LOCK:
        if _regions == 0:
            _saved = threads()
            _LIB.set_global(1)
        _regions += 1
    try:
        yield True
    finally:
        with _THREADS_LOCK:
            _regions -= 1
            if _regions == 0:
                _LIB.set_global(_saved)


@contextlib.contextmanager
def limit_here(n: int) -> Iterator[None]:
    """BLAS calls made from the calling thread use at most ``n`` threads while inside (where
    the library has a per-thread setter; elsewhere nothing changes). ``parallelize``
    chunks use it so that chunks x BLAS threads does not exceed the cores."""
    if not has_local_threads():
        yield
        return
    f = _LIB.set_local  # type: ignore[union-attr]
    try:
        before = int(f(max(1, n)))  # both setters return the count they replace
    except Exception:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            f(max(0, before))


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
