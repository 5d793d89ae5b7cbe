"""A script without ``if __name__ == "__main__":`` that starts a local Dask pool is told so.

Dask spawns its worker processes, which re-import the script; unguarded, every worker re-ran
``kernel.run`` and tried to start a cluster of its own ("Nanny failed to start", hundreds of
lines). The run now refuses before any process starts, naming the line and the fix.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="needs distributed (dask extra)")

import distal as dl
from distal.runtime import dask as dask_runtime
from distal.runtime.elastic.options import Options

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]

WORK = """\
import numpy as np
import distal as dl

M = dl.Machine(2)
i, io, ii = dl.index_vars("i io ii")
B = dl.Tensor("B", (8,), dist="x -> x", machine=M)
A = dl.Tensor("A", (8,), dist="x -> x", machine=M)
A[i] = B[i] * 2.0
kernel = dl.compile(dl.schedule(A).distribute([i], [io], [ii], M))
res = kernel.run({"B": np.arange(8.0)}, runtime="dask", n_workers=1, progress=False)
print("sum", res.value.sum())
"""


def _run(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        cwd=script.parent,
    )


def test_an_unguarded_script_is_refused_with_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(WORK)
    done = _run(script)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("distal.errors.InputError: runtime='dask' without client=")
    assert f"line 10 of {script}" in last
    assert 'if __name__ == "__main__":' in last
    assert "Nanny" not in done.stderr
    assert len(done.stderr.splitlines()) < 40


def test_a_guarded_script_runs(tmp_path: Path) -> None:
    script = tmp_path / "guarded.py"
    body = textwrap.indent(WORK, "    ")
    script.write_text(f'def main():\n{body}\n\nif __name__ == "__main__":\n    main()\n')
    done = _run(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sum 56.0"


@pytest.mark.parametrize(
    ("line", "unguarded"),
    [
        (1, True),  # the import: top-level, unguarded
        (4, True),  # main() called at top level
        (7, False),  # inside the guard
        (8, False),  # inside the guard, reversed comparison
        (10, True),  # after the guard
        (20, False),  # past the end: nothing to say
    ],
)
def test_unguarded_line_reads_the_guard(line: int, unguarded: bool) -> None:
    source = textwrap.dedent(
        """\
        import os
        def main():
            return 1
        main()
        x = 1
        if __name__ == "__main__":
            main()
        if "__main__" == __name__: main()
        pass
        main()
        """
    )
    assert dask_runtime.unguarded_line(source, line) is unguarded
    assert dask_runtime.unguarded_line("if (:\n", 1) is False  # unreadable: no refusal


def test_a_worker_process_bootstrapping_the_script_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the source cannot be read, the spawned worker itself refuses (multiprocessing
    marks a process that is still importing its parent's main module)."""
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(dl.InputError, match="inside a Dask worker process"):
        dask_runtime._check_main_guard(Options())
    dask_runtime._check_main_guard(Options(processes=False))  # threads re-import nothing
