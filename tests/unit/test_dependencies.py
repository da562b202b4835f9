"""The runtime dependencies in pyproject.toml are exactly what execserver/ imports.

A package the daemon does not import must not be installed with it (it would
ship in the image and widen the attack surface for nothing), and a package it
does import must be declared rather than arrive by chance through another one.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "execserver"


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = set()
    for requirement in project["dependencies"]:
        match = re.match(r"[A-Za-z0-9._-]+", requirement)
        assert match, requirement
        names.add(_normalise(match.group(0)))
    return names


def _normalise(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> set[str]:
    """Top-level module names imported outside ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if _is_type_checking_block(node):
            assert isinstance(node, ast.If)
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        pending.extend(ast.iter_child_nodes(node))
    return found


def _third_party_imports() -> set[str]:
    modules: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        modules |= _runtime_imports(ast.parse(path.read_text(), filename=str(path)))
    return {
        m
        for m in modules
        if m not in sys.stdlib_module_names and m not in {"execserver", "__future__"}
    }


def _distributions_of(modules: set[str]) -> dict[str, set[str]]:
    """Imported module -> the installed distributions that provide it."""
    provided = packages_distributions()
    return {m: {_normalise(d) for d in provided.get(m, [])} for m in modules}


def test_every_runtime_dependency_is_imported_by_execserver() -> None:
    imported = set().union(*_distributions_of(_third_party_imports()).values())
    unused = _declared() - imported
    assert not unused, f"runtime dependencies execserver/ never imports: {sorted(unused)}"


def test_every_third_party_import_of_execserver_is_declared() -> None:
    declared = _declared()
    undeclared = {
        module: sorted(dists)
        for module, dists in _distributions_of(_third_party_imports()).items()
        if not dists & declared
    }
    assert not undeclared, f"imported by execserver/ but not declared: {undeclared}"


def test_the_import_walk_sees_runtime_imports_and_ignores_type_checking_ones() -> None:
    tree = ast.parse(
        "import a.b\nfrom c import d\nfrom . import e\n"
        "if TYPE_CHECKING:\n    import f\nelse:\n    import g\n"
        "def h():\n    import i\n"
    )
    assert _runtime_imports(tree) == {"a", "c", "g", "i"}
