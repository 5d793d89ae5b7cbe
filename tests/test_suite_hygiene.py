"""The suite collects as one: pytest imports test folders' modules by their base names, so a
helper imported as ``conftest`` or two test files with one name shadow each other and the
whole run stops at collection (each folder alone still passes)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _modules() -> list[Path]:
    return [p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts]


def test_no_test_module_imports_a_conftest_by_name() -> None:
    offenders = [
        str(p.relative_to(TESTS))
        for p in _modules()
        if any(
            line.startswith(("from conftest import", "import conftest"))
            for line in p.read_text().splitlines()
        )
    ]
    assert offenders == [], f"import helpers from a module with a name of its own: {offenders}"


def test_imported_module_names_are_unique_across_folders() -> None:
    names = Counter(
        p.name for p in _modules() if p.name != "conftest.py" and not p.name.startswith("_")
    )
    assert [n for n, c in names.items() if c > 1] == []
