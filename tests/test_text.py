"""Printed sizes, times and counts: one set of units across the CLI, explain() and the
simulator's summary (``distal.text``)."""

from __future__ import annotations

import re

import pytest

import distal as dl
from distal.cli import main
from distal.text import plural, size_text, time_text, time_unit


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1 kB"),
        (2765, "2.77 kB"),
        (999_999, "1 MB"),  # never "1000 kB"
        (33_554_432, "33.6 MB"),
        (4_123_168.604e6, "4.12 TB"),  # the simulator's 4123168.604 MB
        (250e9, "250 GB"),
    ],
)
def test_size_text(nbytes: float, text: str) -> None:
    assert size_text(nbytes) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0 s"),
        (9.37219e-05, "93.72 µs"),  # the simulator's 9.37219e-05 s
        (16.8191, "16.82 s"),
        (0.0644151, "64.42 ms"),
        (0.99999, "1 s"),  # never "1000 ms"
        (3.5e-9, "3.5 ns"),
        (2.5e-12, "2.5 ps"),
    ],
)
def test_time_text(seconds: float, text: str) -> None:
    assert time_text(seconds) == text


def test_time_unit_is_the_axis_unit() -> None:
    assert time_unit(6.5e-5) == ("µs", 1e6)
    assert time_unit(-1.0) == ("s", 1.0)


def test_plural() -> None:
    assert [plural(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(3, "entry", "entries") == "3 entries"


UNIT = r"\d+(\.\d+)? (B|kB|MB|GB|TB|PB)"
TIME = r"\d+(\.\d+)? (s|ms|µs|ns|ps)"


def test_simulate_prints_human_units(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "ik,kj->ij", "--n", "131072", "--machine", "16x16"]
    assert main([*argv, "--algorithm", "cannon", "--network", "fat-tree-hdr"]) == 0
    head = capsys.readouterr().out.splitlines()[1]
    m = re.fullmatch(rf"simulated on fat-tree-hdr \(parallel\): ({TIME}), .*, ({UNIT})", head)
    assert m is not None, head
    assert not re.search(r"\de-\d", head)  # no exponents
    assert "MB" not in head  # terabytes, not millions of megabytes
    assert 1 <= float(m.group(4).split()[0]) < 1000


def test_simulate_breakdown_cells_have_units() -> None:
    k = dl.algorithms.cannon(64, machine=dl.Machine(2, 2)).compile()
    rows = k.simulate("fat-tree-edr").summary().splitlines()[2:]
    assert rows
    for row in rows:
        _kind, *cells = re.split(r"\s{2,}", row.strip())
        assert len(cells) == 2, row
        assert all(re.fullmatch(TIME, c) for c in cells), row


def test_explain_counts_one_step_in_the_singular(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explain", "A(i,j) = B(i,k) * C(k,j)", "--n", "8", "--machine", "1x1"]
    assert main([*argv, "--algorithm", "cannon", "--processor", "0"]) == 0
    out = capsys.readouterr().out
    assert "data (1 step per processor):" in out
    assert "program of processor 0 (1 step; sends 0 messages, 0 words;" in out
    assert "1 steps" not in out


def test_repr_declares_variables_without_a_stray_comma() -> None:
    k = dl.algorithms.cannon(8, machine=dl.Machine(2, 2)).compile()
    head = repr(k.schedule).splitlines()[0]
    assert re.fullmatch(r"(\w+, )+\w+ = dl\.index_vars\('[\w ]+'\)", head), head
    names = head.split(" = ")[0].split(", ")
    scope: dict = {"dl": dl}
    exec(head, scope)  # pasteable: it runs and binds every name
    assert [scope[n].name for n in names] == names


def test_repr_of_one_new_variable_keeps_the_unpacking_comma() -> None:
    M = dl.Machine(2)
    i, j, f = dl.index_vars("i j f")
    A = dl.Tensor("A", (4, 4), dist="xy -> x", machine=M)
    B = dl.Tensor("B", (4, 4), dist="xy -> x", machine=M)
    A[i, j] = B[i, j]
    head = repr(dl.schedule(A).fuse(i, j, f)).splitlines()[0]
    assert head == "f, = dl.index_vars('f')"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["demo", "--grid", "0x2"], "grid '0x2' has an extent of 0"),
        (["demo", "--grid", "2y2"], "grid must look like GXxGY"),
        (["explain", "ik,kj->ij", "--machine", "2x0"], "machine '2x0' has an extent of 0"),
    ],
)
def test_grid_errors_say_what_is_wrong(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert needle in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"distal {dl.__version__}"
