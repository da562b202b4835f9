"""Where code may reach: the benchmarks import nothing from tests/ (both start
servers through scripts/servers.py), and every module pytest collects under
tests/ is a test module, never a helper (helpers live in tests/support/)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_benchmarks_and_scripts_import_nothing_from_tests() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for folder in ("benchmarks", "scripts", "execserver")
        for path in (ROOT / folder).rglob("*.py")
        for name in imported_modules(path)
        if name == "tests" or name.startswith("tests.")
    }
    assert not offenders, sorted(offenders)


def test_every_collected_test_module_defines_tests() -> None:
    helpers = []
    for path in (ROOT / "tests").rglob("test_*.py"):
        tree = ast.parse(path.read_text(), str(path))
        defines_tests = any(
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.name.startswith(("test", "Test"))
            for node in tree.body
        )
        if not defines_tests:
            helpers.append(str(path.relative_to(ROOT)))
    assert not helpers, f"helper modules named like tests (move them to tests/support/): {helpers}"
