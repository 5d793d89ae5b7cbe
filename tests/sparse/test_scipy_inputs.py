"""A scipy matrix given to every run of a sparse kernel is read without copying what it
holds: its pattern is recognised (the same index arrays, compared or hashed; trusted
only where the caller made them read-only), its values are read in place, and it is
left as the caller gave it."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal.errors import InputError

sp = pytest.importorskip("scipy.sparse")


def _kernel(n: int) -> dl.Kernel:
    return dl.compile(dl.algorithms.spmv((n, n), machine=dl.Machine(2)).schedule)


def _matrix(n: int, seed: int) -> object:
    return sp.random(n, n, density=0.1, format="csr", random_state=seed)


def test_values_changed_in_place_are_read_by_the_next_run() -> None:
    n = 40
    a, x = _matrix(n, 0), np.random.default_rng(0).standard_normal(n)
    kernel = _kernel(n)
    first = kernel.run({"B": a, "c": x}).value
    np.testing.assert_allclose(first, a @ x, rtol=1e-12)
    a.data *= -3.0  # the same arrays, new values
    second = kernel.run({"B": a, "c": x}).value
    np.testing.assert_allclose(second, a @ x, rtol=1e-12)
    np.testing.assert_allclose(second, -3.0 * first, rtol=1e-12)
    bound = kernel.bind({"B": a, "c": x})
    a.data += 1.0
    np.testing.assert_allclose(bound.run({"B": a, "c": x}).value, a @ x, rtol=1e-12)


def test_indices_changed_in_place_are_a_changed_pattern() -> None:
    n = 40
    a, x = _matrix(n, 1), np.random.default_rng(1).standard_normal(n)
    bound = _kernel(n).bind({"B": a, "c": x})
    np.testing.assert_allclose(bound.run({"B": a, "c": x}).value, a @ x, rtol=1e-12)
    row = int(np.flatnonzero(np.diff(a.indptr) == 1)[0])  # a row with one entry
    k = a.indptr[row]
    a.indices[k] = (a.indices[k] + 1) % n  # the same objects, another pattern
    with pytest.raises(InputError, match="another pattern"):
        bound.run({"B": a, "c": x})


def test_the_callers_matrix_stays_writable_and_unchanged() -> None:
    n = 30
    a, x = _matrix(n, 2), np.random.default_rng(2).standard_normal(n)
    keep = a.copy()
    _kernel(n).run({"B": a, "c": x})
    for arr in (a.data, a.indices, a.indptr):
        assert arr.flags.writeable
    assert (a != keep).nnz == 0
    np.testing.assert_array_equal(a.indices, keep.indices)


def test_a_copy_of_the_matrix_binds_to_the_same_pattern() -> None:
    n = 30
    a, x = _matrix(n, 3), np.random.default_rng(3).standard_normal(n)
    kernel = _kernel(n)
    bound = kernel.bind({"B": a, "c": x})
    assert kernel.bind({"B": a.copy(), "c": x}) is bound  # other arrays, equal pattern


@pytest.mark.parametrize("where", ["first half", "second half"])
def test_a_change_in_either_half_of_a_large_matrix_is_seen(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large matrix's index arrays are hashed in two halves side by side: an index changed
    in place in either half is still another pattern."""
    import distal.sparse.array as arr

    monkeypatch.setattr(arr, "PARALLEL_DIGEST_BYTES", 64)  # this small matrix is "large"
    n = 64
    rng = np.random.default_rng(4)
    # one entry a row: moving an entry to another column keeps the rows sorted
    a = sp.csr_matrix((rng.standard_normal(n), (np.arange(n), rng.permutation(n))), (n, n))
    x = rng.standard_normal(n)
    assert a.indices.nbytes >= 2 * arr.PARALLEL_DIGEST_BYTES
    bound = _kernel(n).bind({"B": a, "c": x})
    np.testing.assert_allclose(bound.run({"B": a, "c": x}).value, a @ x, rtol=1e-12)
    k = n // 4 if where == "first half" else 3 * n // 4
    a.indices[k] = (a.indices[k] + 1) % n
    with pytest.raises(InputError, match="another pattern"):
        bound.run({"B": a, "c": x})


@pytest.mark.parametrize("band", [False, True])
def test_an_spmv_streams_the_callers_own_column_indices(
    band: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a scipy matrix with 32-bit indices and the vector whole, an SpMV's leaves
    stream the matrix's own ``indices`` over the whole vector instead of their copy over
    their buffer -- whether the processors gather scattered rows of the vector or read one
    run of them (a band) -- with the same bits as from distal's own array."""
    from distal.kernels import sparse_leaf

    used: list[bool] = []
    orig = sparse_leaf.TermLeaf._own_crd

    def spy(self: object, crd: np.ndarray, lo: int = 0) -> object:
        got = orig(self, crd, lo)  # type: ignore[arg-type]
        used.append(got is not None)
        return got

    monkeypatch.setattr(sparse_leaf.TermLeaf, "_own_crd", spy)
    n = 300
    a = sp.random(n, n, density=0.004, format="csr", random_state=5)  # scattered columns
    if band:  # each processor reads one run of the vector's rows (a box)
        a = sp.diags([1.0, -2.0, 1.5], [-1, 0, 2], shape=(n, n), format="csr")
    assert a.indices.dtype == np.int32
    x = np.random.default_rng(5).standard_normal(n)
    bound = _kernel(n).bind({"B": a, "c": x})
    got = bound.run({"B": a, "c": x}).value
    assert used, "the leaves were not offered the caller's indices"
    assert all(used)
    mine = bound.run({"B": dl.SparseArray.from_scipy(a), "c": x}).value
    np.testing.assert_array_equal(got, mine)
    np.testing.assert_allclose(got, a @ x, rtol=1e-12)


def test_a_leaf_refuses_indices_that_are_not_its_own() -> None:
    """The leaf compares the caller's indices with its copy on first use: others (here
    shifted by one column) are never streamed in their place."""
    from distal.kernels.sparse_leaf import TermLeaf

    o = np.repeat(np.arange(4), 2)
    cols = np.array([0, 1, 1, 2, 2, 3, 0, 3])
    leaf = TermLeaf(o, [cols], [""], "", 4, {})
    assert leaf._own_crd(cols.astype(np.int32)) is not None
    assert leaf._own_crd((cols + 5).astype(np.int32), 5) is not None  # a box from row 5
    other = TermLeaf(o, [cols], [""], "", 4, {})
    assert other._own_crd(((cols + 1) % 4).astype(np.int32)) is None
    assert other._own_crd(cols.astype(np.int32)) is None  # refused once: refused for good
    assert other._own_crd((cols + 1).astype(np.int32), 0) is None  # off by one row


def test_read_only_index_arrays_are_trusted_without_a_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Index arrays the caller made read-only are taken to keep their pattern: the runs
    after the first hash nothing (writeable ones are hashed every run). Made writeable
    again, they are hashed again, and a pattern changed meanwhile is refused."""
    import distal.sparse.array as arr

    digests: list[int] = []
    real = arr._index_digest
    monkeypatch.setattr(arr, "_index_digest", lambda m: digests.append(1) or real(m))
    n = 40
    a, x = _matrix(n, 5), np.random.default_rng(5).standard_normal(n)
    a.indices.flags.writeable = False
    a.indptr.flags.writeable = False
    bound = _kernel(n).bind({"B": a, "c": x})
    for _ in range(3):
        x = np.random.default_rng(len(digests)).standard_normal(n)
        np.testing.assert_allclose(bound.run({"B": a, "c": x}).value, a @ x, rtol=1e-12)
    assert digests == []
    a.data *= 2.0  # values are read in place as ever
    np.testing.assert_allclose(bound.run({"B": a, "c": x}).value, a @ x, rtol=1e-12)
    a.indices.flags.writeable = True  # the caller takes its word back
    np.testing.assert_allclose(bound.run({"B": a, "c": x}).value, a @ x, rtol=1e-12)
    assert digests  # hashed again
    row = int(np.flatnonzero(np.diff(a.indptr) == 1)[0])
    k = a.indptr[row]
    a.indices[k] = (a.indices[k] + 1) % n
    with pytest.raises(InputError, match="another pattern"):
        bound.run({"B": a, "c": x})
    writable, x = _matrix(n, 6), np.random.default_rng(6).standard_normal(n)
    bound = _kernel(n).bind({"B": writable, "c": x})
    digests.clear()
    bound.run({"B": writable, "c": x})
    assert digests  # a writeable matrix: hashed on every run
