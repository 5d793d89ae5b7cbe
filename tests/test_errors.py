"""Bad input: each error class is raised where it belongs, naming the culprit.

``pytest.raises(dl.XError)`` also guarantees that nothing surfaces as a bare ``IndexError``,
``KeyError``, ``AssertionError`` (or any other non-distal exception): those would propagate
and fail the test.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import distal as dl
from reference import VarPool, assert_stats_equal, stats_fields

ERROR_CLASSES = ("NotationError", "ShapeError", "ScheduleError", "InputError", "RuntimeFailure")


def test_error_hierarchy() -> None:
    assert issubclass(dl.DistalError, Exception)
    for name in ERROR_CLASSES:
        cls = getattr(dl, name)
        assert issubclass(cls, dl.DistalError), name
        assert cls is not dl.DistalError


# ---------------------------------------------------------------------------------------------
# Distribution notation
# ---------------------------------------------------------------------------------------------


def make_and_use(dist: str | None, mshape: tuple[int, ...] | None, order: int = 2) -> None:
    """Create tensor ``Qmat`` with ``dist`` and use it as an input, all the way to a kernel,
    so an error counts whether it is raised eagerly or at compile time."""
    m = dl.Machine(*mshape) if mshape is not None else None
    q = dl.Tensor("Qmat", (3,) * order, dist=dist, machine=m)
    vs = dl.index_vars("p0 p1 p2 p3")[:order]
    out = dl.Tensor("Omat", (3,) * order)
    if order == 0:
        out[()] = q[()] * 2.0
    elif order == 1:
        out[vs[0]] = q[vs[0]] * 2.0
    else:
        out[vs] = q[vs] * 2.0
    dl.compile(dl.schedule(out)).stats()


BAD_DISTS = [
    # (dist, machine shape, order, culprit: the tensor or the offending token)
    ("x -> x*", (2, 2), 2, r"Qmat|\bx\b"),  # LHS shorter than the order
    ("xyz -> xy", (2, 2), 2, r"Qmat|xyz"),  # LHS longer than the order
    ("a b c -> a b", (2, 2), 2, r"Qmat|a b c"),
    ("xy -> xy0", (2, 2), 2, r"Qmat|xy0"),  # RHS longer than machine.ndim
    ("xy -> x", (2, 2), 2, r"Qmat|\bx\b"),  # RHS shorter than machine.ndim
    ("row col -> row col 0", (2, 2), 2, r"Qmat|row col 0"),
    ("xx -> x*", (2, 2), 2, r"Qmat|\bx\b|xx"),  # repeated LHS name
    ("row row -> row *", (2, 2), 2, r"Qmat|row"),
    ("x+ -> x", (2,), 2, r"Qmat|\+"),  # bad token
    ("xy -> x!", (2, 2), 2, r"Qmat|!"),
    ("xy xy", (2, 2), 2, r"Qmat|->|arrow"),  # missing arrow
    ("xy", (2, 2), 2, r"Qmat|->|arrow"),
    ("", (2, 2), 2, r"Qmat|->|arrow"),
    ("xy -> xy -> xy", (2, 2), 2, r"Qmat|->"),
    ("xy -> x2", (2, 2), 2, r"Qmat|\b2\b"),  # restriction out of range
    ("xy -> 4y", (4, 2), 2, r"Qmat|\b4\b"),
    ("a b -> a 7", (2, 3), 2, r"Qmat|\b7\b"),
    ("x -> -1", (2,), 1, r"Qmat|-1|-"),
    ("-> 0", (2, 2), 0, r"Qmat|0"),  # RHS length for an order-0 tensor
]


@pytest.mark.parametrize(("dist", "mshape", "order", "culprit"), BAD_DISTS)
def test_bad_distribution_string(
    dist: str, mshape: tuple[int, ...], order: int, culprit: str
) -> None:
    with pytest.raises(dl.NotationError, match=culprit):
        make_and_use(dist, mshape, order)


def test_good_distribution_strings_control() -> None:
    """The helper itself works on legal strings (so the failures above are about the dist)."""
    for dist, mshape, order in [
        ("xy -> xy", (2, 2), 2),
        ("row col -> row col 0", (2, 2, 2), 2),
        ("xy -> x1", (2, 2), 2),
        ("xy -> xx", (2, 2), 2),
        ("xy -> q*", (2, 2), 2),
        ("-> 0*", (2, 2), 0),
        ("x -> x", (3,), 1),
        (None, (2, 2), 2),
        (None, None, 2),
    ]:
        make_and_use(dist, mshape, order)


def test_dist_without_machine() -> None:
    with pytest.raises(dl.DistalError, match="Qmat"):
        make_and_use("xy -> xy", None, 2)


# ---------------------------------------------------------------------------------------------
# Shapes and expressions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 0), (-1, 2), (0,), (2, 2, -5)])
def test_non_positive_tensor_shape(shape: tuple[int, ...]) -> None:
    with pytest.raises(dl.ShapeError, match="Qmat"):
        dl.Tensor("Qmat", shape)


@pytest.mark.parametrize(("shape", "culprit"), [((0,), "0"), ((2, -1), "-1"), ((3, 0, 2), "0")])
def test_non_positive_machine_shape(shape: tuple[int, ...], culprit: str) -> None:
    with pytest.raises(dl.DistalError, match=culprit):
        dl.Machine(*shape)


def test_mismatched_extents_between_operands() -> None:
    rho, sig, tau = dl.index_vars("rho sig tau")
    A = dl.Tensor("Amat", (3, 4))
    B = dl.Tensor("Bmat", (3, 5))
    C = dl.Tensor("Cmat", (6, 4))
    with pytest.raises(dl.ShapeError, match=r"\btau\b"):
        A[rho, sig] = B[rho, tau] * C[tau, sig]


def test_mismatched_extents_with_output() -> None:
    rho, sig = dl.index_vars("rho sig")
    A = dl.Tensor("Amat", (3, 4))
    B = dl.Tensor("Bmat", (3, 5))
    with pytest.raises(dl.ShapeError, match=r"\bsig\b"):
        A[rho, sig] = B[rho, sig]


def test_mismatched_extents_across_terms() -> None:
    rho, sig = dl.index_vars("rho sig")
    A = dl.Tensor("Amat", (3, 4))
    B = dl.Tensor("Bmat", (3, 4))
    D = dl.Tensor("Dmat", (7, 4))
    with pytest.raises(dl.ShapeError, match=r"\brho\b"):
        A[rho, sig] = B[rho, sig] + D[rho, sig]


def test_wrong_number_of_indices_in_access() -> None:
    rho, sig, tau = dl.index_vars("rho sig tau")
    A = dl.Tensor("Amat", (3, 4))
    B = dl.Tensor("Bmat", (3, 4))
    s = dl.Tensor("sval", ())
    with pytest.raises(dl.NotationError, match="Bmat"):
        A[rho, sig] = B[rho] * 2.0
    with pytest.raises(dl.NotationError, match="Bmat"):
        A[rho, sig] = B[rho, sig, tau]
    with pytest.raises(dl.NotationError, match="Amat"):
        A[rho] = B[rho, sig]
    with pytest.raises(dl.NotationError, match="Amat"):
        A[rho, sig, tau] = B[rho, sig]
    with pytest.raises(dl.NotationError, match="sval"):
        A[rho, sig] = B[rho, sig] * s[rho]
    with pytest.raises(dl.NotationError, match="Bmat"):
        A[rho, sig] = B[()]


def test_shape_accessors() -> None:
    M = dl.Machine(2, 2)
    t = dl.Tensor("T", (3, 4), dist="xy -> xy", machine=M)
    assert t.name == "T"
    assert t.shape == (3, 4)
    assert t.ndim == 2
    assert np.dtype(t.dtype) == np.float64
    assert t.dist == "xy -> xy"
    assert t.machine is M
    z = dl.Tensor("z", ())
    assert z.shape == ()
    assert z.ndim == 0
    assert z.dist is None


# ---------------------------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def mm() -> SimpleNamespace:
    M = dl.Machine(2, 2)
    rho, sig, tau = dl.index_vars("rho sig tau")
    A = dl.Tensor("Amat", (4, 5), dist="xy -> xy", machine=M)
    B = dl.Tensor("Bmat", (4, 3), dist="xy -> xy", machine=M)
    C = dl.Tensor("Cmat", (3, 5), dist="xy -> xy", machine=M)
    A[rho, sig] = B[rho, tau] * C[tau, sig]
    Z = dl.Tensor("Zmat", (4, 5), dist="xy -> xy", machine=M)
    v = VarPool()
    v.update(rho=rho, sig=sig, tau=tau)
    return SimpleNamespace(M=M, A=A, B=B, C=C, Z=Z, v=v, s=dl.schedule(A))


def distributed(mm: SimpleNamespace):
    v = mm.v
    return mm.s.distribute(
        [v["rho"], v["sig"]], [v["prow"], v["pcol"]], [v["lrow"], v["lcol"]], mm.M
    )


def test_split_unknown_variable(mm: SimpleNamespace) -> None:
    v = mm.v
    with pytest.raises(dl.ScheduleError, match="zeta"):
        mm.s.split(v["zeta"], v["zo"], v["zi"], 2)
    with pytest.raises(dl.ScheduleError, match="zeta"):
        mm.s.divide(v["zeta"], v["zo"], v["zi"], 2)


def test_variable_no_longer_in_nest(mm: SimpleNamespace) -> None:
    v = mm.v
    s = mm.s.split(v["tau"], v["tauo"], v["taui"], 2)
    with pytest.raises(dl.ScheduleError, match=r"\btau\b"):
        s.divide(v["tau"], v["x1"], v["x2"], 2)
    with pytest.raises(dl.ScheduleError, match=r"\btau\b"):
        s.reorder([v["tau"], v["rho"]])
    with pytest.raises(dl.ScheduleError, match=r"\btau\b"):
        s.communicate(mm.B, v["tau"])
    with pytest.raises(dl.ScheduleError, match=r"\btau\b"):
        s.parallelize(v["tau"])


@pytest.mark.parametrize("amount", [0, -1, -3])
def test_non_positive_sizes(mm: SimpleNamespace, amount: int) -> None:
    v = mm.v
    culprit = rf"tau|{re.escape(str(amount))}|size|part|positive"
    with pytest.raises(dl.ScheduleError, match=culprit):
        mm.s.split(v["tau"], v["tauo"], v["taui"], amount)
    with pytest.raises(dl.ScheduleError, match=culprit):
        mm.s.divide(v["tau"], v["tauo"], v["taui"], amount)


def test_distribute_rank_mismatch(mm: SimpleNamespace) -> None:
    v = mm.v
    with pytest.raises(dl.ScheduleError):
        mm.s.distribute([v["rho"]], [v["prow"]], [v["lrow"]], mm.M)
    with pytest.raises(dl.ScheduleError):
        mm.s.distribute(
            [v["rho"], v["sig"]], [v["prow"], v["pcol"]], [v["lrow"], v["lcol"]], dl.Machine(2)
        )
    with pytest.raises(dl.ScheduleError):
        mm.s.distribute(
            [v["rho"], v["sig"], v["tau"]],
            [v["prow"], v["pcol"], v["pdep"]],
            [v["lrow"], v["lcol"], v["ldep"]],
            mm.M,
        )
    with pytest.raises(dl.ScheduleError):
        mm.s.distribute([v["rho"], v["sig"]], [v["prow"]], [v["lrow"], v["lcol"]], mm.M)


def test_distribute_bad_variables(mm: SimpleNamespace) -> None:
    v = mm.v
    with pytest.raises(dl.ScheduleError, match="zeta"):
        mm.s.distribute([v["rho"], v["zeta"]], [v["prow"], v["pcol"]], [v["lrow"], v["lcol"]], mm.M)
    with pytest.raises(dl.ScheduleError, match=r"\brho\b"):
        mm.s.distribute([v["rho"], v["rho"]], [v["prow"], v["pcol"]], [v["lrow"], v["lcol"]], mm.M)
    s = mm.s.split(v["rho"], v["rhoo"], v["rhoi"], 2)
    with pytest.raises(dl.ScheduleError, match=r"\brho\b"):
        s.distribute([v["rho"], v["tau"]], [v["q1"], v["q2"]], [v["q3"], v["q4"]], mm.M)


def test_new_variable_already_in_use(mm: SimpleNamespace) -> None:
    v = mm.v
    with pytest.raises(dl.ScheduleError, match=r"\brho\b"):
        mm.s.split(v["tau"], v["rho"], v["taui"], 2)
    with pytest.raises(dl.ScheduleError, match="tw"):
        mm.s.split(v["tau"], v["tw"], v["tw"], 2)


def test_reorder_errors(mm: SimpleNamespace) -> None:
    v = mm.v
    with pytest.raises(dl.ScheduleError, match="zeta"):
        mm.s.reorder([v["tau"], v["zeta"]])
    with pytest.raises(dl.ScheduleError, match=r"\btau\b"):
        mm.s.reorder([v["tau"], v["tau"], v["rho"]])


def test_rotate_errors(mm: SimpleNamespace) -> None:
    v = mm.v
    # no processor loops at all
    with pytest.raises(dl.ScheduleError, match=r"\brho\b"):
        mm.s.rotate(v["tau"], [v["rho"]], v["taur"])
    s = distributed(mm)
    # `by` is not a processor loop
    with pytest.raises(dl.ScheduleError, match="lrow"):
        s.rotate(v["tau"], [v["lrow"]], v["taur"])
    with pytest.raises(dl.ScheduleError, match="zeta"):
        s.rotate(v["tau"], [v["zeta"]], v["taur"])
    # unknown target
    with pytest.raises(dl.ScheduleError, match="zeta"):
        s.rotate(v["zeta"], [v["prow"]], v["taur"])
    # the target must be a serial loop below the processor loops
    with pytest.raises(dl.ScheduleError, match="prow"):
        s.rotate(v["prow"], [v["pcol"]], v["taur"])
    # legal control
    s.rotate(v["tau"], [v["prow"], v["pcol"]], v["taur"])


def test_communicate_errors(mm: SimpleNamespace) -> None:
    v = mm.v
    with pytest.raises(dl.ScheduleError, match="Zmat"):
        mm.s.communicate(mm.Z, v["tau"])
    with pytest.raises(dl.ScheduleError, match="Zmat"):
        mm.s.communicate([mm.B, mm.Z], v["tau"])
    with pytest.raises(dl.ScheduleError, match="zeta"):
        mm.s.communicate(mm.B, v["zeta"])


@pytest.mark.parametrize("command", ["split", "divide", "distribute", "rotate"])
def test_communicate_then_transform_that_loop(mm: SimpleNamespace, command: str) -> None:
    """Communicating at a loop and then replacing that loop must not crash: either a
    ScheduleError (naming the loop) or a kernel that computes the right answer."""
    v = mm.v
    if command == "rotate":
        s = distributed(mm).communicate(mm.B, v["tau"])
        make = lambda: s.rotate(v["tau"], [v["prow"]], v["taur"])  # noqa: E731
    elif command == "distribute":
        s = mm.s.communicate(mm.B, v["rho"])
        make = lambda: distributed(SimpleNamespace(M=mm.M, v=v, s=s))  # noqa: E731
    else:
        s = mm.s.communicate(mm.B, v["tau"])
        make = lambda: getattr(s, command)(v["tau"], v["tauo"], v["taui"], 2)  # noqa: E731
    try:
        kernel = dl.compile(make())
    except dl.ScheduleError as e:
        message = str(e)
    else:
        ins = good_inputs()
        res = kernel.run(ins)
        assert np.allclose(res.value, ins["Bmat"] @ ins["Cmat"], rtol=1e-10, atol=1e-10)
        assert_stats_equal(res.stats, kernel.stats())
        return
    assert re.search(r"tau|rho", message), message


def test_parallelize_unknown(mm: SimpleNamespace) -> None:
    with pytest.raises(dl.ScheduleError, match="zeta"):
        mm.s.parallelize(mm.v["zeta"])


def test_schedule_without_computation(mm: SimpleNamespace) -> None:
    lonely = dl.Tensor("Lonely", (3, 3))
    with pytest.raises(dl.DistalError, match="Lonely"):
        dl.schedule(lonely)
    with pytest.raises(dl.DistalError, match="Bmat"):
        dl.schedule(mm.B)


def test_schedule_commands_are_pure(mm: SimpleNamespace) -> None:
    v = mm.v
    s0 = mm.s
    r0 = repr(s0)
    k0 = dl.compile(s0)
    e0, st0 = k0.explain(), stats_fields(k0.stats())

    s1 = s0.split(v["tau"], v["tauo"], v["taui"], 2)
    assert s1 is not s0
    s2 = distributed(mm)
    assert s2 is not s0
    s3 = s2.communicate([mm.B, mm.C], v["prow"])
    assert s3 is not s2
    with pytest.raises(dl.ScheduleError):
        s0.split(v["zeta"], v["zo"], v["zi"], 2)

    assert repr(s0) == r0
    k0b = dl.compile(s0)
    assert k0b.explain() == e0
    assert stats_fields(k0b.stats()) == st0
    # the derived schedules differ from the original
    assert repr(s1) != r0
    assert stats_fields(dl.compile(s2).stats()) != st0
    # the original can still be extended differently (tau is still in its nest)
    s0.divide(v["tau"], v["t1"], v["t2"], 3)


# ---------------------------------------------------------------------------------------------
# Run inputs
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def kernel(mm: SimpleNamespace):
    return dl.compile(distributed(mm))


def good_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"Bmat": rng.standard_normal((4, 3)), "Cmat": rng.standard_normal((3, 5))}


def test_good_inputs_control(kernel) -> None:
    ins = good_inputs()
    res = kernel.run(ins)
    assert np.allclose(res.value, ins["Bmat"] @ ins["Cmat"], rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, kernel.stats())


def test_missing_input(kernel) -> None:
    ins = good_inputs()
    del ins["Cmat"]
    with pytest.raises(dl.InputError, match="Cmat"):
        kernel.run(ins)
    with pytest.raises(dl.InputError, match="Cmat"):
        kernel(**ins)


def test_extra_input(kernel) -> None:
    ins = good_inputs()
    ins["Zmat"] = np.zeros((4, 5))
    with pytest.raises(dl.InputError, match="Zmat"):
        kernel.run(ins)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((4, 4)),
        np.zeros((3, 4)),
        np.zeros(12),
        np.zeros((4, 3, 1)),
        np.zeros(()),
        np.full((4, 3), "x"),
        np.full((4, 3), "x", dtype=object),
        np.full((4, 3), None, dtype=object),
        "hello",
        None,
    ],
    ids=[
        "shape",
        "transposed",
        "flat",
        "extra-dim",
        "scalar",
        "str",
        "object",
        "none-obj",
        "string",
        "None",
    ],
)
def test_ill_formed_input(kernel, bad: object) -> None:
    ins: dict[str, object] = dict(good_inputs())
    ins["Bmat"] = bad
    with pytest.raises(dl.InputError, match="Bmat"):
        kernel.run(ins)


def test_unknown_runtime(kernel) -> None:
    with pytest.raises(dl.DistalError, match="nonesuch"):
        kernel.run(good_inputs(), runtime="nonesuch")


def test_inputs_are_converted(kernel) -> None:
    ins = good_inputs()
    b = np.arange(12).reshape(4, 3)  # int64
    c = ins["Cmat"].astype(np.float32)
    res = kernel.run({"Bmat": b, "Cmat": c})
    assert np.asarray(res.value).dtype == np.float64
    assert np.allclose(res.value, b.astype(np.float64) @ c.astype(np.float64), rtol=1e-10)


def test_order0_input_accepts_python_scalar() -> None:
    (i,) = dl.index_vars("i")
    y = dl.Tensor("y", (3,))
    x = dl.Tensor("x", (3,))
    a = dl.Tensor("alpha", ())
    y[i] = a[()] * x[i]
    k = dl.compile(dl.schedule(y))
    assert np.allclose(k.run({"alpha": 2.5, "x": np.arange(3.0)}).value, 2.5 * np.arange(3.0))
    assert np.allclose(
        k.run({"alpha": np.array(2.5), "x": np.arange(3.0)}).value, 2.5 * np.arange(3.0)
    )


# ---------------------------------------------------------------------------------------------
# Fuzzing: no user input ends in a non-distal exception
# ---------------------------------------------------------------------------------------------


@given(
    st.text(alphabet="xyab*01239 ->+!", max_size=12),
    st.sampled_from([(2, 2), (3,), (2, 1, 2)]),
    st.integers(0, 3),
)
def test_fuzz_distribution_strings(dist: str, mshape: tuple[int, ...], order: int) -> None:
    note(f"dist={dist!r} machine={mshape} order={order}")
    message = "ok"
    try:
        make_and_use(dist, mshape, order)
    except dl.DistalError as e:
        message = str(e)
    assert message, "error message is empty"


def check_message(e: Exception) -> None:
    assert str(e), f"{type(e).__name__} without a message"


_OLD = ["rho", "sig", "tau", "rho", "sig", "tau", "a1", "a2", "a3", "a4", "a5", "a6", "zeta"]
_OLD += ["p0", "p1", "l0", "l1"]
_NEW = ["a1", "a2", "a3", "a4", "a5", "a6", "a1", "a2", "a3", "a4", "a5", "a6", "rho"]


@st.composite
def fuzz_commands(draw) -> list[tuple]:
    """Commands mostly on plausible variables: many are legal, some are not."""
    cmds = []
    old, new = st.sampled_from(_OLD), st.sampled_from(_NEW)
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(
            st.sampled_from(
                ["split", "divide", "reorder", "distribute", "rotate", "communicate", "parallelize"]
            )
        )
        if kind in ("split", "divide"):
            cmds.append(
                (kind, draw(old), draw(new), draw(new), draw(st.sampled_from(range(-1, 4))))
            )
        elif kind == "reorder":
            cmds.append((kind, draw(st.lists(old, min_size=1, max_size=4))))
        elif kind == "distribute" and draw(st.booleans()):
            vs = draw(st.permutations(["rho", "sig", "tau"]))[:2]
            cmds.append((kind, vs, ["p0", "p1"], ["l0", "l1"]))
        elif kind == "distribute":
            n = draw(st.sampled_from([2, 2, 2, 1, 3]))
            cmds.append(
                (
                    kind,
                    draw(st.lists(old, min_size=n, max_size=n)),
                    draw(st.lists(new, min_size=n, max_size=n)),
                    draw(st.lists(new, min_size=n, max_size=n)),
                )
            )
        elif kind == "rotate":
            cmds.append((kind, draw(old), draw(st.lists(old, max_size=2)), draw(new)))
        elif kind == "communicate":
            cmds.append(
                (
                    kind,
                    draw(
                        st.lists(
                            st.sampled_from(["Amat", "Bmat", "Cmat", "Zmat", "Bmat", "Cmat"]),
                            min_size=1,
                            max_size=3,
                            unique=True,
                        )
                    ),
                    draw(old),
                )
            )
        else:
            cmds.append((kind, draw(old)))
    return cmds


@given(fuzz_commands())
def test_fuzz_schedule_commands(cmds: list[tuple]) -> None:
    """Each command either returns a schedule or raises a DistalError; whatever is accepted
    and compiles computes the right answer, with measured == predicted."""
    note(repr(cmds))
    M = dl.Machine(2, 2)
    rho, sig, tau = dl.index_vars("rho sig tau")
    T = {
        "Amat": dl.Tensor("Amat", (4, 5), dist="xy -> xy", machine=M),
        "Bmat": dl.Tensor("Bmat", (4, 3), dist="xy -> x*", machine=M),
        "Cmat": dl.Tensor("Cmat", (3, 5), dist="xy -> yx", machine=M),
        "Zmat": dl.Tensor("Zmat", (4, 5), dist="xy -> xy", machine=M),
    }
    T["Amat"][rho, sig] = T["Bmat"][rho, tau] * T["Cmat"][tau, sig]
    v = VarPool()
    v.update(rho=rho, sig=sig, tau=tau)
    s = dl.schedule(T["Amat"])
    for c in cmds:
        kind = c[0]
        try:
            if kind in ("split", "divide"):
                s = getattr(s, kind)(v[c[1]], v[c[2]], v[c[3]], c[4])
            elif kind == "reorder":
                s = s.reorder([v[x] for x in c[1]])
            elif kind == "distribute":
                s = s.distribute(
                    [v[x] for x in c[1]], [v[x] for x in c[2]], [v[x] for x in c[3]], M
                )
            elif kind == "rotate":
                s = s.rotate(v[c[1]], [v[x] for x in c[2]], v[c[3]])
            elif kind == "communicate":
                s = s.communicate([T[x] for x in c[1]], v[c[2]])
            else:
                s = s.parallelize(v[c[1]])
        except dl.DistalError as e:
            note(f"{kind} rejected: {e}")
            check_message(e)
    try:
        kernel = dl.compile(s)
    except dl.ScheduleError:
        return
    rng = np.random.default_rng(0)
    b, c = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    res = kernel.run({"Bmat": b, "Cmat": c})
    assert np.allclose(res.value, b @ c, rtol=1e-10, atol=1e-10)
    assert_stats_equal(res.stats, kernel.stats())
    assert sum(kernel.stats().iterations) == 4 * 5 * 3


@given(
    st.dictionaries(
        st.sampled_from(["Bmat", "Cmat", "Amat", "Zmat", ""]),
        st.one_of(
            st.tuples(st.integers(0, 5), st.integers(0, 5)).map(np.ones),
            st.integers(0, 5).map(np.ones),
            st.sampled_from([None, "s", 1.0, [[1.0]]]),
        ),
        max_size=4,
    )
)
def test_fuzz_run_inputs(inputs: dict) -> None:
    M = dl.Machine(2, 2)
    rho, sig, tau = dl.index_vars("rho sig tau")
    A = dl.Tensor("Amat", (4, 5), dist="xy -> xy", machine=M)
    B = dl.Tensor("Bmat", (4, 3), dist="xy -> xy", machine=M)
    C = dl.Tensor("Cmat", (3, 5), dist="xy -> xy", machine=M)
    A[rho, sig] = B[rho, tau] * C[tau, sig]
    kernel = dl.compile(dl.schedule(A))
    try:
        res = kernel.run(inputs)
    except dl.InputError as e:
        check_message(e)
        return
    b, c = np.asarray(inputs["Bmat"], float), np.asarray(inputs["Cmat"], float)
    assert np.allclose(res.value, b @ c)
