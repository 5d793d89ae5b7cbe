"""Where the plan engine's messages go: kept whole (for plans) or tallied (for stats)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from distal.plan.arrays import volumes
from distal.plan.ir import (
    FETCH,
    FINAL,
    PARTIAL,
    Combine,
    Compute,
    Fetch,
    Flush,
    Forward,
    Message,
    OpenOutput,
    Plan,
    RecvFinal,
    Reduce,
    SendFinal,
)
from distal.plan.region import words
from distal.plan.stats import Stats
from distal.plan.visit import Interpreter, impl

Arr = np.ndarray

#: Message kinds, in the order of the plan's canonical message order.
KINDS = (FETCH, PARTIAL, FINAL)
#: Stats keep per-step counts (for the lockstep cost of ``routing="auto"``) up to this many
#: steps x processors; beyond, only totals.
PER_STEP_LIMIT = 2_000_000


@dataclass
class PlanSummary:
    """What ``explain`` and ``stats`` need: exact stats and totals per tensor and kind."""

    stats: Stats
    moved: dict[tuple[str, str], list[int]]  # (tensor, kind) -> [words, messages]
    nsteps: int
    # per step (the final phase last) and processor: words in, words out, messages in, out;
    # None when steps x processors is too large to keep
    per_step: np.ndarray | None = None

    def step_comm_seconds(self, alpha: float, beta: float) -> float | None:
        """Communication time if every step waits for its busiest processor (BSP):
        ``sum over steps of max over processors of alpha * messages + beta * words``."""
        if self.per_step is None:
            return None
        wi, wo, mi, mo = self.per_step
        per = alpha * np.maximum(mi, mo) + beta * np.maximum(wi, wo)
        return float(per.max(axis=1).sum()) if per.size else 0.0


class MessageRows:
    """Messages collected during the walk, kept whole: arrays per batch (for plans)."""

    def __init__(self) -> None:
        self.cols: dict[str, list[Arr]] = defaultdict(list)
        self.boxes: list[tuple[int, Arr, Arr]] = []  # (tensor index, lo, hi) per batch

    def add(self, step, kind, tensor, src, dst, lo, hi, hop=None, relay=None, words=None) -> None:
        n = len(src)
        if n == 0:
            return
        c = self.cols
        c["step"].append(np.broadcast_to(np.asarray(step, np.int64), (n,)))
        c["kind"].append(np.full(n, kind, np.int64))
        c["tensor"].append(np.full(n, tensor, np.int64))
        c["src"].append(src)
        c["dst"].append(dst)
        c["hop"].append(np.zeros(n, np.int64) if hop is None else hop)
        c["relay"].append(np.zeros(n, bool) if relay is None else relay)
        self.boxes.append((tensor, lo, hi))

    def arrays(self) -> dict[str, Arr]:
        keys = ("step", "kind", "tensor", "src", "dst", "hop")
        out = {
            k: np.concatenate(self.cols[k]) if self.cols[k] else np.zeros(0, np.int64) for k in keys
        }
        out["relay"] = (
            np.concatenate(self.cols["relay"]) if self.cols["relay"] else np.zeros(0, bool)
        )
        return out


class Tally:
    """Messages counted as they are found (for stats): per processor, level, tensor and step.

    Nothing per message is kept, so stats of plans with tens of millions of messages fit in
    the memory of a few per-processor arrays. Word counts accumulate in float64 (bincount's
    weights), exact below 2**53.
    """

    def __init__(self, P: int, S: int, names: list[str], nlevels: int, levels) -> None:
        """``P`` processors, ``S`` steps, tensor ``names`` (messages name them by index),
        ``nlevels`` machine levels and ``levels(src, dst)`` the level each message crosses."""
        self.P = P
        self.levels = levels
        self.totals = np.zeros((4, P), np.float64)  # words in, words out, messages in, out
        self.index = np.zeros((2, P), np.float64)  # index words in, out (sparse pieces)
        self.lv = np.zeros((nlevels, P), np.float64)
        self.moved: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.names = names
        # per step (the final phase last) and processor, when small enough to keep
        self.per_step = (
            np.zeros((4, S + 1, P), np.float64) if (S + 1) * P <= PER_STEP_LIMIT else None
        )
        self.incoming: list[tuple[Arr, Arr, Arr]] = []  # partial sums held: (step, proc, words)
        self.arriving: dict[int, tuple[Arr, Arr]] = {}
        self.peak = np.zeros(P, np.int64)  # the most words beyond owned blocks, per processor

    def add(
        self, step, kind, tensor, src, dst, lo, hi, hop=None, relay=None, words=None, index=None
    ) -> None:
        if len(src):
            words = volumes(lo, hi) if words is None else words
            self.apply(self.delta(step, kind, tensor, src, dst, words))
            if index is not None:
                self.index[0] += np.bincount(dst, weights=index, minlength=self.P)
                self.index[1] += np.bincount(src, weights=index, minlength=self.P)

    def delta(self, step, kind, tensor, src, dst, words) -> tuple:
        """What one batch of messages adds to the counts (shared by the routings that send
        the batch the same way). Receivers are kept as ``(processors, words)`` when each
        gets one message of the batch (a fetch's usual shape), else as histograms."""
        P = self.P
        if len(dst) < 2 or bool(np.all(dst[1:] > dst[:-1])):
            recv = (dst, words, 1)
        else:
            recv = (
                None,
                np.bincount(dst, weights=words, minlength=P),
                np.bincount(dst, minlength=P),
            )
        send = (np.bincount(src, weights=words, minlength=P), np.bincount(src, minlength=P))
        levels = None
        if len(self.lv) > 1:
            levels = (self.levels(src, dst), dst, words)
        key = self.names[tensor], KINDS[kind]
        return key, int(words.sum()), len(src), recv, send, levels, step, src, dst, words

    def apply(self, delta: tuple) -> None:
        key, total, n, recv, send, levels, step, src, dst, words = delta
        self.moved[key][0] += total
        self.moved[key][1] += n
        wr, ws, mr, ms = self.totals
        who, rw, rm = recv
        if who is None:
            wr += rw
            mr += rm
        else:
            wr[who] += rw
            mr[who] += rm
        ws += send[0]
        ms += send[1]
        if levels is not None:  # one machine level: level 0 is words received (see ints)
            np.add.at(self.lv, levels[:2], levels[2])
        ps = self.per_step
        if ps is None:
            return
        if np.ndim(step) == 0:
            at = int(step)
            if who is None:
                ps[0, at] += rw
                ps[2, at] += rm
            else:
                ps[0, at, who] += rw
                ps[2, at, who] += rm
            ps[1, at] += send[0]
            ps[3, at] += send[1]
            return
        step = np.asarray(step, np.int64)
        for k, (x, w) in enumerate(((dst, words), (src, words), (dst, 1), (src, 1))):
            np.add.at(ps[k], (step, x), w)

    def ints(self, a: Arr) -> list:
        return np.rint(a).astype(np.int64).tolist()

    def level_words(self) -> list[list[int]]:
        """Words received per machine level crossed (one level: all of them)."""
        return self.ints(self.totals[:1] if len(self.lv) == 1 else self.lv)

    def group_incoming(self) -> None:
        """The partial sums each processor receives, grouped by the step they arrive in."""
        self.arriving: dict[int, tuple[Arr, Arr]] = {}
        if not self.incoming:
            return
        step = np.concatenate([np.broadcast_to(a, b.shape) for a, b, _ in self.incoming])
        who = np.concatenate([b for _, b, _ in self.incoming])
        words = np.concatenate([w for _, _, w in self.incoming])
        for s in np.unique(step).tolist():
            sel = step == s
            self.arriving[s] = (who[sel], words[sel])

    def note_peak(self, step: int, base: Arr) -> None:
        """Memory at the end of ``step``: ``base`` (what every routing holds) plus the
        partial sums this routing delivers in that step; keep the most per processor."""
        now = base
        if step in self.arriving:
            who, words = self.arriving[step]
            now = base.copy()
            np.add.at(now, who, words)
        np.maximum(self.peak, now, out=self.peak)


def count_plan(plan: Plan) -> PlanSummary:
    """The exact stats of an enumerated plan, by the rules the engine's walk counts with:
    its messages through a :class:`Tally` (words, messages, index words, machine levels,
    per step), and memory by the plan's memory model read off the programs (what the
    runtimes measure): owned regions, plus at the end of each step the fetch buffers in use
    and those prefetched for the next step (views of owned data are free), the open partial
    output buffer unless it is the owned block, and the partial sums received in the step.
    """
    P, S = plan.nprocs, plan.nsteps
    names = list(plan.tensor_names())
    tid = {n: k for k, n in enumerate(names)}
    nlevels = plan.machine.nlevels if plan.machine is not None else 1
    tally = Tally(
        P, S, names, nlevels,
        lambda s, d: np.array([plan.level_of(a, b) for a, b in zip(s, d, strict=True)], np.int64),
    )  # fmt: skip
    groups: dict[tuple[int, int, int], list[Message]] = defaultdict(list)
    for m in plan.messages:
        groups[(m.step, KINDS.index(m.kind), tid[m.tensor])].append(m)
    for (step, kind, t), ms in sorted(groups.items()):
        src = np.array([m.src for m in ms], np.int64)
        dst = np.array([m.dst for m in ms], np.int64)
        w = np.array([m.words for m in ms], np.float64)
        iw = np.array([m.index_words for m in ms], np.float64)
        tally.add(step, kind, t, src, dst, None, None, words=w, index=iw if iw.any() else None)
    peak = [0] * P
    iterations = [0] * P
    for p in range(P):
        fp = Footprint(plan, p)
        iterations[p] = fp.iterations
        peak[p] = plan.owned_words(p) + max(fp.extra_by_step(), default=0)
    wr, ws, mr, ms_ = (tally.ints(x) for x in tally.totals)
    ir_, is_ = (tally.ints(x) for x in tally.index)
    st = Stats(
        words_received=wr,
        words_sent=ws,
        messages_received=mr,
        messages_sent=ms_,
        iterations=iterations,
        peak_words=peak,
        index_words_received=ir_,
        index_words_sent=is_,
        level_words_received=tally.level_words(),
    )
    ps = None if tally.per_step is None else np.rint(tally.per_step).astype(np.int64)
    return PlanSummary(st, dict(tally.moved), S, ps)


class Footprint(Interpreter):
    """What processor ``p``'s program holds beyond its owned regions at the end of each step,
    and the iterations it computes: the memory model of :func:`count_plan`, read off the
    program instruction by instruction (the runtimes measure the same arrays as they run)."""

    ignores = (Forward, SendFinal, RecvFinal)  # the final phase follows the last step's peak

    def __init__(self, plan: Plan, p: int) -> None:
        S = self.nsteps = plan.nsteps
        self.fetch_at: list[dict[str, int]] = [{} for _ in range(S + 1)]
        self.partial = [0] * (S + 1)
        self.received = [0] * (S + 1)
        self.opened: dict[int, int] = {}
        self.iterations = 0
        for op in plan.ops(p):
            self.visit(op)

    @impl(Fetch)
    def fetch(self, op: Fetch) -> None:
        self.fetch_at[op.step][op.tensor] = 0 if op.view or op.box is None else words(op.box)

    @impl(OpenOutput)
    def open_output(self, op: OpenOutput) -> None:
        if not op.direct:
            self.opened[op.step] = words(op.box)

    @impl(Compute)
    def compute(self, op: Compute) -> None:
        self.iterations += op.iterations

    @impl(Flush)
    def flush(self, op: Flush) -> None:
        for s in list(self.opened):
            if s <= op.step:
                for k in range(s, op.step + 1):
                    self.partial[k] += self.opened[s]
                del self.opened[s]

    @impl(Reduce, Combine)
    def receive(self, op: Reduce | Combine) -> None:
        self.received[op.step] += words(op.box)

    def extra_by_step(self) -> list[int]:
        """Words held beyond the owned regions at the end of each step."""
        S, fetch_at = self.nsteps, self.fetch_at
        held: dict[str, int] = {}
        out = []
        for s in range(S):
            held.update(fetch_at[s])
            nxt = sum(fetch_at[s + 1].values()) if s + 1 < S else 0
            out.append(sum(held.values()) + nxt + self.partial[s] + self.received[s])
        return out
