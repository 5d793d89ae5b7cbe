"""Row-wise array helpers of the plan engine: boxes as ``(lo, hi)`` rows, binomial trees.

Boxes have a handful of dimensions, and numpy's reductions along such a short axis cost far
more than a few elementwise operations, so the predicates go one column at a time.
"""

from __future__ import annotations

import numpy as np

Arr = np.ndarray


def tree_links(root: Arr, member: Arr, group: Arr) -> tuple[Arr, Arr, Arr]:
    """Binomial trees: ``(parent, position, relay)`` of each member.

    Rows with equal ``group`` (non-negative integers) form one group rooted at ``root``; its
    members, ordered by processor number, are nodes ``1, 2, ...`` and node ``i`` hangs under
    node ``i - 2**floor(log2(i))`` (node 0 is the root). ``relay`` is True where the parent
    is a member (it passes the piece on, or combines the sums below it), not the root.
    """
    n = len(member)
    if n == 0:
        return root.copy(), np.zeros(0, np.int64), np.zeros(0, bool)
    group = np.asarray(group, np.int64)
    # members usually arrive in processor order: a stable sort by group alone (a radix sort
    # for small group numbers) then orders each group; otherwise sort by both
    order = np.argsort(group.astype(np.uint16) if group.max() < 1 << 16 else group, kind="stable")
    gs, ms = group[order], member[order]
    first = np.ones(n, bool)
    first[1:] = gs[1:] != gs[:-1]
    if not np.all(first[1:] | (ms[1:] > ms[:-1])):
        order = np.lexsort((member, group))
        gs, ms = group[order], member[order]
        first[1:] = gs[1:] != gs[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    pos = np.arange(n) - start + 1
    parent = pos - (1 << (np.floor(np.log2(pos)).astype(np.int64)))
    sorted_parent = np.where(parent == 0, root[order], ms[np.maximum(start + parent - 1, 0)])
    out_parent = np.empty(n, np.int64)
    out_parent[order] = sorted_parent
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


