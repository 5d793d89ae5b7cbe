"""``dl.autoschedule``: near the bound in every regime, correct results, memory limits."""

from __future__ import annotations

import io
import math
import sys

import numpy as np
import pytest

import distal as dl
from distal.cost import matmul_bound
from distal.cost.autoschedule import build, candidates, estimate, schedule_code, search
from distal.cost.estimate import _sample
from distal.cost.model import MachineParams
from distal.lang.concrete import concretize

HDR = MachineParams()  # the documented defaults, explicitly


def _matmul(m, n, k, P, dists=("auto", "auto", "auto"), machine=None):
    M = machine or dl.Machine(P)
    i, j, kk = dl.index_vars("i j k")
    A = dl.Tensor("A", (m, n), dist=dists[0], machine=M)
    B = dl.Tensor("B", (m, k), dist=dists[1], machine=M)
    C = dl.Tensor("C", (k, n), dist=dists[2], machine=M)
    A[i, j] = B[i, kk] * C[kk, j]
    return A, B, C, M, (i, j, kk)


# The regime table (every regime, both boundaries, P = 4..4096) is tests/cost/test_regimes.py.


def test_traffic_ranks_before_latency():
    """One huge dimension on 256 processors: the 1-D grid meets the bound but gathers C
    in 255 messages; a 2-D grid sends fewer, larger messages and 2.5x the words. With
    cluster latencies the model alone prefers the 2-D grid; traffic ranks first."""
    m, n, k, P = 262144, 512, 512, 256
    A, *_, M, _ = _matmul(m, n, k, P)
    bound = matmul_bound(m, n, k, P)
    best = search(A, M, params=HDR)[0]
    assert best.candidate.grid == (P,)
    assert dl.compile(best.schedule).stats().max_words_received == pytest.approx(bound, rel=1e-12)
    by_time = search(A, M, params=HDR, traffic_slack=math.inf)[0]
    assert by_time.cost.max_words > 2 * bound  # what the model alone picks
    assert by_time.cost.seconds < best.cost.seconds
    with pytest.raises(dl.ScheduleError, match="traffic_slack"):
        search(A, M, traffic_slack=0.5)


@pytest.mark.parametrize(
    ("P", "extents"), [(4, ()), (8, ()), (12, ()), (16, ()), (27, (54, 108, 216))]
)
def test_closed_form_matches_plans(P, extents):
    """For every aligned candidate without steps the estimate equals the plan exactly;
    with serial steps words are exact and memory is never underestimated. The grids of
    P = 16 and 27 have coordinates that the estimate does not sample."""
    A, *_ = _matmul(*(extents or (48, 96, 192)), P)
    st = concretize(A.assignment)
    lay = dl.schedule(A).layouts()
    checked = 0
    for steps in (False, True):
        for c in candidates(st, P, {"A", "B", "C"}, steps=steps):
            if not all(c.aligned.values()):
                continue
            if steps and (c.step is None or c.step[1] > 8):
                continue
            e, p = estimate(st, c, lay), dl.compile(build(A, c), routing="direct").stats()
            assert max(e.words_received) == p.max_words_received, c.describe()
            assert max(e.iterations) == max(p.iterations), c.describe()
            if c.step is None:
                assert max(e.peak_words) == p.max_peak_words, c.describe()
                assert max(e.messages_received) == max(p.messages_received), c.describe()
            else:
                assert max(e.peak_words) >= p.max_peak_words, c.describe()
            checked += 1
    assert checked > 5


@pytest.mark.parametrize("grid", [(64,), (8, 8), (4, 4, 4), (3, 5, 7), (16, 16, 16)])
def test_samples_are_few_on_every_grid(grid):
    """The estimate samples the corners and the middle: at most 2**d + 1 processors on a
    d-dimensional grid whatever its size (every processor of a 64-processor grid made the
    search at P = 64 slower than at P = 4096), first and last coordinates included."""
    samples = _sample(grid)
    assert len(samples) <= 2 ** len(grid) + 1
    assert len(set(samples)) == len(samples)
    assert tuple(0 for _ in grid) in samples
    assert tuple(g - 1 for g in grid) in samples
    assert all(0 <= x < g for c in samples for x, g in zip(c, grid, strict=True))


def test_ragged_own_block_straddling_two_contributors():
    """n = 4096 on a 4 x 4 x 6 grid with k in 4 serial chunks: A's joint cut ``ij -> iji``
    makes some own blocks straddle two i-blocks, whose processors send only the rows they
    share. The estimate counted every contributor as sending the whole own block (2970624
    words on processor (0, 0, 5) instead of 1915904), which dropped this schedule from the
    shortlist; now it equals the plan."""
    A, *_ = _matmul(4096, 4096, 4096, 96)
    st = concretize(A.assignment)
    lay = dl.schedule(A).layouts()
    want = "3d+chunk grid (4, 4, 6) (i:4, j:4, k:6, k in 4 serial chunks)"
    (c,) = [c for c in candidates(st, 96, {"A", "B", "C"}) if c.describe() == want]
    e = estimate(st, c, lay)
    p = dl.compile(build(A, c), routing="direct").stats()
    assert max(e.words_received) == p.max_words_received == 1938432
    assert search(A, dl.Machine(96), params=HDR)[0].candidate.describe() == want


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_search_shows_progress_on_a_terminal_only(monkeypatch):
    """A search that outlasts ``PROGRESS_DELAY`` (0 here) draws a bar on a terminal; on
    any other stream it prints nothing."""
    import distal.cost.autoschedule as auto_mod

    A, *_, M, _ = _matmul(64, 64, 64, 8)
    monkeypatch.setattr(auto_mod, "PROGRESS_DELAY", 0.0)
    monkeypatch.delenv("DISTAL_PROGRESS", raising=False)
    quiet = io.StringIO()
    monkeypatch.setattr(sys, "stderr", quiet)
    first = search(A, M)[0]
    assert quiet.getvalue() == ""
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert search(A, M)[0].candidate.describe() == first.candidate.describe()
    assert "autoschedule" in term.getvalue()


def _random_case(rng, P):
    kinds = [
        "ik,kj->ij",
        "bik,bkj->bij",
        "ijk,k->ij",
        "ijk,lk->ijl",
        "ijk,jr,kr->ir",
        "ij,ij->",
        "ij->ji",
        "ik,jk->ij",
        "i,j->ij",
    ]
    spec = kinds[int(rng.integers(len(kinds)))]
    letters = sorted(set(spec) - set(",->"))
    ext = {c: int(rng.integers(1, 9)) for c in letters}
    ins, out = spec.split("->")
    return spec, [rng.standard_normal([ext[c] for c in s]) for s in ins.split(",")], out


@pytest.mark.parametrize("seed", range(12))
def test_auto_matches_numpy(seed):
    rng = np.random.default_rng(seed)
    P = int(rng.choice([1, 2, 3, 4, 6, 8]))
    spec, arrays, _ = _random_case(rng, P)
    got = dl.einsum(spec, *arrays, machine=dl.Machine(P), schedule="auto")
    np.testing.assert_allclose(got, np.einsum(spec, *arrays), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("spec", ["ij,jk,kl->il", "ij,jk,kl,lm->im", "i,ij,j->", "ab,bc,ca->"])
def test_multi_operand_einsum(spec):
    rng = np.random.default_rng(1)
    ext = {c: int(rng.integers(2, 7)) for c in set(spec) - set(",->")}
    arrays = [rng.standard_normal([ext[c] for c in s]) for s in spec.split("->")[0].split(",")]
    got = dl.einsum(spec, *arrays, machine=dl.Machine(4), schedule="auto")
    np.testing.assert_allclose(got, np.einsum(spec, *arrays), rtol=1e-10, atol=1e-10)


def test_pairwise_beats_fused_for_a_chain():
    from distal.cost.einsum_auto import Operand, _kernel_seconds, plan_pairs

    ext = dict(i=256, j=256, k=256, l=256)
    M = dl.Machine(4)
    ops = [Operand(s, tuple(ext[c] for c in s), np.dtype(float)) for s in ("ij", "jk", "kl")]
    fused = _kernel_seconds(ops, "il", ext, M, HDR)
    paired, path = plan_pairs(["ij", "jk", "kl"], "il", ext, M, HDR)
    assert paired < fused
    assert len(path) == 2


def test_given_distributions_are_kept_and_results_exact():
    M = dl.Machine(2, 2)
    A, _B, _C, _, _ = _matmul(12, 10, 8, 4, dists=("auto", "xy -> xy", "auto"), machine=M)
    s = dl.autoschedule(A, M, params=HDR)
    assert s.distributions["B"] == "xy -> xy"
    assert s.distributions["A"] != "auto"
    assert s.distributions["C"] != "auto"
    rng = np.random.default_rng(0)
    b, c = rng.standard_normal((12, 8)), rng.standard_normal((8, 10))
    np.testing.assert_allclose(dl.compile(s)(B=b, C=c), b @ c, rtol=1e-10)


def test_auto_tensors_get_one_copy():
    A, _B, _C, M, _ = _matmul(64, 64, 64, 8)
    s = dl.autoschedule(A, M, params=HDR)
    kern = dl.compile(s)
    pl = kern.plan.placements
    for name in "ABC":
        p = pl[name]
        owned = sum(
            0 if (b := p.owned_box(c)) is None else int(np.prod([hi - lo for lo, hi in b]))
            for c in dl.Machine(*p.grid).coords()
        )
        assert owned == 64 * 64, name  # every element exactly once


def test_memory_limit_respected_or_refused():
    A, _B, _C, M, _ = _matmul(256, 256, 256, 4)
    free = search(A, M, params=HDR)[0]
    limit = int(free.cost.peak_bytes * 0.7)
    s = dl.autoschedule(A, M, memory_limit=limit, params=HDR)
    assert dl.compile(s).stats().max_peak_words * 8 <= limit
    with pytest.raises(dl.ScheduleError, match=r"'A'.*memory_limit"):
        dl.autoschedule(A, M, memory_limit=1000, params=HDR)
    with pytest.raises(dl.ScheduleError, match="memory_limit"):
        dl.autoschedule(A, M, memory_limit=-5)


def test_repr_is_pasteable_code():
    A, B, C, M, (i, j, k) = _matmul(32, 32, 32, 8)
    s = dl.autoschedule(A, M, params=HDR)
    code = schedule_code(s)
    for name in "ABC":
        assert f".place({name}," in code
    ns = {"dl": dl, "A": A, "B": B, "C": C, "i": i, "j": j, "k": k}
    exec(code, ns)
    again = ns["s"]
    assert again.distributions == s.distributions
    assert dl.compile(again).stats().as_dict() == dl.compile(s).stats().as_dict()


def test_bad_calls():
    A, _B, _C, M, _ = _matmul(8, 8, 8, 4)
    with pytest.raises(dl.ScheduleError, match="Machine"):
        dl.autoschedule(A, "four")
    with pytest.raises(dl.ScheduleError, match="evaluate"):
        search(A, M, evaluate="guess")
    A2, *_ = _matmul(8, 8, 8, 4, dists=("auto", "xy -> xy", "auto"), machine=dl.Machine(2, 2))
    with pytest.raises(dl.ScheduleError, match=r"has 16"):
        dl.autoschedule(A2, dl.Machine(16))


@pytest.mark.parametrize(("P", "grids"), [(4, [(2, 2)]), (8, [(2, 2, 2)]), (16, [(4, 4)])])
def test_never_worse_than_the_library(P, grids):
    """Modelled time within 5% of the best ``dl.algorithms`` schedule."""
    from distal.cost.model import plan_cost

    n = 4096
    A, *_, M, _ = _matmul(n, n, n, P)
    auto = search(A, M, params=HDR)[0].cost.seconds
    lib = []
    for g in grids:
        for name in ("summa", "cannon", "johnson_3d", "cosma"):
            try:
                a = getattr(dl.algorithms, name)(n, n, n, machine=dl.Machine(*g))
            except dl.DistalError:
                continue
            lib.append(plan_cost(a.compile(), HDR).seconds)
    assert lib
    assert auto <= 1.05 * min(lib)
