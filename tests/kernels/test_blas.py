"""The BLAS binding: symbol discovery across builds, thread-count ownership, CI presence."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

from distal.kernels import blas


class FakeLib:
    """A library exporting exactly ``symbols`` (ctypes-like: missing names are absent)."""

    def __init__(self, *symbols: str, config: bytes | None = None) -> None:
        self.symbols = set(symbols)
        self.config = config

    def __getattr__(self, name: str) -> Any:
        if name == "symbols" or name not in self.symbols:
            raise AttributeError(name)
        if "get_config" in name:
            cfg = self.config

            class Config:
                restype: Any = None
                argtypes: Any = None

                def __call__(self) -> bytes | None:
                    return cfg

            return Config()
        return object()


@pytest.mark.parametrize(
    ("symbols", "want"),
    [
        (("scipy_cblas_dgemm64_",), ("scipy_", "64_", True)),  # numpy >= 2 wheels
        (("cblas_dgemm64_",), ("", "64_", True)),  # numpy 1.2x wheels, Debian libopenblas64
        (("cblas_dgemm",), ("", "", False)),  # distro OpenBLAS, MKL's libmkl_rt (LP64)
        (("cblas_dgemm_64", "cblas_dgemm"), ("", "_64", True)),  # MKL with ILP64 symbols
        (("cblas_dgemm_",), ("", "_", False)),
        (("scipy_cblas_dgemm",), ("scipy_", "", False)),
    ],
)
def test_symbol_spellings_are_discovered(symbols: tuple[str, ...], want: tuple) -> None:
    names = blas.discover(FakeLib(*symbols))
    assert names is not None
    assert (names.prefix, names.suffix, names.ilp64) == want
    assert names.of("cblas_sgemv") == f"{want[0]}cblas_sgemv{want[1]}"


def test_unsuffixed_openblas_with_64_bit_indices_is_ilp64() -> None:
    lib = FakeLib("cblas_dgemm", "openblas_get_config", config=b"OpenBLAS 0.3.21 USE64BITINT")
    assert blas.discover(lib) == blas.Names("", "", True)
    lib = FakeLib("cblas_dgemm", "openblas_get_config", config=b"OpenBLAS 0.3.21 DYNAMIC_ARCH")
    assert blas.discover(lib) == blas.Names("", "", False)


def test_no_cblas_means_no_binding() -> None:
    assert blas.discover(FakeLib("dgemm_", "ddot_")) is None


def test_binding_present_on_ci() -> None:
    """CI's platform has a BLAS numpy loaded: losing the binding would silently slow every
    leaf and add uncounted temporaries, so on CI this fails instead of skipping."""
    if os.environ.get("DISTAL_BLAS", "").lower() == "numpy":
        assert blas.binding() is None
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        assert blas.binding() is not None, "no direct BLAS binding found on the CI platform"
    if blas.binding() is None:
        pytest.skip(str(blas.unbound_reason()))
    path, symbol = blas.binding().rsplit(":", 1)
    assert os.path.exists(path)
    assert "cblas_dgemm" in symbol


def test_distal_blas_numpy_switches_the_binding_off() -> None:
    env = {**os.environ, "DISTAL_BLAS": "numpy"}
    code = "from distal.kernels import blas; print(blas.binding(), blas.available())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    assert out.stdout.split() == ["None", "False"]


def test_the_numpy_pass_skips_saying_the_binding_was_switched_off() -> None:
    """Under ``DISTAL_BLAS=numpy`` the tests that need the binding skip because it was
    turned off on purpose, not with "no binding on this platform"."""
    env = {**os.environ, "DISTAL_BLAS": "numpy"}
    here = os.path.dirname(__file__)
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    argv += [os.path.join(here, "test_leaf.py") + "::test_routine_matches_einsum[direct-ik,kj->ij]"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    skips = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert out.returncode == 0, out.stdout + out.stderr
    assert skips, out.stdout
    assert all(blas.OFF_REASON in line for line in skips), skips
    assert "on this platform" not in out.stdout


class CountingBlas:
    """A stand-in for the library's process-wide thread setter (no per-thread setter)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.set_local = None
        self.local_checked = True
        self.get_threads = lambda: self.n
        self.lock = threading.Lock()

    def set_global(self, n: int) -> None:
        self.n = n


def test_overlapping_parallel_regions_restore_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads open and close one_thread_each regions interleaved; the count is 1 while
    any is open and the original afterwards (restoring per region would leave it at 1)."""
    fake = CountingBlas(4)
    monkeypatch.setattr(blas, "_LIB", fake)
    entered, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[int] = []

    def first() -> None:
        with blas.one_thread_each() as ok:
            assert ok
            entered.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        entered.wait(10)
        with blas.one_thread_each() as ok:
            assert ok
            second_in.set()
            first_out.wait(10)
            seen.append(fake.n)  # the first region has closed, this one is still open

    ts = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert seen == [1]
    assert fake.n == 4


def test_many_threads_entering_regions_leave_the_count_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = CountingBlas(3)
    monkeypatch.setattr(blas, "_LIB", fake)
    barrier = threading.Barrier(8)
    bad: list[int] = []

    def worker() -> None:
        barrier.wait(10)
        for _ in range(200):
            with blas.one_thread_each():
                if fake.n != 1:
                    bad.append(fake.n)

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert bad == []
    assert fake.n == 3


def test_index_width_limits_are_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    """An LP64 library refuses (returns False: numpy computes) dimensions beyond 2^31 - 1
    instead of passing truncated integers."""
    if blas._LIB is None:
        pytest.skip(str(blas.unbound_reason()))
    monkeypatch.setattr(blas._LIB, "index_max", 3)
    a, b, c = np.ones((4, 2)), np.ones((2, 2)), np.zeros((4, 2))
    assert not blas.gemm(a, b, c, 1.0, 0.0)
    assert not c.any()
    a, b, c = np.ones((2, 2)), np.ones((2, 2)), np.zeros((2, 2))
    assert blas.gemm(a, b, c, 1.0, 0.0)
    np.testing.assert_array_equal(c, a @ b)


def _unaligned(x: np.ndarray) -> np.ndarray:
    """A copy of ``x`` at an address one byte past an aligned one (as an array unpickled
    from a network frame can be)."""
    raw = np.zeros(x.nbytes + 1, np.uint8)
    out = np.frombuffer(raw.data[1:], dtype=x.dtype).reshape(x.shape)
    out[...] = x
    assert not out.flags.aligned
    return out


@pytest.mark.skipif(blas._LIB is None, reason="no BLAS library found")
def test_an_unaligned_operand_gets_the_same_bits_as_an_aligned_one() -> None:
    """``y += alpha * a @ x`` through BLAS rounds with fused multiply-adds, numpy's fallback
    rounds the product first: an unaligned operand must not switch the arithmetic (the same
    Dask task gave different last bits depending on where its inputs landed)."""
    rng = np.random.default_rng(5)
    q, b = rng.standard_normal(101), rng.standard_normal(101)
    alpha = float(rng.standard_normal())
    runs = []
    for col in (q.reshape(-1, 1), _unaligned(q.reshape(-1, 1))):
        y = b.copy()
        assert blas.gemv(col, np.array([1.0]), y, alpha, 1.0)
        runs.append(y)
        c = b.reshape(-1, 1).copy()
        assert blas.gemm(col, np.array([[1.0]]), c, alpha, 1.0)
        runs.append(c[:, 0])
    gemv_aligned, gemm_aligned, gemv_unaligned, gemm_unaligned = runs
    assert np.array_equal(gemv_unaligned, gemv_aligned)
    assert np.array_equal(gemm_unaligned, gemm_aligned)
    for y in runs:
        assert np.allclose(y, b + alpha * q, rtol=1e-15, atol=1e-15)


def _bound() -> Any:
    if blas.binding() is None:
        pytest.skip(str(blas.unbound_reason()))
    return blas._LIB


def test_a_routine_reading_its_output_at_beta_zero_is_found_and_zeroed_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The load-time probe lists a routine that, given ``beta = 0``, scales its output
    instead of storing it (``0 * NaN = NaN``: OpenBLAS's gemv in some versions); gemm and
    gemv then zero the output first, so a block of NaN gives the bits a zeroed one does."""
    lib = _bound()
    real = blas.gemv

    def scaling(a: Any, x: Any, y: Any, alpha: float, beta: float) -> bool:
        with np.errstate(invalid="ignore"):  # 0 * inf, as such a routine computes it
            y *= beta
        y += alpha * (a @ x)
        return True

    monkeypatch.setattr(blas, "gemv", scaling)
    assert blas._stores_at_beta_zero() == frozenset({"gemv"})
    monkeypatch.setattr(blas, "gemv", real)
    assert blas._stores_at_beta_zero() == lib.zero_first  # what loading found here
    monkeypatch.setattr(lib, "zero_first", frozenset({"gemm", "gemv"}))
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
    for call, shape in (
        (lambda c: blas.gemm(a, b, c, 1.0, 0.0), (40, 20)),
        (lambda c: blas.gemv(a, b[:, 0], c, 1.0, 0.0), (40,)),
        (lambda c: blas.gemm(a[:, :0], b[:0], c, 1.0, 0.0), (40, 20)),  # k = 0: zeros
    ):
        clean, dirty = np.zeros(shape), np.full(shape, np.nan)
        assert call(clean)
        assert call(dirty)
        assert clean.tobytes() == dirty.tobytes()


def test_an_empty_product_at_beta_zero_stores_zeros_over_nan() -> None:
    """``k = 0``: ``c = beta * c``, and ``beta = 0`` stores zeros (not ``0 * NaN``)."""
    _bound()
    a, x = np.zeros((5, 0)), np.zeros(0)
    c, y = np.full((5, 3), np.nan), np.full(5, np.nan)
    assert blas.gemm(a, np.zeros((0, 3)), c, 1.0, 0.0)
    assert blas.gemv(a, x, y, 1.0, 0.0)
    assert not c.any()
    assert not y.any()
    assert not np.signbit(c).any()
