"""Untrusted pools: a worker that corrupts results, randomized checks, quorums, TLS."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elastic_helpers import (
    gemm,
    gemm_inputs,
    mttkrp,
    mttkrp_expected,
    mttkrp_inputs,
    process_pool,
)

import distal as dl
from distal.runtime.dask import decompose
from distal.runtime.elastic import check, tasks

pytestmark = [pytest.mark.dask, pytest.mark.timeout(90)]

LIAR = {"DISTAL_FAULT_CORRUPT": "0.5"}


def _liar(client: Any) -> str:
    """The address of the worker whose process has the fault hook set."""
    env = client.run(lambda: __import__("os").environ.get("DISTAL_FAULT_CORRUPT", ""))
    return next(a for a, q in env.items() if q)


@pytest.fixture(scope="module")
def liar_pool() -> Any:
    with process_pool([LIAR, {}, {}]) as c:
        yield c


def _problems() -> list[tuple[str, Any, dict[str, np.ndarray], np.ndarray]]:
    # 64 and 48 units (granularity="step"): the liar computes about a third of them, each
    # wrong with probability 1/2, so a run where it is never caught has odds ~2^-16
    g, gx = gemm(), gemm_inputs()
    m, mx = mttkrp(n=24, grid=(4, 4)), mttkrp_inputs(n=24)
    return [("gemm", g, gx, gx["B"] @ gx["C"]), ("mttkrp", m, mx, mttkrp_expected(mx))]


@pytest.mark.parametrize("verify", ["check", 3, "adaptive"])
def test_a_lying_worker_is_caught_excluded_and_its_units_recomputed(
    liar_pool: Any, verify: Any
) -> None:
    liar = _liar(liar_pool)
    for name, k, x, want in _problems():
        res = k.run(
            x, runtime="dask", client=liar_pool, verify=verify, granularity="step", timeout=60
        )
        assert np.allclose(res.value, want, rtol=1e-12, atol=0), name
        s = res.extra["summary"]
        print(name, s, s.rejections)
        assert s.excluded_workers == [liar], (name, str(s))
        assert s.units_rejected >= 1
        assert all(r["worker"] == liar for r in s.rejections)
        if verify in ("check", "adaptive"):
            # every rejected unit was recomputed, on a worker other than the liar
            assert all(r.get("recomputed_on") not in (None, liar) for r in s.rejections)
        if verify == "check":
            assert s.checked == len(decompose(k.plan, "step"))
            if name == "mttkrp":
                assert s.reductions_checked == len(k.plan.primary)
        assert "excluded workers: " + liar in str(s)


def test_without_verification_the_corruption_gets_through() -> None:
    """The hook is real: with q=1 every unit the worker returns is wrong, and verify=1
    accepts them."""
    with process_pool([{"DISTAL_FAULT_CORRUPT": "1.0"}, {}, {}]) as c:
        k, x = gemm(), gemm_inputs()
        res = k.run(x, runtime="dask", client=c, speculate=False, timeout=60)
        liar = _liar(c)
    assert res.extra["summary"].per_worker.get(liar, 0) >= 1
    assert not np.allclose(res.value, x["B"] @ x["C"], rtol=1e-12)
    assert res.extra["summary"].excluded_workers == []


def test_a_lying_reducer_is_caught_and_its_block_summed_again(liar_pool: Any) -> None:
    """MTTKRP on 2x2 processors sums partials into 2 blocks. The liar (q=0.5, units and
    reductions alike) is usually caught on a unit before it sums a block, so the run is
    repeated until one of its reductions was rejected (each run ~1/6; 80 runs miss with
    odds ~5e-7); every run must be exact and exclude only the liar."""
    liar = _liar(liar_pool)
    k, x = mttkrp(), mttkrp_inputs()
    want = mttkrp_expected(x)
    blocks = len(k.plan.primary)
    for _ in range(80):
        res = k.run(x, runtime="dask", client=liar_pool, verify="check", timeout=60)
        assert np.array_equal(res.value, want)
        s = res.extra["summary"]
        assert s.excluded_workers in ([], [liar]), str(s)
        assert all(r["worker"] == liar for r in s.rejections)
        assert s.reductions_checked == blocks
        red = [r for r in s.rejections if r["kind"] == "reduction"]
        if red:
            break
    else:
        pytest.fail("the liar never had a reduction rejected in 80 runs")
    assert s.excluded_workers == [liar]
    assert s.reductions_rejected == len({r["unit"] for r in red}) >= 1
    assert all(r["unit"].startswith("block-") for r in red)
    assert all(r.get("recomputed_on") not in (None, liar) for r in red)
    assert "reduction(s) recomputed elsewhere" in str(s)


def _done_on(client: Any, worker: str) -> tuple[int, int]:
    """Units and reductions the last run computed on ``worker`` (from the event log)."""
    topics = {t: ev for t, ev in client.get_events().items() if str(t).startswith("distal-")}
    last = max(topics, key=lambda t: max(e[0] for e in topics[t]))
    done = [
        m
        for _, m in topics[last]
        if m["kind"] == "done" and m["worker"] == worker and m.get("status") == "computed"
    ]
    units = sum(1 for m in done if m.get("unit"))
    blocks = sum(1 for m in done if str(m["name"]).startswith("block-"))
    return units, blocks


def test_without_verification_a_corrupted_reduction_gets_through() -> None:
    """q=1: every unit and every reduction the liar returns is off by exactly 1.0 in one
    element (integer data: all sums exact), so with verify=1 the output's total error is
    the number of tasks it computed, reductions included."""
    with process_pool([{"DISTAL_FAULT_CORRUPT": "1.0"}, {}, {}]) as c:
        liar = _liar(c)
        k, x = mttkrp(n=24, grid=(4, 4)), mttkrp_inputs(n=24)
        want = mttkrp_expected(x)
        for _ in range(20):
            res = k.run(x, runtime="dask", client=c, speculate=False, timeout=60)
            units, blocks = _done_on(c, liar)
            assert float(np.sum(res.value - want)) == units + blocks
            if blocks:
                break
        else:
            pytest.fail("the liar summed no block in 20 runs")
        assert res.extra["summary"].excluded_workers == []


def test_the_reduction_check_accepts_correct_sums_and_rejects_any_single_change() -> None:
    """Random (non-integer) partials: the rounding of a correct sum is within the bound; an
    error far below the data's size is caught; inf/nan summands are summed again."""
    rng = np.random.default_rng(3)
    ctx = tasks.Ctx("t", (), np.dtype(np.float64), None, lambda: None)
    box = ((4, 20), (0, 9))
    # three partials: one covering the block, two covering parts of it (one beyond it)
    boxes = [((4, 20), (0, 9)), ((4, 12), (0, 9)), ((10, 24), (3, 9))]
    pieces = [((4, 20), (0, 9)), ((4, 12), (0, 9)), ((10, 20), (3, 9))]
    contribs = [
        (rng.standard_normal(tuple(hi - lo for lo, hi in b)) * 1e3, b, p, 0, -1)
        for b, p in zip(boxes, pieces, strict=True)
    ]
    block, _ = tasks._sum_block(ctx, box, contribs)
    for seed in range(20):
        v = tasks.reduction_verdict(ctx, box, contribs, block, seed, None)
        assert v.ok, v
        assert v.diff <= v.tol
        e = block.copy()
        e.reshape(-1)[(7 * seed) % e.size] += 1e-6  # relative 1e-9 of entries ~1e3
        assert not tasks.reduction_verdict(ctx, box, contribs, e, seed, None).ok
    # a wrong shape, or a nan in the claimed block, never passes
    assert not tasks.reduction_verdict(ctx, box, contribs, block[:-1], 0, None).ok
    bad = block.copy()
    bad[0, 0] = np.nan
    assert not tasks.reduction_verdict(ctx, box, contribs, bad, 0, None).ok
    # a summand with inf: checked by summing again (exact, nan for nan)
    arr = contribs[1][0].copy()
    arr[0, 0] = np.inf
    contribs[1] = (arr, *contribs[1][1:])
    block, _ = tasks._sum_block(ctx, box, contribs)
    v = tasks.reduction_verdict(ctx, box, contribs, block, 0, None)
    assert v.ok
    assert v.exact
    bad = block.copy()
    bad[3, 3] += 1.0
    assert not tasks.reduction_verdict(ctx, box, contribs, bad, 0, None).ok


def _calls(k: Any, x: dict[str, np.ndarray], unit: Any) -> tuple[Any, list[Any]]:
    ctx = tasks.Ctx("t", k.kernels, np.dtype(np.float64), None, lambda: None)
    blocks = []
    for t, idx in unit.needs:
        box = k.plan.placements[t].block_box(idx)
        blocks.append((t, box, x[t][tuple(slice(lo, hi) for lo, hi in box)]))
    return ctx, blocks


@pytest.mark.parametrize("kind", ["gemm", "mttkrp"])
def test_the_check_accepts_correct_results_and_rejects_any_single_change(kind: str) -> None:
    """Random (non-integer) data: the rounding of a correct result is within the bound; an
    error far below the data's size (1e-9 on entries of size ~1) is caught."""
    k = gemm(n=32) if kind == "gemm" else mttkrp()
    rng = np.random.default_rng(7)
    shapes = {t: k.plan.placements[t].shape for t in k.plan.inputs}
    x = {t: rng.standard_normal(s) for t, s in shapes.items()}
    for unit in decompose(k.plan)[:4]:
        ctx, blocks = _calls(k, x, unit)
        out, _, _ = tasks._compute(ctx, unit, blocks)
        for seed in range(5):
            v = tasks.verdict(ctx, unit, blocks, out, seed, None)
            assert v.ok, v
            assert v.diff <= v.tol
            assert (v.reps, v.dims) == (1, 2)
            e = out.copy()
            e.reshape(-1)[seed % out.size] += 1e-9
            assert not tasks.verdict(ctx, unit, blocks, e, seed, None).ok
        # a non-finite result never passes
        bad = out.copy()
        bad.reshape(-1)[0] = np.nan
        assert not tasks.verdict(ctx, unit, blocks, bad, 0, None).ok


def test_repetitions_and_the_false_accept_bound() -> None:
    assert check.default_repeats(2) == 1  # 2 / 2^21 = 2^-20
    assert check.default_repeats(3) == 2
    assert check.false_accept_bound(2, 1) <= 2.0**-20
    assert check.false_accept_bound(3, check.default_repeats(3)) <= 2.0**-20
    r = check.vectors(1, [5, 7], 3)
    assert [a.shape for a in r] == [(3, 5), (3, 7)]
    assert all(((np.abs(a) >= 1) & (np.abs(a) < 2)).all() for a in r)
    # an error that +-1 vectors miss 3/4 of the time (all ones on a 2x2 block) is caught by
    # every draw from the larger set: (r1 + r2)(s1 + s2) never vanishes for |r|, |s| in [1,2)
    # with equal signs, and vanishes only when r1 = -r2 or s1 = -s2 (probability 2^-20 each)
    caught = 0
    for seed in range(200):
        ri, rj = check.vectors(seed, [2, 2], 1)
        caught += abs(ri[0].sum() * rj[0].sum()) > 0
    assert caught == 200


def test_verify_options_are_checked(liar_pool: Any) -> None:
    k, x = gemm(n=8, grid=(2, 2)), gemm_inputs(8)
    with pytest.raises(dl.InputError, match="verify must be a positive integer, 'check' or"):
        k.run(x, runtime="dask", client=liar_pool, verify="freivalds")
    with pytest.raises(dl.InputError, match="verify_repeats"):
        k.run(x, runtime="dask", client=liar_pool, verify="check", verify_repeats=0)


def test_two_copies_must_still_agree(liar_pool: Any) -> None:
    """verify=2 keeps its meaning: two copies, a disagreement fails the run."""
    k, x = gemm(n=16, grid=(2, 2)), gemm_inputs(16)

    def runs() -> None:
        for _ in range(6):  # each copy on the liar is wrong with probability 1/2
            k.run(x, runtime="dask", client=liar_pool, verify=2, granularity="step")

    with pytest.raises(dl.RuntimeFailure, match="disagrees between workers"):
        runs()


def test_checked_runs_checkpoint_only_checked_results(liar_pool: Any, tmp_path: Path) -> None:
    k, x = mttkrp(), mttkrp_inputs()
    want = mttkrp_expected(x)
    r1 = k.run(x, runtime="dask", client=liar_pool, verify="check", checkpoint=tmp_path)
    assert np.allclose(r1.value, want, rtol=1e-12, atol=0)
    r2 = k.run(x, runtime="dask", client=liar_pool, checkpoint=tmp_path)
    assert r2.tasks_executed == 0
    assert np.allclose(r2.value, want, rtol=1e-12, atol=0)


# --- TLS -------------------------------------------------------------------------------


def _certificates(where: Path) -> tuple[str, str, str]:
    """A CA and one certificate it signed for 127.0.0.1 (ca file, cert file, key file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "distal test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    files = where / "ca.pem", where / "cert.pem", where / "key.pem"
    files[0].write_bytes(ca.public_bytes(pem))
    files[1].write_bytes(cert.public_bytes(pem))
    files[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tuple(str(f) for f in files)  # type: ignore[return-value]


def test_a_tls_pool_runs_and_refuses_a_worker_without_the_certificate(tmp_path: Path) -> None:
    from distributed.security import Security

    ca, cert, key = _certificates(tmp_path)
    sec = Security(
        tls_ca_file=ca,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        require_encryption=True,
    )
    with process_pool([{}, {}], security=sec) as c:
        addr = c.scheduler.address
        assert addr.startswith("tls://")
        k, x = gemm(), gemm_inputs()
        res = k.run(x, runtime="dask", client=c, verify="check", timeout=60)
        assert np.allclose(res.value, x["B"] @ x["C"], rtol=1e-12, atol=0)
        before = len(c.scheduler_info()["workers"])
        # a worker with no certificate (the CLI, as on another machine) cannot join
        intruder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                addr,
                "--nthreads",
                "1",
                "--no-nanny",
                "--death-timeout",
                "8",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, err = intruder.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            intruder.kill()
            _, err = intruder.communicate()
        time.sleep(0.5)
        assert len(c.scheduler_info()["workers"]) == before == 2
        assert intruder.returncode != 0, err[-2000:]
        # with the certificate the same command joins
        joined = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                addr,
                "--nthreads",
                "1",
                "--no-nanny",
                "--tls-ca-file",
                ca,
                "--tls-cert",
                cert,
                "--tls-key",
                key,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            c.wait_for_workers(3, timeout=30)
            assert len(c.scheduler_info()["workers"]) == 3
        finally:
            joined.terminate()
            joined.communicate(timeout=30)
