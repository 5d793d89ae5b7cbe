"""Looking after a checkpoint location: which runs it holds, whether their entries are
intact, and removing the ones no longer wanted (``distal checkpoint``).

A location collects one directory per run key (see :mod:`distal.runtime.checkpoint`); runs
are never deleted by the runtime, because an incomplete one is exactly what a restarted job
resumes from. These helpers let a user see and decide.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

from distal import text
from distal.errors import InputError
from distal.runtime.checkpoint import CORRUPT, MANIFEST, OK, SUFFIX, CheckpointStore
from distal.runtime.checkpoint_auth import SEAL_SUFFIX

TMP = SUFFIX + ".tmp-"  # how CheckpointStore names an entry while it is being written
SEAL_TMP = SEAL_SUFFIX + ".tmp-"  # and a seal (``checkpoint_key=``), written by the driver


def _temporary(name: str) -> bool:
    """A half-written entry or seal (its writer died, or is still writing)."""
    return TMP in name or SEAL_TMP in name


@dataclass(frozen=True)
class RunInfo:
    """One run directory of a checkpoint location."""

    run: str
    root: str
    statement: str | None  # from the manifest (None when it is missing or unreadable)
    complete: bool  # the run finished: every output block is there
    entries: int  # ``.ck`` files (blocks and unit partials)
    blocks: int  # finished output blocks among them
    nbytes: int  # bytes of all entries
    modified: float | None  # newest entry or manifest (seconds since the epoch)
    temporaries: int = 0  # half-written entries (``*.ck.tmp-*``) of writers that died


def _store(location: str | os.PathLike[str], run: str = "") -> CheckpointStore:
    return CheckpointStore(location, run)


def _listing(store: CheckpointStore, path: str) -> list[tuple[str, int, float | None, bool]]:
    """(name, size, mtime, is_dir) of everything directly under ``path``."""
    try:
        if store.local:
            out = []
            with os.scandir(path) as it:
                for e in it:
                    st = e.stat()
                    out.append((e.name, st.st_size, st.st_mtime, e.is_dir()))
            return out
        rows = store.fs().ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for r in rows:
        name = str(r["name"]).rstrip("/").rsplit("/", 1)[-1]
        mtime = r.get("mtime") or r.get("LastModified") or r.get("last_modified")
        stamp = mtime.timestamp() if hasattr(mtime, "timestamp") else mtime
        out.append((name, int(r.get("size") or 0), stamp, r.get("type") == "directory"))
    return out


def runs(location: str | os.PathLike[str]) -> list[RunInfo]:
    """Every run directory under ``location``, newest first."""
    base = _store(location)
    if base.local and not os.path.isdir(base.base):
        raise InputError(f"checkpoint location {os.fspath(location)!r} is not a directory")
    names = []
    for name, _, _, is_dir in _listing(base, base.base):
        if is_dir and name == "sessions":  # session loops: sessions/<loop>/<iteration>
            for loop, _, _, d in _listing(base, f"{base.base}/sessions"):
                its = _listing(base, f"{base.base}/sessions/{loop}") if d else []
                names += [f"sessions/{loop}/{it}" for it, _, _, d2 in its if d2]
        elif is_dir:
            names.append(name)
    out = []
    for name in names:
        store = _store(location, name)
        files = _listing(store, store.root)
        if not any(f == MANIFEST or f.endswith(SUFFIX) for f, *_ in files):
            continue  # not a run directory
        manifest = store.read_manifest() or {}
        session = manifest.get("format") == "distal-session"
        entries = [(f, size) for f, size, _, _ in files if f.endswith(SUFFIX)]
        stamps = [t for _, _, t, _ in files if t is not None]
        out.append(
            RunInfo(
                run=name,
                root=store.root,
                statement=(
                    f"session loop {manifest.get('loop')!r} iteration {manifest.get('iteration')}"
                    f" (kept: {', '.join(sorted(manifest.get('values') or {}))})"
                    if session
                    else manifest.get("statement")
                ),
                complete=session or bool(manifest.get("complete")),
                entries=len(entries),
                blocks=sum(f.startswith("block-") for f, _ in entries),
                nbytes=sum(size for _, size in entries),
                modified=max(stamps) if stamps else None,
                temporaries=sum(_temporary(f) for f, *_ in files),
            )
        )
    return sorted(out, key=lambda r: (-(r.modified or 0.0), r.run))


def find(location: str | os.PathLike[str], run: str) -> RunInfo:
    """The run named exactly ``run``, or the one run key (a hash) that starts with it.

    A prefix stands for a run key only: a session iteration
    (``sessions/<loop>/<iteration>``) is named in full, because there a prefix is a
    different iteration's full name too (``sessions/fix/1`` would find ``sessions/fix/10``
    once iteration 1 is no longer kept) and the tools must act on the run asked for.
    """
    all_runs = runs(location)
    hits = [r for r in all_runs if r.run == run]
    if not hits and "/" not in run:
        hits = [r for r in all_runs if "/" not in r.run and r.run.startswith(run)]
    if len(hits) != 1:
        where = os.fspath(location)
        if hits:
            names = ", ".join(r.run for r in hits)
            raise InputError(f"{run!r} is a prefix of {len(hits)} runs in {where!r}: {names}")
        known = ", ".join(r.run for r in all_runs) or "none"
        hint = " (a session iteration is named in full)" if "/" in run else ""
        raise InputError(f"{run!r} matches no run in {where!r}{hint}; runs: {known}")
    return hits[0]


def verify(location: str | os.PathLike[str], run: str) -> dict[str, list[str]]:
    """Read every entry of one run and check its checksum: ``{"ok": [...], "corrupt": [...]}``."""
    info = find(location, run)
    store = _store(location, info.run)
    out: dict[str, list[str]] = {OK: [], CORRUPT: []}
    for name in sorted(store.names()):
        _, status = store.load(name)
        out[CORRUPT if status == CORRUPT else OK].append(name)
    return out


def remove_temporaries(
    location: str | os.PathLike[str], run: str, older_than: float = 3600.0
) -> list[str]:
    """Delete the half-written entries of one run that are older than ``older_than``
    seconds (a writer that old has died: its entry is missing and will be recomputed);
    younger ones may still be being written. Returns the names removed."""
    info = find(location, run)
    store = _store(location, info.run)
    now = time.time()
    gone = []
    for name, _, mtime, _ in _listing(store, store.root):
        if _temporary(name) and mtime is not None and now - mtime > older_than:
            path = f"{store.root}/{name}"
            if store.local:
                os.unlink(path)
            else:
                store.fs().rm_file(path)
            gone.append(name)
    return sorted(gone)


def remove(location: str | os.PathLike[str], run: str) -> str:
    """Delete one run directory; returns what was removed."""
    info = find(location, run)
    store = _store(location, info.run)
    if store.local:
        shutil.rmtree(store.root)
    else:
        store.fs().rm(store.root, recursive=True)
    return info.root


def size_text(n: int) -> str:
    """Bytes as a short human-readable size, in the units every distal report uses
    (:func:`distal.text.size_text`: decimal, ``"2.77 kB"``)."""
    return text.size_text(n)


def as_dict(info: RunInfo) -> dict[str, Any]:
    """JSON-friendly form of a :class:`RunInfo`."""
    return dict(info.__dict__)


__all__ = [
    "CORRUPT",
    "OK",
    "RunInfo",
    "as_dict",
    "find",
    "remove",
    "remove_temporaries",
    "runs",
    "size_text",
    "verify",
]
