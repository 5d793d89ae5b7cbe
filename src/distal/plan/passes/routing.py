"""Routing: tree broadcasts of fetched boxes and tree reductions of partial sums.

The lowering's baseline is *direct*: every piece goes from its owner to each processor that
needs it, and every partial sum straight to its reducer. When ``k`` processors fetch the same
piece from one owner in one step, or send partial sums of the same box to one reducer, that
processor handles ``k`` messages alone. The ``tree`` routing rewrites those groups into
binomial trees over the processors involved, with explicit messages, so each one handles at
most ``ceil(log2(k + 1))`` (``broadcast`` routing does only the first kind: a reduction
tree lowers the reducer's load but makes its inner nodes receive their children's sums):

* broadcast: node ``i`` of ``[owner, r1, r2, ...]`` (receivers by processor number) gets the
  piece from node ``i - 2**floor(log2(i))``; a receiver that passes it on has a
  :class:`Forward` (it sends from its own fetch buffer once its copy arrived);
* reduction: node ``i`` of ``[reducer, s1, s2, ...]`` sends its partial sum to the same
  parent; a sender with children first adds theirs (:class:`Combine`), so one message
  carries the sum of its subtree.

Words received by each processor are unchanged for broadcasts; senders change. Partial sums
received change where subtrees combine. ``plan.fast`` computes the same numbers vectorised.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from distal.errors import ScheduleError
from distal.plan.ir import (
    FETCH,
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

#: Routing strategies a kernel can be compiled with ("auto": the cost model's choice):
#: "broadcast" routes shared fetches through trees and partial sums directly, "tree" both.
ROUTINGS = ("direct", "broadcast", "tree")

_PHASE = {
    Fetch: 0,
    Forward: 1,
    OpenOutput: 2,
    Compute: 3,
    Combine: 4,
    Flush: 5,
    Reduce: 6,
    SendFinal: 7,
    RecvFinal: 8,
}


def tree_parent(i: int) -> int:
    """Parent of node ``i > 0`` in a binomial tree rooted at node 0."""
    return i - (1 << (i.bit_length() - 1))


def route(plan: Plan, routing: str) -> Plan:
    """``plan`` with its messages routed by ``routing`` (one of :data:`ROUTINGS`)."""
    if routing not in ROUTINGS:
        raise ScheduleError(f"routing {routing!r} is not one of {[*ROUTINGS, 'auto']}")
    if routing == "direct":
        return plan
    messages: list[Message] = []
    fetch_src: dict[tuple, int] = {}  # (step, tensor, receiver, piece) -> who sends it
    extra: dict[int, list] = defaultdict(list)  # processor -> added Forward / Combine ops
    partial_dst: dict[tuple, int] = {}  # (step, sender, piece) -> who receives it
    reduce_keep: set[tuple] = set()  # (reducer, step, src, piece) still received directly

    groups: dict[tuple, list[Message]] = defaultdict(list)
    for m in plan.messages:
        if m.kind == FETCH:
            groups["f", m.step, m.tensor, m.src, m.box].append(m)
        elif m.kind == PARTIAL:
            groups["p", m.step, m.tensor, m.dst, m.box].append(m)
        else:
            messages.append(m)
    for (kind, step, tensor, root, box), ms in groups.items():
        if kind == "p" and routing == "broadcast":
            messages += ms
            for m in ms:
                partial_dst[step, m.src, box] = root
                reduce_keep.add((root, step, m.src, box))
            continue
        if kind == "f":
            nodes = [root, *sorted(m.dst for m in ms)]
            for i in range(1, len(nodes)):
                src = nodes[tree_parent(i)]
                relay = tree_parent(i) != 0
                messages.append(Message(step, FETCH, tensor, src, nodes[i], box, i, relay))
                fetch_src[step, tensor, nodes[i], box] = src
                if relay:
                    extra[src].append(Forward(step, tensor, box, nodes[i]))
        else:
            nodes = [root, *sorted(m.src for m in ms)]
            for i in range(1, len(nodes)):
                dst = nodes[tree_parent(i)]
                relay = tree_parent(i) != 0
                messages.append(Message(step, PARTIAL, tensor, nodes[i], dst, box, i, relay))
                partial_dst[step, nodes[i], box] = dst
                if relay:
                    extra[dst].append(Combine(step, nodes[i], box))
                else:
                    reduce_keep.add((dst, step, nodes[i], box))

    programs = []
    for p, prog in enumerate(plan.programs):
        ops: list = []
        for op in prog:
            if isinstance(op, Fetch) and op.pieces:
                pieces = tuple(
                    (fetch_src.get((op.step, op.tensor, p, piece), src), piece)
                    for src, piece in op.pieces
                )
                op = dataclasses.replace(op, pieces=pieces)
            elif isinstance(op, Flush) and op.sends:
                sends = tuple((partial_dst[op.step, p, box], box) for _, box in op.sends)
                op = dataclasses.replace(op, sends=sends)
            elif isinstance(op, Reduce) and (p, op.step, op.src, op.box) not in reduce_keep:
                continue
            ops.append(op)
        ops += extra.get(p, [])
        ops.sort(key=lambda op: (getattr(op, "step", plan.nsteps), _PHASE[type(op)]))
        programs.append(tuple(ops))
    order = {FETCH: 0, PARTIAL: 1}
    messages.sort(key=lambda m: (m.step, order.get(m.kind, 2), m.src, m.dst, m.hop))
    return dataclasses.replace(
        plan, programs=tuple(programs), messages=tuple(messages), routing=routing
    )
