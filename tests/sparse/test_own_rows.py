"""An SpMV leaf reading the processor's own vector rows in place (``kernels/own_rows.py``):
the same bits as the leaf over a buffer holding every row, the buffer's own rows never
read, and refused where it cannot hold (or would not pay)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distal.errors import InputError
from distal.kernels.sparse_leaf import EntryLeaves, TermLeaf
from distal.plan.ir import EntryWork, TermWork

pytest.importorskip("numba")


def banded(n: int, lo: int, hi: int, seed: int = 0) -> tuple[sp.coo_matrix, int, int]:
    """Rows ``lo:hi`` of a banded ``n x n`` matrix (bandwidth 3, a few far entries), and
    the buffer rows a processor owning ``lo:hi`` fetches (``b0:b1``)."""
    rng = np.random.default_rng(seed)
    m = sp.diags([rng.standard_normal(n - abs(k)) for k in (-3, -1, 0, 1, 3)], [-3, -1, 0, 1, 3])
    m = m.tocsr()[lo:hi].tocoo()
    return m, max(0, lo - 3), min(n, hi + 3)


def probe_for(b0: int, b1: int, lo: int, hi: int) -> np.ndarray:
    probe = np.full(b1 - b0, -1, np.int64)
    probe[lo - b0 : hi - b0] = np.arange(hi - lo)
    return probe


@pytest.mark.parametrize(("lo", "hi"), [(0, 40), (40, 80), (80, 120)])
@pytest.mark.parametrize("store", [True, False])
def test_the_split_gives_the_buffers_bits(lo: int, hi: int, store: bool) -> None:
    n = 120
    m, b0, b1 = banded(n, lo, hi)
    x = np.random.default_rng(1).standard_normal(n)
    leaf = TermLeaf(m.row, [m.col - b0], [""], "", hi - lo, {})
    full = x[b0:b1].copy()
    start = np.random.default_rng(2).standard_normal(hi - lo)
    want = start.copy()
    leaf(want, m.data, [full], store=store)
    assert leaf.split_own(probe_for(b0, b1, lo, hi), hi - lo)
    ghosts = full.copy()
    ghosts[lo - b0 : hi - b0] = np.nan  # the rows a split fetch leaves out
    got = start.copy()
    leaf(got, m.data, [ghosts], store=store, own_x=x[lo:hi])
    assert np.array_equal(got, want)
    ref = (0 if store else start) + sp.csr_matrix(m) @ x
    assert np.allclose(got, ref, rtol=1e-13, atol=0)
    # dropped: the leaf reads the buffer again
    assert leaf.split_own(None)
    again = start.copy()
    leaf(again, m.data, [full], store=store)
    assert np.array_equal(again, want)


def test_rows_without_entries_keep_their_sign_when_adding() -> None:
    # a block of rows with gaps (a road network's junctions): rows 1 and 3 have no entries
    o = np.array([0, 0, 2, 4, 4])
    cols = np.array([0, 1, 2, 3, 5])  # buffer rows; 0..3 are own rows 0..3, 4.. another's
    leaf = TermLeaf(o, [cols], [""], "", 5, {})
    probe = np.array([0, 1, 2, 3, -1, -1])
    assert leaf.split_own(probe, 5)
    v = np.arange(1.0, 6.0)
    own = np.array([1.0, 2.0, 3.0, 4.0, 99.0])
    buf = np.array([np.nan, np.nan, np.nan, np.nan, np.nan, 7.0])
    out = np.array([0.0, -0.0, 0.0, -0.0, 0.0])
    leaf(out, v, [buf], own_x=own)
    assert np.array_equal(out, [1 * 1 + 2 * 2, 0.0, 3 * 3, 0.0, 4 * 4 + 5 * 7])
    assert np.signbit(out[1])
    assert np.signbit(out[3])


def test_refused_where_most_rows_read_both() -> None:
    rng = np.random.default_rng(3)
    m = sp.random(40, 80, density=0.3, random_state=4, format="coo")
    leaf = TermLeaf(m.row, [m.col], [""], "", 40, {})
    probe = np.full(80, -1, np.int64)
    probe[:40] = np.arange(40)  # own columns 0..39: almost every row reads both halves
    assert not leaf.split_own(probe, 40)
    with pytest.raises(InputError, match="split_own"):
        leaf(np.zeros(40), m.data, [rng.standard_normal(80)], own_x=np.zeros(40))


def test_refused_for_other_terms() -> None:
    o = np.array([0, 1, 1])
    cols = np.array([0, 1, 2])
    spmm = TermLeaf(o, [cols], ["j"], "j", 2, {"j": 3})
    assert not spmm.split_own(np.array([0, 1, -1]), 2)
    unsorted = TermLeaf(np.array([1, 0, 1]), [cols], [""], "", 2, {})
    assert not unsorted.split_own(np.array([0, 1, -1]), 2)


def test_a_wrong_own_block_is_an_error() -> None:
    m, b0, b1 = banded(120, 40, 80)
    leaf = TermLeaf(m.row, [m.col - b0], [""], "", 40, {})
    assert leaf.split_own(probe_for(b0, b1, 40, 80), 40)
    with pytest.raises(InputError, match="own_x has 39 rows"):
        leaf(np.zeros(40), m.data, [np.zeros(b1 - b0)], own_x=np.zeros(39))


def _entry_leaves(views: tuple = ()) -> EntryLeaves:
    m, b0, _ = banded(120, 40, 80)
    term = TermWork(1, (("B", None),), (("c", m.col - b0, ""),), m.row)
    return EntryLeaves(EntryWork((term,), "", 40, (), m.nnz, 1, views), np.float64)


def test_entry_leaves_read_only_vectors_every_term_reads_as_one() -> None:
    m, b0, b1 = banded(120, 40, 80)
    probe = probe_for(b0, b1, 40, 80)
    assert _entry_leaves().read_own("c", probe, 40)
    assert not _entry_leaves().read_own("B", probe, 40)  # values, read by position
    assert not _entry_leaves().read_own("d", probe, 40)  # read by no term
    assert not _entry_leaves((("c", ((0, 5),)),)).read_own("c", probe, 40)  # a view of it
    leaves = _entry_leaves()
    assert leaves.read_own("c", probe, 40)
    x = np.random.default_rng(5).standard_normal(120)
    full = x[b0:b1]
    ghosts = full.copy()
    ghosts[40 - b0 : 80 - b0] = np.nan
    got = np.zeros(40)
    leaves(got, {"B": (m.data, None), "c": (ghosts, None)}, own={"c": x[40:80]})
    assert np.allclose(got, sp.csr_matrix(m) @ x, rtol=1e-13, atol=0)
    want = np.zeros(40)
    assert leaves.read_own("c", None)
    leaves(want, {"B": (m.data, None), "c": (full, None)})
    assert np.array_equal(got, want)
