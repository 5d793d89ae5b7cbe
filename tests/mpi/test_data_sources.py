"""Block sources and writers of ``distal.data`` in one process (no MPI needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import distal as dl
from distal.data import DistributedResult, chunks_for


def test_from_function_matches_fromfunction() -> None:
    f = lambda i, j: np.sin(i * 0.5) + 3 * j  # noqa: E731
    src = dl.from_function((7, 5), f)
    want = np.fromfunction(f, (7, 5))
    assert np.array_equal(src.read_block(((0, 7), (0, 5))), want)
    assert np.array_equal(src.read_block(((2, 6), (1, 2))), want[2:6, 1:2])
    assert src.read_block(((3, 3), (0, 5))).shape == (0, 5)


def test_from_function_broadcasts_constants_and_handles_orders_0_and_1() -> None:
    assert np.array_equal(
        dl.from_function((3, 4), lambda i, j: 2.0).read_block(((0, 3), (1, 3))),
        np.full((3, 2), 2.0),
    )
    assert np.array_equal(dl.from_function((6,), lambda i: i * i).read_block(((2, 5),)), [4, 9, 16])
    assert dl.from_function((), lambda: 7.5).read_block(()) == 7.5
    assert (
        dl.from_function((4,), lambda i: i, dtype=np.int32).read_block(((0, 4),)).dtype == np.int32
    )


def test_from_box_function_and_bad_boxes() -> None:
    src = dl.from_box_function((4, 4), lambda box: np.full([hi - lo for lo, hi in box], box[0][0]))
    assert np.array_equal(src.read_block(((2, 4), (0, 1))), [[2], [2]])
    with pytest.raises(dl.InputError, match="does not lie inside"):
        src.read_block(((0, 5), (0, 1)))


def test_block_sources_as_local_inputs() -> None:
    n = 9
    M = dl.Machine(2, 2)
    i, j, k = dl.index_vars("i j k")
    A = dl.Tensor("A", (n, n), dist="xy -> xy", machine=M)
    B = dl.Tensor("B", (n, n), dist="xy -> xy", machine=M)
    C = dl.Tensor("C", (n, n), dist="xy -> xy", machine=M)
    A[i, j] = B[i, k] * C[k, j]
    io, jo, ii, ji = dl.index_vars("io jo ii ji")
    kernel = dl.compile(dl.schedule(A).distribute([i, j], [io, jo], [ii, ji], M))
    fb = lambda i, j: np.cos(i + 2.0 * j)  # noqa: E731
    c = np.arange(n * n, dtype=float).reshape(n, n)
    res = kernel.run({"B": dl.from_function((n, n), fb), "C": c})
    assert np.allclose(res.value, np.fromfunction(fb, (n, n)) @ c)


def test_npy_dir_round_trip_with_another_blocking(tmp_path: Path) -> None:
    a = np.arange(35.0).reshape(5, 7)
    blocks = {((0, 2), (0, 7)): a[:2], ((2, 5), (0, 3)): a[2:, :3], ((2, 5), (3, 7)): a[2:, 3:]}
    dl.write_npy_dir(tmp_path / "a", blocks)
    src = dl.from_npy_dir(tmp_path / "a")
    assert src.shape == (5, 7)
    assert src.dtype == np.float64
    assert np.array_equal(src.read_block(((0, 5), (0, 7))), a)
    assert np.array_equal(src.read_block(((1, 4), (2, 5))), a[1:4, 2:5])
    doc = json.loads((tmp_path / "a" / "distal.json").read_text())
    assert doc["format"] == "distal-npy-dir"
    assert len(doc["blocks"]) == 3


def test_npy_dir_errors_name_the_directory(tmp_path: Path) -> None:
    with pytest.raises(dl.InputError, match=r"no distal\.json"):
        dl.from_npy_dir(tmp_path / "missing")
    a = np.ones((4, 4))
    dl.write_npy_dir(tmp_path / "gap", {((0, 2), (0, 4)): a[:2]}, shape=(4, 4))
    with pytest.raises(dl.InputError, match="do not cover"):
        dl.from_npy_dir(tmp_path / "gap").read_block(((0, 4), (0, 4)))
    dl.write_npy_dir(tmp_path / "ovl", {((0, 3), (0, 4)): a[:3], ((2, 4), (0, 4)): a[2:]})
    with pytest.raises(dl.InputError, match="overlap"):
        dl.from_npy_dir(tmp_path / "ovl")
    with pytest.raises(dl.InputError, match="has shape"):
        dl.write_npy_dir(tmp_path / "bad", {((0, 3), (0, 4)): a})


def test_chunks_divide_every_block() -> None:
    assert chunks_for((((0, 4), (4, 8), (8, 10)), ((0, 10),)), (10, 10)) == (4, 10)
    # nested cuts: 10 -> [0,5),[5,10) -> each in 2: boundaries 3, 5, 8 -> chunk 1
    assert chunks_for((((0, 3), (3, 5), (5, 8), (8, 10)),), (10,)) == (1,)
    assert chunks_for(((),), (0,)) == (1,)


def test_distributed_result_writers_in_one_process(tmp_path: Path) -> None:
    a = np.arange(12.0).reshape(3, 4)
    boxes = (((0, 2), (0, 4)), ((2, 3), (0, 4)))
    res = DistributedResult(
        value=None,  # type: ignore[arg-type]
        stats=dl.Stats.zeros(1),
        seconds=0.0,
        shape=(3, 4),
        blocks={((0, 3), (0, 4)): a},
        primary=boxes,
        all_boxes=boxes,
        chunks=(2, 4),
    )
    res.write_npy_dir(tmp_path / "r")
    assert np.array_equal(dl.from_npy_dir(tmp_path / "r").read_block(((0, 3), (0, 4))), a)
    pytest.importorskip("zarr", reason="zarr not installed (pip install 'distal[zarr]')")
    res.write_zarr(tmp_path / "r.zarr")
    z = dl.from_zarr(tmp_path / "r.zarr")
    assert z.shape == (3, 4)
    assert np.array_equal(z.read_block(((1, 3), (1, 2))), a[1:3, 1:2])


def test_distributed_result_writers_name_an_unusable_path(tmp_path: Path) -> None:
    told: list[str] = []
    res = DistributedResult(
        value=None,  # type: ignore[arg-type]
        stats=dl.Stats.zeros(1),
        seconds=0.0,
        shape=(2, 2),
        blocks={((0, 2), (0, 2)): np.ones((2, 2))},
        primary=(((0, 2), (0, 2)),),
        all_boxes=(((0, 2), (0, 2)),),
        chunks=(2, 2),
        notify=told.append,
    )
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    with pytest.raises(dl.InputError, match=r"cannot write the result to .*a-file.*\(rank 0\)"):
        res.write_npy_dir(in_the_way / "out")
    assert len(told) == 1
    assert "a-file" in told[0]
