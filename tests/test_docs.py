"""The ```python blocks of README.md and docs/*.md run and do what their comments say.

Blocks indented inside a list item run too (their indentation removed).

A file's blocks run in order in one namespace (later blocks continue earlier ones, as a
reader pastes them), in a fresh temporary working directory per file, so a snippet that
writes files writes them there. A file saying ``<!-- doc-test: every block stands alone -->``
(the generated gallery, docs/algorithms.md) runs each block in a fresh namespace instead:
every fragment must carry its own imports. A block that cannot run here is marked in the Markdown by
an HTML comment on the line before its fence, ``<!-- no-run: reason -->``, and reported as
a skip with that reason: the reason is part of the docs, not of this test.

Each block is its own test (``-k algorithms.md`` selects one file); a block run alone first
runs the file's earlier blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: a ```python fence, at the margin or indented (a block inside a list item): the block's
#: lines lose that indentation
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python\s*$")
NO_RUN = re.compile(r"^<!--\s*no-run:\s*(?P<reason>.+?)\s*-->\s*$")
ALONE = "<!-- doc-test: every block stands alone -->"


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its code, and why it is not run (if it is not)."""

    path: Path
    line: int  # 1-based line of the opening fence
    code: str
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, with the no-run reason written before any."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    k = 0
    while k < len(lines):
        fence = FENCE.match(lines[k])
        if not fence:
            k += 1
            continue
        indent = fence["indent"]
        start = k
        k += 1
        body = []
        while k < len(lines) and lines[k].strip() != "```":
            line = lines[k]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            k += 1
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        m = NO_RUN.match(prev.strip())
        out.append(Block(path, start + 1, "\n".join(body) + "\n", m["reason"] if m else None))
        k += 1
    return out


BLOCKS = [b for f in FILES for b in blocks_of(f)]


@dataclass
class FileRun:
    """One file's namespace and how far its blocks have run."""

    cwd: Path
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__main__"})
    done: set[int] = field(default_factory=set)
    failed: str | None = None


_RUNS: dict[Path, FileRun] = {}


#: optional packages a block may need (the extras .ci/run installs): without one the block,
#: and the blocks after it in its file, are skipped with the package named
OPTIONAL = {"dask", "distributed", "matplotlib", "mpi4py", "zarr", "scipy", "sparse", "xxhash"}


def _missing_extra(e: BaseException) -> str | None:
    """The optional package whose absence ``e`` reports (directly or as distal's
    ``NotSupportedYet`` naming the extra to install), else None."""
    for x in (e, e.__cause__):
        if isinstance(x, ModuleNotFoundError) and (x.name or "").split(".")[0] in OPTIONAL:
            return x.name
    return None


def _run(block: Block, run: FileRun, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(run.cwd)
    try:
        exec(compile(block.code, block.name, "exec"), run.namespace)
    except BaseException as e:
        missing = _missing_extra(e)
        run.failed = block.name if missing is None else f"skip: needs {missing}"
        if missing is not None:
            pytest.skip(f"needs the optional package {missing!r} (pip install -e '.[...]')")
        raise
    finally:
        run.done.add(block.line)


def test_every_file_has_blocks_and_reasons_are_given():
    """The collection itself: blocks are found, and every no-run marker names a reason."""
    assert len(BLOCKS) > 20
    assert {b.path.name for b in BLOCKS} >= {"README.md", "algorithms.md", "api.md"}
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for line in text.splitlines():
            if "no-run" in line:
                assert NO_RUN.match(line.strip()), f"{path.name}: malformed marker {line!r}"


def test_blocks_of_reads_markers_and_fences(tmp_path):
    """A marker applies to the next block only; other fences are not Python blocks."""
    md = tmp_path / "x.md"
    md.write_text(
        "text\n```python\na = 1\n```\n\n<!-- no-run: needs a cluster -->\n```python\nb = 2\n```\n"
        "```sh\nls\n```\n```python\nc = 3\n```\n"
    )
    got = blocks_of(md)
    indented = tmp_path / "y.md"
    indented.write_text("* item\n\n  ```python\n  x = 1\n  if x:\n      y = 2\n  ```\n")
    assert [(b.line, b.code) for b in blocks_of(indented)] == [(3, "x = 1\nif x:\n    y = 2\n")]
    assert [(b.line, b.code, b.skip) for b in got] == [
        (2, "a = 1\n", None),
        (7, "b = 2\n", "needs a cluster"),
        (13, "c = 3\n", None),
    ]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_block_runs(block: Block, tmp_path_factory: pytest.TempPathFactory, monkeypatch):
    if block.skip is not None:
        pytest.skip(f"no-run: {block.skip}")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("DISTAL_PROGRESS", "0")
    if ALONE in block.path.read_text(encoding="utf-8"):
        _run(block, FileRun(tmp_path_factory.mktemp(block.path.stem)), monkeypatch)
        return
    run = _RUNS.get(block.path)
    if run is None:
        run = _RUNS[block.path] = FileRun(tmp_path_factory.mktemp(block.path.stem))
    for earlier in BLOCKS:
        if earlier.path != block.path or earlier.line >= block.line:
            continue
        if earlier.skip is None and earlier.line not in run.done:
            _run(earlier, run, monkeypatch)
    if run.failed is not None and run.failed.startswith("skip: "):
        pytest.skip(f"an earlier block of this file {run.failed[6:]}")
    if run.failed is not None:
        pytest.fail(f"an earlier block of this file failed: {run.failed}")
    _run(block, run, monkeypatch)


# -- the README's first command: `distal demo` says what limits distal -----------------------


def _event(kind: str, proc: int, start: float, end: float) -> Any:
    from distal.trace import Event

    return Event(proc, kind, 0, start, end)


def _fake_run(seconds: float, trace: list[Any]) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(seconds=seconds, trace=trace)


def test_demo_names_what_limits_distal():
    """README: below 0.9x numpy the demo says why. Copies that overlap count once; a run
    held back by small blocks and by copies names both, a fair run names nothing."""
    from distal.cli import demo_limits

    gemms = (8, (512, 512, 512))
    trace = [_event("fetch", p, 0.0, 0.03) for p in range(4)]  # one step's copies, shared
    trace += [_event("compute", p, 0.03 + 0.01 * p, 0.04 + 0.01 * p) for p in range(4)]
    slow = demo_limits(_fake_run(0.1, trace), 1024, numpy_s=0.05, blocks_s=0.07, gemms=gemms)
    assert "copies between processors 0.0300 s (30%)" in slow[0]
    why = [line for line in slow if line.startswith("limited by:")]
    assert any("too small for BLAS" in w for w in why)
    assert any("copying fetched blocks" in w and "30%" in w for w in why)
    fair = demo_limits(_fake_run(0.1, trace), 1024, numpy_s=0.095, blocks_s=0.07, gemms=gemms)
    assert not [line for line in fair if line.startswith("limited by:")]


def test_demo_smoke_prints_the_comparison(capsys):
    """The CI smoke size: PASS, the traffic check, the time breakdown and the ratio."""
    from distal.cli import main

    assert main(["demo", "--n", "64", "--grid", "2x2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for expected in ("PASS", "measured == predicted: yes", "distal's time:", "ratio distal/numpy"):
        assert expected in out


def test_only_a_missing_optional_package_skips_a_block():
    """A block without an extra's package is skipped (the test install may lack it); any
    other error, a missing distal module included, fails it."""
    assert _missing_extra(ModuleNotFoundError("no dask", name="dask")) == "dask"
    wrapped = RuntimeError("pictures need matplotlib")
    wrapped.__cause__ = ModuleNotFoundError("no", name="matplotlib.figure")
    assert _missing_extra(wrapped) == "matplotlib.figure"
    assert _missing_extra(ModuleNotFoundError("no", name="distal.nothing")) is None
    assert _missing_extra(NameError("n")) is None


def test_readme_cannon_demo_copies_nothing_it_fetches():
    """README: in `distal demo --grid 2x2 --algorithm cannon` the copies between the
    processors' stores are a negligible share of the run (it once said a quarter): every
    fetch of the plan is one whole block of an input, which the local runtime reads where it
    lies (``borrow``), so no words are copied though every message is counted."""
    from distal.cli import gemm_kernel
    from distal.runtime.local import LocalRuntime

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "a quarter of the run" not in readme
    assert "under 1 % of the run" in readme
    kernel = gemm_kernel(64, (2, 2), "cannon")
    assert sum(kernel.stats().words_received) > 0  # messages there are
    rt = LocalRuntime(kernel.plan, kernel.kernels, kernel.dtypes)
    fetches = [f for step in rt.prep.fetches for proc in step for f in proc]
    fetched = [f for f in fetches if f[6]]  # (the others are the processor's own blocks)
    assert fetched
    assert all(f[8] for f in fetched)  # borrow: read in place, nothing copied
