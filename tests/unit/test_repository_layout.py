"""Where code may reach: the benchmarks import nothing from tests/ (both start
servers through scripts/servers.py), and every module pytest collects under
tests/ is a test module, never a helper (helpers live in tests/support/)."""

from __future__ import annotations

import ast

from tests.support.imports import REPOSITORY_ROOT, import_edges, syntax_tree, within


def test_benchmarks_and_scripts_import_nothing_from_tests() -> None:
    offenders = {
        f"{edge.where()}: {edge.target}"
        for folder in ("benchmarks", "scripts", "execserver")
        for edge in import_edges(REPOSITORY_ROOT / folder)
        if within(edge.target, "tests")
    }
    assert not offenders, sorted(offenders)


def test_every_collected_test_module_defines_tests() -> None:
    helpers = []
    for path in (REPOSITORY_ROOT / "tests").rglob("test_*.py"):
        tree = syntax_tree(path)
        defines_tests = any(
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.name.startswith(("test", "Test"))
            for node in tree.body
        )
        if not defines_tests:
            helpers.append(str(path.relative_to(REPOSITORY_ROOT)))
    assert not helpers, f"helper modules named like tests (move them to tests/support/): {helpers}"
