"""The cost model, parameter files and ``distal calibrate``."""

from __future__ import annotations

import json

import pytest

import distal as dl
from distal.cli import main
from distal.cost.model import (
    CLUSTERS,
    DEFAULT_PARAMS,
    CostModelError,
    MachineParams,
    calibrate,
    config_path,
    load_params,
    plan_cost,
    save_params,
)


def _summa(n=16, g=2):
    return dl.algorithms.summa(n, machine=dl.Machine(g, g), steps=g).compile(routing="auto")


def test_cost_by_hand():
    kern = _summa()
    st = kern.stats()
    p = MachineParams(alpha=1.0, beta=0.5, gamma=0.25)
    c = plan_cost(kern, p)
    per = [
        1.0 * max(st.messages_received[q], st.messages_sent[q])
        + 0.5 * max(st.words_received[q], st.words_sent[q])
        + 0.25 * 2 * st.iterations[q]
        for q in range(4)
    ]
    assert c.per_processor == tuple(per)
    assert c.seconds == max(per)
    assert c.peak_words == st.max_peak_words
    assert c.peak_bytes == 8 * st.max_peak_words
    assert c.max_words == st.max_words_received


def test_params_files(tmp_path, monkeypatch):
    assert load_params() == CLUSTERS["hdr"] == DEFAULT_PARAMS
    path = save_params(MachineParams(1e-6, 2e-9, 3e-11), tmp_path / "m.json", {"note": 1})
    got = load_params(path)
    assert (got.alpha, got.beta, got.gamma) == (1e-6, 2e-9, 3e-11)
    assert got.source.startswith("calibrated")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CostModelError, match=r"bad\.json"):
        load_params(tmp_path / "bad.json")
    with pytest.raises(CostModelError, match=r"missing\.json.*does not exist"):
        load_params(tmp_path / "missing.json")
    with pytest.raises(CostModelError, match="beta"):
        MachineParams(1.0, -1.0, 1.0)


def test_defaults_never_read_a_file(tmp_path, monkeypatch):
    """A calibration file (here: at $DISTAL_CONFIG, as ``distal calibrate`` writes it)
    changes nothing unless it is asked for: compiles are the same on every computer."""
    kern = _summa()
    before = plan_cost(kern)
    path = save_params(MachineParams(1.0, 1.0, 1.0), tmp_path / "machine.json")
    monkeypatch.setenv("DISTAL_CONFIG", str(path))
    assert config_path() == path
    assert load_params() == DEFAULT_PARAMS
    assert plan_cost(kern) == before
    assert load_params(config_path()).alpha == 1.0  # explicitly asked for
    assert plan_cost(kern, load_params(config_path())).seconds > before.seconds


def test_calibrate_measures_something():
    params, raw = calibrate(quick=True)
    assert 0 < params.alpha < 1e-2
    assert 0 < params.beta < 1e-6
    assert 0 < params.gamma < 1e-6
    assert raw["gemm_gflops"] > 0


def test_cli_calibrate(tmp_path, capsys):
    out = tmp_path / "sub" / "machine.json"
    assert main(["calibrate", "--quick", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {"alpha", "beta", "gamma"} <= set(data)
    assert "stored in" in capsys.readouterr().out
