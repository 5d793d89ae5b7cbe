"""Dense leaves compiled by IREE (``dl.compile(schedule, leaf="iree")``), the only module
that imports ``iree.compiler`` and ``iree.runtime`` (``pip install 'distal[mlir]'``).

A leaf routine computes ``dst += alpha * einsum(spec, *ops)`` on the blocks one leaf call
sees, as the default routines of :mod:`distal.kernels.leaf` do. Here the term is printed as
one ``linalg.generic`` with the printer of :mod:`distal.mlir.export` (the text
``kernel.to_mlir`` writes), compiled for the CPU (``llvm-cpu``, tuned for this host) and run
through the IREE runtime's synchronous local driver. A term of three or more factors is two
generics: the element-wise product of the later factors first (as the default leaves form
MTTKRP's Khatri-Rao product), since IREE 3.13 rejects some single three-input contractions.

IREE needs static shapes, so a module is compiled once per *leaf shape*: the term, the
operands' shapes and element types, the output's and the coefficient; later calls on that
shape reuse it (:func:`cache_info`). float64 stays float64 (IREE demotes it to float32
unless told not to), so results equal the default leaves' to rounding.

IREE reads contiguous arrays: a strided view of a block is copied first, and the result
is copied into ``dst`` (views are the norm, so this costs one pass over each operand).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distal.errors import NotSupportedYet
from distal.mlir.export import Generic, LeafFunction, Operand
from distal.mlir.types import element_type

EXTRA = "pip install 'distal[mlir]'"
#: compiler flags: this host's CPU, and float64 kept as float64
FLAGS = ("--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=false")
TARGET = "llvm-cpu"
DRIVER = "local-sync"
#: what each IREE leaf kind compiles for and runs on: (target backend, runtime driver,
#: compiler flags); ``iree-cuda`` is the accelerator path, the same modules for CUDA
TARGETS = {
    "iree": (TARGET, DRIVER, FLAGS),
    "iree-cuda": ("cuda", "cuda", ("--iree-input-demote-f64-to-f32=false",)),
}


def available(leaf: str = "iree") -> None:
    """Check that IREE's compiler and runtime import (and, for ``iree-cuda``, that the
    runtime sees a CUDA device).

    Raises:
        NotSupportedYet: naming the missing package and the extra that brings it, or the
            missing device.
    """
    try:
        import iree.compiler  # noqa: F401  (imported to find out whether it is there)
        import iree.runtime as ireert
    except ModuleNotFoundError as e:
        raise NotSupportedYet(
            f"leaf={leaf!r} needs IREE ({e.name!r}: iree-base-compiler and iree-base-runtime): "
            f"{EXTRA}"
        ) from e
    if leaf == "iree-cuda" and not cuda_devices(ireert):
        raise NotSupportedYet(
            "leaf='iree-cuda' runs the leaves on a CUDA device, and IREE's runtime sees none "
            "here (use leaf='iree' for the CPU)"
        )


def cuda_devices(ireert: Any) -> list[Any]:
    """The CUDA devices IREE's runtime sees (none where the driver cannot start)."""
    if "cuda" not in ireert.query_available_drivers():
        return []
    try:
        return list(ireert.get_driver("cuda").query_available_devices())
    except Exception:  # no libcuda, no device: the driver does not start
        return []


def compile_leaf(text: str, leaf: str = "iree") -> bytes:
    """One leaf module (MLIR text) compiled for ``leaf``'s target: a flatbuffer the
    runtime loads. Compiling for CUDA needs no device."""
    import iree.compiler as ireec

    target, _, flags = TARGETS[leaf]
    return ireec.compile_str(text, target_backends=[target], extra_args=list(flags))


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """How many leaf shapes were compiled, and how many calls found theirs compiled."""

    compiled: int
    hits: int


_LOCK = threading.Lock()
_MODULES: dict[tuple, Any] = {}
_HITS = [0]


def cache_info() -> CacheInfo:
    """The compiled leaf shapes of this process and the calls that reused one."""
    return CacheInfo(len(_MODULES), _HITS[0])


def clear_cache() -> None:
    """Forget every compiled leaf shape (the next call on each compiles again)."""
    with _LOCK:
        _MODULES.clear()
        _HITS[0] = 0


def leaf_text(
    spec: str,
    shapes: Sequence[tuple[int, ...]],
    elements: Sequence[str],
    out_shape: tuple[int, ...],
    out_element: str,
    alpha: Any,
) -> str:
    """The MLIR function of one leaf shape: ``out + alpha * prod(ins)`` as a generic whose
    loops are the output's letters (parallel) then the others (reduction)."""
    ins, out = spec.split("->")
    parts = ins.split(",") if ins else []
    letters = list(out) + [c for p in parts for c in p if c not in out]
    loops = list(dict.fromkeys(letters))
    pos = {c: k for k, c in enumerate(loops)}
    inputs = tuple(
        Operand(f"x{k}", tuple(s), e) for k, (s, e) in enumerate(zip(shapes, elements, strict=True))
    )
    fn = LeafFunction(
        "leaf",
        inputs,
        Operand("out", tuple(out_shape), out_element),
        (
            Generic(
                alpha,
                tuple((k, tuple(pos[c] for c in p)) for k, p in enumerate(parts)),
                len(loops),
                len(out),
            ),
        ),
    )
    return fn.text()


#: what IREE's runtime reads to decide it runs under mpirun (then it opens ``libmpi.so``
#: for collective channels distal does not use, and fails where that name is not on the
#: library path, as with the mpich wheel's ``mpiexec``)
_MPI_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPIEXEC_HOSTNAME")


@contextlib.contextmanager
def _without_mpi_env() -> Iterator[None]:
    """IREE devices made as outside MPI: distal's ranks move the data themselves, and each
    leaf runs on its own rank's device. (Under ``_LOCK``: the environment is process-wide.)"""
    saved = {k: os.environ.pop(k) for k in _MPI_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _module(key: tuple, text: str, leaf: str) -> Any:
    fn = _MODULES.get(key)
    if fn is not None:
        _HITS[0] += 1
        return fn
    import iree.runtime as ireert

    with _LOCK:
        fn = _MODULES.get(key)
        if fn is None:
            vmfb = compile_leaf(text, leaf)
            with _without_mpi_env():
                fn = ireert.load_vm_flatbuffer(vmfb, driver=TARGETS[leaf][1]).leaf
            _MODULES[key] = fn
    return fn


class IreeContraction:
    """``dst += alpha * einsum(spec, *ops)`` (``fresh``: ``dst`` is zero) through IREE."""

    kind = "iree"

    def __init__(self, spec: str, leaf: str = "iree") -> None:
        self.spec = spec
        self.leaf = leaf
        self.lock = threading.Lock()  # one module call at a time (its context is shared)
        ins, out = spec.split("->")
        self.ranks = tuple(len(p) for p in ins.split(",")) if ins else ()
        self.out_rank = len(out)
        #: a leaf without a loop (every operand and the output 0-d) has nothing for IREE to
        #: compile: it runs the default routine (one multiply-add, as fast as it gets)
        self.scalar = not out and not ins.replace(",", "")

    def __call__(self, ops: Sequence[np.ndarray], dst: np.ndarray, alpha: Any, fresh: bool) -> None:
        if (
            self.scalar
            or dst.ndim != self.out_rank
            or len(ops) != len(self.ranks)
            or any(o.ndim != r for o, r in zip(ops, self.ranks, strict=False))
        ):
            # a scalar leaf, or blocks carrying axes the term's letters do not name (a
            # variable the term sees at one point only): the default routine, which takes
            # such blocks as they come (and IREE would gain nothing)
            from distal.kernels.leaf import contraction

            contraction(self.spec)(ops, dst, alpha, fresh)
            return
        if len(ops) >= 3:
            self._product_first(ops, dst, alpha, fresh)
            return
        init = np.zeros(dst.shape, dst.dtype) if fresh else np.asarray(dst, order="C")
        dst[...] = _call(self.spec, list(ops), init, alpha, self.lock, self.leaf)

    def _product_first(
        self, ops: Sequence[np.ndarray], dst: np.ndarray, alpha: Any, fresh: bool
    ) -> None:
        """Three or more factors: ``W = f1 * f2 * ...`` over the later factors' letters (one
        element-wise generic, as the default leaves form MTTKRP's Khatri-Rao product), then
        ``dst += alpha * f0 . W``. IREE 3.13 rejects some single generics of three inputs
        with reductions (``vector.contract`` verification); two-input ones compile."""
        ins, out = self.spec.split("->")
        parts = ins.split(",")
        w = "".join(dict.fromkeys(c for p in parts[1:] for c in p))
        size = {
            c: n for p, o in zip(parts, ops, strict=True) for c, n in zip(p, o.shape, strict=True)
        }
        wa = _call(
            f"{','.join(parts[1:])}->{w}",
            list(ops[1:]),
            np.zeros([size[c] for c in w], dst.dtype),
            1,
            self.lock,
            self.leaf,
        )
        init = np.zeros(dst.shape, dst.dtype) if fresh else np.asarray(dst, order="C")
        dst[...] = _call(f"{parts[0]},{w}->{out}", [ops[0], wa], init, alpha, self.lock, self.leaf)


def _call(
    spec: str, ops: list[np.ndarray], init: np.ndarray, alpha: Any, lock: Any, leaf: str = "iree"
) -> np.ndarray:
    """``init + alpha * einsum(spec, *ops)`` by the compiled module of this leaf shape."""
    elems = tuple(element_type(o.dtype, f"operand {k}") for k, o in enumerate(ops))
    out_elem = element_type(init.dtype, "the output")
    shapes = tuple(o.shape for o in ops)
    key = (leaf, spec, shapes, elems, init.shape, out_elem, alpha)
    fn = _module(key, leaf_text(spec, shapes, elems, init.shape, out_elem, alpha), leaf)
    args = [np.asarray(o, order="C") for o in ops]
    with lock:
        res = fn(*args, init)
    # a copy: the mapped result lives only as long as the device buffer behind it
    return np.array(res.to_host(), copy=True).reshape(init.shape)


_ROUTINES: dict[tuple[str, str], IreeContraction] = {}


def contraction(spec: str, leaf: str = "iree") -> IreeContraction:
    """The IREE routine of ``spec`` for ``leaf`` (one per spec and leaf kind, holding its
    compiled leaf shapes)."""
    r = _ROUTINES.get((spec, leaf))
    if r is None:
        r = _ROUTINES.setdefault((spec, leaf), IreeContraction(spec, leaf))
    return r
