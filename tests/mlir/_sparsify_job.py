"""Runs in a fresh process for ``upstream.run_sparsified``: each job's module through
upstream MLIR's ``--sparsifier`` and its JIT (the Python bindings), results saved beside.

Usage: ``python _sparsify_job.py DIR N`` (``DIR/k.mlir``, ``DIR/k.npz`` -> ``DIR/k.out.npy``);
exit status 3 when the bindings do not load.
"""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path

import numpy as np

try:
    from mlir import execution_engine, ir, passmanager
    from mlir import runtime as rt
except ImportError as e:
    print(f"cannot import the MLIR Python bindings: {e}", file=sys.stderr)
    sys.exit(3)


def main(folder: Path, n: int) -> None:
    for k in range(n):
        text = (folder / f"{k}.mlir").read_text()
        with np.load(folder / f"{k}.npz") as z:
            args = [z[f"arr_{i}"] for i in range(len(z.files))]
        with ir.Context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            pipeline = "builtin.module(sparsifier{enable-runtime-library=false})"
            passmanager.PassManager.parse(pipeline).run(module.operation)
            engine = execution_engine.ExecutionEngine(module, opt_level=2)
            head = next(ln for ln in text.split("\n") if ln.startswith("func.func @main"))
            out = head.split("->")[-1]
            rank = len(re.findall(r"(\d+|\?)x", out))
            res = rt.make_nd_memref_descriptor(rank, ctypes.c_double)()
            res_p = ctypes.pointer(ctypes.pointer(res))
            ptrs = [
                ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(a))) for a in args
            ]
            engine.invoke("main", res_p, *ptrs)
            np.save(folder / f"{k}.out.npy", np.array(rt.ranked_memref_to_numpy(res_p[0])))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
