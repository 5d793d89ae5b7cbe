"""Durable checkpoints for the elastic runtime: run keys, input fingerprints, an atomic store.

A checkpoint lives under ``<location>/<run key>/``. The run key hashes everything that
decides the numbers a task produces: the statement, the placements (distributions and
shapes), the whole plan (schedule), the dtypes, the task granularity and a fingerprint of
every input. So a changed input or schedule lands in a different directory and can never
pick up a stale result; identical reruns find their finished work.

Each entry (a partial output sum or a finished output block) is one file::

    DISTALCK\\x02 {"name", "dtype", "shape", "nbytes", "xxh3_128"} <spaces>\\n <raw C-order bytes>

(``"blake2b_128"`` in place of ``"xxh3_128"`` where ``xxhash`` is not installed; see
:mod:`distal.runtime.checkpoint_hash`)

written to a temporary name and renamed into place, so a reader sees either nothing or a
whole file; the checksum catches files damaged later (truncated, bit rot, a bad disk):
such an entry loads as ``corrupt`` and the runtime recomputes and rewrites it. Entries of
1 MiB and more are written around the page cache (:mod:`distal.runtime.direct_io`), with
the header padded by spaces to 4 KiB so the payload starts on a block boundary.

Checksums and input fingerprints are xxh3-128 (about 30 GB/s on one core, so hashing never
shows next to the computation), BLAKE2b-128 without ``xxhash``: they guard against
accidents — damaged files, changed inputs — not against an adversary who crafts colliding
inputs.
``manifest.json`` records what the run is (for humans and tools) and, once the run has
finished, every block's checksum.

With ``checkpoint_key=`` an entry ``<name>.ck`` may have a seal ``<name>.seal`` beside it,
written on the trusted side (:mod:`distal.runtime.checkpoint_auth`); a store made with
``sealed=True`` reports content digests for sealing and loads an entry only against the
digest its seal vouches for (``load(name, expect=...)``). The store itself never holds
the key, so it can travel to workers as before.

Workers write entries behind their computation (:meth:`CheckpointStore.save_soon`): a
task hands its finished array to a writer thread of its own and goes on, and the entry's
``then`` callback (the runtime logs the task as done there) runs only once the file is in
place. Each task thread has at most one entry waiting, so a crash loses at most one
finished-but-unwritten result per thread beyond those being computed; :func:`drain` waits
for every entry of the process.

Locations are local directories (plain paths or ``file://``) or any fsspec URL
(``memory://``, ``s3://``...). This module has no Dask dependency: workers and the driver
both use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from distal.errors import DistalWarning, InputError, RuntimeFailure
from distal.runtime import checkpoint_hash, direct_io
from distal.runtime.checkpoint_auth import SEAL_SUFFIX, content_digest
from distal.runtime.executable import Executable
from distal.runtime.source import is_block_source

FORMAT = 2
MAGIC = b"DISTALCK\x02"
SUFFIX = ".ck"
MANIFEST = "manifest.json"

OK, MISSING, CORRUPT = "ok", "missing", "corrupt"
UNAUTHENTICATED = "unauthenticated"
"""A load's status when the entry is whole but not the bytes its seal vouches for."""


def fingerprint_array(arr: np.ndarray) -> str:
    """The checksum (:mod:`~distal.runtime.checkpoint_hash`) of an array's bytes, dtype and
    shape: equal data, equal fingerprint."""
    a = np.require(arr, requirements="C")  # C order; a 0-d array stays 0-d
    h = checkpoint_hash.hasher(data=f"{a.dtype.str}{a.shape}".encode())
    if a.size:
        h.update(memoryview(a.reshape(-1).view(np.uint8)))
    return checkpoint_hash.finish(h)


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


def run_key(exe: Executable, fingerprints: Mapping[str, str], granularity: str) -> str:
    """The checkpoint directory name of one (executable, inputs, granularity)."""
    plan = exe.plan
    desc = repr(
        (
            FORMAT,
            plan.statement,
            sorted(plan.placements.items()),
            plan.programs,
            sorted(plan.primary.items()),
            sorted((n, np.dtype(d).str) for n, d in exe.dtypes.items()),
            granularity,
            sorted(fingerprints.items()),
        )
    )
    return hashlib.sha256(desc.encode()).hexdigest()[:32]


def describe(exe: Executable, fingerprints: Mapping[str, str], granularity: str) -> dict[str, Any]:
    """The human-readable part of the manifest (``exe``: the run's executable)."""
    return {
        "format": FORMAT,
        "statement": str(exe.plan.statement.assignment),
        "schedule": exe.source,
        "distributions": {t.name: t.dist for t in exe.tensors},
        "shapes": {t.name: list(t.shape) for t in exe.tensors},
        "dtypes": {n: np.dtype(d).str for n, d in exe.dtypes.items()},
        "granularity": granularity,
        "fingerprints": dict(fingerprints),
    }


def header(name: str, a: np.ndarray, digest: str, size: int | None = None) -> bytes:
    """An entry's header line; padded with spaces to ``size`` bytes when given. The checksum
    is stored under its algorithm's name (``digest`` as :mod:`~distal.runtime.checkpoint_hash`
    writes it)."""
    algorithm, hexdigest = checkpoint_hash.untag(digest)
    meta = {
        "name": name,
        "dtype": a.dtype.str,
        "shape": list(a.shape),
        "nbytes": a.nbytes,
        algorithm: hexdigest,
    }
    text = MAGIC + json.dumps(meta).encode()
    if size is not None:
        text = text.ljust(size - 1)
    return text + b"\n"


def _payload(a: np.ndarray) -> memoryview:
    return memoryview(a.reshape(-1).view(np.uint8)) if a.size else memoryview(b"")


def encode(name: str, arr: np.ndarray) -> tuple[bytes, memoryview, str]:
    """Header, payload and checksum of one entry."""
    a = np.require(arr, requirements="C")  # C order; a 0-d array stays 0-d
    payload = _payload(a)
    digest = checkpoint_hash.checksum(payload)
    return header(name, a, digest), payload, digest


def decode(name: str, raw: bytes) -> np.ndarray | None:
    """The array in an entry, or None when the entry is damaged or belongs to another name
    (or its checksum's algorithm is not available here: a warning says so)."""
    if not raw.startswith(MAGIC):
        return None
    end = raw.find(b"\n", len(MAGIC))
    if end < 0:
        return None
    try:
        head = json.loads(raw[len(MAGIC) : end])
        dtype = np.dtype(head["dtype"])
        shape = tuple(int(x) for x in head["shape"])
        nbytes = int(head["nbytes"])
        (algorithm,) = (a for a in checkpoint_hash.ALGORITHMS if a in head)
        digest = checkpoint_hash.tag(algorithm, str(head[algorithm]))
    except (ValueError, KeyError, TypeError):
        return None
    payload = memoryview(raw)[end + 1 :]
    if head.get("name") != name or len(payload) != nbytes:
        return None
    good = checkpoint_hash.verify(payload, digest)
    if good is None:
        warnings.warn(
            f"checkpoint entry {name!r} has a {algorithm} checksum, which needs the xxhash "
            "package (pip install xxhash): it cannot be verified and is not used",
            DistalWarning,
            stacklevel=2,
        )
        return None
    if not good:
        return None
    if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != nbytes:
        return None
    return np.frombuffer(payload, dtype=dtype).reshape(shape)


class CheckpointStore:
    """Entries of one run under ``<location>/<run>/``; picklable, so workers write directly.

    Local paths use ``os`` calls (``fsync`` + ``os.replace``: atomic and durable); other
    URLs use fsspec (temporary name, then ``mv``; object stores write atomically anyway).

    ``sealed`` (a run with ``checkpoint_key=``): a background save reports the entry's
    content digest (:func:`~distal.runtime.checkpoint_auth.content_digest`) instead of its
    checksum, for the trusted side to seal. The store never holds the key.
    """

    def __init__(
        self,
        location: str | os.PathLike[str],
        run: str,
        fsync: bool = True,
        sealed: bool = False,
    ) -> None:
        loc = os.fspath(location)
        if not isinstance(loc, str) or not loc:
            raise InputError(f"checkpoint location must be a path or URL, got {location!r}")
        if loc.startswith("file://"):
            loc = loc[len("file://") :]
        self.local = "://" not in loc
        self.base = os.path.abspath(loc) if self.local else loc.rstrip("/")
        self.run = run
        self.fsync = fsync
        self.sealed = sealed
        #: this store's run attempt: a rerun in the same directory (same kernel and inputs)
        #: is another attempt, and no failure of an earlier one is reported to it
        self.attempt = uuid.uuid4().hex[:16]
        self._direct = direct_io.available()
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

    @property
    def scope(self) -> str:
        """This attempt at the run (``root#attempt``): what :func:`drain` is given to report
        this attempt's write failures and no earlier one's."""
        return f"{self.root}#{self.attempt}"

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
        a = np.require(arr, requirements="C")  # C order; a 0-d array stays 0-d
        path = self.path(name)
        if self.local and self._direct and a.nbytes >= direct_io.MIN_BYTES:
            os.makedirs(self.root, exist_ok=True)
            size = direct_io.round_up(len(header(name, a, checkpoint_hash.placeholder())) + 1)
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            digest = direct_io.write(
                tmp, _payload(a), lambda d: header(name, a, d, size), size, self.fsync
            )
            if digest is not None:
                os.replace(tmp, path)
                return digest
            self._direct = False  # this filesystem refuses O_DIRECT: use the page cache
        head, payload, digest = encode(name, a)
        self._write(path, [head, payload])
        return digest

    def save_many(self, entries: list[tuple[str, np.ndarray]]) -> list[str]:
        """Write several entries (``(name, array)``, each as :meth:`save`) side by side on a
        few threads, and return their checksums in order. Each entry is written and
        ``fsync``-ed on its own, so the disk overlaps them: a session loop's iteration of
        seven 640 KB entries took 10-20 ms so against 30-78 ms one after the other. The
        first failure is raised once every entry has been tried."""
        if len(entries) <= 1:
            return [self.save(n, a) for n, a in entries]
        futures = [_entry_writers().submit(self.save, n, a) for n, a in entries]
        first: BaseException | None = None
        out = []
        for f in futures:
            try:
                out.append(f.result())
            except BaseException as e:  # every write is waited for, the first error raised
                first = first or e
        if first is not None:
            raise first
        return out

    def save_soon(self, name: str, arr: np.ndarray, then: Callable[[str], None]) -> None:
        """Write entry ``name`` in the background; ``then(checksum)`` once it is in place
        (``then(content digest)`` on a ``sealed`` store).

        The calling thread's previous entry is waited for first (its write error, if any,
        is raised here), so each thread has at most one entry waiting. ``arr`` must not
        change until the entry is written.
        """
        lane = _lane()
        lane.wait(self.scope)
        lane.start(self._save_then, name, arr, then)

    def _save_then(self, name: str, arr: np.ndarray, then: Callable[[str], None]) -> None:
        try:
            digest = self.save(name, arr)
            if self.sealed:
                digest = content_digest(arr)
        except Exception as e:  # any failure to save is this run's write failure
            raise WriteFailed(
                f"checkpoint entry {name!r} could not be written under {self.root}: "
                f"{type(e).__name__}: {e}",
                root=self.root,
                attempt=self.attempt,
            ) from e
        try:
            then(digest)
        except Exception:  # the entry is in place; only the news of it got lost (e.g. the
            pass  # worker that would report it has closed), which no later run should see

    def load(self, name: str, expect: str | None = None) -> tuple[np.ndarray | None, str]:
        """``(array, "ok")``, ``(None, "missing")`` or ``(None, "corrupt")``; with
        ``expect`` (the content digest a seal vouches for) also ``(None,
        "unauthenticated")`` when the entry is whole but holds other bytes."""
        raw = self._read(self.path(name))
        if raw is None:
            return None, MISSING
        arr = decode(name, raw)
        if arr is None:
            return None, CORRUPT
        if expect is not None and content_digest(arr) != expect:
            return None, UNAUTHENTICATED
        return arr, OK

    def seal_path(self, name: str) -> str:
        """Where entry ``name``'s seal lives (beside the entry)."""
        return f"{self.root}/{name}{SEAL_SUFFIX}"

    def write_seal(self, name: str, raw: bytes) -> None:
        """Write entry ``name``'s seal (made on the trusted side) atomically."""
        self._write(self.seal_path(name), [raw])

    def read_seal(self, name: str) -> bytes | None:
        """Entry ``name``'s seal file, or None."""
        return self._read(self.seal_path(name))

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
        """Delete an entry and its seal if present."""
        for path in (self.path(name), self.seal_path(name)):
            try:
                if self.local:
                    os.unlink(path)
                else:
                    self.fs().rm_file(path)
            except (FileNotFoundError, OSError):
                pass

    def remove_seal(self, name: str) -> None:
        """Delete entry ``name``'s seal (its entry is no longer vouched for)."""
        try:
            if self.local:
                os.unlink(self.seal_path(name))
            else:
                self.fs().rm_file(self.seal_path(name))
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


def unusable(location: Any, path: str, e: OSError) -> InputError:
    """The error for a checkpoint location where ``path`` cannot be written (a file in the
    way, no permission, a read-only filesystem): one line naming both, not the ``OSError``
    from deep inside the first write."""
    return InputError(
        f"checkpoint {location!r} is not a usable location: cannot write {path} ({e})"
    )


def check_location(location: Any) -> None:
    """Refuse, before anything runs, a checkpoint location that is no path or URL, or a
    local directory that cannot be made or written (what a run would otherwise find only
    at its first save).

    A local location is created if it is missing, and a temporary file is written to it and
    removed; a URL is only resolved to its filesystem (writing to a remote store may cost).

    Raises:
        InputError: naming the location (see :func:`unusable`).
    """
    if not isinstance(location, str | os.PathLike):
        raise InputError(f"checkpoint must be a directory or URL, got {location!r}")
    store = CheckpointStore(location, "")
    if not store.local:
        store.fs()
        return
    if os.path.exists(store.base) and not os.path.isdir(store.base):
        raise InputError(f"checkpoint {location!r} is a file, not a directory")
    try:
        os.makedirs(store.base, exist_ok=True)
        with tempfile.TemporaryFile(dir=store.base):
            pass
    except OSError as e:
        raise unusable(location, store.base, e) from e


class WriteFailed(RuntimeFailure):
    """A checkpoint entry could not be written (disk full, permissions, a gone server).

    ``root``: the run directory it belongs to, ``attempt``: the attempt at that run
    (:attr:`CheckpointStore.attempt`; both ``None`` once pickled to another process).
    """

    def __init__(self, message: str, root: str | None = None, attempt: str | None = None) -> None:
        super().__init__(message)
        self.root = root
        self.attempt = attempt

    def of(self, scope: str) -> bool:
        """Whether this failure is ``scope``'s: a run directory (any attempt at it), or
        ``root#attempt`` (that attempt only: :attr:`CheckpointStore.scope`)."""
        root, _, attempt = scope.partition("#")
        return self.root == root and (not attempt or self.attempt == attempt)


#: threads writing a :meth:`CheckpointStore.save_many` call's entries (made once)
ENTRY_WRITERS = 8
_WRITERS: list[ThreadPoolExecutor] = []


def _entry_writers() -> ThreadPoolExecutor:
    with _lanes_lock:
        if not _WRITERS:
            _WRITERS.append(ThreadPoolExecutor(ENTRY_WRITERS, "distal-checkpoint-entry"))
    return _WRITERS[0]


class _Lane:
    """One task thread's writer: a thread of its own and the entry it is writing."""

    def __init__(self) -> None:
        self.owner = threading.current_thread()
        self.pool = ThreadPoolExecutor(1, "distal-checkpoint")
        self.lock = threading.Lock()
        self.pending: Future[None] | None = None

    def idle_orphan(self) -> bool:
        """Its task thread is gone (a closed pool's worker) and nothing is left to report."""
        with self.lock:
            return not self.owner.is_alive() and self.pending is None

    def start(self, fn: Callable[..., None], *args: Any) -> None:
        with self.lock:
            self.pending = self.pool.submit(fn, *args)

    def wait(self, scope: str | None = None) -> None:
        """Until the entry in progress (if any) is written; re-raises its error once.

        With ``scope`` (a run directory, or one attempt at it: :attr:`CheckpointStore.scope`),
        a failure of another run's entry, or of an earlier attempt at this run that ended
        without draining (because something else failed first, or the disk filled up), is
        not this one's to report: it is dropped.
        """
        with self.lock:
            f, self.pending = self.pending, None
        if f is None:
            return
        try:
            f.result()
        except WriteFailed as e:
            if scope is None or e.of(scope):
                raise


_here = threading.local()
_lanes: list[_Lane] = []
_lanes_lock = threading.Lock()


def _lane() -> _Lane:
    lane = getattr(_here, "lane", None)
    if lane is None:
        lane = _here.lane = _Lane()
        with _lanes_lock:
            for old in [x for x in _lanes if x.idle_orphan()]:
                old.pool.shutdown(wait=False)  # its thread ends; the lane goes
                _lanes.remove(old)
            _lanes.append(lane)
    return lane


def drain(scope: str | None = None) -> None:
    """Wait until every entry this process queued is written; raise the first failure
    (only of ``scope``, when given: a run directory, or one attempt at it,
    :attr:`CheckpointStore.scope`)."""
    with _lanes_lock:
        lanes = list(_lanes)
    first: BaseException | None = None
    for lane in lanes:
        try:
            lane.wait(scope)
        except BaseException as e:  # every lane is drained, then the first error re-raised
            first = first or e
    if first is not None:
        raise first


__all__ = [
    "CORRUPT",
    "MISSING",
    "OK",
    "UNAUTHENTICATED",
    "CheckpointStore",
    "WriteFailed",
    "check_location",
    "combine",
    "decode",
    "describe",
    "drain",
    "encode",
    "fingerprint_array",
    "header",
    "input_fingerprints",
    "run_key",
    "source_fingerprint",
    "unusable",
]
