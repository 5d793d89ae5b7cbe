"""Nothing in the pool's code can turn bytes into code: no pickle, marshal, eval or exec,
no ``np.load`` (which may unpickle). ruff bans the imports (``src/distal/runtime/pool/
ruff.toml``); this test holds the line for calls ruff does not see."""

from __future__ import annotations

import re
from pathlib import Path

import distal

POOL = Path(distal.__file__).parent / "runtime" / "pool"
CLI = Path(distal.__file__).parent / "cli_pool.py"
FORBIDDEN = re.compile(
    r"\b(import\s+(c?pickle|cloudpickle|dill|marshal|shelve)|from\s+(c?pickle|cloudpickle|dill"
    r"|marshal|shelve)\s+import|pickle\.loads?|marshal\.loads?|(?<![.\w])eval\(|(?<![.\w])exec\("
    r"|np\.load\(|numpy\.load\(|allow_pickle\s*=\s*True|__import__\(|importlib\.import_module\()"
)


def test_the_pool_code_has_no_way_to_run_bytes() -> None:
    files = [*sorted(POOL.glob("*.py")), CLI]
    assert len(files) >= 10
    bad = []
    for f in files:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if FORBIDDEN.search(code):
                bad.append(f"{f.name}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_the_pattern_catches_what_it_must() -> None:
    for line in (
        "import pickle",
        "from marshal import loads",
        "x = pickle.loads(b)",
        "eval(s)",
        "np.load(f, allow_pickle=True)",
        "import cloudpickle",
    ):
        assert FORBIDDEN.search(line), line
    for line in ("np.frombuffer(b)", "self.evaluate(x)", "x.exec_time"):
        assert not FORBIDDEN.search(line), line


def test_ruff_bans_the_imports_there() -> None:
    text = (POOL / "ruff.toml").read_text()
    for mod in ("pickle", "cloudpickle", "marshal", "dill", "numpy.load"):
        assert f'"{mod}".msg' in text
