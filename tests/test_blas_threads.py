"""Leaf kernels that split work over threads leave the process's BLAS thread count alone."""

from __future__ import annotations

from typing import Any

import numpy as np

import distal as dl
from distal import algorithms as al
from distal.kernels import blas


def test_slab_parallel_leaves_keep_blas_threads() -> None:
    before = blas.threads()
    alg = al.ttm((32, 32, 32), 16, machine=dl.Machine(2, 2))
    inputs = alg.inputs(0)
    np.testing.assert_allclose(alg.compile().run(inputs).value, alg.reference(inputs), rtol=1e-10)
    assert blas.threads() == before
    with blas.one_thread_each() as ok:
        if blas.available() and (blas.has_local_threads() or blas._LIB.set_global is not None):
            assert ok  # the binding can always arrange single-threaded slab calls
        if ok and not blas.has_local_threads():
            assert blas.threads() == 1  # the process-wide count is lowered inside ...
        with blas.one_thread_each() as inner:  # ... nested regions leave it lowered ...
            assert inner == ok
        if ok and not blas.has_local_threads():
            assert blas.threads() == 1
    assert blas.threads() == before  # ... and the last one out restores it


def test_large_inner_products_split_over_threads_exactly() -> None:
    from distal.kernels import leaf

    rng = np.random.default_rng(5)
    x = rng.random((80, 70, 60))[5:75, :, 3:57]  # strided, above the slab threshold
    y = rng.random((60, 70, 80))[3:57, :, 5:75]
    assert x.size >= leaf.SLABS_MIN
    run = leaf.contraction("ijk,kji->")
    assert run.kind == "dot"
    dst = np.zeros(())
    run([x, y], dst, 2.0, True)
    run([x, y], dst, 1.0, False)  # accumulates
    np.testing.assert_allclose(dst, 3.0 * np.einsum("ijk,kji->", x, y), rtol=1e-12)
    before = blas.threads()
    alg = al.inner_product((96, 96, 96), machine=dl.Machine(2, 2))
    inputs = alg.inputs(0)
    np.testing.assert_allclose(alg.compile().run(inputs).value, alg.reference(inputs), rtol=1e-12)
    assert blas.threads() == before


def test_packed_operands_go_in_chunks_exactly(monkeypatch: Any) -> None:
    """The 4-D contraction's operands can't be viewed as matrices; large packs go in row
    and column slices (forced here on small blocks) with the same results."""
    from distal.kernels import leaf

    monkeypatch.setattr(leaf, "PACK_MIN", 1)
    monkeypatch.setattr(leaf, "PACK_MIN_SIDE", 1)
    rng = np.random.default_rng(7)
    cases = [
        ("acik,cbkj->abij", (7, 5, 9, 6), (5, 11, 6, 4)),
        ("acik,cbkj->abij", (1, 3, 2, 2), (3, 1, 2, 5)),
        ("ikj,jkl->il", (9, 4, 5), (5, 4, 3)),
        ("abk,kc->acb", (6, 5, 7), (7, 3)),
    ]
    for spec, xs, ys in cases:
        x, y = rng.random(xs), rng.random(ys)
        run = leaf.contraction(spec)
        want = np.einsum(spec, x, y)
        dst = np.empty(want.shape)
        run([x, y], dst, 2.0, True)
        np.testing.assert_allclose(dst, 2.0 * want, rtol=1e-12)
        run([x, y], dst, -1.0, False)
        np.testing.assert_allclose(dst, want, rtol=1e-12)
    alg = al.contraction_4d(6, 5, 7, 4, 3, 5, machine=dl.Machine(2, 2))
    inputs = alg.inputs(0)
    np.testing.assert_allclose(alg.compile().run(inputs).value, alg.reference(inputs), rtol=1e-10)


_SPIN_PROBE = """
import ctypes, json, os
import numpy as np
a = np.random.default_rng(0).standard_normal((300, 300))
before = a @ a.T  # numpy's BLAS threads started, as in a user's program
import distal
from distal.kernels import blas
f = ctypes.CDLL(blas._LIB.path).openblas_thread_timeout
f.restype = ctypes.c_int
after = a @ a.T  # the threads start again, with the new timeout
print(json.dumps({
    "timeout": f(), "note": blas.spin(), "env": "OPENBLAS_THREAD_TIMEOUT" in os.environ,
    "same": bool(np.array_equal(before, after)),
    "close": bool(np.allclose(after, np.einsum("ij,kj->ik", a, a), rtol=1e-12, atol=1e-9)),
}))
"""


def _spin_probe(**env: str) -> dict[str, Any]:
    import json
    import os
    import subprocess
    import sys

    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT",)}
    base.pop(blas.SPIN_ENV, None)
    out = subprocess.run(
        [sys.executable, "-c", _SPIN_PROBE], env={**base, **env}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _need_openblas_server() -> None:
    import ctypes

    import pytest

    if not blas.available():
        pytest.skip(f"no BLAS binding: {blas.unbound_reason()}")
    lib = ctypes.CDLL(blas._LIB.path)
    if (
        getattr(lib, "openblas_read_env", None) is None
        or getattr(lib, "blas_thread_shutdown_", None) is None
    ):
        pytest.skip("numpy's BLAS is not OpenBLAS's threads server: distal leaves it alone")


def test_importing_distal_shortens_openblas_idle_polling() -> None:
    """OpenBLAS's idle threads poll ~0.1 s after each call, stealing the cores distal's
    slab threads stream memory on: distal gives them 2^20 cycles, and numpy's BLAS works
    (the same bits) after its threads restart, without the variable left in the
    environment of child processes."""
    _need_openblas_server()
    got = _spin_probe()
    assert got["timeout"] == blas.SPIN_LOG2
    assert "set by distal" in got["note"]
    assert not got["env"]
    assert got["same"]
    assert got["close"]


def test_the_users_openblas_timeout_and_the_opt_out_are_kept() -> None:
    _need_openblas_server()
    mine = _spin_probe(OPENBLAS_THREAD_TIMEOUT="7")
    assert mine["timeout"] == 7
    assert "the environment's" in mine["note"]
    kept = _spin_probe(**{blas.SPIN_ENV: "0"})
    assert kept["timeout"] == 0
    assert "left as OpenBLAS set it" in kept["note"]
    assert kept["same"]
    assert kept["close"]


def test_a_bad_spin_setting_is_refused_by_name() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, blas.SPIN_ENV: "fast"}
    out = subprocess.run(
        [sys.executable, "-c", "import distal"], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    assert "InputError" in out.stderr
    assert blas.SPIN_ENV in out.stderr


def test_a_tall_thin_gemm_goes_in_row_slices_with_the_same_bits(monkeypatch: Any) -> None:
    """A tall ``a`` against a thin ``b`` that stays in cache runs in ~2 MiB row slices of
    ``a`` (faster in OpenBLAS, the same bits as one call); a ``b`` too large for the cache
    (read again by every slice) keeps one call."""
    from distal.kernels import leaf

    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((4096, 512)), rng.standard_normal((512, 24))
    whole = np.zeros((4096, 24))
    assert leaf._tall_rows(a, b, whole) == 512  # 2 MiB of a's 512-element rows
    calls: list[int] = []
    real = blas.gemm

    def count(x: np.ndarray, y: np.ndarray, z: np.ndarray, alpha: float, beta: float) -> bool:
        calls.append(x.shape[0])
        return real(x, y, z, alpha, beta)

    if blas.available():
        assert real(a, b, whole, 1.0, 0.0)  # one call: the reference bits
    else:
        np.matmul(a, b, out=whole)
    monkeypatch.setattr(blas, "gemm", count)
    sliced = np.zeros_like(whole)
    leaf._gemm(a, b, sliced, 1.0, 0)
    if blas.available():
        assert calls == [512] * 8
    np.testing.assert_array_equal(sliced, whole)
    np.testing.assert_allclose(sliced, a @ b, rtol=1e-12, atol=1e-10)
    long_a, out = np.empty((256, 8192)), np.empty((256, 24))  # 32-row slices ...
    assert leaf._tall_rows(long_a, np.empty((8192, 4)), out[:, :4]) == 32
    assert leaf._tall_rows(long_a, np.empty((8192, 24)), out) == 0  # ... but b is 1.5 MiB
    assert leaf._tall_rows(a, rng.standard_normal((512, 200)), np.zeros((4096, 200))) == 0


def test_memory_bound_slabs_run_the_first_on_the_calling_thread() -> None:
    """Slabs that make no BLAS call run the first on the calling thread (one hand-over
    fewer: a 512^3 TTV went from 0.85-0.89x to 0.92x numpy); a slab that fails is raised
    only once every other slab has finished."""
    import threading

    import pytest

    from distal.kernels import leaf

    if blas.threads() < 2:
        pytest.skip("one BLAS thread: the slabs run inline")
    me = threading.current_thread().name
    seen: dict[int, str] = {}

    def record(lo: int, hi: int) -> None:
        seen[lo] = threading.current_thread().name

    leaf._parallel(record, 10)
    assert seen[0] == me
    assert len(seen) == min(blas.threads(), 10)
    assert all(name.startswith("distal-leaf") for lo, name in seen.items() if lo)
    done: list[int] = []

    def fail_first(lo: int, hi: int) -> None:
        if lo == 0:
            raise ValueError("slab 0")
        threading.Event().wait(0.05)
        done.append(lo)

    with pytest.raises(ValueError, match="slab 0"):
        leaf._parallel(fail_first, 10)
    assert len(done) == len(seen) - 1  # the others ran to the end first


def _count_slabs(monkeypatch: Any) -> list[int]:
    """The ``n`` of every ``leaf._parallel`` call from now on (the calls still run)."""
    from distal.kernels import leaf

    calls: list[int] = []
    real = leaf._parallel
    monkeypatch.setattr(
        leaf,
        "_parallel",
        lambda fn, n, calls_blas=False: calls.append(n) or real(fn, n, calls_blas),
    )
    return calls


def test_large_packs_are_copied_in_slabs_exactly(monkeypatch: Any) -> None:
    """A large transposed operand is packed one slab per core: the same elements as one
    ``np.copyto``, and the 4-D contraction that packs its operands still equals numpy."""
    from distal.kernels import leaf

    rng = np.random.default_rng(8)
    src = rng.standard_normal((40, 30, 50, 20)).transpose(1, 3, 0, 2)
    monkeypatch.setattr(leaf, "SLABS_MIN", 1000)  # this small array is "large"
    calls = _count_slabs(monkeypatch)
    dst = np.empty(src.shape)
    leaf._pack(dst, src)
    assert calls == [30]
    np.testing.assert_array_equal(dst, np.ascontiguousarray(src))
    run = leaf.contraction("acik,cbkj->abij")
    b, c = rng.standard_normal((6, 5, 7, 8)), rng.standard_normal((5, 4, 8, 9))
    out = np.zeros((6, 4, 7, 9))
    run([b, c], out, 1.0, True)
    np.testing.assert_allclose(out, np.einsum("acik,cbkj->abij", b, c), rtol=1e-12)


def test_a_large_khatri_rao_product_is_formed_in_slabs_exactly(monkeypatch: Any) -> None:
    """MTTKRP's ``W = C (.) D`` is formed one slab per core where large: the same bits as
    formed whole, and numpy's MTTKRP."""
    from distal.kernels import leaf

    rng = np.random.default_rng(9)
    b, c, d = (rng.standard_normal(s) for s in ((7, 20, 30), (20, 5), (30, 5)))
    run = leaf.contraction("ijk,jl,kl->il")
    assert run.kind == "khatri-rao"
    whole = np.zeros((7, 5))
    monkeypatch.setattr(leaf, "SLABS_MIN", 1 << 40)
    run([b, c, d], whole, 1.0, True)
    monkeypatch.setattr(leaf, "SLABS_MIN", 100)  # W (3000 elements) is "large"
    calls = _count_slabs(monkeypatch)
    sliced = np.zeros((7, 5))
    run([b, c, d], sliced, 1.0, True)
    assert 20 in calls  # W's 20 rows went in slabs
    np.testing.assert_array_equal(sliced, whole)
    np.testing.assert_allclose(sliced, np.einsum("ijk,jl,kl->il", b, c, d), rtol=1e-12)
