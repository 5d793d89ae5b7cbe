"""Routing for bound sparse kernels: ``routing="tree"`` and ``"broadcast"``.

The pieces of a dense operand that several processors fetch in one step from one source,
holding the same region, travel along the dense engine's binomial trees; everything else
goes directly. Checked on the kernels of ``routing_cases.py`` (SpMM and SpMV whose dense
operand every processor needs whole, streamed or not, on one processor or in row or column
blocks): the plans route what they should and nothing else, ``program(p)`` is still the
plan's part for ``p`` (without the whole plan), the same words move in total while the
busiest source sends less, and on the local, MPI (2 and 4 ranks) and Dask runtimes the
result equals scipy's to 1e-12 and ``result.stats == bound.stats()``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from routing_cases import CASES, check, matrix, spmm, spmv

import distal as dl
from distal.plan.ir import FETCH, PARTIAL, Forward
from distal.plan.region import Rows, content
from mpi_jobs import run_job
from test_bound_program import same

SCRIPT = Path(__file__).resolve().parent / "routing_cases.py"
ROUTED = ("broadcast", "tree")
#: cases whose dense operand lives on processor 0 alone: one tree, rooted there
ON_ONE = ("spmm, C on processor 0", "spmm, C on processor 0 streamed", "spmv, c on processor 0")


def _fetch_regions(plan: Any) -> Counter:
    """How many processors fetch each (step, tensor, source, region) of a dense operand,
    counted off the receivers' ``Fetch`` instructions' pieces through the messages' trees:
    the message a receiver gets names its tree parent, so the source is followed to the
    root, the first sender that is not a relay."""
    parent = {}
    for m in plan.messages:
        if m.kind == FETCH:
            parent[m.step, m.tensor, m.dst, content(m.box)] = (m.src, m.relay)
    out: Counter = Counter()
    for (s, t, _, c), (src, relay) in parent.items():
        while relay:
            src, relay = parent[s, t, src, c]
        out[s, t, src, c] += 1
    return out


@pytest.mark.parametrize("P", [4, 8])
@pytest.mark.parametrize("name", list(CASES))
def test_trees_route_shared_regions_only(name: str, P: int) -> None:
    """Routed, the plan moves the same pieces between the same owners and receivers as
    direct, but each shared region goes down a binomial tree: its root sends at most
    ceil(log2(n + 1)) copies of it, relays pass it on with ``Forward``, partial sums and
    unshared pieces stay direct; the totals equal direct's and the stats are counted from
    the plan."""
    plans = {}
    for routing in ("direct", *ROUTED):
        kernel, inputs, _ = CASES[name](P, routing)
        assert kernel.routing == routing
        plans[routing] = kernel.bind(inputs)
    direct = plans["direct"]
    shared = _fetch_regions(direct.plan)
    assert max(shared.values()) >= 3, shared  # the case shares regions among processors
    assert not any(m.relay or m.hop for m in direct.plan.messages)
    for routing in ROUTED:
        bound = plans[routing]
        plan = bound.plan
        assert plan.routing == routing
        # every receiver still gets each piece exactly once, from the same root
        assert _fetch_regions(plan) == shared
        for m in plan.messages:
            if m.kind == PARTIAL:
                assert (m.hop, m.relay) == (0, False)
        # a root sends one copy of a region per child: at most ceil(log2(members + 1))
        sends: Counter = Counter()
        for m in plan.messages:
            if m.kind == FETCH and not m.relay:
                sends[m.step, m.tensor, m.src, content(m.box)] += 1
        for key, n in sends.items():
            assert n <= int(np.ceil(np.log2(shared[key] + 1))), (key, n, shared[key])
        # each relayed message is announced by a Forward in the relay's program
        forwards = Counter(
            (p, op.step, op.tensor, op.dst, content(op.piece))
            for p in range(P)
            for op in plan.ops(p)
            if isinstance(op, Forward)
        )
        relayed = Counter(
            (m.src, m.step, m.tensor, m.dst, content(m.box)) for m in plan.messages if m.relay
        )
        assert relayed
        assert forwards == relayed
        st, st_direct = bound.stats(), direct.stats()
        assert sum(st.words_sent) == sum(st_direct.words_sent)
        assert sum(st.words_received) == sum(st_direct.words_received)
        assert st.words_received == st_direct.words_received
        assert sum(st.messages_sent) == sum(st.messages_received)
        for p in range(P):
            assert st.words_sent[p] == sum(m.words for m in plan.messages if m.src == p)
        if name in ON_ONE:  # the owner serves everyone: the tree takes most of it off it
            assert max(st.words_sent) < max(st_direct.words_sent)
            assert st.words_sent[0] < st_direct.words_sent[0]


def test_tree_lowers_the_busiest_senders_words() -> None:
    """SpMM on 8 processors, C (30 x 8) whole on processor 0 and needed whole by the 7
    others: direct, processor 0 sends 7 copies; along the tree, 3 (to nodes 1, 2 and 4),
    and the relays the other 4."""
    block = 30 * 8
    sent = {}
    for routing in ("direct", "tree"):
        kernel, inputs, _ = spmm(8, routing)
        sent[routing] = kernel.bind(inputs).stats().words_sent
    assert sent["direct"] == [7 * block] + [0] * 7
    assert max(sent["tree"]) == sent["tree"][0] == 3 * block
    assert sorted(sent["tree"][1:]) == [0, 0, 0, 0, block, block, 2 * block]
    assert sum(sent["tree"]) == sum(sent["direct"])


@pytest.mark.parametrize("routing", ROUTED)
@pytest.mark.parametrize("name", list(CASES))
def test_program_is_the_routed_plans_part(name: str, routing: str) -> None:
    """``program(p)`` of a routed plan, written before the whole plan, is ``plan.restrict(p)``
    region for region (Forward instructions, trees' senders, hops and relays)."""
    kernel, inputs, _ = CASES[name](4, routing)
    bound = kernel.bind(inputs)
    programs = [bound.program(p) for p in range(4)]
    assert "plan" not in bound.__dict__, "program(p) built the whole plan"
    for p, prog in enumerate(programs):
        same(prog, bound.plan.restrict(p), f"program({p})")


@pytest.mark.parametrize("routing", ["direct", *ROUTED])
@pytest.mark.parametrize("name", list(CASES))
def test_local(name: str, routing: str) -> None:
    kernel, inputs, reference = CASES[name](4, routing)
    bound = kernel.bind(inputs)
    check(bound.run(inputs), reference, bound.stats())


def test_sparse_pieces_and_auto_stay_direct() -> None:
    """Stored entries of a sparse input travel directly even when routed (only dense
    operands' regions are shared along trees), and ``auto`` compiles a sparse kernel
    direct."""
    M = dl.Machine(4)
    i, j, f, fp, fo, fi = dl.index_vars("i j f fp fo fi")
    B = dl.Tensor("B", (40, 40), format="csr", dist="xy -> x", machine=M)
    c = dl.Tensor("c", (40,))
    a = dl.Tensor("a", (40,), dist="x -> x", machine=M)
    a[i] = B[i, j] * c[j]
    s = dl.schedule(a).fuse(i, j, f).pos(f, fp, B).distribute([fp], [fo], [fi], M)
    s = s.communicate([a, B, c], fo)
    inputs = {"B": matrix(40, 40, 7), "c": np.random.default_rng(8).standard_normal(40)}
    bound = dl.compile(s, routing="tree").bind(inputs)
    moved = [m for m in bound.plan.messages if m.src != m.dst]
    assert any(m.tensor == "B" for m in moved)  # B's entries travel (cut against its rows)
    for m in moved:
        if m.tensor != "c":
            assert (m.hop, m.relay) == (0, False), m
        else:
            assert isinstance(m.box, Rows)
    assert any(m.relay for m in moved)
    check(bound.run(inputs), inputs["B"] @ inputs["c"], bound.stats())
    assert spmv(4, "auto")[0].routing == "direct"


@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("nprocs", [2, 4])
@pytest.mark.parametrize("routing", ["tree"])
def test_mpi(nprocs: int, routing: str) -> None:
    job = run_job(nprocs, routing, script=SCRIPT, timeout=150)
    assert job.rc == 0, job
    lines = [d for d in job.lines() if "case" in d]
    failed = [d for d in lines if not d["ok"]]
    assert failed == [], job
    assert {(d["case"], d["rank"]) for d in lines} == {
        (name, rank) for name in CASES for rank in range(nprocs)
    }, job
    if nprocs == 4:  # relays passed pieces on (the 2-rank trees have one member each)
        assert sum(d["relayed"] for d in lines) > 0, job


@pytest.mark.dask
@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", list(CASES))
def test_dask(name: str, dask_client: Any) -> None:
    kernel, inputs, reference = CASES[name](4, "tree")
    bound = kernel.bind(inputs)
    assert any(m.relay for m in bound.plan.messages)
    result = bound.run(inputs, runtime="dask", client=dask_client)
    check(result, reference, bound.stats(), bound.plan)  # (peak_words: measured on Dask)
    assert result.tasks_executed > 0
