"""What a sparse kernel refuses, and that each refusal names the culprit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from patterns import uniform
from sparse_oracle import spmv_kernel

import distal as dl
from distal.errors import DistalError, InputError, NotationError, ScheduleError

N = 30


@pytest.fixture
def B() -> sp.csr_array:
    return uniform(N, density=0.1, seed=1)


def spmv_parts(b_format="csr", b_dist="xy -> x", P=3):
    M = dl.Machine(P)
    i, j = dl.index_vars("i j")
    Bt = dl.Tensor("B", (N, N), format=b_format, dist=b_dist, machine=M)
    c = dl.Tensor("c", (N,), dist="x -> x", machine=M)
    a = dl.Tensor("a", (N,), dist="x -> x", machine=M)
    a[i] = Bt[i, j] * c[j]
    return M, i, j, Bt, c, a


@pytest.mark.parametrize("split", ["row", "nz"])
def test_stats_without_inputs_names_the_sparse_input(split):
    k = spmv_kernel(N, N, 3, split)
    with pytest.raises(InputError, match=r"'B'") as e:
        k.stats()
    assert "pattern" in str(e.value)


def with_entries(B: sp.csr_array, rows, cols, vals) -> sp.csr_array:
    """``B``'s entries, the ones at ``(rows, cols)`` dropped, plus the given ones."""
    coo = sp.coo_array(B)
    drop = set(zip(rows[: len(rows) - len(vals)], cols[: len(cols) - len(vals)], strict=True))
    keep = [(r, c) not in drop for r, c in zip(coo.row, coo.col, strict=True)]
    r = np.r_[coo.row[keep], rows[len(rows) - len(vals) :]]
    c = np.r_[coo.col[keep], cols[len(cols) - len(vals) :]]
    out = sp.csr_array((np.r_[coo.data[keep], vals], (r, c)), shape=B.shape)
    out.sort_indices()
    return out


def test_changed_pattern_on_a_bound_kernel(B):
    k = spmv_kernel(N, N, 3, "nz")
    bound = k.bind({"B": B})
    x = np.ones(N)
    bound.run({"B": B, "c": x})  # the bound pattern runs
    dense = B.toarray() != 0
    r0 = int(np.flatnonzero(dense.any(axis=1))[0])
    c_in = int(np.flatnonzero(dense[r0])[0])
    c_out = int(np.flatnonzero(~dense[r0])[0])
    more = with_entries(B, [r0], [c_out], [2.0])  # one entry more
    assert more.nnz == B.nnz + 1
    elsewhere = with_entries(B, [r0, r0], [c_in, c_out], [3.0])  # same count, moved
    assert elsewhere.nnz == B.nnz
    for other in (more, elsewhere):
        with pytest.raises(InputError, match=r"'B'.*pattern"):
            bound.run({"B": other, "c": x})
        # the kernel itself binds again: a new plan for the new pattern
        r = k.run({"B": other, "c": x})
        np.testing.assert_allclose(r.value, other @ x, rtol=1e-12, atol=1e-12 * N)
        assert r.stats == k.stats({"B": other})


def test_pos_on_a_dense_tensor_names_it():
    _M, i, j, _Bt, c, a = spmv_parts()
    f, fp = dl.index_vars("f fp")
    with pytest.raises(ScheduleError, match=r"'c'.*dense"):
        dl.schedule(a).pos(j, fp, c)
    with pytest.raises(ScheduleError, match=r"'a'"):
        dl.schedule(a).fuse(i, j, f).pos(f, fp, a)


def test_pos_over_variables_not_a_prefix_of_the_storage_order():
    _, i, j, Bt, _, a = spmv_parts()
    (fp,) = dl.index_vars("fp")
    with pytest.raises(ScheduleError, match=r"prefix.*'B'"):
        dl.schedule(a).pos(j, fp, Bt)  # csr stores i before j
    # csc stores j first: pos over i is the one refused there
    _M, i, j, Bt, _c, a = spmv_parts(b_format="csc", b_dist="xy -> y")
    with pytest.raises(ScheduleError, match=r"prefix.*'B'"):
        dl.schedule(a).pos(i, fp, Bt)
    dl.schedule(a).reorder([j, i]).pos(j, fp, Bt)  # accepted


@pytest.mark.parametrize("fmt", ["csx", "dq", "ds", "dense3", 7])
def test_bad_format(fmt):
    with pytest.raises(NotationError, match=r"'B'"):
        dl.Tensor("B", (N, N), format=fmt, dist="xy -> x", machine=dl.Machine(2))


@pytest.mark.parametrize(
    "dist",
    ["xy -> ()", "xy -> (xz)", "xy -> (xx)", "xy -> (xy", "xy -> xy)"],
)
def test_bad_group_in_a_distribution(dist):
    with pytest.raises(NotationError, match=r"'B'"):
        spmv_kernel_with_b_dist(dist)


def test_group_that_is_not_a_storage_prefix():
    """``(y)`` on csr is a valid group of the notation but not a prefix of the storage
    order (rows first): refused when compiled, naming the tensor."""
    with pytest.raises(NotationError, match=r"\(y\).*'B'.*prefix"):
        spmv_kernel_with_b_dist("xy -> (y)")


def spmv_kernel_with_b_dist(dist: str):
    M, i, _j, Bt, c, a = spmv_parts(b_dist=dist)
    io, ii = dl.index_vars("io ii")
    s = dl.schedule(a).distribute([i], [io], [ii], M).communicate([a, Bt, c], io)
    return dl.compile(s)


def test_missing_sparse_input(B):
    k = spmv_kernel(N, N, 3, "row")
    for call in (k.run, k.stats, k.bind):
        with pytest.raises(InputError, match=r"'B'.*missing"):
            call({"c": np.ones(N)})
    bound = k.bind({"B": B})
    with pytest.raises(InputError, match=r"'B'.*missing"):
        bound.run({"c": np.ones(N)})
    with pytest.raises(InputError, match=r"'c'.*missing"):
        bound.run({"B": B})


@pytest.mark.parametrize(
    "bad",
    [
        sp.random(N, N + 1, density=0.1, random_state=1, format="csr"),
        sp.random(N - 1, N, density=0.1, random_state=1, format="csr"),
        np.ones((N, 2 * N)),
        np.ones((N, N, 1)),
    ],
    ids=["scipy-cols", "scipy-rows", "dense", "dense-3d"],
)
def test_wrong_shape_of_a_sparse_input_names_it(bad):
    k = spmv_kernel(N, N, 3, "nz")
    for call in (k.stats, k.bind, lambda x: k.run({**x, "c": np.ones(N)})):
        with pytest.raises(DistalError, match=r"'B'"):
            call({"B": bad})


def test_wrong_shape_of_a_dense_input_on_a_bound_kernel(B):
    bound = spmv_kernel(N, N, 3, "nz").bind({"B": B})
    with pytest.raises(InputError, match=r"'c'.*shape"):
        bound.run({"B": B, "c": np.ones(N + 1)})


def test_unknown_input_name(B):
    bound = spmv_kernel(N, N, 3, "nz").bind({"B": B})
    with pytest.raises(InputError, match=r"'a'.*output"):
        bound.run({"B": B, "c": np.ones(N), "a": np.ones(N)})
    with pytest.raises(InputError, match=r"'Z'"):
        bound.run({"B": B, "c": np.ones(N), "Z": np.ones(N)})


def test_a_tensor_read_through_two_accesses_is_refused():
    """The plan serves one access per tensor: ``c(j) * c(i)`` or ``B(i,j) * B(j,i)`` would
    read the second access at the first one's coordinates, so they are refused by name
    (the same access twice, ``c(j) * c(j)``, is fine)."""
    M, i, j, Bt, c, a = spmv_parts()
    io, ii = dl.index_vars("io ii")

    def compile_(rhs):
        a[i] = rhs
        return dl.compile(dl.schedule(a).distribute([i], [io], [ii], M))

    with pytest.raises(dl.NotSupportedYet, match=r"'c' is read as c\(j\) and as c\(i\)"):
        compile_(Bt[i, j] * c[j] * c[i])
    with pytest.raises(dl.NotSupportedYet, match=r"'c'"):
        compile_(Bt[i, j] * c[j] + Bt[i, j] * c[i])
    with pytest.raises(dl.NotSupportedYet, match=r"'B' is read as B\(i,j\) and as B\(j,i\)"):
        compile_(Bt[i, j] * Bt[j, i] * c[j])
    B = uniform(N, density=0.1, seed=2)
    x = np.random.default_rng(0).standard_normal(N)
    r = compile_(Bt[i, j] * c[j] * c[j]).run({"B": B, "c": x})
    np.testing.assert_allclose(r.value, B @ (x * x), rtol=1e-12, atol=1e-12 * N)
    r = compile_(Bt[i, j] * Bt[i, j] * c[j]).run({"B": B, "c": x})
    np.testing.assert_allclose(r.value, B.multiply(B) @ x, rtol=1e-12, atol=1e-12 * N)


def test_what_the_lowering_does_not_do_is_named():
    """Valid requests outside the sparse lowering raise NotSupportedYet naming the case."""
    M, i, j, Bt, c, a = spmv_parts()
    io, ii, f, fp, fo, fi = dl.index_vars("io ii f fp fo fi")
    # a communicate inside the distributed loops
    s = dl.schedule(a).fuse(i, j, f).pos(f, fp, Bt).distribute([fp], [fo], [fi], M)
    with pytest.raises(dl.NotSupportedYet, match=r"communicate\(c, fi\)"):
        dl.compile(s.communicate(c, fi))
    # a term without a sparse factor
    d = dl.Tensor("d", (N,), dist="x -> x", machine=M)
    a[i] = Bt[i, j] * c[j] + d[i]
    with pytest.raises(dl.NotSupportedYet, match=r"no sparse factor"):
        dl.compile(dl.schedule(a).distribute([i], [io], [ii], M))
    # sparse operands over different variables
    v = dl.Tensor("v", (N,), format="csf", dist="x -> x", machine=M)
    a[i] = Bt[i, j] * v[j]
    with pytest.raises(dl.NotSupportedYet, match=r"B: \['i', 'j'\].*v: \['j'\]"):
        dl.compile(dl.schedule(a).distribute([i], [io], [ii], M))
    # a non-zero cut of a dense tensor
    c2 = dl.Tensor("c", (N,), dist="x -> (x)", machine=M)
    a[i] = Bt[i, j] * c2[j]
    with pytest.raises(dl.NotSupportedYet, match=r"dense tensor 'c'"):
        dl.compile(dl.schedule(a).distribute([i], [io], [ii], M))
    # per-level distributions of a hierarchical machine (its flat grid is supported:
    # tests/test_one_plan.py)
    H = dl.Machine(2).nest(dl.Machine(2))
    Bh = dl.Tensor("B", (N, N), format="csr", dist=["xy -> x", "xy -> x"], machine=H)
    ch = dl.Tensor("c", (N,), dist=["x -> x", "x -> x"], machine=H)
    ah = dl.Tensor("a", (N,), dist=["x -> x", "x -> x"], machine=H)
    ah[i] = Bh[i, j] * ch[j]
    iio, iii = dl.index_vars("iio iii")
    sh = dl.schedule(ah).distribute([i], [io], [ii], H.level(0))
    sh = sh.distribute([ii], [iio], [iii], H.level(1))
    with pytest.raises(dl.NotSupportedYet, match=r"has one distribution per machine level"):
        dl.compile(sh)


def test_inputs_must_be_a_mapping(B):
    k = spmv_kernel(N, N, 3, "row")
    for call in (k.stats, k.bind, k.run):
        with pytest.raises(InputError, match=r"map tensor names"):
            call([B, np.ones(N)])
