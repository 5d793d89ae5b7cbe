"""What a run tells its user: the workers' event log, the summary and the measured traffic.

Workers log ``start``/``done`` events (see :mod:`.tasks`) on a per-run topic of the
scheduler's event log; the driver subscribes to it. Everything the summary reports —
recomputations after failures, lost work, per-worker counts — is derived from those events,
not from Dask internals, so it reads the same whatever Dask version places the tasks. So
is the traffic: each task's ``done`` event carries the words it received
(:func:`measured_traffic`). The progress bar is :mod:`distal.progress`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from distal.plan.stats import Stats
from distal.typing import box_intersect, box_is_empty, box_volume


@dataclass
class Summary:
    """What happened in one elastic run (``Result.extra["summary"]``).

    ``recomputed`` counts task executions beyond the first that did the work again (Dask
    re-runs a task after losing the worker that ran it or held its result; with a checkpoint
    a re-run of a finished unit loads its saved partial instead and is not counted);
    ``lost_seconds`` estimates the compute time the lost executions had spent. ``corrupt``
    counts checkpoint entries that failed their checksum and were recomputed, each entry
    once (the driver and the task that recomputes a block may both find it damaged).
    ``per_worker`` is the number of tasks each worker finished (checkpoint loads included).
    ``speculative`` counts duplicates of straggling units submitted in the tail (see
    :mod:`.speculate`), ``speculative_won`` those that finished first and were used; the
    losing copies are neither recomputations nor lost work, and ``per_worker`` counts only
    the copy that was used. ``overdue`` counts the copies made of units past their
    deadline (their size at the observed speed; included in ``speculative``).

    Verification (``verify="check"`` or ``verify=k``): ``checked`` counts units whose
    result passed its randomized check (``reductions_checked``: the reductions, i.e. summed
    blocks), ``units_rejected`` the units whose result a check rejected or a majority
    outvoted (each was recomputed elsewhere, or taken from the majority),
    ``reductions_rejected`` the same for reductions; ``rejections`` says, per rejected
    result, what it was (``kind``: ``"unit"`` or ``"reduction"``; ``unit`` is its name),
    which worker computed it and, for a check, which worker recomputed it
    (``recomputed_on``); ``excluded_workers`` are the
    workers that lost the run's trust (no further task was submitted to them), and
    ``rechecked`` the checkpoint entries they had written in the run that were
    re-verified. ``unchecked`` (``verify="adaptive"``): results of workers with a run of
    verified results accepted without a check (see :mod:`.trust`).

    ``unauthenticated`` (runs with ``checkpoint_key=``): the checkpoint entries, by name,
    found without a valid seal (absent, forged, made with another key or for another entry)
    or holding other bytes than their seal vouches for; each was recomputed, never used.
    """

    tasks_total: int
    tasks_executed: int
    tasks_reused: int
    recomputed: int = 0
    lost_seconds: float = 0.0
    corrupt: int = 0
    per_worker: dict[str, int] = field(default_factory=dict)
    workers_joined: list[str] = field(default_factory=list)
    workers_lost: list[str] = field(default_factory=list)
    verified: int = 0
    verify_same_worker: int = 0
    speculative: int = 0
    speculative_won: int = 0
    overdue: int = 0
    checked: int = 0
    reductions_checked: int = 0
    unchecked: int = 0
    units_rejected: int = 0
    reductions_rejected: int = 0
    excluded_workers: list[str] = field(default_factory=list)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    rechecked: int = 0
    unauthenticated: list[str] = field(default_factory=list)
    checkpoint: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain dictionary (JSON-friendly)."""
        return asdict(self)

    def __str__(self) -> str:
        lines = [
            f"tasks: {self.tasks_total} ({self.tasks_executed} computed, "
            f"{self.tasks_reused} from checkpoint)",
            f"failures: {self.recomputed} task(s) recomputed, ~{self.lost_seconds:.2f}s of work "
            f"lost, {len(self.workers_lost)} worker(s) lost, {len(self.workers_joined)} joined",
        ]
        if self.corrupt:
            n = self.corrupt
            lines.append(f"checkpoint: {n} corrupt {'entry' if n == 1 else 'entries'} recomputed")
        if self.unauthenticated:
            n = len(self.unauthenticated)
            names = ", ".join(self.unauthenticated[:8]) + (", ..." if n > 8 else "")
            lines.append(
                f"checkpoint: {n} {'entry' if n == 1 else 'entries'} failed authentication "
                f"(never used; recomputed where the run needed it): {names}"
            )
        if self.verified:
            lines.append(f"verify: {self.verified} task(s) accepted by agreement")
        if self.checked or self.reductions_checked:
            red = f" and {self.reductions_checked} reduction(s)" if self.reductions_checked else ""
            lines.append(f"check: {self.checked} task(s){red} passed their randomized check")
        if self.unchecked:
            lines.append(
                f"adaptive trust: {self.unchecked} result(s) of trusted workers accepted "
                "without a check"
            )
        if self.units_rejected or self.reductions_rejected or self.excluded_workers:
            excl = ", ".join(self.excluded_workers) or "none"
            n_red = self.reductions_rejected
            red = f" and {n_red} reduction(s)" if n_red else ""
            lines.append(
                f"rejected: {self.units_rejected} unit(s){red} recomputed elsewhere; "
                f"excluded workers: {excl}"
                + (
                    f"; {self.rechecked} of their checkpoint entries re-verified"
                    if self.rechecked
                    else ""
                )
            )
        if self.speculative:
            lines.append(
                f"speculation: {self.speculative} duplicate(s) of straggling tasks, "
                f"{self.speculative_won} finished first"
                + (f", {self.overdue} of units past their deadline" if self.overdue else "")
            )
        for w, n in sorted(self.per_worker.items()):
            lines.append(f"  {w}: {n} task(s)")
        return "\n".join(lines)


class Events:
    """Task events of one run, as the workers logged them (``client``: a Dask client)."""

    def __init__(self, client: Any, topic: str) -> None:
        self.client, self.topic = client, topic
        self.lock = threading.Lock()
        self.seen: dict[tuple, dict[str, Any]] = {}
        self.notes: list[dict[str, Any]] = []  # "outvoted" messages not yet taken
        self.log: list[dict[str, Any]] = []  # every message once, in the order heard
        client.subscribe_topic(topic, self._add)

    def _add(self, event: tuple[float, dict[str, Any]]) -> None:
        msg = event[1]
        key = (msg["kind"], msg["name"], msg["worker"], msg["t"])
        with self.lock:
            # ``recv``: the driver's clock when it first heard (ages without clock skew)
            if key not in self.seen and msg["kind"] == "outvoted":
                self.notes.append(msg)
            if key not in self.seen:
                self.seen[key] = {**msg, "recv": time.monotonic()}
                self.log.append(self.seen[key])

    def since(self, n: int) -> list[dict[str, Any]]:
        """Messages heard after the first ``n`` (a reader's cursor into the log)."""
        with self.lock:
            return self.log[n:]

    def unauthenticated(self) -> set[str]:
        """Entries a task found holding other bytes than their seal vouches for."""
        with self.lock:
            return {str(m["name"]) for m in self.seen.values() if m.get("unauthenticated")}

    def take_notes(self, kind: str) -> list[dict[str, Any]]:
        """Messages of ``kind`` (``outvoted``) heard since the last call."""
        with self.lock:
            out = [m for m in self.notes if m["kind"] == kind]
            self.notes = [m for m in self.notes if m["kind"] != kind]
        return out

    def entries_written_by(self, worker: str) -> set[str]:
        """Checkpoint entries ``worker`` wrote in this run (as it logged them)."""
        with self.lock:
            return {
                str(m.get("entry", m["name"]))
                for m in self.seen.values()
                if m.get("written") and m["worker"] == worker
            }

    def checked(self, blocks: bool = False) -> int:
        """Units (``blocks``: reductions) whose result passed a check (each once)."""
        with self.lock:
            return len(
                {
                    m["name"]
                    for m in self.seen.values()
                    if m["kind"] == "check" and m.get("ok") and bool(m.get("block")) == blocks
                }
            )

    def sync(self) -> None:
        """Pull the scheduler's copy too (in case a subscription message raced)."""
        try:
            for ev in self.client.get_events(self.topic):
                self._add(ev)
        except Exception:  # pragma: no cover - best effort
            pass

    def close(self) -> None:
        """Stop listening."""
        try:
            self.client.unsubscribe_topic(self.topic)
        except Exception:  # pragma: no cover - best effort
            pass

    def by_name(self) -> dict[str, list[dict[str, Any]]]:
        """Events grouped by task label, in time order."""
        with self.lock:
            msgs = sorted(self.seen.values(), key=lambda m: m["t"])
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for m in msgs:
            out[m["name"]].append(m)
        return out

    def written(self) -> Counter[tuple[str, str]]:
        """``done`` events logged by checkpoint writers (after the entry landed), per
        ``(worker, entry)``."""
        with self.lock:
            return Counter(
                (m["worker"], str(m.get("entry", m["name"])))
                for m in self.seen.values()
                if m["kind"] in ("done", "check") and m.get("written")
            )

    def recomputed(self) -> int:
        """Executions beyond the first that did the work again (loads do not count)."""
        return sum(_attempts(ms, None).redone for ms in self.by_name().values())

    def reused_now(self, reused_direct: int) -> int:
        """Tasks taken from the checkpoint so far (for the progress bar)."""
        n = 0
        for ms in self.by_name().values():
            dones = [m.get("status") for m in ms if m["kind"] == "done"]
            n += bool(dones) and all(st == "reused" for st in dones)
        return reused_direct + n


@dataclass
class _Attempts:
    """One task's executions, sorted out (see :func:`_attempts`)."""

    used: list[dict[str, Any]]  # completions that count (a race's losers left out)
    worked: list[dict[str, Any]]  # the used completions that computed (not loads)
    cut: list[tuple[dict[str, Any], float]]  # (start, seconds) of attempts a failure cut short

    @property
    def redone(self) -> int:
        """Executions beyond the first that did the work again."""
        return max(len(self.worked) + len(self.cut) - 1, 0)


def _attempts(ms: list[dict[str, Any]], alive: set[str] | None) -> _Attempts:
    """Sort one task's events into used completions and attempts lost to failures.

    A start without a completion is an attempt cut short when its worker is gone
    (``alive``: the pool at the end of the run; ``None`` mid-run, where every unfinished
    non-speculative start counts, as it may yet be lost). On a live worker it is a losing
    speculative copy still running. Once a copy has started (``spec``), only the first
    completion after it is used: the other copy lost the race, which is neither a
    recomputation nor lost work (a recomputation after a rejected check, ``redo``, is used
    whatever the race).
    """
    starts = [m for m in ms if m["kind"] == "start"]
    dones = [m for m in ms if m["kind"] == "done"]
    race = min((m["t"] for m in starts if m.get("spec")), default=None)
    used = dones
    if race is not None:
        # a recomputation after a rejected check is no copy in the race: it always counts
        raced = [d for d in dones if not d.get("redo")]
        used = [d for d in raced if d["t"] < race] + [d for d in raced if d["t"] >= race][:1]
        used += [d for d in dones if d.get("redo")]
        used.sort(key=lambda d: d["t"])
    cut = []
    for n, st in enumerate(starts):
        if any(d["worker"] == st["worker"] and d["t"] >= st["t"] for d in dones):
            continue
        if (st["worker"] in alive) if alive is not None else st.get("spec"):
            continue
        later = [m["t"] for m in starts[n + 1 :]]
        cut.append((st, later[0] - st["t"] if later else 0.0))
    worked = [d for d in used if d.get("status") != "reused"]
    return _Attempts(used, worked, cut)


def summarize(
    events: Events,
    total: int,
    logical: set[str],
    verify: int,
    reused_direct: int,
    corrupt_blocks: int | Collection[str],
    workers_before: set[str],
    workers_after: set[str],
    checkpoint: str | None,
    speculative: int = 0,
    speculative_won: int = 0,
) -> Summary:
    """The run's summary from its events (``logical``: the task names this run needed).

    ``corrupt_blocks`` are the block entries the driver found damaged, by name: a unit that
    alone computes a block is saved under the block's name and, re-run, finds the same
    damaged entry and says so in its event, which must not count it a second time. A bare
    count (names not kept) is added as it is.
    """
    byname = events.by_name()
    reused = computed = recomputed = verified = same = 0
    corrupt: set[str] = set()  # entries, by name: each counts once
    lost = 0.0
    per_worker: dict[str, int] = defaultdict(int)
    seen_workers: set[str] = set()
    for name, ms in byname.items():
        a = _attempts(ms, workers_after)
        recomputed += a.redone
        for m in ms:
            seen_workers.add(m["worker"])
        for m in a.used:
            per_worker[m["worker"]] += 1
        # lost work: results computed more than once, and attempts cut short by a failure
        lost += sum(d.get("seconds", 0.0) for d in a.worked[:-1])
        lost += sum(seconds for _, seconds in a.cut)
        dones, worked = a.used, a.worked
        if name in logical and dones:
            status = worked[-1].get("status") if worked else "reused"
            reused += status == "reused"
            computed += status != "reused"
            if any(d.get("corrupt") for d in dones):
                corrupt.add(name)
            if status == "verified":
                verified += 1
                same += dones[-1].get("distinct", 0) < verify
    # tasks whose events did not reach us (should not happen) count as computed
    computed += len(logical) - sum(
        1 for n in logical if any(m["kind"] == "done" for m in byname.get(n, []))
    )
    return Summary(
        tasks_total=total,
        tasks_executed=computed,
        tasks_reused=reused + reused_direct,
        recomputed=recomputed,
        lost_seconds=lost,
        corrupt=(
            len(corrupt) + corrupt_blocks
            if isinstance(corrupt_blocks, int)
            else len(corrupt | set(corrupt_blocks))
        ),
        per_worker=dict(per_worker),
        workers_joined=sorted((seen_workers | workers_after) - workers_before),
        workers_lost=sorted((workers_before | seen_workers) - workers_after),
        verified=verified,
        verify_same_worker=same,
        speculative=speculative,
        speculative_won=speculative_won,
        checkpoint=checkpoint,
    )


def measured_traffic(
    events: Events,
) -> tuple[list[tuple[int, int, int, int]], dict[int, int], list[tuple[int, int]]]:
    """The messages, iterations and memory (``(processor, elements held)``, one per task
    that reported it) the tasks of this run counted, once per task.

    A task that computed more than once (recomputed after a failure, both copies of a
    speculative race, ``verify=k``'s copies) moved its inputs again in Dask but delivered one
    result, and every computation of one task counts the same pieces: one of them counts,
    as the plan moves each piece once. Tasks taken from the checkpoint moved nothing in this
    run and count nothing.
    """
    traffic: list[tuple[int, int, int, int]] = []
    iterations: dict[int, int] = defaultdict(int)
    held: list[tuple[int, int]] = []
    for ms in events.by_name().values():
        counted = [m for m in ms if m["kind"] == "done" and ("traffic" in m or "iterations" in m)]
        if not counted:
            continue
        last = counted[-1]
        traffic.extend((int(s), int(d), int(w), int(iw)) for s, d, w, iw in last.get("traffic", ()))
        if "iterations" in last:
            proc, n = last["iterations"]
            iterations[int(proc)] += int(n)
        if "held" in last and int(last["held"][0]) >= 0:
            held.append((int(last["held"][0]), int(last["held"][1])))
    return traffic, dict(iterations), held


def delivered(
    box: Any, unit: Any, replicas: list[tuple[int, int, Any]]
) -> list[tuple[int, int, int, int]]:
    """What a finished block brings to the driver, in the plan's terms: a unit that alone
    makes its block sends its partial to the block's reducer when it is not that
    processor, and every replica (``(src, dst, box)``, the plan's ``RecvFinal``) gets its
    copy of it."""
    out = []
    if unit is not None:
        for dst, piece in unit.sends:
            inter = box_intersect(piece, box) if box else piece
            out.append((unit.proc, dst, box_volume(inter), 0))
    for src, dst, rbox in replicas:
        inter = box_intersect(rbox, box) if box else rbox
        if not box_is_empty(inter):
            out.append((src, dst, box_volume(inter), 0))
    return out


def measured_stats(plan: Any, events: Events, more: list[tuple[int, int, int, int]]) -> Stats:
    """``Stats`` from what the tasks counted and the messages the driver counted (``more``):
    words and messages between the plan's processors, iterations, and each processor's
    owned blocks plus the most one of its tasks held."""
    traffic, iterations, held = measured_traffic(events)
    stats = Stats.zeros(plan.nprocs, plan.machine.nlevels if plan.machine else 1)
    for src, dst, n, iw in [*traffic, *more]:
        stats.record(src, dst, n, plan.level_of(src, dst), iw)
    for p, n in iterations.items():
        stats.computed(p, n)
    for p, n in held:
        stats.held(p, plan.owned_words(p) + n)
    return stats


__all__ = ["Events", "Summary", "delivered", "measured_stats", "measured_traffic", "summarize"]
