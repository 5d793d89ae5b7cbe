"""A Dask run's checkpoint, the driver's side: the store, what it already holds, seals.

The entries are written by the workers (:mod:`.tasks`, behind their computations); the
driver opens the run's store (keyed by the plan, the inputs' fingerprints and the
granularity), finds which entries are there and, with ``checkpoint_key=``, which of them
a seal made with the key vouches for (:meth:`RunCheckpoint.present`), loads finished
blocks, writes and withdraws seals as the core says, waits for the workers' last writes
(:func:`drain_checkpoint`) and marks the run complete. What to seal is the core's
decision (:class:`~.events.Seal`); the key never leaves this object.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from distal.errors import InputError, RuntimeFailure
from distal.runtime.checkpoint import (
    CORRUPT,
    UNAUTHENTICATED,
    CheckpointStore,
    combine,
    describe,
    fingerprint_array,
    input_fingerprints,
    run_key,
)
from distal.runtime.checkpoint_auth import Sealer
from distal.runtime.elastic.events import Seal, Unseal
from distal.runtime.elastic.summary import Events
from distal.runtime.elastic.tasks import drain, hash_block
from distal.runtime.elastic.units import Unit, block_name


def drain_checkpoint(
    client: Any, topic: str, root: str, events: Events, patience: float = 10.0
) -> None:
    """Wait for the workers' checkpoint writes, then for the ``done`` events they log.

    Every result is with the driver by now; a write that failed fails the run (the
    user asked for a checkpoint), a worker that died meanwhile only loses entries that a
    rerun recomputes. The events travel by another route than ``Client.run``'s reply, so
    the driver waits (up to ``patience`` seconds) until it has heard, for each worker,
    every entry it reports written (by name: a forged report in the worker's name must not
    end the wait before the honest one arrives).
    """
    replies = client.run(drain, topic, root, on_error="return")
    expect: dict[str, dict[str, int]] = {}
    for addr, r in replies.items():
        if isinstance(r, RuntimeFailure):
            raise r
        if not isinstance(r, BaseException):
            expect[addr] = dict(r)
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        heard = events.written()
        if all(heard[(a, e)] >= n for a, es in expect.items() for e, n in es.items()):
            return
        time.sleep(0.01)
    events.sync()


class RunCheckpoint:
    """The checkpoint of one run of ``driver`` (a :class:`~.driver.Driver`): its store,
    the entries' seals (``checkpoint_key=``: only here is the key held) and the entries
    refused (``unauthenticated``)."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        opts = driver.opts
        key = opts.checkpoint_key
        self.sealer = Sealer(key) if key is not None else None
        self.sealed: dict[str, str] = {}  # entry -> content digest its seal vouched for
        self.unauthenticated: set[str] = set()
        self.store: CheckpointStore | None = None

    def _fingerprints(self, units: list[Unit]) -> dict[str, str]:
        """Input fingerprints; block sources without ``fingerprint()`` hash the blocks read."""
        d = self.driver
        patterns = d.plan.patterns
        fps = input_fingerprints({t: x for t, x in d.data.items() if t not in patterns})
        for t, x in d.data.items():
            if t in patterns:  # the pattern decides the plan, the values the numbers
                fps[t] = f"pattern={x.pattern_fingerprint()};values={fingerprint_array(x.vals)}"
        for t, fp in fps.items():
            if fp is not None:
                continue
            idxs = sorted({idx for u in units for (tt, idx) in u.needs if tt == t})
            blocks = [d.io.block_future(t, i) for i in idxs]  # the run reads them next
            hashes = d.client.gather([d.client.submit(hash_block, b, pure=False) for b in blocks])
            fps[t] = combine({str(i): h for i, h in zip(idxs, hashes, strict=True)})
        return {t: str(fp) for t, fp in fps.items()}

    def open(self, units: list[Unit]) -> CheckpointStore:
        """The run's store (its manifest written if new); an unusable location is an
        ``InputError`` naming it."""
        d = self.driver
        opts = d.opts
        if not isinstance(opts.checkpoint, str | os.PathLike):
            raise InputError(f"checkpoint must be a directory or URL, got {opts.checkpoint!r}")
        fps = self._fingerprints(units)
        gran = str(opts.granularity)
        store = CheckpointStore(
            opts.checkpoint, run_key(d.exe, fps, gran), opts.fsync,
            sealed=self.sealer is not None,
        )  # fmt: skip
        self.store = store
        if store.protocol == "memory":
            pids = set(d.client.run(os.getpid).values())
            if pids - {os.getpid()}:
                raise InputError(
                    f"checkpoint {opts.checkpoint!r}: memory:// is private to each process, and "
                    "this pool's workers run in other processes; use a directory or shared URL"
                )
        if store.read_manifest() is None:
            try:
                store.write_manifest(
                    describe(d.exe, fps, gran) | {"run": store.run, "complete": False}
                )
            except OSError as e:  # a file in the way, no permission, a read-only filesystem
                raise InputError(
                    f"checkpoint {opts.checkpoint!r} is not a usable location: "
                    f"cannot write {store.root}/manifest.json ({e})"
                ) from e
        return store

    def present(self, store: CheckpointStore) -> set[str]:
        """The entries present; with a key, those whose seal opens with it (their digests
        go to ``sealed``; the others are refused: recomputed as if absent, never loaded)."""
        names = store.names()
        if self.sealer is None:
            return names
        good: set[str] = set()
        for name in sorted(names):
            digest = self.sealer.open_document(store.run, name, store.read_seal(name))
            if digest is None:
                self._refuse(store, name)
            else:
                self.sealed[name] = digest
                good.add(name)
        return good

    def _refuse(self, store: CheckpointStore, name: str) -> None:
        """Entry ``name`` failed authentication: reported, its seal withdrawn (so no later
        run trusts it before it is rewritten and sealed again)."""
        self.unauthenticated.add(name)
        self.sealed.pop(name, None)
        store.remove_seal(name)

    def load_block(
        self, store: CheckpointStore, name: str, present: set[str], corrupt: set[str]
    ) -> np.ndarray | None:
        """Finished block ``name`` from the checkpoint (checksummed, and compared with its
        sealed digest), or None: absent, damaged (added to ``corrupt``) or refused."""
        if name not in present:
            return None
        arr, status = store.load(name, self.sealed.get(name))
        if status == CORRUPT:
            corrupt.add(name)
        if status == UNAUTHENTICATED:
            self._refuse(store, name)
            present.discard(name)
        return arr

    def seal(self, i: Seal | Unseal) -> None:
        """Write (or withdraw) an entry's seal, as the core decided."""
        if self.sealer is None or self.store is None:
            return
        if isinstance(i, Seal):
            doc = self.sealer.seal_document(self.store.run, i.entry, i.digest)
            self.store.write_seal(i.entry, doc)
        else:
            self.store.remove_seal(i.entry)

    def drain(self, topic: str, root: str, events: Events, patience: float = 10.0) -> None:
        """Wait for the workers' last writes (see :func:`drain_checkpoint`)."""
        drain_checkpoint(self.driver.client, topic, root, events, patience)

    def finish(self, store: CheckpointStore, units: list[Unit], blocks: dict[Any, Any]) -> None:
        """Mark the run complete; partial sums are no longer needed once blocks exist."""
        manifest = store.read_manifest() or {}
        manifest.update(
            {"run": store.run, "complete": True, "blocks": [block_name(i) for i in blocks]}
        )
        store.write_manifest(manifest)
        if not self.driver.opts.keep_partials:
            for u in units:
                if not u.final:
                    store.remove(u.name)


__all__ = ["RunCheckpoint", "drain_checkpoint"]
