"""``dl.compile`` gives the same plan on every computer: machine constants only when passed.

``routing="auto"`` ranks routings with the cost model. Its constants come from ``params=``
or else the model's fixed defaults -- never from a calibration file or the environment.
"""

from __future__ import annotations

import json

import pytest

import distal as dl
from distal.cost.model import MachineParams, load_params


def _schedule():
    return dl.algorithms.row_1d(4096, machine=dl.Machine(8)).schedule


def test_a_calibration_file_is_read_only_when_asked(tmp_path, monkeypatch) -> None:
    baseline = dl.compile(_schedule()).routing
    free = MachineParams(0.0, 0.0, 0.0)
    assert dl.compile(_schedule(), params=free).routing == "direct"  # all tie: simplest
    assert baseline != "direct"
    cfg = tmp_path / "machine.json"
    cfg.write_text(json.dumps({"alpha": 0.0, "beta": 0.0, "gamma": 0.0}))
    monkeypatch.setenv("DISTAL_CONFIG", str(cfg))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".config" / "distal").mkdir(parents=True)
    (tmp_path / ".config" / "distal" / "machine.json").write_text(cfg.read_text())
    assert dl.compile(_schedule()).routing == baseline  # the file changes nothing
    asked = dl.compile(_schedule(), params=load_params(cfg))
    assert asked.routing == "direct"  # ... unless it is passed
    assert asked.stats().as_dict() == dl.compile(_schedule(), "direct").stats().as_dict()


def test_params_must_be_machine_params() -> None:
    with pytest.raises(dl.ScheduleError, match="MachineParams"):
        dl.compile(_schedule(), params={"alpha": 1.0})
