"""``runtime="pool"`` among the others: single kernels, executables read back, sparse
kernels, sessions, arrays programs and ``dl.apps`` run unchanged on volunteers, with the
same results and traffic as the local runtime; bad options are named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pool_kit import LocalPool, _have_pool, free_port, stop_all, wait_for

import distal as dl
from distal.errors import InputError

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A served pool with two volunteers for the module; the coordinator's credentials."""
    why = _have_pool()
    if why:
        pytest.skip(why)
    from distal.runtime.pool.server import NatsServer, PoolDir

    root = tmp_path_factory.mktemp("served")
    port = free_port()
    pd = PoolDir.create(root / "pool", port=port)
    pool = LocalPool(pd, NatsServer(pd, tied=True).start(), f"tls://127.0.0.1:{port}", root)
    try:
        for name in ("v1", "v2"):
            pool.volunteer(name)
        wait_for(lambda: all("connected" in pool.log(n) for n in ("v1", "v2")), 120,
                 "the volunteers to connect")  # fmt: skip
        yield str(root / "pool" / "coordinator.creds")
    finally:
        stop_all(pool.procs)
        pool.server.stop()


def _ints(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float64)


def test_a_kernel_runs_on_the_pool_as_on_the_local_runtime(served: str) -> None:
    n = 48
    k = dl.algorithms.summa(n, machine=dl.Machine(2, 2), steps=2).compile()
    x = {"B": _ints((n, n), 0), "C": _ints((n, n), 1)}
    res = k.run(x, runtime="pool", pool=served)
    local = k.run(x)
    assert np.array_equal(res.value, x["B"] @ x["C"])
    assert np.array_equal(res.value, local.value)
    want = k.stats()
    assert res.stats.words_received == want.words_received
    assert res.stats.messages_received == want.messages_received
    assert res.stats.iterations == want.iterations
    s = res.extra["summary"]
    assert set(s.volunteers) <= {"v1", "v2"}
    assert s.excluded_volunteers == {}
    assert s.units_rejected == []
    assert s.replies_refused == []
    assert s.checked == 4
    assert "pool" in dl.runtimes()


def test_an_executable_read_back_runs_on_the_pool(served: str) -> None:
    n = 30  # ragged: 30 over a 4 x 1 grid
    k = dl.algorithms.summa(n, machine=dl.Machine(4, 1), steps=3).compile()
    exe = dl.Executable.loads(k.executable().dumps())
    x = {"B": _ints((n, n), 2), "C": _ints((n, n), 3)}
    res = exe.run(x, runtime="pool", pool=served, verify="adaptive")
    assert np.array_equal(res.value, x["B"] @ x["C"])
    assert res.stats.words_received == k.stats().words_received


def test_a_sparse_kernel_runs_on_the_pool(served: str) -> None:
    sps = pytest.importorskip("scipy.sparse")
    n = 80
    A = sps.random(n, n, density=0.08, random_state=4, format="csr")
    M = dl.Machine(3)
    i, j = dl.index_vars("i j")
    y = dl.Tensor("y", (n,), dist="x -> x", machine=M)
    As = dl.Tensor("A", (n, n), format="csr", dist="xy -> x", machine=M)
    xv = dl.Tensor("x", (n,), dist="x -> x", machine=M)
    y[i] = As[i, j] * xv[j]
    io, ii = dl.index_vars("io ii")
    k = dl.compile(dl.schedule(y).distribute([i], [io], [ii], M).communicate([As, xv], io))
    v = np.random.default_rng(5).standard_normal(n)
    res = k.run({"A": A, "x": v}, runtime="pool", pool=served)
    np.testing.assert_allclose(res.value, A @ v, rtol=1e-12, atol=1e-12)
    local = k.run({"A": A, "x": v})
    assert res.stats.words_received == local.stats.words_received


def test_a_session_an_arrays_program_and_cg_run_unchanged(served: str) -> None:
    sps = pytest.importorskip("scipy.sparse")
    m = 12
    t = sps.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    A = sps.csr_array(sps.kron(t, sps.identity(m)) + sps.kron(sps.identity(m), t))
    b = np.random.default_rng(6).standard_normal(m * m)
    with dl.Session("pool", machine=2, pool=served) as sess:
        x, its = dl.apps.cg(A, b, tol=1e-10, session=sess)
        u = sess.asarray(np.arange(12.0))
        w = (u * 2.0 + 1.0).sum()
        assert float(w) == float((np.arange(12.0) * 2.0 + 1.0).sum())
    with dl.Session("local", machine=2) as sess:
        x_local, its_local = dl.apps.cg(A, b, tol=1e-10, session=sess)
    assert its == its_local
    assert np.array_equal(np.asarray(x), np.asarray(x_local))
    assert np.linalg.norm(A @ np.asarray(x) - b) <= 1e-9 * np.linalg.norm(b)


def test_bad_options_are_named(tmp_path: Path) -> None:
    k = dl.algorithms.summa(8, machine=dl.Machine(2, 1), steps=1).compile()
    x = {"B": np.ones((8, 8)), "C": np.ones((8, 8))}
    with pytest.raises(InputError, match="verify"):
        k.run(x, runtime="pool", verify="sometimes")
    with pytest.raises(InputError, match="volunteers"):
        k.run(x, runtime="pool", volunteers=0)
    with pytest.raises(InputError, match="no pool directory"):
        k.run(x, runtime="pool", pool=str(tmp_path / "nowhere"))
    with pytest.raises(InputError, match="unknown option"):
        k.run(x, runtime="pool", client="tcp://x")
