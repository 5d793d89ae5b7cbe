"""Dask sessions keep their values on the workers: chains of kernels move nothing through
the driver (``driver_words``), blocks sit on several workers, and a lost worker's blocks are
recomputed from their lineage."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import distal as dl

distributed = pytest.importorskip("distributed", reason="needs distributed (dask extra)")


def _workers_of(sess: dl.Session, name: str) -> set[str]:
    return {w for ws in sess.holders(name).values() for w in ws}


def test_a_chain_of_kernels_moves_nothing_through_the_driver(dask_client: Any) -> None:
    rng = np.random.default_rng(1)
    a, b, x = rng.random((48, 48)), rng.random((48, 48)), rng.random(48)
    sess = dl.Session("dask", client=dask_client, machine=4, progress=False)
    A, B, X = sess.asarray(a), sess.asarray(b), sess.asarray(x)
    C = A @ B
    y = C @ X
    z = y * 0.5 - X
    n2 = z @ z
    scale = n2 / (X @ X)  # a 0-d operation: on a worker too
    sess["w"] = z * scale
    sess["C"] = C
    sess.flush()  # (bindings are recorded, computed at the next flush)
    assert sess.kernels_run >= 3
    assert sess.driver_words == 0
    # the blocks of the results are spread over both workers, not gathered anywhere
    assert len(_workers_of(sess, "C")) == 2
    assert len(sess.holders("w")) == 4
    # reading a value brings exactly its elements back, and they are right
    zz = (a @ b) @ x * 0.5 - x
    np.testing.assert_allclose(sess.get("w"), zz * ((zz @ zz) / (x @ x)), rtol=1e-12)
    assert sess.driver_words == 48
    np.testing.assert_allclose(sess.get("C"), a @ b, rtol=1e-12)
    assert sess.driver_words == 48 + 48 * 48
    assert "driver words (values through the driver): 2352" in sess.summary()


def test_redistribution_runs_on_the_workers(dask_client: Any) -> None:
    from tests.session.test_session import M22, elementwise, matmul

    n = 8
    rng = np.random.default_rng(4)
    b, c = rng.random((n, n)), rng.random((n, n))
    sess = dl.Session("dask", client=dask_client, progress=False)
    sess.put("B", b)
    sess.put("C", c)
    sess.run(matmul(n, "A", "B", "C", {"A": "ij", "B": "ij", "C": "ij"}, M22))
    # D reads A rows-replicated: A is cut anew on the workers (moved words), not via here
    sess.run(elementwise(n, "D", "ij", {"A": "i*"}, M22, 2.0))
    assert sess.moved_words == n * n
    assert sess.driver_words == 0
    assert len(sess.holders("A")) == 2  # "i*" on a 2x2 machine: two distinct row blocks
    np.testing.assert_allclose(sess.get("D"), 2 * (b @ c), rtol=1e-12)
    assert sess.driver_words == n * n


def test_sparse_loop_places_the_matrix_once(dask_client: Any) -> None:
    """An SpMV loop: the matrix's stored values are sent to the workers once, then read
    there by every iteration; the vectors never come back until asked for."""
    n = 60
    a = sp.random(n, n, density=0.1, random_state=3, format="csr") + sp.eye(n, format="csr")
    x0 = np.random.default_rng(5).random(n)
    sess = dl.Session("dask", client=dask_client, machine=3, progress=False)
    A = sess.asarray(a)
    x = sess.asarray(x0)
    for _ in range(3):
        y = A @ x
        x = y / (y @ y) ** 0.5
        sess["x"] = x
    sess.flush()  # (bindings are recorded, computed at the next flush)
    held = sess.values[A.node.name]
    # one block of values per processor, placed once (the runtime keeps them by value)
    assert len(sess.rt.placed_blocks(held.data)) == 3
    assert sess.driver_words == 0
    want = x0
    for _ in range(3):
        want = a @ want
        want = want / np.linalg.norm(want)
    np.testing.assert_allclose(sess.get("x"), want, rtol=1e-12)
    assert sess.driver_words == n


def test_a_lost_worker_s_blocks_are_recomputed() -> None:
    """Blocks live only on the workers; when one dies, Dask recomputes its blocks from the
    kernels' tasks (the input blocks carry their data) and the value is still exact."""
    with (
        distributed.LocalCluster(
            n_workers=3, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        rng = np.random.default_rng(7)
        a, b = rng.random((30, 30)), rng.random((30, 30))
        sess = dl.Session("dask", client=client, machine=6, progress=False)
        sess["C"] = sess.asarray(a) @ sess.asarray(b) + 1.0
        holders = _workers_of(sess, "C")
        assert len(holders) >= 2
        victim = sorted(holders)[0]
        only_there = [b for b, ws in sess.holders("C").items() if ws == [victim]]
        assert only_there  # blocks that exist nowhere else
        worker = next(w for w in cluster.workers.values() if w.address == victim)
        client.sync(worker.close)  # no hand-over: its blocks are gone
        assert victim not in _workers_of(sess, "C")
        np.testing.assert_allclose(sess.get("C"), a @ b + 1.0, rtol=1e-12)


def test_a_session_without_client_keeps_its_pool_until_closed() -> None:
    rng = np.random.default_rng(2)
    a = rng.random((16, 16))
    with dl.Session("dask", n_workers=2, processes=False, progress=False, machine=2) as sess:
        sess["B"] = sess.asarray(a) * 2.0
        sess["C"] = sess["B"] @ sess["B"]
        client = sess.client
        assert client.status == "running"
        np.testing.assert_allclose(sess.get("C"), (2 * a) @ (2 * a), rtol=1e-12)
    assert client.status in ("closed", "closing")
    assert sess.names() == []


def test_a_checkpointed_loop_is_saved_by_the_workers(dask_client: Any, tmp_path: Any) -> None:
    """Each kept block is written by the worker holding it (only checksums come back), and
    a new session resumes from it exactly."""
    rng = np.random.default_rng(9)
    a, x0 = rng.random((24, 24)) / 24, rng.random(24)

    def loop(sess: dl.Session) -> None:
        A = sess.asarray(a)
        if "x" not in sess:
            sess["x"] = sess.asarray(x0)
        for _ in sess.iterations(4, keep=["x"], name="power"):
            sess["x"] = A @ sess["x"] + 1.0

    first = dl.Session("dask", client=dask_client, machine=3, checkpoint=tmp_path)
    loop(first)
    assert first.driver_words == 0  # four saved iterations, nothing through the driver
    want = x0
    for _ in range(4):
        want = a @ want + 1.0
    np.testing.assert_allclose(first.get("x"), want, rtol=1e-12)

    again = dl.Session("dask", client=dask_client, machine=3, checkpoint=tmp_path)
    loop(again)
    assert again.resumed_from == 3
    np.testing.assert_array_equal(again.get("x"), first.get("x"))


def test_a_loop_saved_behind_the_computation_on_dask(dask_client: Any, tmp_path: Any) -> None:
    """``save="latest"``: the writer thread has the workers write the kept blocks while the
    loop goes on; the last iteration is always saved, and a new session resumes after it."""
    rng = np.random.default_rng(11)
    a, x0 = rng.random((20, 20)) / 20, rng.random(20)

    def loop(sess: dl.Session, n: int) -> None:
        A = sess.asarray(a)
        if "x" not in sess:
            sess["x"] = sess.asarray(x0)
        for _ in sess.iterations(n, keep=["x"], name="latest", save="latest"):
            sess["x"] = A @ sess["x"] - 0.5

    first = dl.Session("dask", client=dask_client, machine=2, checkpoint=tmp_path)
    loop(first, 6)
    assert first.driver_words == 0
    want = x0
    for _ in range(6):
        want = a @ want - 0.5
    np.testing.assert_allclose(first.get("x"), want, rtol=1e-12)
    again = dl.Session("dask", client=dask_client, machine=2, checkpoint=tmp_path)
    loop(again, 8)
    assert again.resumed_from == 5
    for _ in range(2):
        want = a @ want - 0.5
    np.testing.assert_allclose(again.get("x"), want, rtol=1e-12)
