"""One plan for dense and sparse kernels: one IR, one interface, one counting rule.

* Dense plans and plans bound to sparse patterns are the same ``Plan`` type, counted by the
  same sinks: the engine's streaming stats of a dense plan equal
  :func:`~distal.plan.sinks.count_plan` of its enumerated plan, field for field (peak
  memory and machine levels included), so the memory model the bound plans are counted by
  is the dense one.
* An unbound sparse kernel refuses everything that reads a plan, naming its sparse inputs;
  bound, every method works and they agree with each other and with the local runtime.
* A processor number out of range is one ``InputError`` everywhere, before or after the
  plan is built.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distal as dl
from distal.errors import InputError, ScheduleError
from distal.plan.ir import Plan
from distal.plan.sinks import count_plan

A = dl.algorithms


def _dense_kernels() -> list[tuple[str, dl.Kernel]]:
    m22, m32, m222 = dl.Machine(2, 2), dl.Machine(3, 2), dl.Machine(2, 2, 2)
    out = []
    for routing in ("direct", "broadcast", "tree"):
        for name, alg in [
            ("summa", A.summa(30, machine=m32)),
            ("cannon", A.cannon(24, machine=m22)),
            ("pumma", A.pumma(20, machine=m22)),
            ("johnson", A.johnson_3d(12, machine=m222)),
            ("ttv", A.ttv((9, 7, 5), machine=dl.Machine(3))),
            ("mttkrp", A.mttkrp((8, 6, 5), 3, machine=m222)),
        ]:
            out.append((f"{name}-{routing}", dl.compile(alg.compile().schedule, routing=routing)))
    return out


_DENSE = _dense_kernels()


@pytest.mark.parametrize(("name", "kernel"), _DENSE, ids=[n for n, _ in _DENSE])
def test_count_plan_equals_the_engine_on_dense_plans(name: str, kernel: dl.Kernel) -> None:
    engine = kernel.stats().as_dict()
    counted = count_plan(kernel.plan).stats.as_dict()
    assert counted == engine, name


def _spmv(split: str, P: int = 4):
    B = sp.random(60, 50, density=0.1, format="csr", random_state=3)
    k = A.spmv(B.shape, dl.Machine(P), split=split).compile()
    return k, B


@pytest.mark.parametrize(
    "what",
    ["summary", "plan", "program", "explain", "stats", "simulate", "plot_traffic"],
)
def test_unbound_sparse_kernel_refuses_what_reads_a_plan(what: str) -> None:
    k, _ = _spmv("rows")
    calls = {
        "summary": lambda: k.summary,
        "plan": lambda: k.plan,
        "program": lambda: k.program(0),
    }
    call = calls[what] if what in calls else getattr(k, what)
    with pytest.raises(InputError, match=r"\['B'\]"):
        call()


@pytest.mark.parametrize("split", ["rows", "nonzeros"])
def test_bound_kernel_methods_agree(split: str) -> None:
    k, B = _spmv(split)
    x = np.random.default_rng(0).standard_normal(B.shape[1])
    bound = k.bind({"B": B})
    st = bound.stats()
    assert isinstance(bound.plan, Plan)
    assert bound.plan.nprocs == 4
    for p in range(4):
        prog = bound.program(p)
        assert sum(m.words for m in prog.messages if m.dst == p) == st.words_received[p]
        assert sum(m.words for m in prog.messages if m.src == p) == st.words_sent[p]
        text = bound.explain(processor=p)
        assert f"processor {p}" in text
    res = bound.run({"B": B, "c": x})
    np.testing.assert_allclose(res.value, B @ x, rtol=1e-12)
    assert res.stats == st
    # the traffic picture is the plan's processor x processor words
    from distal.viz.traffic import traffic_matrix

    w = traffic_matrix(bound.plan, None)
    assert w.sum(axis=0).tolist() == st.words_received
    fig = bound.plot_traffic()
    assert fig is not None
    sim = bound.simulate("local")
    assert sim.seconds > 0
    assert sim.messages == len(bound.plan.messages)


def test_bound_program_lists_stored_entry_work() -> None:
    k, B = _spmv("nonzeros")
    bound = k.bind({"B": B})
    text = "\n".join(bound.explain(processor=1).splitlines())
    assert "stored entries" in text
    assert "reduce partial" in text or "flush partial" in text


@pytest.mark.parametrize("bad", [99, -1, 4, 1.0, True, "0"])
def test_a_processor_out_of_range_is_one_input_error(bad) -> None:
    k = A.summa(8, machine=dl.Machine(2, 2)).compile()
    with pytest.raises(InputError, match="processor"):
        k.program(bad)
    with pytest.raises(InputError, match="processor"):
        k.explain(processor=bad)
    k.plan  # noqa: B018 -- built whole: the same error
    with pytest.raises(InputError, match="processor"):
        k.program(bad)
    bound = _spmv("rows")[0].bind({"B": _spmv("rows")[1]})
    with pytest.raises(InputError, match="processor"):
        bound.program(bad)


def test_compile_takes_a_schedule() -> None:
    with pytest.raises(ScheduleError, match="Schedule"):
        dl.compile(None)  # type: ignore[arg-type]


def test_measured_iterations_come_from_the_leaves() -> None:
    """Terms that cover different entries (a union): the local runtime counts the distinct
    entries its leaves visited, equal to the plan's union count."""
    k = A.spadd3((40, 30), dl.Machine(3)).compile()
    mats = {n: sp.random(40, 30, density=0.1, format="csr", random_state=s)
            for s, n in enumerate(k.sparse.sparse_inputs)}  # fmt: skip
    res = k.run(mats)
    want = sum(mats.values())
    np.testing.assert_allclose(res.value.to_scipy().toarray(), want.toarray(), rtol=1e-12)
    assert res.stats == k.stats(mats)
    union = {(int(r), int(c)) for m in mats.values() for r, c in zip(*m.nonzero(), strict=True)}
    assert sum(res.stats.iterations) == len(union)


def test_sparse_kernel_on_a_hierarchical_machine() -> None:
    """A checkerboard SpMV on 2 nodes of 3 processors: the same words as on the flat 2 x 3
    grid, with the words that cross between nodes (level 0) told apart from those inside
    a node (level 1), measured as predicted."""
    n = 50
    B = sp.random(n, n, density=0.1, format="csr", random_state=1)
    x = np.random.default_rng(3).standard_normal(n)

    def kernel(M: dl.Machine) -> dl.Kernel:
        i, j, io, ii, jo, ji = dl.index_vars("i j io ii jo ji")
        Bt = dl.Tensor("B", (n, n), format="csr", dist="xy -> (xy)*", machine=M)
        c = dl.Tensor("c", (n,), dist="x -> *x", machine=M)
        a = dl.Tensor("a", (n,), dist="x -> xx", machine=M)
        a[i] = Bt[i, j] * c[j]
        s = dl.schedule(a).distribute([i, j], [io, jo], [ii, ji], M)
        return dl.compile(s.communicate([a, Bt, c], jo))

    flat = kernel(dl.Machine(2, 3)).bind({"B": B})
    nested = kernel(dl.Machine(2).nest(dl.Machine(3))).bind({"B": B})
    st = nested.stats()
    assert st == flat.stats()
    node = [0] * 6  # words each processor receives from the other node
    for m in nested.plan.messages:
        if m.src // 3 != m.dst // 3:
            node[m.dst] += m.words
    assert any(node)
    assert node != st.words_received
    inside = [w - v for w, v in zip(st.words_received, node, strict=True)]
    assert st.level_words_received == [node, inside]
    res = nested.run({"B": B, "c": x})
    np.testing.assert_allclose(res.value, B @ x, rtol=1e-12)
    assert res.stats == st
    assert res.stats.level_words_received == st.level_words_received


@pytest.mark.parametrize("split", ["rows", "nonzeros"])
@pytest.mark.parametrize(("grid", "adist"), [((4,), "x -> *"), ((2, 2), "x -> x*")])
def test_sparse_kernel_with_a_replicated_output(split: str, grid, adist: str) -> None:
    """Every replica ends with the finished block: partial sums go to one replica of each
    block (the lowest-numbered one that contributes), which sends the block to the others
    after the step, exactly as a dense kernel's replicated output."""
    n, m = 40, 30
    B = sp.random(n, m, density=0.15, format="csr", random_state=2)
    x = np.random.default_rng(0).standard_normal(m)
    M = dl.Machine(*grid)
    i, j, io, ii, jo, ji, f, fp, fo, fi = dl.index_vars("i j io ii jo ji f fp fo fi")
    if len(grid) == 1:
        bdist, cdist = ("xy -> x" if split == "rows" else "xy -> (xy)"), "x -> x"
    else:
        bdist, cdist = ("xy -> xy" if split == "rows" else "xy -> (xy)*"), "x -> *x"
    Bt = dl.Tensor("B", (n, m), format="csr", dist=bdist, machine=M)
    c = dl.Tensor("c", (m,), dist=cdist, machine=M)
    a = dl.Tensor("a", (n,), dist=adist, machine=M)
    a[i] = Bt[i, j] * c[j]
    s = dl.schedule(a)
    if len(grid) == 2:
        s = s.distribute([i, j], [io, jo], [ii, ji], M).communicate([a, Bt, c], jo)
    elif split == "rows":
        s = s.distribute([i], [io], [ii], M).communicate([a, Bt, c], io)
    else:
        s = s.fuse(i, j, f).pos(f, fp, Bt).distribute([fp], [fo], [fi], M)
        s = s.communicate([a, Bt, c], fo)
    bound = dl.compile(s).bind({"B": B})
    st = bound.stats()
    finals = [m for m in bound.plan.messages if m.kind == "final"]
    assert finals  # the reducers send the finished blocks to the other replicas
    for msg in finals:
        assert bound.plan.primary[bound.plan.placements["a"].block_index(
            bound.plan.coord_in(bound.plan.placements["a"], msg.dst))] == msg.src  # fmt: skip
    res = bound.run({"B": B, "c": x})
    np.testing.assert_allclose(res.value, B @ x, rtol=1e-12)
    assert res.stats == st
    # every replica holds the result: the words into each replica include its final block
    pl = bound.plan.placements["a"]
    for msg in finals:
        box = pl.block_box(pl.block_index(bound.plan.coord_in(pl, msg.dst)))
        assert msg.words == box[0][1] - box[0][0]


def _streamed_spmm(steps: int, out_each_step: bool = True):
    """SpDISTAL's SpMM with the dense operand streamed: ``A(i,k) = B(i,j) * C(j,k)``, rows
    of B per processor, ``k`` divided into ``steps`` chunks; ``C`` (and ``A``, or ``A`` held
    over every step) are communicated at the chunk loop, ``B`` once per processor."""
    n, m, K = 60, 50, 12
    M = dl.Machine(3)
    i, j, k, io, ii, ko, ki = dl.index_vars("i j k io ii ko ki")
    Bt = dl.Tensor("B", (n, m), format="csr", dist="xy -> x", machine=M)
    Ct = dl.Tensor("C", (m, K), dist="xy -> x", machine=M)
    At = dl.Tensor("A", (n, K), dist="xy -> x", machine=M)
    At[i, k] = Bt[i, j] * Ct[j, k]
    s = dl.schedule(At).reorder([i, j, k]).distribute([i], [io], [ii], M)
    if steps:
        s = s.divide(k, ko, ki, steps).reorder([ko, ii, j, ki])
        s = s.communicate(Ct, ko).communicate(Bt, io).communicate(At, ko if out_each_step else io)
    else:
        s = s.communicate([At, Bt, Ct], io)
    B = sp.random(n, m, density=0.1, format="csr", random_state=2)
    C = np.random.default_rng(0).standard_normal((m, K))
    return dl.compile(s), B, C


@pytest.mark.parametrize("out_each_step", [True, False])
def test_spmm_streamed_in_steps_holds_less(out_each_step: bool) -> None:
    """Each step fetches only its chunk of C's referenced rows: the same words as fetching
    them whole, less memory at once; result and stats as predicted, and the program has
    one fetch of C per step."""
    whole, B, C = _streamed_spmm(0)
    st0 = whole.bind({"B": B}).stats()
    peaks = []
    for steps in (3, 4):
        k, _, _ = _streamed_spmm(steps, out_each_step)
        bound = k.bind({"B": B})
        st = bound.stats()
        assert bound.plan.nsteps == steps
        assert st.words_received == st0.words_received
        assert all(a < b for a, b in zip(st.peak_words, st0.peak_words, strict=True))
        fetch_c = [op for op in bound.program(1).ops(1) if getattr(op, "tensor", "") == "C"]
        assert [op.step for op in fetch_c] == list(range(steps))
        res = bound.run({"B": B, "C": C})
        np.testing.assert_allclose(res.value, B @ C, rtol=1e-12)
        assert res.stats == st
        peaks.append(max(st.peak_words))
    assert peaks[1] < peaks[0]  # finer chunks, less held at once


def test_streamed_and_replicated_output_is_refused_by_name() -> None:
    n = 20
    M = dl.Machine(2)
    i, j, k, io, ii, ko, ki = dl.index_vars("i j k io ii ko ki")
    Bt = dl.Tensor("B", (n, n), format="csr", dist="xy -> x", machine=M)
    Ct = dl.Tensor("C", (n, 6), dist="xy -> x", machine=M)
    At = dl.Tensor("A", (n, 6), dist="xy -> *", machine=M)
    At[i, k] = Bt[i, j] * Ct[j, k]
    s = dl.schedule(At).reorder([i, j, k]).distribute([i], [io], [ii], M)
    s = s.divide(k, ko, ki, 2).reorder([ko, ii, j, ki]).communicate([Ct, At], ko)
    B = sp.random(n, n, density=0.2, format="csr", random_state=1)
    with pytest.raises(dl.NotSupportedYet, match="'A'"):
        dl.compile(s.communicate(Bt, io)).bind({"B": B})


@pytest.mark.parametrize("routing", ["tree", "broadcast"])
def test_a_sparse_kernel_keeps_the_routing_asked_for(routing: str) -> None:
    """A routing asked for is the bound plan's (its dense operand's shared pieces travel
    along trees: ``tests/sparse/test_sparse_routing.py``), never a direct plan under
    another name; ``auto`` is direct for a sparse kernel."""
    k, B = _spmv("rows")
    s = k.schedule
    kernel = dl.compile(s, routing=routing)
    assert kernel.routing == routing
    assert kernel.bind({"B": B}).plan.routing == routing
    for ok in ("direct", "auto"):
        assert dl.compile(s, routing=ok).routing == "direct"
