"""Routed plans replay as the MPI runtime runs them, and the core-sharing model of ``local``.

The model's facts these tests rely on: latency is a pipeline delay (a message arrives
``latency`` after it leaves, however many others are in flight), bandwidth is an endpoint
resource (a processor's port carries one message at a time). So a binomial tree of depth
``d`` costs at least ``d`` latencies, while direct messages to a hot spot cost one latency
but serialise on its port: trees lose when latency dominates and win when the hot spot's
bandwidth does.
"""

from __future__ import annotations

import pytest
from kernels_for_viz import ttm_replicated

import distal as dl
from distal.algorithms import inner_product, johnson_3d, summa
from distal.plan.ir import FETCH, PARTIAL
from distal.sim import NetworkError, get_network, simulate
from distal.sim.network import host_cores

EDR = get_network("fat-tree-edr")
FREE = EDR.with_(op_overhead=0.0, flops=1e18, memory_bandwidth=1e18)
LATENCY = 1e-3
LATENCY_BOUND = FREE.with_(latency=LATENCY, bandwidth=1e15)
BANDWIDTH_BOUND = FREE.with_(latency=0.0, bandwidth=1e8)


def compiled(algorithm, routing: str) -> dl.Kernel:
    return dl.compile(algorithm.schedule, routing=routing)


def depth(plan, kind: str) -> int:
    """Longest chain of messages of one kind in a step (tree depth; 1 when direct)."""
    best = 0
    for m in plan.messages:
        if m.kind == kind:
            best = max(best, m.hop.bit_length() if m.hop else 1)
    return best


@pytest.fixture(scope="module")
def cases():
    """Reducer hot spots on 16 processors: 15 one-word partial sums to processor 0, and
    Johnson on 2x2x4 (3 partial blocks onto each face processor)."""
    algs = {
        "inner": inner_product((64, 64, 64), machine=dl.Machine(4, 4)),
        "johnson": johnson_3d(128, machine=dl.Machine(2, 2, 4)),
    }
    return {name: {r: compiled(a, r) for r in ("direct", "tree")} for name, a in algs.items()}


def test_tree_plans_have_relays(cases):
    for ks in cases.values():
        assert not any(m.relay for m in ks["direct"].plan.messages)
        assert any(m.relay for m in ks["tree"].plan.messages)
    assert depth(cases["inner"]["tree"].plan, PARTIAL) == 4  # ceil(log2(16))


@pytest.mark.parametrize("name", ["inner", "johnson"])
def test_latency_bound_tree_takes_its_depth_in_latencies(cases, name):
    tree = cases[name]["tree"]
    chain = depth(tree.plan, FETCH) * any(m.kind == FETCH for m in tree.plan.messages)
    chain += depth(tree.plan, PARTIAL)
    sim = simulate(tree, LATENCY_BOUND)
    assert sim.seconds >= chain * LATENCY
    assert sim.seconds == pytest.approx(chain * LATENCY, rel=1e-3)  # nothing else costs
    # direct: every message is one latency from its sender's start; the tree never beats it
    direct = simulate(cases[name]["direct"], LATENCY_BOUND)
    assert direct.seconds <= sim.seconds
    assert direct.seconds < chain * LATENCY


def test_inner_product_tree_is_four_latencies_direct_one(cases):
    assert simulate(cases["inner"]["tree"], LATENCY_BOUND).seconds >= 4 * LATENCY
    assert simulate(cases["inner"]["direct"], LATENCY_BOUND).seconds < 1.01 * LATENCY


@pytest.mark.parametrize("name", ["inner", "johnson"])
def test_bandwidth_bound_hot_spot_tree_wins(cases, name):
    direct = simulate(cases[name]["direct"], BANDWIDTH_BOUND).seconds
    tree = simulate(cases[name]["tree"], BANDWIDTH_BOUND).seconds
    assert tree < direct


def test_inner_product_hot_spot_times_are_exact(cases):
    """15 messages of 8 bytes through processor 0's port versus 4 tree levels."""
    word = 8 / BANDWIDTH_BOUND.bandwidth
    assert simulate(cases["inner"]["direct"], BANDWIDTH_BOUND).seconds == pytest.approx(15 * word)
    assert simulate(cases["inner"]["tree"], BANDWIDTH_BOUND).seconds == pytest.approx(4 * word)


@pytest.mark.parametrize("network", [LATENCY_BOUND, BANDWIDTH_BOUND, EDR])
def test_relays_wait_for_what_they_pass_on(cases, network):
    """A relayed fetch leaves after the relay's own copy arrived; a relay's partial sum
    leaves after every child's sum arrived (the ``Forward`` / ``Combine`` dependencies)."""
    alg = summa(256, machine=dl.Machine(4, 4))  # row / column broadcasts: relayed fetches
    kernels = [compiled(alg, "tree"), *(ks["tree"] for ks in cases.values())]
    seen = {FETCH: 0, PARTIAL: 0}
    for k in kernels:
        sim = simulate(k, network)
        msgs = k.plan.messages
        got = {(m.dst, m.step, m.tensor, m.box): i for i, m in enumerate(msgs) if m.kind == FETCH}
        for i, m in enumerate(msgs):
            if m.kind == FETCH and m.relay:
                own = got[(m.src, m.step, m.tensor, m.box)]
                assert sim.departures[i] >= sim.arrivals[own]
                seen[FETCH] += 1
            if m.kind == PARTIAL:
                children = [
                    j
                    for j, c in enumerate(msgs)
                    if c.kind == PARTIAL and c.relay and c.dst == m.src and c.step == m.step
                ]
                for j in children:
                    assert sim.departures[i] >= sim.arrivals[j]
                seen[PARTIAL] += len(children)
    assert seen[FETCH]
    assert seen[PARTIAL]


def test_relays_forward_while_they_compute(cases):
    """The runtime forwards from a thread: with slow compute, a relayed piece of step s+1
    leaves as soon as the relay's own copy is here, long before the relay's compute of
    step s ends."""
    k = compiled(summa(256, machine=dl.Machine(4, 4), steps=4), "tree")
    sim = simulate(k, LATENCY_BOUND.with_(flops=1e8))
    ends = {(e.proc, e.step): e.end for e in sim.trace if e.kind == "compute"}
    msgs = k.plan.messages
    got = {(m.dst, m.step, m.tensor, m.box): i for i, m in enumerate(msgs) if m.kind == FETCH}
    checked = 0
    for i, m in enumerate(msgs):
        if m.kind == FETCH and m.relay and m.step > 0:
            own = got[(m.src, m.step, m.tensor, m.box)]
            assert sim.departures[i] == pytest.approx(sim.arrivals[own])
            assert sim.departures[i] < ends[(m.src, m.step - 1)]
            checked += 1
    assert checked


def test_tree_and_direct_agree_without_hot_spots():
    """No shared pieces, no partial sums: routing changes nothing."""
    k = ttm_replicated(32)
    assert not k.plan.messages
    a = simulate(k, EDR).seconds
    b = simulate(dl.compile(k.schedule, routing="tree"), EDR).seconds
    assert a == b


@pytest.mark.parametrize(("cores", "share"), [(1, 4.0), (2, 2.0), (4, 1.0), (8, 1.0)])
def test_shared_cores_slow_busy_processors(cores, share):
    """4 processors computing at once on ``cores`` cores each run at min(1, cores/4)."""
    k = ttm_replicated(32)
    net = EDR.with_(op_overhead=0.0, latency=0.0)
    alone = simulate(k, net).seconds
    assert simulate(k, net.with_(cores=cores)).seconds == pytest.approx(share * alone)


def test_shared_cores_speed_up_when_others_wait():
    """A processor computing while the others wait gets a whole core: sharing costs at most
    the busy-everywhere factor and at least nothing."""
    k = compiled(johnson_3d(256, machine=dl.Machine(2, 2, 2)), "direct")
    net = EDR.with_(flops=1e10)
    alone = simulate(k, net).seconds
    shared = simulate(k, net.with_(cores=2)).seconds
    assert alone < shared <= 4 * alone * (1 + 1e-9)


def test_cores_must_be_positive():
    with pytest.raises(NetworkError, match="cores"):
        EDR.with_(cores=0)
    with pytest.raises(NetworkError, match="kernel_threads"):
        EDR.with_(kernel_threads=0)
    assert get_network("local").cores == host_cores()


@pytest.mark.parametrize(("efficiency", "share"), [(1.0, 2.0), (0.8, 2.5), (0.5, 4.0)])
def test_core_efficiency_slows_cores_busy_together(efficiency, share):
    """All 4 processors busy on 2 cores, each core at ``efficiency`` of one core alone."""
    k = ttm_replicated(32)
    net = EDR.with_(op_overhead=0.0, latency=0.0)
    alone = simulate(k, net).seconds
    shared = simulate(k, net.with_(cores=2, core_efficiency=efficiency)).seconds
    assert shared == pytest.approx(share * alone)


def test_efficiency_applies_to_cores_busy_together():
    """4 processors on 4 cores: a core each, all busy, so each at ``core_efficiency``."""
    k = ttm_replicated(32)
    net = EDR.with_(op_overhead=0.0, latency=0.0)
    alone = simulate(k, net).seconds
    assert simulate(k, net.with_(cores=4, core_efficiency=0.5)).seconds == pytest.approx(2 * alone)
    with pytest.raises(NetworkError, match="core_efficiency"):
        net.with_(core_efficiency=0.0)
