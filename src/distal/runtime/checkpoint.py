"""Durable checkpoints for the elastic runtime: run keys, input fingerprints, an atomic store.

A checkpoint lives under ``<location>/<run key>/``. The run key hashes everything that
decides the numbers a task produces: the statement, the placements (distributions and
shapes), the whole plan (schedule), the dtypes, the task granularity and a fingerprint of
every input. So a changed input or schedule lands in a different directory and can never
pick up a stale result; identical reruns find their finished work.

Each entry (a partial output sum or a finished output block) is one file::

    DISTALCK\\x01 {"name", "dtype", "shape", "nbytes", "sha256"}\\n <raw C-order bytes>

written to a temporary name and renamed into place, so a reader sees either nothing or a
whole file; the checksum catches files damaged later (truncated, bit rot, a bad disk):
such an entry loads as ``corrupt`` and the runtime recomputes and rewrites it.
``manifest.json`` records what the run is (for humans and tools) and, once the run has
finished, every block's checksum.

Locations are local directories (plain paths or ``file://``) or any fsspec URL
(``memory://``, ``s3://``...). This module has no Dask dependency: workers and the driver
both use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from distal.errors import InputError
from distal.runtime.source import is_block_source

FORMAT = 1
MAGIC = b"DISTALCK\x01"
SUFFIX = ".ck"
MANIFEST = "manifest.json"

OK, MISSING, CORRUPT = "ok", "missing", "corrupt"


_CHUNK = 1 << 24  # bytes hashed per task when an array is fingerprinted in parallel


def _sha(view: memoryview) -> bytes:
    return hashlib.sha256(view).digest()  # hashlib releases the GIL on large buffers


def fingerprint_array(arr: np.ndarray) -> str:
    """sha256 over the sha256 of each 16 MiB chunk of an array's bytes (with its dtype and
    shape): equal data, equal fingerprint. Chunks are hashed on all cores."""
    a = np.ascontiguousarray(arr)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    if a.size:
        raw = memoryview(a.reshape(-1).view(np.uint8))
        chunks = [raw[o : o + _CHUNK] for o in range(0, len(raw), _CHUNK)]
        if len(chunks) > 1:
            for d in _hash_pool().map(_sha, chunks):
                h.update(d)
        else:
            h.update(_sha(chunks[0]))
    return h.hexdigest()


_POOL: list[Any] = []


def _hash_pool() -> Any:
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(max(2, os.cpu_count() or 2), "distal-hash"))
    return _POOL[0]


def source_fingerprint(src: Any) -> str | None:
    """The block source's own ``fingerprint()`` (cheap, e.g. file mtimes), if it has one."""
    fp = getattr(src, "fingerprint", None)
    if fp is None:
        return None
    return hashlib.sha256(f"source:{fp()}".encode()).hexdigest()


def combine(parts: Mapping[str, str]) -> str:
    """One fingerprint from named parts (order-independent)."""
    h = hashlib.sha256()
    for k in sorted(parts):
        h.update(f"{k}={parts[k]};".encode())
    return h.hexdigest()


def input_fingerprints(data: Mapping[str, Any]) -> dict[str, str | None]:
    """Fingerprint of every input that can be fingerprinted without reading blocks.

    Arrays hash their bytes; block sources use their ``fingerprint()`` method. ``None``
    marks a block source without one: the runtime hashes the blocks it reads instead.
    """
    out: dict[str, str | None] = {}
    for name, x in data.items():
        out[name] = source_fingerprint(x) if is_block_source(x) else fingerprint_array(x)
    return out


def run_key(kernel: Any, fingerprints: Mapping[str, str], granularity: str) -> str:
    """The checkpoint directory name of one (kernel, inputs, granularity)."""
    plan = kernel.plan
    desc = repr(
        (
            FORMAT,
            plan.statement,
            sorted(plan.placements.items()),
            plan.programs,
            sorted(plan.primary.items()),
            sorted((n, np.dtype(d).str) for n, d in kernel.dtypes.items()),
            granularity,
            sorted(fingerprints.items()),
        )
    )
    return hashlib.sha256(desc.encode()).hexdigest()[:32]


def describe(kernel: Any, fingerprints: Mapping[str, str], granularity: str) -> dict[str, Any]:
    """The human-readable part of the manifest."""
    s = kernel.schedule
    return {
        "format": FORMAT,
        "statement": str(kernel.plan.statement.assignment),
        "schedule": repr(s),
        "distributions": dict(s.distributions),
        "shapes": {n: list(t.shape) for n, t in s.tensors().items()},
        "dtypes": {n: np.dtype(d).str for n, d in kernel.dtypes.items()},
        "granularity": granularity,
        "fingerprints": dict(fingerprints),
    }


def encode(name: str, arr: np.ndarray) -> tuple[bytes, memoryview, str]:
    """Header, payload and checksum of one entry."""
    a = np.ascontiguousarray(arr)
    payload = memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")
    digest = hashlib.sha256(payload).hexdigest()
    head = {
        "name": name,
        "dtype": a.dtype.str,
        "shape": list(a.shape),
        "nbytes": a.nbytes,
        "sha256": digest,
    }
    return MAGIC + json.dumps(head).encode() + b"\n", payload, digest


def decode(name: str, raw: bytes) -> np.ndarray | None:
    """The array in an entry, or None when the entry is damaged or belongs to another name."""
    if not raw.startswith(MAGIC):
        return None
    end = raw.find(b"\n", len(MAGIC))
    if end < 0:
        return None
    try:
        head = json.loads(raw[len(MAGIC) : end])
        dtype = np.dtype(head["dtype"])
        shape = tuple(int(x) for x in head["shape"])
        nbytes, digest = int(head["nbytes"]), str(head["sha256"])
    except (ValueError, KeyError, TypeError):
        return None
    payload = memoryview(raw)[end + 1 :]
    if head.get("name") != name or len(payload) != nbytes:
        return None
    if hashlib.sha256(payload).hexdigest() != digest:
        return None
    if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != nbytes:
        return None
    return np.frombuffer(payload, dtype=dtype).reshape(shape)


class CheckpointStore:
    """Entries of one run under ``<location>/<run>/``; picklable, so workers write directly.

    Local paths use ``os`` calls (``fsync`` + ``os.replace``: atomic and durable); other
    URLs use fsspec (temporary name, then ``mv``; object stores write atomically anyway).
    """

    def __init__(self, location: str | os.PathLike[str], run: str, fsync: bool = True) -> None:
        loc = os.fspath(location)
        if not isinstance(loc, str) or not loc:
            raise InputError(f"checkpoint location must be a path or URL, got {location!r}")
        if loc.startswith("file://"):
            loc = loc[len("file://") :]
        self.local = "://" not in loc
        self.base = os.path.abspath(loc) if self.local else loc.rstrip("/")
        self.run = run
        self.fsync = fsync
        self._fs: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_fs"} | {"_fs": None}

    @property
    def protocol(self) -> str:
        """``file`` for local directories, else the URL's scheme."""
        return "file" if self.local else self.base.split("://", 1)[0]

    @property
    def root(self) -> str:
        """The run's directory."""
        return f"{self.base}/{self.run}"

    def fs(self) -> Any:
        """The fsspec filesystem of a URL location (created lazily, once per process)."""
        if self._fs is None:
            try:
                import fsspec
            except ModuleNotFoundError as e:  # pragma: no cover - fsspec comes with dask
                raise InputError(f"checkpoint URL {self.base!r} needs fsspec") from e
            try:
                self._fs = fsspec.core.url_to_fs(self.base)[0]
            except (ValueError, ImportError) as e:
                raise InputError(f"checkpoint URL {self.base!r} is not usable: {e}") from e
        return self._fs

    def path(self, name: str) -> str:
        """Where entry ``name`` lives."""
        return f"{self.root}/{name}{SUFFIX}"

    def _write(self, path: str, parts: list[bytes | memoryview]) -> None:
        """Write a file atomically: a unique temporary name, then a rename."""
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        if self.local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                with open(tmp, "wb") as f:
                    for p in parts:
                        f.write(p)
                    f.flush()
                    if self.fsync:
                        os.fsync(f.fileno())
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            return
        fs = self.fs()
        fs.makedirs(self.root, exist_ok=True)
        fs.pipe_file(tmp, b"".join(bytes(p) for p in parts))
        fs.mv(tmp, path)

    def _read(self, path: str) -> bytes | None:
        try:
            if self.local:
                with open(path, "rb") as f:
                    return f.read()
            return bytes(self.fs().cat_file(path))
        except (FileNotFoundError, OSError):
            return None

    def save(self, name: str, arr: np.ndarray) -> str:
        """Write entry ``name`` atomically; returns its checksum."""
        head, payload, digest = encode(name, arr)
        self._write(self.path(name), [head, payload])
        return digest

    def load(self, name: str) -> tuple[np.ndarray | None, str]:
        """``(array, "ok")``, ``(None, "missing")`` or ``(None, "corrupt")``."""
        raw = self._read(self.path(name))
        if raw is None:
            return None, MISSING
        arr = decode(name, raw)
        return (arr, OK) if arr is not None else (None, CORRUPT)

    def names(self) -> set[str]:
        """Entries present (whole files only: temporaries are not listed)."""
        try:
            if self.local:
                files = os.listdir(self.root)
            else:
                files = [p.rsplit("/", 1)[-1] for p in self.fs().ls(self.root, detail=False)]
        except (FileNotFoundError, OSError):
            return set()
        return {f[: -len(SUFFIX)] for f in files if f.endswith(SUFFIX)}

    def remove(self, name: str) -> None:
        """Delete an entry if present."""
        path = self.path(name)
        try:
            if self.local:
                os.unlink(path)
            else:
                self.fs().rm_file(path)
        except (FileNotFoundError, OSError):
            pass

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Write ``manifest.json`` atomically."""
        text = json.dumps(manifest, indent=1, sort_keys=True).encode()
        self._write(f"{self.root}/{MANIFEST}", [text])

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when absent or unreadable."""
        raw = self._read(f"{self.root}/{MANIFEST}")
        if raw is None:
            return None
        try:
            out = json.loads(raw)
        except ValueError:
            return None
        return out if isinstance(out, dict) else None


__all__ = [
    "CORRUPT",
    "MISSING",
    "OK",
    "CheckpointStore",
    "combine",
    "decode",
    "describe",
    "encode",
    "fingerprint_array",
    "input_fingerprints",
    "run_key",
    "source_fingerprint",
]
