"""dl.einsum is numpy-compatible: every subscripts form numpy.einsum accepts gives its result."""

from __future__ import annotations

import numpy as np
import pytest

import distal as dl
from distal.errors import InputError

CASES = [
    ("ij,jk->ik", [(4, 5), (5, 3)]),
    ("ij,jk", [(4, 5), (5, 3)]),  # implicit output: "ik"
    ("ji,jk", [(5, 4), (5, 3)]),  # implicit output: "ik"
    ("ba", [(3, 4)]),  # implicit output is sorted: a transpose
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("i,i->", [(7,), (7,)]),
    ("i,i", [(7,), (7,)]),
    ("i,j->ij", [(3,), (5,)]),
    ("ijk,k->ij", [(3, 4, 5), (5,)]),
    ("ijk,jl,kl->il", [(3, 4, 5), (4, 2), (5, 2)]),
    ("ijk,lk->ijl", [(2, 3, 4), (5, 4)]),  # TTM
    ("ij,ij->", [(5, 3), (5, 3)]),
    ("i,->i", [(4,), ()]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("ij, jk -> ik", [(4, 5), (5, 3)]),  # spaces are allowed, as in numpy
]

MACHINES = [None, (2, 2), (3,), (2, 1, 2)]


@pytest.mark.parametrize("mshape", MACHINES, ids=lambda m: "default" if m is None else str(m))
@pytest.mark.parametrize(("subscripts", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_numpy(subscripts: str, shapes: list, mshape: tuple | None) -> None:
    rng = np.random.default_rng(len(subscripts))
    operands = [rng.standard_normal(s) for s in shapes]
    expected = np.einsum(subscripts, *operands)
    machine = None if mshape is None else dl.Machine(*mshape)
    got = dl.einsum(subscripts, *operands, machine=machine)
    assert isinstance(got, np.ndarray | np.generic)
    got = np.asarray(got)
    assert got.shape == np.shape(expected)
    assert np.allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_einsum_ragged_sizes_on_grid(rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 9))
    got = dl.einsum("ij,jk->ik", a, b, machine=dl.Machine(2, 2))
    assert np.allclose(got, a @ b, rtol=1e-10, atol=1e-10)


def test_einsum_converts_dtypes() -> None:
    a = np.arange(6).reshape(2, 3)
    b = np.arange(3, dtype=np.float32)
    got = dl.einsum("ij,j->i", a, b, machine=dl.Machine(2))
    assert np.allclose(got, a @ b.astype(np.float64))


@pytest.mark.parametrize(
    ("subscripts", "shapes"),
    [
        ("ij,jk->ik", [(4, 5), (6, 3)]),  # j disagrees
        ("ij,jk->ik", [(4, 5)]),  # too few operands
        ("ij->ik", [(4, 5)]),  # output index not in any input
        ("ijk->ij", [(4, 5)]),  # wrong number of subscripts for the operand
    ],
)
def test_einsum_errors(subscripts: str, shapes: list) -> None:
    operands = [np.ones(s) for s in shapes]
    with pytest.raises(dl.DistalError):
        dl.einsum(subscripts, *operands, machine=dl.Machine(2, 2))


@pytest.mark.parametrize("schedule", ["owner", "auto", None])
def test_einsum_schedules_agree(schedule) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 6))
    got = dl.einsum("ij,jk->ik", a, b, machine=dl.Machine(2, 2), schedule=schedule)
    np.testing.assert_allclose(got, a @ b, rtol=1e-10, atol=1e-10)


def test_einsum_unknown_schedule_names_it() -> None:
    with pytest.raises(dl.ScheduleError, match="'fastest'"):
        dl.einsum("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)), schedule="fastest")


# The contraction list of opt_einsum's own tests (opt_einsum 3.4.0,
# opt_einsum/tests/test_contract.py, the list ``tests``; subscript strings only). It
# covers scalars, broadcasting-like products, transposes, outer products, collapses,
# repeated labels within one operand and implicit outputs.
OPT_EINSUM_CONTRACTIONS = [
    "a,->a",
    "ab,->ab",
    ",ab,->ab",
    ",,->",
    "a,ab,abc->abc",
    "a,b,ab->ab",
    "ea,fb,gc,hd,abcd->efgh",
    "ea,fb,abcd,gc,hd->efgh",
    "abcd,ea,fb,gc,hd->efgh",
    "acdf,jbje,gihb,hfac,gfac,gifabc,hfac",
    "acdf,jbje,gihb,hfac,gfac,gifabc,hfac",
    "cd,bdhe,aidb,hgca,gc,hgibcd,hgac",
    "abhe,hidj,jgba,hiab,gab",
    "bde,cdh,agdb,hica,ibd,hgicd,hiac",
    "chd,bde,agbc,hiad,hgc,hgi,hiad",
    "chd,bde,agbc,hiad,bdi,cgh,agdb",
    "bdhe,acad,hiab,agac,hibd",
    "ab,ab,c->",
    "ab,ab,c->c",
    "ab,ab,cd,cd->",
    "ab,ab,cd,cd->ac",
    "ab,ab,cd,cd->cd",
    "ab,ab,cd,cd,ef,ef->",
    "ab,cd,ef->abcdef",
    "ab,cd,ef->acdf",
    "ab,cd,de->abcde",
    "ab,cd,de->be",
    "ab,bcd,cd->abcd",
    "ab,bcd,cd->abd",
    "eb,cb,fb->cef",
    "dd,fb,be,cdb->cef",
    "bca,cdb,dbf,afc->",
    "dcc,fce,ea,dbf->ab",
    "fdf,cdd,ccd,afe->ae",
    "abcd,ad",
    "ed,fcd,ff,bcf->be",
    "baa,dcf,af,cde->be",
    "bd,db,eac->ace",
    "fff,fae,bef,def->abd",
    "efc,dbc,acf,fd->abe",
    "ab,ab",
    "ab,ba",
    "abc,abc",
    "abc,bac",
    "abc,cba",
    "ab,bc",
    "ab,cb",
    "ba,bc",
    "ba,cb",
    "abcd,cd",
    "abcd,ab",
    "abcd,cdef",
    "abcd,cdef->feba",
    "abcd,efdc",
    "aab,bc->ac",
    "ab,bcc->ac",
    "aab,bcc->ac",
    "baa,bcc->ac",
    "aab,ccb->ac",
    "aab,fa,df,ecc->bde",
    "ecb,fef,bad,ed->ac",
    "bcf,bbb,fbf,fc->",
    "bb,ff,be->e",
    "bcb,bb,fc,fff->",
    "fbb,dfd,fc,fc->",
    "afd,ba,cc,dc->bf",
    "adb,bc,fa,cfc->d",
    "bbd,bda,fc,db->acf",
    "dba,ead,cad->bce",
    "aef,fbc,dca->bde",
]


def _random_operands(subscripts: str, seed: int) -> list[np.ndarray]:
    """Small random float64 operands, each label of extent 2 or 3."""
    rng = np.random.default_rng(seed)
    letters = sorted(set(subscripts) - set(",->"))
    ext = {c: int(rng.integers(2, 4)) for c in letters}
    specs = subscripts.split("->")[0].split(",")
    return [rng.standard_normal([ext[c] for c in spec]) for spec in specs]


def _check(subscripts, operands, machine, schedule=None) -> None:
    expected = np.einsum(subscripts, *operands)
    got = dl.einsum(subscripts, *operands, machine=machine, schedule=schedule)
    assert type(got) is type(expected)  # an array, or a numpy scalar for a 0-d result
    assert np.shape(got) == np.shape(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mshape", [None, (2, 2)], ids=["default", "2x2"])
@pytest.mark.parametrize(
    "subscripts",
    OPT_EINSUM_CONTRACTIONS,
    ids=[f"{n}:{s}" for n, s in enumerate(OPT_EINSUM_CONTRACTIONS)],
)
def test_opt_einsum_contractions(subscripts: str, mshape: tuple | None) -> None:
    operands = _random_operands(subscripts, len(subscripts))
    _check(subscripts, operands, None if mshape is None else dl.Machine(*mshape))


@pytest.mark.parametrize("subscripts", OPT_EINSUM_CONTRACTIONS[:9] + OPT_EINSUM_CONTRACTIONS[18:24])
def test_opt_einsum_contractions_on_a_line(subscripts: str) -> None:
    _check(subscripts, _random_operands(subscripts, 7), dl.Machine(3))


def _random_arrays(*shapes):
    rng = np.random.default_rng(sum(map(len, shapes)))
    return [rng.standard_normal(s) for s in shapes]


NUMPY_FORMS = [
    # ellipsis (numpy aligns its dimensions on the right and broadcasts size 1)
    ("...ij,...jk->...ik", [(5, 2, 3), (3, 4)]),
    ("...ij,...jk", [(1, 2, 3), (5, 3, 4)]),
    ("i...->...", [(3, 4, 5)]),
    ("...", [(3, 4)]),
    ("...,...", [(), (3,)]),
    ("ij...,j...->i...", [(2, 3, 1), (3, 4)]),
    ("...a,...a", [(2, 1, 3), (4, 3)]),
    ("i...j,j...", [(2, 5, 3), (3, 5)]),
    ("ab...,b", [(2, 3), (3,)]),
    ("i->...", [(4,)]),
    ("...->...", [()]),
    # implicit output: labels used once, sorted, A-Z before a-z
    ("ba", [(3, 4)]),
    ("Ba", [(3, 4)]),
    ("aB,Bc", [(2, 3), (3, 4)]),
    ("ii", [(3, 3)]),
    # a label repeated within one operand: diagonals and traces
    ("ii->i", [(3, 3)]),
    ("ii->", [(3, 3)]),
    ("iij->j", [(2, 2, 3)]),
    ("iij", [(2, 2, 3)]),
    ("ii,i", [(2, 2), (2,)]),
    ("iji->ij", [(3, 2, 3)]),
    # size-1 dimensions broadcast against longer ones, for any label
    ("ij,jk->ik", [(2, 1), (3, 4)]),
    ("ij,ij->ij", [(2, 1), (2, 3)]),
    ("a,a,a->a", [(1,), (3,), (1,)]),
    ("ii,i", [(2, 2), (1,)]),
    ("a...,a->...", [(3, 1), (3,)]),
    # scalars
    ("->", [()]),
    (",->", [(), ()]),
    (",i->i", [(), (4,)]),
    # zero extents: numpy's empty sums (0) and empty results
    ("ij,jk->ik", [(2, 0), (0, 3)]),
    ("i,i", [(0,), (0,)]),
    ("ij->i", [(0, 3)]),
    ("ij,j->ij", [(2, 1), (0,)]),
]


@pytest.mark.parametrize("mshape", [None, (2, 2), (3,)], ids=["default", "2x2", "3"])
@pytest.mark.parametrize(("subscripts", "shapes"), NUMPY_FORMS, ids=[f[0] for f in NUMPY_FORMS])
def test_numpy_forms(subscripts: str, shapes: list, mshape: tuple | None) -> None:
    _check(subscripts, _random_arrays(*shapes), None if mshape is None else dl.Machine(*mshape))


@pytest.mark.parametrize(("subscripts", "shapes"), NUMPY_FORMS, ids=[f[0] for f in NUMPY_FORMS])
def test_numpy_forms_owner_schedule(subscripts: str, shapes: list) -> None:
    _check(subscripts, _random_arrays(*shapes), dl.Machine(2, 2), schedule="owner")


def test_interleaved_sublists() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    for args in (
        (a, [0, 1], b, [1, 2], [0, 2]),
        (a, [0, 1], b, [1, 2]),  # implicit output
        (a, [1, 0]),  # implicit output sorted: a transpose
        (a, [0, 26]),  # 0..25 sort before 26..51, as in numpy
        (a, [Ellipsis, 1], [Ellipsis]),  # sum over the last axis
    ):
        expected = np.einsum(*args)
        got = dl.einsum(*args, machine=dl.Machine(2, 2))
        assert np.shape(got) == np.shape(expected)
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((".i", (2,)), dl.NotationError, "'.'"),
        (("i->j", (2,)), dl.NotationError, "'j'"),
        (("ii->ii", (2, 2)), dl.NotationError, "'i' repeats"),
        (("i->ii", (2,)), dl.NotationError, "'i' repeats"),
        (("...i->i", (2, 3)), dl.NotationError, r"'\.\.\.'"),
        (("i-j", (2,)), dl.NotationError, "'->'"),
        (("i,i", (2,), (3,)), dl.ShapeError, "'i'"),
        (("ij,jk->ik", (2, 3), (4, 5)), dl.ShapeError, "'j'"),
        (("ii", (2, 3)), dl.ShapeError, "'i' repeats in operand 0"),
        (("i1", (2, 2)), dl.NotationError, "'1'"),
        ((np.ones(2), [52]), dl.NotationError, "52"),
    ],
)
def test_what_numpy_refuses_is_a_clear_error(args, error, match) -> None:
    if isinstance(args[0], str):
        args = (args[0], *(np.ones(s) for s in args[1:]))
    with pytest.raises(Exception):  # noqa: B017, PT011 -- numpy refuses it too
        np.einsum(*args)
    with pytest.raises(error, match=match):
        dl.einsum(*args, machine=dl.Machine(2))


def _counted(monkeypatch: pytest.MonkeyPatch, name: str, cache: str) -> list[int]:
    """Calls of ``distal.cost.einsum_auto.<name>`` from now on (they still run), with the
    einsum cache ``cache`` emptied first."""
    from distal.cost import einsum_auto

    calls: list[int] = []
    real = getattr(einsum_auto, name)
    monkeypatch.setattr(einsum_auto, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(einsum_auto, cache, {})
    return calls


def test_a_repeated_einsum_searches_and_compiles_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop calling dl.einsum on arrays of the same shapes reuses the first call's kernel
    (the schedule search and the compile ran once); new values give numpy's answers, and
    another shape or dtype is a new kernel."""
    calls = _counted(monkeypatch, "search", "_KERNELS")
    rng = np.random.default_rng(3)
    m = dl.Machine(2)
    for _ in range(3):
        b, c = rng.random((6, 5, 4)), rng.random(4)
        np.testing.assert_allclose(
            dl.einsum("ijk,k->ij", b, c, machine=m), np.einsum("ijk,k->ij", b, c)
        )
    assert len(calls) == 1
    b32, c32 = b.astype(np.float32), c.astype(np.float32)
    got = dl.einsum("ijk,k->ij", b32, c32, machine=m)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.einsum("ijk,k->ij", b32, c32), rtol=1e-5)
    dl.einsum("ijk,k->ij", rng.random((7, 5, 4)), c, machine=m)
    assert len(calls) == 3


def test_a_repeated_three_operand_einsum_chooses_its_order_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The choice between one fused kernel and a pairwise order is kept with the kernels:
    a loop's later calls neither cost the fused kernel nor search the orders again."""
    calls = _counted(monkeypatch, "plan_pairs", "_PATHS")
    rng = np.random.default_rng(4)
    m = dl.Machine(2)
    for _ in range(3):
        b, c, d = rng.random((6, 5, 4)), rng.random((5, 3)), rng.random((4, 3))
        np.testing.assert_allclose(
            dl.einsum("ijk,jl,kl->il", b, c, d, machine=m),
            np.einsum("ijk,jl,kl->il", b, c, d),
            rtol=1e-12,
        )
    assert len(calls) == 1


def test_an_mttkrp_runs_as_one_khatri_rao_kernel() -> None:
    """The leaf runs a three-factor MTTKRP term as a Khatri-Rao product and one GEMM (two
    flops a point, not three), so the model prices the fused kernel below the pairwise
    order, which writes and reads an ``ikl`` intermediate as large as the result x J."""
    from distal.cost import einsum_auto
    from distal.costmodel.seconds import flops_per_iteration
    from distal.kernels.leaf import flops_per_point
    from distal.lang.concrete import concretize

    assert flops_per_point("ijk,jl,kl->il") == 2
    assert flops_per_point("ij,jk,kl->il") == 3  # a chain: no Khatri-Rao form
    assert flops_per_point("ik,kj->ij") == 2
    i, j, k, r = (dl.IndexVar(c) for c in "ijkr")
    B, C, D = dl.Tensor("B", (8, 6, 5)), dl.Tensor("C", (6, 4)), dl.Tensor("D", (5, 4))
    A = dl.Tensor("A", (8, 4))
    A[i, r] = B[i, j, k] * C[j, r] * D[k, r]
    assert flops_per_iteration(concretize(A.assignment)) == 2
    sB = dl.Tensor("S", (8, 6, 5), format="csf")
    A[i, r] = sB[i, j, k] * C[j, r] * D[k, r]
    assert flops_per_iteration(concretize(A.assignment)) == 3  # the leaf visits stored entries
    ext = {"i": 512, "j": 512, "k": 512, "l": 32}
    ins = ["ijk", "jl", "kl"]
    ops = [einsum_auto.Operand(s, tuple(ext[c] for c in s), np.dtype(np.float64)) for s in ins]
    params = einsum_auto.load_params()
    fused = einsum_auto._kernel_seconds(ops, "il", ext, dl.Machine(2), params)
    paired, _ = einsum_auto.plan_pairs(ins, "il", ext, dl.Machine(2), params)
    assert fused <= paired


def test_a_sparse_operand_is_named_not_read_as_an_object_array() -> None:
    """np.asarray of a scipy matrix is a 0-d object array: dl.einsum names the sparse
    operand and what to do instead, rather than a confusing dtype error."""
    sp = pytest.importorskip("scipy.sparse")
    a = sp.random(6, 6, density=0.5, format="csr", random_state=0)
    x = np.ones(6)
    for operand in (a, dl.SparseArray.from_scipy(a)):
        with pytest.raises(InputError, match=r"einsum operand 0 is a sparse array .*toarray"):
            dl.einsum("ij,j->i", operand, x)
    np.testing.assert_allclose(dl.einsum("ij,j->i", a.toarray(), x), a @ x)
