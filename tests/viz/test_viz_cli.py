"""``distal explain | plot | simulate`` on small cases."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib", reason="needs matplotlib (viz extra)")

from distal.cli import main
from distal.cli_study import canonical, parse_expression, product_form

GEMM = "A(i,j) = B(i,k) * C(k,j)"


def test_parse_index_notation_and_einsum():
    p = parse_expression("A(i,j) = B(i,k) * C(k,j) + 2 * D(i,j)")
    assert p.out == "A"
    assert p.out_vars == ["i", "j"]
    assert p.tensors == {"A": ["i", "j"], "B": ["i", "k"], "C": ["k", "j"], "D": ["i", "j"]}
    assert product_form(p) is None
    q = parse_expression("ik,kj->ij")
    assert canonical(product_form(q))[0] == "ab,bc->ac"
    assert canonical(product_form(parse_expression(GEMM)))[0] == "ab,bc->ac"


def test_explain(capsys):
    assert main(["explain", GEMM, "--n", "32", "--machine", "2x2", "--algorithm", "cannon"]) == 0
    out = capsys.readouterr().out
    assert "rotate" in out
    assert "per processor" in out


@pytest.mark.parametrize("kind", ["distribution", "traffic", "timeline", "simulated"])
def test_plot(tmp_path, capsys, kind):
    path = tmp_path / f"{kind}.png"
    argv = ["plot", "ik,kj->ij", "--n", "32", "--machine", "2x2", "--algorithm", "summa"]
    assert main([*argv, "--kind", kind, "--tensor", "B", "-o", str(path)]) == 0
    assert path.stat().st_size > 5000


def test_simulate(tmp_path, capsys):
    argv = ["simulate", "ijk,jl,kl->il", "--n", "16", "--machine", "2x2x2", "--algorithm"]
    trace = tmp_path / "sim.json"
    assert main([*argv, "mttkrp", "--network", "fat-tree-hdr", "--chrome-trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "simulated on fat-tree-hdr" in out
    assert trace.is_file()


def test_auto(capsys):
    assert main(["explain", GEMM, "--n", "32", "--machine", "4", "--algorithm", "auto"]) == 0
    assert "per processor" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["explain", "ik,kj->ij", "--algorithm", "nope"], "unknown algorithm 'nope'"),
        (["explain", "A(i,j) = B(i,k) * C(k,j) + D(i,j)", "--algorithm", "cannon"], "a sum"),
        (["explain", "A(i,j) = B(i,k) *", "--algorithm", "cannon"], "expected"),
        (["explain", GEMM, "--sizes", "q=4", "--algorithm", "cannon"], "'q'"),
    ],
)
def test_errors_name_the_culprit(capsys, argv, needle):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_explain_lists_a_processors_program(capsys) -> None:
    from distal.cli import main

    assert main(["explain", "A(i,j) = B(i,k) * C(k,j)", "--n", "8", "--processor", "3"]) == 0
    out = capsys.readouterr().out
    assert "program of processor 3" in out
    assert "fetch B[4:8, 0:8]: [4:8, 0:4] from 2, [4:8, 4:8] own" in out


@pytest.mark.parametrize("where", ["/proc/x.png", "FILE/x.png"])
def test_plot_to_an_unwritable_place_is_a_viz_error(tmp_path, capsys, where):
    """``-o`` naming a place that cannot hold a file: one VizError line, exit 2."""
    (tmp_path / "FILE").write_text("a regular file, not a directory")
    path = where.replace("FILE", str(tmp_path / "FILE"))
    argv = ["plot", "ik,kj->ij", "--n", "8", "--machine", "2x2", "--algorithm", "summa"]
    assert main([*argv, "-o", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: VizError: cannot write the picture to")
    assert repr(path) in err
    assert "Traceback" not in err


def test_plot_api_raises_viz_error_for_an_unwritable_path():
    import distal as dl
    from distal.viz import VizError

    kernel = dl.algorithms.summa(8, machine=dl.Machine(2, 2)).compile()
    with pytest.raises(VizError, match=r"/proc/x\.png"):
        kernel.plot_distribution("B", "/proc/x.png")
