"""``verify="adaptive"``: a worker's results are checked less often the longer its run of
verified results (never less often than ``trust.FLOOR``), a failure resets its trust, and a
session's trust carries from run to run. The lying-worker case is in
``test_dask_verify.py`` (parametrized over ``check``, ``3`` and ``adaptive``)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from elastic_helpers import gemm, gemm_inputs

import distal as dl
from distal.runtime.dask import decompose
from distal.runtime.elastic import trust as tr

pytestmark = [pytest.mark.dask, pytest.mark.timeout(120)]


def test_every_result_of_a_new_worker_is_checked_then_fewer_never_below_the_floor() -> None:
    p = [tr.check_probability(n) for n in range(200)]
    assert p[: tr.WARMUP] == [1.0] * tr.WARMUP
    assert all(a >= b for a, b in itertools.pairwise(p))
    assert p[tr.WARMUP] < 1.0
    assert min(p) == tr.FLOOR == p[-1]


def test_the_draw_checks_a_trusted_worker_at_the_floor_rate() -> None:
    """20 000 results of a worker at the floor: checked ~ Binomial(20 000, 1/20), mean
    1 000, standard deviation 30.8; the band is six of them either side."""
    t = tr.Trust(streaks={"w": 10**6})
    checked = sum(t.should_check("w") for _ in range(20_000))
    assert 815 <= checked <= 1185
    assert (t.checked, t.unchecked) == (checked, 20_000 - checked)


def test_a_failure_resets_the_streak_and_a_new_worker_starts_untrusted() -> None:
    t = tr.Trust()
    for _ in range(100):
        t.passed("w")
    assert tr.check_probability(t.streaks["w"]) == tr.FLOOR
    t.failed("w")
    assert t.streaks["w"] == 0
    assert t.failures == 1
    assert all(t.should_check("w") for _ in range(50))  # back in its warm-up
    assert all(t.should_check("other") for _ in range(50))


def test_the_false_accept_bound_holds_for_a_liar_that_earned_full_trust() -> None:
    """A worker at the floor that lies on every result: how many lies are accepted before
    the first is caught, over 4 000 trials, against ``false_accept_bound`` (the tail
    ``P(more than k) <= 0.95^(k+1)``, mean 19): the empirical tail at k = 19 and 59 must not
    exceed the bound by more than six binomial standard deviations."""
    rng_trials, accepted = 4000, []
    for _ in range(rng_trials):
        t = tr.Trust(streaks={"liar": 10**6})
        n = 0
        while not t.should_check("liar"):
            n += 1
        accepted.append(n)
    a = np.array(accepted)
    for k in (19, 59):
        bound = tr.false_accept_bound(k)
        sd = np.sqrt(bound * (1 - bound) / rng_trials)
        assert (a > k).mean() <= bound + 6 * sd, k
    assert abs(a.mean() - (1 - tr.FLOOR) / tr.FLOOR) < 6 * np.sqrt(380 / rng_trials)


def test_a_run_accepts_some_results_of_trusted_workers_unchecked(client: Any) -> None:
    """64 units and 16 block sums over two workers (the first 10 results of each all
    checked): some go unchecked, each result is counted once, checked or not, and the
    product is exact."""
    k, x = gemm(), gemm_inputs()
    res = k.run(x, runtime="dask", client=client, verify="adaptive", granularity="step")
    assert np.array_equal(res.value, k.run(x).value)
    s = res.extra["summary"]
    assert s.unchecked > 0
    results = len(decompose(k.plan, "step")) + len(k.plan.primary)  # units, then block sums
    assert s.checked + s.reductions_checked + s.unchecked == results
    assert "adaptive trust: " in str(s)
    assert s.excluded_workers == []


def _laplacian(g: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(g, g))
    return (sp.kron(sp.eye(g), t) + sp.kron(t, sp.eye(g))).tocsr()


def test_a_session_keeps_its_workers_trust_from_run_to_run(client: Any) -> None:
    """CG in a Dask session: the streaks earned in early iterations make later kernels'
    results go unchecked, with the iterates those of the same solve on the local runtime."""
    A, b = _laplacian(12), np.ones(144)
    with dl.Session("dask", client=client, machine=2, progress=False, verify="adaptive") as s:
        x, its = dl.apps.cg(A, b, session=s, maxiter=25, tol=0.0)
        t = s.trust
        assert its == 25
        assert t.failures == 0
        assert t.unchecked > 0
        assert all(n >= tr.WARMUP for n in t.streaks.values())
        assert len(t.streaks) == 2
    # a verified session fuses as any other does: so does the reference
    with dl.Session("local", machine=2) as local:
        want, _ = dl.apps.cg(A, b, session=local, maxiter=25, tol=0.0)
    assert np.array_equal(x, want)


def test_adaptive_checks_fused_blocks_less_often_as_their_workers_earn_trust(
    client: Any,
) -> None:
    """A fused set's blocks under ``verify="adaptive"``: every block in a worker's warm-up
    is computed twice, then fewer; the unchecked ones' partial sums are the computing
    worker's, and every result is numpy's."""
    rng = np.random.default_rng(5)
    rounds = 40
    with dl.Session("dask", client=client, machine=2, progress=False, verify="adaptive") as s:
        for _ in range(rounds):
            v, w = rng.standard_normal(500), rng.standard_normal(500)
            y = 2.0 * s.asarray(v) + s.asarray(w)
            yy = y @ y
            want = 2.0 * v + w
            assert np.array_equal(y.get(), want)
            np.testing.assert_allclose(float(yy), want @ want, rtol=1e-12)
        t = s.trust
        assert t.failures == 0
        assert all(n >= tr.WARMUP for n in t.streaks.values())
        # two blocks a round: the warm-ups' all checked, then some left unchecked
        assert 2 * tr.WARMUP <= s.maps_checked < 2 * rounds
        assert t.checked + t.unchecked >= 2 * rounds


def test_adaptive_is_a_dask_option_only_where_verify_is() -> None:
    k, x = gemm(n=8, grid=(2, 2)), gemm_inputs(8)
    with pytest.raises(dl.InputError, match="verify"):
        k.run(x, verify="adaptive")  # the local runtime trusts itself: no verify option
