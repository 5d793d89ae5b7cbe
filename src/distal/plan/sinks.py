"""Where the plan engine's messages go: kept whole (for plans) or tallied (for stats)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from distal.plan.arrays import volumes
from distal.plan.ir import FETCH, FINAL, PARTIAL
from distal.plan.stats import Stats

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
            k: np.concatenate(self.cols[k]) if self.cols[k] else np.zeros(0, np.int64)
            for k in keys
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
        self.lv = np.zeros((nlevels, P), np.float64)
        self.moved: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.names = names
        # per step (the final phase last) and processor, when small enough to keep
        self.per_step = (
            np.zeros((4, S + 1, P), np.float64) if (S + 1) * P <= PER_STEP_LIMIT else None
        )
        self.incoming: list[tuple[Arr, Arr, Arr]] = []  # partial sums held: (step, proc, words)

    def add(self, step, kind, tensor, src, dst, lo, hi, hop=None, relay=None, words=None) -> None:
        if len(src):
            words = volumes(lo, hi) if words is None else words
            self.apply(self.delta(step, kind, tensor, src, dst, words))

    def delta(self, step, kind, tensor, src, dst, words) -> tuple:
        """What one batch of messages adds to the counts (shared by the routings that send
        the batch the same way)."""
        P = self.P
        counts = (
            np.bincount(dst, weights=words, minlength=P),
            np.bincount(src, weights=words, minlength=P),
            np.bincount(dst, minlength=P),
            np.bincount(src, minlength=P),
        )
        levels = None
        if len(self.lv) > 1:
            levels = np.zeros_like(self.lv)
            np.add.at(levels, (self.levels(src, dst), dst), words)
        steps = None
        if self.per_step is not None and np.ndim(step) != 0:
            steps = np.zeros_like(self.per_step)
            step = np.asarray(step, np.int64)
            for k, (who, w) in enumerate(((dst, words), (src, words), (dst, 1), (src, 1))):
                np.add.at(steps[k], (step, who), w)
        key = self.names[tensor], KINDS[kind]
        return key, int(words.sum()), len(src), counts, levels, step, steps

    def apply(self, delta: tuple) -> None:
        key, words, n, counts, levels, step, steps = delta
        self.moved[key][0] += words
        self.moved[key][1] += n
        for total, c in zip(self.totals, counts, strict=True):
            total += c
        if levels is None:
            self.lv[0] += counts[0]
        else:
            self.lv += levels
        if self.per_step is None:
            return
        if steps is None:
            for k, c in enumerate(counts):
                self.per_step[k, int(step)] += c
        else:
            self.per_step += steps

    def ints(self, a: Arr) -> list:
        return np.rint(a).astype(np.int64).tolist()

    def peak_beyond(self, load: Arr, held: Arr) -> Arr:
        """Per processor: the most words beyond its owned blocks at the end of any step.

        ``load`` (steps x processors) holds the buffers every routing shares, ``held`` what
        stays all along; the partial sums a processor receives in a step (which depend on
        the routing) add to that step only.
        """
        S, P = load.shape
        peak = (load.max(axis=0) if S else np.zeros(P, np.int64)) + held
        if self.incoming:
            step = np.concatenate([np.broadcast_to(a, b.shape) for a, b, _ in self.incoming])
            who = np.concatenate([b for _, b, _ in self.incoming])
            words = np.concatenate([w for _, _, w in self.incoming])
            keys, inv = np.unique(step * P + who, return_inverse=True)
            add = np.bincount(inv.reshape(-1), weights=words).astype(np.int64)
            cand = load.reshape(-1)[keys] + add + held[keys % P]
            np.maximum.at(peak, keys % P, cand)
        return peak


