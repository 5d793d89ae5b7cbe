"""The core's part that decides which checkpoint entries are sealed (a mixin of
:class:`~.core.Core`, for runs with ``checkpoint_key=``).

Workers report each entry they wrote with its content digest, in an event log every
worker of the pool can write to under any name; the driver alone holds the key. An entry
is sealed only while every report of it in the run names one digest (a forged report
meeting the honest one leaves it unsealed), only if this run's tasks may write it and its
reporter is still trusted, and a block only once what reached the driver has that digest.
"""

from __future__ import annotations

from typing import Any

from distal.runtime.elastic.events import Instruction, Received, Refused, Seal, Unseal, Wrote


class Seals:
    """Sealing for :class:`~.core.Core` (whose state it reads and writes)."""

    policy: Any
    spec: Any
    units: dict[str, Any]
    excluded: set[str]

    def _init_seals(self) -> None:
        self.sealed: dict[str, str] = dict(self.spec.sealed)
        self.reports: dict[str, set[str]] = {}
        self.to_seal: dict[str, str] = {}
        self.received: dict[str, str] = {}
        self.unauthenticated: set[str] = set()
        self.written: dict[str, set[str]] = {}  # worker -> entries it wrote in this run

    def _wrote(self, ev: Wrote, out: list[Instruction]) -> None:
        if not ev.recheck:
            self.written.setdefault(ev.worker, set()).add(ev.entry)
        if not self.policy.sealed or ev.digest is None or ev.entry not in self.spec.writable:
            return
        if ev.worker in self.excluded:
            return
        self.reports.setdefault(ev.entry, set()).add(ev.digest)
        self.to_seal[ev.entry] = ev.digest

    def _refused(self, ev: Refused, out: list[Instruction]) -> None:
        self.unauthenticated.add(ev.entry)
        self.sealed.pop(ev.entry, None)
        out.append(Unseal(ev.entry))

    def _received(self, ev: Received, out: list[Instruction]) -> None:
        self.received[ev.block] = ev.digest

    def _withdraw(self, entry: str, out: list[Instruction]) -> None:
        self.to_seal.pop(entry, None)
        self.reports.pop(entry, None)
        self.sealed.pop(entry, None)
        if self.policy.sealed:
            out.append(Unseal(entry))

    def _seal(self, out: list[Instruction]) -> None:
        """Seal the entries reported written (or vouched for by a recheck): only while
        every report of an entry names one digest (a forged report meeting the honest one
        leaves it unsealed), and a block only once what reached the driver has that digest."""
        for name, digest in list(self.to_seal.items()):
            if len(self.reports.get(name, ())) > 1:
                del self.to_seal[name]
                self.sealed.pop(name, None)
                out.append(Unseal(name))
                continue
            if name not in self.units or self.units[name].final:
                got = self.received.get(name)
                if got is None:
                    continue  # the block has not reached the driver yet
                if got != digest:
                    del self.to_seal[name]
                    continue
            if self.sealed.get(name) != digest:
                out.append(Seal(name, digest))
                self.sealed[name] = digest
            del self.to_seal[name]


__all__ = ["Seals"]
