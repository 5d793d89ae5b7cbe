"""The discrete-event simulator: consistent, monotonic, and fast enough for 256 nodes."""

from __future__ import annotations

import itertools
import json
import math
import time

import pytest
from kernels_for_viz import cannon, johnson, ttm_replicated

import distal as dl
from distal.sim import Network, NetworkError, SimulationError, get_network, simulate

EDR = get_network("fat-tree-edr")
KINDS = ("fetch", "compute", "flush", "reduce", "final", "wait")


@pytest.fixture(scope="module")
def kernels():
    return {"cannon": cannon(256, 4), "johnson": johnson(64), "ttm": ttm_replicated(32)}


def test_breakdown_is_consistent(kernels):
    for k in kernels.values():
        sim = simulate(k, EDR)
        b = sim.breakdown()
        assert set(b) == set(KINDS)
        for p in range(sim.nprocs):
            total = sum(b[kind][p] for kind in KINDS)
            assert total <= sim.seconds * (1 + 1e-9)
            assert sim.busy[p] + sim.wait[p] == pytest.approx(total)
        assert sim.flops == 2 * math.prod(k.plan.statement.extent.values())
        assert sim.messages == len(k.plan.messages)
        assert sim.gflops == pytest.approx(sim.flops / sim.seconds / 1e9)


@pytest.mark.parametrize("name", ["cannon", "johnson"])
def test_more_bandwidth_or_less_latency_is_never_slower(kernels, name):
    k = kernels[name]
    times = [simulate(k, EDR.with_(bandwidth=bw)).seconds for bw in (1e8, 1e9, 1e10, 1e11)]
    assert all(a >= b for a, b in itertools.pairwise(times))
    assert times[0] > times[-1]
    lat = [simulate(k, EDR.with_(latency=x)).seconds for x in (1e-3, 1e-5, 0.0)]
    assert all(a >= b for a, b in itertools.pairwise(lat))


def test_faster_compute_is_never_slower(kernels):
    k = kernels["cannon"]
    times = [simulate(k, EDR.with_(flops=f)).seconds for f in (1e9, 1e10, 1e11)]
    assert times[0] > times[1] > times[2]


def test_no_communication_means_compute_time():
    k = ttm_replicated(32)
    assert not k.plan.messages
    net = EDR.with_(op_overhead=0.0, latency=0.0)
    sim = simulate(k, net)
    per_proc = max(k.stats().iterations) * 2 / net.flops
    assert sim.seconds == pytest.approx(per_proc)
    assert max(sim.wait) == 0


def test_sequential_is_the_sum_of_all_work(kernels):
    k = kernels["cannon"]
    seq = simulate(k, EDR, sequential=True)
    assert seq.sequential
    assert max(seq.wait) == 0
    assert seq.seconds == pytest.approx(sum(seq.busy))
    par = simulate(k, EDR)
    assert par.seconds < seq.seconds


def test_volunteer_pool_is_heterogeneous_and_reproducible(kernels):
    net = get_network("volunteer-wan")
    bw, fl = net.node_rates(16)
    assert bw.max() / bw.min() > 2
    assert fl.max() / fl.min() > 2
    assert bw.max() <= net.bandwidth
    assert fl.max() <= net.flops
    a = simulate(kernels["cannon"], net)
    b = simulate(kernels["cannon"], net)
    assert a.seconds == b.seconds
    assert a.seconds > 10 * simulate(kernels["cannon"], EDR).seconds


def test_local_preset_is_calibrated(kernels):
    net = get_network("local")
    assert net.flops > 1e8
    assert net.memory_bandwidth > 1e8
    assert net.measure_kernels
    sim = simulate(kernels["cannon"], "local")
    assert 0 < sim.seconds < 10


def test_plot_and_chrome_trace(tmp_path, kernels):
    pytest.importorskip("matplotlib", reason="needs matplotlib (viz extra)")
    sim = simulate(kernels["johnson"], EDR)
    sim.plot(tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 5000
    doc = sim.to_chrome_trace(tmp_path / "g.json")
    assert json.loads((tmp_path / "g.json").read_text()) == json.loads(json.dumps(doc))
    assert "simulated on fat-tree-edr" in sim.summary()


def test_errors_name_the_culprit(kernels):
    with pytest.raises(NetworkError, match="'ethernet'"):
        simulate(kernels["cannon"], "ethernet")
    with pytest.raises(SimulationError, match="'bandwith'"):
        simulate(kernels["cannon"], "fat-tree-edr", bandwith=1e9)
    with pytest.raises(NetworkError, match="bandwidth"):
        Network("x", bandwidth=0, latency=0, flops=1, memory_bandwidth=1)
    with pytest.raises(SimulationError, match="Kernel"):
        simulate("not a kernel")


def test_256_nodes_simulate_quickly():
    k = cannon(16 * 8192, 16)
    t0 = time.perf_counter()
    sim = simulate(k, "fat-tree-hdr", trace=False)
    assert time.perf_counter() - t0 < 30
    assert sim.nprocs == 256
    assert sim.trace == []
    # compute-bound at this size: most of the per-node rate is reached
    assert 0.5 * get_network("fat-tree-hdr").flops / 1e9 < sim.gflops_per_node


def test_kernel_entry_point(kernels):
    assert kernels["johnson"].simulate("fat-tree-hdr").nprocs == dl.Machine(2, 2, 2).size
