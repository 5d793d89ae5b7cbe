"""The elastic run's summary counts what happened once: a damaged checkpoint entry is one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import gemm, gemm_inputs

pytestmark = [pytest.mark.dask, pytest.mark.timeout(90)]


def _damage(entry: Path) -> None:
    entry.write_bytes(entry.read_bytes()[:-5])  # truncated: fails its checksum


@pytest.mark.parametrize("damaged", [["block-0-1"], ["block-0-0", "block-1-1"]])
def test_each_corrupt_block_entry_is_counted_once(
    client: Any, tmp_path: Path, damaged: list[str]
) -> None:
    """On a 2x2 GEMM every output block is one unit's result, saved under the block's
    name: the driver finds the damaged entry and so does the unit it resubmits."""
    k, x = gemm(n=8, grid=(2, 2)), gemm_inputs(8)
    first = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, progress=False)
    root = Path(first.extra["checkpoint"])
    for name in damaged:
        _damage(root / f"{name}.ck")
    again = k.run(x, runtime="dask", client=client, checkpoint=tmp_path, progress=False)
    assert np.array_equal(again.value, x["B"] @ x["C"])
    s = again.extra["summary"]
    assert s.corrupt == len(damaged), str(s)
    assert again.tasks_executed == len(damaged)
    word = "entry" if len(damaged) == 1 else "entries"
    assert f"checkpoint: {len(damaged)} corrupt {word} recomputed" in str(s)
