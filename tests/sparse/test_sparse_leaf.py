"""The sparse leaf kernels (TermLeaf) against a plain-Python loop over entries and letters,
for every implementation path: canonical shapes, random terms (several letters per operand,
broadcast letters, summed letters), repeated and unsorted output rows, empty inputs,
complex values, repeated calls."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distal.errors import InputError
from distal.kernels import sparse_leaf
from distal.kernels.sparse_leaf import TermLeaf

RTOL = 1e-12


def reference(
    out_shape: tuple[int, ...],
    o: np.ndarray,
    idx: Sequence[np.ndarray],
    subs: Sequence[str],
    out_subs: str,
    extents: Mapping[str, int],
    v: np.ndarray,
    xs: Sequence[np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The term, one entry and one assignment of the letters at a time; and the same sum of
    absolute values (the scale of the rounding error)."""
    dtype = np.result_type(v, *xs, np.float64)
    ref = np.zeros(out_shape, dtype)
    mag = np.zeros(out_shape)
    letters = sorted(set(out_subs).union(*subs))
    for e in range(o.shape[0]):
        for values in itertools.product(*(range(extents[c]) for c in letters)):
            at = dict(zip(letters, values, strict=True))
            term = v[e]
            for x, i, s in zip(xs, idx, subs, strict=True):
                term = term * x[(i[e], *(at[c] for c in s))]
            pos = (o[e], *(at[c] for c in out_subs))
            ref[pos] += term
            mag[pos] += abs(term)
    return ref, mag


def assert_matches(got: np.ndarray, ref: np.ndarray, mag: np.ndarray, start: np.ndarray) -> None:
    """``got == start + ref`` to RTOL of the magnitude of the sum (exact where it is 0)."""
    scale = mag + np.abs(start)
    assert np.all(np.abs(got - (start + ref)) <= RTOL * scale + 1e-300), (got, start + ref)


def values(rng: np.random.Generator, shape: tuple[int, ...], complex_: bool) -> np.ndarray:
    x = rng.standard_normal(shape)
    if complex_:
        x = x + 1j * rng.standard_normal(shape)
    return x


def run_case(
    rng: np.random.Generator,
    subs: Sequence[str],
    out_subs: str,
    extents: Mapping[str, int],
    *,
    n: int = 40,
    out_rows: int = 7,
    x_rows: int = 5,
    order: str = "sorted",
    complex_: bool = False,
) -> TermLeaf:
    """Build a TermLeaf for a random pattern, run it twice (new values each time) on a
    non-zero ``out``, and check both runs against :func:`reference`."""
    if order == "unique":
        o = rng.permutation(out_rows)[:n]
    else:
        o = rng.integers(0, out_rows, n) if out_rows else np.zeros(0, np.int64)
        if order == "sorted":
            o = np.sort(o)
    n = o.shape[0]
    idx = [rng.integers(0, x_rows, n) for _ in subs]
    leaf = TermLeaf(o, idx, subs, out_subs, out_rows, extents)
    out_shape = (out_rows, *(extents[c] for c in out_subs))
    out = values(rng, out_shape, complex_)
    for _ in range(2):
        v = values(rng, (n,), complex_)
        xs = [values(rng, (x_rows, *(extents[c] for c in s)), complex_) for s in subs]
        start = out.copy()
        leaf(out, v, xs)
        ref, mag = reference(out_shape, o, idx, subs, out_subs, extents, v, xs)
        assert_matches(out, ref, mag, start)
    return leaf


# -- the canonical shapes pick their kernels ----------------------------------------------

CANONICAL = [
    # (name, subs, out_subs, order, path)
    ("inner/SpAdd unique", [], "", "unique", "direct"),
    ("inner/SpAdd repeated", [], "", "sorted", "numba-segsum"),
    ("broadcast only", [], "l", "unsorted", "numba-segsum"),
    ("SpMV", [""], "", "sorted", "csr-spmv"),
    ("SpMV unsorted", [""], "", "unsorted", "csr-spmv"),
    ("SpMM", ["k"], "k", "sorted", "csr-spmm"),
    ("SpMM unsorted", ["k"], "k", "unsorted", "csr-spmm"),
    ("SpTTV-like", ["jk"], "jk", "sorted", "csr-spmm"),
    ("MTTKRP", ["l", "l"], "l", "sorted", "numba-mttkrp"),
    ("MTTKRP unsorted", ["l", "l"], "l", "unsorted", "numba-mttkrp"),
    ("SDDMM", ["j", "j"], "", "unique", "numba-sddmm"),
    ("SDDMM repeated", ["j", "j"], "", "unsorted", "numba-sddmm"),
    ("scalar pair", ["", ""], "", "sorted", "numba-mttkrp"),
    ("summed letter", ["j"], "", "sorted", "einsum"),
    ("transposed", ["kl"], "lk", "unsorted", "einsum"),
    ("two letters", ["jk", "kl"], "kl", "sorted", "einsum"),
    ("broadcast + operand", ["k"], "kl", "unsorted", "einsum"),
    ("three operands", ["l", "l", "l"], "l", "sorted", "einsum"),
    ("diagonal", ["jj", "jj"], "", "sorted", "einsum"),
]
EXTENTS = {"j": 3, "k": 4, "l": 5}


@pytest.mark.parametrize("complex_", [False, True], ids=["f64", "c128"])
@pytest.mark.parametrize(
    ("subs", "out_subs", "order", "path"),
    [c[1:] for c in CANONICAL],
    ids=[c[0] for c in CANONICAL],
)
def test_canonical_shapes(
    subs: list[str], out_subs: str, order: str, path: str, complex_: bool
) -> None:
    rng = np.random.default_rng(len(subs) * 7 + len(out_subs))
    leaf = run_case(rng, subs, out_subs, EXTENTS, order=order, complex_=complex_)
    assert leaf.path == path


@pytest.mark.parametrize(
    ("subs", "out_subs"), [c[1:3] for c in CANONICAL], ids=[c[0] for c in CANONICAL]
)
def test_empty(subs: list[str], out_subs: str) -> None:
    """No entries, no output rows, or a letter of extent 0: nothing changes, nothing fails."""
    rng = np.random.default_rng(1)
    run_case(rng, subs, out_subs, EXTENTS, n=0)
    run_case(rng, subs, out_subs, EXTENTS, n=0, out_rows=0)
    run_case(rng, subs, out_subs, EXTENTS, x_rows=1)
    for c in sorted(set(out_subs).union(*subs)):
        run_case(rng, subs, out_subs, {**EXTENTS, c: 0})


# -- random terms -------------------------------------------------------------------------


@st.composite
def terms(draw: st.DrawFn) -> tuple[list[str], str, dict[str, int]]:
    canonical = draw(st.booleans())
    if canonical:
        _, subs, out_subs, _, _ = draw(st.sampled_from(CANONICAL))
    else:
        word = st.text(alphabet="jkl", max_size=2)
        subs = draw(st.lists(word, max_size=3))
        out_subs = "".join(draw(st.permutations("jklm"))[: draw(st.integers(0, 3))])
    extents = {c: draw(st.integers(0, 3)) for c in "jklm"}
    return subs, out_subs, extents


@settings(max_examples=50, deadline=None)
@given(
    term=terms(),
    n=st.integers(0, 25),
    out_rows=st.integers(1, 6),
    x_rows=st.integers(1, 4),
    order=st.sampled_from(["sorted", "unsorted", "unique"]),
    complex_=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_terms(
    term: tuple[list[str], str, dict[str, int]],
    n: int,
    out_rows: int,
    x_rows: int,
    order: str,
    complex_: bool,
    seed: int,
) -> None:
    subs, out_subs, extents = term
    run_case(
        np.random.default_rng(seed),
        subs,
        out_subs,
        extents,
        n=n,
        out_rows=out_rows,
        x_rows=x_rows,
        order=order,
        complex_=complex_,
    )


@pytest.mark.parametrize("order", ["sorted", "unsorted"])
def test_einsum_chunks(monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """Chunks of a few entries, with output rows cut between chunks, sum like one chunk."""
    monkeypatch.setattr(sparse_leaf, "CHUNK_ENTRIES", 7)
    rng = np.random.default_rng(2)
    leaf = run_case(rng, ["jk", "kl"], "lm", EXTENTS | {"m": 2}, n=60, order=order)
    assert leaf.path == "einsum"
    assert len(leaf._chunks) == 9


def test_einsum_chunk_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide operand rows make the chunks shorter (the gathered rows stay bounded)."""
    monkeypatch.setattr(sparse_leaf, "CHUNK_ELEMENTS", 100)
    leaf = run_case(np.random.default_rng(3), ["jk"], "", EXTENTS, n=30)
    assert leaf.path == "einsum"
    assert len(leaf._chunks) == 4  # 12 elements per entry: 8 entries a chunk


# -- calls --------------------------------------------------------------------------------


@pytest.mark.parametrize(("subs", "out_subs"), [c[1:3] for c in CANONICAL[::2]])
def test_deterministic(subs: list[str], out_subs: str) -> None:
    """The same inputs give the same bits, call after call."""
    rng = np.random.default_rng(4)
    n, rows = 500, 20
    o = rng.integers(0, rows, n)
    idx = [rng.integers(0, 9, n) for _ in subs]
    leaf = TermLeaf(o, idx, subs, out_subs, rows, EXTENTS)
    v = rng.standard_normal(n)
    xs = [rng.standard_normal((9, *(EXTENTS[c] for c in s))) for s in subs]
    first = np.zeros((rows, *(EXTENTS[c] for c in out_subs)))
    leaf(first, v, xs)
    for _ in range(3):
        again = np.zeros_like(first)
        leaf(again, v, xs)
        assert again.tobytes() == first.tobytes()


@pytest.mark.parametrize(("subs", "out_subs"), [([""], ""), (["l", "l"], "l"), (["jk"], "kl")])
def test_strided_out_and_operands(subs: list[str], out_subs: str) -> None:
    """An ``out`` that is a view of a larger array is updated in place; operands that are
    views and values of another dtype work too."""
    rng = np.random.default_rng(5)
    n, rows = 30, 6
    o = rng.integers(0, rows, n)
    idx = [rng.integers(0, 4, n) for _ in subs]
    leaf = TermLeaf(o, idx, subs, out_subs, rows, EXTENTS)
    shape = (rows, *(EXTENTS[c] for c in out_subs))
    big = np.zeros((rows, 2 * int(np.prod(shape[1:])))).astype(complex)
    out = big[:, ::2].reshape(shape) if shape[1:] else big[:, 0]
    assert not out.flags.c_contiguous
    assert np.shares_memory(out, big)
    v = rng.standard_normal(n).astype(np.float32)
    xs = [rng.standard_normal((8, *(EXTENTS[c] for c in s)))[::2] for s in subs]
    leaf(out, v, xs)
    ref, mag = reference(shape, o, idx, subs, out_subs, EXTENTS, v.astype(float), xs)
    assert_matches(out, ref, mag, np.zeros(shape))


def test_errors() -> None:
    o = np.array([0, 1, 1])
    i = np.array([0, 2, 1])
    with pytest.raises(InputError, match="outside"):
        TermLeaf(o, [i], ["k"], "k", 1, EXTENTS)
    with pytest.raises(InputError, match="2 index arrays for 1 operands"):
        TermLeaf(o, [i, i], ["k"], "k", 2, EXTENTS)
    with pytest.raises(InputError, match="no extent"):
        TermLeaf(o, [i], ["q"], "", 2, EXTENTS)
    with pytest.raises(InputError, match="repeats"):
        TermLeaf(o, [i], ["k"], "kk", 2, EXTENTS)
    with pytest.raises(InputError, match="entries"):
        TermLeaf(o, [i[:2]], ["k"], "k", 2, EXTENTS)
    leaf = TermLeaf(o, [i], ["k"], "k", 2, EXTENTS)
    out, v = np.zeros((2, 4)), np.ones(3)
    with pytest.raises(InputError, match="rows"):
        leaf(out, v, [np.ones((2, 4))])
    with pytest.raises(InputError, match="shape"):
        leaf(out, v, [np.ones((3, 5))])
    with pytest.raises(InputError, match="out must have shape"):
        leaf(np.zeros((2, 5)), v, [np.ones((3, 4))])
    with pytest.raises(InputError, match="complex"):
        leaf(out, v * 1j, [np.ones((3, 4))])
    with pytest.raises(InputError, match="operands given"):
        leaf(out, v, [])
    with pytest.raises(InputError, match="float64, which out"):
        leaf(out.astype(np.int64), v, [np.ones((3, 4), np.int64)])


@pytest.mark.parametrize(("subs", "out_subs"), [c[1:3] for c in CANONICAL])
def test_integers(subs: list[str], out_subs: str) -> None:
    """Integer terms are exact (any numeric dtype works; numba specialises)."""
    rng = np.random.default_rng(7)
    n, rows = 50, 6
    o = rng.integers(0, rows, n)
    idx = [rng.integers(0, 4, n) for _ in subs]
    leaf = TermLeaf(o, idx, subs, out_subs, rows, EXTENTS)
    shape = (rows, *(EXTENTS[c] for c in out_subs))
    v = rng.integers(-9, 9, n)
    xs = [rng.integers(-9, 9, (4, *(EXTENTS[c] for c in s))) for s in subs]
    out = np.ones(shape, np.int64)
    leaf(out, v, xs)
    ref, _ = reference(shape, o, idx, subs, out_subs, EXTENTS, v, xs)
    np.testing.assert_array_equal(out, 1 + ref)


def test_numba_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without numba, the compiled paths say which extra to install; ``direct`` and
    ``einsum`` need no numba."""
    monkeypatch.setattr(sparse_leaf, "_JITTED", {})
    monkeypatch.setitem(sys.modules, "numba", None)
    o = np.array([0, 0, 1])
    leaf = TermLeaf(o, [o], [""], "", 2, {})
    with pytest.raises(InputError, match=r"numba: pip install 'distal\[sparse\]'"):
        leaf(np.zeros(2), np.ones(3), [np.ones(2)])
    with pytest.raises(InputError, match="numba"):
        TermLeaf(o, [], [], "", 3, {})(np.zeros(3), np.ones(3), [])  # numba-segsum
    out = np.zeros(3)
    TermLeaf(np.arange(3), [], [], "", 3, {})(out, np.ones(3), [])  # direct, a run
    TermLeaf(np.array([2, 0]), [], [], "", 3, {})(out, np.ones(2), [])  # direct, scattered
    out -= [1.0, 0.0, 1.0]
    TermLeaf(o, [o], ["j"], "", 3, {"j": 2})(out, np.ones(3), [np.ones((2, 2))])  # einsum
    assert out.tolist() == [5.0, 3.0, 1.0]


def test_import_needs_no_numba() -> None:
    code = (
        "import sys, distal, distal.kernels.sparse_leaf; "
        "assert 'numba' not in sys.modules and 'scipy' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_kernels_release_the_gil() -> None:
    """Two processors of the local runtime are two threads: the kernels must not hold the
    GIL (checked on the compiled dispatchers' options)."""
    run_case(np.random.default_rng(6), ["l", "l"], "l", EXTENTS)
    for name in sparse_leaf._KERNELS:
        jitted = sparse_leaf._jit(name)
        assert jitted.targetoptions["nogil"] is True
        assert jitted._cache.__class__.__name__ != "NullCache"  # cache=True


@pytest.mark.parametrize(
    ("rows", "consecutive"),
    [([2, 2, 3, 4, 4, 4, 5], True), ([0, 1, 1, 3, 4], False), ([6, 6, 6], True)],
    ids=["a row block", "a row missing", "one row"],
)
def test_spmv_over_consecutive_rows_is_csr_and_the_same_bits(rows: list[int], consecutive: bool):
    """Segments that are consecutive output rows take the CSR loop (no per-row index),
    with the same bits as the segment loop on the same entries; a gap keeps the latter."""
    rng = np.random.default_rng(5)
    o = np.array(rows)
    idx = [rng.integers(0, 5, len(o))]
    leaf = TermLeaf(o, idx, [""], "", 7, EXTENTS)
    assert leaf.path == "csr-spmv"
    assert (leaf._row0 is not None) == consecutive
    v, x = rng.standard_normal(len(o)), rng.standard_normal(5)
    out = rng.standard_normal(7)
    want = out.copy()
    seg = np.zeros(7)  # the segment loop's order: each row's entries in turn, then one add
    for r in sorted(set(rows)):
        a = 0.0
        for e in np.flatnonzero(o == r):
            a += v[e] * x[idx[0][e]]
        seg[r] = a
    want += seg
    leaf(out, v, [x])
    assert np.array_equal(out, want)


@pytest.mark.parametrize(
    ("rows", "out_rows", "covers"),
    [
        ([0, 0, 1, 2, 3, 3], 4, True),
        ([0, 1, 3], 4, True),
        ([1, 2, 3], 4, True),
        ([0, 1], 4, True),
        ([0, 9], 10, False),
        ([4, 4, 5], 12, False),
    ],
    ids=[
        "every row",
        "a row missing",
        "the first row missing",
        "the last rows missing",
        "most rows missing",
        "a block in the middle",
    ],
)
@pytest.mark.parametrize("width", [1, 5], ids=["spmv", "spmm"])
def test_spmv_covering_its_rows_stores_into_an_unzeroed_block(
    rows: list[int], out_rows: int, covers: bool, width: int
) -> None:
    """An SpMV's (or SpMM's) rows of ``out``, rows without entries included where they are
    at most half, are each written: given ``store`` it needs no zeroed ``out`` (here full
    of NaN) and gives the bits of adding into zeros, -0.0 rows included (``0.0 + -0.0`` is
    ``+0.0``), empty rows zeros. A leaf that does not cover ``out`` (mostly empty rows)
    says so, and one told to store all the same zeroes ``out`` first."""
    rng = np.random.default_rng(11)
    o = np.array(rows)
    idx = [rng.integers(0, 5, len(o))]
    subs, out_subs = ("", "") if width == 1 else ("l", "l")
    leaf = TermLeaf(o, idx, [subs], out_subs, out_rows, EXTENTS)
    assert leaf.path == ("csr-spmv" if width == 1 else "csr-spmm")
    shape = (out_rows,) if width == 1 else (out_rows, width)
    v, x = rng.standard_normal(len(o)), rng.standard_normal((5, *shape[1:]))
    v[o == o[-1]] = -0.0  # the last row's sums are -0.0
    assert leaf.covers(np.empty(shape)) == covers
    assert not leaf.covers(np.empty((out_rows + 1, *shape[1:])))
    want = np.zeros(shape)
    leaf(want, v, [x])
    assert np.signbit(want[o[-1]]).all() == np.signbit(0.0 + -0.0)
    out = np.full(shape, np.nan)
    leaf(out, v, [x], store=True)
    assert out.tobytes() == want.tobytes()
    # adding into a block leaves a row without entries as it was (-0.0 included)
    held = np.full(shape, -0.0)
    leaf(held, v, [x])
    empty = np.setdiff1d(np.arange(out_rows), o)
    assert np.signbit(held[empty]).all()


@pytest.mark.parametrize("width", [1, 3])
def test_a_direct_term_scatters_with_numpys_bits(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A term with no operands and distinct output rows (SpAdd's terms) adds each value
    into its row in one compiled loop: the bits of numpy's ``out[o] += v`` (its fallback),
    broadcast along the output's other letters."""
    rng = np.random.default_rng(11)
    o = rng.permutation(40)[:25]  # distinct, unsorted, not a run
    v = rng.standard_normal(25)
    out_subs, ext = ("", {}) if width == 1 else ("l", {"l": width})
    start = rng.standard_normal((40,) if width == 1 else (40, width))
    leaf = TermLeaf(o, [], [], out_subs, 40, ext)
    assert leaf.path == "direct"
    compiled = start.copy()
    leaf(compiled, v, [])
    monkeypatch.setattr(sparse_leaf, "_has_numba", lambda: False)
    fallback = start.copy()
    leaf(fallback, v, [])
    np.testing.assert_array_equal(compiled, fallback)
    want = start.copy()
    want[o] += v if width == 1 else v[:, None]
    np.testing.assert_allclose(compiled, want, rtol=1e-15)
