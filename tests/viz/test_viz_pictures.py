"""Pictures: files are produced, have sane sizes and are not blank."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="needs matplotlib (viz extra)")

from kernels_for_viz import cannon, johnson, ttm_replicated, vector

from distal.viz import Progress, VizError, plot_timeline, to_chrome_trace, traffic_matrix


def assert_picture(path, min_bytes=5000):
    import matplotlib.image as mpimg

    assert path.is_file()
    assert path.stat().st_size > min_bytes
    img = mpimg.imread(path)
    assert img.ndim == 3
    assert img.shape[0] > 100
    assert img.shape[1] > 100
    assert float(np.var(img[..., :3])) > 1e-4  # not blank


@pytest.mark.parametrize(
    ("make", "tensor"),
    [(cannon, "B"), (johnson, "B"), (johnson, "A"), (ttm_replicated, "B"), (vector, "x")],
)
def test_distribution_pictures(tmp_path, make, tensor):
    kernel = make()
    path = tmp_path / f"{tensor}.png"
    fig = kernel.plot_distribution(tensor, path)
    assert fig is not None
    assert_picture(path)


def test_distribution_svg_and_tensor_object(tmp_path):
    kernel = cannon()
    tensor = kernel.schedule.tensors()["C"]
    kernel.plot_distribution(tensor, tmp_path / "c.svg")
    text = (tmp_path / "c.svg").read_text()
    assert text.lstrip().startswith("<?xml")
    assert "<svg" in text


def test_distribution_errors(tmp_path):
    kernel = cannon()
    with pytest.raises(VizError, match="'Z'"):
        kernel.plot_distribution("Z")
    with pytest.raises(VizError, match=r"bad\.txt"):
        kernel.plot_distribution("B", tmp_path / "bad.txt")


def test_traffic_total_and_per_step(tmp_path):
    kernel = johnson()
    kernel.plot_traffic(tmp_path / "all.png")
    kernel.plot_traffic(tmp_path / "s0.png", step=0)
    assert_picture(tmp_path / "all.png")
    assert_picture(tmp_path / "s0.png")
    w = traffic_matrix(kernel.plan)
    assert list(w.sum(axis=0)) == list(kernel.stats().words_received)
    assert list(w.sum(axis=1)) == list(kernel.stats().words_sent)
    with pytest.raises(VizError, match="step 7"):
        kernel.plot_traffic(step=7)


def test_traffic_without_messages(tmp_path):
    ttm_replicated().plot_traffic(tmp_path / "none.png")
    assert_picture(tmp_path / "none.png", 3000)


def test_timeline_and_chrome_trace_of_a_real_run(tmp_path):
    kernel = cannon(64)
    rng = np.random.default_rng(0)
    res = kernel.run({"B": rng.random((64, 64)), "C": rng.random((64, 64))})
    assert res.trace, "the local runtime records events"
    res.plot_timeline(tmp_path / "t.png")
    assert_picture(tmp_path / "t.png")
    doc = res.to_chrome_trace(tmp_path / "t.json")
    loaded = json.loads((tmp_path / "t.json").read_text())
    assert loaded == json.loads(json.dumps(doc))
    xs = [e for e in loaded["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(res.trace)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 and 0 <= e["pid"] < 4 for e in xs)
    assert {e["name"] for e in xs} >= {"compute", "fetch"}
    names = [e for e in loaded["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(names) == 4


def test_timeline_errors():
    with pytest.raises(VizError, match="empty"):
        plot_timeline([])
    with pytest.raises(VizError, match="no trace"):
        to_chrome_trace(object())


def test_progress_silent_when_not_a_terminal():
    out = io.StringIO()
    bar = Progress(3, 2, stream=out)
    assert not bar.enabled
    for s in range(3):
        for p in range(2):
            bar.advance(p, s)
    bar.close()
    assert out.getvalue() == ""
    assert bar.done == [3, 3]


def test_progress_forced_and_switched_off(monkeypatch):
    pytest.importorskip("rich", reason="needs rich (viz extra)")
    out = io.StringIO()
    with Progress(2, 3, enabled=True, stream=out) as bar:
        for s in range(2):
            for p in range(3):
                bar.advance(p, s)
        assert bar.active
    assert not bar.active
    monkeypatch.setenv("DISTAL_PROGRESS", "0")
    assert not Progress(2, 3, enabled=True).enabled
