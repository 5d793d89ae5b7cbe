"""An independent oracle for the stats of distributed SpMV and SpMM on a 1-D machine.

It implements the counting rules of the sparse lowering (docs/sparse.md) from the pattern
alone -- a scipy CSR matrix -- with plain Python sets and loops, never calling distal's plan
code, so a test comparing it with ``kernel.stats(inputs)`` checks the plan against the rules:

* blocks: an extent ``N`` cut into ``G`` parts, block ``b`` is
  ``[b*ceil(N/G), min((b+1)*ceil(N/G), N))``; a non-zero cut does the same with
  ``N = nnz`` over the stored positions (CSR order);
* processor ``p`` visits the entries of its row block (row split) or of its position block
  (non-zero split); ``iterations[p]`` is that count times ``K`` (the dense columns of SpMM,
  1 for SpMV);
* the dense operand (``c`` or ``C``, rows cut by blocks of ``j``) moves at the distinct
  columns of the visited entries (or every column of their hull ``[min, max]``) that ``p``
  does not own, ``K`` words each, from the owners;
* output rows a processor's entries touch and it does not own (``a``/``A`` rows cut by
  blocks of ``i``) are partial sums, ``K`` words each, sent to the owners;
* the matrix moves only when its distribution is not the schedule's cut: the visited
  entries ``p`` does not own come from their owners, values plus index words -- per
  compressed level of the piece ``pos`` (parents + 1) and ``crd`` (one per stored position
  of the level in the piece), per singleton level ``crd``;
* one message per (tensor, source, destination) with at least one word;
* ``peak_words[p]`` = what ``p`` owns (matrix entries, its block of the dense operand and of
  the output) + the buffers it holds while it computes: per input the region it needs (the
  distinct rows of the dense operand its entries reference, or their hull, times the dense
  width; the stored entries it visits of the matrix), unless it owns all of it and it lies
  consecutively in what it owns (then it is read in place); the partial output buffer (the
  distinct output rows its entries touch, times the width), unless those rows all lie in
  its own output block (it writes them there, rows without entries skipped); and the
  partial sums it receives. (The memory model of every plan,
  dense or sparse.)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


def block_size(extent: int, parts: int) -> int:
    """``ceil(extent / parts)``, at least 1."""
    return max(1, -(-extent // parts))


def block_of(x: int, extent: int, parts: int) -> int:
    """The block holding coordinate (or position) ``x``."""
    return x // block_size(extent, parts)


def block_range(b: int, extent: int, parts: int) -> range:
    """The coordinates of block ``b``."""
    s = block_size(extent, parts)
    return range(min(b * s, extent), min((b + 1) * s, extent))


@dataclass
class Entry:
    position: int
    row: int
    col: int


def held_in_place(needed: list[int], owned: list[int]) -> bool:
    """Whether the sorted ``needed`` (coordinates or positions) all lie in the sorted
    ``owned`` and form one consecutive run of it (read in place, no buffer)."""
    if not needed:
        return True
    at = {x: k for k, x in enumerate(owned)}
    if any(x not in at for x in needed):
        return False
    ks = [at[x] for x in needed]
    return ks == list(range(ks[0], ks[0] + len(ks)))


def buffer_words(needed: list[int], owned: list[int], width: int) -> int:
    """Words of the buffer for ``needed`` rows (0 when they are read in place)."""
    return 0 if held_in_place(needed, owned) else len(needed) * width


def partial_buffer_words(rows: list[int], own_rows: list[int], width: int) -> int:
    """Words of the partial output buffer for the touched ``rows`` (sorted): none when they
    all are the processor's own output rows (it adds into its own block)."""
    return 0 if rows and set(rows) <= set(own_rows) else len(rows) * width


def entries(B: sp.csr_array) -> list[Entry]:
    """The stored entries in CSR order (row-major: the storage order of csr, dcsr and coo)."""
    B = sp.csr_array(B)
    out = []
    for r in range(B.shape[0]):
        for q in range(B.indptr[r], B.indptr[r + 1]):
            out.append(Entry(len(out), r, int(B.indices[q])))
    return out


def piece_index_words(fmt: str, piece: list[Entry]) -> int:
    """Index words of a piece of stored entries in format ``fmt`` (``csr`` = ``dc``,
    ``dcsr`` = ``cc``, ``coo`` = ``qs``) by the per-level rule."""
    if not piece:
        return 0
    rows = len({e.row for e in piece})
    n = len(piece)
    if fmt == "csr":  # dense rows: nothing; compressed columns: pos over the rows + crd
        return (rows + 1) + n
    if fmt == "dcsr":  # compressed rows under the root, then compressed columns
        return (1 + 1) + rows + (rows + 1) + n
    if fmt == "coo":  # one position per entry on the 'q' level, a singleton below
        return (1 + 1) + n + n
    raise ValueError(fmt)


def oracle(
    B: sp.csr_array,
    P: int,
    split: str,
    K: int | None = None,
    b_dist: str | None = None,
    fmt: str = "csr",
    hull: bool = False,
) -> dict[str, list[int]]:
    """The stats of ``a(i) = B(i,j) * c(j)`` (``K`` None) or ``A(i,k) = B(i,j) * C(j,k)``.

    ``split`` is the schedule's cut, ``"row"`` (``distribute([i])``) or ``"nz"``
    (``fuse(i, j, f).pos(f, fp, B)``); ``b_dist`` is B's distribution, ``"row"``
    (``"xy -> x"``) or ``"nz"`` (``"xy -> (xy)"``), by default the schedule's cut.
    Dense operand and output: rows cut by blocks (``"x -> x"`` / ``"jk -> j"``).
    """
    b_dist = split if b_dist is None else b_dist
    n, m = B.shape
    width = 1 if K is None else K
    ent = entries(B)
    nnz = len(ent)

    def cut(kind: str, e: Entry) -> int:
        if kind == "row":
            return block_of(e.row, n, P)
        if kind == "col":
            return block_of(e.col, m, P)
        return block_of(e.position, nnz, P)

    visit = [[e for e in ent if cut(split, e) == p] for p in range(P)]
    owner_b = [cut(b_dist, e) for e in ent]
    z = [0] * P
    st = {
        k: list(z)
        for k in (
            "words_received",
            "words_sent",
            "messages_received",
            "messages_sent",
            "iterations",
            "peak_words",
            "index_words_received",
            "index_words_sent",
        )
    }
    buffers = list(z)  # fetch and partial buffers held while computing
    partial_recv = list(z)

    def message(src: int, dst: int, words: int, index_words: int = 0) -> None:
        st["words_received"][dst] += words
        st["words_sent"][src] += words
        st["index_words_received"][dst] += index_words
        st["index_words_sent"][src] += index_words
        st["messages_received"][dst] += 1
        st["messages_sent"][src] += 1

    for p in range(P):
        mine = visit[p]
        st["iterations"][p] = len(mine) * width
        # the dense operand, by the owners of its rows
        cols = sorted({e.col for e in mine})
        if hull and cols:
            cols = list(range(cols[0], cols[-1] + 1))
        by_src = defaultdict(int)
        for j in cols:
            q = block_of(j, m, P)
            if q != p:
                by_src[q] += width
        for q, w in by_src.items():
            message(q, p, w)
        buffers[p] += buffer_words(cols, list(block_range(p, m, P)), width)
        # the matrix's entries that p visits but does not own
        pieces = defaultdict(list)
        for e in mine:
            if owner_b[e.position] != p:
                pieces[owner_b[e.position]].append(e)
        for q, pc in pieces.items():
            message(q, p, len(pc), piece_index_words(fmt, pc))
        own_b = [e.position for e in ent if owner_b[e.position] == p]
        buffers[p] += buffer_words(sorted(e.position for e in mine), own_b, 1)
        # partial sums of output rows p touches and does not own
        rows = sorted({e.row for e in mine})
        by_owner = defaultdict(int)
        for i in rows:
            q = block_of(i, n, P)
            if q != p:
                by_owner[q] += width
        for q, w in by_owner.items():
            message(p, q, w)
            partial_recv[q] += w
        buffers[p] += partial_buffer_words(rows, list(block_range(p, n, P)), width)
    for p in range(P):
        owned = sum(1 for q in owner_b if q == p)
        owned += len(block_range(p, m, P)) * width + len(block_range(p, n, P)) * width
        st["peak_words"][p] = owned + buffers[p] + partial_recv[p]
    return st


def _zero_stats(P: int) -> dict[str, list[int]]:
    return {
        k: [0] * P
        for k in (
            "words_received",
            "words_sent",
            "messages_received",
            "messages_sent",
            "iterations",
            "peak_words",
            "index_words_received",
            "index_words_sent",
        )
    }


def grid_spmm_oracle(B: sp.csr_array, K: int, gx: int, gy: int) -> dict[str, list[int]]:
    """``A(i,k) = B(i,j) * C(j,k)`` on ``Machine(gx, gy)``, ``distribute([i, k])``: B
    ``"xy -> x*"``, C ``"jk -> jk"``, A ``"ik -> ik"``. Processor ``(x, y)`` visits the entries
    of row block ``x`` for the ``k`` of block ``y``; it fetches the rows of C its columns
    reference outside C's row block ``x``, restricted to k block ``y``, from ``(jb, y)``."""
    n, m = B.shape
    st = _zero_stats(gx * gy)
    ent = entries(B)
    for x in range(gx):
        for y in range(gy):
            p = x * gy + y
            ks = len(block_range(y, K, gy))
            mine = [e for e in ent if block_of(e.row, n, gx) == x]
            st["iterations"][p] = len(mine) * ks
            by_src = defaultdict(int)
            cols = sorted({e.col for e in mine})
            for j in cols:
                if block_of(j, m, gx) != x:
                    by_src[block_of(j, m, gx) * gy + y] += ks
            for q, w in by_src.items():
                st["words_received"][p] += w
                st["words_sent"][q] += w
                st["messages_received"][p] += 1
                st["messages_sent"][q] += 1
            rows = sorted({e.row for e in mine})
            st["peak_words"][p] = (
                len(mine)  # B's row block x, replicated over y: read in place
                + len(block_range(x, m, gx)) * ks
                + len(block_range(x, n, gx)) * ks
                + buffer_words(cols, list(block_range(x, m, gx)), ks)
                + partial_buffer_words(rows, list(block_range(x, n, gx)), ks)
            )
    return st


def checkerboard_oracle(
    B: sp.csr_array, gx: int, gy: int, a_dist: str, b_dist: str = "xy -> xy"
) -> dict[str, list[int]]:
    """``a(i) = B(i,j) * c(j)`` on ``Machine(gx, gy)``, ``distribute([i, j])``: c
    ``"x -> *x"`` (so every column a processor's entries reference is its own), a
    ``"x -> x0"`` (row blocks on the column-0 processors) or ``"x -> xx"`` (rows cut into
    ``gx * gy`` blocks, processor ``(x, y)`` holding block ``x * gy + y``).

    B is ``"xy -> xy"`` (each processor owns what it visits), ``"xy -> (xy)*"`` (position
    blocks along dimension 0, a copy in every machine column: ``(x, y)`` reads from the
    owner in its own column), ``"xy -> *(xy)"`` (along dimension 1, read from its own row)
    or ``"xy -> yx"`` (columns over dimension 0, rows over dimension 1); entries it visits
    and does not own arrive with CSR index words (``rows + 1`` pos, one crd per entry)."""
    n, m = B.shape
    P = gx * gy
    st = _zero_stats(P)
    ent = entries(B)
    nnz = len(ent)

    def a_owner(i: int) -> int:
        if a_dist == "x -> x0":
            return block_of(i, n, gx) * gy
        return block_of(i, n, P)

    def a_own_rows(p: int) -> list[int]:
        if a_dist == "x -> x0":
            return list(block_range(p // gy, n, gx)) if p % gy == 0 else []
        return list(block_range(p, n, P))

    def a_owned(p: int) -> int:
        return len(a_own_rows(p))

    def b_owner(e: Entry, x: int, y: int) -> int:
        """The owner of entry ``e`` serving processor ``(x, y)``."""
        if b_dist == "xy -> xy":
            return block_of(e.row, n, gx) * gy + block_of(e.col, m, gy)
        if b_dist == "xy -> (xy)*":
            return block_of(e.position, nnz, gx) * gy + y
        if b_dist == "xy -> *(xy)":
            return x * gy + block_of(e.position, nnz, gy)
        if b_dist == "xy -> yx":
            return block_of(e.col, m, gx) * gy + block_of(e.row, n, gy)
        raise ValueError(b_dist)

    extra = [0] * P
    for x in range(gx):
        for y in range(gy):
            p = x * gy + y
            own_b = [e.position for e in ent if b_owner(e, x, y) == p]
            owned = len(own_b)
            mine = [e for e in ent if block_of(e.row, n, gx) == x and block_of(e.col, m, gy) == y]
            cols = sorted({e.col for e in mine})
            rows = sorted({e.row for e in mine})
            extra[p] += buffer_words(cols, list(block_range(y, m, gy)), 1)
            extra[p] += buffer_words(sorted(e.position for e in mine), own_b, 1)
            extra[p] += partial_buffer_words(rows, a_own_rows(p), 1)
            st["iterations"][p] = len(mine)
            pieces = defaultdict(list)
            for e in mine:
                if b_owner(e, x, y) != p:
                    pieces[b_owner(e, x, y)].append(e)
            for q, pc in pieces.items():
                st["words_received"][p] += len(pc)
                st["words_sent"][q] += len(pc)
                st["index_words_received"][p] += piece_index_words("csr", pc)
                st["index_words_sent"][q] += piece_index_words("csr", pc)
                st["messages_received"][p] += 1
                st["messages_sent"][q] += 1
            by_owner = defaultdict(int)
            for i in rows:
                if a_owner(i) != p:
                    by_owner[a_owner(i)] += 1
            for q, w in by_owner.items():
                st["words_sent"][p] += w
                st["words_received"][q] += w
                st["messages_sent"][p] += 1
                st["messages_received"][q] += 1
                extra[q] += w
            extra[p] += owned + len(block_range(y, m, gy))
    for p in range(P):
        st["peak_words"][p] = extra[p] + a_owned(p)
    return st


def ttv_oracle(
    coords: np.ndarray,
    shape: tuple[int, int, int],
    P: int,
    split: str,
    b_dist: str | None = None,
    fmt: str = "dss",
) -> dict[str, list[int]]:
    """``A(i,j) = B(i,j,k) * c(k)`` on ``Machine(P)``, A dense ``"xy -> x"``, c ``"x -> x"``.

    ``split`` and ``b_dist`` are ``"row"`` (blocks of i), ``"fiber"`` (blocks of the stored
    ``(i, j)`` fibers, in storage order) or ``"nz"`` (blocks of the stored positions); B's
    entries ``p`` visits but does not own move with their index words: per compressed level
    ``pos`` (parents + 1) and ``crd`` (the level's positions in the piece) -- for ``dss``
    (``dcc``) the i level is dense, for ``csf`` (``ccc``) compressed under the root."""
    b_dist = split if b_dist is None else b_dist
    n1, n2, n3 = shape
    order = np.lexsort(coords[::-1])
    ent = [tuple(int(x) for x in coords[:, q]) for q in order]
    nnz = len(ent)
    fibers = sorted({(i, j) for i, j, _ in ent})
    fiber_no = {f: q for q, f in enumerate(fibers)}

    def cut(kind: str, q: int) -> int:
        i, j, _ = ent[q]
        if kind == "row":
            return block_of(i, n1, P)
        if kind == "fiber":
            return block_of(fiber_no[(i, j)], len(fibers), P)
        return block_of(q, nnz, P)

    def index_words(piece: list[int]) -> int:
        rows = len({ent[q][0] for q in piece})
        fib = len({ent[q][:2] for q in piece})
        words = (rows + 1) + fib + (fib + 1) + len(piece)
        return words + (2 + rows if fmt == "csf" else 0)

    st = _zero_stats(P)
    owner = [cut(b_dist, q) for q in range(nnz)]
    extra = [0] * P
    for p in range(P):
        mine = [q for q in range(nnz) if cut(split, q) == p]
        st["iterations"][p] = len(mine)
        moves: list[tuple[int, int, int]] = []  # (source, words, index words) into p
        by_src = defaultdict(int)
        ks = sorted({ent[q][2] for q in mine})
        extra[p] += buffer_words(ks, list(block_range(p, n3, P)), 1)
        own_b = [q for q in range(nnz) if owner[q] == p]
        extra[p] += buffer_words(sorted(mine), own_b, 1)
        fibers_touched = {ent[q][:2] for q in mine}
        extra[p] += len(fibers_touched)  # rows (i, j) of the output: always a buffer
        for k in ks:
            if block_of(k, n3, P) != p:
                by_src[block_of(k, n3, P)] += 1
        moves += [(q, w, 0) for q, w in by_src.items()]
        pieces = defaultdict(list)
        for q in mine:
            if owner[q] != p:
                pieces[owner[q]].append(q)
        moves += [(q, len(pc), index_words(pc)) for q, pc in pieces.items()]
        for src, w, iw in moves:
            st["words_received"][p] += w
            st["words_sent"][src] += w
            st["index_words_received"][p] += iw
            st["index_words_sent"][src] += iw
            st["messages_received"][p] += 1
            st["messages_sent"][src] += 1
        by_owner = defaultdict(int)
        for i, _ in fibers_touched:
            if block_of(i, n1, P) != p:
                by_owner[block_of(i, n1, P)] += 1
        for q, w in by_owner.items():
            st["words_sent"][p] += w
            st["words_received"][q] += w
            st["messages_sent"][p] += 1
            st["messages_received"][q] += 1
            extra[q] += w
    for p in range(P):
        owned = owner.count(p) + len(block_range(p, n3, P)) + len(block_range(p, n1, P)) * n2
        st["peak_words"][p] = owned + extra[p]
    return st


def stats_dict(stats) -> dict[str, list[int]]:
    """A distal ``Stats`` as the oracle's dictionary (the compared fields)."""
    d = stats.as_dict()
    d.pop("level_words_received", None)
    return d


def row_lengths(B: sp.csr_array) -> np.ndarray:
    """Entries per row."""
    return np.diff(sp.csr_array(B).indptr)


# ---------------------------------------------------------------------------------------------
# The distal kernels the oracle describes (public API only)
# ---------------------------------------------------------------------------------------------

DIST = {"row": "xy -> x", "col": "xy -> y", "nz": "xy -> (xy)"}


def spmv_kernel(
    n: int,
    m: int,
    P: int,
    split: str,
    b_dist: str | None = None,
    fmt: str = "csr",
    hull: bool = False,
):
    """``a(i) = B(i,j) * c(j)`` on ``Machine(P)``: a and c ``"x -> x"``, B as ``b_dist``."""
    import distal as dl

    M = dl.Machine(P)
    i, j, io, ii, f, fp, fo, fi = dl.index_vars("i j io ii f fp fo fi")
    B = dl.Tensor("B", (n, m), format=fmt, dist=DIST[b_dist or split], machine=M)
    c = dl.Tensor("c", (m,), dist="x -> x", machine=M)
    a = dl.Tensor("a", (n,), dist="x -> x", machine=M)
    a[i] = B[i, j] * c[j]
    s = dl.schedule(a)
    if split == "row":
        s = s.distribute([i], [io], [ii], M)
        o = io
    else:
        s = s.fuse(i, j, f).pos(f, fp, B).distribute([fp], [fo], [fi], M)
        o = fo
    s = s.communicate([a, B], o).communicate(c, o, exact=not hull)
    return dl.compile(s)


def spmm_kernel(
    n: int,
    m: int,
    K: int,
    P: int,
    split: str,
    b_dist: str | None = None,
    fmt: str = "csr",
    hull: bool = False,
):
    """``A(i,k) = B(i,j) * C(j,k)`` on ``Machine(P)``: C ``"jk -> j"``, A ``"ik -> i"``."""
    import distal as dl

    M = dl.Machine(P)
    i, j, k, io, ii, f, fp, fo, fi = dl.index_vars("i j k io ii f fp fo fi")
    B = dl.Tensor("B", (n, m), format=fmt, dist=DIST[b_dist or split], machine=M)
    C = dl.Tensor("C", (m, K), dist="jk -> j", machine=M)
    A = dl.Tensor("A", (n, K), dist="ik -> i", machine=M)
    A[i, k] = B[i, j] * C[j, k]
    s = dl.schedule(A).reorder([i, j, k])
    if split == "row":
        s = s.distribute([i], [io], [ii], M)
        o = io
    else:
        s = s.fuse(i, j, f).pos(f, fp, B).distribute([fp], [fo], [fi], M)
        o = fo
    s = s.communicate([A, B], o).communicate(C, o, exact=not hull)
    return dl.compile(s)
