"""Cost tests never read the user's calibrated constants."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTAL_CONFIG", str(tmp_path / "machine.json"))
