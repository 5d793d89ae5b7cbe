"""Checkpointed iterations: ``Session.iterations(n, keep=[...], name="loop")``.

After each iteration the kept values are saved under
``<checkpoint>/sessions/<name>/<iteration>/`` as entries of the checkpoint format of
:mod:`distal.runtime.checkpoint` (one entry ``<value>.<k>`` per distinct block of the value's
layout, each written atomically with its xxh3-128 checksum), then a ``manifest.json``
listing every entry, its box and checksum, and the value's shape, dtype and layout. The
manifest is written last, atomically (temporary name, then rename), so an iteration is
complete exactly when its manifest exists. Under MPI each block is written by the lowest
rank holding it, the ranks exchange their checksums and rank 0 writes the manifest.

``save="latest"`` writes behind the computation (local and Dask runtimes): a writer thread
saves an iteration while the next ones compute, iterations finished while it is busy are
not saved (it rests ``WRITER_REST`` times as long as each write took, so writing takes at
most a tenth of the time), and the loop's last finished iteration is saved when the loop ends. An
iteration still counts as complete only once its manifest is written after all its
entries, so a resumed loop starts after the newest iteration that was saved whole.

With ``checkpoint_key=`` each manifest entry also holds the BLAKE2b-256 content digest of
its block, and the manifest a keyed MAC (HMAC-SHA256, made in the session's process) over
all of it and its loop and iteration (:mod:`distal.runtime.checkpoint_auth`): a forged
entry, an entry or manifest copied from another iteration, or an iteration written without
the key fails authentication and is passed over like a damaged one.

A loop that starts finds the newest complete iteration whose entries all load with a good
checksum and, with a key, authenticate (an older one if the newest is damaged), restores
the kept values in their saved layouts (each MPI rank reads only its own block) and yields
from the next iteration. Once
an iteration is complete, iterations older than its predecessor are deleted, so a
location holds at most the last two complete iterations and the one being written.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from distal.distribution.layout import Layout
from distal.errors import (
    CheckpointFailed,
    CheckpointWarning,
    DistalWarning,
    InputError,
    RuntimeFailure,
)
from distal.runtime.checkpoint import OK, CheckpointStore
from distal.runtime.checkpoint_auth import DIGEST, MAC
from distal.session import Held, Session
from distal.typing import Box, box_index, box_intersect, box_is_empty, box_shape, box_volume

FORMAT = "distal-session"
VERSION = 1
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
SAVES = ("every", "latest")
#: what an iteration that cannot be saved does (``checkpoint_errors=``)
ON_ERROR = ("stop", "continue")
WRITER_REST = 9  # save="latest": after writing an iteration for t seconds the writer takes no
# new one for WRITER_REST * t, so writing is at most a tenth of the loop's time (its Python
# parts share the interpreter with the computation)


def loop_root(location: Any, name: str) -> str:
    """The run path of loop ``name`` inside a checkpoint location."""
    return f"sessions/{name}"


def iteration_dirs(location: Any, name: str) -> list[int]:
    """Iteration numbers that have a directory under loop ``name`` (complete or not),
    ascending."""
    store = CheckpointStore(location, loop_root(location, name))
    try:
        if store.local:
            names = os.listdir(store.root)
        else:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in store.fs().ls(store.root)]
    except (FileNotFoundError, NotADirectoryError, OSError):
        return []
    return sorted(int(x) for x in names if x.isdigit())


def iteration_store(location: Any, name: str, it: int) -> CheckpointStore:
    return CheckpointStore(location, f"{loop_root(location, name)}/{it}")


def read_manifest(location: Any, name: str, it: int) -> dict[str, Any] | None:
    """Iteration ``it``'s manifest if it is complete (a valid manifest), else None."""
    man = iteration_store(location, name, it).read_manifest()
    if not man or man.get("format") != FORMAT or man.get("iteration") != it:
        return None
    if not isinstance(man.get("values"), dict):
        return None
    return man


def _box(doc: Any) -> Box:
    return tuple((int(lo), int(hi)) for lo, hi in doc)


_WRITER: list[ThreadPoolExecutor] = []


def _writer() -> ThreadPoolExecutor:
    """The thread that writes iterations behind the computation (one per process)."""
    if not _WRITER:
        _WRITER.append(ThreadPoolExecutor(1, "distal-session-save"))
    return _WRITER[0]


def finish(sess: Session, last: bool = False) -> None:
    """Wait until the iteration the session's writer is saving is complete (its manifest
    written); a failure to write it is raised here, once (a :class:`CheckpointFailed`,
    or nothing where the loop goes on: :meth:`Loop.failed`). With ``last``, an iteration
    left unsaved while the writer was busy (``save="latest"``) is then saved too."""
    pending: Future[None] | None = sess._writing
    if pending is not None:
        sess._writing = None
        pending.result()
    if last and sess._unsaved is not None:
        loop, snap = sess._unsaved
        loop._submit(snap)
        finish(sess)


#: what failing to save an iteration raises: the operating system's errors (a full disk,
#: a read-only or unwritable directory), a worker's failed write or a lost store
SAVE_ERRORS = (OSError, RuntimeFailure)


def _discard(store: CheckpointStore) -> None:
    """Remove what an iteration that could not be saved wrote (best effort: a read-only
    directory keeps it; with no manifest it is never taken for a complete iteration)."""
    try:
        if store.local:
            shutil.rmtree(store.root, ignore_errors=True)
        else:
            store.fs().rm(store.root, recursive=True)
    except Exception:  # (nothing more can be done about a store that refuses)
        pass


class Loop:
    """One ``iterations`` call of a session."""

    def __init__(
        self,
        sess: Session,
        n: int,
        keep: Sequence[str],
        name: str,
        save: str = "every",
        checkpoint_errors: str | None = None,
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise InputError(f"iterations() needs a non-negative integer count, got {n!r}")
        if isinstance(keep, str):
            keep = [keep]
        keep = list(keep)
        if not all(isinstance(k, str) for k in keep):
            raise InputError(f"keep must be a list of value names, got {keep!r}")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InputError(
                f"loop name {name!r} must be letters, digits, '_', '.' or '-' (it names a "
                "directory of the checkpoint location)"
            )
        if save not in SAVES:
            raise InputError(f"save must be one of {list(SAVES)}, got {save!r}")
        on_error = sess.checkpoint_errors if checkpoint_errors is None else checkpoint_errors
        if on_error not in ON_ERROR:
            raise InputError(f"checkpoint_errors must be one of {list(ON_ERROR)}, got {on_error!r}")
        self.on_error = on_error
        self.sess, self.n, self.keep, self.name = sess, int(n), keep, name
        self.latest = save == "latest"
        self.last_complete: int | None = None  # the newest iteration this loop knows complete
        self.pruning: Future[None] | None = None  # the deletion of older iterations, behind
        #: the runtime's processes save together (MPI): never on a writer thread
        self.collective = sess.rt.collective

    # -- the loop --------------------------------------------------------------------------

    def start(self) -> Iterator[int]:
        sess = self.sess
        sess.flush()  # what the program bound before the loop is bound before a restore
        finish(sess, last=True)  # an earlier loop's last iteration is on disk first
        sess.resumed_from = None
        first = 0
        if sess.checkpoint is not None:
            last = self.restore()
            if last is not None:
                sess.resumed_from = last
                first = last + 1
        return self._iterate(first)

    def _iterate(self, first: int) -> Iterator[int]:
        try:
            for it in range(first, self.n):
                yield it  # a ``break`` in the body closes the generator here: nothing is saved
                if self.sess.checkpoint is not None:
                    self.save(it)
        finally:
            # every finished iteration due is on disk; the loop's work is done, so a save
            # that fails now (the last iteration's, or one the writer had not finished)
            # warns instead of taking the result with it
            try:
                finish(self.sess, last=True)
            except CheckpointFailed as e:
                warnings.warn(
                    f"{e}; every iteration of the loop was computed, so it ends normally",
                    CheckpointWarning,
                    stacklevel=3,
                )
            if self.pruning is not None:  # the location holds what it says when the loop ends
                self.pruning.result()

    # -- saving ----------------------------------------------------------------------------

    def save(self, it: int) -> None:
        """Write iteration ``it``'s kept values, then its manifest (last, atomically).

        By default (``save="every"``) this happens here: when the next iteration starts,
        this one is complete. With ``save="latest"`` on the local and Dask runtimes it
        happens on a writer thread while the next iterations compute (under MPI, where the
        ranks exchange checksums, it still happens here): the blocks written are the held
        arrays themselves, which a session with a checkpoint never changes in place (a run
        keeps a new array, ``put`` a copy, and no fused pass is given a held block to write
        over: ``Session._donatable``); an iteration finished while the writer is busy (writing,
        or resting ``WRITER_REST`` times as long as its last write took) is left unsaved,
        except the loop's last, which is saved when the loop ends.
        """
        self.sess.flush()  # pending array operations are part of the iteration
        self.sess.settle()  # and their checks: only checked blocks are saved
        snap = self._snapshot(it)
        sess = self.sess
        if it == self.n - 1:
            # the last iteration: its save's failure is the loop's end's (see _iterate)
            sess._unsaved = (self, snap)
            return
        if self.latest and not self.collective:
            pending = sess._writing
            busy = pending is not None and not pending.done()
            if busy or time.perf_counter() < sess._write_free_at:
                sess._unsaved = (self, snap)  # written when the writer is free or the loop ends
                return
        self._submit(snap)

    def _submit(self, snap: tuple) -> None:
        """Write a snapshot: on the writer thread, or here where the runtime's processes
        save together (MPI)."""
        sess = self.sess
        sess._unsaved = None
        finish(sess)  # the previous iteration's manifest is written (or its error raised)
        it, store, todo, docs = snap
        if self.latest and not self.collective:
            sess._writing = _writer().submit(self._write, it, store, todo, docs)
            return
        self._write(it, store, todo, docs)

    def _snapshot(self, it: int) -> tuple:
        """What saving iteration ``it`` writes: ``(it, store, blocks, value documents)``,
        the blocks being (views of) the held arrays."""
        sess = self.sess
        store = iteration_store(sess.checkpoint, self.name, it)
        todo: list[tuple[str, int, np.ndarray]] = []
        docs: dict[str, dict[str, Any]] = {}
        for v in self.keep:
            held = sess._held(v)
            whole = tuple((0, s) for s in held.shape)
            blocks = held.layout.blocks if held.layout is not None else ((whole, 0),)
            for k, (box, p) in enumerate(blocks):
                arr = sess.rt.block_of(held.data, held.layout, box, p)
                if arr is not None:
                    todo.append((v, k, arr))
            docs[v] = {
                "shape": list(held.shape),
                "dtype": held.dtype.str,
                "layout": None if held.layout is None else held.layout.to_json(),
                "entries": [
                    {"entry": f"{v}.{k}", "box": [list(iv) for iv in b]}
                    for k, (b, _) in enumerate(blocks)
                ],
            }
        return it, store, todo, docs

    def _write(
        self,
        it: int,
        store: CheckpointStore,
        todo: list[tuple[str, int, np.ndarray]],
        docs: dict[str, dict[str, Any]],
    ) -> None:
        """The writer thread's part of :meth:`save`: entries, then the manifest; then the
        writer rests ``WRITER_REST`` times as long as that took. A failure to write is
        :meth:`failed`'s (on every process of a collective runtime together: the others
        learn that one failed, whichever it was)."""
        t0 = time.perf_counter()
        why = None
        try:
            every = self._save_all(store, todo)
            self._finish_iteration(it, store, every, docs)
        except SAVE_ERRORS as e:
            why = f"{type(e).__name__}: {e}"
        if self.collective and not self.sess.rt.agree(why is None) and why is None:
            why = "another process could not write its part (see its error)"
        if why is not None:
            self.failed(it, store, why)
            return
        t1 = time.perf_counter()
        self.sess._write_free_at = t1 + WRITER_REST * (t1 - t0)

    def failed(self, it: int, store: CheckpointStore, why: str) -> None:
        """Iteration ``it`` could not be saved (``why``: the error). What it had written is
        removed (it is no complete iteration: no manifest), so the newest complete one stays
        the one a rerun resumes after; the failure is recorded in ``sess.save_failures``.
        Then ``checkpoint_errors="stop"`` raises :class:`CheckpointFailed` naming the
        iteration, the location and the newest saved one; ``"continue"`` warns (the first
        failure of the loop) and the loop goes on."""
        sess = self.sess
        if sess.rank == 0:
            _discard(store)
        sess.save_failures.append((self.name, it, why))
        saved = self.last_complete
        kept = (
            f"the checkpoint still holds iteration {saved}, saved whole, which a rerun "
            "resumes after"
            if saved is not None
            else "no iteration of this loop is saved, so a rerun starts from iteration 0"
        )
        where = f"{sess.checkpoint!s}/{loop_root(sess.checkpoint, self.name)}/{it}"
        text = f"loop {self.name!r} could not save iteration {it} to {where} ({why}); {kept}"
        if self.on_error == "stop":
            raise CheckpointFailed(
                f"{text} (checkpoint_errors='continue' goes on without saving)",
                loop=self.name,
                iteration=it,
                saved=saved,
                location=sess.checkpoint,
            )
        if sum(1 for name, _, _ in sess.save_failures if name == self.name) == 1:
            warnings.warn(
                f"{text}; going on without saving it (checkpoint_errors='continue'; later "
                "failures of this loop are listed in sess.save_failures)",
                CheckpointWarning,
                stacklevel=4,
            )

    def _save_all(
        self, store: CheckpointStore, todo: list[tuple[str, int, Any]]
    ) -> list[tuple[str, int, str, str | None]]:
        """Write the blocks where the runtime holds them (a Dask block by the worker holding
        it; only the checksums come back); every process's entries."""
        return self.sess.rt.save_blocks(store, todo, self.sess.sealer is not None)

    def _finish_iteration(
        self,
        it: int,
        store: CheckpointStore,
        every: list[tuple[str, int, str, str | None]],
        docs: dict[str, dict[str, Any]],
    ) -> None:
        """Every entry is in place: write the manifest (rank 0; sealed with the session's
        key, when it has one) and prune."""
        sess = self.sess
        digests = {(v, k): (d, c) for v, k, d, c in every}
        for v, doc in docs.items():
            for k, e in enumerate(doc["entries"]):
                if (v, k) not in digests:
                    continue  # an empty block: never saved, nothing to vouch for
                e["xxh3_128"], content = digests[(v, k)]
                if content is not None:
                    e[DIGEST] = content
        if sess.rank == 0:
            manifest: dict[str, Any] = {
                "format": FORMAT,
                "version": VERSION,
                "loop": self.name,
                "iteration": it,
                "n": self.n,
                "runtime": sess.runtime,
                "values": docs,
            }
            if sess.sealer is not None:
                manifest[MAC] = sess.sealer.manifest_mac(store.run, manifest)
            store.write_manifest(manifest)
            if self.collective:
                self._prune(it)
            else:  # iterations it no longer needs: deleted behind the loop (a file's unlink
                # cost 2.5 ms here, a third of saving an iteration when done in line)
                self.pruning = _writer().submit(self._prune, it)
        self.last_complete = it

    def _prune(self, it: int) -> None:
        """Delete iterations older than the complete one before ``it`` (which stays; with
        ``save="latest"`` that may be older than ``it - 1``)."""
        keep = it - 1 if self.last_complete is None else min(self.last_complete, it - 1)
        for old in iteration_dirs(self.sess.checkpoint, self.name):
            if old >= keep:
                break
            store = iteration_store(self.sess.checkpoint, self.name, old)
            try:
                if store.local:
                    shutil.rmtree(store.root, ignore_errors=True)
                else:
                    store.fs().rm(store.root, recursive=True)
            except (FileNotFoundError, OSError):
                pass

    # -- restoring -------------------------------------------------------------------------

    def restore(self) -> int | None:
        """Install the kept values of the newest complete, intact iteration; its number.

        A complete iteration whose entries do not load (a checksum fails, a file is
        missing) is passed over for an older one; every one passed over is recorded in
        ``sess.discarded`` and announced by a :class:`~distal.errors.DistalWarning` (on rank
        0), so a loop never starts again from an older iteration, or from 0, without a word.
        """
        before = len(self.sess.discarded)
        found = self._restore()
        damaged = [it for _, it in self.sess.discarded[before:]]
        if damaged and self.sess.rank == 0:
            where = f"loop {self.name!r} at {self.sess.checkpoint!s}"
            then = (
                f"resuming after iteration {found}, the newest intact one"
                if found is not None
                else "no intact iteration is left, so the loop starts again from iteration 0"
            )
            warnings.warn(
                f"{where}: saved iteration(s) {damaged} are damaged (an entry is missing or "
                f"fails its checksum, or the iteration fails authentication with the "
                f"session's checkpoint_key) and were not used; {then}",
                DistalWarning,
                stacklevel=4,
            )
        return found

    def _restore(self) -> int | None:
        sess = self.sess
        for it in reversed(iteration_dirs(sess.checkpoint, self.name)):
            man = read_manifest(sess.checkpoint, self.name, it)
            values: dict[str, Held] | None = None
            ok = man is not None and self._authentic(it, man)
            if ok:
                assert man is not None
                missing = [v for v in self.keep if v not in man["values"]]
                if missing:
                    raise InputError(
                        f"loop {self.name!r} at {sess.checkpoint!s}: iteration {it} kept "
                        f"{sorted(man['values'])}, not {missing}; use another loop name"
                    )
                values = self._load(it, man)
                ok = values is not None
            ok = sess.rt.agree(ok)
            if ok:
                assert values is not None
                sess.values.update(values)
                self.last_complete = it
                return it
            if man is not None:  # complete, but its entries do not load: damaged
                sess.discarded.append((self.name, it))
        return None

    def _authentic(self, it: int, man: dict[str, Any]) -> bool:
        """Whether iteration ``it``'s manifest carries the session key's seal (always true
        without a key). The seal covers the loop and iteration too, so a manifest copied
        from another iteration or loop fails."""
        sealer = self.sess.sealer
        if sealer is None:
            return True
        return sealer.manifest_opens(iteration_store(self.sess.checkpoint, self.name, it).run, man)

    def _load(self, it: int, man: dict[str, Any]) -> dict[str, Held] | None:
        store = iteration_store(self.sess.checkpoint, self.name, it)
        out: dict[str, Held] = {}
        for v in self.keep:
            doc = man["values"][v]
            shape = tuple(int(s) for s in doc["shape"])
            dtype = np.dtype(doc["dtype"])
            cur = self.sess.values.get(v)
            if cur is not None and (cur.shape != shape or cur.dtype != dtype):
                raise InputError(
                    f"loop {self.name!r}: the checkpoint's {v!r} has shape {shape} and dtype "
                    f"{dtype}, the session's {cur.shape} and {cur.dtype}"
                )
            layout = None if doc["layout"] is None else Layout.from_json(shape, doc["layout"])
            entries = [(e["entry"], _box(e["box"]), e.get(DIGEST)) for e in doc["entries"]]
            held = self._load_value(store, shape, dtype, layout, entries)
            if held is None:
                return None
            out[v] = held
        return out

    def _load_value(
        self,
        store: CheckpointStore,
        shape: tuple[int, ...],
        dtype: np.dtype,
        layout: Layout | None,
        entries: list[tuple[str, Box, str | None]],
    ) -> Held | None:
        sealed = self.sess.sealer is not None
        digests = {name: d for name, _, d in entries}

        def entry(name: str, box: Box) -> np.ndarray | None:
            expect = digests.get(name)
            if sealed and not isinstance(expect, str):
                return None  # a keyed session uses only entries its sealed manifest vouches for
            arr, status = store.load(name, expect if sealed else None)
            if status != OK or arr is None or arr.dtype != dtype:
                return None
            if arr.shape != box_shape(box):  # the entry writer stores a 0-d array as (1,)
                if arr.size != int(np.prod(box_shape(box))) or box:
                    return None
                arr = arr.reshape(())
            return arr

        source = _Entries(shape, dtype, {box: name for name, box, _ in entries}, entry)
        if layout is None:  # placed by the first kernel that reads it: read whole now
            data = source.read_block(tuple((0, s) for s in shape))
            return None if source.failed else Held(shape, dtype, None, data)
        # each process reads the entries of the blocks it holds, as the runtime places them
        data = self.sess.rt.place("kept value", source, layout)
        return None if source.failed else Held(shape, dtype, layout, data)


class _Entries:
    """A saved value as a block source over its entries (the blocks of the layout it was
    saved in): the runtime reads those it holds. An entry that does not load sets
    ``failed`` (the iteration is damaged) and reads as zeros."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, names: dict, entry: Any) -> None:
        self.shape, self.dtype, self.names, self.entry = shape, dtype, names, entry
        self.failed = False

    def read_block(self, box: Box) -> np.ndarray:
        box = tuple((int(lo), int(hi)) for lo, hi in box)
        out = np.zeros(box_shape(box), self.dtype)
        if 0 in box_shape(box):  # an empty block is never saved
            return out
        name = self.names.get(box)
        if name is not None:  # one entry holds it (the common case: the layout it was saved in)
            arr = self.entry(name, box)
            if arr is None:
                self.failed = True
                return out
            return np.array(arr)
        covered = 0
        for b, name in self.names.items():
            inter = box_intersect(b, box) if box else box
            if box_is_empty(inter) if inter else False:
                continue
            arr = self.entry(name, b)
            if arr is None:
                self.failed = True
                return out
            out[box_index(inter, box)] = arr[box_index(inter, b)]
            covered += box_volume(inter)
        if covered != box_volume(box):
            self.failed = True
        return out


__all__ = ["FORMAT", "Loop", "iteration_dirs", "read_manifest"]
