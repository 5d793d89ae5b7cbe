"""What a newcomer meets instead of a raw exception: a missing extra named with the
``pip install`` that brings it, a sparse matrix given for a dense tensor, a complex sparse
matrix times a real vector, ``distal run -n 2 python script.py``, and a Dask session started
from a script piped to ``python -``."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import distal as dl

ROOT = Path(__file__).resolve().parent.parent


def python(code: str, *, stdin: str | None = None, cwd: Path | None = None, timeout: float = 120):
    """Run ``code`` (or, with ``stdin``, ``python -`` reading it) in a fresh interpreter."""
    args = [sys.executable, "-"] if stdin is not None else [sys.executable, "-c", code]
    return subprocess.run(
        args,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**__import__("os").environ, "DISTAL_PROGRESS": "0"},
    )


HIDE = "import sys; sys.modules[{name!r}] = None\n"


@pytest.mark.parametrize(
    ("module", "code", "extra"),
    [
        ("mpi4py", "dl.Session('mpi')", "distal[mpi]"),
        ("distributed", "dl.Session('dask')", "distal[dask]"),
    ],
)
def test_a_session_on_a_runtime_without_its_extra_names_it(
    module: str, code: str, extra: str
) -> None:
    """Before: ``ModuleNotFoundError: import of mpi4py halted`` (Dask: at the first value)."""
    got = python(
        HIDE.format(name=module)
        + "import distal as dl\n"
        + "try:\n"
        + f"    {code}\n"
        + "except dl.NotSupportedYet as e:\n"
        + "    print('NSY', e)\n"
    )
    assert got.returncode == 0, got.stderr
    assert f"pip install '{extra}'" in got.stdout, got.stdout
    assert "Traceback" not in got.stderr


@pytest.mark.parametrize("kind", ["distribution", "traffic", "timeline", "simulated"])
def test_distal_plot_without_matplotlib_names_the_extra(kind: str, tmp_path: Path) -> None:
    got = python(
        HIDE.format(name="matplotlib")
        + "from distal.cli import main\n"
        + "sys.exit(main(['plot', 'ik,kj->ij', '--n', '32', '--machine', '2x2', '--algorithm',"
        + f" 'summa', '--kind', {kind!r}, '-o', 'x.png']))\n",
        cwd=tmp_path,
    )
    assert got.returncode == 2, got
    assert "pip install 'distal[viz]'" in got.stderr
    assert "Traceback" not in got.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_sparse_matrix_for_a_dense_tensor_says_so() -> None:
    """Before: ``InputError: input 'B' has non-numeric dtype object``."""
    sp = pytest.importorskip("scipy.sparse")
    i, j = dl.index_vars("i j")
    M = dl.Machine(2)
    y = dl.Tensor("y", (6,), dist="x -> x", machine=M)
    B = dl.Tensor("B", (6, 6), dist="xy -> x", machine=M)
    x = dl.Tensor("x", (6,), dist="x -> *", machine=M)
    y[i] = B[i, j] * x[j]
    kernel = dl.compile(dl.schedule(y))
    mat = sp.random(6, 6, density=0.5, random_state=0, format="csr")
    with pytest.raises(dl.InputError, match=r"input 'B' is a sparse array .*csr.*toarray\(\)"):
        kernel.run({"B": mat, "x": np.ones(6)})
    with pytest.raises(dl.InputError, match=r"format='csr'"):
        kernel.run({"B": dl.SparseArray.from_scipy(mat, "csr"), "x": np.ones(6)})
    np.testing.assert_allclose(
        kernel.run({"B": mat.toarray(), "x": np.ones(6)}).value, mat @ np.ones(6)
    )


def test_a_complex_sparse_matrix_times_a_real_vector_is_complex() -> None:
    """Before: ``NotationError: out(i) = t0(i,j) * t1(j): tensor 't0' is complex128 but
    output tensor 'out' is float64 ... give 'out' dtype=np.complex128`` (tensors the user
    never made)."""
    sp = pytest.importorskip("scipy.sparse")
    mat = sp.random(8, 8, density=0.4, random_state=1, format="csr") * (1 - 2j)
    v = np.arange(8.0)
    sess = dl.Session("local", machine=2)
    got = sess.asarray(mat) @ sess.asarray(v)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(np.asarray(got), mat @ v, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(sess.asarray(mat) @ v), mat @ v, rtol=1e-14)
    real = sp.random(8, 8, density=0.4, random_state=2, format="csr")
    np.testing.assert_allclose(
        np.asarray(sess.asarray(real) @ sess.asarray(v * 1j)), real @ (v * 1j), rtol=1e-14
    )


SCRIPT = """\
import sys
import distal as dl
from mpi4py import MPI
sys.stdout.write(f"<rank {MPI.COMM_WORLD.Get_rank()} args {sys.argv[1:]}>\\n")
"""


@pytest.mark.mpi
def test_distal_run_takes_python_as_the_interpreter(tmp_path: Path) -> None:
    """Before: ``FileNotFoundError: [Errno 2] No such file or directory: 'python'`` with a
    traceback from every rank."""
    from mpi_jobs import require_mpi

    launcher = require_mpi()
    (tmp_path / "hello.py").write_text(SCRIPT)
    base = [sys.executable, "-m", "distal", "run", "-n", "2", "--mpiexec", launcher]
    got = subprocess.run(
        [*base, "python", "hello.py", "x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert got.returncode == 0, got
    assert sorted(re.findall(r"<rank \d args [^>]*>", got.stdout)) == [
        "<rank 0 args ['x']>",
        "<rank 1 args ['x']>",
    ]
    for bad, says in [
        (["nosuch.py"], "cannot run 'nosuch.py': no such file"),
        (["python"], "after 'python' give the script"),
        (["python", "-u", "hello.py"], "after 'python' give the script"),
    ]:
        got = subprocess.run([*base, *bad], capture_output=True, text=True, cwd=tmp_path)
        assert got.returncode == 2, got
        assert says in got.stderr
        assert "Traceback" not in got.stderr
        assert len(got.stderr.strip().splitlines()) == 1  # one line, not one per rank


@pytest.mark.slow
@pytest.mark.dask
def test_a_dask_session_from_a_script_on_stdin_runs_its_workers_in_process() -> None:
    """``python - < script.py``: Dask's spawned workers cannot run ``'<stdin>'`` again.
    Before: ``RuntimeError: Nanny failed to start``."""
    pytest.importorskip("distributed")
    script = textwrap.dedent(
        """\
        import numpy as np
        import distal as dl
        if __name__ == "__main__":
            with dl.Session("dask", machine=2, progress=False) as sess:
                x = sess.asarray(np.arange(10.0))
                print("dot", float(x @ x))
        """
    )
    got = python("", stdin=script, timeout=180)
    assert got.returncode == 0, got.stderr
    assert "dot 285.0" in got.stdout
    assert "DistalWarning" in got.stderr
    assert "processes=False" in got.stderr
    assert "Nanny failed" not in got.stderr
