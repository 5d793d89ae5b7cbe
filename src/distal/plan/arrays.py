"""Row-wise array helpers of the plan engine: boxes as ``(lo, hi)`` rows, binomial trees.

Boxes have a handful of dimensions, and numpy's reductions along such a short axis cost far
more than a few elementwise operations, so the predicates go one column at a time.
"""

from __future__ import annotations

import numpy as np

Arr = np.ndarray


_HIGHEST = np.zeros(1, np.int64)  # _HIGHEST[i]: the largest power of two <= i (i >= 1)


def _highest_power(pos: Arr) -> Arr:
    """``2**floor(log2(pos))`` for positive integers, by table lookup (grown on demand)."""
    global _HIGHEST
    top = int(pos.max())
    if top >= len(_HIGHEST):
        size = 1 << max(top.bit_length(), 10)
        table = np.zeros(size, np.int64)
        for k in range(size.bit_length() - 1):
            table[1 << k : 1 << (k + 1)] = 1 << k
        _HIGHEST = table
    return _HIGHEST[pos]


def tree_links(
    root: Arr, member: Arr, group: Arr, links: bool = True
) -> tuple[Arr, Arr | None, Arr | None]:
    """Binomial trees: ``(parent, position, relay)`` of each member.

    Rows with equal ``group`` (non-negative integers) form one group rooted at ``root``; its
    members, ordered by processor number, are nodes ``1, 2, ...`` and node ``i`` hangs under
    node ``i - 2**floor(log2(i))`` (node 0 is the root). ``relay`` is True where the parent
    is a member (it passes the piece on, or combines the sums below it), not the root.
    Without ``links`` only the parents are computed (position and relay are None).
    """
    n = len(member)
    if n == 0:
        return root.copy(), np.zeros(0, np.int64), np.zeros(0, bool)
    group = np.asarray(group, np.int64)
    first = np.ones(n, bool)
    first[1:] = group[1:] != group[:-1]
    if np.all(group[1:] >= group[:-1]) and np.all(first[1:] | (member[1:] > member[:-1])):
        order = None  # already grouped, each group in processor order
        gs, ms, rs = group, member, root
    else:
        # members usually arrive in processor order: a stable sort by group alone (a radix
        # sort for small group numbers) then orders each group; otherwise sort by both
        key = group.astype(np.uint16) if group.max() < 1 << 16 else group
        order = np.argsort(key, kind="stable")
        gs, ms = group[order], member[order]
        first[1:] = gs[1:] != gs[:-1]
        if not np.all(first[1:] | (ms[1:] > ms[:-1])):
            order = np.lexsort((member, group))
            gs, ms = group[order], member[order]
            first[1:] = gs[1:] != gs[:-1]
        rs = root[order]
    idx = np.arange(n)
    start = np.maximum.accumulate(np.where(first, idx, 0))
    pos = idx - start + 1
    parent = pos - _highest_power(pos)
    sorted_parent = np.where(parent == 0, rs, ms[np.maximum(start + parent - 1, 0)])
    if order is None:
        return sorted_parent, (pos if links else None), (parent != 0 if links else None)
    out_parent = np.empty(n, np.int64)
    out_parent[order] = sorted_parent
    if not links:
        return out_parent, None, None
    out_pos = np.empty(n, np.int64)
    out_pos[order] = pos
    out_relay = np.empty(n, bool)
    out_relay[order] = parent != 0
    return out_parent, out_pos, out_relay


def group_ids(*cols: Arr) -> Arr:
    """Small non-negative integers, equal exactly where all the columns are equal."""
    key = np.column_stack(cols)
    if len(key) == 0:
        return np.zeros(0, np.int64)
    return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1)


def volumes(lo: Arr, hi: Arr) -> Arr:
    """Elements of each row's box ``[lo, hi)``."""
    out = np.ones(len(lo), np.int64)
    for d in range(lo.shape[1]):
        out *= np.maximum(hi[:, d] - lo[:, d], 0)
    return out


def every(rows: int, cols: int, test) -> Arr:
    out = np.ones(rows, bool)
    for d in range(cols):
        out &= test(d)
    return out


def meets(lo: Arr, hi: Arr, blo: Arr, bhi: Arr) -> Arr:
    """Rows whose box ``[lo, hi)`` meets box ``[blo, bhi)`` (rows or one box) in a non-empty box."""
    return every(
        len(lo),
        lo.shape[1],
        lambda d: np.maximum(lo[:, d], blo[:, d]) < np.minimum(hi[:, d], bhi[:, d]),
    )


def within(lo: Arr, hi: Arr, olo: Arr, ohi: Arr) -> Arr:
    """Rows whose box lies inside the box ``[olo, ohi)`` of the same row."""
    return every(len(lo), lo.shape[1], lambda d: (olo[:, d] <= lo[:, d]) & (hi[:, d] <= ohi[:, d]))


def same(lo: Arr, hi: Arr, lo2: Arr, hi2: Arr) -> Arr:
    """Rows whose boxes are equal."""
    return every(len(lo), lo.shape[1], lambda d: (lo[:, d] == lo2[:, d]) & (hi[:, d] == hi2[:, d]))
