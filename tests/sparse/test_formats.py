"""Storage formats: named formats, custom Formats, bad formats, Tensor(format=...) and the
compile-time refusal of sparse tensors."""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import distal as dl
from distal.sparse.formats import NAMES, named_format, parse_format

# name -> (order, levels, storage order): what the contract says each name means
NAMED = {
    ("dense", 1): ("d", (0,)),
    ("dense", 2): ("dd", (0, 1)),
    ("dense", 3): ("ddd", (0, 1, 2)),
    ("csr", 2): ("dc", (0, 1)),
    ("csc", 2): ("dc", (1, 0)),
    ("dcsr", 2): ("cc", (0, 1)),
    ("dcsc", 2): ("cc", (1, 0)),
    ("coo", 1): ("q", (0,)),
    ("coo", 2): ("qs", (0, 1)),
    ("coo", 3): ("qss", (0, 1, 2)),
    ("coo", 4): ("qsss", (0, 1, 2, 3)),
    ("csf", 1): ("c", (0,)),
    ("csf", 2): ("cc", (0, 1)),
    ("csf", 3): ("ccc", (0, 1, 2)),
    ("dss", 3): ("dcc", (0, 1, 2)),
    ("dds", 3): ("ddc", (0, 1, 2)),
}


@pytest.mark.parametrize(("key", "expected"), list(NAMED.items()), ids=lambda v: str(v))
def test_named_formats(key: tuple[str, int], expected: tuple[str, tuple[int, ...]]) -> None:
    name, n = key
    f = named_format(name, n)
    assert (f.levels, f.order) == expected
    assert f == dl.Format(*expected)
    assert parse_format(name.upper(), n) == f  # names are case-insensitive
    assert f.ndim == n
    assert f.is_dense == (name == "dense")


def test_every_name_is_covered() -> None:
    assert {name for name, _ in NAMED} == set(NAMES)


def test_format_names_round_trip() -> None:
    """``Format.name`` gives back a name that parses to the same format."""
    for (_name, n), (levels, order) in NAMED.items():
        f = dl.Format(levels, order)
        assert f.name is not None
        assert named_format(f.name, n) == f
        assert str(f) == f.name
    # csf of order 2 is dcsr: the fixed-order name wins
    assert dl.Format("cc").name == "dcsr"
    assert dl.Format("dc").name == "csr"
    assert dl.Format("dc", order=(1, 0)).name == "csc"
    assert dl.Format("cdc").name is None
    assert str(dl.Format("cdc")) == "Format('cdc')"
    assert dl.Format("dc", order=(1, 0)).describe() == "csc (Format('dc', order=(1, 0)))"
    assert dl.Format("cdc").describe() == "Format('cdc')"


@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("csr", 3),
        ("csc", 1),
        ("dcsr", 3),
        ("dcsc", 4),
        ("dss", 2),
        ("dds", 4),
        ("coo", 0),
        ("csf", 0),
    ],
)
def test_named_format_of_the_wrong_order(name: str, n: int) -> None:
    with pytest.raises(dl.NotationError, match=name):
        named_format(name, n, "Tq")
    with pytest.raises(dl.NotationError, match=r"Tq"):
        named_format(name, n, "Tq")


def test_custom_formats() -> None:
    f = dl.Format("dc", order=(1, 0))
    assert f.levels == "dc"
    assert f.order == (1, 0)
    assert f == named_format("csc", 2)
    assert hash(f) == hash(named_format("csc", 2))
    assert f != dl.Format("dc")
    assert repr(f) == "Format('dc', order=(1, 0))"
    assert repr(dl.Format("cdc")) == "Format('cdc')"
    assert dl.Format("ccc", order=np.array([2, 0, 1])).order == (2, 0, 1)
    assert dl.Format("qsc").levels == "qsc"
    assert dl.Format("dqs").levels == "dqs"
    assert dl.Format("").ndim == 0
    assert dl.Format("").is_dense
    assert dl.Format("dd", order=(1, 0)).is_dense
    assert not dl.Format("dq").is_dense
    assert pickle.loads(pickle.dumps(f)) == f
    with pytest.raises(AttributeError):
        f.levels = "cc"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("levels", "order", "culprit"),
    [
        ("dx", None, r"'x'"),
        ("DC", None, r"'D'"),
        ("c-c", None, r"'-'"),
        ("s", None, r"singleton.*level 0"),
        ("dcs", None, r"singleton.*level 2"),
        ("ds", None, r"after 'd'"),
        ("dc", (0, 0), r"\(0, 0\)"),
        ("dc", (0, 1, 2), r"\(0, 1, 2\)"),
        ("dc", (1, 2), r"\(1, 2\)"),
        ("dc", "10", r"'10'"),
        ("dc", (0.0, 1.0), r"sequence of ints"),
        ("dc", (True, False), r"sequence of ints"),
        ("dc", 3, r"sequence of ints"),
    ],
)
def test_bad_formats(levels: str, order: object, culprit: str) -> None:
    with pytest.raises(dl.NotationError, match=culprit):
        dl.Format(levels, order)  # type: ignore[arg-type]


def test_bad_level_type() -> None:
    with pytest.raises(dl.NotationError, match=r"\['d'"):
        dl.Format(["d", "c"])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["csrr", "sparse", "bcsr", "dc", "qs"])
def test_unknown_format_names(name: str) -> None:
    with pytest.raises(dl.NotationError, match=rf"unknown format '{name}'"):
        parse_format(name, 2, "Tz")


def test_level_letters_as_a_name_point_to_format() -> None:
    with pytest.raises(dl.NotationError, match=r"dl\.Format\('cd'\)"):
        parse_format("cd", 2)


# -- Tensor(format=...) --------------------------------------------------------------------------


def test_tensor_format_default_is_dense() -> None:
    for shape in [(), (3,), (3, 4), (2, 3, 4)]:
        t = dl.Tensor("A", shape)
        assert t.format == dl.Format("d" * len(shape))
        assert t.format.is_dense
        assert t.format.name == "dense"
        assert "format" not in repr(t)
    assert dl.Tensor("A", (3, 4), format="dense").format == dl.Format("dd")


@pytest.mark.parametrize(("key", "expected"), list(NAMED.items()), ids=lambda v: str(v))
def test_tensor_named_formats(key: tuple[str, int], expected: tuple[str, tuple[int, ...]]) -> None:
    name, n = key
    t = dl.Tensor("Bq", (3,) * n, format=name)
    assert t.format == dl.Format(*expected)
    if name != "dense":
        assert f"format={t.format}" in repr(t)


def test_tensor_custom_format_and_distribution() -> None:
    m = dl.Machine(2)
    f = dl.Format("cdc", order=(2, 0, 1))
    t = dl.Tensor("C3", (4, 5, 6), format=f, dist="xyz -> x", machine=m)
    assert t.format is f
    assert t.distribution is not None
    # the positional arguments keep their meaning
    u = dl.Tensor("D2", (4, 4), "xy -> x", m, np.float32)
    assert u.dtype == np.float32
    assert u.format.is_dense


@pytest.mark.parametrize(
    ("shape", "fmt", "culprit"),
    [
        ((3, 4), "csx", r"'csx'.*Tbad"),
        ((3, 4, 5), "csr", r"'csr'.*Tbad.*order-2.*order 3"),
        ((3,), "dss", r"'dss'.*Tbad"),
        ((3, 4), dl.Format("ccc"), r"Format\('ccc'\).*Tbad.*3 levels.*order 2"),
        ((3, 4), 2, r"Tbad.*2"),
        ((), "coo", r"'coo'.*Tbad"),
    ],
)
def test_tensor_bad_formats(shape: tuple[int, ...], fmt: object, culprit: str) -> None:
    with pytest.raises(dl.NotationError, match=culprit):
        dl.Tensor("Tbad", shape, format=fmt)  # type: ignore[arg-type]


def test_format_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        dl.Tensor("A", (3, 4), None, None, np.float64, "csr")  # type: ignore[misc]


# -- compiling sparse tensors is refused -----------------------------------------------------------


def _spmv(a_format: object = "dense", y_format: object = "dense") -> dl.Schedule:
    i, j = dl.index_vars("i j")
    a = dl.Tensor("Asp", (6, 5), format=a_format)
    x = dl.Tensor("xvec", (5,))
    y = dl.Tensor("yvec", (6,), format=y_format)
    y[i] = a[i, j] * x[j]
    return dl.schedule(y)


@pytest.mark.parametrize("fmt", ["csr", "csc", "dcsr", "coo", dl.Format("cc", order=(1, 0))])
def test_a_sparse_input_compiles_and_its_stats_need_the_pattern(fmt: object) -> None:
    k = dl.compile(_spmv(fmt))
    with pytest.raises(dl.InputError, match=r"'Asp'"):
        k.stats()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 5)) * (rng.random((6, 5)) < 0.4)
    x = rng.standard_normal(5)
    res = k.run({"Asp": a, "xvec": x})
    np.testing.assert_allclose(res.value, a @ x, rtol=1e-12, atol=1e-12)
    assert res.stats == k.stats({"Asp": a})


def test_a_sparse_output_needs_a_sparse_input() -> None:
    with pytest.raises(dl.NotSupportedYet, match=r"'yvec' is sparse"):
        dl.compile(_spmv(y_format="coo"))


def test_dense_formats_compile_and_run() -> None:
    rng = np.random.default_rng(0)
    a, x = rng.standard_normal((6, 5)), rng.standard_normal(5)
    for fmt in ["dense", dl.Format("dd"), dl.Format("dd", order=(1, 0))]:
        k = dl.compile(_spmv(fmt))
        res = k.run({"Asp": a, "xvec": x})
        assert np.allclose(res.value, a @ x)


# -- layering: formats imports nothing heavy; importing distal imports no sparse library ---------


def test_formats_module_imports_only_errors() -> None:
    src = Path(dl.__file__).parent / "sparse" / "formats.py"
    tree = ast.parse(src.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    light = {"__future__", "numbers", "collections.abc", "dataclasses", "typing"}
    assert names <= light | {"distal.errors"}


def test_importing_distal_imports_no_sparse_library() -> None:
    code = (
        "import sys, distal\n"
        "t = distal.Tensor('A', (3, 4), format='csr')\n"
        "bad = [m for m in ('scipy', 'sparse', 'numba') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
