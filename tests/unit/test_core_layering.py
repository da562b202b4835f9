"""Dependencies point one way: nothing in execserver.core imports
execserver.server: the core is a client of executors, never part of one."""

from __future__ import annotations

import ast
from pathlib import Path

import execserver.core

CORE = Path(execserver.core.__file__).parent
SERVER = "execserver.server"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_never_imports_the_server() -> None:
    offenders = {
        f"{path.relative_to(CORE)}: {name}"
        for path in CORE.rglob("*.py")
        for name in _imports(path)
        if name == SERVER or name.startswith(SERVER + ".")
    }
    assert offenders == set()


def test_the_layering_check_sees_imports() -> None:
    imports = _imports(CORE / "orchestrator.py")
    assert "execserver.client.errors" in imports
